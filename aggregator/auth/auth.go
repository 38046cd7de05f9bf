// Package auth is how the aggregator knows who reports: an Authenticator
// turns a bearer token into an Identity naming the node the token was
// issued for. The production Authenticator is kube.TokenReviewer (the API
// server reviews the agent's projected service-account token); Static maps
// tokens to nodes from a file, for the load generator and tests without an
// API server, and is never the default.
//
// Errors: ErrUnauthenticated (401) for a token that is not accepted, or is
// accepted for another user, audience or no node; ErrUnavailable (503)
// when the check itself failed.
//
// It imports the standard library only, so the agent API (package ingest)
// depends on no client-go.
package auth

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Errors of Authenticate.
var (
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	ErrUnavailable     = errors.New("auth: token review unavailable")
)

// Identity is an authenticated agent.
type Identity struct {
	User string
	// Node is the node the token was issued for.
	Node string
	// Pod is the pod the token is bound to, when it says.
	Pod string
}

// Authenticator turns a bearer token into an Identity.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Token-review extras the API server sets in tokens bound to a pod.
const (
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	ExtraPodName  = "authentication.kubernetes.io/pod-name"
)

// Audience is the audience agents request their token for.
const Audience = "cgpilot-aggregator"

// Static maps fixed tokens to nodes (the load generator; tests).
type Static map[string]Identity

// LoadStatic reads "token,node" lines (# comments and blank lines
// ignored).
func LoadStatic(path string) (Static, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: static tokens: %w", err)
	}
	defer f.Close()
	s := Static{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		tok, node, ok := strings.Cut(l, ",")
		if !ok || tok == "" || node == "" {
			return nil, fmt.Errorf("auth: static tokens %s:%d: want token,node", path, line)
		}
		s[tok] = Identity{User: "static:" + node, Node: node}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: static tokens %s: %w", path, err)
	}
	return s, nil
}

// Authenticate looks the token up.
func (s Static) Authenticate(_ context.Context, token string) (Identity, error) {
	if id, ok := s[token]; ok {
		return id, nil
	}
	return Identity{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}
