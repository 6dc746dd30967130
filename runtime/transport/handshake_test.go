package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"troupe/runtime/transport/transporttest"
)

// pipeListener is an in-memory listener: dial hands Accept the server end
// of a net.Pipe.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
	case <-l.closed:
		s.Close()
	}
	return c
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// acceptOne accepts one connection from l in the background.
func acceptOne(l net.Listener) <-chan net.Conn {
	out := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(out)
			return
		}
		out <- c
	}()
	return out
}

// TestHandshakeTokens: the token decides, on both sides, for every
// combination of tokens; refusals are counted by reason.
func TestHandshakeTokens(t *testing.T) {
	cases := []struct {
		name           string
		server, client string
		ok             bool
		serverAccepts  bool                   // the server runs without auth: it accepts anyone
		stat           func(AuthStats) uint64 // the counter a refusal adds to
	}{
		{"same token", "tok", "tok", true, true, nil},
		{"wrong token", "tok", "other", false, false, func(s AuthStats) uint64 { return s.BadToken }},
		{"no token", "tok", "", false, false, nil}, // the client gives up on the hello: the server sees a closed peer
		{"server without a token", "", "tok", false, true, nil},
		{"both without", "", "", true, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pl := newPipeListener()
				l := Security{Token: tc.server}.Wrap(pl)
				defer l.Close()
				got := acceptOne(l)
				before := ProcessAuthStats()
				c, err := Security{Token: tc.client}.Handshake(context.Background(), pl.dial(), "pipe", "pipe")
				if tc.ok != (err == nil) {
					t.Fatalf("handshake: %v, want ok=%v", err, tc.ok)
				}
				if !tc.ok {
					if !errors.Is(err, ErrUnauthenticated) {
						t.Errorf("error %v does not match ErrUnauthenticated", err)
					}
					synctest.Wait()
					select {
					case c, ok := <-got:
						if ok && !tc.serverAccepts {
							t.Fatalf("refused client accepted: %v", c)
						}
						if ok {
							c.Close()
						}
					default:
					}
					after := ProcessAuthStats()
					if tc.stat != nil && tc.stat(after) != tc.stat(before)+1 {
						t.Errorf("refusal not counted: %+v -> %+v", before, after)
					}
					return
				}
				sc := <-got
				// The connection carries data both ways after the handshake.
				go sc.Write([]byte("ping"))
				buf := make([]byte, 4)
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
					t.Fatalf("after handshake: %q %v", buf, err)
				}
				c.Close()
				sc.Close()
			})
		})
	}
}

// TestHandshakeSilentPeer: a peer that connects and sends nothing is
// dropped after HandshakeTimeout and counted as junk; garbage is refused
// at once; neither is ever accepted.
func TestHandshakeSilentPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		l := Security{Token: "tok"}.Wrap(pl)
		defer l.Close()
		got := acceptOne(l)
		before := ProcessAuthStats()
		silent := pl.dial()
		time.Sleep(HandshakeTimeout + time.Second)
		if _, err := silent.Read(make([]byte, 1)); err == nil {
			t.Error("a silent peer was not disconnected")
		}
		junk := pl.dial()
		go io.Copy(io.Discard, junk)
		junk.Write(bytes.Repeat([]byte{0xff}, proofLen))
		synctest.Wait()
		if _, err := junk.Write([]byte{0}); err == nil {
			t.Error("a peer sending junk was not disconnected")
		}
		select {
		case c, ok := <-got:
			if ok {
				t.Fatalf("unauthenticated peer accepted: %v", c)
			}
		default:
		}
		after := ProcessAuthStats()
		if after.Junk != before.Junk+2 || after.Accepted != before.Accepted {
			t.Errorf("stats %+v -> %+v, want 2 more junk and none accepted", before, after)
		}
	})
}

// TestRefusalLogRateLimited: a flood of refusals logs one line per
// interval, with the count, while the counter sees every one.
func TestRefusalLogRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &countHandler{}
		old := slog.Default()
		slog.SetDefault(slog.New(h))
		defer slog.SetDefault(old)
		refusalLog.mu.Lock()
		refusalLog.last, refusalLog.suppressed = time.Time{}, 0
		refusalLog.mu.Unlock()
		before := ProcessAuthStats().Junk
		for i := 0; i < 2000; i++ {
			refused(refusedJunk, pipeAddr{}, errors.New("junk"))
		}
		time.Sleep(refusalLogEvery)
		refused(refusedJunk, pipeAddr{}, errors.New("junk"))
		if n := h.count(); n != 2 {
			t.Errorf("%d log lines for 2001 refusals over one interval, want 2", n)
		}
		if got := ProcessAuthStats().Junk - before; got != 2001 {
			t.Errorf("counted %d refusals, want 2001", got)
		}
	})
}

