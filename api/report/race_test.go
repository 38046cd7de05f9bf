//go:build race

package report

// raceEnabled: the race detector's sync.Pool drops items at random, so
// allocation bounds that rely on encoding/json's pooled buffers are off.
const raceEnabled = true
