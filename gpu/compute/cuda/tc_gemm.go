package cuda

import (
	"fmt"
	"unsafe"

	"troupe/gpu/compute"
)

// This file is the compute.BF16Matmuler capability on the tensor cores
// (kernels/tc_gemm.cu): every linear layer's forward and both backward
// products with BF16 operands and float32 sums, as PyTorch's autocast
// computes them. The float32 path (MatmulForward, MatmulBackward) stays the
// SIMT kernels of matmul.cu.
//
// Weights: a BF16 weight slice the model hands over (its frozen BF16 base,
// or the BF16 copy of its float32 masters that RoundBF16 makes) is uploaded
// once and stays on the device, keyed by the host slice (which the cache
// holds, so its address is never reused for other data). RoundBF16 rounds
// the masters on the device into that resident copy. A host slice changed
// behind the backend's back is not seen: call ForgetBF16Weights after
// rewriting one.

// tcConfig is one tile shape of tc_gemm.cu.
type tcConfig struct {
	kernel         string
	bm, bn, thread int
}

var tcConfigs = map[string]tcConfig{
	"128x128": {"tc_gemm_128x128", 128, 128, 256},
	"64x64":   {"tc_gemm_64x64", 64, 64, 128},
	"16x64":   {"tc_gemm_16x64", 16, 64, 128},
	"64x16":   {"tc_gemm_64x16", 64, 16, 128},
	"64x32":   {"tc_gemm_64x32", 64, 32, 128},
}

const tcBK = 32 // k per pipeline stage (tc_gemm.cu TC_BK)

// tcState is the tensor-core GEMMs' scratch and resident weights.
type tcState struct {
	pack  uintptr // bf16 scratch for packed operands
	packN int     // its size in bf16 values
	fs    uintptr // float scratch (GQAttentionForwardBF16's rounded q, k, v)
	fsN   int
	ws    uintptr // float workspace of the deterministic split-K's partial sums
	wsN   int
	// weights are the resident BF16 weights, few (one per kind of matrix).
	weights []*tcWeight
}

// tcWeight is one host BF16 slice resident on the device.
type tcWeight struct {
	host []uint16
	dev  uintptr // len(host) bf16 values, as on the host
	ver  int     // bumped when RoundBF16 rewrites it
	// packed are operands derived from a part of dev (a transposed copy for
	// the input gradient, a k-padded copy when C is not a multiple of 8).
	packed map[tcPackKey]*tcPacked
}

type tcPackKey struct {
	off, rows, cols int
	trans           bool
	// pair, off2: the second weight of a stacked operand (nil: none).
	pair *tcWeight
	off2 int
}

type tcPacked struct {
	dev       uintptr
	ver, ver2 int
}

func pad8(n int) int { return (n + 7) &^ 7 }

// tcGemm launches C (M,N) = A (M,Kp) · B (N,Kp)ᵀ with bf16 A and B, and the
// epilogue: C += when acc, plus bias[n] and res[m,n] where nonzero.
func (b *Backend) tcGemm(c, a, bm, bias, res uintptr, M, N, Kp int, acc bool) {
	b.tcGemm2(c, a, bm, 0, N, bias, res, M, N, Kp, acc)
}

