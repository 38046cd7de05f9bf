//go:build linux

package harness

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsAvoidEphemeralRange: ports handed to processes started later
// must not come from the range the kernel gives outgoing connections.
func TestFreePortsAvoidEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low-portFloor < 1000 {
		t.Skipf("ephemeral range starts at %d: no room below it on this host", low)
	}
	ports, err := freePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < portFloor || p >= low {
			t.Errorf("port %d outside [%d, %d)", p, portFloor, low)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d not free after release: %v", p, err)
			continue
		}
		l.Close()
	}
}
