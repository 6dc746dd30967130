package policy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"troupe/gpu/compute"
)

// Checkpoints use the safetensors format (huggingface/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON header, then the raw
// little-endian tensor data. The header maps each tensor name to
// {"dtype":"F32","shape":[...],"data_offsets":[begin,end]} (byte offsets
// into the data section) and "__metadata__" to string key/values; ours hold
// the Config, so a checkpoint is self-describing. Tensor names and shapes:
//
//	wte.weight [V,C]  wpe.weight [T,C]  ln_f.weight, ln_f.bias [C]
//	h.<l>.ln_1.weight, h.<l>.ln_1.bias [C]
//	h.<l>.attn.qkv.weight [3C,C]   h.<l>.attn.qkv.bias [3C]
//	h.<l>.attn.proj.weight [C,C]   h.<l>.attn.proj.bias [C]
//	h.<l>.ln_2.weight, h.<l>.ln_2.bias [C]
//	h.<l>.mlp.fc.weight [4C,C]     h.<l>.mlp.fc.bias [4C]
//	h.<l>.mlp.proj.weight [C,4C]   h.<l>.mlp.proj.bias [C]
//
// Matrices are [out,in] as in a PyTorch nn.Linear (not GPT-2's Conv1D
// [in,out]); the output head is tied to wte.weight.

// ErrCheckpoint reports a checkpoint that cannot be read: malformed
// header, wrong dtype or shape, missing or overlapping tensors, truncated
// data, or a config that does not match.
var ErrCheckpoint = errors.New("policy: bad checkpoint")

// maxHeader bounds the JSON header (the format's reference implementation
// uses 100 MB).
const maxHeader = 100 << 20

// metadata keys
const formatName = "troupe-gpt"

type tensorName struct {
	group int
	layer int // -1 for unlayered
	name  string
}

// tensorOrder lists the tensors in flat-parameter order.
func (c Config) tensorOrder() []tensorName {
	var out []tensorName
	for gi, g := range c.groups() {
		if !g.layered {
			out = append(out, tensorName{gi, -1, g.name})
			continue
		}
		for l := 0; l < c.Layers; l++ {
			out = append(out, tensorName{gi, l, "h." + strconv.Itoa(l) + "." + g.name})
		}
	}
	return out
}

type tensorHeader struct {
	Dtype       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func (c Config) metadata() map[string]string {
	return map[string]string{
		"format":  formatName,
		"layers":  strconv.Itoa(c.Layers),
		"heads":   strconv.Itoa(c.Heads),
		"width":   strconv.Itoa(c.Width),
		"context": strconv.Itoa(c.Context),
		"vocab":   strconv.Itoa(c.Vocab),
	}
}

// encodeSafetensors writes cfg and the flat weights w.
func encodeSafetensors(wr io.Writer, cfg Config, w []float32, extra map[string]string) error {
	header := map[string]any{}
	meta := cfg.metadata()
	for k, v := range extra {
		if _, clash := meta[k]; !clash {
			meta[k] = v
		}
	}
	header["__metadata__"] = meta
	groups := cfg.groups()
	var off int64
	for _, t := range cfg.tensorOrder() {
		shape := groups[t.group].shape
		n := int64(numel(shape)) * 4
		s64 := make([]int64, len(shape))
		for i, d := range shape {
			s64[i] = int64(d)
		}
		header[t.name] = tensorHeader{"F32", s64, []int64{off, off + n}}
		off += n
	}
	if off != int64(len(w))*4 {
		return fmt.Errorf("policy: encode checkpoint: %d weights for %d bytes of tensors", len(w), off)
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("policy: encode checkpoint header: %w", err)
	}
	// pad with spaces so the data starts 8-byte aligned (as the reference
	// implementation does)
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	var pre [8]byte
	binary.LittleEndian.PutUint64(pre[:], uint64(len(hj)))
	buf := make([]byte, 8+len(hj)+4*len(w))
	copy(buf, pre[:])
	copy(buf[8:], hj)
	data := buf[8+len(hj):]
	for i, v := range w {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	if _, err := wr.Write(buf); err != nil {
		return fmt.Errorf("policy: write checkpoint: %w", err)
	}
	return nil
}

// Checkpoint is a decoded checkpoint: the config, the flat weights (in the
// order Model.Weights uses) and any extra metadata.
type Checkpoint struct {
	Config   Config
	Weights  []float32
	Metadata map[string]string
}

func ckErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCheckpoint, fmt.Sprintf(format, args...))
}

