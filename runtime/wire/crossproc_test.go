package wire

// Cross-process benchmarks: the test binary re-executes itself as a peer
// process that serves the troupe call path, raw TCP and Unix echoes (one
// parking, one polling its reads as troupe does) and a bare gRPC echo
// (unary and bidirectional stream), so all are measured side by side in
// one run with the same 64-byte payload.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"troupe/actors"
	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

const peerEnv = "TROUPE_WIRE_BENCH_PEER"

func TestMain(m *testing.M) {
	// The test binary is an edge: it reads TROUPE_WIRE_SPIN into the
	// Security of its connections as Init does, so the measurements with
	// TROUPE_WIRE_SPIN=0 keep working.
	if d, err := ParseSpin(os.Getenv(SpinEnv)); err == nil {
		testSec.Spin = d
	}
	if os.Getenv(peerEnv) == "1" {
		runPeer()
		return
	}
	code := m.Run()
	stopPeer()
	os.Exit(code)
}

// payload is the 64-byte message of every ping-pong.
var payload = make([]byte, 64)

// rawCodec lets bare gRPC carry []byte without protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], b...)
	return nil
}
func (rawCodec) Name() string { return "troupe-bench-raw" }
func init()                   { encoding.RegisterCodec(rawCodec{}) }

var echoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var b []byte
		if err := dec(&b); err != nil {
			return nil, err
		}
		return &b, nil
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
		var b []byte
		for {
			if err := st.RecvMsg(&b); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if err := st.SendMsg(&b); err != nil {
				return err
			}
		}
	}}},
}

// echoServe echoes every connection of l (the raw ping-pong baselines).
func echoServe(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go io.Copy(c, c)
	}
}

// echoServePolling echoes every connection of l reading through a
// transport.NewSpinReader (the polling raw baseline).
func echoServePolling(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go io.Copy(c, transport.NewSpinReader(c, transport.DefaultSpin))
	}
}

// runPeer serves until its standard input closes.
func runPeer() {
	h := &host{byID: map[string]*actors.Instance{}}
	for i := 0; i < 4; i++ {
		in, err := actors.NewInstance(context.Background(), actors.Spec{Type: "wire.echo", Config: []byte{0}}, actors.ActorInfo{ID: fmt.Sprint("e", i)}, actors.InstanceHooks{})
		if err != nil {
			panic(err)
		}
		h.byID[fmt.Sprint("e", i)] = in
	}
	wl, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := NewServer(h, 0, testSec)
	go srv.Serve(wl)
	if ul, err := ListenLocal(wl); err == nil {
		go srv.Serve(ul)
	}
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	go echoServe(tl)
	if ul, err := net.Listen("unix", "@troupe-bench-echo/"+tl.Addr().String()); err == nil {
		go echoServe(ul)
	}
	if ul, err := net.Listen("unix", "@troupe-bench-echo-poll/"+tl.Addr().String()); err == nil {
		go echoServePolling(ul)
	}
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	gs.RegisterService(&echoDesc, struct{}{})
	go gs.Serve(gl)
	// The same actors on a TLS port (with a CA made here, which the
	// benchmark process is told to trust), without a local socket.
	pki, err := transporttest.New()
	if err != nil {
		panic(err)
	}
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go NewServer(h, 0, transport.Security{Token: testSec.Token, Server: pki.Server(), Spin: testSec.Spin}).Serve(sl)
	fmt.Printf("%s %s %s %s %s\n", wl.Addr(), tl.Addr(), gl.Addr(), sl.Addr(), base64.StdEncoding.EncodeToString(pki.CA))
	io.Copy(io.Discard, os.Stdin)
}

var peer struct {
	once             sync.Once
	cmd              *exec.Cmd
	stdin            io.Closer
	wire, tcp, grpcA string
	wireTLS          string      // the actors' TLS port
	tls              *tls.Config // a client configuration trusting its CA
	err              error
}

