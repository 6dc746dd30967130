package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCurrent: the committed docs/gpu-performance-model.md is what this
// program writes (regenerate with go run ./gpu/compute/cuda/internal/perfmodel).
func TestDocCurrent(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", docPath)) // tests run in the package directory
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, render()) {
		t.Fatalf("%s is stale; run go run ./gpu/compute/cuda/internal/perfmodel", docPath)
	}
}

// TestCounts checks the model's counting against hand-derived figures.
func TestCounts(t *testing.T) {
	q05 := shapes[0]
	// 24 layers × (2·896² + 2·896·128 + 3·896·4864) + 151936·896.
	if got, want := q05.params(), 24*(2*896*896+2*896*128+3*896*4864)+151936*896.0; got != want {
		t.Errorf("Qwen2.5-0.5B params = %v, want %v", got, want)
	}
	g := gemm(4096, 4096, 4096, false, false)
	if g.FLOPs != 2*4096*4096*4096.0 || g.Bytes != 2*2*4096*4096+4*4096*4096.0 {
		t.Errorf("gemm 4096³ = %+v", g)
	}
	if g.bound(devices[1]) != "compute" || gemm(1, 896, 896, true, false).bound(devices[1]) != "memory" {
		t.Error("4096³ should be compute bound and a batch-1 product memory bound")
	}
	// A forward over n tokens is about 2 FLOPs per weight per token.
	p := prefillStep(q05, 1, 512).total().FLOPs
	if lo, hi := 2*float64(24)*q05.layerParams()*512, 2*q05.params()*512*1.05; p < lo || p > hi {
		t.Errorf("prefill FLOPs %v outside [%v, %v]", p, lo, hi)
	}
	for _, s := range shapes {
		for _, st := range []step{trainStep(s, 8, 512, false), trainStep(s, 8, 512, true), decodeStep(s, 1, 512)} {
			d := st.design(devices[1])
			if !(d >= st.roofline(devices[1])) || d > 1e3 {
				t.Errorf("%s %s: design time %v against roofline %v", s.Name, st.Name, d, st.roofline(devices[1]))
			}
		}
	}
	if doc := string(render()); !strings.Contains(doc, "not a measurement") || strings.Contains(doc, "Inf") || strings.Contains(doc, "NaN") {
		t.Error("the doc lacks its label or holds Inf/NaN")
	}
}
