package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// ErrConfig reports a config.json that cannot be used: malformed JSON, a
// field of the wrong type, or values that do not describe a model.
var ErrConfig = errors.New("hf: bad config")

// ErrUnsupported reports a well-formed config.json that asks for something
// this package's model family does not implement (another model_type, a
// RoPE scaling other than llama3, an activation other than SiLU, quantised
// weights). Such errors match both ErrUnsupported and ErrConfig.
var ErrUnsupported = errors.New("hf: unsupported")

// ConfigFile is the name of a model directory's configuration.
const ConfigFile = "config.json"

// Model types this package reads. SmolLM and Llama 3.x checkpoints say
// "llama"; Mistral is Llama with a sliding window and no bias options.
const (
	Llama   = "llama"
	Mistral = "mistral"
	Qwen2   = "qwen2"
	Qwen3   = "qwen3"
)

// RopeScaling is the llama3 frequency scaling (Llama 3.1+). The zero value,
// and a nil *RopeScaling, mean no scaling.
type RopeScaling struct {
	Type                          string // "llama3"
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// Config is a decoder's config.json: the fields the Llama/Qwen family needs,
// with transformers' per-model defaults applied, plus the raw JSON so that
// writing it back keeps fields this package does not know.
//
// Defaults follow the configuration classes of transformers v5 (the
// dataclass configs of configuration_llama.py, configuration_mistral.py,
// configuration_qwen2.py, configuration_qwen3.py), which agree with v4.51+
// for every field used here: a field absent from config.json takes the
// model_type's default; num_key_value_heads given as null means "equal to
// num_attention_heads" while an absent one is the class default (llama:
// heads, mistral: 8, qwen2/qwen3: 32).
type Config struct {
	ModelType     string   // llama, mistral, qwen2, qwen3
	Architectures []string // e.g. ["LlamaForCausalLM"]; nil if absent

	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int // llama/mistral/qwen2: hidden/heads unless set; qwen3: 128 unless set
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling // nil: plain RoPE
	HiddenAct             string       // always "silu" after Validate

	// AttentionBias is config.json's attention_bias (llama, qwen3): biases
	// on q, k, v and o. Qwen2 has q, k, v biases whatever it says; use
	// QKVBias and OBias rather than this field.
	AttentionBias     bool
	MLPBias           bool // llama only: biases on gate, up and down
	TieWordEmbeddings bool // lm_head shares model.embed_tokens.weight

	BOSTokenID  int   // -1 when unset
	EOSTokenIDs []int // empty when unset; eos_token_id may be an int or a list
	PadTokenID  int   // -1 when unset

	// Sliding-window attention. Mistral applies SlidingWindow (when non-zero)
	// to every layer; qwen2/qwen3 only when UseSlidingWindow, to the layers
	// LayerTypes marks "sliding_attention" (without LayerTypes, those with
	// index >= MaxWindowLayers). Use SlidingWindowAt.
	SlidingWindow    int // 0: none
	UseSlidingWindow bool
	MaxWindowLayers  int
	LayerTypes       []string // "full_attention" or "sliding_attention" per layer, if config.json lists them

	// DType is the weights' dtype as config.json names it ("float32",
	// "bfloat16", "float16"), from "dtype" (transformers v5) or
	// "torch_dtype" (v4); "" if neither is set.
	DType string

	raw map[string]json.RawMessage // config.json as read; nil for a Config built in code
}

// NewConfig returns transformers' default config for a model type, to be
// adjusted before use (the defaults describe 7B-class models).
func NewConfig(modelType string) (Config, error) {
	c, err := parseConfig([]byte(`{"model_type":` + jsonString(modelType) + `}`))
	c.raw = nil // built in code: MarshalJSON writes every field
	c.Architectures = []string{archName(modelType)}
	return c, err
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("hf: load %s: %w", path, err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("load %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates config.json's contents.
func ParseConfig(data []byte) (Config, error) {
	c, err := parseConfig(data)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func cfgErr(format string, args ...any) error {
	return fmt.Errorf("%w: config.json: %s", ErrConfig, fmt.Sprintf(format, args...))
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %w: config.json: %s", ErrConfig, ErrUnsupported, fmt.Sprintf(format, args...))
}

// defaults per model type (transformers v5 configuration classes).
type defaults struct {
	vocab, hidden, inter, layers, heads, kvHeads, headDim, maxPos int
	bos, eos                                                      int // -1: none
	slidingWindow                                                 int
}

var modelDefaults = map[string]defaults{
	// kvHeads 0: equal to heads. headDim 0: hidden/heads.
	Llama:   {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1, 2, 0},
	Mistral: {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1, 2, 4096},
	Qwen2:   {151936, 4096, 22016, 32, 32, 32, 0, 32768, -1, -1, 4096},
	Qwen3:   {151936, 4096, 22016, 32, 32, 32, 128, 32768, -1, -1, 4096},
}

// rawConfig is config.json with each field's presence and type kept.
type rawConfig map[string]json.RawMessage

func (r rawConfig) has(key string) bool {
	v, ok := r[key]
	return ok && !isNull(v)
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func (r rawConfig) int(key string, def int) (int, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, cfgErr("field %s: want an integer, got %s", key, short(v))
	}
	return int(f), nil
}

func (r rawConfig) float(key string, def float64) (float64, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, cfgErr("field %s: want a number, got %s", key, short(v))
	}
	return f, nil
}

func (r rawConfig) bool(key string, def bool) (bool, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, cfgErr("field %s: want true or false, got %s", key, short(v))
	}
	return b, nil
}

func (r rawConfig) string(key, def string) (string, error) {
	v, ok := r[key]
	if !ok || isNull(v) {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", cfgErr("field %s: want a string, got %s", key, short(v))
	}
	return s, nil
}

// ints reads an int or a list of ints (eos_token_id).
func (r rawConfig) ints(key string, def int) ([]int, error) {
	v, ok := r[key]
	if !ok {
		if def < 0 {
			return nil, nil
		}
		return []int{def}, nil
	}
	if isNull(v) {
		return nil, nil
	}
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '[' {
		var fs []float64
		if err := json.Unmarshal(v, &fs); err != nil {
			return nil, cfgErr("field %s: want an integer or a list of integers, got %s", key, short(v))
		}
		out := make([]int, len(fs))
		for i, f := range fs {
			if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return nil, cfgErr("field %s: want integers, got %s", key, short(v))
			}
			out[i] = int(f)
		}
		return out, nil
	}
	n, err := r.int(key, 0)
	if err != nil {
		return nil, cfgErr("field %s: want an integer or a list of integers, got %s", key, short(v))
	}
	return []int{n}, nil
}

// short quotes a JSON value for an error message.
func short(v json.RawMessage) string {
	s := string(bytes.TrimSpace(v))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// parseConfig decodes config.json and applies defaults; it does not call
// Validate.
func parseConfig(data []byte) (Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return Config{}, cfgErr("not a JSON object: %v", err)
	}
	if r == nil {
		return Config{}, cfgErr("not a JSON object")
	}
	var c Config
	var err error
	if !r.has("model_type") {
		return Config{}, cfgErr("field model_type is missing")
	}
	if c.ModelType, err = r.string("model_type", ""); err != nil {
		return Config{}, err
	}
	d, ok := modelDefaults[c.ModelType]
	if !ok {
		return Config{}, unsupported("model_type %q (want llama, mistral, qwen2 or qwen3)", c.ModelType)
	}
	if v, ok := r["architectures"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &c.Architectures); err != nil {
			return Config{}, cfgErr("field architectures: want a list of strings, got %s", short(v))
		}
	}
	ints := []struct {
		key string
		dst *int
		def int
	}{
		{"vocab_size", &c.VocabSize, d.vocab},
		{"hidden_size", &c.HiddenSize, d.hidden},
		{"intermediate_size", &c.IntermediateSize, d.inter},
		{"num_hidden_layers", &c.NumHiddenLayers, d.layers},
		{"num_attention_heads", &c.NumAttentionHeads, d.heads},
		{"max_position_embeddings", &c.MaxPositionEmbeddings, d.maxPos},
		{"pad_token_id", &c.PadTokenID, -1},
		{"bos_token_id", &c.BOSTokenID, d.bos},
		{"max_window_layers", &c.MaxWindowLayers, 28},
	}
	for _, f := range ints {
		if *f.dst, err = r.int(f.key, f.def); err != nil {
			return Config{}, err
		}
	}
	// An explicit null means "unset" for the token ids.
	if v, ok := r["bos_token_id"]; ok && isNull(v) {
		c.BOSTokenID = -1
	}
	if c.EOSTokenIDs, err = r.ints("eos_token_id", d.eos); err != nil {
		return Config{}, err
	}
	// num_key_value_heads: absent -> class default; null -> heads.
	kv := d.kvHeads
	if v, ok := r["num_key_value_heads"]; ok && isNull(v) {
		kv = 0
	}
	if c.NumKeyValueHeads, err = r.int("num_key_value_heads", kv); err != nil {
		return Config{}, err
	}
	if c.NumKeyValueHeads == 0 && !r.has("num_key_value_heads") {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	hd := d.headDim
	if v, ok := r["head_dim"]; ok && isNull(v) {
		hd = 0
	}
	if c.HeadDim, err = r.int("head_dim", hd); err != nil {
		return Config{}, err
	}
	if c.HeadDim == 0 && !r.has("head_dim") && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RMSNormEps, err = r.float("rms_norm_eps", 1e-6); err != nil {
		return Config{}, err
	}
	if c.HiddenAct, err = r.string("hidden_act", "silu"); err != nil {
		return Config{}, err
	}
	if c.TieWordEmbeddings, err = r.bool("tie_word_embeddings", false); err != nil {
		return Config{}, err
	}
	if c.ModelType == Llama || c.ModelType == Qwen3 {
		if c.AttentionBias, err = r.bool("attention_bias", false); err != nil {
			return Config{}, err
		}
	}
	if c.ModelType == Llama {
		if c.MLPBias, err = r.bool("mlp_bias", false); err != nil {
			return Config{}, err
		}
	}
	if err := c.parseRope(r); err != nil {
		return Config{}, err
	}
	if err := c.parseSliding(r, d); err != nil {
		return Config{}, err
	}
	if c.DType, err = r.string("dtype", ""); err != nil {
		return Config{}, err
	}
	if c.DType == "" {
		if c.DType, err = r.string("torch_dtype", ""); err != nil {
			return Config{}, err
		}
	}
	// Options that change the computation and that this family does not
	// implement. (attention_dropout and pretraining_tp do not change what
	// the model computes at inference; they are ignored.)
	if r.has("quantization_config") {
		return Config{}, unsupported("field quantization_config: quantised weights are not supported")
	}
	if prf, err := r.float("partial_rotary_factor", 1); err != nil {
		return Config{}, err
	} else if prf != 1 {
		return Config{}, unsupported("field partial_rotary_factor: %v (only 1 is supported)", prf)
	}
	c.raw = r
	return c, nil
}

// parseRope reads rope_theta and rope_scaling (transformers v4) or
// rope_parameters (v5: {"rope_type", "rope_theta", and the scaling
// fields}). rope_parameters wins when both are present, as in v5.
func (c *Config) parseRope(r rawConfig) error {
	var err error
	if c.RopeTheta, err = r.float("rope_theta", 10000); err != nil {
		return err
	}
	field := "rope_scaling"
	v, ok := r["rope_scaling"]
	if pv, pok := r["rope_parameters"]; pok && !isNull(pv) {
		field, v, ok = "rope_parameters", pv, true
	}
	if !ok || isNull(v) {
		return nil
	}
	var p rawConfig
	if err := json.Unmarshal(v, &p); err != nil || p == nil {
		return cfgErr("field %s: want an object, got %s", field, short(v))
	}
	sub := func(err error) error { return fmt.Errorf("%w (in %s)", err, field) }
	if field == "rope_parameters" && p.has("rope_theta") {
		if c.RopeTheta, err = p.float("rope_theta", 0); err != nil {
			return sub(err)
		}
	}
	typ, err := p.string("rope_type", "")
	if err != nil {
		return sub(err)
	}
	if typ == "" {
		if typ, err = p.string("type", "default"); err != nil {
			return sub(err)
		}
	}
	switch typ {
	case "default":
		return nil
	case "llama3":
	default:
		// per-layer-type dicts ({"full_attention": {...}}) land here too.
		return unsupported("field %s: rope type %q (only default and llama3 are supported)", field, typ)
	}
	if p.has("partial_rotary_factor") {
		if f, err := p.float("partial_rotary_factor", 1); err != nil {
			return sub(err)
		} else if f != 1 {
			return unsupported("field %s.partial_rotary_factor: %v (only 1 is supported)", field, f)
		}
	}
	s := &RopeScaling{Type: typ}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"factor", &s.Factor}, {"low_freq_factor", &s.LowFreqFactor}, {"high_freq_factor", &s.HighFreqFactor}} {
		if !p.has(f.key) {
			return cfgErr("field %s.%s is missing (rope type llama3 needs it)", field, f.key)
		}
		if *f.dst, err = p.float(f.key, 0); err != nil {
			return sub(err)
		}
	}
	if !p.has("original_max_position_embeddings") {
		return cfgErr("field %s.original_max_position_embeddings is missing (rope type llama3 needs it)", field)
	}
	if s.OriginalMaxPositionEmbeddings, err = p.int("original_max_position_embeddings", 0); err != nil {
		return sub(err)
	}
	c.RopeScaling = s
	return nil
}

