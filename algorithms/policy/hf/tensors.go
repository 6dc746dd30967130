package hf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DType is a safetensors element type ("F32", "BF16", ...).
type DType string

// The dtypes ReadF32 converts and the writers produce.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// dtypeSizes lists every dtype the safetensors format defines, so a header
// naming any of them parses (ReadF32 then refuses the ones it cannot
// convert) and a header naming anything else does not.
var dtypeSizes = map[DType]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"F64": 8, "I64": 8, "U64": 8,
}

// Size is the dtype's element size in bytes, 0 if unknown.
func (d DType) Size() int { return int(dtypeSizes[d]) }

// ConfigName is the dtype as config.json's dtype/torch_dtype names it.
func (d DType) ConfigName() string {
	switch d {
	case F32:
		return "float32"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	}
	return ""
}

// TensorInfo describes one tensor of a checkpoint. In ExpectedTensors'
// answer DType and File are empty.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	File  string // the file holding it (a base name within the model directory)
}

func numel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// ExpectedTensors lists the tensors of a Hugging Face ...ForCausalLM
// checkpoint of this family, with their shapes, in this order:
//
//	model.embed_tokens.weight                           [vocab, hidden]
//	per layer i, prefix model.layers.{i}.:
//	  input_layernorm.weight                            [hidden]
//	  self_attn.q_proj.weight                           [heads*head_dim, hidden]
//	  self_attn.q_proj.bias (QKVBias)                   [heads*head_dim]
//	  self_attn.k_proj.weight                           [kv_heads*head_dim, hidden]
//	  self_attn.k_proj.bias (QKVBias)                   [kv_heads*head_dim]
//	  self_attn.v_proj.weight                           [kv_heads*head_dim, hidden]
//	  self_attn.v_proj.bias (QKVBias)                   [kv_heads*head_dim]
//	  self_attn.o_proj.weight                           [hidden, heads*head_dim]
//	  self_attn.o_proj.bias (OBias)                     [hidden]
//	  self_attn.q_norm.weight (QKNorm)                  [head_dim]
//	  self_attn.k_norm.weight (QKNorm)                  [head_dim]
//	  post_attention_layernorm.weight                   [hidden]
//	  mlp.gate_proj.weight, mlp.up_proj.weight          [intermediate, hidden]
//	  mlp.gate_proj.bias, mlp.up_proj.bias (MLPBiases)  [intermediate]
//	  mlp.down_proj.weight                              [hidden, intermediate]
//	  mlp.down_proj.bias (MLPBiases)                    [hidden]
//	model.norm.weight                                   [hidden]
//	lm_head.weight (unless TieWordEmbeddings)           [vocab, hidden]
//
// Matrices are [out, in] (nn.Linear). The config should be valid.
func ExpectedTensors(c Config) []TensorInfo {
	h, hd := c.HiddenSize, c.HeadDim
	q, kv, in := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd, c.IntermediateSize
	out := []TensorInfo{{Name: "model.embed_tokens.weight", Shape: []int{c.VocabSize, h}}}
	add := func(name string, shape ...int) { out = append(out, TensorInfo{Name: name, Shape: shape}) }
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", h)
		for _, proj := range []struct {
			name string
			rows int
		}{{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}} {
			add(p+"self_attn."+proj.name+".weight", proj.rows, h)
			if c.QKVBias() {
				add(p+"self_attn."+proj.name+".bias", proj.rows)
			}
		}
		add(p+"self_attn.o_proj.weight", h, q)
		if c.OBias() {
			add(p+"self_attn.o_proj.bias", h)
		}
		if c.QKNorm() {
			add(p+"self_attn.q_norm.weight", hd)
			add(p+"self_attn.k_norm.weight", hd)
		}
		add(p+"post_attention_layernorm.weight", h)
		add(p+"mlp.gate_proj.weight", in, h)
		if c.MLPBiases() {
			add(p+"mlp.gate_proj.bias", in)
		}
		add(p+"mlp.up_proj.weight", in, h)
		if c.MLPBiases() {
			add(p+"mlp.up_proj.bias", in)
		}
		add(p+"mlp.down_proj.weight", h, in)
		if c.MLPBiases() {
			add(p+"mlp.down_proj.bias", h)
		}
	}
	add("model.norm.weight", h)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", c.VocabSize, h)
	}
	return out
}

// TensorReport is CheckTensors' finding, each list sorted by name.
type TensorReport struct {
	Missing    []string // expected, absent
	Misshaped  []string // "name: shape [a,b], want [c,d]"
	BadDType   []string // "name: dtype I64" (ReadF32 converts F32, F16, BF16 only)
	Unexpected []string // present, not expected, not ignorable
	Ignored    []string // present and harmless: rotary_emb.inv_freq buffers, a tied lm_head.weight
}

// OK reports whether the checkpoint has exactly the expected tensors
// (Ignored ones aside).
func (r TensorReport) OK() bool {
	return len(r.Missing)+len(r.Misshaped)+len(r.BadDType)+len(r.Unexpected) == 0
}

// Err returns nil if OK, else an ErrCheckpoint error naming (up to a few
// of) the offending tensors of each kind.
func (r TensorReport) Err() error {
	if r.OK() {
		return nil
	}
	var parts []string
	list := func(what string, names []string) {
		if len(names) == 0 {
			return
		}
		const max = 5
		s := strings.Join(names[:min(len(names), max)], "; ")
		if len(names) > max {
			s += fmt.Sprintf("; and %d more", len(names)-max)
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(names), what, s))
	}
	list("missing", r.Missing)
	list("misshaped", r.Misshaped)
	list("of an unsupported dtype", r.BadDType)
	list("unexpected", r.Unexpected)
	return fmt.Errorf("%w: tensors do not match config.json: %s", ErrCheckpoint, strings.Join(parts, ", "))
}

// TensorSource is what CheckTensors needs of a checkpoint; *Checkpoint is
// one.
type TensorSource interface {
	Names() []string
	Info(name string) (TensorInfo, bool)
}

// CheckTensors compares a checkpoint's tensors with ExpectedTensors(c).
// Vocabulary rows beyond the tokenizer's are fine here: the shapes come
// from config.json's vocab_size.
func CheckTensors(c Config, src TensorSource) TensorReport {
	var r TensorReport
	want := map[string][]int{}
	for _, t := range ExpectedTensors(c) {
		want[t.Name] = t.Shape
		info, ok := src.Info(t.Name)
		switch {
		case !ok:
			r.Missing = append(r.Missing, t.Name)
		case !slices.Equal(info.Shape, t.Shape):
			r.Misshaped = append(r.Misshaped, fmt.Sprintf("%s: shape %s, want %s", t.Name, shapeString(info.Shape), shapeString(t.Shape)))
		case info.DType != F32 && info.DType != F16 && info.DType != BF16:
			r.BadDType = append(r.BadDType, fmt.Sprintf("%s: dtype %s", t.Name, info.DType))
		}
	}
	for _, name := range src.Names() {
		if _, ok := want[name]; ok {
			continue
		}
		// Older Llama checkpoints carry the RoPE buffer; a tied lm_head may
		// be stored anyway. transformers ignores both on load.
		if strings.HasSuffix(name, ".rotary_emb.inv_freq") || (name == "lm_head.weight" && c.TieWordEmbeddings) {
			r.Ignored = append(r.Ignored, name)
			continue
		}
		r.Unexpected = append(r.Unexpected, name)
	}
	slices.Sort(r.Missing)
	slices.Sort(r.Misshaped)
	slices.Sort(r.BadDType)
	slices.Sort(r.Unexpected)
	slices.Sort(r.Ignored)
	return r
}
