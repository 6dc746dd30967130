package peers

// The test binary re-executes itself as a peer process that hosts four
// troupe echo actors (served by wire.Server) and four protoactor-go echo
// actors (served by protoactor's gRPC remote); the parent process calls
// both over 127.0.0.1.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"troupe/runtime/transport"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"troupe/actors"
	"troupe/runtime/wire"
)

const peerEnv = "TROUPE_PEERS_BENCH_PEER"

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) == "1" {
		runPeer()
		return
	}
	code := m.Run()
	stopPeer()
	os.Exit(code)
}

// payload is the 64-byte message of every call.
var payload = bytes.Repeat([]byte{'x'}, 64)

// echo is the troupe actor: it returns its argument.
type echo struct{}

func newEcho(context.Context, int) (*echo, error)               { return &echo{}, nil }
func (*echo) Bytes(_ context.Context, b []byte) ([]byte, error) { return b, nil }
func init()                                                     { actors.MustRegister("peers.echo", newEcho) }

// protoEcho is the protoactor actor: it responds with the request.
func protoEcho(c actor.Context) {
	if m, ok := c.Message().(*wrapperspb.BytesValue); ok {
		c.Respond(m)
	}
}

// newProtoSystem starts an actor system with a remote listening on a free
// loopback port, and logging silenced.
func newProtoSystem() (*actor.ActorSystem, *remote.Remote) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	return sys, r
}

// runPeer serves both systems until its standard input closes.
func runPeer() {
	byID := map[string]*actors.Instance{}
	sys, _ := newProtoSystem()
	for i := 0; i < 4; i++ {
		id := fmt.Sprint("e", i)
		in, err := actors.NewInstance(context.Background(), actors.Spec{Type: "peers.echo", Config: []byte{0}}, actors.ActorInfo{ID: id}, actors.InstanceHooks{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(2)
		}
		byID[id] = in
		if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(protoEcho), id); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(2)
		}
	}
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(2)
	}
	go wire.NewServer(wire.HostFunc(func(id string) (wire.Target, bool) { in, ok := byID[id]; return in, ok }), 0, transport.Security{}).Serve(wl)
	fmt.Printf("%s %s\n", wl.Addr(), sys.ProcessRegistry.Address)
	io.Copy(io.Discard, os.Stdin)
}

var peer struct {
	once        sync.Once
	cmd         *exec.Cmd
	stdin       io.Closer
	wire, proto string
	err         error
}

func startPeer(tb testing.TB) {
	peer.once.Do(func() {
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), peerEnv+"=1")
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if peer.err = cmd.Start(); peer.err != nil {
			return
		}
		peer.cmd, peer.stdin = cmd, in
		line, err := bufio.NewReader(out).ReadString('\n')
		f := strings.Fields(line)
		if err != nil || len(f) != 2 {
			peer.err = fmt.Errorf("peer did not start: %q: %v", line, err)
			return
		}
		peer.wire, peer.proto = f[0], f[1]
	})
	if peer.err != nil {
		tb.Fatal(peer.err)
	}
}

// stopPeer closes the peer's stdin so it exits, and kills it if it lingers.
func stopPeer() {
	if peer.cmd == nil {
		return
	}
	peer.stdin.Close()
	t := time.AfterFunc(5*time.Second, func() { peer.cmd.Process.Kill() })
	peer.cmd.Wait()
	t.Stop()
}

// clients are the caller side of both systems, shared by tests and benchmarks.
var clients struct {
	once  sync.Once
	err   error
	sys   *actor.ActorSystem
	pids  []*actor.PID
	wire  *wire.Client
	echos []actors.Handle[echo]
}

func dialClients(tb testing.TB) {
	startPeer(tb)
	clients.once.Do(func() {
		// The caller needs a remote of its own: replies come back to it.
		clients.sys, _ = newProtoSystem()
		cl, err := wire.Dial(context.Background(), transport.Security{}, "tcp", peer.wire, 0)
		if err != nil {
			clients.err = fmt.Errorf("dial troupe peer %s: %w", peer.wire, err)
			return
		}
		clients.wire = cl
		for i := 0; i < 4; i++ {
			id := fmt.Sprint("e", i)
			clients.pids = append(clients.pids, actor.NewPID(peer.proto, id))
			clients.echos = append(clients.echos, actors.HandleOf[echo](cl.Ref(id, "", "peers.echo", nil)))
		}
	})
	if clients.err != nil {
		tb.Fatal(clients.err)
	}
}

