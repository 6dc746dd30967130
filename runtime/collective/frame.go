package collective

import (
	"encoding/binary"
	"errors"
	"fmt"

	"troupe/actors/collective"
)

// Frames. Every frame starts with a fixed header of headerSize bytes:
//
//	type   u8  frameData, frameHeartbeat, frameFail or frameBye
//	kind   u8  collective.Kind (data)
//	op     u8  collective.Op (data); the failure's code (fail)
//	pad    u8
//	root   i32 (data); the member at fault's rank (fail)
//	seq    u64 (data)
//	count  u64 (data)
//	chunk  u32 (data)
//	length u32 payload bytes that follow: the data, or the failure's text
//
// little-endian. Payloads of float32 and bfloat16 buffers are the buffers'
// bytes as the host lays them out: troupe runs on little-endian machines
// (amd64, arm64) only.
const headerSize = 32

const (
	frameData      = 1
	frameHeartbeat = 2
	frameFail      = 3
	// frameBye is a member's last frame when it closes its links cleanly:
	// it sent everything it will send.
	frameBye = 4
)

// Failure codes of fail frames.
const (
	failLost     = 1
	failMismatch = 2
)

// maxFailText bounds a failure report's text.
const maxFailText = 4096

// ErrFrame: a peer sent bytes that are not a frame.
var ErrFrame = errors.New("collective: malformed frame")

// frame is a decoded frame header.
type frame struct {
	typ  byte
	h    collective.Header // data
	code byte              // fail
	rank int32             // fail
	n    uint32            // payload length
}

func appendFrame(b []byte, f frame) []byte {
	var w [headerSize]byte
	w[0] = f.typ
	switch f.typ {
	case frameData:
		w[1], w[2] = byte(f.h.Kind), byte(f.h.Op)
		binary.LittleEndian.PutUint32(w[4:], uint32(f.h.Root))
		binary.LittleEndian.PutUint64(w[8:], f.h.Seq)
		binary.LittleEndian.PutUint64(w[16:], f.h.Count)
		binary.LittleEndian.PutUint32(w[24:], f.h.Chunk)
	case frameFail:
		w[2] = f.code
		binary.LittleEndian.PutUint32(w[4:], uint32(f.rank))
	}
	binary.LittleEndian.PutUint32(w[28:], f.n)
	return append(b, w[:]...)
}

// decodeFrame decodes a frame header; maxPayload bounds its payload.
func decodeFrame(b []byte, maxPayload int) (frame, error) {
	if len(b) != headerSize {
		return frame{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrFrame, len(b), headerSize)
	}
	f := frame{typ: b[0], n: binary.LittleEndian.Uint32(b[28:])}
	switch f.typ {
	case frameData:
		f.h = collective.Header{
			Kind:  collective.Kind(b[1]),
			Op:    collective.Op(b[2]),
			Root:  int32(binary.LittleEndian.Uint32(b[4:])),
			Seq:   binary.LittleEndian.Uint64(b[8:]),
			Count: binary.LittleEndian.Uint64(b[16:]),
			Chunk: binary.LittleEndian.Uint32(b[24:]),
		}
		if !f.h.Kind.Valid() {
			return frame{}, fmt.Errorf("%w: unknown operation %d", ErrFrame, b[1])
		}
		if f.h.Op > collective.Max {
			return frame{}, fmt.Errorf("%w: unknown reduction %d", ErrFrame, b[2])
		}
		if int64(f.n) > int64(maxPayload) {
			return frame{}, fmt.Errorf("%w: payload of %d bytes, more than %d", ErrFrame, f.n, maxPayload)
		}
	case frameHeartbeat, frameBye:
		if f.n != 0 {
			return frame{}, fmt.Errorf("%w: frame type %d with %d payload bytes", ErrFrame, f.typ, f.n)
		}
	case frameFail:
		f.code = b[2]
		f.rank = int32(binary.LittleEndian.Uint32(b[4:]))
		if f.code != failLost && f.code != failMismatch {
			return frame{}, fmt.Errorf("%w: unknown failure code %d", ErrFrame, f.code)
		}
		if f.n > maxFailText {
			return frame{}, fmt.Errorf("%w: failure text of %d bytes, more than %d", ErrFrame, f.n, maxFailText)
		}
	default:
		return frame{}, fmt.Errorf("%w: unknown frame type %d", ErrFrame, f.typ)
	}
	return f, nil
}

// The hello frame a dialling member sends first on a new connection:
//
//	magic   4 bytes "TRCL"
//	version u8 (2: on a TLS connection a data frame's payload follows its
//	        header in sealed bulk frames, transport.Bulk, not in TLS records)
//	from    u32 the dialler's rank
//	to      u32 the rank it dialled
//	n       u8  the epoch's length (1..64), then the epoch
const (
	helloMagic   = "TRCL"
	helloVersion = 2
	helloFixed   = 4 + 1 + 4 + 4 + 1
	maxEpoch     = 64
)

type hello struct {
	epoch    string
	from, to int
}

func appendHello(b []byte, h hello) []byte {
	b = append(b, helloMagic...)
	b = append(b, helloVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to))
	b = append(b, byte(len(h.epoch)))
	return append(b, h.epoch...)
}

// decodeHelloFixed decodes the fixed part of a hello and returns the
// epoch's length, which follows.
func decodeHelloFixed(b []byte) (h hello, epochLen int, err error) {
	if len(b) != helloFixed {
		return hello{}, 0, fmt.Errorf("%w: hello of %d bytes", ErrFrame, len(b))
	}
	if string(b[:4]) != helloMagic {
		return hello{}, 0, fmt.Errorf("%w: not a collective hello", ErrFrame)
	}
	if b[4] != helloVersion {
		return hello{}, 0, fmt.Errorf("%w: hello version %d, this process speaks %d", ErrFrame, b[4], helloVersion)
	}
	from, to := binary.LittleEndian.Uint32(b[5:]), binary.LittleEndian.Uint32(b[9:])
	if from > 1<<20 || to > 1<<20 {
		return hello{}, 0, fmt.Errorf("%w: hello ranks %d → %d out of range", ErrFrame, from, to)
	}
	n := int(b[13])
	if n == 0 || n > maxEpoch {
		return hello{}, 0, fmt.Errorf("%w: hello epoch of %d bytes", ErrFrame, n)
	}
	return hello{from: int(from), to: int(to)}, n, nil
}
