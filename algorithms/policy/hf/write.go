package hf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// Tensor is a named float32 tensor to write. Data is row-major and holds
// exactly the shape's elements; it is read, never kept or changed.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// chunk is how many elements are converted per write: memory beyond the
// caller's tensors stays at a few hundred KiB whatever the model size.
const chunk = 1 << 16

// WriteSafetensors writes tensors, in the given order, to a safetensors
// file at path, converting to dtype (F32; BF16 or F16 rounded to nearest,
// ties to even, as PyTorch's .to() does). metadata goes to __metadata__.
// The file is written beside path under a temporary name, synced and
// renamed, so path is never seen half-written.
func WriteSafetensors(path string, tensors []Tensor, dtype DType, metadata map[string]string) error {
	header, err := safetensorsHeader(tensors, dtype, metadata)
	if err != nil {
		return fmt.Errorf("hf: write %s: %w", path, err)
	}
	return writeAtomic(path, func(w *bufio.Writer) error {
		if _, err := w.Write(header); err != nil {
			return err
		}
		buf := make([]byte, chunk*4)
		for _, t := range tensors {
			for i := 0; i < len(t.Data); i += chunk {
				part := t.Data[i:min(i+chunk, len(t.Data))]
				if _, err := w.Write(encode(buf, part, dtype)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// safetensorsHeader is the length prefix and JSON header: __metadata__
// first, then the tensors in data order, padded with spaces to a multiple
// of 8 bytes as the reference implementation pads it.
func safetensorsHeader(tensors []Tensor, dtype DType, metadata map[string]string) ([]byte, error) {
	if dtype != F32 && dtype != BF16 && dtype != F16 {
		return nil, fmt.Errorf("dtype %q (want F32, BF16 or F16)", dtype)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	enc := func(v any) {
		j, _ := json.Marshal(v) // strings, string maps and int slices cannot fail
		b.Write(j)
	}
	first := true
	if len(metadata) > 0 {
		b.WriteString(`"__metadata__":`)
		enc(metadata)
		first = false
	}
	seen := map[string]bool{}
	var off int64
	for _, t := range tensors {
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("tensor name %q is not allowed", t.Name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tensor %q given twice", t.Name)
		}
		seen[t.Name] = true
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension in shape %s", t.Name, shapeString(t.Shape))
			}
		}
		if n := numel(t.Shape); n != int64(len(t.Data)) {
			return nil, fmt.Errorf("tensor %q: shape %s has %d elements, data has %d", t.Name, shapeString(t.Shape), n, len(t.Data))
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		size := int64(len(t.Data)) * int64(dtype.Size())
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		enc(t.Name)
		b.WriteString(`:{"dtype":`)
		enc(string(dtype))
		b.WriteString(`,"shape":`)
		enc(shape)
		b.WriteString(`,"data_offsets":[` + strconv.FormatInt(off, 10) + "," + strconv.FormatInt(off+size, 10) + "]}")
		off += size
	}
	b.WriteByte('}')
	for (8+b.Len())%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > maxHeader {
		return nil, fmt.Errorf("header of %d bytes exceeds the %d-byte limit", b.Len(), maxHeader)
	}
	out := make([]byte, 8, 8+b.Len())
	binary.LittleEndian.PutUint64(out, uint64(b.Len()))
	return append(out, b.Bytes()...), nil
}

// encode converts src into buf's prefix as dtype, little-endian.
func encode(buf []byte, src []float32, dtype DType) []byte {
	switch dtype {
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(buf[2*i:], f32ToBF16(v))
		}
		return buf[:2*len(src)]
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(buf[2*i:], f32ToF16(v))
		}
		return buf[:2*len(src)]
	}
	for i, v := range src {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return buf[:4*len(src)]
}

// f32ToBF16 rounds to nearest, ties to even; NaN becomes 0x7fc0, as in
// PyTorch's c10::BFloat16.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return 0x7fc0
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f32ToF16 rounds to the nearest IEEE half, ties to even, with gradual
// underflow and overflow to infinity; NaN stays NaN (quiet, sign kept).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half: value / 2^-24 = m24 >> (14-e), m24 the 24-bit
		// significand. Float32 subnormals (exp 0) are far below half's
		// smallest subnormal and give 0.
		shift := uint(14 - e)
		if exp == 0 || shift > 24 {
			return sign
		}
		m := mant | 0x800000
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal, which is the right encoding
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is right, up to infinity
	}
	return sign | uint16(r)
}

// writeAtomic writes path through a temporary file in the same directory,
// synced before it is renamed over path.
func writeAtomic(path string, write func(*bufio.Writer) error) (err error) {
	tmp, err := createTemp(path)
	if err != nil {
		return err
	}
	if err := fillTemp(tmp, write); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hf: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hf: write %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func createTemp(path string) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("hf: write %s: %w", path, err)
	}
	return f, nil
}

// fillTemp writes, flushes, syncs and closes f.
func fillTemp(f *os.File, write func(*bufio.Writer) error) error {
	w := bufio.NewWriterSize(f, 1<<20)
	err := write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil // not every platform opens directories; the rename stands
	}
	defer d.Close()
	d.Sync() // best effort: some filesystems refuse fsync on a directory
	return nil
}

// SaveOptions says how SaveModel writes weights.
type SaveOptions struct {
	// DType of the stored weights: F32 (the zero value), BF16 or F16.
	DType DType
	// MaxShardBytes splits the weights into shards of at most this many
	// bytes (a larger tensor gets a shard of its own), as transformers'
	// save_pretrained(max_shard_size=...) does. 0: one model.safetensors.
	MaxShardBytes int64
	// Metadata goes to every file's __metadata__ besides "format": "pt",
	// which transformers requires.
	Metadata map[string]string
}

type tensorList []Tensor

func (l tensorList) Names() []string {
	out := make([]string, len(l))
	for i, t := range l {
		out[i] = t.Name
	}
	return out
}

func (l tensorList) Info(name string) (TensorInfo, bool) {
	for _, t := range l {
		if t.Name == name {
			return TensorInfo{Name: t.Name, DType: F32, Shape: t.Shape}, true
		}
	}
	return TensorInfo{}, false
}

var shardName = regexp.MustCompile(`^model-\d{5}-of-\d{5}\.safetensors$`)

// SaveModel writes a model directory transformers opens:
// config.json (cfg's raw fields kept, the dtype fields set to opts.DType)
// and either model.safetensors or, when the weights exceed
// opts.MaxShardBytes, model-00001-of-0000N.safetensors shards and
// model.safetensors.index.json ({"metadata": {"total_parameters",
// "total_size"}, "weight_map": {tensor: file}}, indented and sorted as
// transformers writes it). tensors must be exactly ExpectedTensors(cfg)
// (any order; it is the order in the files).
//
// Every file is written under a temporary name and synced first, then
// renamed into place: weights, then the index, then config.json; weight
// files of an earlier save that the new one does not use are removed last.
// A crash leaves whole files only, the old checkpoint or the new one
// except for the moment of the renames.
func SaveModel(dir string, cfg Config, tensors []Tensor, opts SaveOptions) error {
	if opts.DType == "" {
		opts.DType = F32
	}
	if opts.DType.ConfigName() == "" {
		return fmt.Errorf("hf: save %s: dtype %q (want F32, BF16 or F16)", dir, opts.DType)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("hf: save %s: %w", dir, err)
	}
	if err := CheckTensors(cfg, tensorList(tensors)).Err(); err != nil {
		return fmt.Errorf("hf: save %s: %w", dir, err)
	}
	for _, t := range tensors {
		if numel(t.Shape) != int64(len(t.Data)) {
			return fmt.Errorf("hf: save %s: tensor %q: shape %s has %d elements, data has %d", dir, t.Name, shapeString(t.Shape), numel(t.Shape), len(t.Data))
		}
	}
	cfg.DType = opts.DType.ConfigName()
	cfgJSON, err := cfg.MarshalJSON()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: save %s: %w", dir, err)
	}
	meta := map[string]string{}
	for k, v := range opts.Metadata {
		meta[k] = v
	}
	meta["format"] = "pt"

	shards := splitShards(tensors, opts.DType, opts.MaxShardBytes)
	names := make([]string, len(shards))
	if len(shards) == 1 {
		names[0] = WeightsFile
	} else {
		for i := range shards {
			names[i] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
	}

	// Write every file under a temporary name first.
	type pending struct{ tmp, final string }
	var done []pending
	defer func() {
		for _, p := range done {
			os.Remove(p.tmp) // no-op for the renamed ones
		}
	}()
	stage := func(final string, write func(*bufio.Writer) error) error {
		f, err := createTemp(final)
		if err != nil {
			return err
		}
		done = append(done, pending{f.Name(), final})
		if err := fillTemp(f, write); err != nil {
			return fmt.Errorf("hf: write %s: %w", final, err)
		}
		return nil
	}
	for i, shard := range shards {
		header, err := safetensorsHeader(shard, opts.DType, meta)
		if err != nil {
			return fmt.Errorf("hf: save %s: %w", names[i], err)
		}
		err = stage(filepath.Join(dir, names[i]), func(w *bufio.Writer) error {
			if _, err := w.Write(header); err != nil {
				return err
			}
			buf := make([]byte, chunk*4)
			for _, t := range shard {
				for j := 0; j < len(t.Data); j += chunk {
					if _, err := w.Write(encode(buf, t.Data[j:min(j+chunk, len(t.Data))], opts.DType)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(shards) > 1 {
		index, err := indexJSON(shards, names, opts.DType)
		if err != nil {
			return err
		}
		if err := stage(filepath.Join(dir, IndexFile), func(w *bufio.Writer) error {
			_, err := w.Write(index)
			return err
		}); err != nil {
			return err
		}
	}
	if err := stage(filepath.Join(dir, ConfigFile), func(w *bufio.Writer) error {
		_, err := w.Write(cfgJSON)
		return err
	}); err != nil {
		return err
	}
	for _, p := range done {
		if err := os.Rename(p.tmp, p.final); err != nil {
			return fmt.Errorf("hf: save %s: %w", p.final, err)
		}
	}
	// Remove what an earlier save left and this one does not use, so the
	// directory cannot be read as a mix.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("hf: save %s: %w", dir, err)
	}
	for _, e := range entries {
		n := e.Name()
		stale := (n == WeightsFile || n == IndexFile || shardName.MatchString(n)) &&
			!slices.Contains(names, n) && !(n == IndexFile && len(shards) > 1)
		if stale && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("hf: save %s: remove stale %s: %w", dir, n, err)
			}
		}
	}
	return syncDir(dir)
}

// splitShards follows huggingface_hub's split_state_dict_into_shards: walk
// the tensors in order, start a new shard when the next tensor would push
// the current one past max, and give a tensor larger than max a shard of
// its own (placed before the shard being filled).
func splitShards(tensors []Tensor, dtype DType, max int64) [][]Tensor {
	if max <= 0 {
		return [][]Tensor{tensors}
	}
	var shards [][]Tensor
	var cur []Tensor
	var curSize int64
	for _, t := range tensors {
		size := int64(len(t.Data)) * int64(dtype.Size())
		if size > max {
			shards = append(shards, []Tensor{t})
			continue
		}
		if curSize+size > max && len(cur) > 0 {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += size
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards
}

// indexJSON is model.safetensors.index.json as transformers writes it:
// json.dumps(index, indent=2, sort_keys=True) + "\n".
func indexJSON(shards [][]Tensor, names []string, dtype DType) ([]byte, error) {
	var params, size int64
	weightMap := map[string]string{}
	for i, shard := range shards {
		for _, t := range shard {
			params += int64(len(t.Data))
			size += int64(len(t.Data)) * int64(dtype.Size())
			weightMap[t.Name] = names[i]
		}
	}
	index := map[string]any{
		"metadata":   map[string]int64{"total_parameters": params, "total_size": size},
		"weight_map": weightMap,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(index); err != nil { // sorted keys, a trailing newline
		return nil, fmt.Errorf("hf: encode %s: %w", IndexFile, err)
	}
	return b.Bytes(), nil
}
