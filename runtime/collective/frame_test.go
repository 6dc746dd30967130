package collective

import (
	"bytes"
	"errors"
	"testing"

	"troupe/actors/collective"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range []frame{
		{typ: frameData, h: collective.Header{Seq: 7, Kind: collective.KindAllreduce, Op: collective.Mean, Count: 1 << 40, Chunk: 3}, n: 4096},
		{typ: frameData, h: collective.Header{Seq: 1, Kind: collective.KindBroadcast, Root: 5}, n: 0},
		{typ: frameHeartbeat},
		{typ: frameBye},
		{typ: frameFail, code: failMismatch, rank: 3, n: 10},
	} {
		got, err := decodeFrame(appendFrame(nil, f), 1<<20)
		if err != nil || got != f {
			t.Errorf("%+v: decoded %+v, %v", f, got, err)
		}
	}
	h := hello{epoch: "abc", from: 3, to: 1}
	b := appendHello(nil, h)
	got, n, err := decodeHelloFixed(b[:helloFixed])
	if err != nil || n != 3 || got.from != 3 || got.to != 1 || string(b[helloFixed:]) != "abc" {
		t.Fatalf("hello: %+v %d %v", got, n, err)
	}
}

func TestFrameErrors(t *testing.T) {
	ok := appendFrame(nil, frame{typ: frameData, h: collective.Header{Kind: collective.KindAllreduce}, n: 8})
	for name, b := range map[string][]byte{
		"short":     ok[:10],
		"type":      append([]byte{9}, ok[1:]...),
		"kind":      append([]byte{frameData, 0}, ok[2:]...),
		"op":        append([]byte{frameData, 1, 7}, ok[3:]...),
		"too large": appendFrame(nil, frame{typ: frameData, h: collective.Header{Kind: collective.KindAllreduce}, n: 1 << 21}),
		"heartbeat": appendFrame(nil, frame{typ: frameHeartbeat, n: 1}),
		"bye":       appendFrame(nil, frame{typ: frameBye, n: 1}),
		"fail code": appendFrame(nil, frame{typ: frameFail, code: 9}),
		"fail text": appendFrame(nil, frame{typ: frameFail, code: failLost, n: maxFailText + 1}),
	} {
		if _, err := decodeFrame(b, 1<<20); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"magic":   append([]byte("XXXX"), appendHello(nil, hello{epoch: "e"})[4:helloFixed]...),
		"version": append([]byte("TRCL\x01"), appendHello(nil, hello{epoch: "e"})[5:helloFixed]...),
		"epoch":   appendHello(nil, hello{})[:helloFixed],
	} {
		if _, _, err := decodeHelloFixed(b); !errors.Is(err, ErrFrame) {
			t.Errorf("hello %s: %v, want ErrFrame", name, err)
		}
	}
}

// FuzzDecodeFrame: any bytes decode to a frame that encodes back to them
// (for the fields that frame type carries) or fail with ErrFrame; nothing
// panics.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, frame{typ: frameData, h: collective.Header{Seq: 2, Kind: collective.KindAllgather, Count: 9, Chunk: 1}, n: 36}))
	f.Add(appendFrame(nil, frame{typ: frameHeartbeat}))
	f.Add(appendFrame(nil, frame{typ: frameBye}))
	f.Add(appendFrame(nil, frame{typ: frameFail, code: failLost, rank: 1, n: 5}))
	f.Add(appendHello(nil, hello{epoch: "0123456789ab", from: 2, to: 0}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= headerSize {
			fr, err := decodeFrame(b[:headerSize], 1<<20)
			if err == nil {
				again, err := decodeFrame(appendFrame(nil, fr), 1<<20)
				if err != nil || again != fr {
					t.Fatalf("%+v re-decoded as %+v, %v", fr, again, err)
				}
				if fr.typ == frameData && !bytes.Equal(appendFrame(nil, fr)[:3], b[:3]) {
					t.Fatalf("data frame's type, kind and op changed")
				}
			} else if !errors.Is(err, ErrFrame) {
				t.Fatalf("error %v does not wrap ErrFrame", err)
			}
		}
		if len(b) >= helloFixed {
			h, n, err := decodeHelloFixed(b[:helloFixed])
			if err == nil && (n < 1 || n > maxEpoch || h.from < 0 || h.to < 0) {
				t.Fatalf("hello %+v with epoch length %d accepted", h, n)
			}
			if err != nil && !errors.Is(err, ErrFrame) {
				t.Fatalf("error %v does not wrap ErrFrame", err)
			}
		}
	})
}
