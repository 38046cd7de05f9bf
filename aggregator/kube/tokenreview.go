package kube

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// TokenReviewer authenticates agents through the API server's
// TokenReview: it reviews the agent's projected service-account token
// (audience cgpilot-aggregator) and takes the node from the token's
// authentication.kubernetes.io/node-name extra, which the API server sets
// in tokens bound to a pod on a node. Reviews are cached by the token's
// SHA-256, acceptances until the token's own expiry (at most MaxTTL),
// refusals briefly, so a node's report costs one review per token
// rotation, not one per minute, and a flood of bad tokens one review per
// distinct token and refusal TTL.
type TokenReviewer struct {
	Reviews authnclient.TokenReviewInterface
	// Audiences the token must be issued for (default [auth.Audience]).
	Audiences []string
	// Users, when set, are the only usernames accepted (e.g.
	// system:serviceaccount:cgpilot:cgpilot-agent).
	Users []string
	// MaxTTL bounds how long a positive review is trusted (default 5 min):
	// a deleted pod's token stops working within it. RefusalTTL is how
	// long a refusal is remembered (default 30 s).
	MaxTTL, RefusalTTL time.Duration
	// MaxEntries bounds the cache (default 100,000).
	MaxEntries int
	// Timeout bounds a review (default 5 s).
	Timeout time.Duration
	Now     func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	id      auth.Identity
	err     error
	expires time.Time
}

// Authenticate reviews token (or answers from the cache).
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (auth.Identity, error) {
	if token == "" {
		return auth.Identity{}, fmt.Errorf("%w: no bearer token", auth.ErrUnauthenticated)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	sum := sha256.Sum256([]byte(token))
	r.mu.Lock()
	if c, ok := r.cache[sum]; ok && now().Before(c.expires) {
		r.mu.Unlock()
		return c.id, c.err
	}
	r.mu.Unlock()

	id, err := r.review(ctx, token)
	if errors.Is(err, auth.ErrUnavailable) {
		return id, err // not cached: the next report tries again
	}
	ttl := r.MaxTTL
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	if err != nil {
		ttl = r.RefusalTTL
		if ttl == 0 {
			ttl = 30 * time.Second
		}
	} else if exp, ok := tokenExpiry(token); ok && exp.Sub(now()) < ttl {
		ttl = exp.Sub(now())
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[[32]byte]cached{}
	}
	limit := r.MaxEntries
	if limit == 0 {
		limit = 100_000
	}
	if len(r.cache) >= limit {
		t := now()
		for k, c := range r.cache {
			if !t.Before(c.expires) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache { // still full: drop any quarter (map order)
			if len(r.cache) < limit*3/4 {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[sum] = cached{id: id, err: err, expires: now().Add(ttl)}
	r.mu.Unlock()
	return id, err
}

func (r *TokenReviewer) review(ctx context.Context, token string) (auth.Identity, error) {
	aud := r.Audiences
	if len(aud) == 0 {
		aud = []string{auth.Audience}
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := r.Reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: aud}}, metav1.CreateOptions{})
	if err != nil {
		return auth.Identity{}, fmt.Errorf("%w: %v", auth.ErrUnavailable, err)
	}
	st := tr.Status
	if !st.Authenticated {
		reason := st.Error
		if reason == "" {
			reason = "token not accepted"
		}
		return auth.Identity{}, fmt.Errorf("%w: %s", auth.ErrUnauthenticated, reason)
	}
	if !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(aud, a) }) {
		return auth.Identity{}, fmt.Errorf("%w: token audiences %v, want one of %v", auth.ErrUnauthenticated, st.Audiences, aud)
	}
	if len(r.Users) > 0 && !slices.Contains(r.Users, st.User.Username) {
		return auth.Identity{}, fmt.Errorf("%w: user %q may not report", auth.ErrUnauthenticated, st.User.Username)
	}
	id := auth.Identity{User: st.User.Username}
	if v := st.User.Extra[auth.ExtraNodeName]; len(v) == 1 {
		id.Node = v[0]
	}
	if v := st.User.Extra[auth.ExtraPodName]; len(v) == 1 {
		id.Pod = v[0]
	}
	if id.Node == "" {
		return auth.Identity{}, fmt.Errorf("%w: token of %q names no node (request a token bound to the agent's pod)", auth.ErrUnauthenticated, id.User)
	}
	return id, nil
}

// tokenExpiry reads a JWT's exp claim without verifying it (the review
// did); only the cache's lifetime depends on it.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}
