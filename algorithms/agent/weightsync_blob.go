package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// A WeightSet travels (an actor call's result, its argument, the object
// store) as one raw blob instead of msgpack's struct of byte arrays: a
// small header, then the arrays' little-endian float32s back to back. The
// learner's export is written once; a decoder reading from memory (what
// actors and the object store always hand it) takes the arrays as views of
// the encoded bytes, not copies, and ImportWeights copies them straight
// into the adapters. msgpack's own decoding of a 35 MB byte array grows
// its buffer 1 MiB at a time, which cost more than the import itself.
//
// The blob is a msgpack bin32 value (always bin32, so the header's padding
// can align the data) holding, little endian:
//
//	0   "TWSB"            magic
//	4   u16 1             format
//	6   u16 0             element type: float32 (the only one so far)
//	8   i64 version       the learner's version
//	16  u32 n             arrays
//	20  u32 H             header length: where the data begin
//	24  n × (u16 len | name | u64 bytes)
//	    zero padding      so the data begin 64-byte aligned in the value
//	H-4 u32 CRC-32C of the header before it
//	H   the arrays' bytes, in order
//
// The blob's length must be H plus the arrays' bytes exactly: a torn blob
// (cut short, or with bytes past its arrays) is refused, as is a header
// whose checksum, magic, format or type is wrong. The arrays' bytes carry
// no checksum of their own: they move in memory or over the object store's
// checked transfers, and a checksum would cost every worker one more pass
// over the set (about as long as the copy into its adapters).

// ErrWeightBlob reports an encoded weight set that cannot be decoded: torn,
// corrupt, or of an unknown format. It comes wrapped with ErrInput.
var ErrWeightBlob = errors.New("agent: bad weight blob")

const (
	blobMagic     = "TWSB"
	blobFormat    = 1
	blobFloat32   = 0
	blobFixed     = 24      // header bytes before the names
	blobAlign     = 64      // data alignment within the encoded value
	blobBinPrefix = 5       // msgpack bin32: code and u32 length
	blobMaxArrays = 1 << 16 // far above any policy's adapter count
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blobErr wraps a decoding failure with ErrWeightBlob and ErrInput.
func blobErr(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrInput, ErrWeightBlob, fmt.Sprintf(format, args...))
}

// header returns the blob's header for w (its length H included).
func (w WeightSet) header() ([]byte, error) {
	if len(w.Names) != len(w.Data) {
		return nil, fmt.Errorf("%w: weight set with %d names and %d arrays", ErrInput, len(w.Names), len(w.Data))
	}
	if len(w.Names) > blobMaxArrays {
		return nil, fmt.Errorf("%w: weight set of %d arrays (at most %d)", ErrInput, len(w.Names), blobMaxArrays)
	}
	h := make([]byte, blobFixed, blobFixed+len(w.Names)*16+blobAlign+4)
	copy(h, blobMagic)
	binary.LittleEndian.PutUint16(h[4:], blobFormat)
	binary.LittleEndian.PutUint16(h[6:], blobFloat32)
	binary.LittleEndian.PutUint64(h[8:], uint64(w.Version))
	binary.LittleEndian.PutUint32(h[16:], uint32(len(w.Names)))
	for i, name := range w.Names {
		if len(name) > 0xffff {
			return nil, fmt.Errorf("%w: weight set name of %d bytes", ErrInput, len(name))
		}
		if len(w.Data[i])%4 != 0 {
			return nil, fmt.Errorf("%w: weight set %q: %d bytes is not a number of float32s", ErrInput, name, len(w.Data[i]))
		}
		h = binary.LittleEndian.AppendUint16(h, uint16(len(name)))
		h = append(h, name...)
		h = binary.LittleEndian.AppendUint64(h, uint64(len(w.Data[i])))
	}
	// Pad so that the bin32 prefix, the header and its checksum end on
	// a multiple of blobAlign.
	pad := (blobAlign - (blobBinPrefix+len(h)+4)%blobAlign) % blobAlign
	h = append(h, make([]byte, pad)...)
	binary.LittleEndian.PutUint32(h[20:], uint32(len(h)+4))
	return binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli)), nil
}

