package client

import (
	"context"
	"fmt"
	"time"

	"troupe/runtime/pki"
)

// TLS is how a Client secures its connections. The zero value is TLS,
// trusting the CA the first node reached proves with the token.
type TLS struct {
	// Insecure: plaintext, for a cluster started with --insecure.
	Insecure bool
	// CAFile trusts this CA certificate (PEM) and no other.
	CAFile string
	// CAHash pins the cluster CA: the one a node presents must have it.
	CAHash string
	// CA trusts this CA and no other (one learned by another Client).
	CA *pki.CA
}

// initTLS applies the settings that need no node: plaintext, or a CA file.
func (c *Client) initTLS() error {
	t := c.trust
	switch {
	case t.Insecure && (t.CAFile != "" || t.CAHash != "" || t.CA != nil):
		return fmt.Errorf("cluster client: --insecure turns TLS off: drop --tls-ca/--ca-hash, or --insecure")
	case t.Insecure:
		return nil
	case t.CAHash != "":
		h, err := pki.ParseHash(t.CAHash)
		if err != nil {
			return fmt.Errorf("cluster client: %w", err)
		}
		c.trust.CAHash = h
	}
	if t.CA != nil {
		c.ca = t.CA
		c.opts.Security.Client = pki.ClientTLS(t.CA)
		return nil
	}
	if t.CAFile != "" {
		ca, err := pki.LoadCA(t.CAFile, "")
		if err != nil {
			return fmt.Errorf("cluster client: %w", err)
		}
		if c.trust.CAHash != "" && ca.Hash() != c.trust.CAHash {
			return fmt.Errorf("cluster client: %s: %w: it is %s, want %s", t.CAFile, pki.ErrCAMismatch, ca.Hash(), c.trust.CAHash)
		}
		c.ca = ca
		c.opts.Security.Client = pki.ClientTLS(ca)
	}
	return nil
}

// secureLocked learns the cluster CA from the node at addr (pki.FetchCA)
// the first time a connection is made. c.mu is held.
func (c *Client) secureLocked(addr string) error {
	if c.trust.Insecure || c.opts.Security.Client != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := pki.FetchCA(ctx, addr, c.opts.Security.Token, c.trust.CAHash)
	if err != nil {
		return err
	}
	c.ca = ca
	c.opts.Security.Client = pki.ClientTLS(ca)
	return nil
}

// CAHash returns the pin of the cluster CA the client trusts, "" before
// its first connection or when it runs without TLS.
func (c *Client) CAHash() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ca == nil {
		return ""
	}
	return c.ca.Hash()
}

// CA returns the cluster CA the client trusts: nil before its first
// connection or without TLS.
func (c *Client) CA() *pki.CA {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ca
}

// Trust returns the client's TLS settings, with the CA once it is known,
// for more clients of the same cluster.
func (c *Client) Trust() TLS {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trust
	if c.ca != nil && !t.Insecure {
		t.CA = c.ca
	}
	return t
}
