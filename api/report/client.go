package report

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cgpilot/cgpilot/internal/loop"
	"github.com/cgpilot/cgpilot/recommend"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is the aggregator's base URL, e.g.
	// https://cgpilot-aggregator.cgpilot.svc:8443.
	URL string
	// TokenFile holds the bearer token: the agent's projected
	// service-account token (audience cgpilot-aggregator). It is read
	// again whenever it changes (the kubelet rotates it) and after a 401.
	TokenFile string
	// CAFile is a PEM bundle that verifies the aggregator's serving
	// certificate; empty: the system roots.
	CAFile string
	// Transport, when set, is used as is (tests); CAFile is then ignored.
	Transport http.RoundTripper
	// MaxBufferBytes bounds the reports kept until the aggregator accepts
	// them (default 8 MiB); past it the oldest are coalesced (see Client).
	MaxBufferBytes int
	// Compress sends gzip bodies (default off: JSON is small next to TLS
	// and the aggregator spends no CPU on decompression).
	Compress bool
	// Timeout bounds each request (default 10 s).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failure (default
	// 1 s and 5 min; each failure doubles it, with full jitter).
	MinBackoff, MaxBackoff time.Duration
	// AgentID identifies this agent process (default: 16 random hex
	// digits); Started is its start (default: now).
	AgentID string
	Started time.Time
}

// Stats are a Client's counters.
type Stats struct {
	// Buffered reports and their bytes (encoded) waiting to be accepted.
	Buffered      int
	BufferedBytes int
	// Accepted: reports the aggregator took. Duplicates: answered 409
	// (it had them already). Rejected: refused for good (400, 403, 413),
	// dropped. Coalesced: merges of two buffered reports. Failures:
	// attempts that will be retried.
	Accepted, Duplicates, Rejected, Coalesced, Failures int
	// DroppedEvents: OOM kills and adjustments dropped when coalescing
	// passed the lists' bounds.
	DroppedEvents int
	// LastError is the last failure's text ("" after a success).
	LastError string
}

// Client sends an agent's reports to the aggregator and fetches merged
// recommendations. Enqueue buffers a report and Run sends the buffer,
// oldest first, backing off while the aggregator is away.
//
// The buffer is bounded: when it holds more than MaxBufferBytes, the two
// oldest reports not being sent are coalesced into one (counts added,
// usage averaged, event lists kept up to their bounds), so samples are
// kept at a coarser time resolution rather than dropped; when one report
// is left and still too large, its oldest events go (counted in
// DroppedEvents). The buffer then holds at most MaxBufferBytes of
// encoded reports, plus the one being sent and the one that pushed it
// over, whose sizes the report bounds limit.
// Safe for concurrent use.
type Client struct {
	cfg   ClientConfig
	hc    *http.Client
	mu    sync.Mutex
	buf   []*entry
	bytes int
	seq   uint64
	stats Stats
	wake  chan struct{}
	tok   tokenCache
}

type entry struct {
	r        *Report
	body     []byte
	inFlight bool
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if _, err := url.Parse(cfg.URL); err != nil || cfg.URL == "" {
		return nil, fmt.Errorf("report: client URL %q: %v", cfg.URL, err)
	}
	cfg.MaxBufferBytes = cmp.Or(cfg.MaxBufferBytes, 8<<20)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 5*time.Minute)
	if cfg.AgentID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("report: agent id: %w", err)
		}
		cfg.AgentID = hex.EncodeToString(b[:])
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	cfg.Started = cfg.Started.UTC()
	tr := cfg.Transport
	if tr == nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			u, _ := url.Parse(cfg.URL)
			ca := &caCache{path: cfg.CAFile}
			// A CA file that is there but holds no certificate is a
			// configuration error now; one that is not there yet (a
			// Secret cert-manager has not issued) fails each connection
			// until it appears.
			if _, err := ca.pool(); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			// The chain is verified below, against the CA file as it is at
			// each handshake, so a rotated CA is used without a restart.
			tc.InsecureSkipVerify = true
			tc.VerifyConnection = func(cs tls.ConnectionState) error { return ca.verify(cs, u.Hostname()) }
		}
		tr = &http.Transport{TLSClientConfig: tc, MaxIdleConns: 2, IdleConnTimeout: 3 * time.Minute, ForceAttemptHTTP2: true}
	}
	return &Client{cfg: cfg, hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}, wake: make(chan struct{}, 1), tok: tokenCache{path: cfg.TokenFile}}, nil
}

