// fused.cu: kernels that do in one pass over memory what the Backend
// contract does in several (compute's optional capabilities in
// gpu/compute/fused.go): residual add + RMSNorm, RoPE on q and k (after
// Qwen3's per-head RMSNorm), loss heads with an online log-sum-exp, and
// AdamW over many tensors in one launch.
#include "common.cuh"

// res = a + b, then RMSNorm of res into out, one block per row: each thread
// reads back only the elements it wrote, so res may alias a or b.
extern "C" __global__ void residual_rmsnorm_forward(float* res, float* __restrict__ out, float* __restrict__ rstd,
                                                    const float* a, const float* b,
                                                    const float* __restrict__ weight, int N, int C, float eps) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    if (row >= N) return;  // whole block
    const long off = (long)row * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float x = a[off + c] + b[off + c];
        res[off + c] = x;
        ss += x * x;
    }
    const float r = rsqrtf(block_sum(ss, scratch) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[off + c] = res[off + c] * r * weight[c];
    if (threadIdx.x == 0) rstd[row] = r;
}

// Rotates the pair (x[i], x[i+half]) by position p (HF rotate_half, sign -1
// for the backward's inverse rotation).
__device__ __forceinline__ void rope_pair(float* x, int i, int half, float c, float s) {
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
}

// RoPE on q (N,NH,HD) and k (N,KVH,HD) in place, one thread per (row, head
// of q or k, i < HD/2), grid-stride. A position outside [0,maxPos) leaves
// the row unchanged and raises TROUPE_ERR_ROPE_POS.
extern "C" __global__ void rope_qk(float* q, float* k, const int* __restrict__ pos, const float* __restrict__ cosv,
                                   const float* __restrict__ sinv, int N, int NH, int KVH, int HD, int maxPos,
                                   float sign, unsigned int* err) {
    const int half = HD / 2, H = NH + KVH;
    const long total = (long)N * H * half;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const long nh = idx / half, n = nh / H;
        const int h = (int)(nh % H);
        const int p = pos[n];
        if (p < 0 || p >= maxPos) {
            if (i == 0 && h == 0) atomicOr(err, TROUPE_ERR_ROPE_POS);
            continue;
        }
        float* x = (h < NH) ? q + (n * NH + h) * HD : k + (n * KVH + (h - NH)) * HD;
        rope_pair(x, i, half, cosv[(long)p * half + i], sign * sinv[(long)p * half + i]);
    }
}

// Qwen3's per-head RMSNorm then RoPE: one warp per (row, head) of HD
// values; out = rotate(x*rstd*weight). A bad position still normalises
// (RMSNormForward then RopeForward would) but leaves the rotation out and
// raises TROUPE_ERR_ROPE_POS. Grid ceil(N*H/4), block 128.
extern "C" __global__ void __launch_bounds__(128)
    head_norm_rope_forward(float* __restrict__ out, float* __restrict__ rstd, const float* __restrict__ inp,
                           const float* __restrict__ weight, const int* __restrict__ pos,
                           const float* __restrict__ cosv, const float* __restrict__ sinv, int N, int H, int HD,
                           int maxPos, float eps, unsigned int* err) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const long nh = (long)blockIdx.x * 4 + warp;
    if (nh >= (long)N * H) return;  // whole warp
    const float* x = inp + nh * HD;
    float* o = out + nh * HD;
    float ss = 0.0f;
    for (int c = lane; c < HD; c += WARP_SIZE) ss += x[c] * x[c];
    const float r = rsqrtf(warp_sum(ss) / HD + eps);
    if (lane == 0) rstd[nh] = r;
    const int p = pos[nh / H], half = HD / 2;
    const bool ok = p >= 0 && p < maxPos;
    if (!ok && lane == 0 && nh % H == 0) atomicOr(err, TROUPE_ERR_ROPE_POS);
    for (int i = lane; i < half; i += WARP_SIZE) {
        const float a = x[i] * r * weight[i], b = x[i + half] * r * weight[i + half];
        if (ok) {
            const float c = cosv[(long)p * half + i], s = sinv[(long)p * half + i];
            o[i] = a * c - b * s;
            o[i + half] = b * c + a * s;
        } else {
            o[i] = a;
            o[i + half] = b;
        }
    }
}