func (c *Config) parseSliding(r rawConfig, d defaults) error {
	var err error
	switch c.ModelType {
	case Llama:
		return nil
	case Mistral:
		// MistralAttention passes config.sliding_window to every layer;
		// null (Mistral v0.2+) turns it off.
		c.SlidingWindow, err = r.int("sliding_window", d.slidingWindow)
		if v, ok := r["sliding_window"]; ok && isNull(v) {
			c.SlidingWindow = 0
		}
		return err
	}
	// qwen2, qwen3: sliding_window only counts with use_sliding_window.
	if c.UseSlidingWindow, err = r.bool("use_sliding_window", false); err != nil {
		return err
	}
	if c.UseSlidingWindow {
		if c.SlidingWindow, err = r.int("sliding_window", d.slidingWindow); err != nil {
			return err
		}
	}
	if v, ok := r["layer_types"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &c.LayerTypes); err != nil {
			return cfgErr("field layer_types: want a list of strings, got %s", short(v))
		}
	}
	return nil
}

// Bounds that keep every size product well inside int64 and a model of
// this family recognisable; real checkpoints are far inside them.
const (
	maxDim    = 1 << 20 // hidden, intermediate, head_dim, heads
	maxVocab  = 1 << 24
	maxLayers = 1 << 12
	maxPos    = 1 << 26
)

