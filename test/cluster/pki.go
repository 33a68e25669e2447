package cluster

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

// pki is the key material one cluster uses, generated at start-up into its own directory:
// a CA, the API server's serving certificate signed by it (valid for 127.0.0.1, ::1 and
// localhost: the relay keeps the address clients dial), and the ServiceAccount token signing key.
type pki struct {
	caPEM                []byte
	certFile, keyFile    string // serving certificate and key
	saKeyFile, saPubFile string // ServiceAccount token signing key and its public half
}

func newPKI(dir string) (*pki, error) {
	ca, caKey, caDER, err := NewCA("nftproxy-test-ca")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p := &pki{
		caPEM:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		saPubFile: filepath.Join(dir, "sa.pub"),
	}
	files := []struct {
		path  string
		block func() (*pem.Block, error)
	}{
		{p.certFile, func() (*pem.Block, error) { return &pem.Block{Type: "CERTIFICATE", Bytes: der}, nil }},
		{p.keyFile, func() (*pem.Block, error) { return ecKeyBlock(key) }},
		{p.saKeyFile, func() (*pem.Block, error) { return ecKeyBlock(saKey) }},
		{p.saPubFile, func() (*pem.Block, error) {
			b, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
			return &pem.Block{Type: "PUBLIC KEY", Bytes: b}, err
		}},
	}
	for _, f := range files {
		b, err := f.block()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(b), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func ecKeyBlock(k *ecdsa.PrivateKey) (*pem.Block, error) {
	b, err := x509.MarshalECPrivateKey(k)
	return &pem.Block{Type: "EC PRIVATE KEY", Bytes: b}, err
}

// NewCA makes a self-signed ECDSA P-256 certificate authority named commonName, valid from an
// hour ago for a week: what a test cluster's serving and client certificates are signed with.
// It returns the parsed certificate, its key and its DER encoding.
func NewCA(commonName string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate %s: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, der, nil
}