// Agent returns the identity the client stamps on reports.
func (c *Client) Agent() Agent { return Agent{ID: c.cfg.AgentID, Started: c.cfg.Started} }

// Enqueue stamps r (APIVersion, Agent, the next Sequence) and buffers it.
func (c *Client) Enqueue(r *Report) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	r.APIVersion, r.Agent, r.Sequence = APIVersion, c.Agent(), c.seq
	body, err := Encode(r, c.cfg.Compress)
	if err != nil {
		return err
	}
	c.buf = append(c.buf, &entry{r: r, body: body})
	c.bytes += len(body)
	for c.bytes > c.cfg.MaxBufferBytes {
		if !c.coalesceOldest() && !c.trimOldestEvents() {
			break
		}
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// coalesceOldest merges the two oldest entries not in flight; false when
// there are not two.
func (c *Client) coalesceOldest() bool {
	i := 0
	if len(c.buf) > 0 && c.buf[0].inFlight {
		i = 1
	}
	if len(c.buf) < i+2 {
		return false
	}
	a, b := c.buf[i], c.buf[i+1]
	m, dropped := Coalesce(a.r, b.r)
	body, err := Encode(m, c.cfg.Compress)
	if err != nil {
		return false
	}
	c.stats.Coalesced++
	c.stats.DroppedEvents += dropped
	c.bytes += len(body) - len(a.body) - len(b.body)
	c.buf[i] = &entry{r: m, body: body}
	c.buf = slices.Delete(c.buf, i+1, i+2) // zeroes the vacated tail: no stale entry stays reachable
	return true
}

// trimOldestEvents drops the older half of the events (adjustments
// first, then OOM kills) of the oldest entry not in flight, once
// coalescing cannot shrink the buffer further; false when it has none.
func (c *Client) trimOldestEvents() bool {
	for _, e := range c.buf {
		if e.inFlight {
			continue
		}
		r := *e.r
		switch {
		case len(r.Adjustments) > 0:
			n := (len(r.Adjustments) + 1) / 2
			r.Adjustments = r.Adjustments[n:]
			c.stats.DroppedEvents += n
		case len(r.OOMKills) > 0:
			n := (len(r.OOMKills) + 1) / 2
			r.OOMKills = r.OOMKills[n:]
			c.stats.DroppedEvents += n
		default:
			return false
		}
		body, err := Encode(&r, c.cfg.Compress)
		if err != nil {
			return false
		}
		c.bytes += len(body) - len(e.body)
		e.r, e.body = &r, body
		return true
	}
	return false
}

// Coalesce merges two reports of one agent, a before b, into one that
// ends at b's window and covers both (b's sequence, its containers'
// descriptions and node state; counts added; usage averaged by windows;
// event lists concatenated up to their bounds, the oldest dropped, their
// number returned).
func Coalesce(a, b *Report) (*Report, int) {
	m := *b
	m.Windows = min(a.Windows+b.Windows, MaxWindows)
	m.Rounds, m.MissedRounds = a.Rounds+b.Rounds, a.MissedRounds+b.MissedRounds
	wa, wb := float64(a.Windows), float64(b.Windows)
	avg := func(x, y float64) float64 { return (x*wa + y*wb) / (wa + wb) }
	m.Usage.CPUUsage, m.Usage.MemoryUsage = avg(a.Usage.CPUUsage, b.Usage.CPUUsage), avg(a.Usage.MemoryUsage, b.Usage.MemoryUsage)
	byKey := make(map[Key]int, len(b.Containers))
	m.Containers = append([]Container(nil), b.Containers...)
	for i, c := range m.Containers {
		byKey[c.Key] = i
	}
	for _, ca := range a.Containers {
		i, ok := byKey[ca.Key]
		if !ok {
			if len(m.Containers) >= MaxContainers {
				continue
			}
			ca.UsageCPU, ca.UsageMemory = avg(ca.UsageCPU, 0), avg(ca.UsageMemory, 0)
			m.Containers = append(m.Containers, ca)
			continue
		}
		cb := &m.Containers[i]
		cb.Pods = max(cb.Pods, ca.Pods)
		cb.UsageCPU, cb.UsageMemory = avg(ca.UsageCPU, cb.UsageCPU), avg(ca.UsageMemory, cb.UsageMemory)
		cb.CPU = addCounts(ca.CPU, cb.CPU, recommend.CPUHistogramOptions())
		cb.Memory = addCounts(ca.Memory, cb.Memory, recommend.MemoryHistogramOptions())
	}
	dropped := 0
	m.OOMKills, dropped = concatBounded(a.OOMKills, b.OOMKills, MaxOOMKills)
	var d2 int
	m.Adjustments, d2 = concatBounded(a.Adjustments, b.Adjustments, MaxAdjustments)
	return &m, dropped + d2
}

// addCounts returns the encoding of x + y; an undecodable side (never
// from a Builder) is dropped rather than failing the merge.
func addCounts(x, y []byte, o recommend.HistogramOptions) []byte {
	cx, errx := decodeCounts(x, o)
	cy, erry := decodeCounts(y, o)
	switch {
	case errx != nil && erry != nil:
		return nil
	case errx != nil:
		return y
	case erry != nil:
		return x
	}
	if cx.Merge(cy) != nil {
		return y
	}
	return cx.AppendBinary(nil)
}

func concatBounded[T any](a, b []T, bound int) ([]T, int) {
	out := append(append([]T(nil), a...), b...)
	if over := len(out) - bound; over > 0 {
		return out[over:], over
	}
	return out, 0
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Buffered, s.BufferedBytes = len(c.buf), c.bytes
	return s
}

// RetryError is a failure worth retrying; After, when > 0, is the
// aggregator's Retry-After.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// Flush sends the buffered reports, oldest first, until the buffer is
// empty or a send fails with a *RetryError (returned). Reports refused
// for good are dropped and counted.
func (c *Client) Flush(ctx context.Context) error {
	for {
		c.mu.Lock()
		if len(c.buf) == 0 {
			c.mu.Unlock()
			return nil
		}
		e := c.buf[0]
		e.inFlight = true
		c.mu.Unlock()
		status, retryAfter, err := c.post(ctx, e.body)
		c.mu.Lock()
		e.inFlight = false
		drop := true
		switch {
		case err != nil:
			drop = false
		case status/100 == 2:
			c.stats.Accepted++
		case status == http.StatusConflict:
			c.stats.Duplicates++
		case status == http.StatusBadRequest || status == http.StatusForbidden || status == http.StatusRequestEntityTooLarge:
			c.stats.Rejected++
		default:
			drop = false
			err = fmt.Errorf("aggregator answered %d", status)
			if status == http.StatusUnauthorized {
				c.tok.invalidate()
			}
		}
		if drop {
			// Delete, not c.buf[1:]: a slice emptied that way keeps its
			// array, and with it the sent report and its body (a few MiB
			// at 1,000 containers), until the next Enqueue.
			c.buf = slices.Delete(c.buf, 0, 1)
			c.bytes -= len(e.body)
			c.stats.LastError = ""
		} else {
			c.stats.Failures++
			c.stats.LastError = err.Error()
		}
		c.mu.Unlock()
		if !drop {
			return &RetryError{Err: err, After: retryAfter}
		}
	}
}

// Run sends reports as they are enqueued until ctx ends, backing off
// after failures (doubling from MinBackoff to MaxBackoff with full jitter,
// at least the aggregator's Retry-After).
func (c *Client) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		if backoff == 0 {
			select {
			case <-ctx.Done():
				return
			case <-c.wake:
			}
		} else if !loop.Sleep(ctx, backoff) {
			return
		}
		err := c.Flush(ctx)
		var re *RetryError
		if !errors.As(err, &re) {
			backoff = 0
			continue
		}
		ceil := c.cfg.MinBackoff
		if backoff > 0 {
			ceil = min(2*backoff, c.cfg.MaxBackoff)
		}
		backoff = max(time.Duration(mrand.Int64N(int64(ceil)+1)), c.cfg.MinBackoff/2, re.After)
	}
}

