// flash_attn.cu: causal grouped-query attention without a T×T matrix in
// memory (FlashAttention-2's tiling, SIMT float32 math), forward, backward and
// a split-KV decode step over the KV cache.
//
// Layout (gpu/compute/backend.go): q (B,T,NH,HD), k and v (B,T,KVH,HD) in
// separate buffers; query head h reads key/value head g = h/G, G = NH/KVH;
// any even head size HD <= FA_MAX_HD. lse (B,NH,T) holds each row's
// log-sum-exp of the scaled scores, saved by the forward for the backward.
//
// Tiling. A block of FA_THREADS threads owns FA_BR "rows" of one (batch row
// b, kv head g): the rows r of the flattened sequence r = t*G + (h - g*G),
// so the G query heads of a group share every key/value tile the block
// stages in shared memory (GQA's reuse of k and v). Keys come in tiles of
// FA_BC. Each tile is two phases:
//   A (scores): thread tid handles the pairs (row tid/16 + 8e, key tid%16),
//     e = 0, 1; a row's 16 keys sit in one half-warp, so the row's max and
//     sum are xor-shuffles over 8, 4, 2, 1 lanes;
//   B (products): thread tid owns row (or key) tid/8 and the head channels
//     tid%8 + 8m, m < FA_CPT, accumulating in registers.
// The softmax is online: per row the running max m and sum l live in
// shared memory, and B rescales its accumulators by exp(m_old - m_new).
// Shared rows are padded to FA_LD floats, so phase A's 16 different key rows
// fall in 16 different banks. The two rows of a thread's pairs share each
// key load (1.5 shared loads per FMA); B loads P once per FA_CPT products.
//
// Backward (FlashAttention-2 without atomics, deterministic):
//   flash_attn_backward_dq: per row tile, P = exp(s - lse) recomputed from
//     q, k and the saved lse; dP = dO·vᵀ; D = rowsum(dO∘O) = rowsum(P∘dP);
//     dS = P∘(dP - D); dq += scale·dS·k. When the caller has no O, a first
//     pass over the keys computes D as rowsum(P∘dP) (the same value) and
//     stores it for the second kernel; otherwise D comes from
//     flash_attn_backward_dot.
//   flash_attn_backward_dkv: per key tile, over all later rows of every head
//     of the group: dv += Pᵀ·dO, dk += scale·dSᵀ·q; each block owns its keys'
//     dk, dv rows, so no atomics are needed.
#include "common.cuh"

// Match faRows, faCols, faThreads and faMaxHD in flash.go.
#define FA_BR 16
#define FA_BC 16
#define FA_THREADS 128
#define FA_MAX_HD 128
#define FA_LD (FA_MAX_HD + 1)
#define FA_CPT (FA_MAX_HD / 8)  // channels per thread in phase B

