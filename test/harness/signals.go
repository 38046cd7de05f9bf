//go:build linux

package harness

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// live test beds of this process, torn down on SIGINT/SIGTERM: t.Cleanup
// does not run when the test binary is interrupted.
var (
	liveMu    sync.Mutex
	live      = map[*State]bool{}
	watchOnce sync.Once
)

func register(s *State) {
	watchOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			fmt.Fprintf(os.Stderr, "harness: %v: tearing down test beds\n", sig)
			liveMu.Lock()
			for s := range live {
				if err := teardown(s); err != nil {
					fmt.Fprintf(os.Stderr, "harness: %v\n", err)
				}
			}
			liveMu.Unlock()
			os.Exit(2)
		}()
	})
	liveMu.Lock()
	live[s] = true
	liveMu.Unlock()
}

func unregister(s *State) {
	liveMu.Lock()
	delete(live, s)
	liveMu.Unlock()
}
