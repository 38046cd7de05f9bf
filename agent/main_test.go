//go:build linux

package agent

import (
	"testing"

	"github.com/cgpilot/cgpilot/test/cgtest"
)

// TestMain lets the kernel tests' child processes (cgtest.Start) run.
func TestMain(m *testing.M) { cgtest.Main(m) }