// tcGemm2 is tcGemm with B's rows from nsplit on read from b2 (row n -
// nsplit): two weights stacked as one B.
func (b *Backend) tcGemm2(c, a, bm, b2 uintptr, nsplit int, bias, res uintptr, M, N, Kp int, acc bool) {
	if b.err != nil || M == 0 || N == 0 {
		return
	}
	cfg := tcConfigs[b.cfg.tcTile]
	if cfg.kernel == "" {
		switch {
		case M <= 16:
			cfg = tcConfigs["16x64"] // decode rows, LoRA's rank-r side
		case N <= 16:
			cfg = tcConfigs["64x16"] // LoRA's rank-r side as the product's N
		case N <= 32:
			cfg = tcConfigs["64x32"]
		case M >= 256 && N >= 256:
			cfg = tcConfigs["128x128"]
		default:
			cfg = tcConfigs["64x64"]
		}
	}
	gx, gy := ceilDiv(N, cfg.bn), ceilDiv(M, cfg.bm)
	if gy > 65535 {
		b.fail(compute.ShapeError("tcGemm", "M=%d: more than 65535 row tiles", M))
		return
	}
	kt := ceilDiv(Kp, tcBK)
	splits := 1
	if tiles := gx * gy; tiles < b.cfg.tcBlocks && kt >= 4 {
		splits = min(kt/2, ceilDiv(b.cfg.tcBlocks, tiles))
	}
	kps := ceilDiv(max(kt, 1), splits)
	splits = ceilDiv(max(kt, 1), kps)
	mode := int32(0)
	if acc {
		mode |= 1
	}
	grid, block := [3]uint32{uint32(gx), uint32(gy), uint32(splits)}, [3]uint32{uint32(cfg.thread), 1, 1}
	if splits > 1 && !b.cfg.tcAtomicSplitK {
		// Deterministic: each split stores its partial sums in its slice of
		// the workspace; one pass adds them in split order.
		ws := b.tcWorkspace(splits * M * N)
		if b.err != nil {
			return
		}
		b.launch(cfg.kernel, grid, block, ptr(ws), ptr(a), ptr(bm), ptr(b2), nsplit, ptr(0), ptr(0), M, N, Kp, kps, int(mode|4))
		b.launch("tc_splitk_reduce", b.elemGrid(M*N), b.elemBlock(), ptr(c), ptr(ws), ptr(bias), ptr(res), M, N, splits, int(mode))
		return
	}
	if splits > 1 {
		mode |= 2
		if !acc {
			if err := b.dev.Memset32(c, 0, M*N); err != nil {
				b.fail(fmt.Errorf("tcGemm: %w: %v", ErrDevice, err))
				return
			}
		}
	}
	b.launch(cfg.kernel, grid, block, ptr(c), ptr(a), ptr(bm), ptr(b2), nsplit, ptr(bias), ptr(res), M, N, Kp, kps, int(mode))
}

// tcWorkspace returns float workspace of at least n values for the
// deterministic split-K.
func (b *Backend) tcWorkspace(n int) uintptr {
	if b.err != nil {
		return 0
	}
	if n > maxElems {
		b.fail(compute.ShapeError("tcGemm", "split-K workspace of %d floats", n))
		return 0
	}
	if b.tc.wsN >= n {
		return b.tc.ws
	}
	if b.tc.ws != 0 {
		if err := b.dev.Sync(); err != nil { // queued GEMMs may still use it
			b.fail(fmt.Errorf("cuda: sync: %w", err))
			return 0
		}
		_ = b.dev.Free(b.tc.ws)
		b.tc.ws, b.tc.wsN = 0, 0
	}
	p, err := b.dev.Alloc(4 * n)
	if err != nil {
		b.fail(fmt.Errorf("cuda: split-K workspace of %d floats: %w: %v", n, ErrDevice, err))
		return 0
	}
	b.tc.ws, b.tc.wsN = p, n
	return p
}

// SetAtomicSplitK chooses how a GEMM split over k sums its splits: with
// atomicAdd into the output (on: one pass, but the order of the additions is
// the order the blocks finish, so results are not bit-reproducible), or, by
// default, through a workspace summed in split order by a second pass
// (bit-reproducible run to run).
func (b *Backend) SetAtomicSplitK(on bool) { b.cfg.tcAtomicSplitK = on }

// tcScratch returns bf16 scratch of at least n values.
func (b *Backend) tcScratch(n int) uintptr {
	if b.err != nil {
		return 0
	}
	if b.tc.packN >= n {
		return b.tc.pack
	}
	if b.tc.pack != 0 {
		if err := b.dev.Sync(); err != nil { // queued kernels may still read it
			b.fail(fmt.Errorf("cuda: sync: %w", err))
			return 0
		}
		_ = b.dev.Free(b.tc.pack)
		b.tc.pack, b.tc.packN = 0, 0
	}
	p, err := b.dev.Alloc(2 * n)
	if err != nil {
		b.fail(fmt.Errorf("cuda: GEMM scratch of %d bf16: %w: %v", n, ErrDevice, err))
		return 0
	}
	b.tc.pack, b.tc.packN = p, n
	return p
}

