package cuda

import "fmt"

// Flash attention (kernels/flash_attn.cu): the grouped-query attention ops
// run tiled with an online softmax, so no T×T matrix is written or read.
// The forward saves each row's log-sum-exp (B,NH,T) at the start of the
// contract's att buffer instead of the probabilities (the buffer keeps the
// contract's (B,NH,T,T) size so callers allocate as for any backend); the
// backward recomputes the probabilities from q, k and it. Where the buffer
// has room (T > HD), a copy of out follows, so the backward computes
// D = rowsum(dO∘O) directly instead of in an extra pass over the keys. The decode step
// splits long caches over several blocks and combines their partial
// results.

// Fixed by kernels/flash_attn.cu (FA_BR, FA_BC, FA_THREADS, FA_MAX_HD).
const (
	faRows    = 16
	faCols    = 16
	faThreads = 128
	faMaxHD   = 128
)

var faBlock = [3]uint32{faThreads, 1, 1}

// faGrid is the grid of the row-tiled kernels: tiles of faRows rows of the
// flattened (position, head-of-group) sequence per (batch row, kv head).
func faGrid(B, T, NH, KVH int) [3]uint32 {
	return [3]uint32{uint32(ceilDiv(T*(NH/KVH), faRows)), uint32(B * KVH), 1}
}

// flashForward launches flash_attn_forward: out and lse (B,NH,T).
func (b *Backend) flashForward(out, lse, q, k, v uintptr, B, T, NH, KVH, HD int, scale float32) {
	b.launch("flash_attn_forward", faGrid(B, T, NH, KVH), faBlock,
		ptr(out), ptr(lse), ptr(q), ptr(k), ptr(v), B, T, NH, KVH, HD, scale)
}

// attSavesOut reports whether the contract's att (B,NH,T,T) holds the
// log-sum-exp (B,NH,T) and a copy of out (B,T,NH,HD): T*T >= T*(1+HD).
func attSavesOut(T, HD int) bool { return T > HD }

// attForward is GQAttentionForward's body: flash forward with the
// log-sum-exp at att[0:B*NH*T], then out copied behind it if it fits.
func (b *Backend) attForward(out, att, q, k, v uintptr, B, T, NH, KVH, HD int, scale float32) {
	b.flashForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
	if attSavesOut(T, HD) && b.err == nil {
		if err := b.dev.DtoD(att+uintptr(4*B*NH*T), out, 4*B*T*NH*HD); err != nil {
			b.fail(fmt.Errorf("GQAttentionForward: save out: %w: %v", ErrDevice, err))
		}
	}
}

// attBackward is GQAttentionBackward's body over what attForward saved.
func (b *Backend) attBackward(dq, dk, dv, dout, q, k, v, att uintptr, B, T, NH, KVH, HD int, scale float32) {
	var out uintptr
	if attSavesOut(T, HD) {
		out = att + uintptr(4*B*NH*T)
	}
	b.flashBackward(dq, dk, dv, dout, q, k, v, out, att, B, T, NH, KVH, HD, scale)
}

// flashBackward accumulates dq, dk, dv. With out != 0, D = rowsum(dO∘O) is
// computed from it first (flash_attn_backward_dot); without, the dq kernel
// derives D as rowsum(P∘dP) in an extra pass over the keys. D lives in the
// attention scratch.
func (b *Backend) flashBackward(dq, dk, dv, dout, q, k, v, out, lse uintptr, B, T, NH, KVH, HD int, scale float32) {
	D := b.ensureScratch(B * NH * T)
	if b.err != nil {
		return
	}
	computeD := 1
	if out != 0 {
		computeD = 0
		b.launch("flash_attn_backward_dot", [3]uint32{uint32(ceilDiv(B*T*NH, 4)), 1, 1}, [3]uint32{128, 1, 1},
			ptr(D), ptr(dout), ptr(out), B, T, NH, HD)
	}
	b.launch("flash_attn_backward_dq", faGrid(B, T, NH, KVH), faBlock,
		ptr(dq), ptr(D), ptr(dout), ptr(q), ptr(k), ptr(v), ptr(lse), B, T, NH, KVH, HD, scale, computeD)
	b.launch("flash_attn_backward_dkv", [3]uint32{uint32(ceilDiv(T, faCols)), uint32(B * KVH), 1}, faBlock,
		ptr(dk), ptr(dv), ptr(dout), ptr(q), ptr(k), ptr(v), ptr(lse), ptr(D), B, T, NH, KVH, HD, scale)
}

// decodeChunk is the number of cache positions one block of the split-KV
// decode attends: enough splits that B*KVH*splits blocks fill the device
// (about two waves of 132 SMs) while each split keeps at least 64 positions,
// a multiple of the key tile. launchConfig.decodeChunk overrides it (the
// emulator's tests use small chunks to exercise the combine).
func (b *Backend) decodeChunk(B, maxT, NH, KVH int) int {
	if c := b.cfg.decodeChunk; c > 0 {
		return c
	}
	blocks := B * KVH * ceilDiv(NH/KVH, faRows)
	want := max(1, ceilDiv(264, blocks))
	c := max(64, ceilDiv(maxT, want))
	return ceilDiv(c, faCols) * faCols
}

// flashDecode stores the new k, v in the cache, attends each split of the
// cache and combines the splits into out (B,NH,HD).
func (b *Backend) flashDecode(out, cache, q, k, v, pos uintptr, B, maxT, NH, KVH, HD int, scale float32) {
	chunk := b.decodeChunk(B, maxT, NH, KVH)
	nsplit := ceilDiv(maxT, chunk)
	part := b.ensureScratch(B * NH * nsplit * (HD + 1))
	if b.err != nil {
		return
	}
	b.launch("flash_decode_store", b.elemGrid(B*KVH*HD), b.elemBlock(),
		ptr(cache), ptr(k), ptr(v), ptr(pos), B, maxT, KVH, HD, ptr(b.errFlag))
	b.launch("flash_decode_partial", [3]uint32{uint32(nsplit), uint32(B * KVH), uint32(ceilDiv(NH/KVH, faRows))}, faBlock,
		ptr(part), ptr(q), ptr(cache), ptr(pos), B, maxT, NH, KVH, HD, scale, chunk, nsplit)
	b.launch("flash_decode_combine", [3]uint32{uint32(ceilDiv(B*NH, 4)), 1, 1}, [3]uint32{128, 1, 1},
		ptr(out), ptr(part), ptr(pos), B, maxT, NH, HD, chunk, nsplit)
}
