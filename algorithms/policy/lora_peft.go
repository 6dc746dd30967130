package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"troupe/algorithms/policy/hf"
)

// This file reads and writes adapters in Hugging Face PEFT's layout, which
// PeftModel.from_pretrained opens unchanged:
//
//	adapter_config.json         peft_type LORA, r, lora_alpha, target_modules, ...
//	adapter_model.safetensors   base_model.model.model.layers.<l>.<module>.lora_A.weight [r, in]
//	                            base_model.model.model.layers.<l>.<module>.lora_B.weight [out, r]
//
// Only what troupe computes is accepted: plain LoRA (no DoRA, no bias
// training, no per-module rank or alpha patterns, no modules_to_save, every
// layer adapted alike).

// PEFT's file names.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// peftConfig is adapter_config.json as PEFT writes it (the fields troupe
// writes; reading goes through parsePEFTConfig).
type peftConfig struct {
	AlphaPattern      map[string]any `json:"alpha_pattern"`
	AutoMapping       any            `json:"auto_mapping"`
	BaseModel         string         `json:"base_model_name_or_path"`
	Bias              string         `json:"bias"`
	FanInFanOut       bool           `json:"fan_in_fan_out"`
	InferenceMode     bool           `json:"inference_mode"`
	InitLoraWeights   bool           `json:"init_lora_weights"`
	LayersPattern     any            `json:"layers_pattern"`
	LayersToTransform any            `json:"layers_to_transform"`
	LoraAlpha         float64        `json:"lora_alpha"`
	LoraDropout       float64        `json:"lora_dropout"`
	ModulesToSave     any            `json:"modules_to_save"`
	PeftType          string         `json:"peft_type"`
	R                 int            `json:"r"`
	RankPattern       map[string]any `json:"rank_pattern"`
	Revision          any            `json:"revision"`
	TargetModules     []string       `json:"target_modules"`
	TaskType          string         `json:"task_type"`
	UseDora           bool           `json:"use_dora"`
	UseRSLoRA         bool           `json:"use_rslora"`
}

