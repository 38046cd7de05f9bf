package atomicfile

import (
	"errors"
	"fmt"
	"testing"
)

func TestCorruptError(t *testing.T) {
	errMine := errors.New("mine: bad checkpoint")
	errOther := errors.New("other")
	for _, tc := range []struct {
		err  *CorruptError
		want string
	}{
		{&CorruptError{Path: "/s/cp", Want: "sha256:aa", Got: "sha256:bb", Kind: errMine}, "mine: bad checkpoint: /s/cp: checksum sha256:aa, computed sha256:bb"},
		{&CorruptError{Path: "/s/cp", Reason: "truncated", Kind: errMine}, "mine: bad checkpoint: /s/cp: truncated"},
		{&CorruptError{Path: "/s/cp", Reason: "truncated"}, "corrupt file: /s/cp: truncated"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		wrapped := fmt.Errorf("load: %w", tc.err)
		var ce *CorruptError
		if !errors.As(wrapped, &ce) || ce != tc.err {
			t.Errorf("errors.As lost the *CorruptError of %q", wrapped)
		}
		if errors.Is(wrapped, errMine) != (tc.err.Kind == errMine) || errors.Is(wrapped, errOther) {
			t.Errorf("errors.Is(%q, Kind) does not follow Kind %v", wrapped, tc.err.Kind)
		}
	}
}
