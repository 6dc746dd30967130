package transport

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// bulkPair is a TLS connection pair with the bulk path of each end.
func bulkPair(t *testing.T) (client, server *tlsConn, cb, sb *Bulk) {
	t.Helper()
	client, server = tlsPair(t, 0)
	t.Cleanup(func() { client.Close(); server.Close() })
	var err error
	if cb, err = NewBulk(client); err != nil || cb == nil {
		t.Fatalf("client's bulk path: %v, %v", cb, err)
	}
	if sb, err = NewBulk(server); err != nil || sb == nil {
		t.Fatalf("server's bulk path: %v, %v", sb, err)
	}
	return client, server, cb, sb
}

// Sealed bulk writes arrive whole and in order between TLS records going
// either way, whatever their size against the frame (exact multiples,
// a byte over, a byte, nothing).
func TestBulkRoundTrip(t *testing.T) {
	client, server, cb, sb := bulkPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, bulkFrame - 1, bulkFrame, bulkFrame + 1, 3*bulkFrame + 17, 1 << 20}
	for _, n := range sizes {
		want := make([]byte, n)
		for j := range want {
			want[j] = byte(rng.Uint32())
		}
		done := make(chan error, 1)
		go func() {
			// A TLS record, the frames, a TLS record: the reader must
			// find each where it belongs.
			if _, err := server.Write([]byte("head")); err != nil {
				done <- err
				return
			}
			if err := sb.Write(want); err != nil {
				done <- err
				return
			}
			_, err := server.Write([]byte("tail"))
			done <- err
		}()
		var hb [4]byte
		if _, err := io.ReadFull(client, hb[:]); err != nil || string(hb[:]) != "head" {
			t.Fatalf("size %d: head %q, %v", n, hb, err)
		}
		got := make([]byte, n)
		if err := cb.ReadFull(got); err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: the bytes differ", n)
		}
		if _, err := io.ReadFull(client, hb[:]); err != nil || string(hb[:]) != "tail" {
			t.Fatalf("size %d: tail %q, %v", n, hb, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The client's way too, with its own key.
		go func() { done <- cb.Write(want) }()
		back := make([]byte, n)
		if err := sb.ReadFull(back); err != nil || !bytes.Equal(back, want) {
			t.Fatalf("size %d, client to server: %v", n, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A plaintext connection has no bulk path: its bytes go as they are.
func TestBulkPlaintext(t *testing.T) {
	a, b := socketPair(t)
	defer a.Close()
	defer b.Close()
	if bk, err := NewBulk(a); bk != nil || err != nil {
		t.Fatalf("NewBulk(plaintext) = %v, %v, want nil, nil", bk, err)
	}
}

// corruptor forwards a stream, flipping one bit of byte at.
type corruptor struct {
	r   io.Reader
	off int
	at  int
}

func (c *corruptor) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.at >= c.off && c.at < c.off+n {
		p[c.at-c.off] ^= 0x10
	}
	c.off += n
	return n, err
}

// testBulk is a Bulk that reads a recorded stream, with keys of its own.
func testBulk(t testing.TB, key []byte, stream io.Reader) *Bulk {
	blk, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(stream, 64)
	return &Bulk{raw: &batchConn{Conn: discardConn{}}, r: r, direct: r, seal: g, open: g}
}

// discardConn is a net.Conn that takes writes into a buffer.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// recordingConn keeps what a Bulk writes.
type recordingConn struct {
	net.Conn
	buf *bytes.Buffer
}

func (c recordingConn) Write(p []byte) (int, error) { return c.buf.Write(p) }

// sealed returns the stream of Bulk writes of each payload under key.
func sealed(t testing.TB, key []byte, payloads ...[]byte) []byte {
	var out bytes.Buffer
	w := testBulk(t, key, bytes.NewReader(nil))
	w.raw.Conn = recordingConn{buf: &out}
	for _, p := range payloads {
		if err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// A frame altered on the way (a bit of its header, ciphertext or tag), a
// frame replayed or dropped, another key, another size expected, or a
// stream cut short is refused, never returned as data.
func TestBulkRefusesAltered(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 16)
	a := bytes.Repeat([]byte("abcdefgh"), (2*bulkFrame+100)/8)
	stream := sealed(t, key, a)
	read := func(r io.Reader, k []byte, n int) error {
		return testBulk(t, k, r).ReadFull(make([]byte, n))
	}
	if err := read(bytes.NewReader(stream), key, len(a)); err != nil {
		t.Fatalf("the stream as sealed: %v", err)
	}
	for _, at := range []int{0, 3, bulkHeader, bulkHeader + bulkFrame + 5, bulkHeader + bulkFrame + bulkTag, len(stream) - 1} {
		if err := read(&corruptor{r: bytes.NewReader(stream), at: at}, key, len(a)); !errors.Is(err, ErrBulkFrame) {
			t.Errorf("bit flipped at byte %d: %v, want ErrBulkFrame", at, err)
		}
	}
	if err := read(bytes.NewReader(stream), bytes.Repeat([]byte{8}, 16), len(a)); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("another key: %v, want ErrBulkFrame", err)
	}
	if err := read(bytes.NewReader(stream), key, len(a)-1); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("another size: %v, want ErrBulkFrame", err)
	}
	if err := read(bytes.NewReader(stream[:len(stream)-1]), key, len(a)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	// Two writes; the reader skips to the second (its frames carry later
	// nonces) or sees the first twice.
	b := []byte("second")
	two := sealed(t, key, a, b)
	first := len(stream)
	if err := read(bytes.NewReader(two[first:]), key, len(b)); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("first write dropped: %v, want ErrBulkFrame", err)
	}
	r := testBulk(t, key, bytes.NewReader(append(append([]byte(nil), stream...), stream...)))
	if err := r.ReadFull(make([]byte, len(a))); err != nil {
		t.Fatal(err)
	}
	if err := r.ReadFull(make([]byte, len(a))); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("first write replayed: %v, want ErrBulkFrame", err)
	}
}

// A reader of bulk frames takes any bytes without panicking, and returns
// an error or exactly what was sealed.
func FuzzBulkRead(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 16)
	f.Add(sealed(f, key, []byte("hello")), 5)
	f.Add(sealed(f, key, bytes.Repeat([]byte{1}, bulkFrame+1)), bulkFrame+1)
	f.Add([]byte{0, 0, 0, 0}, 0)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, 3)
	f.Fuzz(func(t *testing.T, stream []byte, n int) {
		if n < 0 || n > 4*bulkFrame {
			return
		}
		dst := make([]byte, n)
		if err := testBulk(t, key, bytes.NewReader(stream)).ReadFull(dst); err == nil {
			again := sealed(t, key, dst)
			if !bytes.Equal(again, stream[:len(again)]) {
				t.Fatalf("accepted %d bytes the key did not seal", n)
			}
		}
	})
}

