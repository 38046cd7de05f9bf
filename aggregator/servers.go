package aggregator

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgpilot/cgpilot/aggregator/auth"
	"github.com/cgpilot/cgpilot/api/report"
)

// reloaded holds a value loaded from files, loaded again when one of
// them changes (size and modification time, looked at at most every
// 10 s once a value is held), so a rotated Secret needs no restart. A
// load that fails keeps the last good value (the files are being
// rewritten); with none yet, every call loads.
type reloaded[T any] struct {
	mu      sync.Mutex
	val     T
	ok      bool
	stamp   string
	checked time.Time
}

func (r *reloaded[T]) get(files []string, load func() (T, error)) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok && time.Since(r.checked) < 10*time.Second {
		return r.val, nil
	}
	r.checked = time.Now()
	stamp := filesStamp(files)
	if r.ok && stamp == r.stamp {
		return r.val, nil
	}
	v, err := load()
	if err != nil {
		if r.ok {
			return r.val, nil
		}
		return v, err
	}
	r.val, r.ok, r.stamp = v, true, stamp
	return v, nil
}

// filesStamp changes when one of files does (a missing one counts as
// empty).
func filesStamp(files []string) string {
	var b strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return b.String()
}

// certReloader serves the certificate in certFile/keyFile, reloaded when
// either file changes.
type certReloader struct {
	certFile, keyFile string
	cert              reloaded[*tls.Certificate]
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) get() (*tls.Certificate, error) {
	return r.cert.get([]string{r.certFile, r.keyFile}, func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: serving certificate: %v", ErrConfig, err)
		}
		return &c, nil
	})
}

// tlsConfig serves the certificate and asks callers for theirs, which
// the paths that need one verify (clientCerts); agents present none.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.get() }}
}

// forwardedHeader marks a request a follower forwarded to the leader: it
// is never forwarded again. clientHeader carries the original caller's
// address, which the leader believes only from a replica (its client
// certificate is the replicas' own): the token reviews' limiter keeps each
// agent apart, not every agent behind the follower in one bucket.
const (
	forwardedHeader = "X-Cgpilot-Forwarded"
	clientHeader    = "X-Cgpilot-Client"
)

// leaderProxy lets every replica take every request: a follower forwards
// what needs the leader's state to the leader, whose address is in the
// Lease's holder identity ("name@podIP"). Both replicas serve one
// certificate (one Secret), so the follower accepts exactly that
// certificate from the leader.
type leaderProxy struct {
	a         *Aggregator
	forwarded *prometheus.CounterVec
	mu        sync.Mutex
	proxies   map[string]*httputil.ReverseProxy
}

func newLeaderProxy(a *Aggregator) *leaderProxy {
	p := &leaderProxy{a: a, proxies: map[string]*httputil.ReverseProxy{},
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_forwarded_total",
			Help: "Requests a follower forwarded to the leader, by result: ok, no_leader, error."}, []string{"result"})}
	a.reg.MustRegister(p.forwarded)
	return p
}

// local paths every replica answers itself.
func local(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics" || strings.HasPrefix(path, "/debug/pprof/")
}

func (p *leaderProxy) wrap(next http.Handler, secure bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.a.IsLeader() || local(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		target := p.target(secure)
		if target == "" || r.Header.Get(forwardedHeader) != "" {
			p.forwarded.WithLabelValues("no_leader").Inc()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(report.Answer{Result: report.ResultNotLeader, Error: "no leader to forward to yet", RetryAfterSeconds: 5})
			return
		}
		r.Header.Set(forwardedHeader, p.a.cfg.Identity)
		if secure {
			r.Header.Set(clientHeader, sourceOf(r))
		}
		p.proxy(target, secure).ServeHTTP(w, r)
	})
}

// target is the leader's base URL for this server, "" when there is no
// other leader known.
func (p *leaderProxy) target(secure bool) string {
	id := p.a.leaderIdentity()
	_, ip, ok := strings.Cut(id, "@")
	if !ok || net.ParseIP(ip) == nil || ip == p.a.cfg.PodIP {
		return ""
	}
	l, scheme := p.a.plain, "http"
	if secure {
		l, scheme = p.a.secure, "https"
	}
	port := l.Addr().(*net.TCPAddr).Port
	return scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port))
}

