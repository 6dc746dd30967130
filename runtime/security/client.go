package security

import (
	"context"
	"fmt"
	"sync"
	"time"

	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

// fetchTimeout bounds learning the cluster CA from a node.
const fetchTimeout = 10 * time.Second

// Client resolves a client's settings (a CLI command's, a driver's) into
// the transport.Security of its connections. Unless the settings name the
// CA (CAFile, CA) or turn TLS off, the client learns the cluster CA from
// the first node it connects to, which must prove it holds the token
// (pki.FetchCA) and, with CAHash, present a CA of that hash; it trusts
// that CA from then on. Safe for concurrent use.
type Client struct {
	t   TLS    // CAHash parsed
	tok string // the cluster token

	mu  sync.Mutex
	ca  *pki.CA            // the cluster CA once known
	sec transport.Security // with Client set once ca is known, or Insecure
}

// NewClient checks t and applies what needs no node: plaintext, a CA
// given, or a CA file.
func NewClient(token string, t TLS) (*Client, error) {
	c := &Client{t: t, tok: token, sec: transport.Security{Token: token}}
	if t.Insecure {
		if t.CAFile != "" || t.CAHash != "" || t.CA != nil {
			return nil, fmt.Errorf("%w: --insecure turns TLS off: drop --tls-ca/--ca-hash, or --insecure", ErrConfig)
		}
		return c, nil
	}
	pin, err := t.pin()
	if err != nil {
		return nil, err
	}
	c.t.CAHash = pin
	ca := t.CA
	if ca == nil && t.CAFile != "" {
		if ca, err = pki.LoadCA(t.CAFile, ""); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if ca != nil {
		if pin != "" && ca.Hash() != pin {
			return nil, fmt.Errorf("%w: %s: %w: it is %s, want %s", ErrConfig, t.CAFile, pki.ErrCAMismatch, ca.Hash(), pin)
		}
		c.trust(ca)
	}
	return c, nil
}

// trust sets the CA; c.mu is held or c is not shared yet.
func (c *Client) trust(ca *pki.CA) {
	c.ca = ca
	c.sec.Client = pki.ClientTLS(ca)
}

// Security returns the Security of a connection to the node at addr,
// learning the cluster CA from that node when none is known yet.
func (c *Client) Security(ctx context.Context, addr string) (transport.Security, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.Insecure || c.sec.Client != nil {
		return c.sec, nil
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	ca, err := pki.FetchCA(ctx, addr, c.tok, c.t.CAHash)
	if err != nil {
		return transport.Security{}, err
	}
	c.trust(ca)
	return c.sec, nil
}

// CA returns the cluster CA the client trusts: nil before its first
// connection or without TLS.
func (c *Client) CA() *pki.CA {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ca
}

// TLS returns the client's settings, with the CA once it is known, for
// more clients of the same cluster.
func (c *Client) TLS() TLS {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	if c.ca != nil && !t.Insecure {
		t.CA = c.ca
	}
	return t
}