// The emulator's C++ has no CUDA min() on ints.
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Half-warp (16 lanes) reductions: every lane of the warp calls them.
__device__ __forceinline__ float half_max(float v) {
    for (int off = 8; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}
__device__ __forceinline__ float half_sum(float v) {
    for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

// fa_dot2 sets s0 = a0·b and s1 = a1·b over HD channels, loading b once
// for both (phase A's two rows share their key).
__device__ __forceinline__ void fa_dot2(const float* a0, const float* a1, const float* b, int HD, float& s0,
                                        float& s1) {
    float x0 = 0.0f, x1 = 0.0f;
#pragma unroll 4
    for (int c = 0; c < HD; c++) {
        const float bc = b[c];
        x0 += a0[c] * bc;
        x1 += a1[c] * bc;
    }
    s0 = x0;
    s1 = x1;
}

// fa_load_qrows stages the FA_BR rows r0.. of the flattened sequence of
// (b, g) from src (B,T,NH,HD): row r is position r/G, query head g*G + r%G.
// Rows past R repeat row R-1 (padding: their results are never stored).
__device__ __forceinline__ void fa_load_qrows(float (*dst)[FA_LD], const float* src, int b, int g, int r0, int R,
                                              int G, int T, int NH, int HD) {
    for (int x = threadIdx.x; x < FA_BR * HD; x += FA_THREADS) {
        const int i = x / HD, c = x % HD;
        const int r = imin(r0 + i, R - 1);
        const int t = r / G, h = g * G + r % G;
        dst[i][c] = src[((long)b * T + t) * NH * HD + (long)h * HD + c];
    }
}

// fa_load_keys stages FA_BC key (or value) rows s0.. of a (rows, stride)
// array starting at base; rows at or past n are zero.
__device__ __forceinline__ void fa_load_keys(float (*dst)[FA_LD], const float* base, long stride, int s0, int n,
                                             int HD) {
    for (int x = threadIdx.x; x < FA_BC * HD; x += FA_THREADS) {
        const int j = x / HD, c = x % HD;
        const int s = s0 + j;
        dst[j][c] = (s < n) ? base[(long)s * stride + c] : 0.0f;
    }
}

// fa_attend runs the online-softmax tile loop over keys [kbeg, kend) of one
// row tile whose Q rows are in Qs: key row s of k is kbase[s*stride], of v
// vbase[s*stride]. limit[e] is the last key row (inclusive) pair e's row may
// attend. Rows nvalid.. of the tile are padding: their products are skipped
// (a decode's group has fewer query heads than the tile has rows). On return
// acc holds thread (tid/8)'s unnormalised output channels and ms, ls the
// rows' running max and sum.
__device__ __forceinline__ void fa_attend(float (*Qs)[FA_LD], float (*Ks)[FA_LD], float (*Vs)[FA_LD],
                                          float (*Ps)[FA_BC + 1], float* ms, float* ls, float* as,
                                          const float* kbase, const float* vbase, long stride, int kbeg, int kend,
                                          const int* limit, int nvalid, int HD, float scale, float* acc) {
    const int tid = threadIdx.x, j = tid % FA_BC, ib = tid / 8, sub = tid % 8;
    for (int k0 = kbeg; k0 < kend; k0 += FA_BC) {
        __syncthreads();  // the previous tile's readers are done (and ms/ls/Qs are initialised)
        fa_load_keys(Ks, kbase, stride, k0, kend, HD);
        fa_load_keys(Vs, vbase, stride, k0, kend, HD);
        __syncthreads();
        // The rows of a half-warp are uniform, so these branches do not
        // diverge within one.
        const int i0 = tid / FA_BC;
        float dots[2] = {0.0f, 0.0f};
        if (i0 + 8 < nvalid) {
            fa_dot2(Qs[i0], Qs[i0 + 8], Ks[j], HD, dots[0], dots[1]);
        } else if (i0 < nvalid) {
            fa_dot2(Qs[i0], Qs[i0], Ks[j], HD, dots[0], dots[1]);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = i0 + 8 * e, s = k0 + j;
            const float sc = (i < nvalid && s <= limit[e] && s < kend) ? dots[e] * scale : NEG_INF;
            const float mold = ms[i];
            const float mnew = fmaxf(mold, half_max(sc));
            const float p = (sc == NEG_INF) ? 0.0f : expf(sc - mnew);
            const float psum = half_sum(p);
            Ps[i][j] = p;
            __syncwarp();  // every lane of the row read ms[i] before it changes
            if (j == 0) {
                const float a = (mold == NEG_INF) ? 0.0f : expf(mold - mnew);
                ms[i] = mnew;
                ls[i] = ls[i] * a + psum;
                as[i] = a;
            }
        }
        __syncthreads();
        if (ib >= nvalid) continue;  // padding row (no barrier below)
        const float a = as[ib];
#pragma unroll
        for (int m = 0; m < FA_CPT; m++) acc[m] *= a;
        for (int jj = 0; jj < FA_BC; jj++) {  // one load of P per FA_CPT products
            const float pj = Ps[ib][jj];
#pragma unroll
            for (int m = 0; m < FA_CPT; m++) {
                const int c = sub + 8 * m;
                if (c < HD) acc[m] += pj * Vs[jj][c];
            }
        }
    }
}

// Forward: out (B,T,NH,HD) = softmax(q·kᵀ·scale, causal)·v and lse (B,NH,T).
// Grid (ceil(T*G/FA_BR), B*KVH), block FA_THREADS.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attn_forward(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ q,
                       const float* __restrict__ k, const float* __restrict__ v, int B, int T, int NH, int KVH,
                       int HD, float scale) {
    __shared__ float Qs[FA_BR][FA_LD];
    __shared__ float Ks[FA_BC][FA_LD];
    __shared__ float Vs[FA_BC][FA_LD];
    __shared__ float Ps[FA_BR][FA_BC + 1];
    __shared__ float ms[FA_BR], ls[FA_BR], as[FA_BR];
    const int tid = threadIdx.x;
    const int b = blockIdx.y / KVH, g = blockIdx.y % KVH;
    const int G = NH / KVH, R = T * G, r0 = blockIdx.x * FA_BR;
    fa_load_qrows(Qs, q, b, g, r0, R, G, T, NH, HD);
    if (tid < FA_BR) {
        ms[tid] = NEG_INF;
        ls[tid] = 0.0f;
    }
    int limit[2];
    for (int e = 0; e < 2; e++) limit[e] = imin(r0 + tid / FA_BC + 8 * e, R - 1) / G;
    const int kend = (imin(r0 + FA_BR, R) - 1) / G + 1;  // keys up to the last row's position
    const long kstride = (long)KVH * HD;
    const float* kbase = k + (long)b * T * kstride + g * HD;
    const float* vbase = v + (long)b * T * kstride + g * HD;
    float acc[FA_CPT];
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) acc[m] = 0.0f;
    fa_attend(Qs, Ks, Vs, Ps, ms, ls, as, kbase, vbase, kstride, 0, kend, limit, imin(FA_BR, R - r0), HD, scale,
              acc);

    const int ib = tid / 8, sub = tid % 8, r = r0 + ib;
    if (r >= R) return;
    const int t = r / G, h = g * G + r % G;
    const float l = ls[ib], inv = 1.0f / l;
    float* o = out + ((long)b * T + t) * NH * HD + (long)h * HD;
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) {
        const int c = sub + 8 * m;
        if (c < HD) o[c] = acc[m] * inv;
    }
    if (sub == 0) lse[((long)b * NH + h) * T + t] = ms[ib] + logf(l);
}