// packF32 writes dst (R,Kp) = bf16 of src (R,K), or of src (K,R) read
// transposed.
func (b *Backend) packF32(dst, src uintptr, R, K, Kp int, trans bool) {
	if trans {
		if ceilDiv(R, 32) > 65535 {
			b.fail(compute.ShapeError("tcGemm", "%d rows to transpose: more than 65535 tiles", R))
			return
		}
		b.launch("tc_pack_f32_t", [3]uint32{uint32(ceilDiv(Kp, 32)), uint32(ceilDiv(R, 32)), 1}, [3]uint32{32, 8, 1},
			ptr(dst), ptr(src), R, K, Kp)
		return
	}
	b.launch("tc_pack_f32", b.elemGrid(R*Kp), b.elemBlock(), ptr(dst), ptr(src), R, K, Kp, 0)
}

func (b *Backend) packBF16(dst, src uintptr, R, K, Kp int, trans bool) {
	b.launch("tc_pack_bf16", b.elemGrid(R*Kp), b.elemBlock(), ptr(dst), ptr(src), R, K, Kp, b2i(trans))
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// weight returns the resident device copy of host slice w (uploading it the
// first time) and w's offset in it, in values.
func (b *Backend) weight(op string, w []uint16) (*tcWeight, int) {
	if b.err != nil {
		return nil, 0
	}
	if len(w) == 0 {
		b.fail(compute.ShapeError(op, "empty weight"))
		return nil, 0
	}
	base := uintptr(unsafe.Pointer(&w[0]))
	for _, e := range b.tc.weights {
		lo := uintptr(unsafe.Pointer(&e.host[0]))
		if base >= lo && base+2*uintptr(len(w)) <= lo+2*uintptr(len(e.host)) {
			return e, int(base-lo) / 2
		}
	}
	e, err := b.newWeight(w)
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", op, err))
		return nil, 0
	}
	if err := b.dev.HtoD(e.dev, unsafe.Pointer(&w[0]), 2*len(w)); err != nil {
		b.fail(fmt.Errorf("%s: upload weight: %w: %v", op, ErrDevice, err))
		return nil, 0
	}
	return e, 0
}

func (b *Backend) newWeight(w []uint16) (*tcWeight, error) {
	p, err := b.dev.Alloc(2 * len(w))
	if err != nil {
		return nil, fmt.Errorf("resident weight of %d bf16: %w: %v", len(w), ErrDevice, err)
	}
	e := &tcWeight{host: w, dev: p, packed: map[tcPackKey]*tcPacked{}}
	b.tc.weights = append(b.tc.weights, e)
	return e, nil
}

// operand returns weight rows×cols at off of e as a GEMM operand with k
// contiguous: (rows, pad8(cols)) when !trans, (cols, pad8(rows)) when trans.
// Made on the device from the resident copy and kept until it changes.
func (b *Backend) operand(e *tcWeight, off, rows, cols int, trans bool) uintptr {
	if b.err != nil {
		return 0
	}
	if !trans && cols%8 == 0 && off%8 == 0 {
		return e.dev + uintptr(2*off) // already (rows, cols) with 16-byte aligned rows
	}
	k := tcPackKey{off: off, rows: rows, cols: cols, trans: trans}
	pk := e.packed[k]
	r, kk := rows, cols
	if trans {
		r, kk = cols, rows
	}
	if pk == nil {
		p, err := b.dev.Alloc(2 * r * pad8(kk))
		if err != nil {
			b.fail(fmt.Errorf("cuda: packed weight: %w: %v", ErrDevice, err))
			return 0
		}
		pk = &tcPacked{dev: p, ver: -1}
		e.packed[k] = pk
	}
	if pk.ver != e.ver {
		b.packBF16(pk.dev, e.dev+uintptr(2*off), r, kk, pad8(kk), trans)
		pk.ver = e.ver
	}
	return pk.dev
}

