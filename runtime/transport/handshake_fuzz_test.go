package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzHandshakeDecode: the decoders of the three handshake messages never
// panic, refuse with ErrUnauthenticated, and what they accept encodes
// back to the same bytes.
func FuzzHandshakeDecode(f *testing.F) {
	h := hello{version: HandshakeVersion, flags: flagToken}
	h.nonce[3] = 7
	p := proof{version: HandshakeVersion, flags: flagToken}
	p.mac[0] = 1
	a := answer{status: statusBadToken}
	f.Add(appendPreamble(nil))
	f.Add(appendHello(nil, &h))
	f.Add(appendProof(nil, &p))
	f.Add(appendAnswer(nil, &a))
	f.Add([]byte("TRPA"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(bytes.Repeat([]byte{0xff}, proofLen))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(what string, err error, ok bool, back []byte) {
			if err != nil {
				if !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("%s: error %v does not match ErrUnauthenticated", what, err)
				}
				return
			}
			if ok && !bytes.Equal(back, b) {
				t.Errorf("%s: %x re-encodes as %x", what, b, back)
			}
		}
		if v, err := parsePreamble(b); err == nil {
			check("preamble", nil, true, append(append([]byte(nil), handshakeMagic...), v))
		} else {
			check("preamble", err, false, nil)
		}
		hh, err := parseHello(b)
		check("hello", err, err == nil, appendHello(nil, &hh))
		pp, err := parseProof(b)
		check("proof", err, err == nil, appendProof(nil, &pp))
		aa, err := parseAnswer(b)
		check("answer", err, err == nil, appendAnswer(nil, &aa))
	})
}

// FuzzServerHandshake: whatever a client sends, the server's side of the
// handshake ends (no hang, no panic) and accepts nothing but a proof of
// the token.
func FuzzServerHandshake(f *testing.F) {
	f.Add(appendPreamble(nil))
	p := proof{version: HandshakeVersion, flags: flagToken}
	f.Add(append(appendPreamble(nil), appendProof(nil, &p)...))
	f.Add(append(appendPreamble(nil), bytes.Repeat([]byte{0}, proofLen)...))
	f.Add([]byte("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")) // a TLS ClientHello's start
	f.Fuzz(func(t *testing.T, in []byte) {
		c, s := net.Pipe()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		go io.Copy(io.Discard, c) // the hello and answer
		go func() {
			c.Write(in)
			c.Close() // then EOF: the server stops waiting for more
		}()
		conn, _, err := serverHandshake(s, "tok", nil, defaultSpin, 2*time.Second)
		s.Close()
		c.Close()
		if err == nil {
			t.Fatalf("accepted %x without a proof of the token (%v)", in, conn)
		}
	})
}

// FuzzClientHandshake: whatever a server sends, the client's side ends
// with an error (no hang, no panic): no server without the token passes.
func FuzzClientHandshake(f *testing.F) {
	h := hello{version: HandshakeVersion, flags: flagToken}
	f.Add(appendHello(nil, &h))
	a := answer{status: statusOK}
	f.Add(append(appendHello(nil, &h), appendAnswer(nil, &a)...))
	h.flags = 0
	f.Add(append(appendHello(nil, &h), appendAnswer(nil, &a)...))
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, s := net.Pipe()
		s.SetDeadline(time.Now().Add(2 * time.Second))
		go io.Copy(io.Discard, s) // the preamble and proof
		go func() {
			s.Write(in)
			s.Close() // then EOF: the client stops waiting for more
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := clientHandshake(ctx, c, "tok", nil, "", defaultSpin)
		c.Close()
		s.Close()
		if err == nil {
			t.Fatalf("a server without the token passed with %x (%v)", in, conn)
		}
	})
}
