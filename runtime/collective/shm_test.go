package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"troupe/actors/collective"
)

// formLinks connects n members over Unix sockets, each with a Transport of
// its own as if in its own process, and returns their links.
func formLinks(t *testing.T, n int, cfg Config) []collective.Links {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("shared memory between members is Linux's")
	}
	ts := make([]*Transport, n)
	ms := make([]collective.Member, n)
	eps := make([]string, n)
	actors := make([]string, n)
	for i := range ts {
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[i] = tr
		actors[i] = fmt.Sprintf("actor-%d", i)
	}
	for i := range ms {
		ms[i] = collective.Member{Group: "g", Epoch: fmt.Sprintf("shm-%p", ts[0]), Rank: i, Size: n, Actors: actors}
		var err error
		if eps[i], err = ts[i].Prepare(t.Context(), ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	ls := make([]collective.Links, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ms {
		wg.Go(func() { ls[i], errs[i] = ts[i].Connect(t.Context(), ms[i], eps) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	return ls
}

func groupsOf(t *testing.T, ls []collective.Links, gcfg collective.Config) []collective.Group {
	t.Helper()
	n := len(ls)
	actors := make([]string, n)
	for i := range actors {
		actors[i] = fmt.Sprintf("actor-%d", i)
	}
	gs := make([]collective.Group, n)
	for i, l := range ls {
		g, err := collective.NewGroup("g", i, n, actors, l, gcfg)
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// smallRings makes the rings small for a test, so that messages come in
// fragments and wrap round.
func smallRings(t *testing.T, n int) {
	old := shmRingBytes
	shmRingBytes = n
	t.Cleanup(func() { shmRingBytes = old })
}

// shmMappings counts this process's mappings of collective segments.
func shmMappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	return strings.Count(string(b), "memfd:troupe-collective")
}

// TestShmChosen: members on one host get shared memory with every peer,
// unless ShmEnv says not; over TCP they get none.
func TestShmChosen(t *testing.T) {
	ls := formLinks(t, 3, Config{})
	for i, l := range ls {
		s, ok := l.(*shmLinks)
		if !ok {
			t.Fatalf("member %d: links %T, want shared memory", i, l)
		}
		for j, p := range s.peers {
			if (p == nil) != (j == i) {
				t.Fatalf("member %d: peer %d on shared memory: %v", i, j, p != nil)
			}
		}
	}
	for _, l := range ls {
		l.Close()
	}
	t.Setenv(ShmEnv, "0")
	for i, l := range formLinks(t, 2, Config{}) {
		if _, ok := l.(*links); !ok {
			t.Fatalf("member %d with %s=0: links %T, want the socket's", i, ShmEnv, l)
		}
		l.Close()
	}
	t.Setenv(ShmEnv, "")
	for i, l := range formLinks(t, 2, Config{NoUnix: true}) {
		if _, ok := l.(*links); !ok {
			t.Fatalf("member %d over TCP: links %T", i, l)
		}
		l.Close()
	}
}

// TestShmAllreduce: over shared memory, with rings small enough that
// messages come in fragments and wrap round, every member ends with the
// bits of the in-memory group (the same algorithm, so the same order);
// the other operations work; closing unmaps every segment.
func TestShmAllreduce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	smallRings(t, 4*shmPage)
	before := shmMappings(t)
	for _, n := range []int{2, 3, 4} {
		for _, g := range []collective.Config{{DirectMaxBytes: 1 << 30}, {DirectMaxBytes: 1, ChunkBytes: 4096}, {DirectMaxBytes: 1, ChunkBytes: 64 << 10}} {
			t.Run(fmt.Sprintf("n%d/direct%d/chunk%d", n, g.DirectMaxBytes, g.ChunkBytes), func(t *testing.T) {
				gs := groupsOf(t, formLinks(t, n, Config{}), g)
				local := collective.NewLocalConfig("g", n, g)
				for _, size := range []int{1, 1000, 50001} {
					for _, op := range []collective.Op{collective.Sum, collective.Mean, collective.Max} {
						in := randBufs(n, size, uint64(size)+uint64(op))
						bufs, want := make([][]float32, n), make([][]float32, n)
						for i := range bufs {
							bufs[i] = append([]float32(nil), in[i]...)
							want[i] = append([]float32(nil), in[i]...)
						}
						noErrs(t, runAll(gs, func(g collective.Group) error { return g.Allreduce(t.Context(), bufs[g.Rank()], op) }))
						noErrs(t, runAll(local, func(g collective.Group) error { return g.Allreduce(t.Context(), want[g.Rank()], op) }))
						for i := range n {
							for j := range size {
								if math.Float32bits(bufs[i][j]) != math.Float32bits(want[0][j]) {
									t.Fatalf("op %d len %d member %d element %d = %v, want %v", op, size, i, j, bufs[i][j], want[0][j])
								}
							}
						}
					}
				}
				out := make([][]float32, n)
				noErrs(t, runAll(gs, func(g collective.Group) error {
					out[g.Rank()] = make([]float32, 3000*n)
					in := make([]float32, 3000)
					for i := range in {
						in[i] = float32(g.Rank()*3000 + i)
					}
					return g.Allgather(t.Context(), in, out[g.Rank()])
				}))
				for i := range n {
					for j, x := range out[i] {
						if x != float32(j) {
							t.Fatalf("allgather: member %d element %d = %v", i, j, x)
						}
					}
				}
				noErrs(t, runAll(gs, func(g collective.Group) error {
					b := make([]float32, 20000)
					if g.Rank() == n-1 {
						for i := range b {
							b[i] = float32(i)
						}
					}
					if err := g.Broadcast(t.Context(), b, n-1); err != nil {
						return err
					}
					if b[19999] != 19999 {
						return fmt.Errorf("broadcast gave %v", b[19999])
					}
					return g.Barrier(t.Context())
				}))
				for _, g := range gs {
					g.Close()
				}
			})
		}
	}
	if got := shmMappings(t); got != before {
		t.Fatalf("%d collective segments mapped after every group closed, %d before", got, before)
	}
}

// TestShmMismatch: members that make different calls fail with
// ErrMismatch over shared memory too.
func TestShmMismatch(t *testing.T) {
	gs := groupsOf(t, formLinks(t, 2, Config{}), collective.Config{})
	errs := runAll(gs, func(g collective.Group) error {
		return g.Allreduce(t.Context(), make([]float32, 10+g.Rank()), collective.Sum)
	})
	// The member that sees the mismatch first fails the group; the other
	// may see the mismatch too, or hear of the failure.
	mismatch := false
	for i, err := range errs {
		if err == nil {
			t.Fatalf("member %d: no error", i)
		}
		mismatch = mismatch || errors.Is(err, collective.ErrMismatch)
	}
	if !mismatch {
		t.Fatalf("no member saw the mismatch: %v", errs)
	}
}

// TestShmGarbage: bytes in a ring that are not a record (a torn or
// overwritten header, a length past the ring, a head beyond the tail's
// reach) fail the receiver's call, and the group, naming the peer, with
// ErrMemberLost and ErrFrame.
func TestShmGarbage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(r *shmRing)
	}{
		{"torn header", func(r *shmRing) {
			encodeRecord(r.data, record{h: collective.Header{Seq: 1, Kind: collective.KindBarrier}})
			r.data[20] ^= 1
			r.head.Store(recHeaderSize)
		}},
		{"past the end", func(r *shmRing) {
			encodeRecord(r.data, record{h: collective.Header{Seq: 1, Kind: collective.KindBarrier}, total: 1 << 20, n: 1 << 20})
			r.head.Store(recHeaderSize)
		}},
		{"unpublished payload", func(r *shmRing) {
			encodeRecord(r.data, record{h: collective.Header{Seq: 1, Kind: collective.KindBarrier}, total: 256, n: 256})
			r.head.Store(recHeaderSize)
		}},
		{"head too far", func(r *shmRing) { r.head.Store(uint64(r.size) + 64) }},
		{"unaligned head", func(r *shmRing) { r.head.Store(65) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := formLinks(t, 2, Config{})
			defer func() {
				for _, l := range ls {
					l.Close()
				}
			}()
			tc.spoil(ls[1].(*shmLinks).peers[0].out)
			ring(ls[1].(*shmLinks).peers[0].out.consBell)
			err := ls[0].Recv(t.Context(), 1, collective.Header{Seq: 1, Kind: collective.KindBarrier}, nil)
			var me *collective.MemberError
			if !errors.Is(err, collective.ErrMemberLost) || !errors.Is(err, ErrFrame) || !errors.As(err, &me) || me.Rank != 1 {
				t.Fatalf("Recv = %v, want ErrMemberLost and ErrFrame naming rank 1", err)
			}
			// The group failed: rank 1's call fails too (the member at
			// fault sees its connections end).
			err = ls[1].Recv(t.Context(), 0, collective.Header{Seq: 1, Kind: collective.KindBarrier}, nil)
			if !errors.Is(err, collective.ErrMemberLost) {
				t.Fatalf("rank 1's Recv = %v, want ErrMemberLost", err)
			}
		})
	}
}

// TestShmMemberLeaves: a member that closes mid-allreduce fails every
// other member's call naming it. (A killed member's socket ends without a
// bye: the worker package's kill -9 tests cover it across processes.)
func TestShmMemberLeaves(t *testing.T) {
	gs := groupsOf(t, formLinks(t, 4, Config{}), collective.Config{DirectMaxBytes: 1, ChunkBytes: 64 << 10})
	noErrs(t, runAll(gs, func(g collective.Group) error { return g.Barrier(t.Context()) }))
	start := make(chan struct{})
	var once sync.Once
	errs := runAll(gs, func(g collective.Group) error {
		if g.Rank() == 2 {
			<-start
			return g.Close()
		}
		once.Do(func() { close(start) })
		return g.Allreduce(t.Context(), make([]float32, 4<<20), collective.Sum)
	})
	wantLost(t, errs, 2, 2)
}

// TestShmCancel: a call waiting on a ring ends when its context does.
func TestShmCancel(t *testing.T) {
	ls := formLinks(t, 2, Config{})
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ls[0].Recv(ctx, 1, collective.Header{Seq: 1, Kind: collective.KindBarrier}, nil) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv = %v, want context.Canceled", err)
	}
}

// TestShmSegmentChecks: a segment whose header does not match its size,
// or a memfd that is not sealed, is refused.
func TestShmSegmentChecks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	seg, fd, err := newShmSegment(4 * shmPage)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.release()
	m, err := mapShmSegment(fd)
	closeFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	m.release()
	if _, err := readShmHeader(seg.mem[:shmPage]); !errors.Is(err, ErrFrame) {
		t.Fatalf("a header against the wrong size: %v", err)
	}
	bad := bytes.Clone(seg.mem)
	bad[4] = 9
	if _, err := readShmHeader(bad); !errors.Is(err, ErrFrame) {
		t.Fatalf("version 9: %v", err)
	}
	unsealed, err := os.CreateTemp(t.TempDir(), "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer unsealed.Close()
	unsealed.Write(seg.mem)
	if _, err := mapShmSegment(int(unsealed.Fd())); !errors.Is(err, ErrFrame) {
		t.Fatalf("a plain file: %v", err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	const size = 1 << 16
	h := collective.Header{Seq: 7, Kind: collective.KindAllreduceBF16, Op: collective.Max, Root: -1, Count: 1 << 40, Chunk: 3}
	var b [recHeaderSize]byte
	for _, rec := range []record{{pad: true}, {h: h, total: 1000, off: 200, n: 800}, {h: h}} {
		encodeRecord(b[:], rec)
		pos := 64
		got, err := decodeRecord(b[:], pos, size, 1<<30)
		if err != nil || got != rec {
			t.Fatalf("%+v: decoded %+v, %v", rec, got, err)
		}
	}
	for _, tc := range []struct {
		name string
		rec  record
		pos  int
	}{
		{"pad at the start", record{pad: true}, 0},
		{"past the end", record{h: h, total: size, n: size - 64}, 64},
		{"fragment past the message", record{h: h, total: 100, off: 50, n: 64}, 0},
		{"empty fragment", record{h: h, total: 100, off: 50}, 0},
		{"bad kind", record{h: collective.Header{Kind: 99}}, 0},
		{"bad op", record{h: collective.Header{Kind: 1, Op: 9}}, 0},
		{"too long", record{h: h, total: 1 << 31}, 0},
	} {
		encodeRecord(b[:], tc.rec)
		if _, err := decodeRecord(b[:], tc.pos, size, 1<<30); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", tc.name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	var b [recHeaderSize]byte
	encodeRecord(b[:], record{h: collective.Header{Seq: 1, Kind: collective.KindAllreduce, Count: 9}, total: 36, n: 36})
	f.Add(b[:], 64)
	encodeRecord(b[:], record{pad: true})
	f.Add(b[:], 128)
	f.Add(make([]byte, 64), 0)
	f.Fuzz(func(t *testing.T, b []byte, pos int) {
		const size = 1 << 16
		pos = int(uint(pos)%size) &^ 63
		rec, err := decodeRecord(b, pos, size, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error without ErrFrame: %v", err)
			}
			return
		}
		if rec.pad {
			return
		}
		if int(rec.n) > size-pos-recHeaderSize || rec.off+uint64(rec.n) > rec.total || rec.total > 1<<20 || !rec.h.Kind.Valid() {
			t.Fatalf("accepted %+v at %d", rec, pos)
		}
		var again [recHeaderSize]byte
		encodeRecord(again[:], rec)
		if !bytes.Equal(again[:], b) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, rec, again)
		}
	})
}

func FuzzDecodeOffer(f *testing.F) {
	f.Add(appendOffer(nil, DefaultShmRingBytes, true))
	f.Add(appendOffer(nil, 0, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		seg, n, err := decodeOffer(b)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error without ErrFrame: %v", err)
			}
			return
		}
		if seg && !validShmRingBytes(uint32(n)) {
			t.Fatalf("accepted rings of %d", n)
		}
		if seg && !bytes.Equal(appendOffer(nil, n, seg), b) {
			t.Fatalf("%x is not the offer it decodes to", b)
		}
	})
}

