package hf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// ErrCheckpoint reports weights that cannot be read: a malformed
// safetensors header or index, a missing or duplicated tensor, a wrong
// shape or dtype, or a checkpoint already closed.
var ErrCheckpoint = errors.New("hf: bad checkpoint")

// File names transformers uses for a model's weights.
const (
	WeightsFile = "model.safetensors"
	IndexFile   = "model.safetensors.index.json"
)

// maxHeader bounds a safetensors JSON header, as the format's reference
// implementation does (100 MB).
const maxHeader = 100 << 20

func ckErr(file, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCheckpoint, file, fmt.Sprintf(format, args...))
}

// Checkpoint is a model directory's safetensors weights, memory-mapped
// read-only: opening costs the headers only and reading a tensor converts
// straight from the page cache, so loading holds about one copy of the
// weights in memory. Its methods are safe for concurrent use.
type Checkpoint struct {
	dir string

	mu      sync.RWMutex // Close takes it for writing; readers for reading
	closed  bool
	files   []*stFile // sorted by name
	tensors map[string]*stTensor
	meta    map[string]string
	names   []string // sorted
}

type stFile struct {
	name  string // base name within dir
	data  []byte // the whole file (mapped)
	unmap func() error
	meta  map[string]string
}

type stTensor struct {
	info TensorInfo
	off  int64  // begin within the data section
	data []byte // within its file's mapping
}

// Open opens the weights of a Hugging Face model directory:
// model.safetensors if present, else model.safetensors.index.json and the
// shards its weight_map names. dir may also be a single .safetensors file.
func Open(dir string) (*Checkpoint, error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return openFiles(filepath.Dir(dir), []string{filepath.Base(dir)}, nil)
	}
	single := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(single); err == nil {
		return openFiles(dir, []string{WeightsFile}, nil)
	}
	index := filepath.Join(dir, IndexFile)
	data, err := os.ReadFile(index)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: neither %s nor %s", ErrCheckpoint, dir, WeightsFile, IndexFile)
		}
		return nil, fmt.Errorf("hf: open %s: %w", index, err)
	}
	weightMap, err := parseIndex(index, data)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range weightMap {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return openFiles(dir, files, weightMap)
}