func (c *Client) post(ctx context.Context, body []byte) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL+PathReports, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.Compress {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if err := c.authorize(req); err != nil {
		return 0, 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("report: POST %s: %w", c.cfg.URL+PathReports, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	var after time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		after = time.Duration(min(s, 3600)) * time.Second
	}
	return resp.StatusCode, after, nil
}

func (c *Client) authorize(req *http.Request) error {
	if c.cfg.TokenFile == "" {
		return nil
	}
	tok, err := c.tok.get()
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

// Fetch returns the merged recommendations of the workload-containers
// node reported. Errors mean the aggregator is away or refused: keep
// using the last answer until its FreshUntil, then the local ones.
func (c *Client) Fetch(ctx context.Context, node string) (*Recommendations, error) {
	u := c.cfg.URL + PathRecommendations + "?" + url.Values{"node": {node}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if err := c.authorize(req); err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("report: GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusUnauthorized {
			c.tok.invalidate()
		}
		var a Answer
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a)
		return nil, fmt.Errorf("report: GET %s: %d %s", u, resp.StatusCode, a.Error)
	}
	var out Recommendations
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxBodyBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("report: GET %s: %w", u, err)
	}
	if out.APIVersion != APIVersion {
		return nil, fmt.Errorf("report: GET %s: apiVersion %q, want %q", u, out.APIVersion, APIVersion)
	}
	return &out, nil
}

