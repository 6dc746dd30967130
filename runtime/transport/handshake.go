package transport

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"troupe/runtime/api"
)

// The connection handshake of the cluster's own TCP protocols (the worker
// call ports of runtime/wire, the object store of runtime/objstore) and of
// their Unix sockets. A listener wrapped by Security.Wrap runs it on every
// accepted connection before handing it to the server, so a peer that does
// not hold the cluster token never reaches a decoder of the protocol.
//
// When Security has TLS configurations, TLS comes first and the handshake
// runs inside it, bound to the TLS session (a keying-material exporter is
// part of each MAC), so a proof cannot be relayed into another session.
// Without TLS the token still never crosses the wire: each side proves it
// with an HMAC over nonces of both sides (an eavesdropper sees MACs of
// random nonces, which tell nothing of a random token). Without TLS the
// connection is authenticated, not protected: an active attacker on the
// path could take it over after the handshake, which is what TLS is for.
//
//	client → server  preamble: "TRPA" | u8 version
//	server → client  hello:  "TRPA" | u8 version | u8 flags | 32 server nonce
//	client → server  proof:  u8 version | u8 flags | 32 client nonce | 32 client MAC
//	server → client  answer: u8 status | 32 server MAC
//
// The client speaks first, so a plaintext peer of a TLS side (or the
// reverse) fails at its first bytes instead of waiting for a deadline; the
// handshake costs two round trips (after TLS's), once per connection.
// flags bit 0 says the side holds a token. The MACs are HMAC-SHA256 keyed
// by the token, over a label ("troupe-auth v1 client" or "... server"),
// the version, both nonces and the TLS binding (empty without TLS). The
// client checks the server's MAC too: a server that does not hold the
// token (or runs without one) is refused by a client that has one. status
// is 0 when the server accepts; otherwise it names what was wrong and the
// server closes the connection.

// HandshakeVersion is the version of the connection handshake this side
// speaks.
const HandshakeVersion = 1

// HandshakeTimeout bounds a connection's handshake (TLS included) on either
// side; a peer that sends nothing is dropped after it.
const HandshakeTimeout = 10 * time.Second

// MaxPendingHandshakes bounds the handshakes a listener runs at once;
// connections beyond it are closed at once (and counted as refused).
const MaxPendingHandshakes = 256

// ErrUnauthenticated: the peer failed the handshake (no token, a wrong
// one, a malformed handshake, a TLS failure). It is api.ErrUnauthenticated,
// so errors.Is holds across processes.
var ErrUnauthenticated = api.ErrUnauthenticated

const (
	handshakeMagic = "TRPA"
	nonceLen       = 32
	macLen         = sha256.Size
	preambleLen    = len(handshakeMagic) + 1
	helloLen       = len(handshakeMagic) + 2 + nonceLen
	proofLen       = 2 + nonceLen + macLen
	answerLen      = 1 + macLen

	flagToken = 1 << 0

	labelClient = "troupe-auth v1 client"
	labelServer = "troupe-auth v1 server"
	// exporterLabel names the TLS keying material the MACs are bound to.
	exporterLabel = "EXPORTER-troupe-auth"
)

// Answer statuses.
const (
	statusOK       = 0
	statusBadToken = 1 // the proof does not match the server's token
	statusNoToken  = 2 // the client holds no token, the server requires one
	statusVersion  = 3 // the server does not speak the client's version
	nStatus        = 4
)

var statusText = [nStatus]string{
	statusOK:       "accepted",
	statusBadToken: "wrong cluster token",
	statusNoToken:  "no cluster token given; this cluster requires one",
	statusVersion:  "unsupported handshake version",
}

func appendPreamble(b []byte) []byte {
	return append(append(b, handshakeMagic...), HandshakeVersion)
}

// parsePreamble decodes a client preamble and returns its version.
func parsePreamble(b []byte) (byte, error) {
	if len(b) != preambleLen {
		return 0, fmt.Errorf("%w: preamble of %d bytes, want %d", ErrUnauthenticated, len(b), preambleLen)
	}
	if string(b[:len(handshakeMagic)]) != handshakeMagic {
		return 0, fmt.Errorf("%w: the peer is not a troupe client (it began with %q)", ErrUnauthenticated, b[:len(handshakeMagic)])
	}
	if b[len(handshakeMagic)] == 0 {
		return 0, fmt.Errorf("%w: preamble with version 0", ErrUnauthenticated)
	}
	return b[len(handshakeMagic)], nil
}

// hello is the server's opening message.
type hello struct {
	version, flags byte
	nonce          [nonceLen]byte
}

func appendHello(b []byte, h *hello) []byte {
	b = append(b, handshakeMagic...)
	b = append(b, h.version, h.flags)
	return append(b, h.nonce[:]...)
}

