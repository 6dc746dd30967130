// common.cuh: helpers shared by every kernel file of troupe's CUDA backend.
//
// The kernels are self-contained CUDA C++: NVRTC on the build machines has no
// CUDA headers, so nothing here includes cuda_runtime.h or cuda_bf16.h. The
// same sources also compile as plain C++ under emu/cuda_emu.h (CPU emulation
// for tests), which is why only a small, portable subset of CUDA is used:
// static __shared__ arrays (no dynamic shared memory), full-mask warp
// intrinsics executed by all lanes of a warp, and atomics on float, double
// and unsigned int.
#pragma once

// Error flags raised by kernels into a device word the host reads at Sync.
#define TROUPE_ERR_TOKEN 1u       // a token id outside [0, V)
#define TROUPE_ERR_ROPE_POS 2u    // a RoPE position outside [0, maxPos)
#define TROUPE_ERR_DECODE_POS 4u  // a decode position outside [0, maxT)

#define WARP_SIZE 32
// -infinity without math.h (NVRTC has no headers).
#define NEG_INF __int_as_float(0xff800000)
#define FULL_MASK 0xffffffffu

// ---- bf16 storage -------------------------------------------------------
// bf16 values are stored as their 16 raw bits (the high half of a float32).
// Compute is always float32: loads widen exactly, stores round to nearest
// even (NaN kept quiet).
typedef unsigned short bf16;

__device__ __forceinline__ float bf16_to_float(bf16 h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ bf16 float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
        return (bf16)((u >> 16) | 0x0040u);
    }
    unsigned int rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (bf16)((u + rounding) >> 16);
}

// IEEE binary16 (safetensors F16) to float32, exact: every half value is a
// float32 value (subnormal halves are normal floats). NaN payloads are kept
// (shifted into the top of the float mantissa), as the hardware cvt does.
__device__ __forceinline__ float f16_to_float(unsigned short h) {
    unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
    unsigned int exp = ((unsigned int)h >> 10) & 0x1fu;
    unsigned int man = (unsigned int)h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
    if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float32
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));  // rebias 15 -> 127
}

__device__ __forceinline__ float load_f(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float load_f(const bf16* p, long i) { return bf16_to_float(p[i]); }

// ---- reductions ---------------------------------------------------------
// All lanes of the warp must call these (full mask).
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = WARP_SIZE / 2; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = WARP_SIZE / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int off = WARP_SIZE / 2; off > 0; off >>= 1) v += __shfl_down_sync(FULL_MASK, v, off);
    return v;  // lane 0 holds the total
}

// block_sum / block_max: every thread of the block calls them and receives
// the block-wide result. blockDim.x must be a multiple of 32 (<= 1024) and
// blockDim.y == blockDim.z == 1. `scratch` is a __shared__ array of 32
// floats owned by the caller; the trailing __syncthreads lets the caller
// reuse it for the next reduction.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int nwarps = blockDim.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < nwarps) ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int nwarps = blockDim.x / WARP_SIZE;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < nwarps) ? scratch[lane] : NEG_INF;
    v = warp_max(v);
    __syncthreads();
    return v;
}