// Prefer returns the merged recommendation while it is fresh and local
// otherwise, and whether it chose the merged one. merged may be nil.
func Prefer(merged *WorkloadRecommendation, local Recommendation, now time.Time) (Recommendation, bool) {
	if merged != nil && now.Before(merged.FreshUntil) && merged.CPU.Target > 0 && merged.Memory.Target > 0 {
		return merged.Recommendation, true
	}
	return local, false
}

// FreshFor is how long a merged recommendation stays fresh after it was
// computed. The aggregator recomputes it every step, and an agent fetches
// once a report period, so the copy an agent holds can be a step and a
// period old before the next one replaces it; two grace periods more keep
// one late fold or fetch from sending the agents back to their own. With
// only step+2×grace, a step shorter than period+2×grace left every agent's
// copy stale for part of each step, and a decision that fell there used the
// node's own recommendation (TestFreshForCoversTheFetchCadence).
func FreshFor(step, period, grace time.Duration) time.Duration { return step + period + 2*grace }

// Index returns the items of r by key.
func (r *Recommendations) Index() map[Key]*WorkloadRecommendation {
	m := make(map[Key]*WorkloadRecommendation, len(r.Items))
	for i := range r.Items {
		m[r.Items[i].Key] = &r.Items[i]
	}
	return m
}

// caCache re-reads the CA bundle when its size or modification time
// changes (cert-manager renews it; the kubelet replaces the projected
// file atomically).
type caCache struct {
	mu    sync.Mutex
	path  string
	roots *x509.CertPool
	mtime time.Time
	size  int64
}

// maxCABytes bounds a CA bundle.
const maxCABytes = 1 << 20

func (c *caCache) pool() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(c.path)
	if err != nil {
		return nil, fmt.Errorf("report: CA file: %w", err)
	}
	if c.roots != nil && fi.ModTime().Equal(c.mtime) && fi.Size() == c.size {
		return c.roots, nil
	}
	if fi.Size() > maxCABytes {
		return nil, fmt.Errorf("report: CA file %s: %d bytes, at most %d", c.path, fi.Size(), maxCABytes)
	}
	pem, err := os.ReadFile(c.path)
	if err != nil {
		return nil, fmt.Errorf("report: CA file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("report: CA file %s holds no PEM certificate", c.path)
	}
	c.roots, c.mtime, c.size = roots, fi.ModTime(), fi.Size()
	return roots, nil
}

// verify checks the server's chain against the CA file and host.
func (c *caCache) verify(cs tls.ConnectionState, host string) error {
	roots, err := c.pool()
	if err != nil {
		return err
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("report: the aggregator sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
	return err
}

// tokenCache re-reads the token file when its size or modification time
// changes, or when invalidated (after a 401). The kubelet replaces a
// projected token atomically, so a changed stat means a new token.
type tokenCache struct {
	mu    sync.Mutex
	path  string
	tok   string
	mtime time.Time
	size  int64
	stale bool
}

// maxTokenBytes bounds a token file (a JWT is a few KiB).
const maxTokenBytes = 64 << 10

func (t *tokenCache) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("report: token: %w", err)
	}
	if t.tok != "" && !t.stale && fi.ModTime().Equal(t.mtime) && fi.Size() == t.size {
		return t.tok, nil
	}
	f, err := os.Open(t.path)
	if err != nil {
		return "", fmt.Errorf("report: token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("report: token %s: %w", t.path, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || len(b) > maxTokenBytes {
		return "", fmt.Errorf("report: token %s: %d bytes", t.path, len(b))
	}
	t.tok, t.mtime, t.size, t.stale = string(b), fi.ModTime(), fi.Size(), false
	return t.tok, nil
}

func (t *tokenCache) invalidate() {
	t.mu.Lock()
	t.stale = true
	t.mu.Unlock()
}
