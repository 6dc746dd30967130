// tc_gemm.cu: BF16 tensor-core GEMMs with float32 accumulation (mma.sync
// m16n8k16, sm_80 and sm_90) for every linear layer's forward and both
// backward products, and the packing kernels that feed them.
//
// One GEMM shape serves all three products: C (M,N) float32 = A (M,Kp) ·
// B (N,Kp)ᵀ, both operands bf16 with k contiguous ("row.col" in mma terms),
// Kp a multiple of 8 so every 16-byte cp.async chunk is aligned and either
// wholly inside or wholly past the data. The packing kernels make such
// operands from float32 or bf16 matrices in either orientation while
// rounding (the conversion a float32 activation needs anyway), so
//   forward       out  = inp · Wᵀ    A = inp (N,C),   B = W (OC,C)
//   input grad    dinp += dout · W   A = dout (N,OC), B = Wᵀ (C,OC)
//   weight grad   dW  += doutᵀ · inp A = doutᵀ (OC,N), B = inpᵀ (C,N)
// all read both operands through non-transposing ldmatrix.
//
// Tiles: a block owns BM×BN of C, warps WM×WN of it, k in steps of 32 through
// a STAGES-deep cp.async ring (commit/wait groups: the loads of the next
// STAGES-1 k-tiles fly while the current one is multiplied). A shared row is
// 32 bf16 = 64 bytes = four 16-byte chunks; chunk c of row r is stored at
// position c ^ ((r>>1)&3), so the eight rows one ldmatrix phase reads (and
// the eight chunks one cp.async phase writes) fall in eight distinct 16-byte
// bank groups: no bank conflicts. Split-K (gridDim.z > 1) either writes each
// split's partial sum to its own slice of a workspace, summed in split order
// by tc_splitk_reduce (deterministic, the default), or adds it into C with
// atomicAdd (order of arrival: not bit-reproducible).
//
// B's rows n ≥ nsplit come from B2 (row n - nsplit) instead: two weights
// stacked without a stacked copy (the MLP's gate and up projections, one
// GEMM over the pair; nsplit = N otherwise).
//
// Epilogue, per element: C = (mode&1 ? C : 0) + acc + bias[n] + R[m,n]
// (bias, R may be null; R is N-strided like C). mode&2: split-K, every
// split atomically adds acc and split 0 adds bias and R (the host set C
// beforehand: zero, or kept when accumulating). mode&4: split-K into a
// workspace, C here being the workspace (gridDim.z slices of M×N): split z
// stores its acc alone at C[z·M·N + m·N + n]; tc_splitk_reduce does the
// rest of the epilogue.
#include "common.cuh"
#include "mma.cuh"

#define TC_BK 32

struct alignas(16) tc_chunk {
    unsigned x, y, z, w;
};

// tc_swz is the position of 16-byte chunk c (0..3) of tile row r.
__device__ __forceinline__ int tc_swz(int r, int c) { return r * 4 + (c ^ ((r >> 1) & 3)); }

