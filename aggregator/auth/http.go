package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Bearer returns the request's bearer token ("" if none).
func Bearer(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// Source is the request's client IP (its remote address without port).
func Source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Results of a Guard's decisions (its Result callback's argument).
const (
	ResultAllowed         = "allowed"
	ResultUnauthenticated = "unauthenticated"
	ResultForbidden       = "forbidden"
	ResultThrottled       = "throttled"
	ResultUnavailable     = "unavailable"
)

// Guard authenticates and authorizes users' HTTP requests (the dashboard,
// its JSON API, /metrics): a bearer token reviewed by Authn, then what the
// request reads allowed by Authz. Refusals are answered with a JSON
// {"error": ...} body: 401 with WWW-Authenticate, 403, 429 or 503 with
// Retry-After.
type Guard struct {
	Authn Authenticator
	Authz Authorizer
	// Result, when set, is called with each decision's result.
	Result func(result string)
}

func (g *Guard) count(result string) {
	if g.Result != nil {
		g.Result(result)
	}
}

// Refuse answers err's status (401, 403, 429 or 503) with a JSON body.
func Refuse(w http.ResponseWriter, err error) string {
	status, result := http.StatusUnauthorized, ResultUnauthenticated
	switch {
	case errors.Is(err, ErrForbidden):
		status, result = http.StatusForbidden, ResultForbidden
	case errors.Is(err, ErrThrottled):
		status, result = http.StatusTooManyRequests, ResultThrottled
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, ErrUnavailable):
		status, result = http.StatusServiceUnavailable, ResultUnavailable
		w.Header().Set("Retry-After", "5")
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+Audience+`"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "status": status})
	return result
}

// Identify authenticates r; when it cannot, it answers and returns false.
func (g *Guard) Identify(w http.ResponseWriter, r *http.Request) (Identity, bool) {
	ctx := r.Context()
	if SourceOf(ctx) == "" {
		ctx = WithSource(ctx, Source(r))
	}
	id, err := g.Authn.Authenticate(ctx, Bearer(r))
	if err != nil {
		g.count(Refuse(w, err))
		return Identity{}, false
	}
	return id, true
}

// Allowed says whether id may do a, without answering (nil error: the
// decision stands; ErrUnavailable when the authorizer could not tell).
func (g *Guard) Allowed(r *http.Request, id Identity, a Attributes) (bool, error) {
	return g.Authz.Authorize(r.Context(), id, a)
}

// Allow authorizes a for id; when it is not allowed it answers 403 (or
// 503) and returns false.
func (g *Guard) Allow(w http.ResponseWriter, r *http.Request, id Identity, a Attributes) bool {
	ok, err := g.Authz.Authorize(r.Context(), id, a)
	switch {
	case err != nil:
		g.count(Refuse(w, err))
		return false
	case !ok:
		g.count(Refuse(w, Forbidden(id, a)))
		return false
	}
	g.count(ResultAllowed)
	return true
}

// Forbidden is the error of a refused authorization.
func Forbidden(id Identity, a Attributes) error {
	return fmt.Errorf("%w: user %s may not %s", ErrForbidden, strconv.Quote(id.User), a)
}

// Require wraps next so that only callers allowed a reach it.
func (g *Guard) Require(a Attributes, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := g.Identify(w, r)
		if !ok || !g.Allow(w, r, id, a) {
			return
		}
		next.ServeHTTP(w, r)
	})
}
