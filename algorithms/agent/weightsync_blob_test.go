package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime"
)

// testSet is a seeded weight set of arrays of the given float32 counts.
func testSet(v int64, sizes ...int) WeightSet {
	r := rand.New(rand.NewPCG(uint64(v), 7))
	ws := WeightSet{Version: v}
	for i, n := range sizes {
		w := make([]float32, n)
		for j := range w {
			w[j] = float32(r.NormFloat64())
		}
		ws.Names = append(ws.Names, string(rune('a'+i))+"dapter")
		ws.Data = append(ws.Data, f32Bytes(w))
	}
	return ws
}

func sameSet(t *testing.T, got, want WeightSet) {
	t.Helper()
	if got.Version != want.Version || !slices.Equal(got.Names, want.Names) || !slices.EqualFunc(got.Data, want.Data, bytes.Equal) {
		t.Fatalf("decoded version %d names %v (%d bytes), want %d %v (%d bytes)", got.Version, got.Names, got.Bytes(), want.Version, want.Names, want.Bytes())
	}
}

// within reports whether b lies inside buf's bytes.
func within(b, buf []byte) bool {
	if len(b) == 0 {
		return true
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&buf[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

// The blob round-trips every set bit for bit with its version; decoded
// from memory its arrays view the encoded bytes (no copy), the first
// 64-byte aligned in them; read from a stream they are copies.
func TestWeightBlobRoundTrip(t *testing.T) {
	for _, ws := range []WeightSet{
		testSet(3, 1000),
		testSet(-1, 7, 0, 33000),
		{Version: 9, Names: []string{""}, Data: [][]byte{{}}},
		{Version: 4},
	} {
		enc, err := msgpack.Marshal(ws)
		if err != nil {
			t.Fatal(err)
		}
		if want := blobBinPrefix + ws.Bytes(); len(enc) < want || len(enc) > want+24+len(ws.Names)*(10+7)+blobAlign {
			t.Fatalf("%d bytes encoded for %d of weights", len(enc), ws.Bytes())
		}
		var got WeightSet
		if err := msgpack.Unmarshal(enc, &got); err != nil {
			t.Fatal(err)
		}
		sameSet(t, got, ws)
		for i, d := range got.Data {
			if !within(d, enc) {
				t.Fatalf("array %d is a copy, not a view of the encoded bytes", i)
			}
		}
		if len(got.Data) > 0 && len(got.Data[0]) > 0 {
			if off := uintptr(unsafe.Pointer(&got.Data[0][0])) - uintptr(unsafe.Pointer(&enc[0])); off%blobAlign != 0 {
				t.Fatalf("data at offset %d, not %d-byte aligned", off, blobAlign)
			}
		}
		var slow WeightSet
		if err := msgpack.NewDecoder(iotest.HalfReader(bytes.NewReader(enc))).Decode(&slow); err != nil {
			t.Fatal(err)
		}
		sameSet(t, slow, ws)
		if len(slow.Data) > 0 && len(slow.Data[0]) > 0 && within(slow.Data[0], enc) {
			t.Fatal("a stream's decoder viewed bytes it does not own")
		}
	}
	// Inside another value: the set and what follows it decode.
	type wrapped struct {
		Set  WeightSet
		Tail string
	}
	in := wrapped{testSet(5, 10, 3), "after"}
	enc, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out wrapped
	if err := msgpack.Unmarshal(enc, &out); err != nil || out.Tail != "after" {
		t.Fatalf("wrapped: %+v, %v", out, err)
	}
	sameSet(t, out.Set, in.Set)
}

// A torn or corrupt blob is refused with ErrWeightBlob (and ErrInput),
// naming what is wrong.
func TestWeightBlobErrors(t *testing.T) {
	ws := testSet(11, 40, 8)
	enc, err := msgpack.Marshal(ws)
	if err != nil {
		t.Fatal(err)
	}
	blob := enc[blobBinPrefix:]
	hl := int(binary.LittleEndian.Uint32(blob[20:]))
	edit := func(f func(b []byte) []byte) []byte { return f(slices.Clone(blob)) }
	for name, b := range map[string][]byte{
		"empty":              {},
		"cut in the header":  blob[:hl-1],
		"cut in the data":    blob[:len(blob)-4],
		"bytes past the end": append(slices.Clone(blob), 0, 0, 0, 0),
		"magic":              edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"format":             edit(func(b []byte) []byte { b[4] = 2; return b }),
		"element type":       edit(func(b []byte) []byte { b[6] = 1; return b }),
		"version bit":        edit(func(b []byte) []byte { b[8] ^= 1; return b }),
		"array size":         edit(func(b []byte) []byte { b[blobFixed+2+7] ^= 4; return b }),
		"header length":      edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[20:], uint32(len(b)+1)); return b }),
	} {
		if _, err := decodeWeightBlob(b); !errors.Is(err, ErrWeightBlob) || !errors.Is(err, ErrInput) {
			t.Errorf("%s: err %v, want ErrWeightBlob and ErrInput", name, err)
		}
	}
	// Through msgpack: a bin32 length past the bytes there are.
	short := slices.Clone(enc[:len(enc)-8])
	var got WeightSet
	if err := msgpack.Unmarshal(short, &got); !errors.Is(err, ErrWeightBlob) {
		t.Errorf("short message: %v, want ErrWeightBlob", err)
	}
	if err := msgpack.NewDecoder(iotest.OneByteReader(bytes.NewReader(short))).Decode(&got); !errors.Is(err, ErrWeightBlob) {
		t.Errorf("short stream: %v, want ErrWeightBlob", err)
	}
	if _, err := msgpack.Marshal(WeightSet{Names: []string{"x"}, Data: [][]byte{{1, 2, 3}}}); !errors.Is(err, ErrInput) {
		t.Errorf("encoding 3 bytes: %v, want ErrInput", err)
	}
}

