package testnet

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// Recorder is a TCP proxy that forwards every connection to a target and
// records the bytes of both directions: tests assert what an observer of
// the network would see.
type Recorder struct {
	ln     net.Listener
	target string

	mu   sync.Mutex // guards buf and conns
	buf  bytes.Buffer
	conn []net.Conn

	wg sync.WaitGroup // the accept loop and the copiers
}

// NewRecorder listens on a free loopback port and forwards to target;
// t.Cleanup closes it and waits for its goroutines.
func NewRecorder(t testing.TB, target string) *Recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Recorder{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.Close)
	return r
}

// Addr is the proxy's address.
func (r *Recorder) Addr() string { return r.ln.Addr().String() }

// Bytes returns a copy of everything recorded so far.
func (r *Recorder) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// Close stops the proxy and its connections.
func (r *Recorder) Close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conn {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Recorder) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conn = append(r.conn, in, out)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(out, in)
		go r.pipe(in, out)
	}
}

func (r *Recorder) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	defer dst.Close()
	io.Copy(dst, io.TeeReader(src, recordTo{r}))
}

type recordTo struct{ r *Recorder }

func (w recordTo) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.buf.Write(p)
}