template <int BM, int BN, int WM, int WN, int STAGES>
__device__ __forceinline__ void tc_gemm_body(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit,
                                             const float* bias, const float* R, int M, int N, int Kp,
                                             int ktiles_per_split, int mode) {
    constexpr int NTHREADS = WM * WN * 32;
    constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
    constexpr int MT = WTM / 16, NT = WTN / 8;   // mma tiles per warp
    static_assert(MT >= 1 && NT >= 2 && NT % 2 == 0, "warp tile");
    __shared__ tc_chunk sA[STAGES][BM * 4];
    __shared__ tc_chunk sB[STAGES][BN * 4];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (Kp + TC_BK - 1) / TC_BK;
    const int kt0 = blockIdx.z * ktiles_per_split;
    const int kt1 = KT < kt0 + ktiles_per_split ? KT : kt0 + ktiles_per_split;
    const int nk = kt1 > kt0 ? kt1 - kt0 : 0;

    float acc[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    auto load = [&](int stage, int kt) {
        const int kb = kt * TC_BK;
        for (int i = tid; i < BM * 4; i += NTHREADS) {
            const int r = i >> 2, c = i & 3, m = m0 + r, k = kb + c * 8;
            const bool ok = m < M && k < Kp;
            cp_async16(&sA[stage][tc_swz(r, c)], ok ? A + (long)m * Kp + k : A, ok ? 16 : 0);
        }
        for (int i = tid; i < BN * 4; i += NTHREADS) {
            const int r = i >> 2, c = i & 3, n = n0 + r, k = kb + c * 8;
            const bool ok = n < N && k < Kp;
            const bf16* src = n < nsplit ? B + (long)n * Kp + k : B2 + (long)(n - nsplit) * Kp + k;
            cp_async16(&sB[stage][tc_swz(r, c)], ok ? src : B, ok ? 16 : 0);
        }
    };

    #pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) load(s, kt0 + s);
        cp_async_commit();  // empty groups keep the wait count uniform
    }
    for (int it = 0; it < nk; it++) {
        cp_async_wait<STAGES - 2>();  // k-tile `it` has landed (this thread's copies)
        __syncthreads();              // ... everyone's; and stage (it-1)%STAGES is free
        if (it + STAGES - 1 < nk) load((it + STAGES - 1) % STAGES, kt0 + it + STAGES - 1);
        cp_async_commit();
        const tc_chunk* a = sA[it % STAGES];
        const tc_chunk* b = sB[it % STAGES];
        #pragma unroll
        for (int kk = 0; kk < 2; kk++) {  // two k16 steps per 32-wide tile
            unsigned af[MT][4], bfr[NT][2];
            #pragma unroll
            for (int i = 0; i < MT; i++) {
                // x4: lanes 0-15 rows 0-15 at k 0-7, lanes 16-31 rows 0-15 at k 8-15
                // -> a0 (g, k0-7), a1 (g+8, k0-7), a2 (g, k8-15), a3 (g+8, k8-15).
                const int r = wm0 + i * 16 + (lane & 15);
                ldmatrix_x4(af[i], &a[tc_swz(r, kk * 2 + (lane >> 4))]);
            }
            #pragma unroll
            for (int j = 0; j < NT; j += 2) {
                // x4 over two n8 tiles: matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15).
                const int r = wn0 + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                unsigned t4[4];
                ldmatrix_x4(t4, &b[tc_swz(r, kk * 2 + ((lane >> 3) & 1))]);
                bfr[j][0] = t4[0];
                bfr[j][1] = t4[1];
                bfr[j + 1][0] = t4[2];
                bfr[j + 1][1] = t4[3];
            }
            #pragma unroll
            for (int i = 0; i < MT; i++)
                #pragma unroll
                for (int j = 0; j < NT; j++) mma_bf16_16816(acc[i][j], af[i], bfr[j], acc[i][j]);
        }
    }
    cp_async_wait<0>();

    const int g = lane >> 2, t = lane & 3;
    const bool first = blockIdx.z == 0;
    #pragma unroll
    for (int i = 0; i < MT; i++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int m = m0 + wm0 + i * 16 + g + (e >= 2 ? 8 : 0);
                const int n = n0 + wn0 + j * 8 + 2 * t + (e & 1);
                if (m >= M || n >= N) continue;
                const long idx = (long)m * N + n;
                float v = acc[i][j][e];
                if (mode & 4) {
                    C[(long)blockIdx.z * M * N + idx] = v;
                    continue;
                }
                if (first) {
                    if (bias) v += bias[n];
                    if (R) v += R[idx];
                }
                if (mode & 2) {
                    atomicAdd(&C[idx], v);
                } else {
                    C[idx] = (mode & 1) ? C[idx] + v : v;
                }
            }
}

// The three tile shapes (the host picks one per problem, see tc_gemm.go):
// large for big M and N, medium, and a skinny 16-row tile for decode and
// LoRA's rank-r products.
extern "C" __global__ void __launch_bounds__(256)
    tc_gemm_128x128(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit, const float* bias,
                    const float* R, int M, int N, int Kp, int ktiles_per_split, int mode) {
    tc_gemm_body<128, 128, 2, 4, 3>(C, A, B, B2, nsplit, bias, R, M, N, Kp, ktiles_per_split, mode);
}

extern "C" __global__ void __launch_bounds__(128)
    tc_gemm_64x64(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit, const float* bias,
                  const float* R, int M, int N, int Kp, int ktiles_per_split, int mode) {
    tc_gemm_body<64, 64, 2, 2, 3>(C, A, B, B2, nsplit, bias, R, M, N, Kp, ktiles_per_split, mode);
}

extern "C" __global__ void __launch_bounds__(128)
    tc_gemm_16x64(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit, const float* bias,
                  const float* R, int M, int N, int Kp, int ktiles_per_split, int mode) {
    tc_gemm_body<16, 64, 1, 4, 4>(C, A, B, B2, nsplit, bias, R, M, N, Kp, ktiles_per_split, mode);
}

// Skinny-N tiles for products with few output columns (LoRA's rank-r side
// when r is the N of the product: x·Aᵀ, dout·B, doutᵀ·u): a 64-wide N tile
// would compute 4 to 8 times the needed columns there.
extern "C" __global__ void __launch_bounds__(128)
    tc_gemm_64x16(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit, const float* bias,
                  const float* R, int M, int N, int Kp, int ktiles_per_split, int mode) {
    tc_gemm_body<64, 16, 4, 1, 4>(C, A, B, B2, nsplit, bias, R, M, N, Kp, ktiles_per_split, mode);
}

