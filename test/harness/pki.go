//go:build linux

package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the test bed's trust: one CA that signs the apiserver's serving
// certificate, the admin client certificate, the apiserver's client
// certificate for kubelets and each kubelet's serving certificate, and the
// service-account signing key.
type pki struct {
	CACert, AdminCert, AdminKey []byte // PEM
	// Files written into Dir.
	CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, AdminCertFile, AdminKeyFile, SAKeyFile, SAPubFile string
	KubeletClientCertFile, KubeletClientKeyFile                                                               string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// adminGroup makes the admin identity a cluster admin through RBAC's
// built-in binding, with no extra objects. The apiserver's kubelet client
// is in it too, so a kubelet's webhook authorizer allows it logs and exec.
const adminGroup = "system:masters"

// certValidity is long enough for any test bed, short enough to be useless
// if a key leaks; notBefore is set an hour back to tolerate clock skew.
const certValidity = 10 * 24 * time.Hour

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: pki dir %s: %v", ErrStart, dir, err)
	}
	p := &pki{
		CACertFile: filepath.Join(dir, "ca.crt"), CAKeyFile: filepath.Join(dir, "ca.key"),
		ServingCertFile: filepath.Join(dir, "apiserver.crt"), ServingKeyFile: filepath.Join(dir, "apiserver.key"),
		AdminCertFile: filepath.Join(dir, "admin.crt"), AdminKeyFile: filepath.Join(dir, "admin.key"),
		SAKeyFile: filepath.Join(dir, "sa.key"), SAPubFile: filepath.Join(dir, "sa.pub"),
		KubeletClientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"), KubeletClientKeyFile: filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	now := time.Now().Add(-time.Hour)
	caKey, caKeyPEM, err := genKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cgpilot-test-ca"},
		NotBefore: now, NotAfter: now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("%w: CA certificate: %v", ErrStart, err)
	}
	p.ca, _ = x509.ParseCertificate(caDER)
	p.caKey = caKey
	p.CACert = pemBlock("CERTIFICATE", caDER)
	if err := writeSecret(p.CACertFile, p.CACert); err != nil {
		return nil, err
	}
	if err := writeSecret(p.CAKeyFile, caKeyPEM); err != nil {
		return nil, err
	}
	if _, _, err := p.issue(p.ServingCertFile, p.ServingKeyFile, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	}); err != nil {
		return nil, err
	}
	if p.AdminCert, p.AdminKey, err = p.issue(p.AdminCertFile, p.AdminKeyFile, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "cgpilot-admin", Organization: []string{adminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	if _, _, err := p.issue(p.KubeletClientCertFile, p.KubeletClientKeyFile, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{adminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	saKey, saKeyPEM, err := genKey()
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: service-account public key: %v", ErrStart, err)
	}
	if err := writeSecret(p.SAKeyFile, saKeyPEM); err != nil {
		return nil, err
	}
	if err := writeSecret(p.SAPubFile, pemBlock("PUBLIC KEY", saPubDER)); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs tmpl (a leaf: its subject, usages and names) with the CA
// under a fresh key, writes both to certFile and keyFile (mode 0600) and
// returns them as PEM.
func (p *pki) issue(certFile, keyFile string, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	k, kPEM, err := genKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: serial: %v", ErrStart, err)
	}
	now := time.Now().Add(-time.Hour)
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = now, now.Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: certificate %s: %v", ErrStart, tmpl.Subject.CommonName, err)
	}
	certPEM = pemBlock("CERTIFICATE", der)
	if err := writeSecret(certFile, certPEM); err != nil {
		return nil, nil, err
	}
	if err := writeSecret(keyFile, kPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, kPEM, nil
}

func writeSecret(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrStart, path, err)
	}
	return nil
}

// genKey makes a P-256 key: as good as RSA here and a thousand times faster
// to generate on a busy 2-core machine.
func genKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: generate key: %v", ErrStart, err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: marshal key: %v", ErrStart, err)
	}
	return k, pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
