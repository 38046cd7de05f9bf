package atomicfile

import (
	"errors"
	"strings"
	"testing"
)

var errTestKind = errors.New("test kind")

func TestEnvelope(t *testing.T) {
	sealed := string(Seal(3, []byte(`{"a":[1,2]}`)))
	for _, tc := range []struct {
		name, file string
		max        int
		want       string // "" verifies; else in the error
	}{
		{"sealed", sealed, 1 << 10, ""},
		{"a changed payload", strings.Replace(sealed, "[1,2]", "[1,3]", 1), 1 << 10, "checksum"},
		{"trailing data", sealed + "{}", 1 << 10, "trailing data"},
		{"an unknown field", strings.Replace(sealed, `"version"`, `"extra":1,"version"`, 1), 1 << 10, "unknown field"},
		{"too large", sealed, 10, "at most 10"},
		{"empty", "", 1 << 10, "envelope: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := OpenEnvelope("f", []byte(tc.file), tc.max, errTestKind)
			if err == nil {
				err = env.Verify("f", errTestKind)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("sealed file refused: %v", err)
			case tc.want == "":
				if env.Version != 3 || string(env.Data) != `{"a":[1,2]}` {
					t.Fatalf("decoded %+v", env)
				}
			case err == nil || !errors.Is(err, errTestKind) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want one of kind %v naming %q", err, errTestKind, tc.want)
			}
			var ce *CorruptError
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("%v is not a *CorruptError", err)
			}
		})
	}
}