type countHandler struct {
	mu sync.Mutex
	n  int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(context.Context, slog.Record) error {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) count() int                         { h.mu.Lock(); defer h.mu.Unlock(); return h.n }

// testPKI is a CA made in the test and a certificate for 127.0.0.1 signed
// by it.
type testPKI struct{ *transporttest.PKI }

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	p, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{p}
}

// security returns a Security with TLS from the test CA and token.
func (p testPKI) security(token string) Security {
	return Security{Token: token, Server: p.Server(), Client: p.Client()}
}

// TestTLSRoundTrip: over loopback TCP with a CA made here, a dialer that
// trusts the CA and holds the token gets an encrypted, authenticated
// connection; one that does not trust the CA, or has a wrong token, or
// speaks plaintext, is refused.
func TestTLSRoundTrip(t *testing.T) {
	pki := newTestPKI(t)
	sec := pki.security("tok")
	l, err := sec.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	ctx := context.Background()
	c, err := sec.Dial(ctx, nil, "tcp", addr)
	if err != nil {
		t.Fatalf("dial with the CA and token: %v", err)
	}
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok || tc.ConnectionState().Version != tls.VersionTLS13 {
		t.Fatalf("connection %T is not TLS 1.3", c)
	}
	msg := []byte("marker-7f3a")
	c.Write(msg)
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, msg) {
		t.Fatalf("echo over TLS: %q %v", buf, err)
	}
	c.Close()

	before := ProcessAuthStats()
	untrusted := sec
	untrusted.Client = &tls.Config{MinVersion: tls.VersionTLS13} // system roots: not the test CA
	if _, err := untrusted.Dial(ctx, nil, "tcp", addr); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("dial without trusting the CA: %v, want ErrUnauthenticated", err)
	}
	wrong := pki.security("other")
	if _, err := wrong.Dial(ctx, nil, "tcp", addr); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("dial with a wrong token over TLS: %v, want ErrUnauthenticated", err)
	}
	plain := Security{Token: "tok"}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := plain.Dial(pctx, nil, "tcp", addr); err == nil {
		t.Error("a plaintext dialer passed a TLS listener")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := ProcessAuthStats()
		if after.TLS >= before.TLS+2 && after.BadToken >= before.BadToken+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals not counted: %+v -> %+v", before, after)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLocalSocketPermissions: the socket is a 0600 file in a 0700 directory
// of this user; a directory others can enter is refused, and a listener
// refuses a client without the token there too.
func TestLocalSocketPermissions(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	ul, err := ListenLocal("test", tl)
	if err != nil {
		t.Fatal(err)
	}
	l := Security{Token: "tok"}.Wrap(ul)
	defer l.Close()
	path, _ := LocalPath("test", tl.Addr().String())
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	got := acceptOne(l)
	ctx := context.Background()
	if _, err := (Security{Token: "bad"}).DialLocal(ctx, "test", tl.Addr().String()); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("local dial with a wrong token: %v", err)
	}
	c, err := Security{Token: "tok"}.DialLocal(ctx, "test", tl.Addr().String())
	if err != nil {
		t.Fatalf("local dial: %v", err)
	}
	c.Close()
	if sc := <-got; sc != nil {
		sc.Close()
	}

	// A directory others may enter is not used.
	t.Setenv("TMPDIR", t.TempDir())
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("troupe-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if _, err := LocalDir(); err == nil {
		t.Error("LocalDir accepted a directory of mode 0777")
	}
}

// TestHandshakeOverload: beyond MaxPendingHandshakes silent peers, a new
// connection is closed at once and counted; once the silent ones time out,
// an authenticated client gets through again.
func TestHandshakeOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		l := Security{Token: "tok"}.Wrap(pl)
		defer l.Close()
		before := ProcessAuthStats()
		silent := make([]net.Conn, MaxPendingHandshakes)
		for i := range silent {
			silent[i] = pl.dial()
		}
		synctest.Wait()
		extra := pl.dial()
		synctest.Wait()
		if _, err := extra.Read(make([]byte, 1)); err == nil {
			t.Fatal("a connection beyond the limit was not closed")
		}
		if got := ProcessAuthStats().Overloaded - before.Overloaded; got != 1 {
			t.Errorf("overloaded counted %d, want 1", got)
		}
		time.Sleep(HandshakeTimeout + time.Second)
		got := acceptOne(l)
		c, err := Security{Token: "tok"}.Handshake(context.Background(), pl.dial(), "pipe", "pipe")
		if err != nil {
			t.Fatalf("after the silent peers timed out: %v", err)
		}
		c.Close()
		(<-got).Close()
		for _, s := range silent {
			s.Close()
		}
	})
}