// pairOperandT returns [w1; w2]ᵀ (cols, pad8(2·rows)) for weights rows×cols
// at off1 of e1 and off2 of e2: the input gradient's operand of a stacked
// pair, made on the device and kept (with e1) until either changes.
func (b *Backend) pairOperandT(e1 *tcWeight, off1 int, e2 *tcWeight, off2, rows, cols int) uintptr {
	if b.err != nil {
		return 0
	}
	k := tcPackKey{off: off1, rows: rows, cols: cols, trans: true, pair: e2, off2: off2}
	pk := e1.packed[k]
	Kp := pad8(2 * rows)
	if pk == nil {
		p, err := b.dev.Alloc(2 * cols * Kp)
		if err != nil {
			b.fail(fmt.Errorf("cuda: packed weight pair: %w: %v", ErrDevice, err))
			return 0
		}
		pk = &tcPacked{dev: p, ver: -1, ver2: -1}
		e1.packed[k] = pk
	}
	if pk.ver != e1.ver || pk.ver2 != e2.ver {
		b.launch("tc_pack_bf16_pair_t", b.elemGrid(cols*Kp), b.elemBlock(),
			ptr(pk.dev), ptr(e1.dev+uintptr(2*off1)), ptr(e2.dev+uintptr(2*off2)), cols, rows, Kp)
		pk.ver, pk.ver2 = e1.ver, e2.ver
	}
	return pk.dev
}

// ForgetBF16Weights drops every resident BF16 weight (the next product
// uploads its weight again): for a caller that rewrote a host slice it had
// passed before.
func (b *Backend) ForgetBF16Weights() {
	if b.tc.weights != nil {
		_ = b.dev.Sync() // queued products may still read them
	}
	for _, e := range b.tc.weights {
		_ = b.dev.Free(e.dev)
		for _, p := range e.packed {
			_ = b.dev.Free(p.dev)
		}
	}
	b.tc.weights = nil
}

// dropOverlapping frees the resident weights overlapping the n values of
// host memory at base.
func (b *Backend) dropOverlapping(base uintptr, n int) {
	keep := b.tc.weights[:0]
	synced := false
	for _, e := range b.tc.weights {
		lo := uintptr(unsafe.Pointer(&e.host[0]))
		if lo < base+2*uintptr(n) && base < lo+2*uintptr(len(e.host)) {
			if !synced {
				_ = b.dev.Sync() // queued products may still read it
				synced = true
			}
			_ = b.dev.Free(e.dev)
			for _, p := range e.packed {
				_ = b.dev.Free(p.dev)
			}
			continue
		}
		keep = append(keep, e)
	}
	clear(b.tc.weights[len(keep):])
	b.tc.weights = keep
}

func (b *Backend) freeTC() {
	b.ForgetBF16Weights()
	for _, p := range []uintptr{b.tc.pack, b.tc.fs, b.tc.ws} {
		if p != 0 {
			_ = b.dev.Free(p)
		}
	}
	b.tc = tcState{}
}

var _ compute.BF16Matmuler = (*Backend)(nil)

// MatmulForwardBF16 is compute.BF16Matmuler's forward: out (N,OC) = inp
// (N,C) rounded to bf16 · weight (OC,C, bf16 bits)ᵀ + bias, on the tensor
// cores.
func (b *Backend) MatmulForwardBF16(out, inp compute.Buffer, weight []uint16, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in, bi := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.opt(op, "bias", bias, OC)
	if b.err == nil && len(weight) != OC*C {
		b.fail(compute.ShapeError(op, "weight has %d values, want OC*C = %d", len(weight), OC*C))
	}
	e, off := b.weight(op, weight)
	if b.err != nil || N*OC == 0 {
		return
	}
	Cp := pad8(C)
	a := b.tcScratch(N * Cp)
	w := b.operand(e, off, OC, C, false)
	if b.err != nil {
		return
	}
	b.packF32(a, in, N, C, Cp, false)
	b.tcGemm(o, a, w, bi, 0, N, OC, Cp, false)
}

// MatmulForwardBF16Residual is MatmulForwardBF16 with the residual add
// fused into the epilogue: out = res + inp·weightᵀ + bias (an attention
// output or MLP down projection added onto the residual stream in one
// pass). res (N,OC) may alias out; bias may be nil.
func (b *Backend) MatmulForwardBF16Residual(out, inp compute.Buffer, weight []uint16, bias, res compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardBF16Residual"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in, bi := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.opt(op, "bias", bias, OC)
	r := b.f(op, "res", res, N*OC)
	if b.err == nil && len(weight) != OC*C {
		b.fail(compute.ShapeError(op, "weight has %d values, want OC*C = %d", len(weight), OC*C))
	}
	e, off := b.weight(op, weight)
	if b.err != nil || N*OC == 0 {
		return
	}
	Cp := pad8(C)
	a := b.tcScratch(N * Cp)
	w := b.operand(e, off, OC, C, false)
	if b.err != nil {
		return
	}
	b.packF32(a, in, N, C, Cp, false)
	if r == o {
		// Each element reads its residual and writes it back in one thread,
		// except under split-K, where accumulating into out is the same sum.
		b.tcGemm(o, a, w, bi, 0, N, OC, Cp, true)
		return
	}
	b.tcGemm(o, a, w, bi, r, N, OC, Cp, false)
}

