package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStatic(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(f, []byte("# load test\nt1,node-1\n\nt2,node-2\n"), 0o600)
	s, err := LoadStatic(f)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Authenticate(context.Background(), "t2"); err != nil || id.Node != "node-2" {
		t.Errorf("t2: %+v %v", id, err)
	}
	if _, err := s.Authenticate(context.Background(), "t3"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unknown token: %v", err)
	}
	os.WriteFile(f, []byte("no-comma\n"), 0o600)
	if _, err := LoadStatic(f); err == nil {
		t.Error("a line without a node loaded")
	}
}
