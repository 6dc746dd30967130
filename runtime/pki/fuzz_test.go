package pki

import (
	"net"
	"testing"

	"troupe/runtime/transport"
)

// The decoders of bytes that come from the network (a CSR, a CA answer)
// or from disk (PEM files) must return errors, never panic or accept junk.

func FuzzParseCSR(f *testing.F) {
	key, _, _ := NewKey()
	csr, _ := NewCSR(key, Names{CommonName: "n", DNS: []string{"a"}, IPs: []net.IP{net.ParseIP("10.0.0.1")}})
	f.Add(csr)
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})
	f.Add([]byte{})
	ca, _, _ := NewCA("ca", 1)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseCSR(b)
		if err != nil {
			return
		}
		if err := r.CheckSignature(); err != nil {
			t.Fatalf("accepted a request with a bad signature: %v", err)
		}
		if _, err := ca.SignCSR(b, 1); err != nil {
			t.Fatalf("accepted request does not sign: %v", err)
		}
	})
}

func FuzzVerifyCA(f *testing.F) {
	// Derived: the same CA in every fuzz worker process.
	ca, _ := DeriveCA("seed")
	nonce := make([]byte, nonceLen)
	good := &CAResponse{CA: ca.PEM, Proof: Proof("tok", nonce, ca.Cert.Raw)}
	enc, _ := transport.Codec{}.Marshal(good)
	f.Add(enc)
	f.Add([]byte{0x82, 0xa2, 'c', 'a', 0xc4, 0x01, 0x00})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp CAResponse
		if err := (transport.Codec{}).Unmarshal(b, &resp); err != nil {
			return
		}
		got, err := VerifyCA(&resp, "tok", nonce, "")
		if err != nil {
			return
		}
		if got.Hash() != ca.Hash() {
			t.Fatalf("trusted a CA (%s) without the token's proof", got.Hash())
		}
	})
}

func FuzzParsePEM(f *testing.F) {
	ca, keyPEM, _ := NewCA("ca", 1)
	f.Add(ca.PEM)
	f.Add(keyPEM)
	f.Add(append(append([]byte{}, ca.PEM...), keyPEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseCertsPEM(b)
		ParseKeyPEM(b)
		if c, err := ParseCA(b, b); err == nil && c.Key == nil {
			t.Fatal("ParseCA with a key accepted no key")
		}
	})
}