// MatmulBackwardInputBF16: dinp (N,C) += bf16(dout) (N,OC) · weight (OC,C).
func (b *Backend) MatmulBackwardInputBF16(dinp, dout compute.Buffer, weight []uint16, N, C, OC int) {
	const op = "MatmulBackwardInputBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	di, do := b.f(op, "dinp", dinp, N*C), b.f(op, "dout", dout, N*OC)
	if b.err == nil && len(weight) != OC*C {
		b.fail(compute.ShapeError(op, "weight has %d values, want OC*C = %d", len(weight), OC*C))
	}
	e, off := b.weight(op, weight)
	if b.err != nil || N*C == 0 {
		return
	}
	OCp := pad8(OC)
	a := b.tcScratch(N * OCp)
	wt := b.operand(e, off, OC, C, true) // (C, OCp)
	if b.err != nil {
		return
	}
	b.packF32(a, do, N, OC, OCp, false)
	b.tcGemm(di, a, wt, 0, 0, N, C, OCp, true)
}

// MatmulBackwardWeightBF16: dweight (OC,C) += bf16(dout)ᵀ · bf16(inp), dbias
// (OC) += column sums of dout; either may be nil.
func (b *Backend) MatmulBackwardWeightBF16(dweight, dbias, dout, inp compute.Buffer, N, C, OC int) {
	const op = "MatmulBackwardWeightBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	dw, db := b.opt(op, "dweight", dweight, OC*C), b.opt(op, "dbias", dbias, OC)
	do, in := b.f(op, "dout", dout, N*OC), b.f(op, "inp", inp, N*C)
	if b.err != nil || N == 0 {
		return
	}
	if dw != 0 && OC*C > 0 {
		Np := pad8(N)
		s := b.tcScratch((OC + C) * Np)
		if b.err != nil {
			return
		}
		a, bt := s, s+uintptr(2*OC*Np)
		b.packF32(a, do, OC, N, Np, true) // doutᵀ (OC, Np)
		b.packF32(bt, in, C, N, Np, true) // inpᵀ (C, Np)
		b.tcGemm(dw, a, bt, 0, 0, OC, C, Np, true)
	}
	if db != 0 && OC > 0 {
		b.launch("matmul_backward_bias", [3]uint32{uint32(ceilDiv(OC, 32)), 1, 1}, [3]uint32{32, 8, 1},
			ptr(db), ptr(do), N, OC)
	}
}

// RoundBF16 writes dst = bf16(src[:len(dst)]) (nearest even): rounded on the
// device into dst's resident copy (the one the products read), then copied
// to dst, as the contract asks.
func (b *Backend) RoundBF16(dst []uint16, src compute.Buffer) {
	const op = "RoundBF16"
	e, off := b.roundResident(op, dst, src)
	if e == nil || b.Sync() != nil {
		return
	}
	if err := b.dev.DtoH(unsafe.Pointer(&dst[0]), e.dev+uintptr(2*off), 2*len(dst)); err != nil {
		b.fail(fmt.Errorf("%s: %w: %v", op, ErrDevice, err))
	}
}

var _ compute.BF16Resident = (*Backend)(nil)

// RoundBF16Resident implements compute.BF16Resident: RoundBF16 without the
// copy to the host, so a mixed-precision update moves no weight over the
// bus (the masters are rounded where they are, into the copy the products
// read).
func (b *Backend) RoundBF16Resident(dst []uint16, src compute.Buffer) {
	b.roundResident("RoundBF16Resident", dst, src)
}

