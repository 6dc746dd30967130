package actors

import (
	"bytes"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Pooled msgpack encoding and decoding. msgpack.Marshal allocates three
// times per value (its bytes.Buffer, the buffer, a larger buffer once the
// value passes 64 bytes) and msgpack.Unmarshal once (its bytes.Reader);
// the actor call path encodes and decodes on every call, so it reuses
// encoders with their buffers and decoders with their readers. The result
// is the same bytes and values as Marshal and Unmarshal give.

// encBuf is a pooled encoder writing into a reusable buffer.
type encBuf struct {
	b   []byte
	enc *msgpack.Encoder
}

func (w *encBuf) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
func (w *encBuf) WriteByte(c byte) error      { w.b = append(w.b, c); return nil }

// maxPooledBuf bounds the buffer an encoder keeps between uses, so one large
// result does not stay pinned in the pool.
const maxPooledBuf = 64 << 10

var encPool = sync.Pool{New: func() any {
	w := &encBuf{b: make([]byte, 0, 256)}
	w.enc = msgpack.NewEncoder(w)
	return w
}}

// marshal is msgpack.Marshal with one allocation: the result, sized to fit.
func marshal(v any) ([]byte, error) {
	w := encPool.Get().(*encBuf)
	w.b = w.b[:0]
	w.enc.Reset(w) // default options, as Marshal's encoder has
	err := w.enc.Encode(v)
	var out []byte
	if err == nil {
		out = append([]byte(nil), w.b...)
	}
	if cap(w.b) <= maxPooledBuf {
		encPool.Put(w)
	}
	return out, err
}

// decBuf is a pooled decoder with the reader it decodes from.
type decBuf struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decPool = sync.Pool{New: func() any { return &decBuf{dec: msgpack.NewDecoder(nil)} }}

// unmarshal is msgpack.Unmarshal without allocations of its own.
func unmarshal(data []byte, v any) error {
	d := decPool.Get().(*decBuf)
	d.r.Reset(data)
	d.dec.Reset(&d.r) // default options, as Unmarshal's decoder has
	err := d.dec.Decode(v)
	d.r.Reset(nil) // keep no reference to data in the pool
	d.dec.Reset(nil)
	decPool.Put(d)
	return err
}
