package client

import (
	"troupe/runtime/pki"
	"troupe/runtime/security"
)

// CAHash returns the pin of the cluster CA the client trusts, "" before
// its first connection or when it runs without TLS.
func (c *Client) CAHash() string {
	if ca := c.sec.CA(); ca != nil {
		return ca.Hash()
	}
	return ""
}

// CA returns the cluster CA the client trusts: nil before its first
// connection or without TLS.
func (c *Client) CA() *pki.CA { return c.sec.CA() }

// Trust returns the client's TLS settings, with the CA once it is known,
// for more clients of the same cluster.
func (c *Client) Trust() security.TLS { return c.sec.TLS() }
