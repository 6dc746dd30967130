package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Validity defaults, in days (those of `consul tls`: a CA for 5 years, a
// certificate for 1).
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// File names in a node's TLS directory (<data-dir>/tls).
const (
	CAFile      = "ca.pem"
	CAKeyFile   = "ca-key.pem"
	CertFile    = "node.pem"
	KeyFile     = "node-key.pem"
	dirName     = "tls"
	maxPEMBytes = 1 << 20 // a PEM file or message larger than this is not a certificate
)

// Dir returns the TLS directory inside a node's data dir.
func Dir(dataDir string) string { return filepath.Join(dataDir, dirName) }

// Errors, matched with errors.Is.
var (
	// ErrCAMismatch: the CA a node presented does not match the pinned hash.
	ErrCAMismatch = errors.New("cluster CA does not match the pinned --ca-hash")
	// ErrBadProof: the node that sent the CA did not prove it holds the
	// cluster token (wrong token on one side, or not a node of this cluster).
	ErrBadProof = errors.New("the node did not prove it holds the cluster token")
	// ErrExists: a file to create exists already (refusing to overwrite).
	ErrExists = errors.New("file exists; refusing to overwrite it")
	// ErrMalformed: bytes are not a valid PEM certificate, key or CSR.
	ErrMalformed = errors.New("malformed certificate, key or request")
	// ErrExpired: a certificate is outside its validity period.
	ErrExpired = errors.New("certificate expired or not yet valid")
	// ErrNoCAKey: this process cannot sign (it holds the CA certificate
	// but not its key, e.g. operator-provided certificates).
	ErrNoCAKey = errors.New("this node does not hold the cluster CA's key")
	// ErrNotClusterCA: a node's certificate does not verify against the CA
	// this process trusts (a node of another cluster, or the wrong CA file).
	ErrNotClusterCA = errors.New("not from this cluster's CA")
)

// CA is a certificate authority: its certificate, and its key when this
// process holds it.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte        // Cert, PEM-encoded
	Key  crypto.Signer // nil: cannot sign
}

// Hash returns the CA's pin: "sha256:" and the hex SHA-256 of its
// SubjectPublicKeyInfo (the form of kubeadm's --discovery-token-ca-cert-hash).
func (ca *CA) Hash() string { return Hash(ca.Cert) }

// Hash returns the pin of a CA certificate (see CA.Hash).
func Hash(c *x509.Certificate) string {
	s := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(s[:])
}

// ParseHash checks a pin given by a user: "sha256:" and 64 hex digits (the
// prefix may be left out). It returns the normalized form.
func ParseHash(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	h = strings.TrimPrefix(h, "sha256:")
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA hash %q: want sha256: and 64 hex digits (as printed by `troupe start --head` and `troupe status`)", s)
	}
	return "sha256:" + h, nil
}

// Pool returns a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// NewCA makes a CA with a new ECDSA P-256 key, valid for days days. It
// returns the CA and its key, PEM-encoded.
func NewCA(commonName string, days int) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"troupe"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Duration(days) * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := MarshalKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := ParseCA(pemBlock("CERTIFICATE", der), keyPEM)
	return ca, keyPEM, err
}

// DeriveCA returns the CA that every server started with
// --bootstrap-expect and the same token derives by itself (there is no head
// to make one): an Ed25519 key from HKDF-SHA256 of the token and a
// certificate made from a fixed template, so that all of them hold the same
// CA, with the same hash. Its strength is the token's: anyone with the
// token could sign certificates, as anyone with the token can ask a node to.
func DeriveCA(token string) (*CA, error) {
	if token == "" {
		return nil, errors.New("derive CA: empty token")
	}
	seed, err := hkdf.Key(sha256.New, []byte(token), []byte("troupe-cluster-ca"), "troupe derived CA v1", ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("derive CA: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	sum := sha256.Sum256(key.Public().(ed25519.PublicKey))
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(sum[:16]),
		Subject:               pkix.Name{CommonName: "troupe cluster CA (derived)", Organization: []string{"troupe"}},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          sum[:20],
	}
	// Ed25519 signatures are deterministic: rand is not read.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("derive CA: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("derive CA: %w", err)
	}
	return &CA{Cert: c, PEM: pemBlock("CERTIFICATE", der), Key: key}, nil
}

