// decoder.cu: the pointwise and per-row ops of the Llama/Qwen decoder family
// (gpu.DecoderBackend): position-free embedding, RMSNorm, rotary position
// embeddings (HF rotate_half) and SwiGLU. Attention is in flash_attn.cu.
#include "common.cuh"

// out[n,c] = wte[inp[n],c]; one thread per output element. Ids outside
// [0,V) leave the row at 0 and raise TROUPE_ERR_TOKEN in *err.
extern "C" __global__ void embed_forward(float* __restrict__ out, const int* __restrict__ inp,
                                         const float* __restrict__ wte, int N, int C, int V, unsigned int* err) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)N * C) return;
    long n = idx / C;
    int c = (int)(idx % C);
    int tok = inp[n];
    if (tok < 0 || tok >= V) {
        out[idx] = 0.0f;
        if (c == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    out[idx] = wte[(long)tok * C + c];
}

// dwte[inp[n],c] += dout[n,c]. Several rows can hold the same token, so the
// scatter uses atomics.
extern "C" __global__ void embed_backward(float* dwte, const float* __restrict__ dout, const int* __restrict__ inp,
                                          int N, int C, int V, unsigned int* err) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)N * C) return;
    long n = idx / C;
    int c = (int)(idx % C);
    int tok = inp[n];
    if (tok < 0 || tok >= V) {
        if (c == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    atomicAdd(&dwte[(long)tok * C + c], dout[idx]);
}

// RMSNorm of each of N rows of inp (N,C): rstd = 1/sqrt(mean(x^2)+eps),
// out = x*rstd*weight; rstd (N) is saved for the backward. One block per
// row (as layernorm.cu); threads stride the channels, so any C works.
extern "C" __global__ void rmsnorm_forward(float* __restrict__ out, float* __restrict__ rstd,
                                           const float* __restrict__ inp, const float* __restrict__ weight, int N,
                                           int C, float eps) {
    __shared__ float scratch[32];
    int row = blockIdx.x;
    if (row >= N) return;  // whole block leaves together
    const float* x = inp + (long)row * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    float r = rsqrtf(block_sum(ss, scratch) / C + eps);
    float* o = out + (long)row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * r * weight[c];
    if (threadIdx.x == 0) rstd[row] = r;
}

// With y_i = x_i*r*w_i and r = (mean(x^2)+eps)^-1/2, dr/dx_j = -r^3 x_j/C:
//   dinp_j += r*w_j*g_j - r^3 x_j/C * sum_i g_i*w_i*x_i
//   dweight_j += g_j*x_j*r (summed over rows with atomics; may be null)
extern "C" __global__ void rmsnorm_backward(float* __restrict__ dinp, float* dweight, const float* __restrict__ dout,
                                            const float* __restrict__ inp, const float* __restrict__ weight,
                                            const float* __restrict__ rstd, int N, int C) {
    __shared__ float scratch[32];
    int row = blockIdx.x;
    if (row >= N) return;
    const float* x = inp + (long)row * C;
    const float* g = dout + (long)row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += g[c] * weight[c] * x[c];
    const float k = r * r * r * block_sum(dot, scratch) / C;
    float* dx = dinp + (long)row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float gc = g[c], xc = x[c];
        dx[c] += r * weight[c] * gc - k * xc;
        if (dweight != 0) atomicAdd(&dweight[c], gc * xc * r);
    }
}

// Rotates each head of x (N,H,HD) in place by its row's position (HF
// rotate_half): for i < HD/2, with c = cos[p,i], s = sign*sin[p,i],
//   x[i] = x[i]*c - x[i+HD/2]*s,  x[i+HD/2] = x[i+HD/2]*c + x[i]*s.
// One thread per (row, head, i) pair, grid-stride. A position outside
// [0,maxPos) leaves the row unchanged and raises TROUPE_ERR_ROPE_POS.
__device__ __forceinline__ void rope_apply(float* x, const int* pos, const float* cosv, const float* sinv, int N,
                                           int H, int HD, int maxPos, float sign, unsigned int* err) {
    const int half = HD / 2;
    const long total = (long)N * H * half;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const long nh = idx / half;
        const long n = nh / H;
        const int p = pos[n];
        if (p < 0 || p >= maxPos) {
            if (i == 0 && nh % H == 0) atomicOr(err, TROUPE_ERR_ROPE_POS);
            continue;
        }
        const float c = cosv[(long)p * half + i], s = sign * sinv[(long)p * half + i];
        float* v = x + nh * HD;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

extern "C" __global__ void rope_forward(float* x, const int* __restrict__ pos, const float* __restrict__ cosv,
                                        const float* __restrict__ sinv, int N, int H, int HD, int maxPos,
                                        unsigned int* err) {
    rope_apply(x, pos, cosv, sinv, N, H, HD, maxPos, 1.0f, err);
}

// The gradient of a rotation is the inverse rotation (s -> -s), in place.
extern "C" __global__ void rope_backward(float* dx, const int* __restrict__ pos, const float* __restrict__ cosv,
                                         const float* __restrict__ sinv, int N, int H, int HD, int maxPos,
                                         unsigned int* err) {
    rope_apply(dx, pos, cosv, sinv, N, H, HD, maxPos, -1.0f, err);
}

// out[i] = silu(gate[i]) * up[i], silu(x) = x/(1+exp(-x)). out may alias
// gate or up (each element is read before it is written).
extern "C" __global__ void swiglu_forward(float* out, const float* gate, const float* up, int N) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        float g = gate[i];
        float s = 1.0f / (1.0f + expf(-g));
        out[i] = g * s * up[i];
    }
}

// dgate[i] += dout*up*silu'(g), silu'(g) = s*(1 + g*(1-s)); dup[i] += dout*silu(g).
extern "C" __global__ void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                                           const float* up, int N) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        float g = gate[i], d = dout[i];
        float s = 1.0f / (1.0f + expf(-g));
        dgate[i] += d * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] += d * g * s;
    }
}
