package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file says where a model comes from. A Source names it (a Hugging
// Face model directory, a from-scratch shape, a PEFT adapter on one of
// those); Resolve reads and checks what it names once (config.json, the
// safetensors headers and tensor list, adapter_config.json), before any
// backend memory is spent; Load builds the model from that.

// ErrSource reports a model source that cannot be used: a directory that
// is not a model or an adapter, a malformed config.json or
// adapter_config.json, missing or misshaped tensors, an adapter without a
// base. The error also wraps the cause (hf.ErrConfig, hf.ErrCheckpoint,
// ErrAdapter, ErrNoBase, fs.ErrNotExist) and names the file.
var ErrSource = errors.New("policy: bad model source")

// ErrNoBase reports a PEFT adapter given without the model it adapts.
var ErrNoBase = errors.New("policy: adapter without its base model")

type sourceKind int

const (
	noSource sourceKind = iota
	hfSource
	scratchSource
	adapterSource
	checkpointSource // a model or an adapter: what troupe saved
)

// Source says where a model comes from; build one with FromHF,
// FromScratch, WithAdapter or FromCheckpoint. The zero Source is no model.
type Source struct {
	kind sourceKind
	dir  string    // the model or adapter directory
	cfg  hf.Config // from scratch
	base *Source   // under an adapter
}

// FromHF is a Hugging Face model directory: config.json and
// model.safetensors, or shards with model.safetensors.index.json (F32,
// F16 or BF16), as transformers saves it and SaveCheckpoint writes it. Its
// tokenizer files are the tokenizer package's (tokenizer.Load).
func FromHF(dir string) Source { return Source{kind: hfSource, dir: dir} }

// FromScratch is a model of cfg's shape with transformers' initialisation
// from LoadOptions.Seed (see NewLlama); Config.HF gives a small Llama's.
func FromScratch(cfg hf.Config) Source { return Source{kind: scratchSource, cfg: cfg} }

// WithAdapter is the PEFT LoRA adapter in adapterDir (adapter_config.json
// and adapter_model.safetensors) on base.
func WithAdapter(base Source, adapterDir string) Source {
	return Source{kind: adapterSource, dir: adapterDir, base: &base}
}

// FromCheckpoint is a directory troupe saved: a PEFT adapter on base when
// it holds adapter_config.json (what a LoRA policy saves), else a model
// directory as FromHF (base unused).
func FromCheckpoint(dir string, base Source) Source {
	return Source{kind: checkpointSource, dir: dir, base: &base}
}

// IsZero reports whether s names no model.
func (s Source) IsZero() bool { return s.kind == noSource }

// String describes s for messages.
func (s Source) String() string {
	switch s.kind {
	case hfSource:
		return s.dir
	case scratchSource:
		return fmt.Sprintf("a from-scratch %s of %d layers, hidden %d", s.cfg.ModelType, s.cfg.NumHiddenLayers, s.cfg.HiddenSize)
	case adapterSource:
		return fmt.Sprintf("adapter %s on %s", s.dir, s.base)
	case checkpointSource:
		return "checkpoint " + s.dir
	}
	return "no model"
}

// Resolved is a Source read and checked, ready to Load: its config, where
// the weights come from, and the adapter to put on them. A Resolved of
// a model directory holds its safetensors files open (memory-mapped) until
// Load or Close.
type Resolved struct {
	// Config is the model's Hugging Face config (the base's, under an
	// adapter).
	Config hf.Config
	// Dir is the model directory the weights are read from; "" from
	// scratch.
	Dir string
	// Meta is the weights' safetensors metadata without "format": what
	// SaveCheckpoint stored (troupe's policies: alphabet, policy, steps).
	Meta map[string]string
	// Adapter is the PEFT adapter Load puts on the model; nil without one.
	Adapter *PEFTAdapter

	src Source
	ck  *hf.Checkpoint
}

// Resolve reads what s names once and checks it: config.json (parsed and
// validated), the safetensors headers against the tensors the config
// needs, adapter_config.json against the base's layers and the adapter's
// weights file. Errors wrap ErrSource and the cause, and name the file.
func (s Source) Resolve() (*Resolved, error) {
	r, err := s.resolve()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSource, err)
	}
	r.src = s
	return r, nil
}

