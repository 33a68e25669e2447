package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/nftproxy/nftproxy/test/cluster"
)

// ClientCA signs client certificates the API server accepts (--client-ca-file): the kubelet's
// identity is a certificate for system:node:NAME in group system:nodes, as on a kubeadm node,
// so the Node authorizer and NodeRestriction admission apply to it.
type ClientCA struct {
	// File is the CA certificate (PEM), for --client-ca-file.
	File string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewClientCA creates a CA in dir.
func NewClientCA(dir string) (*ClientCA, error) {
	cert, key, der, err := cluster.NewCA("nftproxy-node-client-ca")
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	ca := &ClientCA{File: filepath.Join(dir, "client-ca.crt"), dir: dir, cert: cert, key: key}
	if err := os.WriteFile(ca.File, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue writes a client certificate and key for user in groups and returns their paths.
func (ca *ClientCA) Issue(user string, groups ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", fmt.Errorf("client certificate for %s: %w", user, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	base := filepath.Join(ca.dir, "client-"+serial.Text(16))
	certFile, keyFile = base+".crt", base+".key"
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
