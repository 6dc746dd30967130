package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync/atomic"
	"unsafe"

	"troupe/actors/collective"
)

// Members of a group on one host exchange data through shared memory: a
// segment per connection (a memfd, so nothing is named on disk and the
// kernel frees it once both processes have unmapped it or died), made by
// the dialling member and passed over the Unix socket with SCM_RIGHTS
// (shm_linux.go). The segment holds two rings, one a direction; each has
// one producer and one consumer. The Unix socket stays: it carries the
// handshake, heartbeats, failure reports and the bye, and its end tells a
// member that its peer died (shm_links.go).
//
// Segment layout (every offset page-aligned):
//
//	page 0        header: magic "TRSM", version u8, 3 zero bytes, ring bytes u32
//	page 1        ring 0's control (dialler → acceptor)
//	page 2        ring 1's control (acceptor → dialler)
//	3 pages on    ring 0's data, then ring 1's
//
// A ring's control page, each group of words on its own cache line:
//
//	  0  head     u64  bytes ever published (the producer's)
//	  8  closed   u32  the producer closed its links cleanly: nothing more comes
//	 64  consBell u32  bumped to wake the consumer (a futex word)
//	 68  consWait u32  the consumer is about to sleep on consBell
//	128  tail     u64  bytes ever consumed (the consumer's)
//	136  gone     u32  the consumer closed its links: nothing more is taken
//	192  prodBell u32  bumped to wake the producer
//	196  prodWait u32  the producer is about to sleep on prodBell
//
// The data is a sequence of records at 64-byte aligned offsets: a 64-byte
// record header (encodeRecord) and its payload, padded to 64 bytes. A
// record never wraps round the ring's end: a pad record there sends the
// consumer back to offset 0. A message longer than a quarter of the ring
// goes as several records (fragments), so a ring of any size carries
// messages of any length.
//
// Everything read from the segment was written by another process, so it
// is checked before use: a record header carries a CRC-32C and every
// length is bounded by the ring (decodeRecord, fuzzed); head and tail must
// stay within a ring of each other. A bad one fails the group with a
// *collective.MemberError naming the peer, matching ErrMemberLost and
// ErrFrame.
const (
	shmMagic      = "TRSM"
	shmVersion    = 1
	shmPage       = 4096
	recHeaderSize = 64

	ctlHead     = 0
	ctlClosed   = 8
	ctlConsBell = 64
	ctlConsWait = 68
	ctlTail     = 128
	ctlGone     = 136
	ctlProdBell = 192
	ctlProdWait = 196

	recData = 0x44525354 // "TSRD"
	recPad  = 0x50525354 // "TSRP"
)

// DefaultShmRingBytes is the size of each direction's ring: eight of the
// ring algorithm's default 512 KiB chunks in flight.
const DefaultShmRingBytes = 4 << 20

// ShmEnv is the environment variable that, set to "0", keeps the members of
// one host on the Unix socket stream instead of shared memory (to compare
// the two).
const ShmEnv = "TROUPE_COLLECTIVE_SHM"

// shmRingBytes is the rings' size; tests make it small.
var shmRingBytes = DefaultShmRingBytes

// shmEnabled reports whether members of one host use shared memory.
func shmEnabled() bool { return shmSupported && os.Getenv(ShmEnv) != "0" }

// shmSegmentSize is the size of a segment with rings of ringBytes.
func shmSegmentSize(ringBytes int) int { return 3*shmPage + 2*ringBytes }

// validShmRingBytes reports whether n is a ring size this package uses: a
// multiple of the page from 4 pages to 1 GiB.
func validShmRingBytes(n uint32) bool {
	return n >= 4*shmPage && n <= 1<<30 && n%shmPage == 0
}

// writeShmHeader writes a new segment's header.
func writeShmHeader(mem []byte, ringBytes int) {
	copy(mem, shmMagic)
	mem[4] = shmVersion
	binary.LittleEndian.PutUint32(mem[8:], uint32(ringBytes))
}

