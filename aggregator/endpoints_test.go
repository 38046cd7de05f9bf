package aggregator_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/reschedule"
	"github.com/cgpilot/cgpilot/test/aggtest"
)

// filler is an endless JSON string body: `{"pod":{"metadata":{"name":"aaaa…`.
type filler struct{ head []byte }

func (f *filler) Read(p []byte) (int, error) {
	n := copy(p, f.head)
	f.head = f.head[n:]
	for i := n; i < len(p); i++ {
		p[i] = 'a'
	}
	return len(p), nil
}

// TestEndpointsRefuseUnknownCallers (issue 19: /scheduler/prioritize took
// 64 MiB bodies from anyone, two at once costing 1.4 GiB of heap;
// /admission/mutate answered any caller; port 80 served every
// namespace's data): the webhook and the extender answer only callers
// with a client certificate of their CA and names, the API and /metrics
// only tokens allowed to read them, and no body past a few MiB is read.
func TestEndpointsRefuseUnknownCallers(t *testing.T) {
	dir := t.TempDir()
	certs, err := aggtest.Certs(dir)
	if err != nil {
		t.Fatal(err)
	}
	callers, err := aggtest.ClientCerts(dir, "kube-scheduler", "kube-apiserver", "system:node:evil")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := aggtest.ClientCerts(t.TempDir(), "kube-scheduler") // the right name, another CA
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("viewer-token,@viewer,*\nagent-token,node-1\n"), 0o600)
	r := aggtest.Start(t, aggregator.Config{Standalone: true, StaticTokens: tokens, CertFile: certs.CertFile, KeyFile: certs.KeyFile,
		Identity: "endpoints", WebhookClientCAFile: callers.CAFile, ExtenderClientCAFile: callers.CAFile})
	anon := aggtest.HTTPClient(certs.CAPEM)
	as := func(cn string) *http.Client { return aggtest.HTTPClientWithCert(certs.CAPEM, callers.Certs[cn].Pair) }
	do := func(c *http.Client, method, url, token string, body io.Reader) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"operation":"CREATE","namespace":"shop","object":{"metadata":{"name":"p","namespace":"shop"},"spec":{"containers":[{"name":"app","image":"x"}]}}}}`
	args := `{"pod":{"metadata":{"name":"p","namespace":"shop"}},"nodenames":["node-1","node-2"]}`
	mutate, prioritize := r.URL()+"/admission/mutate", r.URL()+"/scheduler/prioritize"
	evictions, query := r.URL()+reschedule.PathEvictions, r.HTTPURL()+reschedule.PathQuery+"?query="+reschedule.Series
	eviction := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u2","operation":"CREATE","namespace":"shop","name":"p",` +
		`"resource":{"resource":"pods"},"subResource":"eviction","userInfo":{"username":"system:serviceaccount:cgpilot-system:cgpilot-descheduler"}}}`
	for _, tc := range []struct {
		name   string
		client *http.Client
		method string
		url    string
		token  string
		body   string
		status int
	}{
		{"the page (no data)", anon, "GET", r.HTTPURL() + "/", "", "", 200},
		{"health", anon, "GET", r.HTTPURL() + "/healthz", "", "", 200},
		{"anonymous workloads", anon, "GET", r.HTTPURL() + "/api/v1/workloads", "", "", 401},
		{"anonymous summary", anon, "GET", r.HTTPURL() + "/api/v1/summary", "", "", 401},
		{"anonymous metrics", anon, "GET", r.HTTPURL() + "/metrics", "", "", 401},
		{"an agent's token on the dashboard", anon, "GET", r.HTTPURL() + "/api/v1/workloads", "agent-token", "", 403},
		{"a viewer's workloads", anon, "GET", r.HTTPURL() + "/api/v1/workloads", "viewer-token", "", 200},
		{"a viewer's metrics", anon, "GET", r.HTTPURL() + "/metrics", "viewer-token", "", 200},
		{"anonymous mutate", anon, "POST", mutate, "", review, 403},
		{"a token on mutate", anon, "POST", mutate, "viewer-token", review, 403},
		{"a node's certificate on mutate", as("system:node:evil"), "POST", mutate, "", review, 403},
		{"the API server's certificate on mutate", as("kube-apiserver"), "POST", mutate, "", review, 200},
		{"anonymous prioritize", anon, "POST", prioritize, "", args, 403},
		{"another CA's scheduler", aggtest.HTTPClientWithCert(certs.CAPEM, stranger.Certs["kube-scheduler"].Pair), "POST", prioritize, "", args, 403},
		{"the scheduler's certificate", as("kube-scheduler"), "POST", prioritize, "", args, 200},
		{"an 8 MiB declared body", as("kube-scheduler"), "POST", prioritize, "", strings.Repeat(" ", 8<<20), 413},
		// The rescheduler's endpoints (off here: they answer that it is).
		{"anonymous descheduler query", anon, "GET", query, "", "", 401},
		{"an agent's token on the query", anon, "GET", query, "agent-token", "", 403},
		{"an allowed token on the query (off: 422)", anon, "GET", query, "viewer-token", "", 422},
		{"anonymous rescheduling status", anon, "GET", r.HTTPURL() + reschedule.PathStatus, "", "", 401},
		{"a viewer's rescheduling status", anon, "GET", r.HTTPURL() + reschedule.PathStatus, "viewer-token", "", 200},
		{"anonymous eviction review", anon, "POST", evictions, "", eviction, 403},
		{"a token on the eviction webhook", anon, "POST", evictions, "viewer-token", eviction, 403},
		{"the API server's certificate on the eviction webhook", as("kube-apiserver"), "POST", evictions, "", eviction, 200},
	} {
		var body io.Reader
		if tc.body != "" {
			body = bytes.NewReader([]byte(tc.body))
		}
		if got, text := do(tc.client, tc.method, tc.url, tc.token, body); got != tc.status {
			t.Errorf("%s: %d %.200s, want %d", tc.name, got, text, tc.status)
		}
	}
	// Two 64 MiB bodies of unknown length at once, from the scheduler
	// itself: each is read up to the cap, then refused.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = do(as("kube-scheduler"), "POST", prioritize, "",
				io.LimitReader(&filler{head: []byte(`{"pod":{"metadata":{"name":"`)}, 64<<20))
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	for i, s := range statuses {
		if s != http.StatusBadRequest && s != http.StatusRequestEntityTooLarge {
			t.Errorf("streamed 64 MiB body %d: %d, want 400 or 413", i, s)
		}
	}
	if allocated > 48<<20 {
		t.Errorf("two streamed 64 MiB bodies allocated %d MiB in the process, want < 48", allocated>>20)
	}
	t.Logf("two streamed 64 MiB bodies to %s: %v, %d MiB allocated (client and server)", prioritize, statuses, allocated>>20)
}
