package daemon

import (
	"bytes"
	"context"
	"testing"

	"github.com/go-logr/logr"
)

// TestRun: serve runs with a live context and a logger, and its exit
// code is Run's.
func TestRun(t *testing.T) {
	var stderr bytes.Buffer
	code := Run("test", true, &stderr, func(ctx context.Context, log logr.Logger) int {
		if ctx.Err() != nil {
			t.Errorf("context done before serve: %v", ctx.Err())
		}
		if !log.V(1).Enabled() {
			t.Error("debug logger without V(1)")
		}
		return 3
	})
	if code != 3 || stderr.Len() != 0 {
		t.Errorf("Run = %d, stderr %q; want 3 and nothing", code, stderr.String())
	}
}