func (p *leaderProxy) proxy(target string, secure bool) *httputil.ReverseProxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rp, ok := p.proxies[target]; ok {
		return rp
	}
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 30 * time.Second}
	if secure {
		tr.TLSClientConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The leader admits what a follower forwards to its webhook and
			// extender by this certificate (clientCerts).
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.a.certs.get() },
			// Verified below: the leader must present our own certificate.
			InsecureSkipVerify: true, //nolint:gosec
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				own, err := p.a.certs.get()
				if err != nil || len(raw) == 0 || len(own.Certificate) == 0 || !bytes.Equal(raw[0], own.Certificate[0]) {
					return errors.New("the leader does not present this replica's serving certificate")
				}
				return nil
			},
		}
	}
	rp.Transport = tr
	rp.ModifyResponse = func(*http.Response) error { p.forwarded.WithLabelValues("ok").Inc(); return nil }
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		p.forwarded.WithLabelValues("error").Inc()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(report.Answer{Result: report.ResultUnavailable, Error: "forwarding to the leader: " + err.Error(), RetryAfterSeconds: 5})
	}
	p.proxies[target] = rp
	return rp
}

// clientCerts admits the callers of a secure path by their TLS client
// certificate: signed by the CA in file (re-read when it changes, at most
// every 10 s) and naming one of names in its subject CN or DNS SANs ("*":
// any). The kube-apiserver presents one to the webhook when its
// AdmissionConfiguration gives it a kubeconfig; the kube-scheduler to the
// extender with its extenders[].tlsConfig. A follower forwarding to the
// leader presents the replicas' own serving certificate, which the
// leader admits too (both replicas serve the one Secret).
type clientCerts struct {
	what  string // "webhook", "extender": for messages
	flag  string // the flag naming the CA file
	file  string
	names []string
	// any admits every caller (the insecure opt-out).
	any bool

	ca reloaded[*x509.CertPool]
}

// caPool is the client CA, reloaded when its file changes.
func (c *clientCerts) caPool() (*x509.CertPool, error) {
	return c.ca.get([]string{c.file}, func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(c.file)
		if err == nil {
			pool := x509.NewCertPool()
			if pool.AppendCertsFromPEM(pem) {
				return pool, nil
			}
			err = errors.New("no PEM certificate in it")
		}
		return nil, fmt.Errorf("%s client CA %s: %v", c.what, c.file, err)
	})
}

// check admits r or says why not.
func (c *clientCerts) check(r *http.Request, own func() (*tls.Certificate, error)) error {
	if c.any {
		return nil
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return fmt.Errorf("the %s is served only to callers with a client certificate", c.what)
	}
	leaf := r.TLS.PeerCertificates[0]
	if cert, err := own(); err == nil && len(cert.Certificate) > 0 && bytes.Equal(cert.Certificate[0], leaf.Raw) {
		return nil // a replica forwarding to the leader
	}
	if c.file == "" {
		return fmt.Errorf("the %s trusts no client CA yet (%s)", c.what, c.flag)
	}
	pool, err := c.caPool()
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, ic := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the %s client certificate of %q: %v", c.what, leaf.Subject.CommonName, err)
	}
	for _, n := range c.names {
		if n == "*" || n == leaf.Subject.CommonName || slices.Contains(leaf.DNSNames, n) {
			return nil
		}
	}
	return fmt.Errorf("the %s client certificate names %q, not one of %q", c.what, leaf.Subject.CommonName, c.names)
}

// gate bounds what one path takes: its callers (clientCerts, when set),
// its bodies (maxBody bytes, 413 past it) and how many requests run at
// once (waiting up to wait for a slot, then 429 with Retry-After).
type gate struct {
	certs   *clientCerts
	maxBody int64
	slots   chan struct{}
	wait    time.Duration
	name    string
}

func newGate(name string, certs *clientCerts, maxBody int64, concurrency int, wait time.Duration) *gate {
	return &gate{name: name, certs: certs, maxBody: maxBody, slots: make(chan struct{}, concurrency), wait: wait}
}