// readShmHeader checks a segment's header against its size and returns
// its rings' size.
func readShmHeader(mem []byte) (int, error) {
	if len(mem) < shmPage {
		return 0, fmt.Errorf("%w: shared segment of %d bytes", ErrFrame, len(mem))
	}
	if string(mem[:4]) != shmMagic {
		return 0, fmt.Errorf("%w: not a collective shared segment", ErrFrame)
	}
	if mem[4] != shmVersion {
		return 0, fmt.Errorf("%w: shared segment version %d, this process speaks %d", ErrFrame, mem[4], shmVersion)
	}
	n := binary.LittleEndian.Uint32(mem[8:])
	if !validShmRingBytes(n) || shmSegmentSize(int(n)) != len(mem) {
		return 0, fmt.Errorf("%w: shared segment of %d bytes with rings of %d", ErrFrame, len(mem), n)
	}
	return int(n), nil
}

// shmRing is one direction of a segment, seen from one side.
type shmRing struct {
	size int    // data bytes
	data []byte // size bytes

	head, tail         *atomic.Uint64
	closed, gone       *atomic.Uint32
	consBell, consWait *atomic.Uint32
	prodBell, prodWait *atomic.Uint32
}

// ring returns ring i (0 or 1) of a mapped segment with rings of size.
func segmentRing(mem []byte, size, i int) *shmRing {
	ctl := mem[(1+i)*shmPage : (2+i)*shmPage]
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&ctl[off])) }
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&ctl[off])) }
	start := 3*shmPage + i*size
	return &shmRing{
		size: size, data: mem[start : start+size : start+size],
		head: u64(ctlHead), tail: u64(ctlTail), closed: u32(ctlClosed), gone: u32(ctlGone),
		consBell: u32(ctlConsBell), consWait: u32(ctlConsWait),
		prodBell: u32(ctlProdBell), prodWait: u32(ctlProdWait),
	}
}

// maxFrag is the largest payload of one record.
func (r *shmRing) maxFrag() int { return r.size/4 - recHeaderSize }

func align64(n int) int { return (n + 63) &^ 63 }