func FuzzShmHeader(f *testing.F) {
	mem := make([]byte, shmSegmentSize(4*shmPage))
	writeShmHeader(mem, 4*shmPage)
	f.Add(mem[:64], 4*shmPage)
	f.Fuzz(func(t *testing.T, head []byte, size int) {
		if size < 0 || size > 1<<20 {
			return
		}
		mem := make([]byte, size)
		copy(mem, head)
		n, err := readShmHeader(mem)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error without ErrFrame: %v", err)
			}
			return
		}
		if shmSegmentSize(n) != size {
			t.Fatalf("rings of %d in a segment of %d", n, size)
		}
	})
}

// FuzzShmRecv: whatever another process leaves in a ring, a receive ends
// (with a message, ErrFrame, ErrMismatch or the context's error) and
// never reads outside the ring.
func FuzzShmRecv(f *testing.F) {
	const size = 4 * shmPage
	msg := func(h collective.Header, payload []byte) []byte {
		b := make([]byte, recHeaderSize+align64(len(payload)))
		encodeRecord(b, record{h: h, total: uint64(len(payload)), n: uint32(len(payload))})
		copy(b[recHeaderSize:], payload)
		return b
	}
	h := collective.Header{Seq: 1, Kind: collective.KindAllreduce, Count: 4}
	one := msg(h, make([]byte, 16))
	f.Add(one, uint64(len(one)), uint64(0), 16)
	f.Add(one, uint64(len(one)), uint64(0), 8)
	var pad [recHeaderSize]byte
	encodeRecord(pad[:], record{pad: true})
	f.Add(append(pad[:], one...), uint64(size+len(one)), uint64(size-recHeaderSize), 16)
	f.Add(one[:recHeaderSize], uint64(recHeaderSize), uint64(0), 16)
	f.Fuzz(func(t *testing.T, data []byte, head, tail uint64, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		tail &^= 63
		mem := make([]byte, shmSegmentSize(size))
		writeShmHeader(mem, size)
		r := segmentRing(mem, size, 0)
		pos := int(tail % size)
		for i, b := range data {
			r.data[(pos+i)%size] = b
		}
		r.head.Store(head)
		r.tail.Store(tail)
		l := &links{cfg: Config{}.withDefaults(), m: collective.Member{Group: "g", Size: 2, Actors: []string{"a", "b"}},
			peers: make([]*peer, 2), lostCh: make(chan struct{}), stop: make(chan struct{})}
		s := &shmLinks{l: l, peers: []*shmPeer{nil, {rank: 1, in: r, out: segmentRing(mem, size, 1), tail: tail}}, closingCh: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		buf := make([]byte, n)
		err := s.Recv(ctx, 1, h, buf)
		if err != nil && !errors.Is(err, ErrFrame) && !errors.Is(err, collective.ErrMismatch) && !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv: %v", err)
		}
		l.wg.Wait()
	})
}

