// Command perfmodel writes docs/gpu-performance-model.md: the FLOPs, bytes
// and roofline times of the CUDA backend's kernels, and of whole training
// and decode steps of the Qwen2.5-0.5B and Qwen3-1.7B shapes, on an H100 SXM
// and an H200. It is a model from published peaks, not a measurement.
//
//	go run ./gpu/compute/cuda/internal/perfmodel            # rewrite the doc
//	go run ./gpu/compute/cuda/internal/perfmodel -o -       # print it
package main

import "math"

// device is one GPU's published peaks.
type device struct {
	Name string
	BF16 float64 // dense BF16 tensor-core FLOP/s
	FP32 float64 // FP32 SIMT FLOP/s (non-tensor)
	HBM  float64 // bytes/s
}

var devices = []device{
	{Name: "H100 SXM", BF16: 989e12, FP32: 67e12, HBM: 3.35e12},
	{Name: "H200", BF16: 989e12, FP32: 67e12, HBM: 4.8e12},
}

// shape is a decoder's config.json values.
type shape struct {
	Name                                                  string
	Hidden, Layers, Heads, KVHeads, HeadDim, Inter, Vocab int
	Tied                                                  bool
}

var shapes = []shape{
	// Qwen/Qwen2.5-0.5B config.json: q/k/v projections carry a bias.
	{Name: "Qwen2.5-0.5B", Hidden: 896, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, Inter: 4864, Vocab: 151936, Tied: true},
	// Qwen/Qwen3-1.7B config.json: head_dim 128, q/k norms.
	{Name: "Qwen3-1.7B", Hidden: 2048, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, Inter: 6144, Vocab: 151936, Tied: true},
}

// linear is one weight matrix (out × in) of a layer.
type linear struct {
	Name    string
	Out, In int
}

func (s shape) linears() []linear {
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	return []linear{
		{"q_proj", q, s.Hidden}, {"k_proj", kv, s.Hidden}, {"v_proj", kv, s.Hidden}, {"o_proj", s.Hidden, q},
		{"gate_proj", s.Inter, s.Hidden}, {"up_proj", s.Inter, s.Hidden}, {"down_proj", s.Hidden, s.Inter},
	}
}

// products is linears with gate_proj and up_proj as the one GEMM the
// backend runs them as where nothing needs them apart (no adapters on
// them): the pair stacked (2·Inter × Hidden), its input packed and read
// once, the packed SwiGLU reading the (n, 2·Inter) output.
func (s shape) products() []linear {
	var out []linear
	for _, l := range s.linears() {
		switch l.Name {
		case "gate_proj":
			out = append(out, linear{"gate_proj+up_proj (stacked)", 2 * s.Inter, s.Hidden})
		case "up_proj":
		default:
			out = append(out, l)
		}
	}
	return out
}

// layerParams is the weight count of one layer's linears.
func (s shape) layerParams() float64 {
	var n float64
	for _, l := range s.linears() {
		n += float64(l.Out) * float64(l.In)
	}
	return n
}

func (s shape) embedParams() float64 { return float64(s.Vocab) * float64(s.Hidden) }

// params counts all weights (norms and biases are under 0.1% and left out).
func (s shape) params() float64 {
	n := float64(s.Layers)*s.layerParams() + s.embedParams()
	if !s.Tied {
		n += s.embedParams()
	}
	return n
}

// cost is a kernel's or a step's work.
type cost struct {
	FLOPs float64
	Bytes float64 // HBM traffic, compulsory (each operand once)
	TC    bool    // FLOPs on tensor cores (else FP32 SIMT)
	Eff   float64 // design efficiency: fraction of the roofline the kernel is built to reach
}

// add sums two kernels tabulated as one row; the design efficiency is the
// lower of the two.
func (c cost) add(o cost) cost {
	return cost{FLOPs: c.FLOPs + o.FLOPs, Bytes: c.Bytes + o.Bytes, TC: c.TC || o.TC, Eff: math.Min(c.Eff, o.Eff)}
}

// roofline is max(compute time, memory time) at the device's peaks.
func (c cost) roofline(d device) float64 {
	peak := d.BF16
	if !c.TC {
		peak = d.FP32
	}
	return math.Max(c.FLOPs/peak, c.Bytes/d.HBM)
}

// bound names the limit that sets the roofline.
func (c cost) bound(d device) string {
	peak := d.BF16
	if !c.TC {
		peak = d.FP32
	}
	if c.FLOPs/peak >= c.Bytes/d.HBM {
		return "compute"
	}
	return "memory"
}

// Element sizes: the backend keeps activations and gradients in float32 and
// gives the tensor cores BF16 copies (weights stay resident in BF16).
const (
	f32  = 4
	bf16 = 2
)

