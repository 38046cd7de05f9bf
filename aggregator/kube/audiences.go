package kube

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"

	"k8s.io/client-go/rest"
)

// TokenAudiences returns the audiences (the JWT aud claim) of the
// service-account token rc authenticates with (BearerToken, else
// BearerTokenFile), nil when it has none or it is not a JWT. The claim is
// read without verifying the token: it is the aggregator's own credential,
// read only to learn the audiences the API server issues its pods' tokens
// for (the descheduler's token, which the aggregator then reviews).
func TokenAudiences(rc *rest.Config) []string {
	if rc == nil {
		return nil
	}
	tok := rc.BearerToken
	if tok == "" && rc.BearerTokenFile != "" {
		b, err := os.ReadFile(rc.BearerTokenFile)
		if err != nil {
			return nil
		}
		tok = strings.TrimSpace(string(b))
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return nil
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil && one != "" {
		return []string{one}
	}
	var many []string
	if json.Unmarshal(claims.Aud, &many) == nil {
		return many
	}
	return nil
}
