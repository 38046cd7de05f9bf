//go:build linux

package harness

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Teardown undoes the test bed recorded in dir (a node first, then the
// control plane) and removes dir. It is what `testbed down` runs; in a test,
// ControlPlane.Stop does the same.
func Teardown(dir string) error {
	s, err := LoadState(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTeardown, err)
	}
	return teardown(s)
}

func teardown(s *State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tornDown {
		return nil
	}
	var errs []error
	if err := teardownNode(s); err != nil {
		errs = append(errs, err)
	}
	for i := len(s.Procs) - 1; i >= 0; i-- {
		if err := s.Procs[i].Stop(20 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%w: %v", ErrTeardown, err))
		}
	}
	// Never RemoveAll through a mount: it would delete the mounted
	// file system's content.
	if mountedUnder()(s.Dir) {
		errs = append(errs, fmt.Errorf("%w: mounts remain under %s; leaving it", ErrTeardown, s.Dir))
	} else if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, fmt.Errorf("%w: remove %s: %v", ErrTeardown, s.Dir, err))
	}
	if len(errs) == 0 {
		s.tornDown = true
	}
	return errors.Join(errs...)
}