// parseHello decodes a server hello.
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloLen {
		return h, fmt.Errorf("%w: hello of %d bytes, want %d", ErrUnauthenticated, len(b), helloLen)
	}
	if string(b[:len(handshakeMagic)]) != handshakeMagic {
		return h, fmt.Errorf("%w: the peer is not a troupe listener (hello begins %q)", ErrUnauthenticated, b[:len(handshakeMagic)])
	}
	b = b[len(handshakeMagic):]
	h.version, h.flags = b[0], b[1]
	if h.version == 0 {
		return h, fmt.Errorf("%w: hello with version 0", ErrUnauthenticated)
	}
	copy(h.nonce[:], b[2:])
	return h, nil
}

// proof is the client's answer to a hello.
type proof struct {
	version, flags byte
	nonce          [nonceLen]byte
	mac            [macLen]byte
}

func appendProof(b []byte, p *proof) []byte {
	b = append(b, p.version, p.flags)
	b = append(b, p.nonce[:]...)
	return append(b, p.mac[:]...)
}

// parseProof decodes a client proof.
func parseProof(b []byte) (proof, error) {
	var p proof
	if len(b) != proofLen {
		return p, fmt.Errorf("%w: proof of %d bytes, want %d", ErrUnauthenticated, len(b), proofLen)
	}
	p.version, p.flags = b[0], b[1]
	if p.version == 0 {
		return p, fmt.Errorf("%w: proof with version 0", ErrUnauthenticated)
	}
	copy(p.nonce[:], b[2:2+nonceLen])
	copy(p.mac[:], b[2+nonceLen:])
	return p, nil
}

// answer is the server's verdict.
type answer struct {
	status byte
	mac    [macLen]byte
}

func appendAnswer(b []byte, a *answer) []byte {
	b = append(b, a.status)
	return append(b, a.mac[:]...)
}

// parseAnswer decodes a server answer.
func parseAnswer(b []byte) (answer, error) {
	var a answer
	if len(b) != answerLen {
		return a, fmt.Errorf("%w: answer of %d bytes, want %d", ErrUnauthenticated, len(b), answerLen)
	}
	a.status = b[0]
	if a.status >= nStatus {
		return a, fmt.Errorf("%w: answer with unknown status %d", ErrUnauthenticated, a.status)
	}
	copy(a.mac[:], b[1:])
	return a, nil
}

// handshakeMAC is the proof of holding token for one side of a handshake.
func handshakeMAC(token, label string, version byte, server, client *[nonceLen]byte, binding []byte) (sum [macLen]byte) {
	h := hmac.New(sha256.New, []byte(token))
	h.Write([]byte(label))
	h.Write([]byte{version})
	h.Write(server[:])
	h.Write(client[:])
	h.Write(binding)
	h.Sum(sum[:0])
	return sum
}

// tlsBinding is the keying material the MACs of a TLS connection are bound
// to; nil for a plain connection.
func tlsBinding(nc net.Conn) ([]byte, error) {
	tc, ok := nc.(*tlsConn)
	if !ok {
		return nil, nil
	}
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS binding: %v", ErrUnauthenticated, err)
	}
	return b, nil
}

// refusal is why a listener refused a connection (an AuthStats field).
type refusal int

const (
	refusedNone refusal = iota
	refusedBadToken
	refusedNoToken
	refusedJunk // malformed, silent or too slow: not a troupe peer
	refusedTLS
	refusedPeer // a Unix socket peer of another user
	refusedOverload
)

// serverHandshake authenticates the peer of an accepted connection: TLS
// first when tlsConf is set, then the token. It returns the connection to
// serve (the TLS one, or nc itself) with its deadline cleared; a TLS
// connection's reads poll for at most spin.
func serverHandshake(nc net.Conn, token string, tlsConf *tls.Config, spin, timeout time.Duration) (net.Conn, refusal, error) {
	nc.SetDeadline(time.Now().Add(timeout))
	if tlsConf != nil {
		raw := newBatchConn(nc, spin)
		tc := tls.Server(raw, tlsConf)
		if err := tc.Handshake(); err != nil {
			return nil, refusedTLS, fmt.Errorf("%w: TLS: %v", ErrUnauthenticated, err)
		}
		nc = &tlsConn{Conn: tc, raw: raw}
	}
	binding, err := tlsBinding(nc)
	if err != nil {
		return nil, refusedTLS, err
	}
	h := hello{version: HandshakeVersion}
	if token != "" {
		h.flags |= flagToken
	}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return nil, refusedJunk, fmt.Errorf("handshake nonce: %w", err)
	}
	var buf [preambleLen + proofLen]byte
	if _, err := io.ReadFull(nc, buf[:preambleLen]); err != nil {
		return nil, refusedJunk, fmt.Errorf("%w: no preamble: %v", ErrUnauthenticated, err)
	}
	if _, err := parsePreamble(buf[:preambleLen]); err != nil {
		return nil, refusedJunk, err
	}
	if _, err := nc.Write(appendHello(make([]byte, 0, helloLen), &h)); err != nil {
		return nil, refusedJunk, fmt.Errorf("%w: send hello: %v", ErrUnauthenticated, err)
	}
	if _, err := io.ReadFull(nc, buf[preambleLen:]); err != nil {
		return nil, refusedJunk, fmt.Errorf("%w: no proof: %v", ErrUnauthenticated, err)
	}
	p, err := parseProof(buf[preambleLen:])
	if err != nil {
		return nil, refusedJunk, err
	}
	a := answer{status: statusOK}
	why := refusedNone
	switch {
	case p.version != HandshakeVersion:
		a.status, why = statusVersion, refusedJunk
	case token == "":
		// Authentication is off: anyone is accepted.
	case p.flags&flagToken == 0:
		a.status, why = statusNoToken, refusedNoToken
	default:
		want := handshakeMAC(token, labelClient, p.version, &h.nonce, &p.nonce, binding)
		if !hmac.Equal(want[:], p.mac[:]) {
			a.status, why = statusBadToken, refusedBadToken
		} else {
			a.mac = handshakeMAC(token, labelServer, p.version, &h.nonce, &p.nonce, binding)
		}
	}
	_, werr := nc.Write(appendAnswer(make([]byte, 0, answerLen), &a))
	if a.status != statusOK {
		return nil, why, fmt.Errorf("%w: %s (client version %d)", ErrUnauthenticated, statusText[a.status], p.version)
	}
	if werr != nil {
		return nil, refusedJunk, fmt.Errorf("%w: send answer: %v", ErrUnauthenticated, werr)
	}
	nc.SetDeadline(time.Time{})
	return nc, refusedNone, nil
}

