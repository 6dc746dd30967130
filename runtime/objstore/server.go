package objstore

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"troupe/runtime/transport"
)

// ChunkSize is how much of an object one write or read moves; a transfer
// that moves no chunk within IOTimeout fails.
const ChunkSize = 1 << 20

// Timeouts of the transfer protocol.
const (
	// IOTimeout bounds one chunk, request or response on a connection.
	IOTimeout = 30 * time.Second
	// IdleTimeout closes a server connection with no request for so long.
	IdleTimeout = 2 * time.Minute
)

// Server serves a Store's objects to other processes.
type Server struct {
	store *Store
	sec   transport.Security

	mu     sync.Mutex
	lis    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a server for store's objects that authenticates every
// connection with sec before it reads a request.
func NewServer(store *Store, sec transport.Security) *Server {
	return &Server{store: store, sec: sec, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on l until Close, then returns nil. Each
// connection is served once it has passed the handshake of the server's
// Security (transport.Security.Wrap: TLS on TCP when configured, then the
// token); the others are refused and counted.
func (s *Server) Serve(l net.Listener) error {
	l = s.sec.Wrap(l)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.lis = append(s.lis, l)
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("objstore: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(nc)
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
			nc.Close()
		}()
	}
}

// Close stops accepting, closes every connection (transfers in progress
// fail on the fetching side) and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lis, conns := s.lis, s.conns
	s.lis, s.conns = nil, map[net.Conn]struct{}{}
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// serveConn answers requests on one connection until it closes or breaks.
func (s *Server) serveConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(nc, 4096)
	nc.SetReadDeadline(time.Now().Add(IOTimeout))
	var p [len(preface)]byte
	if _, err := io.ReadFull(br, p[:]); err != nil || (string(p[:]) != preface && string(p[:]) != prefaceSealed) {
		return // not a transfer client
	}
	var bulk *transport.Bulk
	if string(p[:]) == prefaceSealed {
		b, err := transport.NewBulk(nc)
		if err != nil {
			return
		}
		bulk = b // nil on a plaintext connection: chunks as they are
	}
	var hdr []byte
	for {
		nc.SetReadDeadline(time.Now().Add(IdleTimeout))
		req, err := readRequest(br)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				nc.SetWriteDeadline(time.Now().Add(IOTimeout))
				nc.Write(appendResponse(hdr[:0], statusBad, 0, err.Error()))
			}
			return
		}
		nc.SetWriteDeadline(time.Now().Add(IOTimeout))
		switch req.op {
		case opFetch:
			if !s.fetch(nc, bulk, req.items[0], hdr[:0]) {
				return
			}
		case opRelease:
			for _, it := range req.items {
				s.store.Release(it.id, it.key) // an unknown or freed one is already gone
			}
			if _, err := nc.Write(appendResponse(hdr[:0], statusOK, 0, "")); err != nil {
				return
			}
		}
	}
}

// fetch sends one object (or the reason it cannot), its chunks sealed
// in bulk frames when bulk is not nil; false means the connection broke.
func (s *Server) fetch(nc net.Conn, bulk *transport.Bulk, it item, hdr []byte) bool {
	data, done, err := s.store.acquire(it.id, it.key)
	if err != nil {
		_, werr := nc.Write(appendResponse(hdr, statusOf(err), 0, err.Error()))
		return werr == nil
	}
	defer done()
	if _, err := nc.Write(appendResponse(hdr, statusOK, uint64(len(data)), "")); err != nil {
		return false
	}
	for off := 0; off < len(data); {
		end := min(off+ChunkSize, len(data))
		nc.SetWriteDeadline(time.Now().Add(IOTimeout))
		if bulk != nil {
			if err := bulk.Write(data[off:end]); err != nil {
				return false
			}
			global.servedBytes.Add(int64(end - off))
		} else {
			n, err := nc.Write(data[off:end])
			global.servedBytes.Add(int64(n))
			if err != nil {
				return false
			}
		}
		off = end
	}
	global.served.Add(1)
	return true
}
