package compute

// BF16Matmuler is an optional Backend capability for matmuls in BF16: for a
// frozen base kept in BF16, the matmuls read the weight as BF16 bits in host
// memory (PyTorch's [OC, C] layout, a Linear's weight) instead of a float32
// copy widened before every use, which halves the bytes a decode step reads;
// for mixed-precision training (float32 master weights, BF16 copies made
// after each update, as PyTorch's autocast computes), the weight gradient
// and the rounding of the master weights come too. Callers find it with As
// and fall back to widening into a float32 buffer and MatmulForward /
// MatmulBackward.
//
// Sums are float32. An implementation may round the float32 activations to
// BF16 before multiplying (as PyTorch's BF16 matmul does, and gpu/compute/cpu on
// CPUs with AVX512_BF16), so results agree with the widened float32 matmul
// to about BF16 precision of the activations, not bit for bit.
type BF16Matmuler interface {
	// MatmulForwardBF16: out[n,o] = sum_c inp[n,c]*weight[o,c] + bias[o].
	// out (N,OC), inp (N,C), weight len OC*C, bias (OC) may be nil.
	MatmulForwardBF16(out, inp Buffer, weight []uint16, bias Buffer, N, C, OC int)
	// MatmulBackwardInputBF16 accumulates dinp[n,c] += sum_o dout[n,o]*weight[o,c]
	// (the input gradient of MatmulForwardBF16; the weight is frozen).
	// dinp (N,C), dout (N,OC), weight len OC*C.
	MatmulBackwardInputBF16(dinp, dout Buffer, weight []uint16, N, C, OC int)
	// MatmulBackwardWeightBF16 accumulates the weight and bias gradients
	// of MatmulForwardBF16 with dout and inp rounded to BF16 (float32
	// sums): dweight[o,c] += sum_n dout[n,o]*inp[n,c], dbias[o] += sum_n
	// dout[n,o]. dweight (OC,C) and dbias (OC) may each be nil.
	MatmulBackwardWeightBF16(dweight, dbias, dout, inp Buffer, N, C, OC int)
	// GQAttentionForwardBF16 is Backend.GQAttentionForward with the
	// two products (q·kᵀ and att·v) on BF16-rounded operands and float32
	// sums, as PyTorch's autocast runs attention's matmuls; the softmax and
	// att stay float32.
	GQAttentionForwardBF16(out, att, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32)
	// RoundBF16 writes the first len(dst) elements of src rounded to BF16
	// (nearest, ties to even, as PyTorch's .to(torch.bfloat16)) into dst.
	RoundBF16(dst []uint16, src Buffer)
}

// BF16Resident is an optional capability of a BF16Matmuler whose products
// read their BF16 weights from copies it keeps in device memory, one per
// host slice it was given (a GPU's). It lets a model keep those copies
// current without moving weights across the bus: mixed precision rounds its
// float32 masters into them after every optimizer step, a frozen BF16 base
// gathers its embedding rows from them.
type BF16Resident interface {
	// RoundBF16Resident is RoundBF16 into the backend's copy of dst only:
	// the rounded values are what the BF16 products (and EmbedForwardBF16)
	// read for dst from then on, and dst's host memory is left as it was.
	// A caller that uses it passes dst to the backend's BF16 ops alone and
	// never reads dst on the host (RoundBF16 writes both).
	RoundBF16Resident(dst []uint16, src Buffer)
	// EmbedForwardBF16 is EmbedForward from a BF16 table (V,C) (bits, as in
	// MatmulForwardBF16's weight): out[n,:] = float32(table[inp[n],:]).
	EmbedForwardBF16(out Buffer, inp IntBuffer, table []uint16, N, C, V int)
}

// MixedMatmuler is an optional Backend capability: MatmulForward and
// MatmulBackward with both operands rounded to BF16 and float32 sums, for
// the products of weights kept as float32 buffers that train on the device
// (LoRA's A and B under mixed precision or on a BF16 base), as PyTorch's
// autocast runs every Linear. Results agree with the float32 ops to about
// BF16 precision of the operands, not bit for bit.
type MixedMatmuler interface {
	// MatmulForwardMixed is MatmulForward on BF16-rounded inp and weight.
	MatmulForwardMixed(out, inp, weight, bias Buffer, N, C, OC int)
	// MatmulBackwardMixed is MatmulBackward on BF16-rounded operands (dout,
	// weight for dinp; dout, inp for dweight); dbias sums dout in float32.
	MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight Buffer, N, C, OC int)
}
