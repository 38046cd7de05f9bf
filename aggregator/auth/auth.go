package auth

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Errors of Authenticate and Authorize.
var (
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	ErrForbidden       = errors.New("auth: forbidden")
	ErrThrottled       = errors.New("auth: too many token reviews from this client")
	ErrUnavailable     = errors.New("auth: token review unavailable")
)

// Identity is an authenticated caller.
type Identity struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
	// Node is the node the token was issued for (agents' tokens bound to
	// their pod); Pod the pod it is bound to, when it says.
	Node string
	Pod  string
}

// Authenticator turns a bearer token into an Identity.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Attributes are what a caller asks to do, as a SubjectAccessReview
// states it: a verb on a resource (in a namespace, "" for every
// namespace), or on a non-resource Path.
type Attributes struct {
	Verb, Group, Resource, Namespace string
	// Path, when set, makes it a non-resource request (/metrics).
	Path string
}

func (a Attributes) String() string {
	if a.Path != "" {
		return a.Verb + " " + a.Path
	}
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Namespace == "" {
		return a.Verb + " " + r + " in every namespace"
	}
	return a.Verb + " " + r + " in namespace " + a.Namespace
}

// Authorizer says whether id may do a; an error (ErrUnavailable) when it
// could not tell.
type Authorizer interface {
	Authorize(ctx context.Context, id Identity, a Attributes) (bool, error)
}

// Token-review extras the API server sets in tokens bound to a pod.
const (
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	ExtraPodName  = "authentication.kubernetes.io/pod-name"
)

// Audience is the audience agents request their token for, and the
// default audience of the dashboard's users' tokens.
const Audience = "cgpilot-aggregator"

type sourceKey struct{}

// WithSource records the caller's address (its IP) in ctx: the
// authenticator's limiter keeps each caller's reviews apart.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, sourceKey{}, source)
}

// SourceOf is the caller's address recorded by WithSource ("" if none).
func SourceOf(ctx context.Context) string {
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}

// Static maps fixed tokens to identities (the load generator; tests).
// It is also an Authorizer: a static user may read what its line grants.
type Static map[string]staticEntry

type staticEntry struct {
	id Identity
	// scope of a user: "*" (every namespace and the cluster's views) or
	// namespaces; nil for an agent (nothing to read).
	scope []string
}

// LoadStatic reads "token,node" lines (an agent of node) and
// "token,@user,scope" lines (a dashboard user who may read scope: "*"
// for the whole cluster, else a space-separated list of namespaces).
// # comments and blank lines are ignored.
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
		parts := strings.Split(l, ",")
		tok := parts[0]
		switch {
		case len(parts) == 2 && tok != "" && parts[1] != "" && !strings.HasPrefix(parts[1], "@"):
			s.AddAgent(tok, parts[1])
		case len(parts) == 3 && tok != "" && len(parts[1]) > 1 && strings.HasPrefix(parts[1], "@") && strings.TrimSpace(parts[2]) != "":
			s.AddUser(tok, parts[1][1:], strings.Fields(parts[2])...)
		default:
			return nil, fmt.Errorf("auth: static tokens %s:%d: want token,node or token,@user,scope", path, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: static tokens %s: %w", path, err)
	}
	return s, nil
}

// AddAgent maps token to an agent of node.
func (s Static) AddAgent(token, node string) {
	s[token] = staticEntry{id: Identity{User: "static:" + node, Node: node}}
}

// AddUser maps token to a user who may read scope ("*": everything).
func (s Static) AddUser(token, user string, scope ...string) {
	s[token] = staticEntry{id: Identity{User: user}, scope: scope}
}

// Authenticate looks the token up.
func (s Static) Authenticate(_ context.Context, token string) (Identity, error) {
	if e, ok := s[token]; ok {
		return e.id, nil
	}
	return Identity{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}

// Authorize lets a static user read (get, list) what its line's scope
// covers; nothing else is allowed.
func (s Static) Authorize(_ context.Context, id Identity, a Attributes) (bool, error) {
	if a.Verb != "get" && a.Verb != "list" {
		return false, nil
	}
	for _, e := range s {
		if e.scope == nil || e.id.User != id.User || e.id.Node != id.Node {
			continue
		}
		if slices.Contains(e.scope, "*") {
			return true, nil
		}
		return a.Path == "" && a.Namespace != "" && slices.Contains(e.scope, a.Namespace), nil
	}
	return false, nil
}
