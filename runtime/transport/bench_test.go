package transport

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"troupe/runtime/transport/transporttest"
)

// BenchmarkTLSBulk moves 64 MiB one way over loopback TCP through a
// Security listener and dialer, in plaintext and with TLS 1.3 (AES-GCM),
// with the socket reads and record writes gathered (batchConn) and as
// crypto/tls does alone, and in sealed bulk frames beside TLS (Bulk, the
// object store's path). Both ends run in this process: MB/cpu-s counts
// the CPU of both.
func BenchmarkTLSBulk(b *testing.B) {
	pki, err := transporttest.New()
	if err != nil {
		b.Fatal(err)
	}
	run := func(sec Security, batching bool) func(b *testing.B) {
		return func(b *testing.B) {
			old := tlsBatching
			tlsBatching = batching
			defer func() { tlsBatching = old }()
			bulkBench(b, sec)
		}
	}
	tlsSec := Security{Token: "tok", Server: pki.Server(), Client: pki.Client()}
	b.Run("plain", run(Security{Token: "tok"}, true))
	b.Run("tls", run(tlsSec, true))
	b.Run("tls-unbatched", run(tlsSec, false))
	b.Run("tls-sealed", func(b *testing.B) { bulkSealedBench(b, tlsSec) })
}

// bulkSealedBench is bulkBench's transfer in sealed bulk frames (Bulk),
// 1 MiB a Write as the object store sends.
func bulkSealedBench(b *testing.B, sec Security) {
	const size = 64 << 20
	l, err := sec.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	src := make([]byte, size)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bk, err := NewBulk(c)
		if err != nil || bk == nil {
			return
		}
		var req [1]byte
		for {
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			for off := 0; off < size; off += 1 << 20 {
				if err := bk.Write(src[off : off+1<<20]); err != nil {
					return
				}
			}
		}
	}()
	c, err := sec.Dial(context.Background(), nil, "tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	bk, err := NewBulk(c)
	if err != nil || bk == nil {
		b.Fatalf("bulk path: %v, %v", bk, err)
	}
	dst := make([]byte, size)
	b.SetBytes(size)
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		if _, err := c.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += 1 << 20 {
			if err := bk.ReadFull(dst[off : off+1<<20]); err != nil {
				b.Fatal(err)
			}
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	c.Close()
	l.Close()
	<-done
}

func bulkBench(b *testing.B, sec Security) {
	const size = 64 << 20
	l, err := sec.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	src := make([]byte, size)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req [1]byte
		for {
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			for off := 0; off < size; off += 1 << 20 {
				if _, err := c.Write(src[off : off+1<<20]); err != nil {
					return
				}
			}
		}
	}()
	c, err := sec.Dial(context.Background(), nil, "tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, size)
	b.SetBytes(size)
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		if _, err := c.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, dst); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	c.Close()
	l.Close()
	<-done
}

var _ net.Conn = (*tlsConn)(nil)
