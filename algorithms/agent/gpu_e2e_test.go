//go:build cudaemu || cudagpu

package agent

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"troupe/actors"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
	"troupe/gpu/compute/cuda"
	"troupe/gpu/compute/cuda/emu"
	"troupe/runtime"
)

// gpuCluster starts an embedded cluster whose GPU the policy actor will
// compute on through gpu/compute/cuda's driver code, and returns the backend mode
// the actor is configured with. With -tags cudaemu the node has one
// simulated GPU and the CUDA driver is the fake libcuda of the CPU emulator
// (backend forced to cuda: a simulated GPU has no device of its own); with
// -tags cudagpu it is the machine's real GPU and the backend follows the
// placement (auto), matched by NVML UUID.
func gpuCluster(t *testing.T) (runtime.Runtime, string) {
	t.Helper()
	opts := []runtime.Option{runtime.Address("")}
	mode := "auto"
	if !realGPU {
		kernels, headers, err := cuda.EmulatorSources()
		if err != nil {
			t.Fatal(err)
		}
		lib, err := emu.Build(t.TempDir(), kernels, headers, emu.Options{})
		if err != nil {
			if strings.Contains(err.Error(), emu.ErrNoCompiler.Error()) && os.Getenv("CI") != "true" {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		t.Setenv("TROUPE_LIBCUDA", lib)
		opts = append(opts, runtime.SimulateGPUs("1"))
		mode = "cuda"
	}
	rt, err := runtime.Init(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt, mode
}

// TestPolicyActorOnPlacedGPU: a policy actor spawned with actors.GPUs(1)
// computes on the CUDA backend of the GPU it was placed on (not the CPU),
// and its sampling, scoring and training step agree with the same policy on
// the CPU within gpu/compute/cuda/README.md's tolerance (1e-4), for a model
// of the Llama family (GQA with one key/value head) and for a LoRA adapter
// on a frozen base.
func TestPolicyActorOnPlacedGPU(t *testing.T) {
	rt, mode := gpuCluster(t)
	for _, arch := range []string{"llama", "llama-lora"} {
		t.Run(arch, func(t *testing.T) { checkPolicyOnPlacedGPU(t, rt, mode, arch) })
	}
}

func checkPolicyOnPlacedGPU(t *testing.T, rt runtime.Runtime, mode, arch string) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.Backend, cfg.KVHeads = mode, 1
	if arch == "llama-lora" { // the LoRA products and the frozen base on the device
		cfg.LoRA = policy.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "down_proj"}}
	}
	h, err := actors.Spawn[Policy](ctx, rt, TypeName, cfg, actors.GPUs(1), actors.Name("planner-"+arch))
	if err != nil {
		t.Fatal(err)
	}
	defer actors.Kill(ctx, h) // frees the node's one GPU for the next subtest
	ws, err := actors.Call(ctx, h, (*Policy).Weights, struct{}{}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ws.Backend, "cuda:") {
		t.Fatalf("the policy actor placed on a GPU runs on %q, want the CUDA backend", ws.Backend)
	}
	t.Logf("policy actor backend: %s", ws.Backend)
	where, err := actors.Call(ctx, h, (*Policy).Placement, struct{}{}).Get(ctx)
	if err != nil || len(where.GPUs) != 1 {
		t.Fatalf("placement %+v, %v: want one GPU", where, err)
	}

	cpuCfg := cfg
	cpuCfg.Backend = "cpu"
	ref := newTiny(t, cpuCfg)

	prompts := []string{"p a01 g22", "q"}
	comps := []rl.Completion{{Tokens: []int{5, 6, 7}}, {Tokens: []int{9, 8}}}
	lpReq := LogProbsRequest{Prompts: prompts, Completions: comps}
	checkClose := func(what string, got, want [][]float32) {
		t.Helper()
		for i := range want {
			for j := range want[i] {
				if d := math.Abs(float64(got[i][j] - want[i][j])); d > 1e-4 {
					t.Fatalf("%s [%d][%d]: GPU %v, CPU %v", what, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	got, err := actors.Call(ctx, h, (*Policy).LogProbs, lpReq).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.LogProbs(ctx, lpReq)
	if err != nil {
		t.Fatal(err)
	}
	checkClose("log-probs", got, want)

	// Greedy sampling (KV-cache decoding on the device) gives the same text.
	sreq := SampleRequest{Prompts: prompts, K: 2, Seed: 7, Temperature: 1e-6}
	gs, err := actors.Call(ctx, h, (*Policy).Sample, sreq).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ref.Sample(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		for j := range cs[i] {
			if gs[i][j].Text != cs[i][j].Text {
				t.Fatalf("greedy sample [%d][%d]: GPU %q, CPU %q", i, j, gs[i][j].Text, cs[i][j].Text)
			}
		}
	}

	// One GRPO update on both, then the log-probs again.
	batch := []rl.Sample{
		{Prompt: prompts[0], Completion: rl.Completion{Tokens: comps[0].Tokens, LogProbs: want[0]}, Advantage: 1},
		{Prompt: prompts[1], Completion: rl.Completion{Tokens: comps[1].Tokens, LogProbs: want[1]}, Advantage: -1},
	}
	gst, err := actors.Call(ctx, h, (*Policy).Update, batch).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cst, err := ref.Update(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(gst.GradNorm - cst.GradNorm); d > 1e-4*math.Max(1, cst.GradNorm) {
		t.Fatalf("update grad norm: GPU %v, CPU %v", gst.GradNorm, cst.GradNorm)
	}
	if got, err = actors.Call(ctx, h, (*Policy).LogProbs, lpReq).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if want, err = ref.LogProbs(ctx, lpReq); err != nil {
		t.Fatal(err)
	}
	checkClose("log-probs after an update", got, want)
}
