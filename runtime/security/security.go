// Package security owns a troupe process's security settings: the cluster
// token, TLS on or off, the CA it trusts and the certificate it presents.
// It resolves them from flags, the environment and files (a node's data
// dir, the operator's PEM files) into the one transport.Security that every
// connection is made with: a node's (ResolveNode), and a client's, driver's
// or CLI command's (Client).
//
// TLS is the settings, the same type for all of them; the CLI fills it from
// its flags, FromEnv from the environment. Errors are sentinels matched
// with errors.Is: ErrConfig for settings that contradict each other,
// ErrNoToken, ErrUnreachable for a node that found no one to certify it;
// pki's and transport's errors come through wrapped.
package security

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"troupe/runtime/pki"
)

// Environment variables read by FromEnv and Token.
const (
	EnvToken    = "TROUPE_TOKEN"
	EnvInsecure = "TROUPE_INSECURE" // "1" turns TLS off
	EnvCAHash   = "TROUPE_CA_HASH"
	EnvTLSCA    = "TROUPE_TLS_CA"
)

// Errors, matched with errors.Is.
var (
	// ErrConfig: the settings contradict each other or name something
	// unusable (a malformed --ca-hash, unreadable certificates).
	ErrConfig = errors.New("invalid TLS settings")
	// ErrNoToken: no cluster token was found anywhere.
	ErrNoToken = errors.New("no cluster token: pass --token, set TROUPE_TOKEN, or --data-dir of a node (its token file)")
	// ErrUnreachable: a node needing a certificate reached none of its join
	// addresses within its join timeout.
	ErrUnreachable = errors.New("TLS bootstrap: no node answered")
)

// TLS is how a process secures its TCP connections: the one set of TLS
// settings of nodes, clients, drivers and the CLI. The zero value is TLS
// on, trusting the cluster CA that a node proves it holds the token for.
type TLS struct {
	// Insecure turns TLS off: plaintext TCP, the token still checked. For
	// networks the operator trusts (and for measuring TLS's cost).
	Insecure bool
	// CAFile trusts this CA certificate (PEM) and no other. On a node it is
	// the operator's CA, given with CertFile and KeyFile (all three or
	// none).
	CAFile string
	// CertFile and KeyFile are a node's own certificate and key (PEM),
	// signed by CAFile's CA.
	CertFile, KeyFile string
	// CAHash pins the cluster CA ("sha256:…", its public key's SHA-256): a
	// CA with another hash is refused. Empty: the CA is trusted because
	// the node it came from proved it holds the token.
	CAHash string
	// SANs are extra host names or IPs for a node's certificate (besides
	// its addresses, host name and localhost).
	SANs []string
	// CA trusts this CA and no other: one learned by another Client.
	CA *pki.CA
}

// FromEnv returns the TLS settings of the environment: TROUPE_INSECURE=1,
// TROUPE_CA_HASH and TROUPE_TLS_CA.
func FromEnv() TLS {
	return TLS{Insecure: os.Getenv(EnvInsecure) == "1", CAHash: os.Getenv(EnvCAHash), CAFile: os.Getenv(EnvTLSCA)}
}

// WithDataDir returns t trusting the CA of the node whose data dir, on
// this machine, is dir (<dir>/tls/ca.pem), when t names no CA of its own
// and TLS is on.
func (t TLS) WithDataDir(dir string) TLS {
	if t.Insecure || t.CAFile != "" || t.CA != nil || dir == "" {
		return t
	}
	if p := filepath.Join(pki.Dir(dir), pki.CAFile); exists(p) {
		t.CAFile = p
	}
	return t
}

// pin returns the parsed CAHash ("" for none).
func (t TLS) pin() (string, error) {
	if t.CAHash == "" {
		return "", nil
	}
	h, err := pki.ParseHash(t.CAHash)
	if err != nil {
		return "", fmt.Errorf("%w: --ca-hash: %w", ErrConfig, err)
	}
	return h, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
