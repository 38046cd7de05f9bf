//go:build linux

package harness

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFeatureGatesFlag(t *testing.T) {
	for _, tc := range []struct {
		gates map[string]bool
		want  string
	}{
		{nil, ""},
		{map[string]bool{"B": false, "A": true}, "A=true,B=false"},
	} {
		if got := featureGatesFlag(tc.gates); got != tc.want {
			t.Errorf("featureGatesFlag(%v) = %q, want %q", tc.gates, got, tc.want)
		}
	}
}

// TestClearStaleCPUManagerState: a checkpoint of the wanted policy stays,
// one of another policy or an unreadable one goes (the kubelet would exit
// on it), a missing one is fine.
func TestClearStaleCPUManagerState(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cpu_manager_state")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool { _, err := os.Stat(file); return err == nil }
	if removed, err := clearStaleCPUManagerState(file, "static"); err != nil || removed != "" {
		t.Errorf("missing file: %q, %v", removed, err)
	}
	write(`{"policyName":"static","defaultCpuSet":"0","checksum":1}`)
	if removed, err := clearStaleCPUManagerState(file, "static"); err != nil || removed != "" || !exists() {
		t.Errorf("same policy: removed %q, %v, still there %v", removed, err, exists())
	}
	write(`{"policyName":"none","defaultCpuSet":"","checksum":1}`)
	if removed, err := clearStaleCPUManagerState(file, "static"); err != nil || removed != "none" || exists() {
		t.Errorf("other policy: removed %q, %v, still there %v", removed, err, exists())
	}
	write(`{garbage`)
	if removed, err := clearStaleCPUManagerState(file, "none"); err != nil || removed != "unreadable" || exists() {
		t.Errorf("garbage: removed %q, %v, still there %v", removed, err, exists())
	}
}

// TestPKIIssuesVerifiableCerts: what the harness issues chains to its CA,
// with the usages and names the API server and the kubelet check.
func TestPKIIssuesVerifiableCerts(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACert)
	parse := func(file string) *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := parse(p.KubeletClientCertFile)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("apiserver's kubelet client certificate: %v", err)
	}
	if !strings.Contains(strings.Join(client.Subject.Organization, ","), adminGroup) {
		t.Errorf("kubelet client certificate groups %v: the kubelet's webhook authorizer would refuse it", client.Subject.Organization)
	}
	cert, key := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if _, _, err := p.issue(cert, key, &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"n1"}, IPAddresses: []net.IP{net.ParseIP(DefaultNodeIP)}}); err != nil {
		t.Fatal(err)
	}
	serving := parse(cert)
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: DefaultNodeIP}); err != nil {
		t.Errorf("kubelet serving certificate for %s: %v", DefaultNodeIP, err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if client.SerialNumber.Cmp(serving.SerialNumber) == 0 {
		t.Error("two certificates with one serial number")
	}
}
