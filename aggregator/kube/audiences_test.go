package kube

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/rest"
)

func TestTokenAudiences(t *testing.T) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(jwt(`{"aud":["https://kubernetes.default.svc.cluster.local","k3s"]}`)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rc   *rest.Config
		want []string
	}{
		{"one audience", &rest.Config{BearerToken: jwt(`{"aud":"https://kubernetes.default.svc"}`)}, []string{"https://kubernetes.default.svc"}},
		{"a list, from the file", &rest.Config{BearerTokenFile: file}, []string{"https://kubernetes.default.svc.cluster.local", "k3s"}},
		{"no token (a client certificate)", &rest.Config{}, nil},
		{"not a JWT", &rest.Config{BearerToken: "static-token"}, nil},
		{"no aud", &rest.Config{BearerToken: jwt(`{"sub":"x"}`)}, nil},
		{"junk payload", &rest.Config{BearerToken: "a.!!!.c"}, nil},
		{"missing file", &rest.Config{BearerTokenFile: filepath.Join(t.TempDir(), "none")}, nil},
		{"nil", nil, nil},
	} {
		if got := TokenAudiences(tc.rc); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
