package agent

import (
	"context"
	"fmt"
	"time"
	"unsafe"
)

// This file is the weight sync of a run split into a learner and rollout
// workers: after each update the learner exports the new version once
// (ExportWeights; only the LoRA adapters when the base is frozen,
// everything otherwise), and every rollout worker imports it
// (ImportWeights). The trainer passes the export's future to the imports
// with actors.CallRef, so on a cluster the set stays in the learner's
// process and each worker fetches it from there in chunks, all at once;
// in one process it is the same encoded bytes, which each worker reads in
// place. The set travels as one raw blob (weightsync_blob.go): encoded
// once, and decoded into views of the bytes, which ImportWeights copies
// straight into the adapters.

// WeightSet is one published version of a policy's trainable weights.
type WeightSet struct {
	// Version counts the learner's updates before the export.
	Version int64
	// Names are the LoRA adapters the set holds, in Data's order, or the
	// one name "" for all the weights of a policy without adapters.
	Names []string
	// Data holds each name's weights as little-endian float32s, in the
	// order policy.Adapter.Weights (or LM.Weights) returns them. A
	// decoded set's Data are read-only: they view the encoded bytes,
	// which every other decoder of them shares.
	Data [][]byte
}

// Bytes is the size of the set's weights.
func (w WeightSet) Bytes() int {
	n := 0
	for _, d := range w.Data {
		n += len(d)
	}
	return n
}

// ExportWeights returns the policy's trainable weights as version v: its
// adapters when it has LoRA adapters, every weight otherwise.
func (p *Policy) ExportWeights(ctx context.Context, v int64) (WeightSet, error) {
	defer p.clock.since(&p.clock.sync, time.Now())
	ws := WeightSet{Version: v}
	if m := p.lora(); m != nil {
		for _, name := range p.cfg.Adapters {
			ad := m.Adapter(name)
			if ad == nil {
				return WeightSet{}, fmt.Errorf("%w: export: no adapter %q", ErrInput, name)
			}
			w, err := ad.Weights()
			if err != nil {
				return WeightSet{}, fmt.Errorf("export %s: %w", name, err)
			}
			ws.Names, ws.Data = append(ws.Names, name), append(ws.Data, f32Bytes(w))
		}
		return ws, nil
	}
	w, err := p.model.Weights()
	if err != nil {
		return WeightSet{}, fmt.Errorf("export: %w", err)
	}
	ws.Names, ws.Data = []string{""}, [][]byte{f32Bytes(w)}
	return ws, nil
}

// ImportWeights replaces the policy's trainable weights with ws (what
// another policy of the same shape exported) and takes its version. It
// returns the version.
func (p *Policy) ImportWeights(ctx context.Context, ws WeightSet) (int64, error) {
	defer p.clock.since(&p.clock.sync, time.Now())
	if len(ws.Names) != len(ws.Data) {
		return 0, fmt.Errorf("%w: weight set with %d names and %d arrays", ErrInput, len(ws.Names), len(ws.Data))
	}
	m := p.lora()
	for i, name := range ws.Names {
		if len(ws.Data[i])%4 != 0 {
			return 0, fmt.Errorf("%w: weight set %q: %d bytes is not a number of float32s", ErrInput, name, len(ws.Data[i]))
		}
		w := bytesF32(ws.Data[i])
		switch {
		case name == "" && m != nil:
			return 0, fmt.Errorf("%w: a full weight set for a policy with LoRA adapters", ErrInput)
		case name == "":
			if err := p.model.SetWeights(w); err != nil {
				return 0, fmt.Errorf("%w: import: %w", ErrInput, err)
			}
		case m == nil:
			return 0, fmt.Errorf("%w: adapter %q for a policy without LoRA adapters", ErrInput, name)
		default:
			ad := m.Adapter(name)
			if ad == nil {
				return 0, fmt.Errorf("%w: import: no adapter %q (have %v)", ErrInput, name, m.Adapters())
			}
			if err := ad.SetWeights(w); err != nil {
				return 0, fmt.Errorf("%w: import: %w", ErrInput, err)
			}
		}
	}
	p.version = ws.Version
	return ws.Version, nil
}

// f32Bytes views w as its little-endian bytes (every platform the backends
// build for is little-endian), without a copy.
func f32Bytes(w []float32) []byte {
	if len(w) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))
}

// bytesF32 views b (len a multiple of 4) as float32s without a copy when
// it is 4-byte aligned (as the decoder's allocations are), else copies it.
// The import only reads it: SetWeights copies it into the model.
func bytesF32(b []byte) []float32 {
	if len(b) == 0 {
		return []float32{}
	}
	if uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
	}
	w := make([]float32, len(b)/4)
	copy(f32Bytes(w), b)
	return w
}