// Validate checks that the config describes a model this family computes.
// Errors name config.json, the field and the value.
func (c Config) Validate() error {
	if _, ok := modelDefaults[c.ModelType]; !ok {
		return unsupported("model_type %q (want llama, mistral, qwen2 or qwen3)", c.ModelType)
	}
	for _, a := range c.Architectures {
		if !strings.HasSuffix(a, "ForCausalLM") {
			return unsupported("field architectures: %q (only ...ForCausalLM checkpoints are supported)", a)
		}
	}
	for _, f := range []struct {
		key    string
		v, max int
	}{
		{"vocab_size", c.VocabSize, maxVocab},
		{"hidden_size", c.HiddenSize, maxDim},
		{"intermediate_size", c.IntermediateSize, maxDim},
		{"num_hidden_layers", c.NumHiddenLayers, maxLayers},
		{"num_attention_heads", c.NumAttentionHeads, maxDim},
		{"num_key_value_heads", c.NumKeyValueHeads, maxDim},
		{"head_dim", c.HeadDim, maxDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings, maxPos},
	} {
		if f.v < 1 || f.v > f.max {
			return cfgErr("field %s: %d (want 1..%d)", f.key, f.v, f.max)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return cfgErr("field num_key_value_heads: %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim%2 != 0 {
		return cfgErr("field head_dim: %d is odd (RoPE rotates pairs)", c.HeadDim)
	}
	if int64(c.NumAttentionHeads)*int64(c.HeadDim) > maxDim {
		return cfgErr("num_attention_heads*head_dim = %d*%d is too large", c.NumAttentionHeads, c.HeadDim)
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return cfgErr("field rms_norm_eps: %v (want 0 < eps < 1)", c.RMSNormEps)
	}
	if !(c.RopeTheta > 1 && c.RopeTheta < 1e12) {
		return cfgErr("field rope_theta: %v (want 1 < theta < 1e12)", c.RopeTheta)
	}
	if c.HiddenAct != "silu" {
		return unsupported("field hidden_act: %q (only silu is supported)", c.HiddenAct)
	}
	if c.ModelType != Llama && c.MLPBias {
		return unsupported("field mlp_bias: true for model_type %s (only llama has MLP biases)", c.ModelType)
	}
	if c.ModelType != Llama && c.ModelType != Qwen3 && c.AttentionBias {
		return unsupported("field attention_bias: true for model_type %s (only llama and qwen3 read it)", c.ModelType)
	}
	if s := c.RopeScaling; s != nil && s.Type != "" {
		if s.Type != "llama3" {
			return unsupported("field rope_scaling: rope type %q (only default and llama3 are supported)", s.Type)
		}
		if !(s.Factor >= 1 && s.Factor < 1e6) {
			return cfgErr("field rope_scaling.factor: %v (want >= 1)", s.Factor)
		}
		if !(s.LowFreqFactor > 0 && s.HighFreqFactor > s.LowFreqFactor && s.HighFreqFactor < 1e6) {
			return cfgErr("fields rope_scaling.low_freq_factor, high_freq_factor: %v, %v (want 0 < low < high)", s.LowFreqFactor, s.HighFreqFactor)
		}
		if s.OriginalMaxPositionEmbeddings < 1 || s.OriginalMaxPositionEmbeddings > maxPos {
			return cfgErr("field rope_scaling.original_max_position_embeddings: %d (want 1..%d)", s.OriginalMaxPositionEmbeddings, maxPos)
		}
	}
	for _, id := range append([]int{c.BOSTokenID, c.PadTokenID}, c.EOSTokenIDs...) {
		if id < -1 || id > maxVocab {
			return cfgErr("token id %d out of range", id)
		}
	}
	if c.SlidingWindow < 0 || c.SlidingWindow > maxPos {
		return cfgErr("field sliding_window: %d (want 0..%d)", c.SlidingWindow, maxPos)
	}
	if c.LayerTypes != nil && (c.ModelType == Qwen2 || c.ModelType == Qwen3) {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return cfgErr("field layer_types: %d entries for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range c.LayerTypes {
			if t != "full_attention" && t != "sliding_attention" {
				return unsupported("field layer_types[%d]: %q (want full_attention or sliding_attention)", i, t)
			}
		}
	}
	switch c.DType {
	case "", "float32", "bfloat16", "float16":
	default:
		return unsupported("field dtype/torch_dtype: %q (want float32, bfloat16 or float16)", c.DType)
	}
	return nil
}

// QKVBias reports whether q_proj, k_proj and v_proj have biases: always for
// qwen2 (Qwen2Attention hard-codes bias=True), attention_bias for llama and
// qwen3, never for mistral.
func (c Config) QKVBias() bool {
	switch c.ModelType {
	case Qwen2:
		return true
	case Llama, Qwen3:
		return c.AttentionBias
	}
	return false
}

// OBias reports whether o_proj has a bias: attention_bias for llama and
// qwen3; never for qwen2 and mistral.
func (c Config) OBias() bool {
	return (c.ModelType == Llama || c.ModelType == Qwen3) && c.AttentionBias
}

// MLPBiases reports whether gate_proj, up_proj and down_proj have biases
// (llama's mlp_bias).
func (c Config) MLPBiases() bool { return c.ModelType == Llama && c.MLPBias }

// QKNorm reports whether attention has per-head RMSNorms on q and k before
// RoPE (qwen3's q_norm, k_norm, weights [head_dim], eps rms_norm_eps).
func (c Config) QKNorm() bool { return c.ModelType == Qwen3 }

// SlidingWindowAt is the attention window of layer l: 0 for full causal
// attention, else w > 0, meaning a query at position i sees keys at
// positions j with i-w < j <= i (w keys, itself included), as transformers'
// sliding-window masks do.
func (c Config) SlidingWindowAt(l int) int {
	switch c.ModelType {
	case Mistral:
		return c.SlidingWindow
	case Qwen2, Qwen3:
		if !c.UseSlidingWindow || l < 0 {
			return 0
		}
		if c.LayerTypes == nil && l >= c.MaxWindowLayers {
			return c.SlidingWindow
		}
		if l < len(c.LayerTypes) && c.LayerTypes[l] == "sliding_attention" {
			return c.SlidingWindow
		}
	}
	return 0
}

// RopeInvFreq returns the HeadDim/2 inverse frequencies of the rotary
// embedding: theta^(-2i/head_dim), then, for rope type llama3, transformers'
// _compute_llama3_parameters: wavelengths longer than
// original_max/low_freq_factor are divided by factor, shorter than
// original_max/high_freq_factor kept, and those between interpolated with
// smooth = (original_max/wavelen - low)/(high - low). Computed in float64
// (transformers computes in float32; the two differ by an ulp of float32).
// Position p rotates the pair (x[i], x[i+HeadDim/2]) by p*inv[i] (HF's
// rotate_half layout).
func (c Config) RopeInvFreq() []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	s := c.RopeScaling
	if s == nil || s.Type != "llama3" {
		return inv
	}
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen := old / s.LowFreqFactor
	highWavelen := old / s.HighFreqFactor
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		scaled := f
		if wavelen > lowWavelen {
			scaled = f / s.Factor
		}
		if !(wavelen < highWavelen) && !(wavelen > lowWavelen) {
			smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			scaled = (1-smooth)*scaled/s.Factor + smooth*scaled
		}
		inv[i] = scaled
	}
	return inv
}