// record is a decoded record header.
type record struct {
	pad   bool
	h     collective.Header
	total uint64 // the message's payload bytes
	off   uint64 // this fragment's offset in it
	n     uint32 // this fragment's payload bytes
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord writes a record header into b (recHeaderSize bytes):
//
//	 0  tag   u32 recData or recPad
//	 4  kind  u8, op u8, 2 zero bytes
//	 8  root  i32
//	12  chunk u32
//	16  seq   u64
//	24  count u64
//	32  total u64 the message's payload bytes
//	40  off   u64 the fragment's offset in the message
//	48  n     u32 the fragment's payload bytes
//	52  crc   u32 CRC-32C (Castagnoli) of bytes 0..52
//	56  8 zero bytes
//
// A pad record has only the tag and the CRC.
func encodeRecord(b []byte, rec record) {
	b = b[:recHeaderSize]
	clear(b)
	if rec.pad {
		binary.LittleEndian.PutUint32(b, recPad)
	} else {
		binary.LittleEndian.PutUint32(b, recData)
		b[4], b[5] = byte(rec.h.Kind), byte(rec.h.Op)
		binary.LittleEndian.PutUint32(b[8:], uint32(rec.h.Root))
		binary.LittleEndian.PutUint32(b[12:], rec.h.Chunk)
		binary.LittleEndian.PutUint64(b[16:], rec.h.Seq)
		binary.LittleEndian.PutUint64(b[24:], rec.h.Count)
		binary.LittleEndian.PutUint64(b[32:], rec.total)
		binary.LittleEndian.PutUint64(b[40:], rec.off)
		binary.LittleEndian.PutUint32(b[48:], rec.n)
	}
	binary.LittleEndian.PutUint32(b[52:], crc32.Checksum(b[:52], castagnoli))
}

// decodeRecord decodes the record header b (recHeaderSize bytes, copied
// out of the ring) found at offset pos of a ring of ringBytes; maxPayload
// bounds a message.
func decodeRecord(b []byte, pos, ringBytes, maxPayload int) (record, error) {
	if len(b) != recHeaderSize {
		return record{}, fmt.Errorf("%w: record header of %d bytes, want %d", ErrFrame, len(b), recHeaderSize)
	}
	if got, want := binary.LittleEndian.Uint32(b[52:]), crc32.Checksum(b[:52], castagnoli); got != want {
		return record{}, fmt.Errorf("%w: record header at %d: checksum %08x, want %08x (torn or overwritten)", ErrFrame, pos, got, want)
	}
	if binary.LittleEndian.Uint64(b[56:]) != 0 || b[6] != 0 || b[7] != 0 {
		return record{}, fmt.Errorf("%w: record header at %d: reserved bytes set", ErrFrame, pos)
	}
	switch tag := binary.LittleEndian.Uint32(b); tag {
	case recPad:
		for _, x := range b[4:52] {
			if x != 0 {
				return record{}, fmt.Errorf("%w: pad record at %d with fields set", ErrFrame, pos)
			}
		}
		if pos == 0 {
			return record{}, fmt.Errorf("%w: pad record at the ring's start", ErrFrame)
		}
		return record{pad: true}, nil
	case recData:
	default:
		return record{}, fmt.Errorf("%w: record at %d: unknown tag %08x", ErrFrame, pos, tag)
	}
	rec := record{
		h: collective.Header{
			Kind:  collective.Kind(b[4]),
			Op:    collective.Op(b[5]),
			Root:  int32(binary.LittleEndian.Uint32(b[8:])),
			Chunk: binary.LittleEndian.Uint32(b[12:]),
			Seq:   binary.LittleEndian.Uint64(b[16:]),
			Count: binary.LittleEndian.Uint64(b[24:]),
		},
		total: binary.LittleEndian.Uint64(b[32:]),
		off:   binary.LittleEndian.Uint64(b[40:]),
		n:     binary.LittleEndian.Uint32(b[48:]),
	}
	switch {
	case !rec.h.Kind.Valid():
		return record{}, fmt.Errorf("%w: record at %d: unknown operation %d", ErrFrame, pos, b[4])
	case rec.h.Op > collective.Max:
		return record{}, fmt.Errorf("%w: record at %d: unknown reduction %d", ErrFrame, pos, b[5])
	case rec.total > uint64(maxPayload):
		return record{}, fmt.Errorf("%w: record at %d: message of %d bytes, more than %d", ErrFrame, pos, rec.total, maxPayload)
	case int64(rec.n) > int64(ringBytes-pos-recHeaderSize):
		return record{}, fmt.Errorf("%w: record at %d: %d payload bytes past the ring's end (%d)", ErrFrame, pos, rec.n, ringBytes)
	case rec.off > rec.total || uint64(rec.n) > rec.total-rec.off:
		return record{}, fmt.Errorf("%w: record at %d: fragment %d+%d of a %d-byte message", ErrFrame, pos, rec.off, rec.n, rec.total)
	case rec.n == 0 && rec.total != 0:
		return record{}, fmt.Errorf("%w: record at %d: empty fragment of a %d-byte message", ErrFrame, pos, rec.total)
	}
	return rec, nil
}

// errShmStopped is what a wait's stop function returns to end the wait
// without an error of its own (the caller decides).
var errShmStopped = errors.New("collective: shared ring wait stopped")

// ringEnd is the check of a ring's bounds: how far head may be from tail.
func (r *shmRing) span() (head, tail uint64, err error) {
	head, tail = r.head.Load(), r.tail.Load()
	if head-tail > uint64(r.size) || (head-tail)%64 != 0 || head%64 != 0 {
		return head, tail, fmt.Errorf("%w: shared ring head %d and tail %d (ring of %d bytes)", ErrFrame, head, tail, r.size)
	}
	return head, tail, nil
}
