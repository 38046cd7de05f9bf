package auth

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Claims are what CheckJWT read from a token, unverified: only the API
// server's review says whether they are true.
type Claims struct {
	Audiences []string
	Expiry    time.Time
	Subject   string
}

// maxTokenBytes bounds a bearer token (service-account tokens are about
// 1 KiB; OIDC tokens a few).
const maxTokenBytes = 16 << 10

// CheckJWT refuses, without asking anyone, a token that cannot be a
// service-account token for one of audiences at now: not three base64url
// parts of a JSON header and payload, an unsigned ("none") header, no
// audience of the list, or an expiry in the past. Tokens the API server
// issues always carry aud and exp. The claims are returned for the cache's
// lifetime; they are not trusted for anything else.
func CheckJWT(token string, audiences []string, now time.Time) (Claims, error) {
	var c Claims
	bad := func(format string, a ...any) (Claims, error) {
		return Claims{}, fmt.Errorf("%w: "+format, append([]any{ErrUnauthenticated}, a...)...)
	}
	if token == "" {
		return bad("no bearer token")
	}
	if len(token) > maxTokenBytes {
		return bad("a bearer token of %d bytes", len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return bad("the bearer token is not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return bad("the bearer token is not a signed JWT")
	}
	var payload struct {
		Aud audience `json:"aud"`
		Exp *float64 `json:"exp"`
		Sub string   `json:"sub"`
	}
	if err := decodeSegment(parts[1], &payload); err != nil {
		return bad("the bearer token's claims do not parse")
	}
	c.Audiences, c.Subject = payload.Aud, payload.Sub
	if !slices.ContainsFunc(c.Audiences, func(a string) bool { return slices.Contains(audiences, a) }) {
		return bad("the token is for audiences %q, want one of %q", truncateList(c.Audiences), audiences)
	}
	if payload.Exp == nil {
		return bad("the token has no expiry")
	}
	c.Expiry = time.Unix(int64(*payload.Exp), 0)
	if !now.Before(c.Expiry) {
		return bad("the token expired at %s", c.Expiry.UTC().Format(time.RFC3339))
	}
	return c, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// audience is a JWT aud claim: a string or a list of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

func truncateList(l []string) []string {
	if len(l) > 4 {
		l = l[:4]
	}
	out := make([]string, len(l))
	for i, s := range l {
		if len(s) > 64 {
			s = s[:64] + "…"
		}
		out[i] = s
	}
	return out
}
