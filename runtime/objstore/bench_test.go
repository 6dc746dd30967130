package objstore

import (
	"context"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

// cpuMeter reports the process's CPU time per operation (both ends of a
// loopback transfer run in this process), a figure the machine's load
// distorts less than wall time: MB per CPU-second.
func cpuMeter(b *testing.B, size int64) func() {
	var r0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	return func() {
		var r1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
		if cpu > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
		}
	}
}

// BenchmarkTransfer64MiB measures fetching a 64 MiB object from its owner
// on this host, over TCP, over TCP with TLS 1.3 (AES-GCM with AES-NI) and
// over the local Unix socket (MB/s from SetBytes; each fetch allocates a
// new buffer of the object's size), beside the baseline of a raw TCP copy
// of 64 MiB into a buffer allocated once. Both ends run in this process.
func BenchmarkTransfer64MiB(b *testing.B) {
	const size = 64 << 20
	b.Run("objstore-tcp", func(b *testing.B) { fetchBench(b, size, testSec, NoUnix()) })
	b.Run("objstore-tls", func(b *testing.B) {
		pki, err := transporttest.New()
		if err != nil {
			b.Fatal(err)
		}
		fetchBench(b, size, transport.Security{Token: testSec.Token, Server: pki.Server(), Client: pki.Client()}, NoUnix())
	})
	b.Run("objstore-unix", func(b *testing.B) { fetchBench(b, size, testSec) })
	b.Run("rawTCP", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		src := pattern(size, 1)
		go func() {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			var req [1]byte
			for {
				if _, err := io.ReadFull(nc, req[:]); err != nil {
					return
				}
				if _, err := nc.Write(src); err != nil {
					return
				}
			}
		}()
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		dst := make([]byte, size)
		b.SetBytes(size)
		defer cpuMeter(b, size)()
		for b.Loop() {
			if _, err := nc.Write([]byte{1}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(nc, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// fetchBench fetches one object of size bytes b.N times.
func fetchBench(b *testing.B, size int, sec transport.Security, opts ...ClientOption) {
	o := startOwnerWith(b, sec)
	c := NewClient(nil, sec, opts...)
	defer c.Close()
	ref := o.store.Put(pattern(size, 1))
	defer o.store.Release(ref.ID, ref.Key)
	if _, err := c.Fetch(context.Background(), ref); err != nil { // warm the connection
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	defer cpuMeter(b, int64(size))()
	for b.Loop() {
		if _, err := c.Fetch(context.Background(), ref); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransfer256MiBHeap fetches a 256 MiB object and reports the
// growth of the heap in use from before the object was made to right
// after the fetch (owner's copy + fetched buffer), also in units of the
// object's size: bounded copies.
func BenchmarkTransfer256MiBHeap(b *testing.B) {
	const size = 256 << 20
	o := startOwner(b)
	c := newClient(b, nil)
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	ref := o.store.Put(pattern(size, 2))
	defer o.store.Release(ref.ID, ref.Key) // the benchmark's cleanups outlive it
	b.SetBytes(size)
	var peak uint64
	for b.Loop() {
		runtime.GC()
		got, err := c.Fetch(context.Background(), ref)
		if err != nil {
			b.Fatal(err)
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		runtime.KeepAlive(got)
	}
	b.ReportMetric(float64(peak-m0.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(peak-m0.HeapInuse)/size, "copies")
}