// D[b,h,t] = sum_c dout[b,t,h,c]*out[b,t,h,c] (FlashAttention-2's
// preprocessing). One warp per row; grid ceil(B*T*NH/4), block 128.
extern "C" __global__ void __launch_bounds__(128)
    flash_attn_backward_dot(float* __restrict__ D, const float* __restrict__ dout, const float* __restrict__ out,
                            int B, int T, int NH, int HD) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const long row = (long)blockIdx.x * 4 + warp;  // (b, t, h) in q's order
    if (row >= (long)B * T * NH) return;  // whole warp
    float s = 0.0f;
    for (int c = lane; c < HD; c += WARP_SIZE) s += dout[row * HD + c] * out[row * HD + c];
    s = warp_sum(s);
    if (lane == 0) {
        const long h = row % NH, bt = row / NH, b = bt / T, t = bt % T;
        D[(b * NH + h) * T + t] = s;
    }
}

// dq += scale * dS·k per row tile (see the file comment). D (B,NH,T) is read,
// or, when computeD != 0, computed here as rowsum(P∘dP) and written.
// Grid (ceil(T*G/FA_BR), B*KVH), block FA_THREADS.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attn_backward_dq(float* __restrict__ dq, float* __restrict__ D, const float* __restrict__ dout,
                           const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                           const float* __restrict__ lse, int B, int T, int NH, int KVH, int HD, float scale,
                           int computeD) {
    __shared__ float Qs[FA_BR][FA_LD];
    __shared__ float dOs[FA_BR][FA_LD];
    __shared__ float Ks[FA_BC][FA_LD];
    __shared__ float Vs[FA_BC][FA_LD];
    __shared__ float dSs[FA_BR][FA_BC + 1];
    __shared__ float Ls[FA_BR], Ds[FA_BR];
    const int tid = threadIdx.x, j = tid % FA_BC, ib = tid / 8, sub = tid % 8;
    const int b = blockIdx.y / KVH, g = blockIdx.y % KVH;
    const int G = NH / KVH, R = T * G, r0 = blockIdx.x * FA_BR;
    fa_load_qrows(Qs, q, b, g, r0, R, G, T, NH, HD);
    fa_load_qrows(dOs, dout, b, g, r0, R, G, T, NH, HD);
    if (tid < FA_BR) {
        const int r = imin(r0 + tid, R - 1), t = r / G, h = g * G + r % G;
        const long li = ((long)b * NH + h) * T + t;
        Ls[tid] = lse[li];
        Ds[tid] = computeD ? 0.0f : D[li];
    }
    int limit[2];
    for (int e = 0; e < 2; e++) limit[e] = imin(r0 + tid / FA_BC + 8 * e, R - 1) / G;
    const int kend = (imin(r0 + FA_BR, R) - 1) / G + 1;
    const long kstride = (long)KVH * HD;
    const float* kbase = k + (long)b * T * kstride + g * HD;
    const float* vbase = v + (long)b * T * kstride + g * HD;

    if (computeD) {
        for (int k0 = 0; k0 < kend; k0 += FA_BC) {
            __syncthreads();
            fa_load_keys(Ks, kbase, kstride, k0, kend, HD);
            fa_load_keys(Vs, vbase, kstride, k0, kend, HD);
            __syncthreads();
            float sc[2], dp[2];
            fa_dot2(Qs[tid / FA_BC], Qs[tid / FA_BC + 8], Ks[j], HD, sc[0], sc[1]);
            fa_dot2(dOs[tid / FA_BC], dOs[tid / FA_BC + 8], Vs[j], HD, dp[0], dp[1]);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = tid / FA_BC + 8 * e, s = k0 + j;
                float pdp = 0.0f;
                if (s <= limit[e]) pdp = expf(sc[e] * scale - Ls[i]) * dp[e];
                pdp = half_sum(pdp);
                if (j == 0) Ds[i] += pdp;  // one half-warp owns row i
            }
        }
        __syncthreads();
        if (tid < FA_BR && r0 + tid < R) {
            const int r = r0 + tid, t = r / G, h = g * G + r % G;
            D[((long)b * NH + h) * T + t] = Ds[tid];
        }
    }

    float acc[FA_CPT];
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) acc[m] = 0.0f;
    for (int k0 = 0; k0 < kend; k0 += FA_BC) {
        __syncthreads();
        fa_load_keys(Ks, kbase, kstride, k0, kend, HD);
        fa_load_keys(Vs, vbase, kstride, k0, kend, HD);
        __syncthreads();
        float sc[2], dp[2];
        fa_dot2(Qs[tid / FA_BC], Qs[tid / FA_BC + 8], Ks[j], HD, sc[0], sc[1]);
        fa_dot2(dOs[tid / FA_BC], dOs[tid / FA_BC + 8], Vs[j], HD, dp[0], dp[1]);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = tid / FA_BC + 8 * e, s = k0 + j;
            float ds = 0.0f;
            if (s <= limit[e]) ds = expf(sc[e] * scale - Ls[i]) * (dp[e] - Ds[i]);
            dSs[i][j] = ds;
        }
        __syncthreads();
        for (int jj = 0; jj < FA_BC; jj++) {
            const float dsj = dSs[ib][jj];
#pragma unroll
            for (int m = 0; m < FA_CPT; m++) {
                const int c = sub + 8 * m;
                if (c < HD) acc[m] += dsj * Ks[jj][c];
            }
        }
    }
    const int r = r0 + ib;
    if (r >= R) return;
    const int t = r / G, h = g * G + r % G;
    float* d = dq + ((long)b * T + t) * NH * HD + (long)h * HD;
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) {
        const int c = sub + 8 * m;
        if (c < HD) d[c] += scale * acc[m];
    }
}

