package aggtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/cgpilot/cgpilot/aggregator"
)

// TLS is a CA and a serving certificate signed by it, in files.
type TLS struct {
	CAPEM                     []byte
	CAFile, CertFile, KeyFile string
}

// Certs writes a CA and a serving certificate for 127.0.0.1, localhost and
// names (DNS names or IP addresses) into dir (P-256, valid for a week).
func Certs(dir string, names ...string) (*TLS, error) {
	var dnsNames []string
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, n)
		}
	}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cgpilot-aggregator-test-ca"},
		NotBefore: now, NotAfter: now.Add(7 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "cgpilot-aggregator"},
		NotBefore: now, NotAfter: now.Add(7 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: append([]string{"localhost"}, dnsNames...),
		IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	t := &TLS{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	for path, data := range map[string][]byte{
		t.CAFile:   t.CAPEM,
		t.CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		t.KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("aggtest: write %s: %w", path, err)
		}
	}
	return t, nil
}

// Replica is an aggregator running in this process.
type Replica struct {
	*aggregator.Aggregator
	done    <-chan error
	cancel  context.CancelFunc
	stopped bool
	err     error
}

// Stop ends the replica (releasing its Lease) and returns Run's result.
func (r *Replica) Stop() error {
	if !r.stopped {
		r.cancel()
		r.err, r.stopped = <-r.done, true
	}
	return r.err
}

// Ended returns Run's result and true once Run has returned by itself
// (e.g. ErrLostLease), without stopping it.
func (r *Replica) Ended() (error, bool) {
	if r.stopped {
		return r.err, true
	}
	select {
	case r.err = <-r.done:
		r.stopped = true
		return r.err, true
	default:
		return nil, false
	}
}

// URL is the replica's HTTPS base URL; HTTPURL its HTTP one.
func (r *Replica) URL() string { return "https://" + r.SecureAddr() }

// HTTPURL is the replica's HTTP base URL.
func (r *Replica) HTTPURL() string { return "http://" + r.HTTPAddr() }

// Start runs a replica with cfg (listening on 127.0.0.1 ports of its
// choosing unless cfg says otherwise) until Stop or the end of the test,
// and returns once it serves.
func Start(t testing.TB, cfg aggregator.Config) *Replica {
	t.Helper()
	if cfg.SecureAddr == "" && cfg.CertFile != "" {
		cfg.SecureAddr = "127.0.0.1:0"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	served := make(chan *aggregator.Aggregator, 1)
	user := cfg.Ready
	cfg.Ready = func(a *aggregator.Aggregator) {
		if user != nil {
			user(a)
		}
		served <- a
	}
	var log logr.Logger = testr.NewWithInterface(t, testr.Options{Verbosity: 0})
	if os.Getenv("CGPILOT_TEST_QUIET") != "" {
		log = logr.Discard()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- aggregator.Run(ctx, cfg, log) }()
	r := &Replica{cancel: cancel, done: done}
	select {
	case a := <-served:
		r.Aggregator = a
	case err := <-done:
		cancel()
		t.Fatalf("aggregator did not start: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("aggregator did not start within 2 minutes")
	}
	t.Cleanup(func() {
		if r.stopped {
			return
		}
		cancel()
		select {
		case err := <-done:
			r.stopped = true
			if err != nil && !errors.Is(err, aggregator.ErrLostLease) && !errors.Is(err, context.Canceled) {
				t.Errorf("aggregator %s ended with: %v", cfg.Identity, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("aggregator %s did not stop within 30 s", cfg.Identity)
		}
	})
	return r
}

// Wait polls cond every 50 ms until it holds or timeout passes.
func Wait(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HTTPClient trusts the test CA.
func HTTPClient(ca []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// ClientTLS is a client CA and client certificates it signed, in files.
type ClientTLS struct {
	CAPEM  []byte
	CAFile string
	// Certs are the client certificates by subject CN: files and the
	// pair for a tls.Config.
	Certs map[string]ClientCert
}

// ClientCert is one client certificate.
type ClientCert struct {
	CertFile, KeyFile string
	Pair              tls.Certificate
}

// ClientCerts writes a client CA and, per CN, a client certificate signed
// by it (ExtKeyUsageClientAuth) into dir (client-ca.crt, client-<cn>.crt
// and .key); the kube-apiserver and kube-scheduler of the tests present
// them to the webhook and the extender.
func ClientCerts(dir string, cns ...string) (*ClientTLS, error) {
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cgpilot-test-client-ca"},
		NotBefore: now, NotAfter: now.Add(7 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	out := &ClientTLS{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), CAFile: filepath.Join(dir, "client-ca.crt"),
		Certs: map[string]ClientCert{}}
	if err := os.WriteFile(out.CAFile, out.CAPEM, 0o600); err != nil {
		return nil, fmt.Errorf("aggtest: write %s: %w", out.CAFile, err)
	}
	for i, cn := range cns {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(10 + i)), Subject: pkix.Name{CommonName: cn},
			NotBefore: now, NotAfter: now.Add(7 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		name := strings.NewReplacer(":", "-", "/", "-").Replace(cn)
		c := ClientCert{CertFile: filepath.Join(dir, "client-"+name+".crt"), KeyFile: filepath.Join(dir, "client-"+name+".key")}
		if c.Pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, err
		}
		for path, data := range map[string][]byte{c.CertFile: certPEM, c.KeyFile: keyPEM} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				return nil, fmt.Errorf("aggtest: write %s: %w", path, err)
			}
		}
		out.Certs[cn] = c
	}
	return out, nil
}

// HTTPClientWithCert trusts ca and presents cert.
func HTTPClientWithCert(ca []byte, cert tls.Certificate) *http.Client {
	c := HTTPClient(ca)
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return c
}

// WebhookAuth writes what a kube-apiserver needs to present a client
// certificate to admission webhooks, mutating (the Auto policies') and
// validating (the rescheduler's evictions): an AdmissionConfiguration whose
// kubeconfig names cert for every webhook, "*", into dir; it returns its
// --admission-control-config-file flag.
func WebhookAuth(dir string, cert ClientCert) (string, error) {
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	admission := filepath.Join(dir, "admission-config.yaml")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: %s
      client-key: %s
`, cert.CertFile, cert.KeyFile)
	ac := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %[1]s
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %[1]s
`, kubeconfig)
	for path, data := range map[string]string{kubeconfig: kc, admission: ac} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return "", fmt.Errorf("aggtest: write %s: %w", path, err)
		}
	}
	return "--admission-control-config-file=" + admission, nil
}
