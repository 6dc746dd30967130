package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

const smolLM = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.02,
  "intermediate_size": 1536,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "vocab_size": 49152
}`

const llama31 = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "vocab_size": 128256,
  "mlp_bias": false, "attention_bias": false, "hidden_act": "silu"
}`

const qwen25 = `{
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
}`

const qwen3 = `{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
}`

func mustParse(t *testing.T, s string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseRealConfigs(t *testing.T) {
	c := mustParse(t, smolLM)
	if c.HeadDim != 64 || c.NumKeyValueHeads != 3 || !c.TieWordEmbeddings || c.RMSNormEps != 1e-5 ||
		c.BOSTokenID != 0 || !reflect.DeepEqual(c.EOSTokenIDs, []int{0}) || c.PadTokenID != -1 ||
		c.DType != "bfloat16" || c.RopeScaling != nil || c.QKVBias() || c.OBias() || c.QKNorm() || c.SlidingWindowAt(0) != 0 {
		t.Errorf("smollm: %+v", c)
	}
	c = mustParse(t, llama31)
	want := &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	if !reflect.DeepEqual(c.RopeScaling, want) || c.RopeTheta != 500000 || !reflect.DeepEqual(c.EOSTokenIDs, []int{128001, 128008, 128009}) {
		t.Errorf("llama 3.1: %+v %+v", c, c.RopeScaling)
	}
	c = mustParse(t, qwen25)
	if !c.QKVBias() || c.OBias() || c.MLPBiases() || c.HeadDim != 64 || c.SlidingWindowAt(23) != 0 || c.LayerTypes != nil {
		t.Errorf("qwen2.5: %+v", c)
	}
	c = mustParse(t, qwen3)
	if c.QKVBias() || c.OBias() || !c.QKNorm() || c.HeadDim != 128 || c.NumAttentionHeads*c.HeadDim == c.HiddenSize {
		t.Errorf("qwen3: %+v", c)
	}
}

// TestConfigDefaults pins the transformers v5 class defaults.
func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		json                       string
		kv, headDim, window, maxPo int
		bos                        int
		eos                        []int
	}{
		{`{"model_type":"llama","num_attention_heads":8,"hidden_size":512}`, 8, 64, 0, 2048, 1, []int{2}},
		{`{"model_type":"mistral","num_attention_heads":8,"hidden_size":512}`, 8, 64, 4096, 131072, 1, []int{2}},
		{`{"model_type":"mistral","num_attention_heads":8,"hidden_size":512,"num_key_value_heads":null,"sliding_window":null}`, 8, 64, 0, 131072, 1, []int{2}},
		{`{"model_type":"mistral","num_attention_heads":16,"hidden_size":512,"num_key_value_heads":null}`, 16, 32, 4096, 131072, 1, []int{2}},
		{`{"model_type":"qwen2","num_attention_heads":64,"hidden_size":4096}`, 32, 64, 0, 32768, -1, nil},
		{`{"model_type":"qwen2","num_attention_heads":8,"hidden_size":512,"num_key_value_heads":null}`, 8, 64, 0, 32768, -1, nil},
		{`{"model_type":"qwen3","num_attention_heads":64,"hidden_size":1024}`, 32, 128, 0, 32768, -1, nil},
		{`{"model_type":"llama","bos_token_id":null,"eos_token_id":null}`, 32, 128, 0, 2048, -1, nil},
	} {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.json, err)
			continue
		}
		if c.NumKeyValueHeads != tc.kv || c.HeadDim != tc.headDim || c.SlidingWindowAt(0) != tc.window ||
			c.MaxPositionEmbeddings != tc.maxPo || c.BOSTokenID != tc.bos || !reflect.DeepEqual(c.EOSTokenIDs, tc.eos) ||
			c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.TieWordEmbeddings || c.HiddenAct != "silu" {
			t.Errorf("%s: kv %d head_dim %d window %d maxpos %d bos %d eos %v theta %v", tc.json, c.NumKeyValueHeads,
				c.HeadDim, c.SlidingWindowAt(0), c.MaxPositionEmbeddings, c.BOSTokenID, c.EOSTokenIDs, c.RopeTheta)
		}
	}
	for _, mt := range []string{Llama, Mistral, Qwen2, Qwen3} {
		c, err := NewConfig(mt)
		if err != nil || c.Validate() != nil || c.NumHiddenLayers != 32 || c.HiddenSize != 4096 {
			t.Errorf("NewConfig(%s) = %+v, %v", mt, c, err)
		}
	}
}

