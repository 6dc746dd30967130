// mma.cuh: the tensor-core building blocks of the BF16 GEMMs (tc_gemm.cu):
// mma.sync m16n8k16 (bf16 inputs, f32 accumulators), ldmatrix, cp.async with
// commit/wait groups, and the bf16x2 conversion. Under NVRTC each is one PTX
// instruction (inline asm, sm_80+); under the CPU emulator (TROUPE_EMU, set
// by emu/csrc/cuda_emu.h) each calls the emulator's warp-synchronous
// version with the same fragment layouts, so the kernels are one source.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type"), g = lane/4, t = lane%4, two bf16 per 32-bit
// register, the lower column (or k) in the lower half:
//   A 16x16 row-major: a[0] (g, 2t..2t+1), a[1] (g+8, 2t..), a[2] (g, 2t+8..), a[3] (g+8, 2t+8..)
//   B 16x8 "col" (n-major, k contiguous): b[0] (k 2t..2t+1, n g), b[1] (k 2t+8.., n g)
//   C, D 16x8 f32: c[0], c[1] (g, 2t and 2t+1), c[2], c[3] (g+8, 2t and 2t+1)
#pragma once

#ifdef TROUPE_EMU

__device__ __forceinline__ void mma_bf16_16816(float* d, const unsigned* a, const unsigned* b, const float* c) {
    emu::mma_bf16_16816(d, a, b, c);
}
// ldmatrix_x{1,2,4}[_trans]: row is this lane's row address in shared memory
// (lanes 8j..8j+7 address matrix j).
__device__ __forceinline__ void ldmatrix_x1(unsigned* r, const void* row) { emu::ldmatrix(r, 1, false, row); }
__device__ __forceinline__ void ldmatrix_x2(unsigned* r, const void* row) { emu::ldmatrix(r, 2, false, row); }
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* row) { emu::ldmatrix(r, 4, false, row); }
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned* r, const void* row) { emu::ldmatrix(r, 1, true, row); }
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, const void* row) { emu::ldmatrix(r, 2, true, row); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* row) { emu::ldmatrix(r, 4, true, row); }
// cp_async16: 16 bytes global -> shared, bypassing L1 (.cg); src_bytes < 16
// zero-fills the rest (0: src is not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    emu::cp_async(smem, gmem, 16, src_bytes);
}
// cp_async4: 4 bytes (.ca), for operands that are not 16-byte aligned.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes) {
    emu::cp_async(smem, gmem, 4, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    emu::cp_async_wait(N);
}
// pack_bf16x2 rounds lo and hi to bf16 (nearest even) into one register,
// lo in the lower half (cvt.rn.bf16x2.f32 d, hi, lo).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    return emu::f2bf(lo) | (emu::f2bf(hi) << 16);
}

#else  // NVRTC: PTX ISA 7.8, sm_80 and sm_90

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void mma_bf16_16816(float* d, const unsigned* a, const unsigned* b, const float* c) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}
__device__ __forceinline__ void ldmatrix_x1(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_u32(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row)));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#endif
