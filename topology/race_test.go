//go:build race

package topology

// raceEnabled: the race detector slows code 5-20x, so time bounds are off.
const raceEnabled = true