func TestSlidingWindow(t *testing.T) {
	c := mustParse(t, `{"model_type":"qwen2","num_hidden_layers":4,"use_sliding_window":true,"sliding_window":16,"max_window_layers":2}`)
	for l, want := range []int{0, 0, 16, 16} {
		if got := c.SlidingWindowAt(l); got != want {
			t.Errorf("layer %d window %d want %d", l, got, want)
		}
	}
	c = mustParse(t, `{"model_type":"qwen3","num_hidden_layers":2,"use_sliding_window":true,"sliding_window":8,"layer_types":["sliding_attention","full_attention"]}`)
	if c.SlidingWindowAt(0) != 8 || c.SlidingWindowAt(1) != 0 {
		t.Errorf("layer_types: %v", c.LayerTypes)
	}
	c = mustParse(t, `{"model_type":"qwen3","num_hidden_layers":2,"use_sliding_window":false,"sliding_window":8,"layer_types":["sliding_attention","full_attention"]}`)
	if c.SlidingWindowAt(0) != 0 {
		t.Error("use_sliding_window false still slides")
	}
}

func TestRopeStyles(t *testing.T) {
	v4 := mustParse(t, `{"model_type":"llama","rope_theta":500000,"rope_scaling":{"type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`)
	v5 := mustParse(t, `{"model_type":"llama","rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192},"dtype":"bfloat16"}`)
	if !reflect.DeepEqual(v4.RopeScaling, v5.RopeScaling) || v4.RopeTheta != v5.RopeTheta || v5.DType != "bfloat16" {
		t.Errorf("v4 %+v v5 %+v", v4.RopeScaling, v5.RopeScaling)
	}
	if !slicesClose(v4.RopeInvFreq(), v5.RopeInvFreq()) {
		t.Error("inv freq differ")
	}
	def := mustParse(t, `{"model_type":"qwen2","rope_parameters":{"rope_type":"default","rope_theta":1000000.0}}`)
	if def.RopeScaling != nil || def.RopeTheta != 1e6 {
		t.Errorf("default rope: %+v %v", def.RopeScaling, def.RopeTheta)
	}
	def = mustParse(t, `{"model_type":"llama","rope_scaling":{"type":"default"}}`)
	if def.RopeScaling != nil {
		t.Error("type default scales")
	}
	// Plain RoPE.
	inv := def.RopeInvFreq()
	for i, f := range inv {
		if want := math.Pow(10000, -float64(2*i)/128); math.Abs(f-want) > 1e-15 {
			t.Errorf("inv[%d] = %v want %v", i, f, want)
		}
	}
	// Llama 3.1 8B's published values for head_dim 128: the first
	// frequencies are untouched, the last divided by 8.
	l31 := mustParse(t, llama31)
	l31.HeadDim = 128
	inv = l31.RopeInvFreq()
	if inv[0] != 1 || math.Abs(inv[63]-math.Pow(500000, -126.0/128)/32) > 1e-20 {
		t.Errorf("llama3 ends %v %v", inv[0], inv[63])
	}
}

func slicesClose(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-15*math.Abs(a[i]) {
			return false
		}
	}
	return true
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		json        string
		unsupported bool
		want        []string // substrings of the message
	}{
		{`not json`, false, []string{"config.json", "not a JSON object"}},
		{`[1,2]`, false, []string{"config.json", "not a JSON object"}},
		{`{}`, false, []string{"model_type is missing"}},
		{`{"model_type":"gpt2"}`, true, []string{"config.json", "model_type", `"gpt2"`}},
		{`{"model_type":7}`, false, []string{"model_type", "want a string", "7"}},
		{`{"model_type":"llama","hidden_act":"gelu"}`, true, []string{"config.json", "hidden_act", `"gelu"`}},
		{`{"model_type":"llama","rope_scaling":{"type":"yarn","factor":4}}`, true, []string{"config.json", "rope_scaling", `"yarn"`}},
		{`{"model_type":"llama","rope_scaling":{"rope_type":"linear","factor":4}}`, true, []string{"rope_scaling", `"linear"`}},
		{`{"model_type":"llama","rope_parameters":{"rope_type":"dynamic","factor":4,"rope_theta":1e4}}`, true, []string{"rope_parameters", `"dynamic"`}},
		{`{"model_type":"llama","rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}}`, false, []string{"rope_scaling.original_max_position_embeddings", "missing"}},
		{`{"model_type":"llama","rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":8}}`, false, []string{"low_freq_factor"}},
		{`{"model_type":"llama","rope_scaling":"llama3"}`, false, []string{"rope_scaling", "want an object"}},
		{`{"model_type":"llama","hidden_size":"64"}`, false, []string{"config.json", "hidden_size", `"64"`}},
		{`{"model_type":"llama","hidden_size":64.5}`, false, []string{"hidden_size", "64.5"}},
		{`{"model_type":"llama","hidden_size":0}`, false, []string{"hidden_size", "0"}},
		{`{"model_type":"llama","num_attention_heads":32,"num_key_value_heads":5}`, false, []string{"num_key_value_heads", "5"}},
		{`{"model_type":"llama","head_dim":7}`, false, []string{"head_dim", "7"}},
		{`{"model_type":"llama","rms_norm_eps":0}`, false, []string{"rms_norm_eps"}},
		{`{"model_type":"llama","rope_theta":-1}`, false, []string{"rope_theta", "-1"}},
		{`{"model_type":"llama","tie_word_embeddings":"yes"}`, false, []string{"tie_word_embeddings", `"yes"`}},
		{`{"model_type":"llama","eos_token_id":[1,"x"]}`, false, []string{"eos_token_id"}},
		{`{"model_type":"llama","quantization_config":{"quant_method":"gptq"}}`, true, []string{"quantization_config"}},
		{`{"model_type":"llama","partial_rotary_factor":0.5}`, true, []string{"partial_rotary_factor", "0.5"}},
		{`{"model_type":"llama","architectures":["LlamaForSequenceClassification"]}`, true, []string{"architectures", "LlamaForSequenceClassification"}},
		{`{"model_type":"qwen2","mlp_bias":true}`, false, nil}, // qwen2 ignores mlp_bias, as transformers does
		{`{"model_type":"qwen3","num_hidden_layers":2,"layer_types":["full_attention"]}`, false, []string{"layer_types", "1 entries"}},
		{`{"model_type":"qwen3","num_hidden_layers":1,"layer_types":["chunked_attention"]}`, true, []string{"layer_types[0]", "chunked_attention"}},
		{`{"model_type":"llama","torch_dtype":"int8"}`, true, []string{"torch_dtype", "int8"}},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.json, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", tc.json)
			continue
		}
		if !errors.Is(err, ErrConfig) || errors.Is(err, ErrUnsupported) != tc.unsupported {
			t.Errorf("%s: %v: Is(ErrConfig)=%v Is(ErrUnsupported)=%v", tc.json, err, errors.Is(err, ErrConfig), errors.Is(err, ErrUnsupported))
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.json, err, w)
			}
		}
	}
}

