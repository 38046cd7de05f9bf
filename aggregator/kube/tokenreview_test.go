package kube

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// jwt is a JWT-shaped token (unsigned garbage as a signature: only the
// API server's review could tell) for aud, expiring at exp.
func jwt(name string, aud string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." +
		enc(fmt.Appendf(nil, `{"aud":[%q],"exp":%d,"sub":%q}`, aud, exp.Unix(), name)) + "." + enc([]byte("sig-"+name))
}

// The real TokenReview path is tested against a real API server in
// test/e2e (aggregator_auth_test.go); this checks the cache and the
// decisions on the review's answer.
func TestTokenReviewer(t *testing.T) {
	cs := fake.NewClientset()
	calls := 0
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t0 := now
	tok := func(name string) string { return jwt(name, auth.Audience, t0.Add(time.Hour)) }
	answers := map[string]authnv1.TokenReviewStatus{
		tok("good"):     {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:cgpilot:agent", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}, auth.ExtraPodName: {"agent-x"}}}},
		tok("no-node"):  {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:cgpilot:agent"}},
		tok("wrongaud"): {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: authnv1.UserInfo{Username: "u", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}}}},
		tok("other"):    {Authenticated: true, Audiences: []string{auth.Audience}, User: authnv1.UserInfo{Username: "system:serviceaccount:default:x", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}}}},
		tok("bad"):      {Authenticated: false, Error: "invalid bearer token"},
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
	r := &TokenReviewer{Reviews: cs.AuthenticationV1().TokenReviews(), Users: []string{"system:serviceaccount:cgpilot:agent"}, Now: func() time.Time { return now }}
	ctx := context.Background()
	id, err := r.Authenticate(ctx, tok("good"))
	if err != nil || id.Node != "n1" || id.Pod != "agent-x" {
		t.Fatalf("good token: %+v %v", id, err)
	}
	for _, name := range []string{"no-node", "wrongaud", "other", "bad"} {
		if _, err := r.Authenticate(ctx, tok(name)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%q: %v, want auth.ErrUnauthenticated", name, err)
		}
	}
	before := calls
	r.Authenticate(ctx, tok("good"))
	r.Authenticate(ctx, tok("bad"))
	if calls != before {
		t.Errorf("cached answers made %d reviews", calls-before)
	}
	now = now.Add(time.Minute) // refusals expire, acceptances not yet
	r.Authenticate(ctx, tok("good"))
	r.Authenticate(ctx, tok("bad"))
	if calls != before+1 {
		t.Errorf("after a minute: %d reviews, want 1 (the refusal)", calls-before)
	}
	down = true
	if _, err := r.Authenticate(ctx, tok("new")); !errors.Is(err, auth.ErrUnavailable) {
		t.Errorf("API server down: %v, want auth.ErrUnavailable", err)
	}
	down = false
	if _, err := r.Authenticate(ctx, tok("new")); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("after the outage the token is reviewed again: %v", err)
	}
	// A token's own expiry bounds the cache.
	short := jwt("short", auth.Audience, now.Add(90*time.Second))
	answers[short] = answers[tok("good")]
	r.Authenticate(ctx, short)
	n := calls
	now = now.Add(2 * time.Minute)
	if _, err := r.Authenticate(ctx, short); !errors.Is(err, auth.ErrUnauthenticated) || calls != n {
		t.Errorf("an expired token: %v after %d reviews, want refused before any", err, calls-n)
	}
}

// TestJunkTokensNeverReachTheAPIServer (issue 19: each distinct junk
// token cost a TokenReview on the client the Lease also used, and a spray
// made real agents' reviews fail): what is not a JWT for the audience, or
// has expired, is refused before any review; well-formed junk from one
// caller is throttled after its burst, while another caller's token is
// still reviewed.
func TestJunkTokensNeverReachTheAPIServer(t *testing.T) {
	cs := fake.NewClientset()
	var reviewed []string
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		reviewed = append(reviewed, tr.Spec.Token)
		if tr.Spec.Token == jwt("agent", auth.Audience, now.Add(time.Hour)) {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{auth.Audience},
				User: authnv1.UserInfo{Username: "agent", Extra: map[string]authnv1.ExtraValue{auth.ExtraNodeName: {"n1"}}}}
		}
		return true, tr, nil
	})
	lim := auth.NewLimiter()
	lim.Now = func() time.Time { return now } // no refill during the spray
	r := &TokenReviewer{Reviews: cs.AuthenticationV1().TokenReviews(), Limiter: lim, Now: func() time.Time { return now }}
	spray := auth.WithSource(context.Background(), "10.0.0.66")
	junk := []string{"", "not-a-token", "a.b.c", "x.y", strings.Repeat("A", 20000),
		jwt("other-aud", "https://kubernetes.default.svc", now.Add(time.Hour)), jwt("expired", auth.Audience, now.Add(-time.Second)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"aud":"cgpilot-aggregator","exp":9999999999}`)) + ".x"}
	for i := range 1000 {
		if _, err := r.Authenticate(spray, junk[i%len(junk)]); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("junk %q: %v", junk[i%len(junk)], err)
		}
	}
	if len(reviewed) != 0 {
		t.Fatalf("%d junk tokens reached the API server", len(reviewed))
	}
	// Well-formed junk (the right audience, a made-up signature): reviewed
	// up to the caller's burst, then throttled.
	throttled := 0
	for i := range 1000 {
		_, err := r.Authenticate(spray, jwt(fmt.Sprint("forged-", i), auth.Audience, now.Add(time.Hour)))
		if errors.Is(err, auth.ErrThrottled) {
			throttled++
		}
	}
	if len(reviewed) > 5 || throttled < 995 {
		t.Errorf("a spray of 1000 forged JWTs: %d reviews, %d throttled; want at most the burst (5)", len(reviewed), throttled)
	}
	// The real agent, from its own node, still gets its review.
	id, err := r.Authenticate(auth.WithSource(context.Background(), "10.0.0.1"), jwt("agent", auth.Audience, now.Add(time.Hour)))
	if err != nil || id.Node != "n1" {
		t.Errorf("the agent during the spray: %+v %v", id, err)
	}
}

func TestCacheBound(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authnv1.TokenReview{}, nil
	})
	r := &TokenReviewer{Reviews: cs.AuthenticationV1().TokenReviews(), MaxEntries: 100}
	for i := range 1000 {
		r.Authenticate(context.Background(), jwt(fmt.Sprint("t", i), auth.Audience, time.Now().Add(time.Hour)))
	}
	if len(r.cache) > 100 {
		t.Errorf("cache holds %d entries, bound 100", len(r.cache))
	}
}
