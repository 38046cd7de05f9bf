package logging

import "testing"

// TestNew: both levels build, and debug enables V(1) lines.
func TestNew(t *testing.T) {
	for _, debug := range []bool{false, true} {
		log, flush, err := New(debug)
		if err != nil {
			t.Fatal(err)
		}
		if got := log.V(1).Enabled(); got != debug {
			t.Errorf("debug %v: V(1) enabled = %v", debug, got)
		}
		flush()
	}
}
