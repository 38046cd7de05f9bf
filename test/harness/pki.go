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

// pki is the control plane's trust: one CA that signs the apiserver's
// serving certificate and the admin client certificate, and the
// service-account signing key.
type pki struct {
	CACert, AdminCert, AdminKey []byte // PEM
	// Files written into Dir.
	CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, AdminCertFile, AdminKeyFile, SAKeyFile, SAPubFile string
}

// adminGroup makes the admin identity a cluster admin through RBAC's
// built-in binding, with no extra objects.
const adminGroup = "system:masters"

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: pki dir %s: %v", ErrStart, dir, err)
	}
	p := &pki{
		CACertFile: filepath.Join(dir, "ca.crt"), CAKeyFile: filepath.Join(dir, "ca.key"),
		ServingCertFile: filepath.Join(dir, "apiserver.crt"), ServingKeyFile: filepath.Join(dir, "apiserver.key"),
		AdminCertFile: filepath.Join(dir, "admin.crt"), AdminKeyFile: filepath.Join(dir, "admin.key"),
		SAKeyFile: filepath.Join(dir, "sa.key"), SAPubFile: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock skew
	caKey, caKeyPEM, err := genKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cgpilot-test-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("%w: CA certificate: %v", ErrStart, err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.CACert = pemBlock("CERTIFICATE", caDER)

	sign := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		k, kPEM, err := genKey()
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now, now.Add(10*24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: certificate %s: %v", ErrStart, tmpl.Subject.CommonName, err)
		}
		return pemBlock("CERTIFICATE", der), kPEM, nil
	}
	servCert, servKey, err := sign(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	})
	if err != nil {
		return nil, err
	}
	p.AdminCert, p.AdminKey, err = sign(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "cgpilot-admin", Organization: []string{adminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
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
	for path, data := range map[string][]byte{
		p.CACertFile: p.CACert, p.CAKeyFile: caKeyPEM,
		p.ServingCertFile: servCert, p.ServingKeyFile: servKey,
		p.AdminCertFile: p.AdminCert, p.AdminKeyFile: p.AdminKey,
		p.SAKeyFile: saKeyPEM, p.SAPubFile: pemBlock("PUBLIC KEY", saPubDER),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("%w: write %s: %v", ErrStart, path, err)
		}
	}
	return p, nil
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
