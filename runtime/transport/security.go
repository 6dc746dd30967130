package transport

import (
	"crypto/tls"
	"time"
)

// Security is how every TCP connection between troupe processes is
// authenticated and encrypted: gRPC, raft, the worker call ports
// (runtime/wire), the object store (runtime/objstore), job uploads and logs.
// It is the one connection layer of the cluster: a listener or a dialer is
// given a Security and nothing else about credentials.
//
// The node daemon fills it from the cluster CA (or the operator's
// certificates) and the token; the embedded single-process cluster uses the
// zero value, as it opens no TCP port.
type Security struct {
	// Token is the cluster token. A listener refuses a peer that does not
	// prove it before it reads anything else; a dialer proves it. Empty turns
	// authentication off (--insecure, the embedded cluster).
	Token string
	// Server is the TLS configuration of listeners; nil means plaintext.
	Server *tls.Config
	// Client is the TLS configuration of dialers; nil means plaintext.
	Client *tls.Config
	// Spin is the longest a read of a TLS connection, and of a plaintext
	// one of runtime/wire, polls its socket before it parks (spin.go):
	// 0 means DefaultSpin, negative turns polling off.
	Spin time.Duration
}

// TLS reports whether connections are encrypted.
func (s Security) TLS() bool { return s.Server != nil || s.Client != nil }
