package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"troupe/runtime/api"
)

// Frame kinds.
const (
	kindCall   byte = 1
	kindArg    byte = 2
	kindArgErr byte = 3
	kindReply  byte = 4
	kindCancel byte = 5
	// need-arg (server to client): the server lacks the result a call
	// named as its argument (flagArgOfCall); the client sends it in an arg
	// frame.
	kindNeedArg byte = 6
)

// Call flags.
const (
	flagArgLater byte = 1 << 0 // the argument follows in an arg frame
	flagCancel   byte = 1 << 1 // the caller may cancel: track the call
	// With flagArgLater: the argument is the result of an earlier call on
	// the same connection, whose ID the call's bytes hold (a uvarint). The
	// server takes it from there (kept, or on that call's reply), or sends
	// a need-arg frame, and then the client sends the argument.
	flagArgOfCall byte = 1 << 2
	// The call names the incarnation of the actor it is for (a uvarint
	// after the flags): the server refuses it unless that incarnation
	// runs there (the fencing of replaced incarnations, FencedHost).
	flagEpoch byte = 1 << 3
)

// Reply statuses.
const (
	statusOK  byte = 0
	statusErr byte = 1 // payload is an encoded error (see errors.go)
)

// DefaultMaxFrame bounds one frame: larger arguments or results are refused
// with ErrFrameTooLarge instead of being buffered whole.
const DefaultMaxFrame = 64 << 20

var (
	// ErrFrameTooLarge: a frame exceeds the connection's limit.
	ErrFrameTooLarge = api.ErrFrameTooLarge
	// ErrMalformed: a frame could not be decoded.
	ErrMalformed = api.ErrMalformedFrame
	// ErrClosed: the connection is closed.
	ErrClosed = api.ErrClosed
)

// frame is one decoded frame. Byte slices alias the frame's buffer.
type frame struct {
	kind   byte
	callID uint64
	actor  string
	method string
	flags  byte
	epoch  uint64 // with flagEpoch: the incarnation the call is for
	status byte
	data   []byte
}

// appendFrame appends f's encoding, length prefix included, to b.
func appendFrame(b []byte, f *frame) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.kind)
	b = binary.AppendUvarint(b, f.callID)
	switch f.kind {
	case kindCall:
		b = appendBytes(b, f.actor)
		b = appendBytes(b, f.method)
		b = append(b, f.flags)
		if f.flags&flagEpoch != 0 {
			b = binary.AppendUvarint(b, f.epoch)
		}
		b = appendBytes(b, f.data)
	case kindArg, kindArgErr:
		b = appendBytes(b, f.data)
	case kindReply:
		b = append(b, f.status)
		b = appendBytes(b, f.data)
	case kindCancel, kindNeedArg:
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func appendBytes[S string | []byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeFrame decodes the body of a frame (after the length prefix). It
// never panics on bad input. intern, if not nil, turns the actor and method
// names into strings (a connection reuses the strings of names it has seen).
func decodeFrame(body []byte, intern *interner) (frame, error) {
	var f frame
	if len(body) < 1 {
		return f, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	f.kind = body[0]
	r := reader{b: body[1:]}
	f.callID = r.uvarint()
	switch f.kind {
	case kindCall:
		f.actor = intern.string(r.bytes())
		f.method = intern.string(r.bytes())
		f.flags = r.byte()
		if f.flags&flagEpoch != 0 {
			f.epoch = r.uvarint()
		}
		f.data = r.bytes()
	case kindArg, kindArgErr:
		f.data = r.bytes()
	case kindReply:
		f.status = r.byte()
		f.data = r.bytes()
	case kindCancel, kindNeedArg:
	default:
		return f, fmt.Errorf("%w: unknown kind %d", ErrMalformed, f.kind)
	}
	if r.err != nil {
		return f, fmt.Errorf("%w: kind %d: %v", ErrMalformed, f.kind, r.err)
	}
	if len(r.b) != 0 {
		return f, fmt.Errorf("%w: kind %d: %d trailing bytes", ErrMalformed, f.kind, len(r.b))
	}
	return f, nil
}

// argSource returns, for the body of a call frame whose argument is the
// result of an earlier call (flagArgOfCall), that call's ID; for any other
// frame, or a malformed one, 0.
func argSource(body []byte) uint64 {
	if len(body) < 1 || body[0] != kindCall {
		return 0
	}
	r := reader{b: body[1:]}
	r.uvarint()
	r.bytes()
	r.bytes()
	flags := r.byte()
	if flags&flagEpoch != 0 {
		r.uvarint()
	}
	data := r.bytes()
	if r.err != nil || flags&flagArgOfCall == 0 {
		return 0
	}
	id, n := binary.Uvarint(data)
	if n <= 0 || n != len(data) {
		return 0
	}
	return id
}

// reader decodes fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = errors.New("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("length %d exceeds the %d bytes left", n, len(r.b))
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// interner hands out one string per distinct name, so decoding the actor
// and method of each call does not allocate. It holds a bounded number of
// names; past that, names are allocated as usual. A nil interner always
// allocates.
type interner struct {
	m map[string]string
}

// maxInterned bounds the names one connection keeps.
const maxInterned = 4096

func (in *interner) string(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = map[string]string{}
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}
