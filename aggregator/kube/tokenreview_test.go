package kube

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// The real TokenReview path is tested against a real API server in
// test/e2e (aggregator_auth_test.go); this checks the cache and the
// decisions on the review's answer.
func TestTokenReviewer(t *testing.T) {
	cs := fake.NewClientset()
	calls := 0
	answers := map[string]authnv1.TokenReviewStatus{
		"good":     {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:cgpilot:agent", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}, auth.ExtraPodName: {"agent-x"}}}},
		"no-node":  {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:cgpilot:agent"}},
		"wrongaud": {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: authnv1.UserInfo{Username: "u", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}}}},
		"other":    {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:default:x", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}}}},
		"bad":      {Authenticated: false, Error: "invalid bearer token"},
	}
	down := false
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if down {
			return true, nil, fmt.Errorf("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status = answers[tr.Spec.Token]
		return true, tr, nil
	})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &TokenReviewer{Reviews: cs.AuthenticationV1().TokenReviews(), Users: []string{"system:serviceaccount:cgpilot:agent"}, Now: func() time.Time { return now }}
	ctx := context.Background()
	id, err := r.Authenticate(ctx, "good")
	if err != nil || id.Node != "n1" || id.Pod != "agent-x" {
		t.Fatalf("good token: %+v %v", id, err)
	}
	for _, tok := range []string{"no-node", "wrongaud", "other", "bad", ""} {
		if _, err := r.Authenticate(ctx, tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%q: %v, want auth.ErrUnauthenticated", tok, err)
		}
	}
	before := calls
	r.Authenticate(ctx, "good")
	r.Authenticate(ctx, "bad")
	if calls != before {
		t.Errorf("cached answers made %d reviews", calls-before)
	}
	now = now.Add(time.Minute) // refusals expire, acceptances not yet
	r.Authenticate(ctx, "good")
	r.Authenticate(ctx, "bad")
	if calls != before+1 {
		t.Errorf("after a minute: %d reviews, want 1 (the refusal)", calls-before)
	}
	down = true
	if _, err := r.Authenticate(ctx, "new"); !errors.Is(err, auth.ErrUnavailable) {
		t.Errorf("API server down: %v, want auth.ErrUnavailable", err)
	}
	down = false
	if _, err := r.Authenticate(ctx, "new"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("after the outage the token is reviewed again: %v", err)
	}
	// A token's own expiry bounds the cache.
	exp := now.Add(90 * time.Second).Unix()
	jwt := "h." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d}`, exp)) + ".s"
	answers[jwt] = answers["good"]
	r.Authenticate(ctx, jwt)
	n := calls
	now = now.Add(2 * time.Minute)
	r.Authenticate(ctx, jwt)
	if calls != n+1 {
		t.Error("an expired token was answered from the cache")
	}
}

func TestCacheBound(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authnv1.TokenReview{}, nil
	})
	r := &TokenReviewer{Reviews: cs.AuthenticationV1().TokenReviews(), MaxEntries: 100}
	for i := range 1000 {
		r.Authenticate(context.Background(), fmt.Sprint("t", i))
	}
	if len(r.cache) > 100 {
		t.Errorf("cache holds %d entries, bound 100", len(r.cache))
	}
}
