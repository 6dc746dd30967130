package hf

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func randTensors(r *rand.Rand) []Tensor {
	shapes := [][]int{{3, 5}, {7}, {}, {0, 4}, {2, 3, 4}, {1}}
	var out []Tensor
	for i, s := range shapes {
		n := numel(s)
		d := make([]float32, n)
		for j := range d {
			d[j] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(20)-10)))
		}
		out = append(out, Tensor{Name: "t" + string(rune('a'+i)), Shape: s, Data: d})
	}
	return out
}

func TestSafetensorsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tensors := randTensors(r)
	for _, dt := range []DType{F32, BF16, F16} {
		path := filepath.Join(t.TempDir(), "x.safetensors")
		if err := WriteSafetensors(path, tensors, dt, map[string]string{"format": "pt", "k": "v"}); err != nil {
			t.Fatal(err)
		}
		ck, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if m := ck.Metadata(); m["format"] != "pt" || m["k"] != "v" {
			t.Errorf("metadata %v", m)
		}
		if len(ck.Names()) != len(tensors) {
			t.Errorf("names %v", ck.Names())
		}
		for _, tt := range tensors {
			info, ok := ck.Info(tt.Name)
			if !ok || info.DType != dt || !slices.Equal(info.Shape, tt.Shape) || info.File != "x.safetensors" {
				t.Fatalf("%s: %+v", tt.Name, info)
			}
			got := make([]float32, len(tt.Data))
			if err := ck.ReadF32(tt.Name, tt.Shape, got); err != nil {
				t.Fatal(err)
			}
			for i, v := range tt.Data {
				want := v
				switch dt {
				case BF16:
					want = math.Float32frombits(uint32(f32ToBF16(v)) << 16)
				case F16:
					want = f16ToF32(f32ToF16(v))
				}
				if got[i] != want {
					t.Fatalf("%s %s[%d] = %v, want %v", dt, tt.Name, i, got[i], want)
				}
				if dt != F32 && math.Abs(float64(got[i]-v)) > 1e-2*math.Abs(float64(v))+1e-7 {
					t.Fatalf("%s %s[%d] = %v from %v: rounding too coarse", dt, tt.Name, i, got[i], v)
				}
			}
		}
		// The data section starts 8-byte aligned.
		raw, _ := os.ReadFile(path)
		if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
			t.Errorf("header length %d leaves the data unaligned", n)
		}
		if err := ck.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ck.ReadF32(tensors[0].Name, tensors[0].Shape, make([]float32, 15)); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("read after close: %v", err)
		}
	}
}

func TestReadF32Errors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := WriteSafetensors(path, []Tensor{{Name: "a", Shape: []int{2, 3}, Data: make([]float32, 6)}}, F32, nil); err != nil {
		t.Fatal(err)
	}
	// An I64 tensor, written by hand.
	ipath := filepath.Join(t.TempDir(), "i.safetensors")
	os.WriteFile(ipath, rawFile(`{"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}`, 16), 0o644)
	ck, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ick, err := Open(ipath)
	if err != nil {
		t.Fatal(err)
	}
	defer ick.Close()
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{ck.ReadF32("a", []int{3, 2}, make([]float32, 6)), []string{"w.safetensors", `"a"`, "[2,3]", "[3,2]"}},
		{ck.ReadF32("b", []int{2, 3}, make([]float32, 6)), []string{`no tensor "b"`}},
		{ick.ReadF32("ids", []int{2}, make([]float32, 2)), []string{"i.safetensors", `"ids"`, "I64"}},
	} {
		if !errors.Is(tc.err, ErrCheckpoint) {
			t.Errorf("%v: not ErrCheckpoint", tc.err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%q lacks %q", tc.err, w)
			}
		}
	}
	if err := ck.ReadF32("a", []int{2, 3}, make([]float32, 5)); err == nil {
		t.Error("short destination accepted")
	}
}

// rawFile builds a safetensors file from a header and n data bytes.
func rawFile(header string, n int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, n)...)
}