// roundResident rounds src into the resident copy of dst (made now if dst is
// not inside one) and returns that copy and dst's offset in it; nil after an
// error or for an empty dst.
func (b *Backend) roundResident(op string, dst []uint16, src compute.Buffer) (*tcWeight, int) {
	s := b.f(op, "src", src, len(dst))
	if b.err != nil || len(dst) == 0 {
		return nil, 0
	}
	var e *tcWeight
	off := 0
	base := uintptr(unsafe.Pointer(&dst[0]))
	for _, w := range b.tc.weights {
		lo := uintptr(unsafe.Pointer(&w.host[0]))
		if base >= lo && base+2*uintptr(len(dst)) <= lo+2*uintptr(len(w.host)) {
			e, off = w, int(base-lo)/2
			break
		}
	}
	if e == nil {
		// Copies of parts of dst made before (a layer used before the
		// whole kind was rounded) would go stale: drop them.
		b.dropOverlapping(base, len(dst))
		var err error
		if e, err = b.newWeight(dst); err != nil {
			b.fail(fmt.Errorf("%s: %w", op, err))
			return nil, 0
		}
	}
	b.launch("float_to_bf16_kernel", b.elemGrid(len(dst)), b.elemBlock(), ptr(e.dev+uintptr(2*off)), ptr(s), len(dst))
	e.ver++
	return e, off
}

// EmbedForwardBF16 implements compute.BF16Resident (kernel tc_embed_bf16):
// the rows are gathered from table's resident copy, uploaded on first use.
func (b *Backend) EmbedForwardBF16(out compute.Buffer, inp compute.IntBuffer, table []uint16, N, C, V int) {
	const op = "EmbedForwardBF16"
	if !b.dims(op, N, C) || !b.dims(op, V, C) {
		return
	}
	o, in := b.f(op, "out", out, N*C), b.ints(op, "inp", inp, N)
	if b.err == nil && len(table) != V*C {
		b.fail(compute.ShapeError(op, "table has %d values, want V*C = %d", len(table), V*C))
	}
	e, off := b.weight(op, table)
	if b.err != nil || N*C == 0 {
		return
	}
	b.launch("tc_embed_bf16", [3]uint32{uint32(ceilDiv(N*C, b.cfg.elemBlock)), 1, 1}, b.elemBlock(),
		ptr(o), ptr(in), ptr(e.dev+uintptr(2*off)), N, C, V, ptr(b.errFlag))
}

var _ compute.MixedMatmuler = (*Backend)(nil)

// MatmulForwardMixed implements compute.MixedMatmuler on the tensor cores:
// inp and weight are rounded to bf16 into scratch as they are packed (a
// trained float32 weight, LoRA's A or B, changes every step, so nothing is
// kept), out = inp·weightᵀ + bias.
func (b *Backend) MatmulForwardMixed(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardMixed"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in, w, bi := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.f(op, "weight", weight, OC*C), b.opt(op, "bias", bias, OC)
	if b.err != nil || N*OC == 0 {
		return
	}
	Cp := pad8(C)
	s := b.tcScratch((N + OC) * Cp)
	if b.err != nil {
		return
	}
	a, bm := s, s+uintptr(2*N*Cp)
	b.packF32(a, in, N, C, Cp, false)
	b.packF32(bm, w, OC, C, Cp, false)
	b.tcGemm(o, a, bm, bi, 0, N, OC, Cp, false)
}

// MatmulBackwardMixed implements compute.MixedMatmuler: dinp (N,C) +=
// bf16(dout)·bf16(weight), dweight (OC,C) += bf16(dout)ᵀ·bf16(inp), dbias
// (OC) += column sums of dout; each of dinp, dweight, dbias may be nil.
func (b *Backend) MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	const op = "MatmulBackwardMixed"
	if !b.dims(op, N, C, OC) {
		return
	}
	di := b.opt(op, "dinp", dinp, N*C)
	do := b.f(op, "dout", dout, N*OC)
	var w uintptr
	if di != 0 {
		w = b.f(op, "weight", weight, OC*C)
	}
	if b.err != nil || N == 0 {
		return
	}
	if di != 0 && N*C > 0 {
		OCp := pad8(OC)
		s := b.tcScratch((N + C) * OCp)
		if b.err != nil {
			return
		}
		a, wt := s, s+uintptr(2*N*OCp)
		b.packF32(a, do, N, OC, OCp, false) // dout (N, OCp)
		b.packF32(wt, w, C, OC, OCp, true)  // weightᵀ (C, OCp)
		b.tcGemm(di, a, wt, 0, 0, N, C, OCp, true)
	}
	if dweight != nil || dbias != nil {
		b.MatmulBackwardWeightBF16(dweight, dbias, dout, inp, N, C, OC)
	}
}

