package objstore

// A cross-process fetch benchmark: the test binary re-executes itself as
// an owner process that holds one 64 MiB object and serves it on a
// plaintext TCP port and a TLS port (with a CA it makes), so each end's
// CPU per byte is measured apart: with the two ends on their own cores,
// the slower end bounds the rate.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

const ownerEnv = "TROUPE_OBJSTORE_BENCH_OWNER"

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) == "1" {
		runBenchOwner()
		return
	}
	os.Exit(m.Run())
}

const crossSize = 64 << 20

// ownerProfileEnv names a file the owner process writes its CPU profile
// to, for comparing it with the fetcher's (-test.cpuprofile).
const ownerProfileEnv = "TROUPE_OBJSTORE_BENCH_OWNER_CPUPROFILE"

// runBenchOwner serves one object until its standard input closes. It
// prints the plaintext reference, the TLS one and the CA (base64).
func runBenchOwner() {
	if p := os.Getenv(ownerProfileEnv); p != "" {
		f, err := os.Create(p)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	pki, err := transporttest.New()
	if err != nil {
		panic(err)
	}
	plainL, _ := net.Listen("tcp", "127.0.0.1:0")
	tlsL, _ := net.Listen("tcp", "127.0.0.1:0")
	plain := NewStore(plainL.Addr().String())
	secure := NewStore(tlsL.Addr().String())
	go NewServer(plain, testSec).Serve(plainL)
	go NewServer(secure, transport.Security{Token: testSec.Token, Server: pki.Server()}).Serve(tlsL)
	line := base64.StdEncoding.EncodeToString(pki.CA)
	for _, mib := range crossSizes {
		data := pattern(mib<<20, 3)
		r1, r2 := plain.Put(data), secure.Put(data)
		line += " " + base64.StdEncoding.EncodeToString(r1.Encode()) + " " + base64.StdEncoding.EncodeToString(r2.Encode())
	}
	fmt.Println(line)
	io.Copy(io.Discard, os.Stdin)
}

// crossSizes are the objects the owner holds, in MiB: crossSize first.
var crossSizes = []int{crossSize >> 20, 1, 4, 16, 256}

// procCPU is the user+system CPU time of process pid (/proc, 10 ms ticks).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+s) * time.Second / 100, nil
}

func selfCPU() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// BenchmarkTransferCrossProcess fetches a 64 MiB object from an owner
// process over TCP, in plaintext (tcp) and with TLS 1.3 (tls), reporting
// the wall rate (MB/s) and each end's MB per CPU-second (fetcher and
// owner); sizes/ does the same from 1 to 256 MiB, to show whether the rate
// depends on the size.
func BenchmarkTransferCrossProcess(b *testing.B) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("owner did not start: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 1+2*len(crossSizes) {
		b.Fatalf("owner said %q", line)
	}
	dec := func(s string) []byte {
		v, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	ref := func(s string) Ref {
		r, err := DecodeRef(dec(s))
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	clientTLS, err := transporttest.ClientTrusting(dec(f[0]))
	if err != nil {
		b.Fatal(err)
	}
	run := func(ref Ref, sec transport.Security) func(b *testing.B) {
		return func(b *testing.B) {
			c := NewClient(nil, sec, NoUnix())
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Fetch(ctx, ref); err != nil { // connect and warm up
				b.Fatal(err)
			}
			b.SetBytes(ref.Size)
			self0 := selfCPU()
			owner0, err := procCPU(cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := c.Fetch(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
			self := selfCPU() - self0
			owner1, _ := procCPU(cmd.Process.Pid)
			mb := float64(ref.Size) * float64(b.N) / 1e6
			b.ReportMetric(mb/self.Seconds(), "fetcher-MB/cpu-s")
			if o := owner1 - owner0; o > 0 {
				b.ReportMetric(mb/o.Seconds(), "owner-MB/cpu-s")
			}
		}
	}
	tlsSec := transport.Security{Token: testSec.Token, Client: clientTLS}
	b.Run("tcp", run(ref(f[1]), testSec))
	b.Run("tls", run(ref(f[2]), tlsSec))
	for i, mib := range crossSizes {
		b.Run(fmt.Sprintf("sizes/tcp-%dMiB", mib), run(ref(f[1+2*i]), testSec))
		b.Run(fmt.Sprintf("sizes/tls-%dMiB", mib), run(ref(f[2+2*i]), tlsSec))
	}
}