func TestSafetensorsCorrupt(t *testing.T) {
	ok := `{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`
	if _, _, err := parseSafetensors("ok", rawFile(ok, 16)); err != nil {
		t.Fatalf("valid out-of-order file: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"seven bytes", make([]byte, 7), "too short"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "runs past the end"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
		{"not json", rawFile(`{"a":`, 0), "not JSON"},
		{"not an object", rawFile(`[1]`, 0), "not a JSON object"},
		{"trailing", rawFile(`{} {}`, 0), "after the object"},
		{"duplicate", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `"a" appears twice`},
		{"bad dtype", rawFile(`{"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}}`, 4), `unknown dtype "F31"`},
		{"missing field", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "needs dtype, shape and data_offsets"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "negative dimension"},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "integer shape"},
		{"huge shape", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "too large"},
		{"one offset", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4), "want [begin, end]"},
		{"reversed", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4), "begin <= end"},
		{"out of range", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), "run past"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "needs 8"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "overlaps"},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "gap"},
		{"trailing data", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "the tensors cover 4"},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, 0), "__metadata__"},
		{"tensor not an object", rawFile(`{"a":[1,2]}`, 0), `tensor "a"`},
	} {
		_, _, err := parseSafetensors("f.safetensors", tc.data)
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "f.safetensors") {
			t.Errorf("%s: %v, want ErrCheckpoint naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// writeShards writes a sharded checkpoint with the given index JSON.
func writeShards(t *testing.T, index string, shards map[string][]Tensor) string {
	t.Helper()
	dir := t.TempDir()
	for name, ts := range shards {
		if err := WriteSafetensors(filepath.Join(dir, name), ts, F32, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestShardedErrors(t *testing.T) {
	a := Tensor{Name: "a", Shape: []int{1}, Data: []float32{1}}
	b := Tensor{Name: "b", Shape: []int{1}, Data: []float32{2}}
	two := map[string][]Tensor{"s1.safetensors": {a}, "s2.safetensors": {b}}
	dir := writeShards(t, `{"metadata":{"total_size":8},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, two)
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ck.Files(), []string{"s1.safetensors", "s2.safetensors"}) || !slices.Equal(ck.Names(), []string{"a", "b"}) {
		t.Errorf("files %v names %v", ck.Files(), ck.Names())
	}
	got := make([]float32, 1)
	if err := ck.ReadF32("b", []int{1}, got); err != nil || got[0] != 2 {
		t.Errorf("b = %v, %v", got, err)
	}
	ck.Close()

	for _, tc := range []struct {
		name, index string
		shards      map[string][]Tensor
		want        string
	}{
		{"not json", `{`, two, "not a JSON object"},
		{"no weight_map", `{"metadata":{}}`, two, "no weight_map"},
		{"empty", `{"weight_map":{}}`, two, "empty"},
		{"path", `{"weight_map":{"a":"../s1.safetensors","b":"s2.safetensors"}}`, two, "not a file name"},
		{"absolute", `{"weight_map":{"a":"/etc/passwd","b":"s2.safetensors"}}`, two, "not a file name"},
		{"duplicate key", `{"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}}`, two, "listed twice"},
		{"missing file", `{"weight_map":{"a":"s1.safetensors","b":"s3.safetensors"}}`, two, "s3.safetensors"},
		{"wrong file", `{"weight_map":{"a":"s2.safetensors","b":"s1.safetensors"}}`, two, "weight_map says it is in"},
		{"unlisted", `{"weight_map":{"a":"s1.safetensors"}}`, map[string][]Tensor{"s1.safetensors": {a, b}}, `"b" is not in`},
		{"listed, absent", `{"weight_map":{"a":"s1.safetensors","c":"s1.safetensors","b":"s2.safetensors"}}`, two, `no tensor "c"`},
		{"in two shards", `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, map[string][]Tensor{"s1.safetensors": {a}, "s2.safetensors": {a, b}}, "also in"},
	} {
		_, err := Open(writeShards(t, tc.index, tc.shards))
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCheckpoint with %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "neither") {
		t.Errorf("empty dir: %v", err)
	}
}

// TestRoundingMatchesTorch compares the writers' BF16 and F16 rounding
// with PyTorch's on values gen.py chose: ties, subnormals, overflow,
// infinities and random magnitudes.
func TestRoundingMatchesTorch(t *testing.T) {
	ck, err := Open(filepath.Join(refDir, "rounding.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	info, _ := ck.Info("f32")
	x := make([]float32, info.Shape[0])
	if err := ck.ReadF32("f32", info.Shape, x); err != nil {
		t.Fatal(err)
	}
	bf, f16 := ck.tensors["bf16"].data, ck.tensors["f16"].data
	bad := 0
	for i, v := range x {
		if want, got := binary.LittleEndian.Uint16(bf[2*i:]), f32ToBF16(v); got != want && bad < 10 {
			t.Errorf("bf16(%g) = %#04x, torch %#04x", v, got, want)
			bad++
		}
		if want, got := binary.LittleEndian.Uint16(f16[2*i:]), f32ToF16(v); got != want && bad < 10 {
			t.Errorf("f16(%g) = %#04x, torch %#04x", v, got, want)
			bad++
		}
	}
	if len(x) < 2000 {
		t.Errorf("only %d values", len(x))
	}
}

// TestF16Exhaustive: every half converts to float32 and back unchanged,
// and every midpoint between neighbours rounds to the even one.
func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := f16ToF32(uint16(h))
		if f != f {
			if g := f32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := f32ToF16(f); g != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, g)
		}
		if h&0x7fff >= 0x7bff { // largest finite and above: no finite neighbour
			continue
		}
		next := f16ToF32(uint16(h + 1))
		mid := (f + next) / 2 // exact in float32
		want := uint16(h)
		if h&1 == 1 {
			want = uint16(h + 1)
		}
		if g := f32ToF16(mid); g != want {
			t.Fatalf("midpoint of %#04x and %#04x = %g -> %#04x, want %#04x", h, h+1, mid, g, want)
		}
	}
	if g := f32ToF16(65520); g != 0x7c00 {
		t.Errorf("65520 -> %#04x, want inf", g)
	}
	if g := f32ToF16(65519.99); g != 0x7bff {
		t.Errorf("65519.99 -> %#04x, want 65504", g)
	}
	for h := 0; h < 1<<16; h++ {
		f := math.Float32frombits(uint32(h) << 16)
		if f == f && f32ToBF16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x does not round trip", h)
		}
	}
}

func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 16))
	f.Add(rawFile(`{"a":{"dtype":"F16","shape":[],"data_offsets":[0,2]},"z":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]}}`, 2))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Add(rawFile(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8))
	f.Add(rawFile(`{}`, 0))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		tensors, _, err := parseSafetensors("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error not ErrCheckpoint: %v", err)
			}
			return
		}
		var total int64
		for _, tt := range tensors {
			size := numel(tt.info.Shape) * int64(tt.info.DType.Size())
			if int64(len(tt.data)) != size {
				t.Fatalf("%s: %d bytes for %d", tt.info.Name, len(tt.data), size)
			}
			total += size
			if n := numel(tt.info.Shape); n < 1<<20 && (tt.info.DType == F32 || tt.info.DType == F16 || tt.info.DType == BF16) {
				c := &Checkpoint{tensors: map[string]*stTensor{tt.info.Name: tt}}
				if err := c.ReadF32(tt.info.Name, tt.info.Shape, make([]float32, n)); err != nil {
					t.Fatal(err)
				}
			}
		}
		n := binary.LittleEndian.Uint64(data)
		if total != int64(len(data))-8-int64(n) {
			t.Fatalf("tensors cover %d of %d data bytes", total, int64(len(data))-8-int64(n))
		}
	})
}

// TestUnalignedTensors: tensors at offsets that are not a multiple of
// their element size decode the same as aligned ones.
func TestUnalignedTensors(t *testing.T) {
	vals := []float32{1.5, -2.25, 3e-3, 65504}
	header := `{"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},` +
		`"f32":{"dtype":"F32","shape":[4],"data_offsets":[1,17]},` +
		`"bf16":{"dtype":"BF16","shape":[4],"data_offsets":[17,25]},` +
		`"f16":{"dtype":"F16","shape":[4],"data_offsets":[25,33]}}`
	file := rawFile(header, 0)
	body := []byte{0}
	for _, v := range vals {
		body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
	}
	for _, v := range vals {
		body = binary.LittleEndian.AppendUint16(body, f32ToBF16(v))
	}
	for _, v := range vals {
		body = binary.LittleEndian.AppendUint16(body, f32ToF16(v))
	}
	path := filepath.Join(t.TempDir(), "u.safetensors")
	for shift := 0; shift < 4; shift++ {
		// shift the whole data section by one byte via the header padding
		h := header + strings.Repeat(" ", shift)
		file = append(rawFile(h, 0), body...)
		os.WriteFile(path, file, 0o644)
		ck, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"f32", "bf16", "f16"} {
			got := make([]float32, 4)
			if err := ck.ReadF32(name, []int{4}, got); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				want := v
				if name == "bf16" {
					want = math.Float32frombits(uint32(f32ToBF16(v)) << 16)
				}
				if name == "f16" {
					want = f16ToF32(f32ToF16(v))
				}
				if got[i] != want {
					t.Errorf("shift %d %s[%d] = %v want %v", shift, name, i, got[i], want)
				}
			}
		}
		ck.Close()
	}
}