const timeout = 10 * time.Second

func protoCall(pid *actor.PID) *actor.Future {
	return clients.sys.Root.RequestFuture(pid, &wrapperspb.BytesValue{Value: payload}, timeout)
}

func protoResult(f *actor.Future) error {
	res, err := f.Result()
	if err != nil {
		return err
	}
	if m, ok := res.(*wrapperspb.BytesValue); !ok || !bytes.Equal(m.Value, payload) {
		return fmt.Errorf("protoactor reply %T %v, want the 64-byte payload", res, res)
	}
	return nil
}

func troupeCall(h actors.Handle[echo]) *actors.Future[[]byte] {
	return actors.Call(context.Background(), h, (*echo).Bytes, payload)
}

func troupeResult(f *actors.Future[[]byte]) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, err := f.Get(ctx)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, payload) {
		return fmt.Errorf("troupe reply %q, want the 64-byte payload", b)
	}
	return nil
}

// TestBothPathsEcho checks, across the two processes, that every actor of
// both systems answers with the payload, so the benchmark measures real
// round trips.
func TestBothPathsEcho(t *testing.T) {
	dialClients(t)
	for i := 0; i < 4; i++ {
		if err := protoResult(protoCall(clients.pids[i])); err != nil {
			t.Errorf("protoactor e%d: %v", i, err)
		}
		if err := troupeResult(troupeCall(clients.echos[i])); err != nil {
			t.Errorf("troupe e%d: %v", i, err)
		}
	}
}

// runWindowed issues n calls in windows of at most w outstanding, waiting
// for each window before the next: w = 1 is a synchronous caller.
func runWindowed[F any](n, w int, call func() F, wait func(F) error) error {
	futs := make([]F, 0, w)
	for i := 0; i < n; i++ {
		futs = append(futs, call())
		if len(futs) == w || i == n-1 {
			for _, f := range futs {
				if err := wait(f); err != nil {
					return err
				}
			}
			futs = futs[:0]
		}
	}
	return nil
}

// runNxN splits n calls over 4 caller goroutines, caller c calling actor c
// with up to w calls in flight.
func runNxN[F any](n, w int, call func(c int) F, wait func(F) error) (int, error) {
	per := (n + 3) / 4
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = runWindowed(per, w, func() F { return call(c) }, wait)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return per * 4, nil
}

// BenchmarkPeers compares troupe's wire call path with protoactor-go's
// remote request/response across two processes: sync 1:1, pipelined 1:1,
// and 4 callers × 4 actors. Each sub-benchmark reports calls/s.
func BenchmarkPeers(b *testing.B) {
	dialClients(b)
	const pipeWindow, nxnWindow = 2000, 500
	rate := func(b *testing.B, n int, err error) {
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "calls/s")
	}
	p0, e0 := clients.pids[0], clients.echos[0]
	b.Run("protoactor-sync", func(b *testing.B) {
		rate(b, b.N, runWindowed(b.N, 1, func() *actor.Future { return protoCall(p0) }, protoResult))
	})
	b.Run("troupe-sync", func(b *testing.B) {
		rate(b, b.N, runWindowed(b.N, 1, func() *actors.Future[[]byte] { return troupeCall(e0) }, troupeResult))
	})
	b.Run("protoactor-pipelined", func(b *testing.B) {
		rate(b, b.N, runWindowed(b.N, pipeWindow, func() *actor.Future { return protoCall(p0) }, protoResult))
	})
	b.Run("troupe-pipelined", func(b *testing.B) {
		rate(b, b.N, runWindowed(b.N, pipeWindow, func() *actors.Future[[]byte] { return troupeCall(e0) }, troupeResult))
	})
	b.Run("protoactor-n2n-4x4", func(b *testing.B) {
		n, err := runNxN(b.N, nxnWindow, func(c int) *actor.Future { return protoCall(clients.pids[c]) }, protoResult)
		rate(b, n, err)
	})
	b.Run("troupe-n2n-4x4", func(b *testing.B) {
		n, err := runNxN(b.N, nxnWindow, func(c int) *actors.Future[[]byte] { return troupeCall(clients.echos[c]) }, troupeResult)
		rate(b, n, err)
	})
}