// endpoint limits and their gates.
const (
	maxWebhookBody  = 3 << 20 // a pod is at most ~1.5 MiB in etcd
	maxExtenderBody = 4 << 20 // nodeCacheCapable: node names, not Nodes
	maxOtherBody    = 64 << 10
)

// gates routes a request to its path's gate.
type gates struct {
	webhook, extender, reports, recs, other, plain *gate
	refused                                        *prometheus.CounterVec
	own                                            func() (*tls.Certificate, error)
}

func (a *Aggregator) newGates() *gates {
	cfg := a.cfg
	g := &gates{
		webhook: newGate("webhook", &clientCerts{what: "admission webhook", flag: "--webhook-client-ca-file", file: cfg.WebhookClientCAFile,
			names: cfg.WebhookClientNames, any: cfg.WebhookAnyClient}, maxWebhookBody, 32, 500*time.Millisecond),
		extender: newGate("extender", &clientCerts{what: "scheduler extender", flag: "--extender-client-ca-file", file: cfg.ExtenderClientCAFile,
			names: cfg.ExtenderClientNames, any: cfg.ExtenderAnyClient}, maxExtenderBody, 16, 500*time.Millisecond),
		reports: newGate("reports", nil, report.MaxWireBytes+1, 32, 2*time.Second),
		recs:    newGate("recommendations", nil, maxOtherBody, 32, 2*time.Second),
		other:   newGate("other", nil, maxOtherBody, 16, time.Second),
		plain:   newGate("http", nil, maxOtherBody, 32, time.Second),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgpilot_aggregator_requests_refused_total",
			Help: "Requests refused before their handler, by endpoint and reason: client_certificate, too_busy."}, []string{"endpoint", "reason"}),
		own: func() (*tls.Certificate, error) {
			if a.certs == nil {
				return nil, errors.New("no serving certificate")
			}
			return a.certs.get()
		},
	}
	a.reg.MustRegister(g.refused)
	return g
}

func (g *gates) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		gt := g.other
		switch {
		case strings.HasPrefix(p, "/admission/"):
			gt = g.webhook
		case strings.HasPrefix(p, "/scheduler/"):
			gt = g.extender
		case p == report.PathReports:
			gt = g.reports
		case p == report.PathRecommendations:
			gt = g.recs
		}
		g.serve(gt, w, r, next)
	})
}

func (g *gates) plainHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local(r.URL.Path) && r.URL.Path != "/metrics" {
			next.ServeHTTP(w, r) // the probes never wait
			return
		}
		g.serve(g.plain, w, r, next)
	})
}

// sourceOf is the caller's address as the gates recorded it.
func sourceOf(r *http.Request) string {
	if s := auth.SourceOf(r.Context()); s != "" {
		return s
	}
	return auth.Source(r)
}

// fromReplica says whether r came over TLS from a replica (its client
// certificate is this replica's own serving certificate).
func (g *gates) fromReplica(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	own, err := g.own()
	return err == nil && len(own.Certificate) > 0 && bytes.Equal(own.Certificate[0], r.TLS.PeerCertificates[0].Raw)
}

func (g *gates) serve(gt *gate, w http.ResponseWriter, r *http.Request, next http.Handler) {
	source := auth.Source(r)
	if c := r.Header.Get(clientHeader); c != "" && g.fromReplica(r) {
		source = c
	}
	r.Header.Del(clientHeader)
	r = r.WithContext(auth.WithSource(r.Context(), source))
	if gt.certs != nil {
		if err := gt.certs.check(r, g.own); err != nil {
			g.refused.WithLabelValues(gt.name, "client_certificate").Inc()
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	if r.ContentLength > gt.maxBody {
		http.Error(w, fmt.Sprintf("body of %d bytes, at most %d", r.ContentLength, gt.maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, gt.maxBody)
	t := time.NewTimer(gt.wait)
	defer t.Stop()
	select {
	case gt.slots <- struct{}{}:
	case <-t.C:
		g.refused.WithLabelValues(gt.name, "too_busy").Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests at once", http.StatusTooManyRequests)
		return
	case <-r.Context().Done():
		return
	}
	defer func() { <-gt.slots }()
	next.ServeHTTP(w, r)
}