// EncodeMsgpack implements msgpack.CustomEncoder: w as one blob, its
// arrays written once, straight from Data.
func (w WeightSet) EncodeMsgpack(e *msgpack.Encoder) error {
	h, err := w.header()
	if err != nil {
		return err
	}
	total := uint64(len(h)) + uint64(w.Bytes())
	if total > 0xffffffff {
		return fmt.Errorf("%w: weight set of %d bytes (a blob holds at most 4 GiB)", ErrInput, total)
	}
	out := e.Writer()
	var pre [blobBinPrefix]byte
	pre[0] = 0xc6 // bin32
	binary.BigEndian.PutUint32(pre[1:], uint32(total))
	if _, err := out.Write(pre[:]); err != nil {
		return err
	}
	if _, err := out.Write(h); err != nil {
		return err
	}
	for _, d := range w.Data {
		if _, err := out.Write(d); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder. Reading from memory (a
// *bytes.Reader, as actors and the object store decode), Data are views
// of the encoded bytes: read-only, shared by every decoder of them.
func (w *WeightSet) DecodeMsgpack(d *msgpack.Decoder) error {
	n, err := d.DecodeBytesLen()
	if err != nil {
		return blobErr("%v", err)
	}
	if n == -1 { // nil
		*w = WeightSet{}
		return nil
	}
	blob, err := blobBytes(d.Buffered(), n)
	if err != nil {
		return err
	}
	return w.parseBlob(blob)
}

// blobBytes takes the next n bytes of r: a view when r is a *bytes.Reader,
// else a copy read in steps (so a lying length allocates no more than the
// bytes that come).
func blobBytes(r io.Reader, n int) ([]byte, error) {
	if br, ok := r.(*bytes.Reader); ok {
		if br.Len() < n {
			return nil, blobErr("torn: %d bytes, the blob says %d", br.Len(), n)
		}
		v := viewWriter{n: n}
		// WriteTo hands over its remaining bytes in one Write; taking n
		// of them advances the reader by n (the short write it reports
		// when more follow is expected).
		if _, err := br.WriteTo(&v); err != nil && !errors.Is(err, io.ErrShortWrite) {
			return nil, blobErr("%v", err)
		}
		if len(v.b) != n {
			return nil, blobErr("torn: read %d of %d bytes", len(v.b), n)
		}
		return v.b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, blobErr("%v", err)
	}
	if len(b) != n {
		return nil, blobErr("torn: %d bytes, the blob says %d", len(b), n)
	}
	return b, nil
}

// viewWriter keeps the first n bytes written to it, without a copy. Only
// blobBytes uses it, on a bytes.Reader's own slice, which stays unmodified.
type viewWriter struct {
	n int
	b []byte
}

func (v *viewWriter) Write(p []byte) (int, error) {
	m := min(v.n-len(v.b), len(p))
	if v.b == nil {
		v.b = p[:m:m]
	} else {
		v.b = append(v.b, p[:m]...) // not a bytes.Reader: never happens
	}
	return m, nil
}

// decodeWeightBlob decodes one blob (no msgpack prefix).
func decodeWeightBlob(blob []byte) (WeightSet, error) {
	var w WeightSet
	err := w.parseBlob(blob)
	return w, err
}

// parseBlob sets w from blob, whose arrays it views.
func (w *WeightSet) parseBlob(blob []byte) error {
	if len(blob) < blobFixed+4 {
		return blobErr("torn: %d bytes, shorter than a header", len(blob))
	}
	if string(blob[:4]) != blobMagic {
		return blobErr("magic %q, want %q", blob[:4], blobMagic)
	}
	if f := binary.LittleEndian.Uint16(blob[4:]); f != blobFormat {
		return blobErr("format %d, want %d", f, blobFormat)
	}
	if t := binary.LittleEndian.Uint16(blob[6:]); t != blobFloat32 {
		return blobErr("element type %d, want %d (float32)", t, blobFloat32)
	}
	hl := uint64(binary.LittleEndian.Uint32(blob[20:]))
	if hl < blobFixed+4 || hl > uint64(len(blob)) {
		return blobErr("torn: header of %d bytes in a blob of %d", hl, len(blob))
	}
	hdr := blob[:hl-4]
	if got, want := crc32.Checksum(hdr, castagnoli), binary.LittleEndian.Uint32(blob[hl-4:]); got != want {
		return blobErr("header checksum %08x, want %08x", got, want)
	}
	n := binary.LittleEndian.Uint32(blob[16:])
	if n > blobMaxArrays || uint64(n)*10 > hl {
		return blobErr("%d arrays in a header of %d bytes", n, hl)
	}
	out := WeightSet{Version: int64(binary.LittleEndian.Uint64(blob[8:])), Names: make([]string, n), Data: make([][]byte, n)}
	p, off := uint64(blobFixed), hl
	for i := range out.Names {
		if p+2 > uint64(len(hdr)) {
			return blobErr("header ends in array %d's name", i)
		}
		l := uint64(binary.LittleEndian.Uint16(hdr[p:]))
		p += 2
		if p+l+8 > uint64(len(hdr)) {
			return blobErr("header ends in array %d's name", i)
		}
		out.Names[i] = string(hdr[p : p+l])
		p += l
		size := binary.LittleEndian.Uint64(hdr[p:])
		p += 8
		if size%4 != 0 {
			return blobErr("array %q: %d bytes is not a number of float32s", out.Names[i], size)
		}
		if size > uint64(len(blob))-off {
			return blobErr("torn: array %q of %d bytes, %d left in the blob", out.Names[i], size, uint64(len(blob))-off)
		}
		out.Data[i] = blob[off : off+size : off+size]
		off += size
	}
	for _, c := range hdr[p:] {
		if c != 0 {
			return blobErr("header padding is not zero")
		}
	}
	if off != uint64(len(blob)) {
		return blobErr("torn: %d bytes past the last array", uint64(len(blob))-off)
	}
	*w = out
	return nil
}
