package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// socketPair returns the two ends of a connected Unix stream socket pair.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns[0], conns[1]
}

// writeAfter writes b to c once d has passed.
func writeAfter(c net.Conn, d time.Duration, b []byte) {
	go func() {
		time.Sleep(d)
		c.Write(b)
	}()
}

// Input that arrives while the reader polls is read, and the reader keeps
// polling on its next wait.
func TestSpinReaderReadsWhileItPolls(t *testing.T) {
	a, b := socketPair(t)
	r := newSpinReader(a, time.Hour) // never gives up polling
	if r.rc == nil {
		t.Fatal("a Unix socket is read without polling")
	}
	writeAfter(b, 2*time.Millisecond, []byte("hello"))
	buf := make([]byte, 16)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if !r.spin {
		t.Fatal("a wait that ended while polling turned polling off")
	}
}

// A wait longer than the poll parks, and the next wait does not poll; a
// parked wait shorter than the poll turns polling back on.
func TestSpinReaderPollsOnlyAfterShortWaits(t *testing.T) {
	a, b := socketPair(t)
	buf := make([]byte, 16)

	r := newSpinReader(a, 100*time.Microsecond)
	writeAfter(b, 20*time.Millisecond, []byte("late"))
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r.spin {
		t.Fatal("polling stayed on after a wait 200 times the poll")
	}
	// Input already there is read whatever the setting, and changes none.
	b.Write([]byte("ready"))
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "ready" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r.spin {
		t.Fatal("a read that did not wait turned polling on")
	}

	r.max = time.Hour // any parked wait is now short
	writeAfter(b, time.Millisecond, []byte("soon"))
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "soon" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if !r.spin {
		t.Fatal("a parked wait shorter than the poll left polling off")
	}
}

// A read deadline ends a poll as it ends a parked read (Client.interrupt
// relies on it), and the peer's close is io.EOF.
func TestSpinReaderDeadlineAndEOF(t *testing.T) {
	a, b := socketPair(t)
	r := newSpinReader(a, time.Hour)
	a.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	buf := make([]byte, 16)
	start := time.Now()
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("deadline noticed after %v", waited)
	}
	a.SetReadDeadline(time.Time{})
	b.Close()
	if _, err := r.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v", err)
	}
}

// A connection that is not a socket is read plainly.
func TestSpinReaderReadsPipesPlainly(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	r := newSpinReader(a, time.Hour)
	if r.rc != nil {
		t.Fatal("net.Pipe has no socket to poll")
	}
	go b.Write([]byte("pipe"))
	buf := make([]byte, 16)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "pipe" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// The poll setting is read from TROUPE_WIRE_SPIN; nonsense is refused
// with the variable named.
func TestParseSpin(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{{"", 0}, {"0", -1}, {"20us", 20 * time.Microsecond}} {
		if got, err := parseSpin(c.v); err != nil || got != c.want {
			t.Errorf("%s=%q: %v, %v; want %v", spinEnv, c.v, got, err, c.want)
		}
	}
	for _, v := range []string{"soon", "-1ms", "50"} {
		if _, err := parseSpin(v); err == nil || !strings.Contains(err.Error(), spinEnv) {
			t.Errorf("%s=%q: %v, want an error naming the variable", spinEnv, v, err)
		}
	}
}

// tlsPair runs both handshakes of this package, with TLS, over the two
// ends of a socket pair, and returns the client's and the server's
// connections, whose reads poll for at most spin.
func tlsPair(t *testing.T, spin time.Duration) (client, server *tlsConn) {
	t.Helper()
	a, b := socketPair(t)
	pki := newTestPKI(t)
	type result struct {
		c   net.Conn
		err error
	}
	srv := make(chan result, 1)
	go func() {
		c, _, err := serverHandshake(b, "tok", pki.Server(), spin, 10*time.Second)
		srv <- result{c, err}
	}()
	cc, err := clientHandshake(context.Background(), a, "tok", pki.Client(), "localhost", spin)
	s := <-srv
	if err != nil || s.err != nil {
		t.Fatalf("handshakes: client %v, server %v", err, s.err)
	}
	return cc.(*tlsConn), s.c.(*tlsConn)
}

// A TLS connection reads its socket through a spinReader, so a read
// waiting for a record polls: the record written when the server's read
// first finds the socket empty is taken by a poll, not after parking.
func TestTLSReadsPoll(t *testing.T) {
	client, server := tlsPair(t, defaultSpin)
	r := server.raw.spin
	if r == nil || r.rc == nil {
		t.Fatal("a TLS connection over a socket reads it without polling")
	}
	r.max = time.Hour // any wait ends while polling
	r.spin = true
	wrote := make(chan error, 1)
	r.empty = func() {
		r.empty = nil
		_, err := client.Write([]byte("ping"))
		wrote <- err
	}
	before := r.polled
	buf := make([]byte, 16)
	// Were the read not polling, nothing would write: fail, not hang.
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := server.Read(buf)
	server.SetReadDeadline(time.Time{})
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("client write: %v", err)
		}
	default:
		t.Fatal("the server's read found input without waiting for it")
	}
	if r.polled != before+1 {
		t.Fatalf("%d reads took input while polling, want 1", r.polled-before)
	}

	// A read deadline still ends a polling TLS read, and the connection
	// reads on afterwards (Client.interrupt relies on both).
	server.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	if _, err := server.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("TLS read past the deadline: %v", err)
	}
	server.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "again" {
		t.Fatalf("read after an interrupted read %q, %v", buf[:n], err)
	}
}

// A negative Security.Spin turns polling off for the TLS connections of
// a listener and a dialer, and a TLS connection over a net.Pipe reads it
// plainly.
func TestTLSSpinOffAndPipes(t *testing.T) {
	if got := (Security{Spin: -1}).ReadSpin(); got != 0 {
		t.Errorf("Spin -1: ReadSpin %v, want 0", got)
	}
	if got := (Security{}).ReadSpin(); got != DefaultSpin {
		t.Errorf("Spin 0: ReadSpin %v, want DefaultSpin", got)
	}
	_, server := tlsPair(t, 0)
	if server.raw.spin.rc != nil {
		t.Error("spin 0 still polls a TLS connection")
	}
	pki := newTestPKI(t)
	off := Security{Token: "tok", Server: pki.Server(), Client: pki.Client(), Spin: -1}
	ln, err := off.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dc, err := off.Dial(context.Background(), nil, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ac := <-accepted
	if ac == nil {
		t.Fatal("no connection accepted")
	}
	defer ac.Close()
	if dc.(*tlsConn).raw.spin.rc != nil || ac.(*tlsConn).raw.spin.rc != nil {
		t.Error("Security.Spin -1: a dialled or accepted TLS connection still polls")
	}

	l := newPipeListener()
	defer l.Close()
	srv := acceptOne(l)
	c := l.dial()
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		s := <-srv
		sc, _, err := serverHandshake(s, "tok", pki.Server(), defaultSpin, 10*time.Second)
		if err == nil {
			if sc.(*tlsConn).raw.spin.rc != nil {
				err = errors.New("the server polls a net.Pipe")
			}
			sc.Close()
		}
		done <- err
	}()
	cc, err := clientHandshake(context.Background(), c, "tok", pki.Client(), "localhost", defaultSpin)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if cc.(*tlsConn).raw.spin.rc != nil {
		t.Error("the client polls a net.Pipe")
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
