package pki

import (
	"crypto"
	"errors"
	"fmt"

	"troupe/runtime/transport"
)

// Export returns, in PEM, what a Security made from an Identity presents:
// the CA, the certificate chain and its key, for handing the node's TLS
// identity to its worker processes over their private control channel
// (they listen on the node's addresses). ok is false when sec has no TLS.
func Export(sec transport.Security) (caPEM, certPEM, keyPEM []byte, ok bool, err error) {
	if sec.Server == nil || len(sec.Server.Certificates) == 0 {
		return nil, nil, nil, false, nil
	}
	c := sec.Server.Certificates[0]
	if len(c.Certificate) < 2 {
		return nil, nil, nil, false, errors.New("export TLS identity: the chain does not end with the CA")
	}
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pemBlock("CERTIFICATE", der)...)
	}
	caPEM = pemBlock("CERTIFICATE", c.Certificate[len(c.Certificate)-1])
	signer, isSigner := c.PrivateKey.(crypto.Signer)
	if !isSigner {
		return nil, nil, nil, false, fmt.Errorf("export TLS identity: key of type %T", c.PrivateKey)
	}
	if keyPEM, err = MarshalKeyPEM(signer); err != nil {
		return nil, nil, nil, false, err
	}
	return caPEM, certPEM, keyPEM, true, nil
}

// Import is the inverse of Export: the Security of a process that holds
// the node's identity, with token.
func Import(token string, caPEM, certPEM, keyPEM []byte) (transport.Security, error) {
	ca, err := ParseCA(caPEM, nil)
	if err != nil {
		return transport.Security{}, fmt.Errorf("import TLS identity: %w", err)
	}
	id, err := NewIdentity(ca, certPEM, keyPEM)
	if err != nil {
		return transport.Security{}, fmt.Errorf("import TLS identity: %w", err)
	}
	return transport.Security{Token: token, Server: id.ServerTLS(), Client: id.ClientTLS()}, nil
}

// Security returns the credentials of a process with this identity.
func (id *Identity) Security(token string) transport.Security {
	return transport.Security{Token: token, Server: id.ServerTLS(), Client: id.ClientTLS()}
}