// dk += scale * dSᵀ·q and dv += Pᵀ·dO for one tile of FA_BC keys, summed over
// every later row of every query head of the group. Needs lse and D.
// Grid (ceil(T/FA_BC), B*KVH), block FA_THREADS.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attn_backward_dkv(float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ dout,
                            const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            const float* __restrict__ lse, const float* __restrict__ D, int B, int T, int NH,
                            int KVH, int HD, float scale) {
    __shared__ float Ks[FA_BC][FA_LD];
    __shared__ float Vs[FA_BC][FA_LD];
    __shared__ float Qs[FA_BR][FA_LD];
    __shared__ float dOs[FA_BR][FA_LD];
    __shared__ float Ps[FA_BR][FA_BC + 1];
    __shared__ float dSs[FA_BR][FA_BC + 1];
    __shared__ float Ls[FA_BR], Ds[FA_BR];
    const int tid = threadIdx.x, j = tid % FA_BC, jb = tid / 8, sub = tid % 8;
    const int b = blockIdx.y / KVH, g = blockIdx.y % KVH;
    const int G = NH / KVH, R = T * G, k0 = blockIdx.x * FA_BC;
    const long kstride = (long)KVH * HD;
    const float* kbase = k + (long)b * T * kstride + g * HD;
    const float* vbase = v + (long)b * T * kstride + g * HD;
    fa_load_keys(Ks, kbase, kstride, k0, T, HD);
    fa_load_keys(Vs, vbase, kstride, k0, T, HD);
    float ak[FA_CPT], av[FA_CPT];
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) ak[m] = av[m] = 0.0f;
    for (int rt = k0 * G; rt < R; rt += FA_BR) {
        __syncthreads();  // previous rows' readers are done (first pass: the key tile is staged)
        fa_load_qrows(Qs, q, b, g, rt, R, G, T, NH, HD);
        fa_load_qrows(dOs, dout, b, g, rt, R, G, T, NH, HD);
        if (tid < FA_BR) {
            const int r = imin(rt + tid, R - 1), t = r / G, h = g * G + r % G;
            const long li = ((long)b * NH + h) * T + t;
            Ls[tid] = lse[li];
            Ds[tid] = D[li];
        }
        __syncthreads();
        float sc[2], dp[2];
        fa_dot2(Qs[tid / FA_BC], Qs[tid / FA_BC + 8], Ks[j], HD, sc[0], sc[1]);
        fa_dot2(dOs[tid / FA_BC], dOs[tid / FA_BC + 8], Vs[j], HD, dp[0], dp[1]);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = tid / FA_BC + 8 * e, r = rt + i, s = k0 + j;
            float p = 0.0f, ds = 0.0f;
            if (r < R && s <= r / G) {  // s <= t also keeps s < T
                p = expf(sc[e] * scale - Ls[i]);
                ds = p * (dp[e] - Ds[i]);
            }
            Ps[i][j] = p;
            dSs[i][j] = ds;
        }
        __syncthreads();
        for (int ii = 0; ii < FA_BR; ii++) {  // one load of P and dS per 2*FA_CPT products
            const float pv = Ps[ii][jb], dsv = dSs[ii][jb];
#pragma unroll
            for (int m = 0; m < FA_CPT; m++) {
                const int c = sub + 8 * m;
                if (c < HD) {
                    ak[m] += dsv * Qs[ii][c];
                    av[m] += pv * dOs[ii][c];
                }
            }
        }
    }
    const int s = k0 + jb;
    if (s >= T) return;
    float* dkr = dk + ((long)b * T + s) * kstride + g * HD;
    float* dvr = dv + ((long)b * T + s) * kstride + g * HD;
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) {
        const int c = sub + 8 * m;
        if (c < HD) {
            dkr[c] += scale * ak[m];
            dvr[c] += av[m];
        }
    }
}