// TestShmCloseDuringCall: closing the links while a call waits on a ring
// (or copies into one) ends the call with ErrClosed before the segments
// are unmapped, and the peer's calls fail naming the member that left.
func TestShmCloseDuringCall(t *testing.T) {
	ls := formLinks(t, 2, Config{})
	defer ls[1].Close()
	h := collective.Header{Seq: 1, Kind: collective.KindAllreduce, Count: 1 << 20}
	recv, send := make(chan error, 1), make(chan error, 1)
	go func() { recv <- ls[0].Recv(t.Context(), 1, h, make([]byte, 4<<20)) }()
	go func() { send <- ls[0].Send(t.Context(), 1, h, make([]byte, 64<<20)) }() // more than the ring: it waits for room
	ls[0].Close()
	for what, ch := range map[string]chan error{"Recv": recv, "Send": send} {
		if err := <-ch; !errors.Is(err, collective.ErrClosed) {
			t.Fatalf("%s = %v, want ErrClosed", what, err)
		}
	}
	err := ls[1].Recv(t.Context(), 0, h, make([]byte, 64<<20)) // takes what was sent, then sees the end
	var me *collective.MemberError
	if !errors.As(err, &me) || me.Rank != 0 || !errors.Is(err, collective.ErrMemberLost) {
		t.Fatalf("the peer's Recv = %v, want ErrMemberLost naming rank 0", err)
	}
}