// GQAttentionForwardBF16 is GQAttentionForward on q, k and v rounded to
// BF16 (kernel tc_round_bf16 into scratch), with float32 sums and softmax.
func (b *Backend) GQAttentionForwardBF16(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionForwardBF16"
	if !b.dims(op, B, T, NH, KVH, HD) {
		return
	}
	nq, nk := B*T*NH*HD, B*T*KVH*HD
	rq, rk, rv := b.roundQKV(op, q, k, v, nq, nk)
	if b.err != nil {
		return
	}
	view := func(p uintptr, m int) *Buffer {
		return &Buffer{owner: b, root: &allocation{ptr: p}, ptr: p, n: m}
	}
	b.GQAttentionForward(out, att, view(rq, nq), view(rk, nk), view(rv, nk), B, T, NH, KVH, HD, scale)
}

// roundQKV rounds q (nq floats), k and v (nk each) to BF16 values (kernel
// tc_round_bf16) into the float scratch, grown on demand, and returns the
// three rounded copies.
func (b *Backend) roundQKV(op string, q, k, v compute.Buffer, nq, nk int) (rq, rk, rv uintptr) {
	qp, kp, vp := b.f(op, "q", q, nq), b.f(op, "k", k, nk), b.f(op, "v", v, nk)
	if b.err != nil {
		return 0, 0, 0
	}
	n := nq + 2*nk
	if b.tc.fsN < n {
		if b.tc.fs != 0 {
			if err := b.dev.Sync(); err != nil {
				b.fail(fmt.Errorf("cuda: sync: %w", err))
				return 0, 0, 0
			}
			_ = b.dev.Free(b.tc.fs)
			b.tc.fs, b.tc.fsN = 0, 0
		}
		p, err := b.dev.Alloc(4 * n)
		if err != nil {
			b.fail(fmt.Errorf("%s: scratch: %w: %v", op, ErrDevice, err))
			return 0, 0, 0
		}
		b.tc.fs, b.tc.fsN = p, n
	}
	rq, rk, rv = b.tc.fs, b.tc.fs+uintptr(4*nq), b.tc.fs+uintptr(4*(nq+nk))
	for _, c := range []struct {
		d, s uintptr
		n    int
	}{{rq, qp, nq}, {rk, kp, nk}, {rv, vp, nk}} {
		if c.n > 0 {
			b.launch("tc_round_bf16", b.elemGrid(c.n), b.elemBlock(), ptr(c.d), ptr(c.s), c.n)
		}
	}
	return rq, rk, rv
}

var _ compute.FlashAttenderBF16 = (*Backend)(nil)

// FlashAttentionForwardBF16 implements compute.FlashAttenderBF16: q, k, v
// rounded into scratch, then the flash forward (lse kept, no T×T matrix).
func (b *Backend) FlashAttentionForwardBF16(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "FlashAttentionForwardBF16"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) {
		return
	}
	o, l := b.f(op, "out", out, B*T*NH*HD), b.f(op, "lse", lse, B*NH*T)
	rq, rk, rv := b.roundQKV(op, q, k, v, B*T*NH*HD, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.flashForward(o, l, rq, rk, rv, B, T, NH, KVH, HD, scale)
}

// FlashAttentionBackwardBF16 implements compute.FlashAttenderBF16: q, k, v
// rounded again (the forward's operands), then the flash backward.
func (b *Backend) FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "FlashAttentionBackwardBF16"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) {
		return
	}
	dqd, dkd, dvd := b.f(op, "dq", dq, B*T*NH*HD), b.f(op, "dk", dk, B*T*KVH*HD), b.f(op, "dv", dv, B*T*KVH*HD)
	do, o, l := b.f(op, "dout", dout, B*T*NH*HD), b.f(op, "out", out, B*T*NH*HD), b.f(op, "lse", lse, B*NH*T)
	rq, rk, rv := b.roundQKV(op, q, k, v, B*T*NH*HD, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.flashBackward(dqd, dkd, dvd, do, rq, rk, rv, o, l, B, T, NH, KVH, HD, scale)
}

var _ compute.StackedBF16Matmuler = (*Backend)(nil)

