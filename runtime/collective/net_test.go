package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"troupe/actors/collective"
	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

// testSecurity is TLS with a token, as between cluster nodes.
func testSecurity(t testing.TB) transport.Security {
	t.Helper()
	p, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	return transport.Security{Token: "collective-test", Server: p.Server(), Client: p.Client()}
}

// form makes n members, each with a Transport of its own as if in its own
// process, and connects them.
func form(t testing.TB, n int, cfg Config, gcfg collective.Config) []collective.Group {
	t.Helper()
	return formVia(t, n, cfg, gcfg, nil)
}

// formVia is form with the members' endpoints passed through rewrite
// (nil: kept) before they connect.
func formVia(t testing.TB, n int, cfg Config, gcfg collective.Config, rewrite func(eps []string)) []collective.Group {
	t.Helper()
	ts := make([]*Transport, n)
	for i := range ts {
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[i] = tr
	}
	ms := make([]collective.Member, n)
	eps := make([]string, n)
	actors := make([]string, n)
	for i := range actors {
		actors[i] = fmt.Sprintf("actor-%d", i)
	}
	for i := range ms {
		ms[i] = collective.Member{Group: "g", Epoch: fmt.Sprintf("epoch-%p", ts[0]), Rank: i, Size: n, Actors: actors}
		var err error
		if eps[i], err = ts[i].Prepare(context.Background(), ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	if rewrite != nil {
		rewrite(eps)
	}
	gs := make([]collective.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ms {
		wg.Go(func() {
			l, err := ts[i].Connect(context.Background(), ms[i], eps)
			if err != nil {
				errs[i] = err
				return
			}
			gs[i], errs[i] = collective.NewGroup("g", i, n, actors, l, gcfg)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

func runAll(gs []collective.Group, fn func(g collective.Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { errs[i] = fn(g) })
	}
	wg.Wait()
	return errs
}

func randBufs(n, size int, seed uint64) [][]float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	out := make([][]float32, n)
	for i := range out {
		out[i] = make([]float32, size)
		for j := range out[i] {
			out[i][j] = float32(r.NormFloat64())
		}
	}
	return out
}

// TestNetAllreduce: over Unix sockets and over TCP with TLS, direct and
// ring, every member ends with the same bits, and those of the in-memory
// group (the same algorithm, so the same order).
func TestNetAllreduce(t *testing.T) {
	sec := testSecurity(t)
	for _, net := range []struct {
		name string
		cfg  Config
	}{{"unix", Config{Security: sec}}, {"tls", Config{Security: sec, NoUnix: true}}} {
		for _, n := range []int{2, 3, 4} {
			for _, g := range []collective.Config{{DirectMaxBytes: 1 << 30}, {DirectMaxBytes: 1, ChunkBytes: 4096}} {
				t.Run(fmt.Sprintf("%s/n%d/direct%d", net.name, n, g.DirectMaxBytes), func(t *testing.T) {
					gs := form(t, n, net.cfg, g)
					local := collective.NewLocalConfig("g", n, g)
					for _, size := range []int{1, 1000, 50001} {
						in := randBufs(n, size, uint64(size))
						bufs, want := make([][]float32, n), make([][]float32, n)
						for i := range bufs {
							bufs[i] = append([]float32(nil), in[i]...)
							want[i] = append([]float32(nil), in[i]...)
						}
						noErrs(t, runAll(gs, func(g collective.Group) error { return g.Allreduce(t.Context(), bufs[g.Rank()], collective.Mean) }))
						noErrs(t, runAll(local, func(g collective.Group) error { return g.Allreduce(t.Context(), want[g.Rank()], collective.Mean) }))
						for i := range n {
							for j := range size {
								if math.Float32bits(bufs[i][j]) != math.Float32bits(want[0][j]) {
									t.Fatalf("len %d member %d element %d = %v, want %v", size, i, j, bufs[i][j], want[0][j])
								}
							}
						}
					}
					// The other operations, once each.
					out := make([][]float32, n)
					noErrs(t, runAll(gs, func(g collective.Group) error {
						out[g.Rank()] = make([]float32, 3*n)
						return g.Allgather(t.Context(), []float32{float32(g.Rank()), 1, 2}, out[g.Rank()])
					}))
					if out[n-1][3*(n-1)] != float32(n-1) {
						t.Fatalf("allgather: %v", out[n-1])
					}
					noErrs(t, runAll(gs, func(g collective.Group) error {
						b := []float32{float32(g.Rank())}
						if err := g.Broadcast(t.Context(), b, n-1); err != nil {
							return err
						}
						if b[0] != float32(n-1) {
							return fmt.Errorf("broadcast gave %v", b[0])
						}
						return g.Barrier(t.Context())
					}))
				})
			}
		}
	}
}

func noErrs(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
}

// wantLost checks that every member but skip failed naming rank lost.
func wantLost(t *testing.T, errs []error, skip, lost int) {
	t.Helper()
	for i, err := range errs {
		if i == skip {
			continue
		}
		var me *collective.MemberError
		if !errors.Is(err, collective.ErrMemberLost) || !errors.As(err, &me) || me.Rank != lost || me.Actor != fmt.Sprintf("actor-%d", lost) {
			t.Fatalf("member %d: %v, want ErrMemberLost naming rank %d", i, err, lost)
		}
	}
}

// TestNetMemberLeaves: a member that closes mid-allreduce makes every
// other member's call fail naming it.
func TestNetMemberLeaves(t *testing.T) {
	gs := form(t, 4, Config{}, collective.Config{DirectMaxBytes: 1, ChunkBytes: 4096})
	start := make(chan struct{})
	errs := runAll(gs, func(g collective.Group) error {
		if g.Rank() == 2 {
			<-start
			return g.Close()
		}
		if g.Rank() == 0 {
			close(start)
		}
		return g.Allreduce(t.Context(), make([]float32, 1<<20), collective.Sum)
	})
	wantLost(t, errs, 2, 2)
}

// blackhole is a TCP proxy that forwards until cut, then holds the
// connections open and silent: a member cut off from the network.
type blackhole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// acceptDial accepts on ln until it is closed, dials target for each
// connection and hands the pair to serve (the test proxies).
func acceptDial(ln net.Listener, target string, serve func(c, d net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		serve(c, d)
	}
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Go(func() {
		acceptDial(ln, target, func(c, d net.Conn) {
			b.mu.Lock()
			b.conns = append(b.conns, c, d)
			b.mu.Unlock()
			b.wg.Add(2)
			go b.pipe(c, d)
			go b.pipe(d, c)
		})
	})
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		b.mu.Lock()
		cut := b.cut
		b.mu.Unlock()
		if cut {
			continue // swallow
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (b *blackhole) Cut() {
	b.mu.Lock()
	b.cut = true
	b.mu.Unlock()
}

// TestNetCutOff: a member whose connections go silent (cut off, or hung)
// makes the others' pending call fail within the timeout, naming it.
func TestNetCutOff(t *testing.T) {
	cfg := Config{NoUnix: true, Heartbeat: 20 * time.Millisecond, Timeout: 200 * time.Millisecond}
	const n = 3
	ts := make([]*Transport, n)
	for i := range ts {
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[i] = tr
	}
	actors := []string{"actor-0", "actor-1", "actor-2"}
	ms := make([]collective.Member, n)
	eps := make([]string, n)
	for i := range ms {
		ms[i] = collective.Member{Group: "g", Epoch: "cut", Rank: i, Size: n, Actors: actors}
		ep, err := ts[i].Prepare(t.Context(), ms[i])
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = ep
	}
	// Rank 0 is reached through a proxy, so the others' connections to it
	// can be cut.
	hole := newBlackhole(t, eps[0])
	eps[0] = hole.ln.Addr().String()
	gs := make([]collective.Group, n)
	var wg sync.WaitGroup
	for i := range ms {
		wg.Go(func() {
			l, err := ts[i].Connect(t.Context(), ms[i], eps)
			if err != nil {
				t.Error(err)
				return
			}
			gs[i], _ = collective.NewGroup("g", i, n, actors, l, collective.Config{})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	noErrs(t, runAll(gs, func(g collective.Group) error { return g.Barrier(t.Context()) }))
	hole.Cut()
	begin := time.Now()
	errs := runAll(gs[1:], func(g collective.Group) error { return g.Allreduce(t.Context(), make([]float32, 100), collective.Sum) })
	if d := time.Since(begin); d > 10*cfg.Timeout {
		t.Fatalf("the calls failed after %v, timeout %v", d, cfg.Timeout)
	}
	wantLost(t, errs, -1, 0)
}

// unixPair is a connected pair of Unix stream sockets.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs[0], cs[1]
}

// gatedConn holds its reads until open is closed (when open is not nil),
// and closes eof (when not nil) once a read returns io.EOF: it lets a test
// order what one member reads from two others.
type gatedConn struct {
	*net.UnixConn
	open <-chan struct{}
	eof  chan struct{}
	once sync.Once
}

func (c *gatedConn) Read(b []byte) (int, error) {
	if c.open != nil {
		<-c.open
	}
	n, err := c.UnixConn.Read(b)
	if err != nil && c.eof != nil {
		c.once.Do(func() { close(c.eof) })
	}
	return n, err
}

// pairLinks connects n members over socket pairs; wrap may replace member
// i's end of its connection to j.
func pairLinks(t *testing.T, n int, cfg Config, wrap func(i, j int, c net.Conn) net.Conn) []collective.Group {
	t.Helper()
	conns := make([][]net.Conn, n)
	for i := range conns {
		conns[i] = make([]net.Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			conns[i][j], conns[j][i] = unixPair(t)
		}
	}
	actors := make([]string, n)
	for i := range actors {
		actors[i] = fmt.Sprintf("actor-%d", i)
	}
	gs := make([]collective.Group, n)
	for i := range n {
		for j := range n {
			if j != i && wrap != nil {
				conns[i][j] = wrap(i, j, conns[i][j])
			}
		}
		m := collective.Member{Group: "g", Epoch: "pairs", Rank: i, Size: n, Actors: actors}
		g, err := collective.NewGroup("g", i, n, actors, newLinks(cfg.withDefaults(), m, conns[i]), collective.Config{})
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	return gs
}

// TestNetCloseAfterLastCall: a member that closes right after its last
// call does not fail the others' call, even when one of them reads its bye
// before another member's last frame. Rank 1's reads from rank 2 are held
// until rank 0 has closed and rank 1 has read all rank 0 sent: a clean
// close means "sent everything", so rank 1 still completes the barrier
// with rank 2's frame. (Treating the close as a lost member failed it.)
func TestNetCloseAfterLastCall(t *testing.T) {
	open, eof := make(chan struct{}), make(chan struct{})
	gs := pairLinks(t, 3, Config{}, func(i, j int, c net.Conn) net.Conn {
		switch {
		case i == 1 && j == 2:
			return &gatedConn{UnixConn: c.(*net.UnixConn), open: open}
		case i == 1 && j == 0:
			return &gatedConn{UnixConn: c.(*net.UnixConn), eof: eof}
		}
		return c
	})
	errs := make([]chan error, 3)
	for i, g := range gs {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- g.Barrier(t.Context()) }()
	}
	for _, i := range []int{0, 2} {
		if err := <-errs[i]; err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if err := gs[0].Close(); err != nil {
		t.Fatal(err)
	}
	<-eof // rank 1 read everything rank 0 sent, up to its end
	close(open)
	if err := <-errs[1]; err != nil {
		t.Fatalf("member 1, after member 0 closed: %v", err)
	}
	// A later call needs rank 0 and fails naming it, on both members.
	wantLost(t, runAll(gs[1:], func(g collective.Group) error { return g.Barrier(t.Context()) }), -1, 0)
	for _, g := range gs[1:] {
		g.Close()
	}
}

// deadConn is a connection of a member that can be killed: once it is,
// the member reads nothing more (until reap) and its socket is closed, as
// when its process is killed.
type deadConn struct {
	net.Conn
	killed *atomic.Bool
	reap   <-chan struct{}
}

func (c *deadConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.killed.Load() {
		<-c.reap
		return 0, net.ErrClosed
	}
	return n, err
}

// TestNetKilledMember: a member whose connections end without a bye (as
// when its process is killed) makes every other member's pending call
// fail at once naming it, even the members that do not need its frames
// yet.
func TestNetKilledMember(t *testing.T) {
	const n = 4
	gs, kill, reap := killable(t, n, 2)
	noErrs(t, runAll(gs, func(g collective.Group) error { return g.Barrier(t.Context()) }))
	started := make(chan struct{})
	var once sync.Once
	errs := runAll(gs, func(g collective.Group) error {
		if g.Rank() == 2 {
			<-started
			kill()
			return nil
		}
		// Rank 2's right neighbour (3) needs its frames; 0 and 1 only
		// hear of the loss.
		once.Do(func() { close(started) })
		return g.Allreduce(t.Context(), make([]float32, 1<<20), collective.Sum)
	})
	wantLost(t, errs, 2, 2)
	reap()
	for _, g := range gs {
		g.Close()
	}
}

// killable forms n members over socket pairs whose member victim can be
// killed: kill makes its connections end without a bye, as when its
// process dies; reap lets its readers return.
func killable(t *testing.T, n, victim int) (gs []collective.Group, kill, reap func()) {
	t.Helper()
	var killed atomic.Bool
	reaped := make(chan struct{})
	var raw []net.Conn // the victim's ends
	gs = pairLinks(t, n, Config{}, func(i, j int, c net.Conn) net.Conn {
		if i != victim {
			return c
		}
		raw = append(raw, c)
		return &deadConn{Conn: c, killed: &killed, reap: reaped}
	})
	kill = func() {
		killed.Store(true)
		for _, c := range raw {
			c.Close()
		}
	}
	return gs, kill, sync.OnceFunc(func() { close(reaped) })
}

// TestNetAllreduceBF16: bfloat16 buffers over the network end with the
// same bits on every member as in memory (the same reduction order), for
// the direct exchange and the scatter.
func TestNetAllreduceBF16(t *testing.T) {
	for _, g := range []collective.Config{{DirectMaxBytes: 1 << 30}, {DirectMaxBytes: 1, ChunkBytes: 4096}} {
		for _, n := range []int{2, 3} {
			gs := form(t, n, Config{}, g)
			local := collective.NewLocalConfig("g", n, g)
			in := randBufs(n, 30001, uint64(n))
			bufs, want := make([][]uint16, n), make([][]uint16, n)
			for i := range bufs {
				bufs[i], want[i] = make([]uint16, len(in[i])), make([]uint16, len(in[i]))
				for j, v := range in[i] {
					bufs[i][j] = uint16(math.Float32bits(v) >> 16)
				}
				copy(want[i], bufs[i])
			}
			noErrs(t, runAll(gs, func(g collective.Group) error { return g.AllreduceBF16(t.Context(), bufs[g.Rank()], collective.Mean) }))
			noErrs(t, runAll(local, func(g collective.Group) error { return g.AllreduceBF16(t.Context(), want[g.Rank()], collective.Mean) }))
			for i := range bufs {
				for j := range bufs[i] {
					if bufs[i][j] != want[0][j] {
						t.Fatalf("direct %d, n%d: member %d element %d: %#04x, want %#04x", g.DirectMaxBytes, n, i, j, bufs[i][j], want[0][j])
					}
				}
			}
		}
	}
}

// BenchmarkNetAllreduceBF16 compares an allreduce of n elements as
// float32 and as bfloat16 (half the bytes on the wire, converted and
// rounded on each member) between 2 members, on one host (Unix sockets or
// shared memory) and over TCP with TLS:
// go test -run '^$' -bench NetAllreduceBF16 ./runtime/collective
func BenchmarkNetAllreduceBF16(b *testing.B) {
	const n = 4 << 20
	sec := testSecurity(b)
	for _, nw := range []struct {
		name string
		cfg  Config
	}{{"local", Config{Security: sec}}, {"tls", Config{Security: sec, NoUnix: true}}} {
		for _, kind := range []string{"f32", "bf16"} {
			b.Run(nw.name+"/"+kind, func(b *testing.B) {
				gs := form(b, 2, nw.cfg, collective.Config{})
				f := [][]float32{make([]float32, n), make([]float32, n)}
				h := [][]uint16{make([]uint16, n), make([]uint16, n)}
				b.SetBytes(4 * n) // the buffer's float32 size for both: MB/s compare the same values
				for b.Loop() {
					errs := runAll(gs, func(g collective.Group) error {
						if kind == "bf16" {
							return g.AllreduceBF16(b.Context(), h[g.Rank()], collective.Sum)
						}
						return g.Allreduce(b.Context(), f[g.Rank()], collective.Sum)
					})
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// TestNetSealedPayloadTampered: over TLS a data frame's payload travels in
// sealed bulk frames beside the TLS records; a bit flipped on the wire
// inside one fails the receiver's call with ErrMemberLost naming the
// sender (the frame does not open), and no altered value is delivered.
func TestNetSealedPayloadTampered(t *testing.T) {
	const at = 1 << 20 // well past the handshake, inside the payload
	var wg sync.WaitGroup
	var lns []net.Listener
	t.Cleanup(func() {
		for _, l := range lns {
			l.Close()
		}
		wg.Wait()
	})
	proxy := func(target string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, l)
		wg.Go(func() {
			acceptDial(l, target, func(c, d net.Conn) {
				// Each direction flips one bit at byte at.
				pipe := func(dst, src net.Conn) {
					defer dst.Close()
					defer src.Close()
					buf := make([]byte, 32<<10)
					var n int
					for {
						k, err := src.Read(buf)
						if n < at && n+k > at {
							buf[at-n] ^= 0x10
						}
						n += k
						if _, werr := dst.Write(buf[:k]); werr != nil || err != nil {
							return
						}
					}
				}
				wg.Go(func() { pipe(d, c) })
				wg.Go(func() { pipe(c, d) })
			})
		})
		return l.Addr().String()
	}
	cfg := Config{Security: testSecurity(t), NoUnix: true}
	gs := formVia(t, 2, cfg, collective.Config{}, func(eps []string) {
		for i := range eps {
			eps[i] = proxy(eps[i])
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	want := make([]float32, 1<<20) // 4 MiB from rank 0
	for i := range want {
		want[i] = float32(i)
	}
	errs := runAll(gs, func(g collective.Group) error {
		b := make([]float32, len(want))
		if g.Rank() == 0 {
			copy(b, want)
		}
		err := g.Broadcast(ctx, b, 0)
		if err == nil && g.Rank() == 1 {
			for i := range b {
				if b[i] != want[i] {
					return fmt.Errorf("element %d arrived as %v, sent %v", i, b[i], want[i])
				}
			}
		}
		return err
	})
	var me *collective.MemberError
	if err := errs[1]; !errors.Is(err, collective.ErrMemberLost) || !errors.As(err, &me) || me.Rank != 0 {
		t.Fatalf("receiver: %v, want ErrMemberLost naming rank 0", err)
	}
	if !errors.Is(errs[1], transport.ErrBulkFrame) {
		t.Fatalf("receiver: %v, want a sealed frame that did not open (transport.ErrBulkFrame)", errs[1])
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited out its deadline instead of failing")
	}
}

// TestNetLossBetweenCalls: a member killed while no call is in progress
// (its connections end without a bye) is noticed by the others' readers
// all the same: their groups' Lost closes and Err names it
// (collective.LossNotifier, what an NCCL group watches while its kernels
// run outside the group's calls).
func TestNetLossBetweenCalls(t *testing.T) {
	gs, kill, reap := killable(t, 3, 1)
	defer func() {
		reap()
		for _, g := range gs {
			g.Close()
		}
	}()
	noErrs(t, runAll(gs, func(g collective.Group) error { return g.Barrier(t.Context()) }))
	ln, ok := gs[0].(collective.LossNotifier)
	if !ok {
		t.Fatal("a group over the network's links does not say when it fails")
	}
	select {
	case <-ln.Lost():
		t.Fatalf("lost before any member died: %v", ln.Err())
	default:
	}
	kill()
	for _, i := range []int{0, 2} {
		ln := gs[i].(collective.LossNotifier)
		select {
		case <-ln.Lost():
		case <-time.After(30 * time.Second):
			t.Fatalf("member %d did not notice rank 1's death between calls", i)
		}
		var me *collective.MemberError
		if err := ln.Err(); !errors.Is(err, collective.ErrMemberLost) || !errors.As(err, &me) || me.Rank != 1 {
			t.Fatalf("member %d: %v, want ErrMemberLost naming rank 1", i, err)
		}
	}
}