// FuzzWeightBlob: any bytes are decoded or refused with ErrWeightBlob,
// never a panic; what decodes encodes to a blob that decodes the same,
// and msgpack's path (a bin value around the bytes) agrees.
func FuzzWeightBlob(f *testing.F) {
	for _, ws := range []WeightSet{testSet(1, 5), testSet(2, 3, 0, 9), {Version: 3}} {
		enc, err := msgpack.Marshal(ws)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc[blobBinPrefix:])
	}
	f.Add([]byte("TWSB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ws, err := decodeWeightBlob(b)
		if err != nil {
			if !errors.Is(err, ErrWeightBlob) {
				t.Fatalf("err %v, want ErrWeightBlob", err)
			}
			return
		}
		if len(ws.Names) != len(ws.Data) {
			t.Fatalf("%d names, %d arrays", len(ws.Names), len(ws.Data))
		}
		enc, err := msgpack.Marshal(ws)
		if err != nil {
			t.Fatal(err)
		}
		var again WeightSet
		if err := msgpack.Unmarshal(enc, &again); err != nil {
			t.Fatal(err)
		}
		sameSet(t, again, ws)
		var viaMsgpack WeightSet
		pre := binary.BigEndian.AppendUint32([]byte{0xc6}, uint32(len(b)))
		if err := msgpack.Unmarshal(append(pre, b...), &viaMsgpack); err != nil {
			t.Fatalf("the blob decodes alone but not as a msgpack value: %v", err)
		}
		sameSet(t, viaMsgpack, ws)
	})
}

// Through the actors (the embedded runtime, as the trainer runs them): a
// learner's two adapters, trained, reach every worker bit for bit with
// their version, and a worker's next export is the learner's.
func TestWeightSyncBitIdentical(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	cfg := loraConfig()
	cfg.Intermediate = 40
	tc := TeamConfig{Roles: []string{"planner", "tool"}, PerRole: true, SharedBase: true, Policy: cfg}
	learner, err := SpawnTeam(ctx, rt, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer learner.Kill(context.Background())
	var workers []*Team
	for i := range 2 {
		tc.Named, tc.NamePrefix = true, string(rune('a'+i))+"-"
		w, err := SpawnTeam(ctx, rt, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Kill(context.Background())
		workers = append(workers, w)
	}
	h := learner.Actors()["shared"]
	if _, err := actors.Call(ctx, h, (*Policy).SFT, SFTRequest{Examples: []Example{{"p a01 g22", "R"}}, Epochs: 2, BatchSize: 1, LR: 1e-2}).Get(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := actors.Call(ctx, workers[0].Actors()["shared"], (*Policy).ExportWeights, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := syncOnce(ctx, learner, workers, 12)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pub.Sets["shared"].Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.EqualFunc(before.Data, want.Data, bytes.Equal) {
		t.Fatal("the workers had the learner's adapters before the sync")
	}
	if !slices.Equal(want.Names, []string{"planner", "tool"}) || want.Version != 12 {
		t.Fatalf("published %v version %d", want.Names, want.Version)
	}
	for i, w := range workers {
		got, err := actors.Call(ctx, w.Actors()["shared"], (*Policy).ExportWeights, 12).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameSet(t, got, want)
		tl, err := w.Timelines(ctx)
		if err != nil || tl["shared"].Version != 12 {
			t.Fatalf("worker %d: timeline %+v, %v", i, tl, err)
		}
	}
}
