package cuda

import (
	"fmt"
	"troupe/gpu/compute"
	"unsafe"
)

// This file is the bf16 storage path, outside the compute.Backend interface:
// matmul inputs stored as bf16 (half the bytes per load, float32 products
// and sums) and AdamW keeping fp32 master weights next to the bf16 copy the
// forward reads. Values are raw bf16 bits (the high 16 bits of a float32),
// rounded to nearest even on conversion.

// BF16Buffer is a bf16 array in device memory.
type BF16Buffer struct {
	owner *Backend
	root  *allocation
	ptr   uintptr
	n     int
}

// Len is the number of bf16 elements.
func (x *BF16Buffer) Len() int { return x.n }

// AllocBF16 returns a zeroed bf16 buffer of n elements.
func (b *Backend) AllocBF16(n int) (*BF16Buffer, error) {
	if n < 0 || n > maxElems {
		return nil, compute.ShapeError("AllocBF16", "n=%d", n)
	}
	p, err := b.allocZero((n + 1) / 2)
	if err != nil {
		return nil, fmt.Errorf("AllocBF16 %d: %w", n, err)
	}
	return &BF16Buffer{owner: b, root: &allocation{ptr: p}, ptr: p, n: n}, nil
}

func (b *Backend) h(op, name string, x *BF16Buffer, need int) uintptr {
	if b.err != nil {
		return 0
	}
	if x == nil || x.owner != b || x.root.freed {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return 0
	}
	if x.n < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, x.n, need))
		return 0
	}
	return x.ptr
}

// ToBF16 sets dst[:n] = bf16(src[:n]) (kernel float_to_bf16_kernel).
func (b *Backend) ToBF16(dst *BF16Buffer, src compute.Buffer, n int) {
	const op = "ToBF16"
	if !b.dims(op, n) {
		return
	}
	d, s := b.h(op, "dst", dst, n), b.f(op, "src", src, n)
	b.launch("float_to_bf16_kernel", b.elemGrid(n), b.elemBlock(), ptr(d), ptr(s), n)
}

// FromBF16 sets dst[:n] = float32(src[:n]) (kernel bf16_to_float_kernel).
func (b *Backend) FromBF16(dst compute.Buffer, src *BF16Buffer, n int) {
	const op = "FromBF16"
	if !b.dims(op, n) {
		return
	}
	d, s := b.f(op, "dst", dst, n), b.h(op, "src", src, n)
	b.launch("bf16_to_float_kernel", b.elemGrid(n), b.elemBlock(), ptr(d), ptr(s), n)
}

// DownloadBF16 copies src[:len(dst)] (raw bf16 bits) into dst.
func (b *Backend) DownloadBF16(dst []uint16, src *BF16Buffer) {
	s := b.h("DownloadBF16", "src", src, len(dst))
	if b.err != nil || b.Sync() != nil || len(dst) == 0 {
		return
	}
	if err := b.dev.DtoH(unsafe.Pointer(&dst[0]), s, 2*len(dst)); err != nil {
		b.fail(fmt.Errorf("DownloadBF16: %w: %v", ErrDevice, err))
	}
}

// MatmulForwardBF16Buf is MatmulForward with bf16 inp (N,C) and weight
// (OC,C) in device buffers; out (N,OC) and bias (OC, may be nil) are
// float32 (kernel matmul_forward_bf16, SIMT). The compute.BF16Matmuler
// capability (MatmulForwardBF16 and the rest, tc_gemm.go) runs on the
// tensor cores instead.
func (b *Backend) MatmulForwardBF16Buf(out compute.Buffer, inp, weight *BF16Buffer, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardBF16Buf"
	if !b.dims(op, N, C, OC) || !b.gridRows(op, N) {
		return
	}
	o, in, w := b.f(op, "out", out, N*OC), b.h(op, "inp", inp, N*C), b.h(op, "weight", weight, OC*C)
	bi := b.opt(op, "bias", bias, OC)
	b.launch("matmul_forward_bf16", matmulGrid(N, OC), matmulBlock, ptr(o), ptr(in), ptr(w), ptr(bi), N, C, OC)
}

// AdamWUpdateBF16 is AdamWUpdate on fp32 master weights that also refreshes
// their bf16 copy params (kernel adamw_update_bf16).
func (b *Backend) AdamWUpdateBF16(master compute.Buffer, params *BF16Buffer, grads, m, v compute.Buffer, N int, h compute.AdamW) {
	const op = "AdamWUpdateBF16"
	if !b.dims(op, N) {
		return
	}
	hp := b.adamArgs(op, h)
	p, q, g := b.f(op, "master", master, N), b.h(op, "params", params, N), b.f(op, "grads", grads, N)
	ms, vs := b.f(op, "m", m, N), b.f(op, "v", v, N)
	if b.err != nil {
		return
	}
	b.launch("adamw_update_bf16", b.elemGrid(N), b.elemBlock(),
		append([]any{ptr(p), ptr(q), ptr(g), ptr(ms), ptr(vs), N}, hp...)...)
}

// UploadFromBF16 sets dst[:len(src)] to src widened to float32, where src
// holds raw bf16 bits (as stored in safetensors BF16 tensors). It moves half
// the bytes of Upload over the bus and widens on the device (kernel
// bf16_to_float_kernel), in chunks through a fixed staging buffer.
func (b *Backend) UploadFromBF16(dst compute.Buffer, src []uint16) {
	b.uploadHalf("UploadFromBF16", dst, src, func(d, s uintptr, n int) {
		b.launch("bf16_to_float_kernel", b.elemGrid(n), b.elemBlock(), ptr(d), ptr(s), n)
	})
}

// UploadFromF16 is UploadFromBF16 for IEEE fp16 bits (safetensors F16;
// kernel f16_to_float_kernel, exact, as F16ToFloat32).
func (b *Backend) UploadFromF16(dst compute.Buffer, src []uint16) {
	b.uploadHalf("UploadFromF16", dst, src, func(d, s uintptr, n int) {
		b.launch("f16_to_float_kernel", b.elemGrid(n), b.elemBlock(), ptr(d), ptr(s), n)
	})
}

// uploadHalf copies src to the device chunk by chunk and calls widen(dst
// chunk, staging buffer, n) to convert each.
func (b *Backend) uploadHalf(op string, dst compute.Buffer, src []uint16, widen func(d, s uintptr, n int)) {
	d := b.f(op, "dst", dst, len(src))
	if b.err != nil || len(src) == 0 {
		return
	}
	chunk := b.cfg.stageHalves
	if b.stage == 0 {
		p, err := b.dev.Alloc(2 * chunk)
		if err != nil {
			b.fail(fmt.Errorf("%s: staging buffer of %d values: %w: %v", op, chunk, ErrDevice, err))
			return
		}
		b.stage = p
	}
	// The copy into the staging buffer and the kernel reading it are ordered
	// on the one stream, so the next chunk's copy waits for the kernel.
	for off := 0; off < len(src); off += chunk {
		n := min(chunk, len(src)-off)
		if err := b.dev.HtoD(b.stage, unsafe.Pointer(&src[off]), 2*n); err != nil {
			b.fail(fmt.Errorf("%s: %w: %v", op, ErrDevice, err))
			return
		}
		widen(d+uintptr(4*off), b.stage, n)
	}
}