// ---- decode ----------------------------------------------------------------
// One new token per batch row at its own position pos[b] (rows of different
// lengths). cache (B,maxT,2,KVH,HD) holds k then v per position.

// Stores the new k, v (B,KVH,HD) at pos[b]. A position outside [0,maxT)
// leaves the cache alone and raises TROUPE_ERR_DECODE_POS. Grid-stride.
extern "C" __global__ void flash_decode_store(float* __restrict__ cache, const float* __restrict__ k,
                                              const float* __restrict__ v, const int* __restrict__ pos, int B,
                                              int maxT, int KVH, int HD, unsigned int* err) {
    const long KD = (long)KVH * HD, total = (long)B * KD;
    for (long x = (long)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const long b = x / KD, gc = x % KD;
        const int p = pos[b];
        if (p < 0 || p >= maxT) {
            if (gc == 0) atomicOr(err, TROUPE_ERR_DECODE_POS);
            continue;
        }
        float* c = cache + ((long)b * maxT + p) * 2 * KD;
        c[gc] = k[x];
        c[KD + gc] = v[x];
    }
}

// Split-KV attention: block (split, b*KVH+g, rt) attends the query heads
// g*G + rt*FA_BR + i of row b over cache positions [split*chunk,
// imin((split+1)*chunk, pos[b]+1)) and writes, per (b, h, split), the
// normalised partial output and its log-sum-exp to part (B,NH,nsplit,HD+1).
// Splits past pos[b] write nothing (the combine skips them).
// Grid (nsplit, B*KVH, ceil(G/FA_BR)), block FA_THREADS.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_decode_partial(float* __restrict__ part, const float* __restrict__ q, const float* __restrict__ cache,
                         const int* __restrict__ pos, int B, int maxT, int NH, int KVH, int HD, float scale,
                         int chunk, int nsplit) {
    __shared__ float Qs[FA_BR][FA_LD];
    __shared__ float Ks[FA_BC][FA_LD];
    __shared__ float Vs[FA_BC][FA_LD];
    __shared__ float Ps[FA_BR][FA_BC + 1];
    __shared__ float ms[FA_BR], ls[FA_BR], as[FA_BR];
    const int tid = threadIdx.x, split = blockIdx.x;
    const int b = blockIdx.y / KVH, g = blockIdx.y % KVH;
    const int G = NH / KVH, h0 = blockIdx.z * FA_BR;
    const int p = pos[b];
    const int kbeg = split * chunk;
    if (p < 0 || p >= maxT || kbeg > p) return;  // whole block
    const int kend = imin(kbeg + chunk, p + 1);
    for (int x = tid; x < FA_BR * HD; x += FA_THREADS) {
        const int i = x / HD, c = x % HD;
        const int h = g * G + imin(h0 + i, G - 1);
        Qs[i][c] = q[((long)b * NH + h) * HD + c];
    }
    if (tid < FA_BR) {
        ms[tid] = NEG_INF;
        ls[tid] = 0.0f;
    }
    const int limit[2] = {p, p};
    const long KD = (long)KVH * HD;
    const float* kbase = cache + (long)b * maxT * 2 * KD + g * HD;
    float acc[FA_CPT];
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) acc[m] = 0.0f;
    fa_attend(Qs, Ks, Vs, Ps, ms, ls, as, kbase, kbase + KD, 2 * KD, kbeg, kend, limit, imin(FA_BR, G - h0), HD,
              scale, acc);

    const int ib = tid / 8, sub = tid % 8;
    if (h0 + ib >= G) return;
    const int h = g * G + h0 + ib;
    const float l = ls[ib], inv = 1.0f / l;
    float* o = part + (((long)b * NH + h) * nsplit + split) * (HD + 1);
