package cpulist

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

func TestParseValid(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"0", "0"},
		{"0-3", "0-3"},
		{"0-3,8,10-11", "0-3,8,10-11"},
		{"3-3", "3"},
		{"8,0-3", "0-3,8"},       // unordered
		{"0-5,2-7", "0-7"},       // overlapping
		{"0,0,0", "0"},           // repeated
		{"007", "7"},             // leading zeros, as the kernel reads them
		{"63-64", "63-64"},       // across a bitset word
		{"0-8191", "0-8191"},     // every possible CPU
		{"8191", "8191"},         // the largest id
		{"60-130,1", "1,60-130"}, // a range over three words
		{"4095-4096,127-128", "127-128,4095-4096"},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, got, tc.want)
		}
		// The same set as k8s.io/utils/cpuset's own parser, where it applies.
		if want, err := cpuset.Parse(tc.in); err == nil && !want.Equals(got) {
			t.Errorf("Parse(%q) = %s, cpuset.Parse = %s", tc.in, got, want)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		group string
		in    string
		err   error
	}{
		{"non-numeric", "a", ErrSyntax},
		{"non-numeric", "1-b", ErrSyntax},
		{"non-numeric", "0x1", ErrSyntax},
		{"sign", "+1", ErrSyntax},
		{"sign", "-1", ErrSyntax},
		{"space", " 1", ErrSyntax},
		{"space", "1 ", ErrSyntax},
		{"space", "0, 1", ErrSyntax},
		{"newline", "0-3\n", ErrSyntax},
		{"empty element", ",", ErrSyntax},
		{"empty element", "1,", ErrSyntax},
		{"empty element", ",1", ErrSyntax},
		{"empty element", "1,,2", ErrSyntax},
		{"incomplete range", "1-", ErrSyntax},
		{"incomplete range", "-", ErrSyntax},
		{"double range", "1-2-3", ErrSyntax},
		{"reversed range", "3-1", ErrSyntax},
		{"id bound", "8192", ErrBounds},
		{"id bound", "0-8192", ErrBounds},
		{"id bound", "99999999999999999999999", ErrBounds},
		{"id bound", "0-2000000000", ErrBounds},
		{"length bound", strings.Repeat("0-8191,", MaxLen/7+1) + "0", ErrBounds},
		{"element bound", strings.Repeat("1,", MaxElements) + "1", ErrBounds},
	} {
		got, err := Parse(tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: Parse(%.40q) = %v, %v; want %v", tc.group, tc.in, got, err, tc.err)
		}
		if err == nil || !got.IsEmpty() {
			t.Errorf("%s: Parse(%.40q) returned %s with the error", tc.group, tc.in, got)
		}
	}
}

// allocated returns the bytes allocated by f on this goroutine (the test
// runs nothing else meanwhile).
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestHostileInputIsCheap: the input that made the agent allocate
// gigabytes (256 KiB of repeated full ranges, the API server's annotation
// limit) fails at once; the largest input under the bounds parses within
// a bounded cost.
func TestHostileInputIsCheap(t *testing.T) {
	hostile := strings.Repeat("0-8191,", (256<<10)/7)
	var err error
	if n := allocated(func() { _, err = Parse(hostile) }); n > 1<<20 {
		t.Errorf("256 KiB input allocated %d bytes, want < 1 MiB", n)
	}
	if !errors.Is(err, ErrBounds) {
		t.Errorf("256 KiB input: %v, want ErrBounds", err)
	}
	// Just under the length bound: every range repeated, all accepted.
	big := strings.Repeat("0-8191,", MaxLen/7-1) + "0"
	if n := allocated(func() { _, err = Parse(big) }); n > 1<<20 {
		t.Errorf("%d-byte input allocated %d bytes, want < 1 MiB", len(big), n)
	}
	if err != nil {
		t.Errorf("%d-byte input: %v", len(big), err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,8", "8191", "0-8191,0-8191", "3-1", "1,,2", strings.Repeat("0-8191,", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The bound is the allocation, not a wall-clock time (-race on a
		// shared machine); the benchmark measures the real cost.
		var got cpuset.CPUSet
		var err error
		n := allocated(func() { got, err = Parse(s) })
		if n > 1<<20 {
			t.Errorf("Parse(%d bytes) allocated %d bytes", len(s), n)
		}
		if err != nil {
			if !got.IsEmpty() {
				t.Errorf("error %v with a non-empty set", err)
			}
			return
		}
		// A valid list round-trips through the canonical form.
		again, err := Parse(got.String())
		if err != nil || !again.Equals(got) {
			t.Errorf("Parse(%q) = %s, reparse = %s, %v", s, got, again, err)
		}
		for _, id := range got.UnsortedList() {
			if id < 0 || id > MaxID {
				t.Errorf("id %d out of range", id)
			}
		}
	})
}

// BenchmarkParse compares with cpuset.Parse on a typical 64-CPU list and on
// the hostile input (cpuset.Parse is not run on that one: it would take
// gigabytes).
func BenchmarkParse(b *testing.B) {
	typical := "0-15,32-47,64-79,96-111"
	b.Run("typical/cpulist", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = Parse(typical)
		}
	})
	b.Run("typical/cpuset.Parse", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = cpuset.Parse(typical)
		}
	})
	hostile := strings.Repeat("0-8191,", (256<<10)/7)
	b.Run("hostile-256KiB/cpulist", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = Parse(hostile)
		}
	})
	bounded := strings.Repeat("0-8191,", MaxLen/7-1) + "0"
	b.Run("max-length/cpulist", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = Parse(bounded)
		}
	})
}