// ParseCA parses a CA certificate and, when keyPEM is not empty, its key,
// checking that the certificate is a CA and that the key is its own.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		return nil, err
	}
	c := certs[0]
	if !c.IsCA || !c.BasicConstraintsValid {
		return nil, fmt.Errorf("%w: certificate %q is not a CA", ErrMalformed, c.Subject.CommonName)
	}
	ca := &CA{Cert: c, PEM: pemBlock("CERTIFICATE", c.Raw)}
	if len(keyPEM) == 0 {
		return ca, nil
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !samePublic(key.Public(), c.PublicKey) {
		return nil, fmt.Errorf("%w: the CA key does not belong to CA %q", ErrMalformed, c.Subject.CommonName)
	}
	ca.Key = key
	return ca, nil
}

// LoadCA reads a CA certificate file and, when keyFile is not empty, its key.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cb, err := readSmall(certFile)
	if err != nil {
		return nil, err
	}
	var kb []byte
	if keyFile != "" {
		if kb, err = readSmall(keyFile); err != nil {
			return nil, err
		}
	}
	ca, err := ParseCA(cb, kb)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certFile, err)
	}
	return ca, nil
}

// LoadOrCreateCA loads the CA kept in dir (ca.pem and ca-key.pem), or makes
// one and saves it there, the key with mode 0600. created reports which.
func LoadOrCreateCA(dir string) (ca *CA, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if _, err := os.Stat(certPath); err == nil {
		ca, err := LoadCA(certPath, keyPath)
		if err != nil {
			return nil, false, err
		}
		return ca, false, CheckValid(ca.Cert, time.Now())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("TLS dir: %w", err)
	}
	ca, keyPEM, err := NewCA("troupe cluster CA", DefaultCADays)
	if err != nil {
		return nil, false, err
	}
	// The key first: a crash between the two leaves no CA without its key.
	if err := WriteNew(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := WriteNew(certPath, ca.PEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// Names are what a certificate is for: its common name and SANs.
type Names struct {
	CommonName string
	DNS        []string
	IPs        []net.IP
}

// Issue signs a certificate for pub with the given names, valid for days
// days, usable by servers and clients (nodes are both).
func (ca *CA) Issue(pub crypto.PublicKey, n Names, days int) ([]byte, error) {
	if ca.Key == nil {
		return nil, ErrNoCAKey
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(time.Duration(days) * 24 * time.Hour)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: n.CommonName, Organization: []string{"troupe"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     n.DNS,
		IPAddresses:  n.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", n.CommonName, err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// SignCSR checks a certificate request (DER) and signs it with the names
// it asks for.
func (ca *CA) SignCSR(csrDER []byte, days int) ([]byte, error) {
	csr, err := ParseCSR(csrDER)
	if err != nil {
		return nil, err
	}
	return ca.Issue(csr.PublicKey, Names{CommonName: csr.Subject.CommonName, DNS: csr.DNSNames, IPs: csr.IPAddresses}, days)
}

// maxNames bounds the SANs of a request: a node has a handful of addresses.
const maxNames = 64

// ParseCSR parses a DER certificate request and checks its signature (the
// requester holds the key) and its size.
func ParseCSR(der []byte) (*x509.CertificateRequest, error) {
	if len(der) == 0 || len(der) > maxPEMBytes {
		return nil, fmt.Errorf("%w: certificate request of %d bytes", ErrMalformed, len(der))
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate request: %v", ErrMalformed, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: certificate request signature: %v", ErrMalformed, err)
	}
	if len(csr.DNSNames)+len(csr.IPAddresses) > maxNames || len(csr.URIs)+len(csr.EmailAddresses) > 0 {
		return nil, fmt.Errorf("%w: certificate request: at most %d DNS and IP names, and no others", ErrMalformed, maxNames)
	}
	return csr, nil
}

// NewKey makes a node's ECDSA P-256 key and returns it with its PEM form.
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	p, err := MarshalKeyPEM(key)
	return key, p, err
}

// NewCSR makes a certificate request (DER) for key with the given names.
func NewCSR(key crypto.Signer, n Names) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: n.CommonName}, DNSNames: n.DNS, IPAddresses: n.IPs}, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return der, nil
}

// ParseCertsPEM parses one or more PEM certificates (a chain: leaf first).
func ParseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%w: %d bytes of PEM", ErrMalformed, len(b))
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: PEM block %q, want CERTIFICATE", ErrMalformed, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no PEM certificate found", ErrMalformed)
	}
	return out, nil
}

// MarshalKeyPEM encodes a private key as PKCS #8 PEM.
func MarshalKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// ParseKeyPEM parses a PKCS #8, EC or PKCS #1 private key in PEM.
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM private key found", ErrMalformed)
	}
	var key any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("%w: PEM block %q is not a private key", ErrMalformed, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: private key: %v", ErrMalformed, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: key of type %T cannot sign", ErrMalformed, key)
	}
	return s, nil
}

