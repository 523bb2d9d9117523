package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// pki holds the control plane's credentials, as files under dir: a CA, the apiserver's
// serving certificate, an administrator's client certificate (group system:masters), the
// apiserver's client certificate for kubelets and the service-account signing key. issue signs more client certificates with the CA.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// generate writes every file; valid for a year.
func (p pki) generate() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cdplane-sim-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCert(p.path("ca.crt"), caDER); err != nil {
		return err
	}
	if err := writeKey(p.path("ca.key"), caKey); err != nil {
		return err
	}
	leaf := func(name string, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.AddDate(1, 0, 0)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeCert(p.path(name+".crt"), der); err != nil {
			return err
		}
		return writeKey(p.path(name+".key"), key)
	}
	if err := leaf("apiserver", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}); err != nil {
		return err
	}
	if err := leaf("admin", clientTemplate(big.NewInt(3), "cdplane-sim-admin", []string{"system:masters"})); err != nil {
		return err
	}
	// What kube-apiserver presents to kubelets (logs, exec): a kubelet can require a client
	// certificate of the cluster CA instead of serving anyone who reaches its port.
	if err := leaf("apiserver-kubelet-client", clientTemplate(big.NewInt(4), "kube-apiserver-kubelet-client", nil)); err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding a key: %w", err)
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// clientTemplate is a client certificate of user name in groups.
func clientTemplate(serial *big.Int, name string, groups []string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// issue returns a client certificate and its key, PEM-encoded, for user name in groups, signed
// by the CA and valid for a year. It only reads the CA's files, so calls may run concurrently.
func (p pki) issue(name string, groups []string) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := p.loadCA()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := clientTemplate(serial, name, groups)
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.AddDate(1, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a certificate for %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func (p pki) loadCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(p.path("ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the cluster CA's key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("the cluster CA in %s is not PEM", p.dir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the cluster CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the cluster CA's key: %w", err)
	}
	return ca, key, nil
}
