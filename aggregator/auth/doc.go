// Package auth is how the aggregator knows who calls it and what they may
// see. An Authenticator turns a bearer token into an Identity: an agent's
// names the node its token was issued for, a user's carries the groups
// and extras an authorizer needs. An Authorizer answers whether an
// Identity may do something, as a SubjectAccessReview does. The production
// implementations talk to the API server (kube.TokenReviewer,
// kube.AccessReviewer); Static maps tokens to agents or users from a file,
// for the load generator and tests without an API server, and is never
// the default.
//
// Before any token reaches the API server, CheckJWT refuses what cannot
// be a service-account token for this audience (not a JWT, no or another
// audience, expired), and a Limiter bounds the reviews of unknown tokens
// per caller and in all: a spray of junk tokens costs nothing of the API
// server and cannot starve real agents (see kube.TokenReviewer, which
// applies both). Guard authenticates and authorizes users' HTTP requests
// with an Authenticator and an Authorizer, recording the caller's address
// for the Limiter.
//
// Errors: ErrUnauthenticated (401) for a token that is not accepted, or is
// accepted for another user, audience or no node; ErrForbidden (403) for an
// identity that may not do what it asks; ErrThrottled (429) when the
// caller's reviews are over its rate; ErrUnavailable (503) when the check
// itself failed.
//
// Files: auth.go holds the identities, the interfaces and errors, the
// caller's address carried in a context, and Static (tokens from a file);
// http.go what a request carries (its bearer token, its client address),
// Guard and the refusals' status codes and JSON body; jwt.go CheckJWT, the
// precheck of a token's shape, audience and expiry that asks no one;
// limit.go the Limiter's token buckets, per caller and shared.
//
// It imports the standard library and golang.org/x/time/rate only, so the
// agent API (package ingest) and the dashboard (web) depend on no
// client-go.
package auth