// marshalPEFTConfig renders cfg as PEFT's save_pretrained does (sorted
// keys, two-space indent).
func marshalPEFTConfig(cfg LoRAConfig) ([]byte, error) {
	on, err := cfg.targetMask()
	if err != nil {
		return nil, err
	}
	pc := peftConfig{
		AlphaPattern: map[string]any{}, RankPattern: map[string]any{},
		BaseModel: cfg.BaseModel, Bias: "none", InferenceMode: true, InitLoraWeights: true,
		LoraAlpha: cfg.Alpha, LoraDropout: cfg.Dropout, PeftType: "LORA", R: cfg.Rank,
		TargetModules: targetNames(on), TaskType: "CAUSAL_LM", UseRSLoRA: cfg.RSLoRA,
	}
	// through a map so the keys come out sorted, as json.dump(sort_keys=True)
	raw, err := json.Marshal(pc)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// parsePEFTConfig reads adapter_config.json for a model with nLayers
// layers, rejecting what troupe does not compute with an error naming the
// field.
func parsePEFTConfig(data []byte, nLayers int) (LoRAConfig, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		return LoRAConfig{}, fmt.Errorf("%w: %s: %v", ErrAdapter, AdapterConfigFile, err)
	}
	bad := func(field, format string, args ...any) (LoRAConfig, error) {
		return LoRAConfig{}, fmt.Errorf("%w: %s: %s: %s", ErrAdapter, AdapterConfigFile, field, fmt.Sprintf(format, args...))
	}
	isNull := func(k string) bool {
		v, ok := f[k]
		return !ok || string(v) == "null"
	}
	get := func(k string, dst any) error {
		if isNull(k) {
			return nil
		}
		return json.Unmarshal(f[k], dst)
	}
	var cfg LoRAConfig
	var s string
	if err := get("peft_type", &s); err != nil || s != "LORA" {
		return bad("peft_type", "%s, want \"LORA\"", f["peft_type"])
	}
	s = ""
	if err := get("task_type", &s); err != nil || (s != "" && s != "CAUSAL_LM") {
		return bad("task_type", "%s, want \"CAUSAL_LM\"", f["task_type"])
	}
	if isNull("r") {
		cfg.Rank = 8 // PEFT's default
	} else if err := get("r", &cfg.Rank); err != nil {
		return bad("r", "%s: %v", f["r"], err)
	}
	cfg.Alpha = 8
	if err := get("lora_alpha", &cfg.Alpha); err != nil {
		return bad("lora_alpha", "%s: %v", f["lora_alpha"], err)
	}
	if err := get("lora_dropout", &cfg.Dropout); err != nil {
		return bad("lora_dropout", "%s: %v", f["lora_dropout"], err)
	}
	if err := get("use_rslora", &cfg.RSLoRA); err != nil {
		return bad("use_rslora", "%s: %v", f["use_rslora"], err)
	}
	if err := get("base_model_name_or_path", &cfg.BaseModel); err != nil {
		return bad("base_model_name_or_path", "%s: %v", f["base_model_name_or_path"], err)
	}
	for _, k := range []string{"use_dora", "fan_in_fan_out", "lora_bias"} {
		var on bool
		if err := get(k, &on); err != nil || on {
			return bad(k, "%s is not supported (want false)", f[k])
		}
	}
	s = ""
	if err := get("bias", &s); err != nil || (s != "" && s != "none") {
		return bad("bias", "%s is not supported (want \"none\")", f["bias"])
	}
	for _, k := range []string{"modules_to_save", "layers_to_transform", "layer_replication", "rank_pattern", "alpha_pattern"} {
		if isNull(k) {
			continue
		}
		switch strings.TrimSpace(string(f[k])) {
		case "[]", "{}":
			continue
		}
		return bad(k, "%s is not supported", f[k])
	}
	// target_modules: a list of names (a module matches when its name is one
	// or ends with "."+one), "all-linear", or a regular expression matched
	// against the whole module name (PEFT's re.fullmatch).
	var list []string
	var pattern string
	switch {
	case isNull("target_modules"):
		return bad("target_modules", "missing")
	case json.Unmarshal(f["target_modules"], &list) == nil:
	case json.Unmarshal(f["target_modules"], &pattern) == nil:
	default:
		return bad("target_modules", "%s is neither a list of names nor a string", f["target_modules"])
	}
	var on [numTargets]bool
	switch {
	case list != nil:
		if len(list) == 0 {
			return bad("target_modules", "empty")
		}
		for _, n := range list {
			i := slices.IndexFunc(loraTargets[:], func(t string) bool { return n == t })
			if j := slices.Index(loraPaths[:], n); j >= 0 {
				i = j
			}
			if i < 0 {
				return bad("target_modules", "unknown module %q (want some of %v)", n, loraTargets)
			}
			on[i] = true
		}
	case pattern == "all-linear":
		for t := range on {
			on[t] = true
		}
	default:
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			return bad("target_modules", "pattern %q: %v", pattern, err)
		}
		for t := range on {
			hits := 0
			for l := range nLayers {
				if re.MatchString("model.layers." + strconv.Itoa(l) + "." + loraPaths[t]) {
					hits++
				}
			}
			if hits != 0 && hits != nLayers {
				return bad("target_modules", "pattern %q adapts %s in %d of %d layers; troupe adapts every layer alike", pattern, loraTargets[t], hits, nLayers)
			}
			on[t] = hits == nLayers
		}
		if on == ([numTargets]bool{}) {
			return bad("target_modules", "pattern %q matches none of %v", pattern, loraTargets)
		}
	}
	cfg.Targets = targetNames(on)
	if err := cfg.validate(); err != nil {
		return LoRAConfig{}, fmt.Errorf("%s: %w", AdapterConfigFile, err)
	}
	return cfg, nil
}

// Save writes the adapter to dir in PEFT's layout (adapter_config.json and
// adapter_model.safetensors, F32), which PeftModel.from_pretrained opens on
// the base model unchanged.
func (ad *Adapter) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policy: save adapter %q: %w", ad.name, err)
	}
	w, err := ad.Weights()
	if err != nil {
		return err
	}
	cfgJSON, err := marshalPEFTConfig(ad.cfg)
	if err != nil {
		return fmt.Errorf("policy: save adapter %q: %w", ad.name, err)
	}
	var ts []hf.Tensor
	off, r := 0, ad.cfg.Rank
	for l := 0; l < ad.m.arch.L; l++ {
		for t, on := range ad.on {
			if !on {
				continue
			}
			in, out := ad.m.arch.loraDims(t)
			ts = append(ts,
				hf.Tensor{Name: peftKey(l, t, "A"), Shape: []int{r, in}, Data: w[off : off+r*in]},
				hf.Tensor{Name: peftKey(l, t, "B"), Shape: []int{out, r}, Data: w[off+r*in : off+r*(in+out)]})
			off += r * (in + out)
		}
	}
	if err := hf.WriteSafetensors(filepath.Join(dir, AdapterWeightsFile), ts, hf.F32, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("policy: save adapter %q: %w", ad.name, err)
	}
	if err := writeFileAtomic(filepath.Join(dir, AdapterConfigFile), cfgJSON); err != nil {
		return fmt.Errorf("policy: save adapter %q: %w", ad.name, err)
	}
	return nil
}

// writeFileAtomic writes data beside path and renames it into place.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// PEFTAdapter is a PEFT adapter directory whose adapter_config.json was
// read and checked against a base, and whose weights file exists.
type PEFTAdapter struct {
	Dir    string
	Config LoRAConfig
}