// NumParams counts the model's parameters (tied embeddings once).
func (c Config) NumParams() int64 {
	var n int64
	for _, t := range ExpectedTensors(c) {
		n += numel(t.Shape)
	}
	return n
}

// MarshalJSON writes config.json: the raw fields as read, with every field
// this package knows rewritten only if its value changed since parsing; a
// Config built in code writes all of them (transformers needs no defaults
// filled in but writing them keeps the file self-describing).
func (c Config) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	var orig Config
	haveOrig := false
	if c.raw != nil {
		for k, v := range c.raw {
			out[k] = v
		}
		raw, err := json.Marshal(map[string]json.RawMessage(c.raw))
		if err != nil {
			return nil, fmt.Errorf("hf: encode config.json: %w", err)
		}
		if o, err := parseConfig(raw); err == nil {
			orig, haveOrig = o, true
		}
	}
	set := func(key string, v, was any) {
		if haveOrig && reflect.DeepEqual(v, was) {
			return
		}
		out[key] = v
	}
	o := orig
	set("model_type", c.ModelType, o.ModelType)
	if c.Architectures != nil || !haveOrig {
		arch := c.Architectures
		if arch == nil {
			arch = []string{archName(c.ModelType)}
		}
		set("architectures", arch, o.Architectures)
	}
	set("vocab_size", c.VocabSize, o.VocabSize)
	set("hidden_size", c.HiddenSize, o.HiddenSize)
	set("intermediate_size", c.IntermediateSize, o.IntermediateSize)
	set("num_hidden_layers", c.NumHiddenLayers, o.NumHiddenLayers)
	set("num_attention_heads", c.NumAttentionHeads, o.NumAttentionHeads)
	set("num_key_value_heads", c.NumKeyValueHeads, o.NumKeyValueHeads)
	set("head_dim", c.HeadDim, o.HeadDim)
	set("max_position_embeddings", c.MaxPositionEmbeddings, o.MaxPositionEmbeddings)
	set("rms_norm_eps", c.RMSNormEps, o.RMSNormEps)
	set("hidden_act", c.HiddenAct, o.HiddenAct)
	set("tie_word_embeddings", c.TieWordEmbeddings, o.TieWordEmbeddings)
	if c.ModelType == Llama || c.ModelType == Qwen3 {
		set("attention_bias", c.AttentionBias, o.AttentionBias)
	}
	if c.ModelType == Llama {
		set("mlp_bias", c.MLPBias, o.MLPBias)
	}
	tok := func(id int) any {
		if id < 0 {
			return nil
		}
		return id
	}
	set("bos_token_id", tok(c.BOSTokenID), tok(o.BOSTokenID))
	set("pad_token_id", tok(c.PadTokenID), tok(o.PadTokenID))
	var eos any
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		eos = c.EOSTokenIDs[0]
	default:
		eos = c.EOSTokenIDs
	}
	if !haveOrig || !slices.Equal(c.EOSTokenIDs, o.EOSTokenIDs) {
		out["eos_token_id"] = eos
	}
	switch c.ModelType {
	case Mistral:
		var sw any
		if c.SlidingWindow > 0 {
			sw = c.SlidingWindow
		}
		set("sliding_window", sw, func() any {
			if o.SlidingWindow > 0 {
				return o.SlidingWindow
			}
			return nil
		}())
	case Qwen2, Qwen3:
		set("use_sliding_window", c.UseSlidingWindow, o.UseSlidingWindow)
		if c.UseSlidingWindow {
			set("sliding_window", c.SlidingWindow, o.SlidingWindow)
		}
		set("max_window_layers", c.MaxWindowLayers, o.MaxWindowLayers)
		if c.LayerTypes != nil {
			set("layer_types", c.LayerTypes, o.LayerTypes)
		}
	}
	// RoPE: keep the style the file had (v5 rope_parameters or v4
	// rope_theta + rope_scaling); v4 style for a Config built in code.
	if !haveOrig || c.RopeTheta != o.RopeTheta || !reflect.DeepEqual(c.RopeScaling, o.RopeScaling) {
		var scaling map[string]any
		if s := c.RopeScaling; s != nil && s.Type != "" {
			scaling = map[string]any{
				"rope_type": s.Type, "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
				"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositionEmbeddings,
			}
		}
		if _, v5 := c.raw["rope_parameters"]; v5 {
			if scaling == nil {
				scaling = map[string]any{"rope_type": "default"}
			}
			scaling["rope_theta"] = c.RopeTheta
			out["rope_parameters"] = scaling
			if _, ok := c.raw["rope_theta"]; ok {
				out["rope_theta"] = c.RopeTheta
			}
		} else {
			out["rope_theta"] = c.RopeTheta
			out["rope_scaling"] = scaling
		}
	}
	if c.DType != o.DType || !haveOrig {
		_, v5 := c.raw["dtype"]
		_, v4 := c.raw["torch_dtype"]
		var v any
		if c.DType != "" {
			v = c.DType
		}
		if v5 {
			out["dtype"] = v
		}
		if v4 || !v5 {
			out["torch_dtype"] = v
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("hf: encode config.json: %w", err)
	}
	return append(b, '\n'), nil
}

func archName(modelType string) string {
	switch modelType {
	case Llama:
		return "LlamaForCausalLM"
	case Mistral:
		return "MistralForCausalLM"
	case Qwen2:
		return "Qwen2ForCausalLM"
	case Qwen3:
		return "Qwen3ForCausalLM"
	}
	return ""
}

// Raw returns config.json's value for key as read (nil if absent or the
// Config was built in code), for fields this package does not interpret.
func (c Config) Raw(key string) json.RawMessage { return c.raw[key] }