// Online log-sum-exp of one row per block: each thread keeps a running max
// and a sum rescaled to it, in one read of the row; the block then merges
// the threads' pairs. out[n] = sign * (lse - logits[n,target]) (sign +1:
// cross-entropy, -1: log-prob). A target outside [0,V) zeroes out[n] and
// raises TROUPE_ERR_TOKEN. Grid N, block a multiple of 32.
extern "C" __global__ void lse_loss_forward(float* __restrict__ out, float* __restrict__ lse,
                                            const float* __restrict__ logits, const int* __restrict__ targets, int N,
                                            int V, float sign, unsigned int* err) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    if (row >= N) return;
    const float* x = logits + (long)row * V;
    float m = NEG_INF, s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float xv = x[v];
        if (xv > m) {
            s = s * expf(m - xv) + 1.0f;  // exp(-inf) = 0 on the first element
            m = xv;
        } else if (m != NEG_INF) {  // (both -inf: exp(-inf) contributes nothing)
            s += expf(xv - m);
        }
    }
    const float M = block_max(m, scratch);
    const float S = block_sum(m == NEG_INF ? 0.0f : s * expf(m - M), scratch);
    if (threadIdx.x == 0) {
        const float l = M + logf(S);
        lse[row] = l;
        const int tgt = targets[row];
        if (tgt >= 0 && tgt < V) {
            out[row] = sign * (l - x[tgt]);
        } else {
            out[row] = 0.0f;
            atomicOr(err, TROUPE_ERR_TOKEN);
        }
    }
}

// dlogits[n,v] (+)= sign * (exp(logits[n,v] - lse[n]) - [v==targets[n]]) *
// dl[n], grid-stride over N*V (no reductions left: the forward's lse is
// the softmax's denominator). With dlogits == logits the gradient replaces
// the logits in place. A bad target skips its row (the forward raised the
// error; the flag is raised again for a backward on its own).
extern "C" __global__ void lse_loss_backward(float* dlogits, const float* logits, const float* __restrict__ lse,
                                             const float* __restrict__ dl, const int* __restrict__ targets, int N,
                                             int V, float sign, unsigned int* err) {
    const long total = (long)N * V;
    const bool replace = dlogits == logits;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
        const long n = idx / V;
        const int v = (int)(idx % V), tgt = targets[n];
        if (tgt < 0 || tgt >= V) {
            if (v == 0) atomicOr(err, TROUPE_ERR_TOKEN);
            continue;
        }
        const float g = sign * (expf(logits[idx] - lse[n]) - (v == tgt ? 1.0f : 0.0f)) * dl[n];
        dlogits[idx] = replace ? g : dlogits[idx] + g;
    }
}

// One tensor of adamw_multi's table (Go: fusedAdamEntry, 7 words).
struct AdamWEntry {
    float* p;
    const float* g;
    float* m;
    float* v;
    long long start;  // first element in the concatenation of all tensors
    long long n;
    long long decay;  // nonzero: apply the weight decay
};

// AdamW on many tensors in one launch: element x of the concatenation
// belongs to the last tensor whose start is <= x (binary search over the
// table, sorted by start). The step is adamw_update's (optim.cu), so the
// results are bit for bit those of one adamw_update per tensor.
extern "C" __global__ void adamw_multi(const AdamWEntry* __restrict__ table, int ntensors, long long total,
                                       float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                                       float gscale) {
    for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < total;
         x += (long long)gridDim.x * blockDim.x) {
        int lo = 0, hi = ntensors - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (table[mid].start <= x) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        const AdamWEntry e = table[lo];
        const long long i = x - e.start;
        const float g = e.g[i] * gscale;
        const float mi = b1 * e.m[i] + (1.0f - b1) * g;
        const float vi = b2 * e.v[i] + (1.0f - b2) * g * g;
        e.m[i] = mi;
        e.v[i] = vi;
        const float mhat = mi / bc1, vhat = vi / bc2, p = e.p[i];
        e.p[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + (e.decay ? wd : 0.0f) * p);
    }
}

// SwiGLU on a packed gate/up projection gu (N,2I): out[n,i] =
// silu(gu[n,i]) * gu[n,I+i] (as swiglu_forward in decoder.cu), grid-stride
// over N*I.
extern "C" __global__ void swiglu_packed_forward(float* __restrict__ out, const float* __restrict__ gu, int N,
                                                 int I) {
    const long total = (long)N * I;
    for (long x = (long)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const long n = x / I, i = x % I;
        const float g = gu[2 * n * I + i], u = gu[2 * n * I + I + i];
        const float s = 1.0f / (1.0f + expf(-g));
        out[x] = g * s * u;
    }
}

// dgu's gate half += dout*up*silu'(g), its up half += dout*silu(g)
// (swiglu_backward's formulas), grid-stride over N*I.
extern "C" __global__ void swiglu_packed_backward(float* __restrict__ dgu, const float* __restrict__ dout,
                                                  const float* __restrict__ gu, int N, int I) {
    const long total = (long)N * I;
    for (long x = (long)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const long n = x / I, i = x % I, gi = 2 * n * I + i, ui = gi + I;
        const float g = gu[gi], u = gu[ui], d = dout[x];
        const float s = 1.0f / (1.0f + expf(-g));
        dgu[gi] += d * u * s * (1.0f + g * (1.0f - s));
        dgu[ui] += d * g * s;
    }
}
