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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgpilot/cgpilot/api/report"
)

// certReloader serves the certificate in certFile/keyFile and loads it
// again when either file changes (checked at most every 10 s), so a
// rotated Secret needs no restart.
type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	stamp             string
	checked           time.Time
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) stampOf() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return b.String()
}

func (r *certReloader) get() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && time.Since(r.checked) < 10*time.Second {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp := r.stampOf()
	if r.cert != nil && stamp == r.stamp {
		return r.cert, nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil // keep serving the old one until the pair is whole
		}
		return nil, fmt.Errorf("%w: serving certificate: %v", ErrConfig, err)
	}
	r.cert, r.stamp = &c, stamp
	return r.cert, nil
}

func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.get() }}
}

// forwardedHeader marks a request a follower forwarded to the leader: it
// is never forwarded again.
const forwardedHeader = "X-Cgpilot-Forwarded"

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
