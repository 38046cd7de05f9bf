package kube

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// TokenReviewer authenticates callers through the API server's
// TokenReview. For agents it reviews the projected service-account token
// (audience cgpilot-aggregator) and takes the node from the token's
// authentication.kubernetes.io/node-name extra, which the API server sets
// in tokens bound to a pod on a node; for the dashboard's users
// (AnyNode) it returns the user with its groups for authorization.
//
// What reaches the API server is bounded three ways. A token that is not
// a JWT for one of Audiences, or has expired, is refused before any review
// (auth.CheckJWT). Reviews are cached by the token's SHA-256, acceptances
// until the token's own expiry (at most MaxTTL), refusals briefly, so a
// node's report costs one review per token rotation, not one per minute.
// And reviews of tokens not in the cache go through Limiter: per caller
// (auth.WithSource) and in all, so a spray of well-formed junk tokens from
// one client is refused with auth.ErrThrottled after its own few reviews
// while agents elsewhere keep theirs.
type TokenReviewer struct {
	Reviews authnclient.TokenReviewInterface
	// Audiences the token must be issued for (default [auth.Audience]).
	Audiences []string
	// Users, when set, are the only usernames accepted (e.g.
	// system:serviceaccount:cgpilot:cgpilot-agent).
	Users []string
	// AnyNode accepts tokens that name no node (users); otherwise a token
	// must be bound to a pod on a node (agents).
	AnyNode bool
	// Limiter, when set, bounds the reviews of tokens not in the cache.
	Limiter *auth.Limiter
	// Observe, when set, is called with each answer's source: cache,
	// precheck (refused before review), throttled, reviewed, unavailable.
	Observe func(result string)
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
	observe := func(result string) {
		if r.Observe != nil {
			r.Observe(result)
		}
	}
	if token == "" {
		observe("precheck")
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
		observe("cache")
		return c.id, c.err
	}
	r.mu.Unlock()

	claims, err := auth.CheckJWT(token, r.audiences(), now())
	if err != nil {
		observe("precheck")
		return auth.Identity{}, err
	}
	if r.Limiter != nil && !r.Limiter.Allow(auth.SourceOf(ctx)) {
		observe("throttled")
		return auth.Identity{}, auth.ErrThrottled
	}
	id, err := r.review(ctx, token)
	if errors.Is(err, auth.ErrUnavailable) {
		observe("unavailable")
		return id, err // not cached: the next report tries again
	}
	observe("reviewed")
	ttl := r.MaxTTL
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	if err != nil {
		ttl = r.RefusalTTL
		if ttl == 0 {
			ttl = 30 * time.Second
		}
	} else if left := claims.Expiry.Sub(now()); left < ttl {
		ttl = left
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

func (r *TokenReviewer) audiences() []string {
	if len(r.Audiences) == 0 {
		return []string{auth.Audience}
	}
	return r.Audiences
}

func (r *TokenReviewer) review(ctx context.Context, token string) (auth.Identity, error) {
	aud := r.audiences()
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
	id := auth.Identity{User: st.User.Username, UID: st.User.UID, Groups: st.User.Groups}
	if len(st.User.Extra) > 0 {
		id.Extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			id.Extra[k] = v
		}
	}
	if v := st.User.Extra[auth.ExtraNodeName]; len(v) == 1 {
		id.Node = v[0]
	}
	if v := st.User.Extra[auth.ExtraPodName]; len(v) == 1 {
		id.Pod = v[0]
	}
	if id.Node == "" && !r.AnyNode {
		return auth.Identity{}, fmt.Errorf("%w: token of %q names no node (request a token bound to the agent's pod)", auth.ErrUnauthenticated, id.User)
	}
	return id, nil
}
