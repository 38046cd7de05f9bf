//go:build linux

package cgroup

import (
	"errors"
	"strings"
	"testing"
)

// TestReadValueBounded: a value file is read whole up to maxValueFile
// bytes; a longer one is refused as ErrRead, not read into memory.
func TestReadValueBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
		err  bool
	}{
		{name: "value and newline", in: "max 100000\n", want: "max 100000"},
		{name: "empty", in: "", want: ""},
		{name: "exactly the bound", in: strings.Repeat("1", maxValueFile), want: strings.Repeat("1", maxValueFile)},
		{name: "one byte over", in: strings.Repeat("1", maxValueFile+1), err: true},
		{name: "far over", in: strings.Repeat("0-3,", 1<<20), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readValue(strings.NewReader(tc.in), "/sys/fs/cgroup/x/cpu.max")
			if tc.err {
				var fe *FileError
				if !errors.Is(err, ErrRead) || !errors.As(err, &fe) || fe.Path != "/sys/fs/cgroup/x/cpu.max" || got != "" {
					t.Fatalf("got %d bytes, %v; want an ErrRead naming the file", len(got), err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d bytes %.20q, %v; want %.20q", len(got), got, err, tc.want)
			}
		})
	}
}
