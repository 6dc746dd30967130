package policy

import (
	"encoding/json"
	"fmt"
	"os"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// archFromHF derives the kernels' shape from a validated config.
func archFromHF(cfg hf.Config) llamaArch {
	ctx := cfg.MaxPositionEmbeddings
	// A sliding window w changes nothing for sequences of at most w
	// tokens, so the model is exact within the smallest window.
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		if w := cfg.SlidingWindowAt(l); w > 0 && w < ctx {
			ctx = w
		}
	}
	std := 0.02
	if raw := cfg.Raw("initializer_range"); raw != nil {
		var v float64
		if json.Unmarshal(raw, &v) == nil && v > 0 {
			std = v
		}
	}
	return llamaArch{
		family: cfg.ModelType,
		L:      cfg.NumHiddenLayers, C: cfg.HiddenSize, NH: cfg.NumAttentionHeads, KVH: cfg.NumKeyValueHeads,
		HD: cfg.HeadDim, I: cfg.IntermediateSize, V: cfg.VocabSize, ctx: ctx,
		eps:        float32(cfg.RMSNormEps),
		invFreq:    cfg.RopeInvFreq(),
		attnFactor: 1, // llama3 scaling leaves cos and sin unscaled
		qkvBias:    cfg.QKVBias(), oBias: cfg.OBias(), mlpBias: cfg.MLPBiases(), qkNorm: cfg.QKNorm(),
		tied:    cfg.TieWordEmbeddings,
		initStd: std,
	}
}

// NewLlama builds a model of cfg's shape on be with transformers'
// initialisation (matrices and the embedding from N(0, initializer_range),
// default 0.02; biases 0; norm gains 1) drawn from seed: a model trained
// from scratch. Build cfg with hf.NewConfig(model type) and set its sizes.
func NewLlama(be compute.Backend, cfg hf.Config, seed uint64) (*Llama, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w: %w", ErrConfig, err)
	}
	m, err := newLlamaEmpty(be, archFromHF(cfg), cfg)
	if err != nil {
		return nil, err
	}
	if err := m.initRandom(seed); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// Config returns the Hugging Face config the model was built from.
func (m *Llama) Config() hf.Config { return m.cfg }

// hostData is implemented by buffers in host memory (gpu/compute/cpu's), which
// loading then fills in place instead of through a staging copy.
type hostData interface{ Data() []float32 }

// LoadLlama reads a Hugging Face model directory (config.json and
// model.safetensors, or shards with model.safetensors.index.json; F32, F16
// or BF16) into a model on be: Load(FromHF(dir), be, LoadOptions{}). The
// files are memory-mapped and each tensor is converted straight into the
// model's weights, so loading holds about one copy of the weights (plus a
// staging copy of the largest tensor on a device backend). Errors name the
// directory and the config field or the file, tensor and expected shape.
func LoadLlama(dir string, be compute.Backend) (*Llama, error) {
	return Load(FromHF(dir), be, LoadOptions{})
}

// readWeights converts every tensor of ck into the weights.
func (m *Llama) readWeights(ck *hf.Checkpoint) error {
	var host []float32
	if h, ok := m.params.(hostData); ok && m.bf == nil {
		host = h.Data()
	}
	var stage []float32
	off := 0
	for k, kd := range m.kinds {
		n := m.sizes[k]
		if n == 0 {
			continue
		}
		per, layers := n, 1
		if kd.layered {
			per, layers = n/m.arch.L, m.arch.L
		}
		for l := 0; l < layers; l++ {
			name := m.arch.tensorName(kd, l)
			if m.bf != nil && isBF16Kind(k) { // rounded into the BF16 base
				if cap(stage) < per {
					stage = make([]float32, per)
				}
				if err := ck.ReadF32(name, kd.shape, stage[:per]); err != nil {
					return err
				}
				toBF16(m.bf.mats[k][l*per:(l+1)*per], stage[:per])
				continue
			}
			var dst []float32
			if host != nil {
				dst = host[off : off+per]
			} else {
				if cap(stage) < per {
					stage = make([]float32, per)
				}
				dst = stage[:per]
			}
			if err := ck.ReadF32(name, kd.shape, dst); err != nil {
				return err
			}
			if host == nil {
				v, err := m.be.View(m.params, off, per)
				if err != nil {
					return fmt.Errorf("tensor %s: %w", name, err)
				}
				m.be.Upload(v, dst)
			}
			off += per
		}
	}
	m.wver++
	return m.be.Sync()
}

// tensors returns the weights w (as Weights returns them) as HF tensors,
// in ExpectedTensors' order; the data slices alias w.
func (m *Llama) tensors(w []float32) ([]hf.Tensor, error) {
	byName := map[string]hf.Tensor{}
	off := 0
	for k, kd := range m.kinds {
		n := m.sizes[k]
		if n == 0 {
			continue
		}
		per, layers := n, 1
		if kd.layered {
			per, layers = n/m.arch.L, m.arch.L
		}
		for l := 0; l < layers; l++ {
			name := m.arch.tensorName(kd, l)
			byName[name] = hf.Tensor{Name: name, Shape: kd.shape, Data: w[off : off+per]}
			off += per
		}
	}
	want := hf.ExpectedTensors(m.cfg)
	if len(want) != len(byName) {
		return nil, fmt.Errorf("policy: model has %d tensors, config expects %d", len(byName), len(want))
	}
	out := make([]hf.Tensor, 0, len(want))
	for _, t := range want {
		x, ok := byName[t.Name]
		if !ok || numel(t.Shape) != len(x.Data) {
			return nil, fmt.Errorf("policy: tensor %s %v is not the model's", t.Name, t.Shape)
		}
		out = append(out, x)
	}
	return out, nil
}

// Save writes the model to dir in the Hugging Face layout (config.json and
// model.safetensors, F32), which transformers opens unchanged.
func (m *Llama) Save(dir string) error { return m.SaveAs(dir, hf.SaveOptions{}) }

// SaveAs is Save with a dtype (hf.BF16 halves the files), sharding and
// metadata of choice.
func (m *Llama) SaveAs(dir string, opts hf.SaveOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policy: save %s: %w", dir, err)
	}
	var w []float32
	if h, ok := m.params.(hostData); ok && m.bf == nil {
		// float32 host memory: written straight from the weights, no
		// second copy (a BF16 base's params hold only the small tensors)
		if err := m.be.Sync(); err != nil {
			return fmt.Errorf("policy: save %s: %w", dir, err)
		}
		w = h.Data()[:m.nparams]
	} else {
		var err error
		if w, err = m.Weights(); err != nil {
			return err
		}
	}
	ts, err := m.tensors(w)
	if err != nil {
		return fmt.Errorf("policy: save %s: %w", dir, err)
	}
	if err := hf.SaveModel(dir, m.cfg, ts, opts); err != nil {
		return fmt.Errorf("policy: save %s: %w", dir, err)
	}
	return nil
}

// SaveCheckpoint implements LM: the HF directory path (F32) with meta in the
// safetensors metadata.
func (m *Llama) SaveCheckpoint(path string, meta map[string]string) error {
	return m.SaveAs(path, hf.SaveOptions{Metadata: meta})
}