// DecodeSafetensors parses and validates a checkpoint written by Save: the
// header must be well-formed JSON within the file, the config in
// __metadata__ valid, every expected tensor present exactly once with dtype
// F32, the expected shape and in-bounds, non-overlapping offsets covering
// the data section, and no unexpected tensors.
func DecodeSafetensors(data []byte) (*Checkpoint, error) {
	if len(data) < 8 {
		return nil, ckErr("%d bytes, shorter than the 8-byte header length", len(data))
	}
	hlen := binary.LittleEndian.Uint64(data[:8])
	if hlen > maxHeader || hlen > uint64(len(data)-8) {
		return nil, ckErr("header length %d exceeds the file (%d bytes) or limit", hlen, len(data))
	}
	hdr := data[8 : 8+hlen]
	body := data[8+hlen:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&raw); err != nil {
		return nil, ckErr("header JSON: %v", err)
	}
	if raw == nil {
		return nil, ckErr("header is not a JSON object")
	}
	if rest := hdr[dec.InputOffset():]; len(bytes.TrimRight(rest, " \t\r\n")) != 0 {
		return nil, ckErr("%d bytes of garbage after the header JSON", len(rest))
	}
	ck := &Checkpoint{Metadata: map[string]string{}}
	mraw, ok := raw["__metadata__"]
	if !ok {
		return nil, ckErr("no __metadata__ (model config)")
	}
	if err := json.Unmarshal(mraw, &ck.Metadata); err != nil {
		return nil, ckErr("__metadata__: %v", err)
	}
	if f := ck.Metadata["format"]; f != formatName {
		return nil, ckErr("format %q, want %q", f, formatName)
	}
	geti := func(k string) (int, error) {
		v, err := strconv.Atoi(ck.Metadata[k])
		if err != nil {
			return 0, ckErr("metadata %s=%q: not an integer", k, ck.Metadata[k])
		}
		return v, nil
	}
	var cfg Config
	var err error
	for _, f := range []struct {
		k string
		p *int
	}{{"layers", &cfg.Layers}, {"heads", &cfg.Heads}, {"width", &cfg.Width}, {"context", &cfg.Context}, {"vocab", &cfg.Vocab}} {
		if *f.p, err = geti(f.k); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, ckErr("config in metadata: %v", err)
	}
	ck.Config = cfg
	n := cfg.NumParams()
	if int64(len(body)) != int64(n)*4 {
		return nil, ckErr("data section has %d bytes, config needs %d", len(body), int64(n)*4)
	}
	order := cfg.tensorOrder()
	if len(raw)-1 != len(order) {
		return nil, ckErr("%d tensors, config needs %d", len(raw)-1, len(order))
	}
	groups := cfg.groups()
	type span struct {
		begin, end int64
		name       string
	}
	spans := make([]span, 0, len(order))
	ck.Weights = make([]float32, n)
	flat := int64(0)
	for _, t := range order {
		tr, ok := raw[t.name]
		if !ok {
			return nil, ckErr("tensor %s missing", t.name)
		}
		var th tensorHeader
		if err := json.Unmarshal(tr, &th); err != nil {
			return nil, ckErr("tensor %s: %v", t.name, err)
		}
		if th.Dtype != "F32" {
			return nil, ckErr("tensor %s dtype %q, want F32", t.name, th.Dtype)
		}
		want := groups[t.group].shape
		if len(th.Shape) != len(want) {
			return nil, ckErr("tensor %s shape %v, want %v", t.name, th.Shape, want)
		}
		for i, d := range want {
			if th.Shape[i] != int64(d) {
				return nil, ckErr("tensor %s shape %v, want %v", t.name, th.Shape, want)
			}
		}
		if len(th.DataOffsets) != 2 {
			return nil, ckErr("tensor %s data_offsets %v: want [begin,end]", t.name, th.DataOffsets)
		}
		b, e := th.DataOffsets[0], th.DataOffsets[1]
		size := int64(numel(want)) * 4
		if b < 0 || e < b || e > int64(len(body)) || e-b != size {
			return nil, ckErr("tensor %s data_offsets [%d,%d] invalid for %d bytes in a %d-byte data section", t.name, b, e, size, len(body))
		}
		spans = append(spans, span{b, e, t.name})
		dst := ck.Weights[flat : flat+size/4]
		src := body[b:e]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		flat += size / 4
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	for i := 1; i < len(spans); i++ {
		if spans[i].begin < spans[i-1].end {
			return nil, ckErr("tensors %s and %s overlap", spans[i-1].name, spans[i].name)
		}
	}
	for k := range ck.Metadata {
		if _, ours := cfg.metadata()[k]; ours {
			delete(ck.Metadata, k)
		}
	}
	return ck, nil
}

// Save writes the model's weights and config as safetensors. extra adds
// string metadata (e.g. the tokenizer alphabet, the training step).
func (m *Model) Save(w io.Writer, extra map[string]string) error {
	ws, err := m.Weights()
	if err != nil {
		return err
	}
	return encodeSafetensors(w, m.cfg, ws, extra)
}

// SaveFile writes the checkpoint to path atomically (temp file + rename).
func (m *Model) SaveFile(path string, extra map[string]string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("policy: save %s: %w", path, err)
	}
	if err := m.Save(f, extra); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("policy: save %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("policy: save %s: %w", path, err)
	}
	return nil
}

// Load reads a checkpoint from r and builds a model on be.
func Load(r io.Reader, be compute.Backend) (*Model, map[string]string, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: read checkpoint: %w", err)
	}
	ck, err := DecodeSafetensors(data)
	if err != nil {
		return nil, nil, err
	}
	m, err := newEmpty(be, ck.Config)
	if err != nil {
		return nil, nil, err
	}
	if err := m.SetWeights(ck.Weights); err != nil {
		return nil, nil, err
	}
	return m, ck.Metadata, nil
}

// LoadFile is Load from a file.
func LoadFile(path string, be compute.Backend) (*Model, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: load %s: %w", path, err)
	}
	defer f.Close()
	m, meta, err := Load(f, be)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	return m, meta, nil
}