// stackedWeights checks and finds the resident copies of a stacked pair.
func (b *Backend) stackedWeights(op string, w1, w2 []uint16, C, OC int) (e1 *tcWeight, off1 int, e2 *tcWeight, off2 int) {
	if b.err == nil && (len(w1) != OC*C || len(w2) != OC*C) {
		b.fail(compute.ShapeError(op, "weights have %d and %d values, want OC*C = %d", len(w1), len(w2), OC*C))
	}
	e1, off1 = b.weight(op, w1)
	e2, off2 = b.weight(op, w2)
	return
}

// MatmulForwardBF16Stacked implements compute.StackedBF16Matmuler: one GEMM
// over the two resident weights as one B of 2·OC rows (tc_gemm's B2), the
// input packed once.
func (b *Backend) MatmulForwardBF16Stacked(out, inp compute.Buffer, w1, w2 []uint16, N, C, OC int) {
	const op = "MatmulForwardBF16Stacked"
	if !b.dims(op, N, C, 2*OC) {
		return
	}
	o, in := b.f(op, "out", out, N*2*OC), b.f(op, "inp", inp, N*C)
	e1, off1, e2, off2 := b.stackedWeights(op, w1, w2, C, OC)
	if b.err != nil || N*OC == 0 {
		return
	}
	Cp := pad8(C)
	a := b.tcScratch(N * Cp)
	p1, p2 := b.operand(e1, off1, OC, C, false), b.operand(e2, off2, OC, C, false)
	if b.err != nil {
		return
	}
	b.packF32(a, in, N, C, Cp, false)
	b.tcGemm2(o, a, p1, p2, OC, 0, 0, N, 2*OC, Cp, false)
}

// MatmulBackwardInputBF16Stacked implements compute.StackedBF16Matmuler:
// dinp (N,C) += bf16(dout) (N,2·OC) · [w1; w2], one GEMM with k = 2·OC over
// the pair's transposed stacked copy.
func (b *Backend) MatmulBackwardInputBF16Stacked(dinp, dout compute.Buffer, w1, w2 []uint16, N, C, OC int) {
	const op = "MatmulBackwardInputBF16Stacked"
	if !b.dims(op, N, C, 2*OC) {
		return
	}
	di, do := b.f(op, "dinp", dinp, N*C), b.f(op, "dout", dout, N*2*OC)
	e1, off1, e2, off2 := b.stackedWeights(op, w1, w2, C, OC)
	if b.err != nil || N*C == 0 {
		return
	}
	Kp := pad8(2 * OC)
	a := b.tcScratch(N * Kp)
	wt := b.pairOperandT(e1, off1, e2, off2, OC, C) // (C, Kp)
	if b.err != nil {
		return
	}
	b.packF32(a, do, N, 2*OC, Kp, false)
	b.tcGemm(di, a, wt, 0, 0, N, C, Kp, true)
}

// MatmulBackwardWeightBF16Stacked implements compute.StackedBF16Matmuler:
// doutᵀ (2·OC, N) and inpᵀ are packed once; the first OC rows of the one
// make dw1's GEMM, the others dw2's.
func (b *Backend) MatmulBackwardWeightBF16Stacked(dw1, dw2, dout, inp compute.Buffer, N, C, OC int) {
	const op = "MatmulBackwardWeightBF16Stacked"
	if !b.dims(op, N, C, 2*OC) {
		return
	}
	g1, g2 := b.opt(op, "dw1", dw1, OC*C), b.opt(op, "dw2", dw2, OC*C)
	do, in := b.f(op, "dout", dout, N*2*OC), b.f(op, "inp", inp, N*C)
	if b.err != nil || N == 0 || OC*C == 0 || (g1 == 0 && g2 == 0) {
		return
	}
	Np := pad8(N)
	s := b.tcScratch((2*OC + C) * Np)
	if b.err != nil {
		return
	}
	a, bt := s, s+uintptr(2*2*OC*Np)
	b.packF32(a, do, 2*OC, N, Np, true) // doutᵀ (2·OC, Np)
	b.packF32(bt, in, C, N, Np, true)   // inpᵀ (C, Np)
	if g1 != 0 {
		b.tcGemm(g1, a, bt, 0, 0, OC, C, Np, true)
	}
	if g2 != 0 {
		b.tcGemm(g2, a+uintptr(2*OC*Np), bt, 0, 0, OC, C, Np, true)
	}
}
