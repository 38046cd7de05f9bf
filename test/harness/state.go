//go:build linux

package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

var (
	// ErrStart wraps every failure to bring a test bed up.
	ErrStart = errors.New("harness: start")
	// ErrTeardown wraps every step of a teardown that did not complete.
	ErrTeardown = errors.New("harness: teardown")
)

// StateFile is the record of a test bed, inside its directory.
const StateFile = "state.json"

// State is everything a test bed started or created, saved before each
// step so that a teardown from another process undoes exactly that.
type State struct {
	Dir        string         `json:"dir"`
	Kubeconfig string         `json:"kubeconfig"`
	Server     string         `json:"server"`
	Ports      map[string]int `json:"ports"`
	// Procs of the control plane, in start order (stopped in reverse).
	Procs []ProcRecord `json:"procs"`
	Node  *NodeState   `json:"node,omitempty"`

	mu       sync.Mutex // one teardown at a time (t.Cleanup vs signal)
	tornDown bool
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("harness: encode state: %w", err)
	}
	tmp := filepath.Join(s.Dir, "."+StateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("harness: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, StateFile)); err != nil {
		return fmt.Errorf("harness: rename %s: %w", tmp, err)
	}
	return nil
}

// LoadState reads the record of the test bed in dir.
func LoadState(dir string) (*State, error) {
	p := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("harness: read %s: %w", p, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("harness: parse %s: %w", p, err)
	}
	if s.Dir != dir && filepath.Clean(s.Dir) != filepath.Clean(dir) {
		return nil, fmt.Errorf("harness: %s records dir %q, not %q: refusing to act on it", p, s.Dir, dir)
	}
	return &s, nil
}