// readPEFT reads the PEFT adapter in dir for a base of the given layers.
func readPEFT(dir string, layers int) (PEFTAdapter, error) {
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		return PEFTAdapter{}, err
	}
	return parsePEFT(dir, data, layers)
}

// parsePEFT checks the adapter of dir, whose adapter_config.json holds
// data, for a base of the given layers.
func parsePEFT(dir string, data []byte, layers int) (PEFTAdapter, error) {
	cfg, err := parsePEFTConfig(data, layers)
	if err != nil {
		return PEFTAdapter{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, AdapterWeightsFile)); err != nil {
		return PEFTAdapter{}, err
	}
	return PEFTAdapter{Dir: dir, Config: cfg}, nil
}

// LoadAdapter reads a PEFT LoRA adapter directory (adapter_config.json and
// adapter_model.safetensors, F32/F16/BF16) as a new adapter called name.
// Errors name the file, the field or tensor, and what was expected: an
// adapter for a model of other shapes, a module troupe does not adapt, a
// missing or extra tensor.
func (m *Llama) LoadAdapter(name, dir string) (*Adapter, error) {
	p, err := readPEFT(dir, m.arch.L)
	if err == nil {
		var ad *Adapter
		if ad, err = m.loadPEFT(name, p); err == nil {
			return ad, nil
		}
	}
	return nil, fmt.Errorf("policy: load adapter %s: %w", dir, err)
}

// loadPEFT adds the checked adapter p as name.
func (m *Llama) loadPEFT(name string, p PEFTAdapter) (*Adapter, error) {
	ad, err := m.newAdapter(name, p.Config)
	if err != nil {
		return nil, err
	}
	if err := ad.readPEFT(p.Dir); err != nil {
		ad.free()
		return nil, err
	}
	m.attach(ad)
	return ad, nil
}

// Load replaces the adapter's weights with those of the PEFT adapter in
// dir, which must compute alike (LoRAConfig.Matches; ErrAdapter
// otherwise). AdamW moments are kept, as SetWeights keeps them.
func (ad *Adapter) Load(dir string) error {
	p, err := readPEFT(dir, ad.m.arch.L)
	if err != nil {
		return fmt.Errorf("policy: adapter %q: load %s: %w", ad.name, dir, err)
	}
	if want := ad.Config(); !p.Config.Matches(want) {
		return fmt.Errorf("%w: %s: adapter r=%d scaling %v targets %v, %q has r=%d scaling %v targets %v",
			ErrAdapter, dir, p.Config.Rank, p.Config.Scaling(), p.Config.Targets, ad.name, want.Rank, want.Scaling(), want.Targets)
	}
	if err := ad.readPEFT(dir); err != nil {
		return fmt.Errorf("policy: adapter %q: load %s: %w", ad.name, dir, err)
	}
	return nil
}

// readPEFT fills the adapter's weights from dir's adapter_model.safetensors,
// which must hold exactly its tensors; on an error they are unchanged.
func (ad *Adapter) readPEFT(dir string) error {
	path := filepath.Join(dir, AdapterWeightsFile)
	ck, err := hf.Open(path)
	if err != nil {
		return err
	}
	defer ck.Close()
	return ad.read(ck, path)
}

// read fills the adapter's weights from ck, which must hold exactly its
// tensors.
func (ad *Adapter) read(ck *hf.Checkpoint, path string) error {
	want := map[string]bool{}
	host := make([]float32, ad.n)
	off, r := 0, ad.cfg.Rank
	for l := 0; l < ad.m.arch.L; l++ {
		for t, on := range ad.on {
			if !on {
				continue
			}
			in, out := ad.m.arch.loraDims(t)
			for _, x := range []struct {
				ab    string
				shape []int
			}{{"A", []int{r, in}}, {"B", []int{out, r}}} {
				key := peftKey(l, t, x.ab)
				want[key] = true
				if _, ok := ck.Info(key); !ok {
					return fmt.Errorf("%w: %s: missing tensor %s %v (r=%d, %s of layer %d)", ErrAdapter, path, key, x.shape, r, loraTargets[t], l)
				}
				n := numel(x.shape)
				if err := ck.ReadF32(key, x.shape, host[off:off+n]); err != nil {
					return fmt.Errorf("%w: %w (the base's %s is [%d, %d], r=%d)", ErrAdapter, err, loraTargets[t], out, in, r)
				}
				off += n
			}
		}
	}
	var extra []string
	for _, n := range ck.Names() {
		if !want[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("%w: %s: %d unexpected tensors, first %s (the base has %d layers; adapted: %v)",
			ErrAdapter, path, len(extra), extra[0], ad.m.arch.L, targetNames(ad.on))
	}
	for _, x := range host {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%w: %s: non-finite weight", ErrAdapter, path)
		}
	}
	ad.m.be.Upload(ad.params, host)
	return ad.m.be.Sync()
}
