package report

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"
)

func TestBuilderWindows(t *testing.T) {
	b, err := NewBuilder(BuilderConfig{Node: "n1", SampleInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Start mid-window: the first window is partial (no missed rounds).
	start := t0.Add(35 * time.Second)
	for i := range 12 { // 35 s .. 145 s
		ts := start.Add(time.Duration(i) * 10 * time.Second)
		if i == 8 { // one round missing in the second window
			continue
		}
		b.Sample(webApp, "web-1", ts, 0.5, 1e8)
		b.NodeSample(ts, 2, 3e9)
	}
	rs := b.Cut(t0.Add(2 * time.Minute))
	if len(rs) != 2 {
		t.Fatalf("%d reports, want 2", len(rs))
	}
	if !rs[0].WindowEnd.Equal(t0.Add(time.Minute)) || !rs[1].WindowEnd.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("window ends %v %v", rs[0].WindowEnd, rs[1].WindowEnd)
	}
	if rs[0].Rounds != 3 || rs[0].MissedRounds != 0 {
		t.Errorf("first window: %d rounds, %d missed; want 3, 0 (partial)", rs[0].Rounds, rs[0].MissedRounds)
	}
	if rs[1].Rounds != 5 || rs[1].MissedRounds != 1 {
		t.Errorf("second window: %d rounds, %d missed; want 5, 1", rs[1].Rounds, rs[1].MissedRounds)
	}
	c := rs[1].Containers[0]
	if c.UsageCPU != 0.5 || c.UsageMemory != 1e8 || rs[1].Usage.CPUUsage != 2 {
		t.Errorf("usage %v cores %v bytes, node %v", c.UsageCPU, c.UsageMemory, rs[1].Usage.CPUUsage)
	}
	// The open third window (145 s) is not cut before it ends.
	if rs := b.Cut(t0.Add(2*time.Minute + 59*time.Second)); len(rs) != 0 {
		t.Errorf("cut an open window: %d", len(rs))
	}
	if rs := b.Cut(t0.Add(3 * time.Minute)); len(rs) != 1 || rs[0].Containers[0].Pods != 1 {
		t.Errorf("third window: %+v", rs)
	}
	if _, err := NewBuilder(BuilderConfig{Node: "n1", Period: 7 * time.Second}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a period not dividing a day: %v", err)
	}
}

// fakeAggregator is an HTTPS server that answers reports with scripted
// status codes and records what it accepted.
type fakeAggregator struct {
	mu       sync.Mutex
	statuses []int // answers to the next POSTs; 202 when empty
	accepted []*Decoded
	tokens   []string
	srv      *httptest.Server
}

func newFakeAggregator(t *testing.T) *fakeAggregator {
	f := &fakeAggregator{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tokens = append(f.tokens, r.Header.Get("Authorization"))
		if r.URL.Path == PathRecommendations {
			json.NewEncoder(w).Encode(Recommendations{APIVersion: APIVersion, Items: []WorkloadRecommendation{{Key: webApp,
				Recommendation: Recommendation{CPU: Estimate{Target: 0.3}, Memory: Estimate{Target: 2e8}}, FreshUntil: t0.Add(time.Hour)}}})
			return
		}
		status := http.StatusAccepted
		if len(f.statuses) > 0 {
			status, f.statuses = f.statuses[0], f.statuses[1:]
		}
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if status/100 == 2 {
			d, err := Decode(r.Body, r.Header.Get("Content-Encoding"))
			if err != nil {
				status = http.StatusBadRequest
			} else {
				f.accepted = append(f.accepted, d)
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The kubelet swaps projected files atomically; so does the test.
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestClientSendsRetriesAndRereadsToken(t *testing.T) {
	f := newFakeAggregator(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokFile, "tok-1")
	c, err := NewClient(ClientConfig{URL: f.srv.URL, TokenFile: tokFile, Transport: f.srv.Client().Transport, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.statuses = []int{http.StatusServiceUnavailable}
	r1 := sampleReport(t)
	if err := c.Enqueue(r1); err != nil {
		t.Fatal(err)
	}
	var re *RetryError
	if err := c.Flush(ctx); !errors.As(err, &re) || re.After != time.Second {
		t.Fatalf("503: %v, want a RetryError after 1s", err)
	}
	if s := c.Stats(); s.Buffered != 1 || s.Failures != 1 {
		t.Fatalf("after 503: %+v", s)
	}
	// The kubelet rotates the token (a bigger file, so the stat differs
	// even within one mtime tick).
	writeToken(t, tokFile, "tok-22")
	r2 := sampleReport(t)
	r2.WindowEnd = r2.WindowEnd.Add(time.Minute)
	c.Enqueue(r2)
	// A duplicate (409) and a malformed one (400) are dropped.
	f.statuses = []int{http.StatusAccepted, http.StatusConflict}
	bad := sampleReport(t)
	bad.Node = "Bad_Node"
	c.Enqueue(bad)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Buffered != 0 || s.Accepted != 1 || s.Duplicates != 1 || s.Rejected != 1 {
		t.Fatalf("stats %+v", s)
	}
	if len(f.accepted) != 1 || f.accepted[0].Sequence != 1 || f.accepted[0].Agent != c.Agent() {
		t.Fatalf("accepted %d reports", len(f.accepted))
	}
	if f.tokens[0] != "Bearer tok-1" || f.tokens[1] != "Bearer tok-22" {
		t.Errorf("tokens sent %q", f.tokens)
	}
	recs, err := c.Fetch(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	m := recs.Index()[webApp]
	local := Recommendation{CPU: Estimate{Target: 1}, Memory: Estimate{Target: 1e9}}
	if got, merged := Prefer(m, local, t0); !merged || got.CPU.Target != 0.3 {
		t.Errorf("fresh merged recommendation not preferred: %+v", got)
	}
	if got, merged := Prefer(m, local, t0.Add(2*time.Hour)); merged || got != local {
		t.Errorf("stale merged recommendation preferred: %+v", got)
	}
	if got, merged := Prefer(nil, local, t0); merged || got != local {
		t.Error("no merged recommendation: want local")
	}
}

// TestClientBufferBound keeps the aggregator away while many windows pass:
// the buffer stays under its bound, and once the aggregator is back every
// sample arrives (coalesced, none lost).
func TestClientBufferBound(t *testing.T) {
	f := newFakeAggregator(t)
	const bound = 16 << 10
	c, err := NewClient(ClientConfig{URL: f.srv.URL, Transport: f.srv.Client().Transport, MaxBufferBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	var samples uint64
	maxBytes := 0
	for w := range 200 {
		r := sampleReport(t)
		r.WindowEnd = r.WindowEnd.Add(time.Duration(w) * time.Minute)
		samples += 12
		c.Enqueue(r)
		s := c.Stats()
		maxBytes = max(maxBytes, s.BufferedBytes)
	}
	s := c.Stats()
	if maxBytes > bound {
		t.Errorf("buffer reached %d bytes, bound %d", maxBytes, bound)
	}
	if s.Coalesced == 0 || s.Buffered >= 200 {
		t.Fatalf("no coalescing: %+v", s)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got uint64
	windows := 0
	for _, d := range f.accepted {
		got += d.Counts[0].CPU.Total()
		windows += d.Windows
	}
	if got != samples || windows != 200 {
		t.Errorf("aggregator got %d samples in %d windows, want %d in 200", got, windows, samples)
	}
	if s.DroppedEvents == 0 {
		t.Log("no events dropped (the lists stayed within their bounds)")
	}
	t.Logf("200 windows in a %d-byte buffer: %d reports sent, %d coalescings, at most %d bytes", bound, len(f.accepted), s.Coalesced, maxBytes)
}

// TestClientReleasesSentReports: a report the aggregator accepted, and
// the reports a coalescing merged away, are no longer reachable from the
// client (at 1,000 containers each one held a few MiB until the next
// window's Enqueue).
func TestClientReleasesSentReports(t *testing.T) {
	f := newFakeAggregator(t)
	c, err := NewClient(ClientConfig{URL: f.srv.URL, Transport: f.srv.Client().Transport})
	if err != nil {
		t.Fatal(err)
	}
	gone := func(what string, ws ...weak.Pointer[Report]) {
		t.Helper()
		runtime.GC()
		for i, w := range ws {
			if w.Value() != nil {
				t.Errorf("%s %d: still reachable", what, i)
			}
		}
	}
	sent := sampleReport(t)
	if err := c.Enqueue(sent); err != nil {
		t.Fatal(err)
	}
	ws := weak.Make(sent)
	sent = nil
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Accepted != 1 || s.Buffered != 0 {
		t.Fatalf("stats %+v", s)
	}
	gone("sent report", ws)
	runtime.KeepAlive(c) // the client lives on: only what it holds may go

	// Three reports past a one-byte bound: the two oldest are merged, then
	// the merge and the third; neither original of a merge stays.
	c, err = NewClient(ClientConfig{URL: f.srv.URL, Transport: f.srv.Client().Transport, MaxBufferBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var merged []weak.Pointer[Report]
	for w := range 3 {
		r := sampleReport(t)
		r.WindowEnd = r.WindowEnd.Add(time.Duration(w) * time.Minute)
		if err := c.Enqueue(r); err != nil {
			t.Fatal(err)
		}
		merged = append(merged, weak.Make(r))
	}
	if s := c.Stats(); s.Coalesced != 2 || s.Buffered != 1 {
		t.Fatalf("want 2 coalescings into 1 report: %+v", s)
	}
	gone("coalesced report", merged...)
	runtime.KeepAlive(c)
}

func TestClientRunBacksOff(t *testing.T) {
	f := newFakeAggregator(t)
	f.statuses = []int{http.StatusInternalServerError, http.StatusInternalServerError}
	c, err := NewClient(ClientConfig{URL: f.srv.URL, Transport: f.srv.Client().Transport, MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	c.Enqueue(sampleReport(t))
	for c.Stats().Accepted == 0 {
		if ctx.Err() != nil {
			t.Fatalf("not accepted after retries: %+v", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := c.Stats(); s.Failures != 2 {
		t.Errorf("failures %d, want 2", s.Failures)
	}
	cancel()
	<-done
}

// TestClientCAFileLater: a CA file that is not there yet (the Secret not
// issued) fails each send with an error naming it, the report stays
// buffered, and once the file appears the next send verifies against it;
// a CA that did not sign the server's certificate is refused.
func TestClientCAFileLater(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	c, err := NewClient(ClientConfig{URL: srv.URL, CAFile: caFile})
	if err != nil {
		t.Fatalf("a missing CA file refused at start: %v", err)
	}
	r := &Report{Node: "n1", WindowEnd: t0, PeriodSeconds: 60, Windows: 1}
	if err := c.Enqueue(r); err != nil {
		t.Fatal(err)
	}
	err = c.Flush(context.Background())
	var re *RetryError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "ca.crt") || c.Stats().Buffered != 1 {
		t.Fatalf("without the CA file: %v, %+v", err, c.Stats())
	}
	// Another CA (a fresh self-signed certificate) does not verify the server.
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: selfSigned(t)})
	if err := os.WriteFile(caFile, otherPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); !errors.As(err, &re) || c.Stats().Buffered != 1 {
		t.Fatalf("with a CA that did not sign the server: %v, %+v", err, c.Stats())
	}
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same size as before is possible: make the mtime differ too.
	later := time.Now().Add(time.Second)
	_ = os.Chtimes(caFile, later, later)
	if err := c.Flush(context.Background()); err != nil || c.Stats().Accepted != 1 {
		t.Fatalf("with the CA file: %v, %+v", err, c.Stats())
	}
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewClient(ClientConfig{URL: srv.URL, CAFile: caFile}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA file without a certificate: %v", err)
	}
}

// selfSigned is a DER certificate no test server uses.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "other-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
