//go:build cudaemu && !cudagpu

package cuda

import (
	"testing"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// attCounter counts the attention ops the policy calls: flash attention
// and the contract's GQAttentionForward launch the same kernel, so only the
// call tells which one ran. Embedding *Backend keeps every capability
// visible to compute.As.
type attCounter struct {
	*Backend
	n map[string]int
}

func (c *attCounter) GQAttentionForward(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["GQAttentionForward"]++
	c.Backend.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (c *attCounter) GQAttentionBackward(dq, dk, dv, dout, q, k, v, att compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["GQAttentionBackward"]++
	c.Backend.GQAttentionBackward(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, HD, scale)
}

func (c *attCounter) FlashAttentionForward(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["FlashAttentionForward"]++
	c.Backend.FlashAttentionForward(out, lse, q, k, v, B, T, NH, KVH, HD, scale)
}

func (c *attCounter) FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	c.n["FlashAttentionBackward"]++
	c.Backend.FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, KVH, HD, scale)
}

// tinyLlamaPlain is a Llama-family shape without Qwen3's head norm, so
// RoPE goes through RopeQKForward: Qwen2 (q/k/v biases, tied head),
// multi-query attention (4 query heads on 1 kv head), head size 8.
func tinyLlamaPlain(t *testing.T) hf.Config {
	t.Helper()
	c, err := hf.NewConfig(hf.Qwen2)
	if err != nil {
		t.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 11, 16, 20, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 1, 8
	c.MaxPositionEmbeddings = 12
	c.RopeTheta = 100
	c.TieWordEmbeddings = true
	c.SlidingWindow, c.UseSlidingWindow, c.LayerTypes = 0, false, nil
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEmuLlamaFused runs the policy on the emulated CUDA backend, which
// has the fused capabilities of gpu/compute/fused.go: a cross-entropy and
// a log-prob-gradient step, log-probs and generation agree with the CPU
// reference (checkLlamaStepsOf), and the launches show the policy took
// every fused op it uses (flash attention with the log-sum-exp, the fused
// residual norms, RoPE on q and k at once, after the head norm for Qwen3,
// the LSE loss heads, one AdamW launch a step) and none of the ops they
// replace. PackedSwiGLU is not used by the policy.
func TestEmuLlamaFused(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  hf.Config
		rope string // the forward's RoPE kernel
	}{
		{"qwen3", tinyLlama(t), "head_norm_rope_forward"},
		{"qwen2-mqa", tinyLlamaPlain(t), "rope_qk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, dev := newEmuBackend(t)
			c := &attCounter{Backend: b, n: map[string]int{}}
			checkLlamaStepsOf(t, c, tc.cfg)
			if t.Failed() {
				return
			}
			// Two training steps (forward, backward, AdamW), a forward for
			// the log-probs, a prefill (one group of rows, whose last
			// block stops after k and v) and D blocks of decoding (the
			// prefill's last block at the last positions, then every
			// block a step), one cache store each.
			L, D := tc.cfg.NumHiddenLayers, dev.launchN["flash_decode_store"]
			if D < 1+L {
				t.Fatalf("%d decode blocks, want at least %d", D, 1+L)
			}
			for op, want := range map[string]int{
				"FlashAttentionForward": 3*L + L - 1, "FlashAttentionBackward": 2 * L,
				"GQAttentionForward": 0, "GQAttentionBackward": 0,
			} {
				if got := c.n[op]; got != want {
					t.Errorf("%s called %d times, want %d", op, got, want)
				}
			}
			for kernel, want := range map[string]int{
				"adamw_multi": 2, "adamw_update": 0,
				"lse_loss_forward": 3, "lse_loss_backward": 2,
				"crossentropy_forward": 0, "crossentropy_backward": 0,
				"logprob_forward": 0, "logprob_backward": 0,
				// the MLP's norm and the next block's input norm (the
				// final norm after the last block) a block, two a block
				// but the last in the prefill, the MLP's in decoding
				"residual_rmsnorm_forward": 3*2*L + 2*(L-1) + D,
				"rope_backward":            0, "rope_qk": 2 * L, // the backwards
				"rope_forward": 0,
			} {
				if tc.rope == "rope_qk" && kernel == "rope_qk" {
					want += 3*L + L - 1 + D // and the forwards
				}
				if tc.rope == "rope_qk" && kernel == "rope_forward" {
					want = 1 // the prefill's last block rotates k alone
				}
				if got := dev.launchN[kernel]; got != want {
					t.Errorf("kernel %s launched %d times, want %d", kernel, got, want)
				}
			}
			if tc.rope == "head_norm_rope_forward" {
				// q and k of 3 full forwards and decoding, k alone in the
				// prefill's last block
				if got, want := dev.launchN[tc.rope], 2*4*L-1+2*D; got != want {
					t.Errorf("kernel %s launched %d times, want %d", tc.rope, got, want)
				}
			}
		})
	}
}

// TestEmuLlamaFlashMemory checks the policy's attention state on CUDA: a
// training step keeps each layer's log-sum-exp (B,NH,T), not the
// (B,NH,T,T) probabilities the CPU reference keeps, and the LSE loss head
// writes its gradient over the logits instead of an (R,V) buffer beside
// them. Everything else the two models hold is the same size.
func TestEmuLlamaFlashMemory(t *testing.T) {
	b, _ := newEmuBackend(t)
	cfg := tinyLlama(t)
	batch := policy.Batch{Tokens: make([][]int32, 3)}
	const T = 11
	for i := range batch.Tokens {
		for j := range T + 1 {
			batch.Tokens[i] = append(batch.Tokens[i], int32((i+3*j)%cfg.VocabSize))
		}
	}
	mem := func(be compute.Backend) int {
		m, err := policy.NewLlama(be, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatalf("train step on %s: %v", be.Name(), err)
		}
		return m.MemoryBytes()
	}
	gpu, ref := mem(b), mem(cpu.NewReference())
	B, L, NH, V := len(batch.Tokens), cfg.NumHiddenLayers, cfg.NumAttentionHeads, cfg.VocabSize
	att := 4 * L * B * NH * T * (T - 1) // the probabilities less the log-sum-exp
	head := 4*B*T*V - 4*B*T             // dlogits (one chunk of all rows) less lse
	if ref-gpu != att+head {
		t.Errorf("CUDA model holds %d bytes, the CPU reference %d: %d less, want %d (attention %d, head %d)",
			gpu, ref, ref-gpu, att+head, att, head)
	}
}