func (s Source) resolve() (*Resolved, error) {
	switch s.kind {
	case hfSource:
		cfg, ck, err := hf.OpenModel(s.dir) // it names the directory or file
		if err != nil {
			return nil, err
		}
		meta := ck.Metadata()
		delete(meta, "format")
		return &Resolved{Config: cfg, Dir: s.dir, Meta: meta, ck: ck}, nil
	case scratchSource:
		if err := s.cfg.Validate(); err != nil {
			return nil, fmt.Errorf("from scratch: %w", err)
		}
		return &Resolved{Config: s.cfg}, nil
	case adapterSource, checkpointSource:
		return s.resolveAdapter()
	}
	return nil, errors.New("no model given")
}

// resolveAdapter resolves an adapter (or a checkpoint, which may be a
// model) and its base.
func (s Source) resolveAdapter() (*Resolved, error) {
	path := filepath.Join(s.dir, AdapterConfigFile)
	data, err := os.ReadFile(path)
	if s.kind == checkpointSource && errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(s.dir, hf.ConfigFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s holds neither a model (%s) nor a PEFT adapter (%s): %w", s.dir, hf.ConfigFile, AdapterConfigFile, err)
		}
		return FromHF(s.dir).resolve()
	}
	if err != nil {
		return nil, fmt.Errorf("adapter: %w", err) // the PathError names the file
	}
	if s.base == nil || s.base.IsZero() {
		return nil, fmt.Errorf("%w: %s (give the model it was trained on)", ErrNoBase, s.dir)
	}
	r, err := s.base.resolve()
	if err != nil {
		return nil, err
	}
	if r.Adapter != nil {
		r.Close()
		return nil, fmt.Errorf("adapter %s on %s, itself an adapter: troupe puts one adapter on a model", s.dir, s.base)
	}
	p, err := parsePEFT(s.dir, data, r.Config.NumHiddenLayers)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("adapter %s: %w", s.dir, err)
	}
	r.Adapter = &p
	return r, nil
}

// Source is what r was resolved from.
func (r *Resolved) Source() Source { return r.src }

// Close releases the files Resolve opened; Load closes them itself.
func (r *Resolved) Close() error {
	if r.ck == nil {
		return nil
	}
	err := r.ck.Close()
	r.ck = nil
	return err
}

// LoadOptions shape what Load builds.
type LoadOptions struct {
	// Seed initialises a from-scratch model.
	Seed uint64
	// BF16Base keeps the base's matrices in BF16 (see SetBaseDType): read
	// straight from the files, never as a float32 copy. Such a base is
	// frozen: it trains through adapters.
	BF16Base bool
	// Adapter names the source's adapter on the model; "" is "default",
	// PEFT's name.
	Adapter string
}

// peftDefault is the name PEFT gives an adapter it loads.
const peftDefault = "default"

// Load builds the model on be: the weights read tensor by tensor into the
// model's memory (one copy of the weights, see LoadLlama) or drawn from
// opt.Seed, and, with an adapter, that adapter attached and active. A
// model directory's files are closed afterwards, so it loads once.
func (r *Resolved) Load(be compute.Backend, opt LoadOptions) (*Llama, error) {
	defer r.Close()
	m, err := r.loadBase(be, opt)
	if err != nil {
		return nil, fmt.Errorf("policy: load %s: %w", r.src, err)
	}
	if r.Adapter == nil {
		return m, nil
	}
	name := opt.Adapter
	if name == "" {
		name = peftDefault
	}
	if _, err := m.loadPEFT(name, *r.Adapter); err != nil {
		m.Free()
		return nil, fmt.Errorf("policy: load %s: %w", r.src, err)
	}
	return m, nil
}

func (r *Resolved) loadBase(be compute.Backend, opt LoadOptions) (*Llama, error) {
	if r.Dir == "" { // from scratch
		m, err := NewLlama(be, r.Config, opt.Seed)
		if err != nil {
			return nil, err
		}
		if opt.BF16Base {
			if err := m.SetBaseDType(hf.BF16); err != nil {
				m.Free()
				return nil, err
			}
		}
		return m, nil
	}
	if r.ck == nil {
		return nil, errors.New("loaded already (a Resolved model directory loads once)")
	}
	m, err := newLlamaEmptyAs(be, archFromHF(r.Config), r.Config, opt.BF16Base)
	if err != nil {
		return nil, err
	}
	if err := m.readWeights(r.ck); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// Load resolves src and loads it on be: Resolve then Resolved.Load.
func Load(src Source, be compute.Backend, opt LoadOptions) (*Llama, error) {
	r, err := src.Resolve()
	if err != nil {
		return nil, err
	}
	return r.Load(be, opt)
}
