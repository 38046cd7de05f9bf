package report

import (
	"slices"
	"testing"
)

// TestKeepNewest: below the bound events are appended; at the bound the
// oldest makes room and is counted.
func TestKeepNewest(t *testing.T) {
	var list []int
	dropped := 0
	for i := 1; i <= 5; i++ {
		list = keepNewest(list, i, 3, &dropped)
	}
	if !slices.Equal(list, []int{3, 4, 5}) || dropped != 2 {
		t.Errorf("list %v, dropped %d; want [3 4 5] and 2", list, dropped)
	}
}
