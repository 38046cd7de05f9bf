// Command pausetar writes the test bed's pause image archive (images.Pause)
// to the path given, for test/v2node/run.sh: the cgroup v2 VM has no go
// command to build it at node start.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cgpilot/cgpilot/test/images"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pausetar OUT.tar")
		os.Exit(2)
	}
	if err := images.Pause(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "pausetar:", err)
		os.Exit(1)
	}
}
