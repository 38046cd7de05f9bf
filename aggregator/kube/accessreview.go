package kube

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// AccessReviewer authorizes the dashboard's users with the API server's
// SubjectAccessReview: a user may read what RBAC lets it read (see
// package web for which permission guards which view). Answers are cached
// per user, groups and attributes, allowed for AllowTTL and denied for
// DenyTTL, so a page of six requests costs one review, not six; the cache
// is bounded.
type AccessReviewer struct {
	Reviews authzclient.SubjectAccessReviewInterface
	// AllowTTL (default 30 s) and DenyTTL (default 10 s) bound how long
	// an answer is trusted: a removed RoleBinding takes effect within
	// AllowTTL.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the cache (default 10,000).
	MaxEntries int
	// Timeout bounds a review (default 5 s).
	Timeout time.Duration
	Now     func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]decision
}

type decision struct {
	allowed bool
	expires time.Time
}

func (r *AccessReviewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// cacheKey hashes everything the answer depends on.
func cacheKey(id auth.Identity, a auth.Attributes) [32]byte {
	var b strings.Builder
	groups := slices.Clone(id.Groups)
	sort.Strings(groups)
	fmt.Fprintf(&b, "%q|%q|%q|", id.User, id.UID, groups)
	keys := make([]string, 0, len(id.Extra))
	for k := range id.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q|", k, id.Extra[k])
	}
	fmt.Fprintf(&b, "%q|%q|%q|%q|%q", a.Verb, a.Group, a.Resource, a.Namespace, a.Path)
	return sha256.Sum256([]byte(b.String()))
}

// Authorize asks the API server (or the cache) whether id may do a.
func (r *AccessReviewer) Authorize(ctx context.Context, id auth.Identity, a auth.Attributes) (bool, error) {
	key := cacheKey(id, a)
	now := r.now()
	r.mu.Lock()
	if d, ok := r.cache[key]; ok && now.Before(d.expires) {
		r.mu.Unlock()
		return d.allowed, nil
	}
	r.mu.Unlock()
	spec := authzv1.SubjectAccessReviewSpec{User: id.User, UID: id.UID, Groups: id.Groups}
	if len(id.Extra) > 0 {
		spec.Extra = make(map[string]authzv1.ExtraValue, len(id.Extra))
		for k, v := range id.Extra {
			spec.Extra[k] = v
		}
	}
	if a.Path != "" {
		spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
	} else {
		spec.ResourceAttributes = &authzv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Namespace: a.Namespace}
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sar, err := r.Reviews.Create(cctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("%w: subject access review: %v", auth.ErrUnavailable, err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := r.AllowTTL
	if ttl == 0 {
		ttl = 30 * time.Second
	}
	if !allowed {
		if ttl = r.DenyTTL; ttl == 0 {
			ttl = 10 * time.Second
		}
	}
	limit := r.MaxEntries
	if limit == 0 {
		limit = 10000
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[[32]byte]decision{}
	}
	if len(r.cache) >= limit {
		for k, d := range r.cache {
			if !now.Before(d.expires) || len(r.cache) >= limit*3/4 {
				delete(r.cache, k)
			}
		}
	}
	r.cache[key] = decision{allowed: allowed, expires: now.Add(ttl)}
	r.mu.Unlock()
	return allowed, nil
}