// TestConfigWriteBack: unknown fields and the file's style survive a round
// trip; changed fields are written.
func TestConfigWriteBack(t *testing.T) {
	src := strings.Replace(llama31, `"hidden_act": "silu"`, `"hidden_act": "silu", "custom": {"a": [1, 2.5, null]}, "initializer_range": 0.02`, 1)
	c := mustParse(t, src)
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	json.Unmarshal([]byte(src), &a)
	json.Unmarshal(out, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("unchanged config rewritten:\n%v\n%v", a, b)
	}
	c.VocabSize = 128260
	c.DType = "float32"
	c.EOSTokenIDs = []int{7}
	c.RopeTheta = 1e6
	c2 := mustParse(t, string(mustMarshal(t, c)))
	if c2.VocabSize != 128260 || c2.DType != "float32" || !reflect.DeepEqual(c2.EOSTokenIDs, []int{7}) ||
		c2.RopeTheta != 1e6 || !reflect.DeepEqual(c2.RopeScaling, c.RopeScaling) || compact(c2.Raw("custom")) != `{"a":[1,2.5,null]}` {
		t.Errorf("changes lost: %+v", c2)
	}
	// v5 style stays v5 style.
	v5 := mustParse(t, `{"model_type":"llama","rope_parameters":{"rope_type":"default","rope_theta":10000.0},"dtype":"float32"}`)
	v5.RopeTheta = 20000
	v5.DType = "bfloat16"
	var m map[string]any
	json.Unmarshal(mustMarshal(t, v5), &m)
	if _, ok := m["rope_theta"]; ok {
		t.Error("v5 config gained rope_theta")
	}
	if _, ok := m["torch_dtype"]; ok {
		t.Error("v5 config gained torch_dtype")
	}
	if m["dtype"] != "bfloat16" || m["rope_parameters"].(map[string]any)["rope_theta"] != 20000.0 {
		t.Errorf("v5 write: %v", m)
	}
	// A Config built in code writes every field and reads back equal.
	for _, mt := range []string{Llama, Mistral, Qwen2, Qwen3} {
		n, _ := NewConfig(mt)
		n.HiddenSize, n.NumAttentionHeads, n.NumKeyValueHeads, n.HeadDim = 64, 4, 2, 16
		n.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
		back := mustParse(t, string(mustMarshal(t, n)))
		back.raw = nil
		if !reflect.DeepEqual(n, back) {
			t.Errorf("%s: %+v\n!= %+v", mt, n, back)
		}
	}
}

func compact(b []byte) string {
	var buf bytes.Buffer
	json.Compact(&buf, b)
	return buf.String()
}

func mustMarshal(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{smolLM, llama31, qwen25, qwen3,
		`{"model_type":"mistral","sliding_window":null,"num_key_value_heads":null}`,
		`{"model_type":"llama","rope_parameters":{"rope_type":"llama3","rope_theta":5e5,"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":32}}`,
		`{"model_type":"qwen3","num_hidden_layers":2,"use_sliding_window":true,"layer_types":["sliding_attention","full_attention"]}`,
		`{"model_type":"llama","hidden_size":-1}`, `{}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error not ErrConfig: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
		c.RopeInvFreq()
		if c.NumParams() <= 0 {
			t.Fatalf("%d params", c.NumParams())
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("written config does not parse: %v\n%s", err, out)
		}
		c.raw, c2.raw = nil, nil
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, c2)
		}
	})
}
