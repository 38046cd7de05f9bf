// Package daemon is how cgpilot's long-running commands (cgpilot-agent,
// cgpilot-aggregator) start and stop, alike: the logger of package
// logging, flushed at exit, and a context that SIGINT or SIGTERM (the
// kubelet's stop) cancels. The commands keep their flags and their exit
// codes for their own errors.
//
// It imports logr, os/signal and cmd/internal/logging only.
package daemon

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/cgpilot/cgpilot/cmd/internal/logging"
)

// Run builds the logger (debug: also V(1) lines) and returns serve's exit
// code, serve's context cancelled on SIGINT or SIGTERM and the log flushed
// after it. A logger that cannot be built is exit code 1, said on stderr
// as "name: logger: error".
func Run(name string, debug bool, stderr io.Writer, serve func(ctx context.Context, log logr.Logger) int) int {
	log, flush, err := logging.New(debug)
	if err != nil {
		fmt.Fprintln(stderr, name+": logger:", err)
		return 1
	}
	defer flush()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, log)
}