#pragma unroll
    for (int m = 0; m < FA_CPT; m++) {
        const int c = sub + 8 * m;
        if (c < HD) o[c] = acc[m] * inv;
    }
    if (sub == 0) o[HD] = ms[ib] + logf(l);
}

// Combines the splits of each (b, h): out = sum_s w_s o_s / sum_s w_s with
// w_s = exp(lse_s - max lse). A bad position zeroes the row (the store
// kernel raised the error). One warp per (b, h); grid ceil(B*NH/4), block 128.
extern "C" __global__ void __launch_bounds__(128)
    flash_decode_combine(float* __restrict__ out, const float* __restrict__ part, const int* __restrict__ pos,
                         int B, int maxT, int NH, int HD, int chunk, int nsplit) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const long bh = (long)blockIdx.x * 4 + warp;
    if (bh >= (long)B * NH) return;  // whole warp
    const int p = pos[bh / NH];
    float* o = out + bh * HD;
    if (p < 0 || p >= maxT) {
        for (int c = lane; c < HD; c += WARP_SIZE) o[c] = 0.0f;
        return;
    }
    const int ns = p / chunk + 1;
    const float* pb = part + bh * nsplit * (HD + 1);
    float mx = NEG_INF;
    for (int s = 0; s < ns; s++) mx = fmaxf(mx, pb[(long)s * (HD + 1) + HD]);
    float wsum = 0.0f;
    for (int s = 0; s < ns; s++) wsum += expf(pb[(long)s * (HD + 1) + HD] - mx);
    const float inv = 1.0f / wsum;
    for (int c = lane; c < HD; c += WARP_SIZE) {
        float a = 0.0f;
        for (int s = 0; s < ns; s++) a += expf(pb[(long)s * (HD + 1) + HD] - mx) * pb[(long)s * (HD + 1) + c];
        o[c] = a * inv;
    }
}