// The keys of a connection's two directions differ, and differ from
// another connection's.
func TestBulkKeysPerConnectionAndDirection(t *testing.T) {
	_, _, cb, sb := bulkPair(t)
	_, _, _, sb2 := bulkPair(t)
	msg := []byte("to the server")
	var out bytes.Buffer
	cb.raw = &batchConn{Conn: recordingConn{buf: &out}}
	if err := cb.Write(msg); err != nil {
		t.Fatal(err)
	}
	stream := out.Bytes()
	try := func(b *Bulk) error {
		r := bufio.NewReader(bytes.NewReader(stream))
		c := *b
		c.r, c.direct = r, r
		return c.ReadFull(make([]byte, len(msg)))
	}
	if err := try(sb); err != nil {
		t.Fatalf("the server cannot open the client's frame: %v", err)
	}
	if err := try(cb); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("the client's own read key opens its writes: %v", err)
	}
	if err := try(sb2); !errors.Is(err, ErrBulkFrame) {
		t.Errorf("another connection opens this one's frames: %v", err)
	}
}

// A read that times out inside a record's header leaves the bytes that
// came for the next read: the record is read whole once the rest comes.
func TestTLSReadDeadlineInsideRecordHeader(t *testing.T) {
	client, server := tlsPair(t, 0)
	defer client.Close()
	defer server.Close()
	// Seal a record without sending it: batchConn gathers it.
	client.raw.mu.Lock()
	client.raw.batching = true
	client.raw.mu.Unlock()
	if _, err := client.Conn.Write([]byte("after the split")); err != nil {
		t.Fatal(err)
	}
	client.raw.mu.Lock()
	client.raw.batching = false
	rec := append([]byte(nil), client.raw.buf...)
	client.raw.buf = client.raw.buf[:0]
	client.raw.mu.Unlock()
	if _, err := client.raw.Conn.Write(rec[:3]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := server.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of 3 header bytes: %d, %v; want a deadline error", n, err)
	}
	if _, err := client.raw.Conn.Write(rec[3:]); err != nil {
		t.Fatal(err)
	}
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := server.Read(buf)
	if err != nil || string(buf[:n]) != "after the split" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}
