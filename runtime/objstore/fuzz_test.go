package objstore

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadRequest: the owner's request decoder never panics, and what it
// accepts encodes back to the bytes it consumed.
func FuzzReadRequest(f *testing.F) {
	var it item
	it.id[0], it.key[0] = 1, 2
	f.Add(appendRequest(nil, opFetch, []item{it}))
	f.Add(appendRequest(nil, opRelease, []item{it, it}))
	f.Add([]byte{opRelease, 0, 0})
	f.Add([]byte{opRelease, 0xff, 0xff})
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		req, err := readRequest(r)
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) {
				t.Fatalf("error %v wraps neither ErrProtocol nor io.EOF", err)
			}
			return
		}
		consumed := b[:len(b)-r.Len()]
		if re := appendRequest(nil, req.op, req.items); !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoded %x, consumed %x", re, consumed)
		}
	})
}

// FuzzReadResponse: the fetcher's response decoder never panics, never
// accepts a size over the limit, and round-trips what it accepts.
func FuzzReadResponse(f *testing.F) {
	f.Add(appendResponse(nil, statusOK, 64<<20, ""))
	f.Add(appendResponse(nil, statusFreed, 0, "object x freed"))
	f.Add(appendResponse(nil, statusBad, 0, ""))
	f.Add([]byte{statusOK, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{statusUnknown, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		resp, err := readResponse(r)
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) {
				t.Fatalf("error %v wraps neither ErrProtocol nor io.EOF", err)
			}
			return
		}
		if resp.size > MaxObjectSize {
			t.Fatalf("accepted size %d", resp.size)
		}
		consumed := b[:len(b)-r.Len()]
		if re := appendResponse(nil, resp.status, resp.size, resp.msg); !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoded %x, consumed %x", re, consumed)
		}
	})
}

// FuzzDecodeRef: reference decoding never panics and round-trips.
func FuzzDecodeRef(f *testing.F) {
	f.Add(Ref{Owner: "127.0.0.1:1", Size: 1 << 30}.Encode())
	f.Add([]byte(refMagic))
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ref, err := DecodeRef(b)
		if err != nil {
			if !errors.Is(err, ErrBadRef) {
				t.Fatalf("error %v does not wrap ErrBadRef", err)
			}
			return
		}
		if ref.Size < 0 || ref.Size > MaxObjectSize || ref.Owner == "" {
			t.Fatalf("accepted %+v", ref)
		}
		again, err := DecodeRef(ref.Encode())
		if err != nil || again != ref {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, ref)
		}
	})
}
