// Package transporttest makes TLS credentials for tests and benchmarks of
// the packages that take a transport.Security: a CA generated on the spot
// and a certificate for 127.0.0.1 and ::1 signed by it.
package transporttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"
)

// PKI is a test CA and one certificate it signed, valid for loopback
// addresses and "localhost", for both server and client authentication.
type PKI struct {
	// CA is the CA certificate (DER), for a peer process to trust.
	CA   []byte
	Pool *x509.CertPool
	Cert tls.Certificate
}

// New makes a PKI valid for an hour.
func New() (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("test CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "troupe test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("test key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "troupe test node"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("test certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &PKI{CA: caDER, Pool: pool, Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}, nil
}

// Server is a TLS 1.3 server configuration with the certificate.
func (p *PKI) Server() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Cert}, MinVersion: tls.VersionTLS13}
}

// Client is a TLS 1.3 client configuration that trusts the CA.
func (p *PKI) Client() *tls.Config {
	return &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS13}
}

// ClientTrusting is a client configuration that trusts the CA whose DER
// certificate is ca (from another process).
func ClientTrusting(ca []byte) (*tls.Config, error) {
	c, err := x509.ParseCertificate(ca)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}
