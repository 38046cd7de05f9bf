package report

import (
	"slices"
	"testing"
	"time"
)

// TestFillTiming: zeros take the defaults, grace and staleAfter from the
// period as filled; set values and nil ones are left alone.
func TestFillTiming(t *testing.T) {
	var p, g, s time.Duration
	FillTiming(&p, &g, &s)
	if p != DefaultPeriod || g != 2*DefaultPeriod || s != 3*DefaultPeriod {
		t.Errorf("zeros: %v %v %v", p, g, s)
	}
	p, g, s = 10*time.Second, 0, time.Hour
	FillTiming(&p, &g, &s)
	if p != 10*time.Second || g != 20*time.Second || s != time.Hour {
		t.Errorf("set: %v %v %v", p, g, s)
	}
	p = 0
	FillTiming(&p, nil, nil)
	if p != DefaultPeriod {
		t.Errorf("nil: period %v", p)
	}
}

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