// CheckValid reports ErrExpired, with the dates, when now is outside c's
// validity period.
func CheckValid(c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return fmt.Errorf("%w: %q expired on %s", ErrExpired, c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return fmt.Errorf("%w: %q is valid only from %s (is this machine's clock right?)", ErrExpired, c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// WriteNew writes a new file with mode perm, refusing (ErrExists) to
// overwrite one.
func WriteNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeReplace writes path through a temporary file and a rename, so a
// reader sees the old or the new content, never part of it.
func writeReplace(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := WriteNew(tmp, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

func readSmall(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if fi.Size() > maxPEMBytes {
		return nil, fmt.Errorf("read %s: %w: %d bytes is not a PEM certificate or key", path, ErrMalformed, fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func samePublic(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := a.(equaler); ok {
		return e.Equal(b)
	}
	ab, err1 := x509.MarshalPKIXPublicKey(a)
	bb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

// Identity is a process's TLS identity: the cluster CA, and its own
// certificate and key (none for a client that only verifies nodes).
type Identity struct {
	CA   *CA
	Cert *tls.Certificate // leaf and CA chain with the key; nil: none
	Leaf *x509.Certificate
}

// NewIdentity pairs a certificate (PEM, leaf first) and its key (PEM) with
// the CA, checking that the key is the certificate's, that the CA signed
// it and that it is valid now.
func NewIdentity(ca *CA, certPEM, keyPEM []byte) (*Identity, error) {
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	leaf := certs[0]
	if !samePublic(key.Public(), leaf.PublicKey) {
		return nil, fmt.Errorf("%w: the key does not belong to certificate %q", ErrMalformed, leaf.Subject.CommonName)
	}
	if err := CheckValid(leaf, time.Now()); err != nil {
		return nil, err
	}
	if err := verifyChain(ca.Pool(), certs, x509.ExtKeyUsageAny); err != nil {
		return nil, fmt.Errorf("certificate %q: not signed by CA %q: %w", leaf.Subject.CommonName, ca.Cert.Subject.CommonName, err)
	}
	chain := [][]byte{leaf.Raw}
	for _, c := range certs[1:] {
		chain = append(chain, c.Raw)
	}
	if len(certs) == 1 && !bytes.Equal(leaf.Raw, ca.Cert.Raw) {
		chain = append(chain, ca.Cert.Raw) // send the CA along: joiners learn it from the handshake
	}
	return &Identity{CA: ca, Leaf: leaf, Cert: &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}}, nil
}

// LoadIdentity reads a CA file, a certificate file and its key file.
func LoadIdentity(caFile, certFile, keyFile string) (*Identity, error) {
	ca, err := LoadCA(caFile, "")
	if err != nil {
		return nil, err
	}
	cb, err := readSmall(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := readSmall(keyFile)
	if err != nil {
		return nil, err
	}
	id, err := NewIdentity(ca, cb, kb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	return id, nil
}

func verifyChain(roots *x509.CertPool, certs []*x509.Certificate, usage x509.ExtKeyUsage) error {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			return fmt.Errorf("%w: %w", ErrExpired, err)
		}
	}
	return err
}

// ServerTLS is the configuration of the process's listeners: it presents
// its certificate (with the CA) and verifies a client certificate against
// the CA when one is sent. Listeners that admit only nodes (raft) require
// one: set ClientAuth to tls.RequireAndVerifyClientCert on a clone.
func (id *Identity) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*id.Cert},
		ClientCAs:    id.CA.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
}

// ClientTLS is the configuration of the process's dialers: it verifies the
// node's chain against the CA (not its host name: see the package doc) and
// presents the process's certificate, if it has one (mutual TLS).
func (id *Identity) ClientTLS() *tls.Config {
	cfg := ClientTLS(id.CA)
	if id.Cert != nil {
		cfg.Certificates = []tls.Certificate{*id.Cert}
	}
	return cfg
}

// ClientTLS is the configuration of a dialer that trusts ca and presents
// no certificate (a CLI command, a driver before it has one).
func ClientTLS(ca *CA) *tls.Config {
	roots := ca.Pool()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection, against the cluster CA
		// and without the host name (see the package doc).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the node sent no certificate")
			}
			if err := verifyChain(roots, cs.PeerCertificates, x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("node certificate %q is %w (%s): %w",
					cs.PeerCertificates[0].Subject.CommonName, ErrNotClusterCA, Hash(ca.Cert), err)
			}
			return nil
		},
	}
}