func startPeer(b *testing.B) {
	peer.once.Do(func() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), peerEnv+"=1")
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if peer.err = cmd.Start(); peer.err != nil {
			return
		}
		peer.cmd, peer.stdin = cmd, in
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			peer.err = fmt.Errorf("peer did not start: %v", err)
			return
		}
		f := strings.Fields(line)
		if len(f) != 5 {
			peer.err = fmt.Errorf("peer said %q", line)
			return
		}
		peer.wire, peer.tcp, peer.grpcA, peer.wireTLS = f[0], f[1], f[2], f[3]
		ca, err := base64.StdEncoding.DecodeString(f[4])
		if err == nil {
			peer.tls, err = transporttest.ClientTrusting(ca)
		}
		peer.err = err
	})
	if peer.err != nil {
		b.Fatal(peer.err)
	}
}

func stopPeer() {
	if peer.cmd != nil {
		peer.stdin.Close()
		peer.cmd.Wait()
	}
}

func reportRate(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// processCPU returns the CPU time (user + system) the process pid has
// used, from /proc (clock ticks of 10 ms: fine over a run of seconds).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its end.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / 100, nil
}

// bothCPU is the CPU time of this process and the peer together.
func bothCPU(b *testing.B) time.Duration {
	self, err := processCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	other, err := processCPU(peer.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return self + other
}

// withCPU runs a benchmark and reports the CPU time it cost per operation
// over both processes (cpu-µs/op), so latency bought with polling shows
// its price beside it.
func withCPU(fn func(b *testing.B)) func(b *testing.B) {
	return func(b *testing.B) {
		start := bothCPU(b)
		fn(b)
		b.ReportMetric(float64(bothCPU(b)-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	}
}

// BenchmarkCrossProcess compares, across two processes on this machine, a
// raw TCP ping-pong, raw Unix ping-pongs (parking, and polling as troupe
// does), bare gRPC (unary and a bidirectional stream), and
// troupe actor calls (sync, pipelined, and 4 callers × 4 actors).
func BenchmarkCrossProcess(b *testing.B) {
	startPeer(b)
	ctx := context.Background()

	// pingPong is a raw ping-pong; polling reads both sides' input as
	// troupe does (spin.go), for a baseline that saves the same wake-ups.
	pingPong := func(network, addr string, polling bool) func(b *testing.B) {
		return func(b *testing.B) {
			c, err := net.Dial(network, addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var r io.Reader = c
			if polling {
				r = transport.NewSpinReader(c, transport.DefaultSpin)
			}
			buf := make([]byte, 64)
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(payload, uint64(i))
				if _, err := c.Write(payload); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, "calls/s")
		}
	}
	b.Run("tcp-pingpong", withCPU(pingPong("tcp", peer.tcp, false)))
	if localOS {
		b.Run("unix-pingpong", withCPU(pingPong("unix", "@troupe-bench-echo/"+peer.tcp, false)))
		b.Run("unix-pingpong-polling", withCPU(pingPong("unix", "@troupe-bench-echo-poll/"+peer.tcp, true)))
	}

	gc, err := grpc.NewClient(peer.grpcA, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(nil), grpc.CallContentSubtype("troupe-bench-raw")))
	if err != nil {
		b.Fatal(err)
	}
	defer gc.Close()
	b.Run("grpc-unary", withCPU(func(b *testing.B) {
		out := []byte(nil)
		for i := 0; i < b.N; i++ {
			in := payload
			if err := gc.Invoke(ctx, "/bench.Echo/Unary", &in, &out); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, "calls/s")
	}))
	b.Run("grpc-stream", withCPU(func(b *testing.B) {
		st, err := gc.NewStream(ctx, &echoDesc.Streams[0], "/bench.Echo/Stream")
		if err != nil {
			b.Fatal(err)
		}
		out := []byte(nil)
		for i := 0; i < b.N; i++ {
			in := payload
			if err := st.SendMsg(&in); err != nil {
				b.Fatal(err)
			}
			if err := st.RecvMsg(&out); err != nil {
				b.Fatal(err)
			}
		}
		st.CloseSend()
		reportRate(b, "calls/s")
	}))

	cl, err := Dial(ctx, testSec, "tcp", peer.wire, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	e := make([]actors.Handle[echo], 4)
	for i := range e {
		e[i] = handle(cl, fmt.Sprint("e", i))
	}
	syncCalls := func(h actors.Handle[echo]) func(b *testing.B) {
		return func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := actors.Call(ctx, h, (*echo).Bytes, payload).Get(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, "calls/s")
		}
	}
	// Dial goes through the Unix socket beside the TCP address (same
	// host); troupe-sync-tcp is the same calls over TCP, and
	// troupe-sync-tls over TCP with TLS 1.3 (AES-GCM where the CPU has
	// AES-NI) and the token.
	b.Run("troupe-sync", withCPU(syncCalls(e[0])))
	tcl, err := Dial(ctx, testSec, "tcp", peer.wire, 0, NoUnix())
	if err != nil {
		b.Fatal(err)
	}
	defer tcl.Close()
	tlsCl, err := Dial(ctx, transport.Security{Token: testSec.Token, Client: peer.tls, Spin: testSec.Spin}, "tcp", peer.wireTLS, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer tlsCl.Close()
	b.Run("troupe-sync-tcp", withCPU(syncCalls(handle(tcl, "e0"))))
	b.Run("troupe-sync-tls", withCPU(syncCalls(handle(tlsCl, "e0"))))
	b.Run("troupe-graph-echo", withCPU(func(b *testing.B) {
		// A compiled one-actor graph across the two processes.
		g, in := actors.NewGraph[[]byte]()
		run, err := actors.Compile[[]byte](g, actors.Node(g, "echo", e[1], (*echo).Bytes, in))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if _, err := run.Run(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, "runs/s")
	}))
	b.Run("troupe-graph-chain2", withCPU(func(b *testing.B) {
		// Two actors in a chain, both in the peer process.
		g, in := actors.NewGraph[[]byte]()
		first := actors.Node(g, "first", e[1], (*echo).Bytes, in)
		run, err := actors.Compile[[]byte](g, actors.Node(g, "second", e[2], (*echo).Bytes, first))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if _, err := run.Run(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, "runs/s")
	}))
	pipelined := func(h actors.Handle[echo]) func(b *testing.B) {
		return func(b *testing.B) {
			const window = 2000
			futs := make([]*actors.Future[[]byte], 0, window)
			for i := 0; i < b.N; i++ {
				futs = append(futs, actors.Call(ctx, h, (*echo).Bytes, payload))
				if len(futs) == window || i == b.N-1 {
					if _, err := futs[len(futs)-1].Get(ctx); err != nil {
						b.Fatal(err)
					}
					futs = futs[:0]
				}
			}
			reportRate(b, "calls/s")
		}
	}
	b.Run("troupe-pipelined", withCPU(pipelined(e[0])))
	b.Run("troupe-pipelined-tcp", withCPU(pipelined(handle(tcl, "e3"))))
	b.Run("troupe-pipelined-tls", withCPU(pipelined(handle(tlsCl, "e3"))))
	b.Run("troupe-n2n-4x4", withCPU(func(b *testing.B) {
		// 4 caller goroutines, each pipelining to its own actor.
		var wg sync.WaitGroup
		per := (b.N + 3) / 4
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				const window = 500
				futs := make([]*actors.Future[[]byte], 0, window)
				for i := 0; i < per; i++ {
					futs = append(futs, actors.Call(ctx, e[c], (*echo).Bytes, payload))
					if len(futs) == window || i == per-1 {
						if _, err := futs[len(futs)-1].Get(ctx); err != nil {
							b.Error(err)
							return
						}
						futs = futs[:0]
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(per*4)/b.Elapsed().Seconds(), "calls/s")
	}))
}