// clientHandshake proves the token on a dialled connection: TLS first when
// tlsConf is set (serverName is checked against the certificate unless the
// configuration names one), then the token. The deadline is ctx's or
// HandshakeTimeout, whichever comes first; it is cleared on success. A TLS
// connection's reads poll for at most spin.
func clientHandshake(ctx context.Context, nc net.Conn, token string, tlsConf *tls.Config, serverName string, spin time.Duration) (net.Conn, error) {
	dl := time.Now().Add(HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	nc.SetDeadline(dl)
	// Cancellation interrupts the handshake's reads and writes.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	}
	if tlsConf != nil {
		if tlsConf.ServerName == "" && serverName != "" {
			tlsConf = tlsConf.Clone()
			tlsConf.ServerName = serverName
		}
		raw := newBatchConn(nc, spin)
		tc := tls.Client(raw, tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fail(fmt.Errorf("%w: TLS: %v", ErrUnauthenticated, err))
		}
		nc = &tlsConn{Conn: tc, raw: raw, client: true}
	}
	binding, err := tlsBinding(nc)
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(appendPreamble(make([]byte, 0, preambleLen))); err != nil {
		return nil, fail(fmt.Errorf("%w: send preamble: %v", ErrUnauthenticated, err))
	}
	var hb [helloLen]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		return nil, fail(fmt.Errorf("%w: no hello from the server: %v", ErrUnauthenticated, err))
	}
	h, err := parseHello(hb[:])
	if err != nil {
		return nil, err
	}
	if h.flags&flagToken != 0 && token == "" {
		return nil, fmt.Errorf("%w: the server requires the cluster token and none was given", ErrUnauthenticated)
	}
	if h.version < HandshakeVersion {
		return nil, fmt.Errorf("%w: the server speaks handshake version %d, this side %d", ErrUnauthenticated, h.version, HandshakeVersion)
	}
	p := proof{version: HandshakeVersion}
	if _, err := rand.Read(p.nonce[:]); err != nil {
		return nil, fmt.Errorf("handshake nonce: %w", err)
	}
	if token != "" {
		p.flags |= flagToken
		p.mac = handshakeMAC(token, labelClient, p.version, &h.nonce, &p.nonce, binding)
	}
	if _, err := nc.Write(appendProof(make([]byte, 0, proofLen), &p)); err != nil {
		return nil, fail(fmt.Errorf("%w: send proof: %v", ErrUnauthenticated, err))
	}
	var ab [answerLen]byte
	if _, err := io.ReadFull(nc, ab[:]); err != nil {
		return nil, fail(fmt.Errorf("%w: no answer from the server: %v", ErrUnauthenticated, err))
	}
	a, err := parseAnswer(ab[:])
	if err != nil {
		return nil, err
	}
	if a.status != statusOK {
		return nil, fmt.Errorf("%w: the server refused: %s", ErrUnauthenticated, statusText[a.status])
	}
	if token != "" {
		if h.flags&flagToken == 0 {
			return nil, fmt.Errorf("%w: the server runs without a cluster token, so it cannot prove it is part of this cluster", ErrUnauthenticated)
		}
		want := handshakeMAC(token, labelServer, p.version, &h.nonce, &p.nonce, binding)
		if !hmac.Equal(want[:], a.mac[:]) {
			return nil, fmt.Errorf("%w: the server does not hold this cluster's token", ErrUnauthenticated)
		}
	}
	if !stop() {
		return nil, ctx.Err() // the cancellation's deadline may be set: unusable
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}
