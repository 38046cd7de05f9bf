package aggregator

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cgpilot/cgpilot/aggregator/auth"
)

// TestForwardedSource: the caller's address a follower forwards is
// believed only from a replica (its client certificate is the replicas'
// serving certificate); anyone else's header is dropped, so no client
// can spend another's token-review budget or escape its own.
func TestForwardedSource(t *testing.T) {
	own := &tls.Certificate{Certificate: [][]byte{[]byte("replica-cert")}}
	g := &gates{own: func() (*tls.Certificate, error) { return own, nil }}
	gt := newGate("test", nil, 1<<10, 1, time.Second)
	for _, tc := range []struct {
		name string
		peer []byte
		want string
	}{
		{"a replica", []byte("replica-cert"), "10.0.0.7"},
		{"another client", []byte("someone-else"), "192.0.2.1"},
		{"no certificate", nil, "192.0.2.1"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/reports", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		r.Header.Set(clientHeader, "10.0.0.7")
		if tc.peer != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Raw: tc.peer}}}
		}
		var got, header string
		g.serve(gt, httptest.NewRecorder(), r, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			got, header = auth.SourceOf(r.Context()), r.Header.Get(clientHeader)
		}))
		if got != tc.want || header != "" {
			t.Errorf("%s: source %q (header left %q), want %q", tc.name, got, header, tc.want)
		}
	}
}