extern "C" __global__ void __launch_bounds__(128)
    tc_gemm_64x32(float* C, const bf16* A, const bf16* B, const bf16* B2, int nsplit, const float* bias,
                  const float* R, int M, int N, int Kp, int ktiles_per_split, int mode) {
    tc_gemm_body<64, 32, 4, 1, 4>(C, A, B, B2, nsplit, bias, R, M, N, Kp, ktiles_per_split, mode);
}

// tc_splitk_reduce finishes a deterministic split-K GEMM: C (M,N) = (mode&1 ?
// C : 0) + sum over s < splits, in order, of W[s] + bias[n] + R[m,n], with W
// the workspace the splits wrote (splits slices of M×N). Grid-stride.
extern "C" __global__ void tc_splitk_reduce(float* C, const float* W, const float* bias, const float* R, int M, int N,
                                            int splits, int mode) {
    const long mn = (long)M * N;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < mn; i += (long)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++) v += W[s * mn + i];
        if (bias) v += bias[i % N];
        if (R) v += R[i];
        C[i] = (mode & 1) ? C[i] + v : v;
    }
}

// tc_embed_bf16 is embed_forward (decoder.cu) from a bf16 table: out[n,c] =
// float(table[inp[n],c]), exact. Ids outside [0,V) leave the row at 0 and
// raise TROUPE_ERR_TOKEN in *err. One thread per output element.
extern "C" __global__ void tc_embed_bf16(float* __restrict__ out, const int* __restrict__ inp,
                                         const bf16* __restrict__ table, int N, int C, int V, unsigned int* err) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)N * C) return;
    const long n = idx / C;
    const int c = (int)(idx % C);
    const int tok = inp[n];
    if (tok < 0 || tok >= V) {
        out[idx] = 0.0f;
        if (c == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    out[idx] = bf16_to_float(table[(long)tok * C + c]);
}

// tc_pack_f32 writes dst (R,Kp) bf16 = src rounded to nearest even, with
// src (R,K) (trans = 0) or src (K,R) (trans = 1, read transposed), and
// zeros in the k ≥ K padding. Grid-stride over dst.
extern "C" __global__ void tc_pack_f32(bf16* dst, const float* src, int R, int K, int Kp, int trans) {
    const long n = (long)R * Kp;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int r = (int)(i / Kp), k = (int)(i % Kp);
        float v = 0.0f;
        if (k < K) v = trans ? src[(long)k * R + r] : src[(long)r * K + k];
        dst[i] = float_to_bf16(v);
    }
}

// tc_pack_bf16 is tc_pack_f32 for a bf16 source (exact).
extern "C" __global__ void tc_pack_bf16(bf16* dst, const bf16* src, int R, int K, int Kp, int trans) {
    const long n = (long)R * Kp;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int r = (int)(i / Kp), k = (int)(i % Kp);
        bf16 v = 0;
        if (k < K) v = trans ? src[(long)k * R + r] : src[(long)r * K + k];
        dst[i] = v;
    }
}

// tc_pack_bf16_pair_t writes dst (R,Kp) = [src1; src2]ᵀ for src1, src2 (K1,R)
// bf16: dst[r,k] = src1[k,r] for k < K1, src2[k-K1,r] for K1 ≤ k < 2·K1,
// zero beyond (the input gradient's operand of two stacked weights).
// Grid-stride over dst.
extern "C" __global__ void tc_pack_bf16_pair_t(bf16* dst, const bf16* src1, const bf16* src2, int R, int K1, int Kp) {
    const long n = (long)R * Kp;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int r = (int)(i / Kp), k = (int)(i % Kp);
        bf16 v = 0;
        if (k < K1)
            v = src1[(long)k * R + r];
        else if (k < 2 * K1)
            v = src2[(long)(k - K1) * R + r];
        dst[i] = v;
    }
}

// tc_round_bf16 writes dst = float(bf16(src)) (nearest even): the operands of
// an attention computed on BF16-rounded inputs. Grid-stride.
extern "C" __global__ void tc_round_bf16(float* dst, const float* src, int n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        dst[i] = bf16_to_float(float_to_bf16(src[i]));
}

// tc_pack_f32_t is tc_pack_f32 with trans = 1, coalesced both ways: a
// 32x32 tile of src (K,R) goes through shared memory (a padded row so the
// column reads hit distinct banks), read along r and written along k.
// Block (32, 8); grid (ceil(Kp/32), ceil(R/32)).
extern "C" __global__ void __launch_bounds__(256)
    tc_pack_f32_t(bf16* dst, const float* src, int R, int K, int Kp) {
    __shared__ float tile[32][33];
    const int k0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int j = ty; j < 32; j += 8) {
        const int k = k0 + j, r = r0 + tx;
        tile[j][tx] = (k < K && r < R) ? src[(long)k * R + r] : 0.0f;
    }
    __syncthreads();
    for (int j = ty; j < 32; j += 8) {
        const int r = r0 + j, k = k0 + tx;
        if (r < R && k < Kp) dst[(long)r * Kp + k] = float_to_bf16(tile[tx][j]);
    }
}
