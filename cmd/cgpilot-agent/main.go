// Command cgpilot-agent is the cgpilot node agent (run as a DaemonSet).
//
// It only turns flags into a configuration and calls the agent package.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cgpilot-agent: not implemented yet")
	os.Exit(1)
}