// Design efficiencies (fractions of the roofline). Why each is what it is
// is written in the doc's prose; they are targets, not measurements.
const (
	effGEMM      = 0.50 // mma.sync m16n8k16 on Hopper: no wgmma, no TMA
	effGEMMSkiny = 0.70 // decode and LoRA products: memory bound, of HBM bandwidth
	effFlashFwd  = 0.35 // FlashAttention-2 class (mma.sync), the FA-3 paper's figure for FA-2 on H100
	effFlashBwd  = 0.30
	effDecode    = 0.70 // split-KV decode attention, of HBM bandwidth
	effFused     = 0.80 // one pass over its operands, vectorised, of HBM bandwidth
)

// gemm: C (M×N, float32) = A (M×K) · Bᵀ (N×K), operands BF16; the packing
// of a float32 operand to BF16 is counted with it (read 4, write 2 bytes).
func gemm(m, n, k int, packA, accumulate bool) cost {
	M, N, K := float64(m), float64(n), float64(k)
	b := bf16*(M*K+N*K) + f32*M*N
	if packA {
		b += (f32 + bf16) * M * K
	}
	if accumulate {
		b += f32 * M * N
	}
	// The design time is the larger of the two limits, each at its own
	// efficiency (the compute at effGEMM of the peak, the bytes at
	// effGEMMSkiny of the bandwidth; the H200's figures): far from the ridge
	// point one of the two, near it in between, so that stacking two
	// products into one (more FLOPs per byte) never models slower.
	f := 2 * M * N * K
	eff := math.Max(f/989e12, b/4.8e12) / math.Max(f/(989e12*effGEMM), b/(4.8e12*effGEMMSkiny))
	return cost{FLOPs: f, Bytes: b, TC: true, Eff: eff}
}

// attention is flash attention over B sequences of T tokens, causal.
func flashFwd(s shape, b, t int) cost {
	B, T, H, D, KV := float64(b), float64(t), float64(s.Heads), float64(s.HeadDim), float64(s.KVHeads)
	fl := 2 * B * H * T * T * D // QKᵀ and PV, 2·T²·D each, halved by the causal mask
	by := f32 * B * T * D * (2*H + 2*KV)
	by += f32 * B * H * T // log-sum-exp
	return cost{FLOPs: fl, Bytes: by, TC: true, Eff: effFlashFwd}
}

func flashBwd(s shape, b, t int) cost {
	B, T, H, D, KV := float64(b), float64(t), float64(s.Heads), float64(s.HeadDim), float64(s.KVHeads)
	fl := 5 * B * H * T * T * D // QKᵀ recomputed, dV, dP, dQ, dK: five T²·D products, causal halves
	by := f32 * B * T * D * (4*H + 4*KV)
	by += f32 * B * H * T
	return cost{FLOPs: fl, Bytes: by, TC: true, Eff: effFlashBwd}
}

// decodeAttn: one new token per row attends L cached positions (KV cache
// in float32, as the backend keeps it).
func decodeAttn(s shape, b, l int) cost {
	B, L, H, D, KV := float64(b), float64(l), float64(s.Heads), float64(s.HeadDim), float64(s.KVHeads)
	return cost{FLOPs: 4 * B * H * L * D, Bytes: f32 * B * L * 2 * KV * D, TC: false, Eff: effDecode}
}

// Fused memory-bound kernels over n rows.
func residualRMSNorm(s shape, n int) cost {
	x := float64(n) * float64(s.Hidden)
	return cost{FLOPs: 5 * x, Bytes: f32 * 4 * x, Eff: effFused} // read x, res; write res, out
}

func ropeQK(s shape, n int) cost {
	x := float64(n) * float64(s.HeadDim) * float64(s.Heads+s.KVHeads)
	return cost{FLOPs: 3 * x, Bytes: f32 * 2 * x, Eff: effFused}
}

func swiglu(s shape, n int) cost {
	x := float64(n) * float64(s.Inter)
	return cost{FLOPs: 6 * x, Bytes: f32 * 3 * x, Eff: effFused}
}

// crossEntropy reads the logits once forward and once backward, writing
// the gradient in place: no probabilities stored.
func crossEntropy(s shape, n int) cost {
	x := float64(n) * float64(s.Vocab)
	return cost{FLOPs: 8 * x, Bytes: f32 * 3 * x, Eff: effFused}
}

// adamw over p parameters: float32 master, grad, m, v read; master, m, v
// written; with copy, the pass that rounds the masters into the resident
// BF16 copies on the device reads each master again and writes its copy.
func adamw(p float64, copy bool) cost {
	b := (4*f32 + 3*f32) * p
	if copy {
		b += (f32 + bf16) * p
	}
	return cost{FLOPs: 14 * p, Bytes: b, Eff: effFused}
}