// parseIndex decodes model.safetensors.index.json's weight_map.
func parseIndex(path string, data []byte) (map[string]string, error) {
	var idx struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, ckErr(path, "not a JSON object: %v", err)
	}
	if idx.WeightMap == nil || isNull(idx.WeightMap) {
		return nil, ckErr(path, "no weight_map")
	}
	m := map[string]string{}
	err := decodeObject(idx.WeightMap, func(key string, v json.RawMessage) error {
		if _, dup := m[key]; dup {
			return fmt.Errorf("tensor %q listed twice in weight_map", key)
		}
		var f string
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("weight_map[%q]: want a file name, got %s", key, short(v))
		}
		// Shards live beside the index: a path could read any file.
		if f == "" || f != filepath.Base(f) || f == "." || f == ".." || strings.ContainsAny(f, `/\`) {
			return fmt.Errorf("weight_map[%q]: %q is not a file name in the model directory", key, f)
		}
		m[key] = f
		return nil
	})
	if err != nil {
		return nil, ckErr(path, "%v", err)
	}
	if len(m) == 0 {
		return nil, ckErr(path, "weight_map is empty")
	}
	return m, nil
}

// decodeObject walks a JSON object's members in order, so duplicate keys
// (which encoding/json would silently merge) can be seen.
func decodeObject(data []byte, member func(key string, v json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("not JSON: object key %v", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("not JSON: value of %q: %v", key, err)
		}
		if err := member(key, v); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("not JSON: data after the object")
	}
	return nil
}

func openFiles(dir string, names []string, weightMap map[string]string) (_ *Checkpoint, err error) {
	slices.Sort(names)
	c := &Checkpoint{dir: dir, tensors: map[string]*stTensor{}, meta: map[string]string{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for _, name := range names {
		path := filepath.Join(dir, name)
		data, unmap, err := mapFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: open %s: %w", ErrCheckpoint, path, err)
		}
		f := &stFile{name: name, data: data, unmap: unmap}
		c.files = append(c.files, f)
		tensors, meta, err := parseSafetensors(name, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		f.meta = meta
		for k, v := range meta {
			if _, ok := c.meta[k]; !ok {
				c.meta[k] = v
			}
		}
		for _, t := range tensors {
			if prev, dup := c.tensors[t.info.Name]; dup {
				return nil, ckErr(filepath.Join(dir, name), "tensor %q is also in %s", t.info.Name, prev.info.File)
			}
			if weightMap != nil && weightMap[t.info.Name] != name {
				if weightMap[t.info.Name] == "" {
					return nil, ckErr(filepath.Join(dir, name), "tensor %q is not in %s's weight_map", t.info.Name, IndexFile)
				}
				return nil, ckErr(filepath.Join(dir, name), "tensor %q: %s's weight_map says it is in %s", t.info.Name, IndexFile, weightMap[t.info.Name])
			}
			c.tensors[t.info.Name] = t
		}
	}
	for name, file := range weightMap {
		if _, ok := c.tensors[name]; !ok {
			return nil, ckErr(filepath.Join(dir, file), "no tensor %q (%s's weight_map lists it there)", name, IndexFile)
		}
	}
	c.names = make([]string, 0, len(c.tensors))
	for name := range c.tensors {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c, nil
}

// parseSafetensors decodes and validates one safetensors file held in data:
// an 8-byte little-endian header length N, N bytes of JSON, then the data
// section. Validation follows the format's reference implementation: a
// JSON object whose members are __metadata__ (string to string) and
// tensors {"dtype", "shape", "data_offsets": [begin, end]}, no name twice,
// begin <= end, end - begin = elements * dtype size, and the tensors,
// sorted by offset, tiling the data section exactly (no overlap, no gap, no
// trailing bytes). Tensors need not be listed in offset order.
func parseSafetensors(file string, data []byte) ([]*stTensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, ckErr(file, "%d bytes is too short for a safetensors file", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeader {
		return nil, nil, ckErr(file, "header length %d exceeds the %d-byte limit", n, maxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, nil, ckErr(file, "header length %d runs past the end of the %d-byte file", n, len(data))
	}
	header := data[8 : 8+n]
	body := data[8+n:]
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, ckErr(file, "header is not a JSON object")
	}
	var tensors []*stTensor
	var meta map[string]string
	seen := map[string]bool{}
	err := decodeObject(header, func(key string, v json.RawMessage) error {
		if seen[key] {
			return fmt.Errorf("%q appears twice in the header", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			if err := json.Unmarshal(v, &meta); err != nil {
				return fmt.Errorf("__metadata__: want an object of strings, got %s", short(v))
			}
			return nil
		}
		t, err := decodeTensorEntry(file, key, v, int64(len(body)))
		if err != nil {
			return err
		}
		t.off, t.data = t.begin, body[t.begin:t.end]
		tensors = append(tensors, &t.stTensor)
		return nil
	})
	if err != nil {
		return nil, nil, ckErr(file, "header: %v", err)
	}
	// Tile check, in offset order.
	order := make([]*stTensor, len(tensors))
	copy(order, tensors)
	off := func(t *stTensor) int64 { return t.off }
	sort.SliceStable(order, func(i, j int) bool {
		oi, oj := off(order[i]), off(order[j])
		if oi != oj {
			return oi < oj
		}
		return len(order[i].data) < len(order[j].data)
	})
	var pos int64
	var prev string
	for _, t := range order {
		b := off(t)
		switch {
		case b < pos:
			return nil, nil, ckErr(file, "tensor %q (bytes %d..%d of the data) overlaps %q (ending at %d)", t.info.Name, b, b+int64(len(t.data)), prev, pos)
		case b > pos:
			return nil, nil, ckErr(file, "gap in the data section: bytes %d..%d belong to no tensor", pos, b)
		}
		pos = b + int64(len(t.data))
		prev = t.info.Name
	}
	if pos != int64(len(body)) {
		return nil, nil, ckErr(file, "data section has %d bytes, the tensors cover %d", len(body), pos)
	}
	return tensors, meta, nil
}

type tensorEntry struct {
	stTensor
	begin, end int64
}

func decodeTensorEntry(file, name string, v json.RawMessage, bodyLen int64) (*tensorEntry, error) {
	var e struct {
		DType       *string  `json:"dtype"`
		Shape       *[]int64 `json:"shape"`
		DataOffsets *[]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, fmt.Errorf("tensor %q: want {dtype, shape, data_offsets} with integer shape and offsets, got %s", name, short(v))
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return nil, fmt.Errorf("tensor %q: needs dtype, shape and data_offsets, got %s", name, short(v))
	}
	dt := DType(*e.DType)
	size, ok := dtypeSizes[dt]
	if !ok {
		return nil, fmt.Errorf("tensor %q: unknown dtype %q", name, *e.DType)
	}
	shape := make([]int, len(*e.Shape))
	elems := int64(1)
	for i, d := range *e.Shape {
		if d < 0 {
			return nil, fmt.Errorf("tensor %q: negative dimension in shape %v", name, *e.Shape)
		}
		if d != 0 && elems > (math.MaxInt64/size)/d {
			return nil, fmt.Errorf("tensor %q: shape %v is too large", name, *e.Shape)
		}
		elems *= d
		shape[i] = int(d)
	}
	offs := *e.DataOffsets
	if len(offs) != 2 {
		return nil, fmt.Errorf("tensor %q: data_offsets %v: want [begin, end]", name, offs)
	}
	b, en := offs[0], offs[1]
	if b < 0 || en < b {
		return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d]: want 0 <= begin <= end", name, b, en)
	}
	if en > bodyLen {
		return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the %d-byte data section", name, b, en, bodyLen)
	}
	if en-b != elems*size {
		return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] hold %d bytes, but %s %v needs %d", name, b, en, en-b, dt, *e.Shape, elems*size)
	}
	return &tensorEntry{stTensor: stTensor{info: TensorInfo{Name: name, DType: dt, Shape: shape, File: file}}, begin: b, end: en}, nil
}

// Dir is the directory the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// Names lists the tensors, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Info describes a tensor.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	t, ok := c.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	info := t.info
	info.Shape = slices.Clone(info.Shape)
	return info, true
}

// Metadata is the files' __metadata__ (merged; the first file in name
// order wins a conflict), e.g. {"format": "pt"}.
func (c *Checkpoint) Metadata() map[string]string {
	m := make(map[string]string, len(c.meta))
	for k, v := range c.meta {
		m[k] = v
	}
	return m
}

// Files lists the safetensors files, sorted.
func (c *Checkpoint) Files() []string {
	out := make([]string, len(c.files))
	for i, f := range c.files {
		out[i] = f.name
	}
	return out
}

// ReadF32 converts tensor name (F32, F16 or BF16) into dst, which must hold
// exactly its elements. shape is the shape the caller expects; a different
// one is an error naming the file, the tensor and both shapes.
func (c *Checkpoint) ReadF32(name string, shape []int, dst []float32) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("%w: %s: read %q after Close", ErrCheckpoint, c.dir, name)
	}
	t, ok := c.tensors[name]
	if !ok {
		return fmt.Errorf("%w: %s: no tensor %q", ErrCheckpoint, c.dir, name)
	}
	where := filepath.Join(c.dir, t.info.File)
	if !slices.Equal(t.info.Shape, shape) {
		return ckErr(where, "tensor %q has shape %s, want %s", name, shapeString(t.info.Shape), shapeString(shape))
	}
	if int64(len(dst)) != numel(shape) {
		return fmt.Errorf("hf: read %q: destination holds %d values, the tensor %d", name, len(dst), numel(shape))
	}
	switch t.info.DType {
	case F32:
		decodeF32(dst, t.data)
	case BF16:
		decodeBF16(dst, t.data)
	case F16:
		decodeF16(dst, t.data)
	default:
		return ckErr(where, "tensor %q has dtype %s, want F32, F16 or BF16", name, t.info.DType)
	}
	return nil
}

// Close unmaps the files. Reading after Close is an error, not a fault.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var first error
	for _, f := range c.files {
		if f.unmap != nil {
			if err := f.unmap(); err != nil && first == nil {
				first = fmt.Errorf("hf: unmap %s: %w", f.name, err)
			}
		}
		f.data = nil
	}
	for _, t := range c.tensors {
		t.data = nil
	}
	return first
}

// littleEndian: the host's byte order is the format's, so aligned data
// can be used in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// aligned reports whether b's data may be viewed as elements of size n.
func aligned(b []byte, n uintptr) bool {
	return len(b) > 0 && littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%n == 0
}

func decodeF32(dst []float32, src []byte) {
	if aligned(src, 4) {
		copy(dst, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(src))), len(dst)))
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func decodeBF16(dst []float32, src []byte) {
	if aligned(src, 2) {
		u := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(src))), len(dst))
		for i, v := range u {
			dst[i] = math.Float32frombits(uint32(v) << 16)
		}
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

func decodeF16(dst []float32, src []byte) {
	tab := f16Table()
	if aligned(src, 2) {
		u := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(src))), len(dst))
		for i, v := range u {
			dst[i] = tab[v]
		}
		return
	}
	for i := range dst {
		dst[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

// f16Table maps every IEEE half to its float32 (256 KiB, built once).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = f16ToF32(uint16(h))
	}
	return &t
})

// f16ToF32 converts an IEEE 754 binary16 to float32 exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, NaN (payload kept)
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// subnormal: mant * 2^-24, exact in float32
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// OpenModel loads a model directory's config.json and opens its weights,
// checking that they are exactly the tensors the config implies (see
// CheckTensors; ignorable extras are allowed).
func OpenModel(dir string) (Config, *Checkpoint, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return Config{}, nil, err
	}
	ck, err := Open(dir)
	if err != nil {
		return Config{}, nil, err
	}
	if err := CheckTensors(cfg, ck).Err(); err != nil {
		ck.Close()
		return Config{}, nil, fmt.Errorf("%s: %w", dir, err)
	}
	return cfg, ck, nil
}
