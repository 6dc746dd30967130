// layernorm.cu: LayerNorm over the last axis (eps 1e-5), forward and backward.
// One block per row; blockDim.x is a multiple of 32 and threads stride the C
// channels, so any C works.
#include "common.cuh"

// out = (x - mean) * rstd * weight + bias for each of N rows of inp (N,C);
// mean, rstd (N) are saved for the backward.
extern "C" __global__ void layernorm_forward(float* __restrict__ out, float* __restrict__ mean,
                                             float* __restrict__ rstd, const float* __restrict__ inp,
                                             const float* __restrict__ weight, const float* __restrict__ bias,
                                             int N, int C) {
    __shared__ float scratch[32];
    int row = blockIdx.x;
    if (row >= N) return;  // whole block leaves together
    const float* x = inp + (long)row * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    float m = block_sum(s, scratch) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = x[c] - m;
        v += d * d;
    }
    float r = rsqrtf(block_sum(v, scratch) / C + 1e-5f);
    float* o = out + (long)row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// Accumulates dinp (N,C), dweight (C), dbias (C). Per row, with
// norm = (x-mean)*rstd and dnorm = weight*dout:
//   dinp += (dnorm - mean(dnorm) - norm*mean(dnorm*norm)) * rstd
// dweight and dbias are summed over rows with atomics (one add per row and
// channel); dinp rows belong to one block each.
extern "C" __global__ void layernorm_backward(float* __restrict__ dinp, float* dweight, float* dbias,
                                              const float* __restrict__ dout, const float* __restrict__ inp,
                                              const float* __restrict__ weight, const float* __restrict__ mean,
                                              const float* __restrict__ rstd, int N, int C) {
    __shared__ float scratch[32];
    int row = blockIdx.x;
    if (row >= N) return;
    const float* x = inp + (long)row * C;
    const float* dy = dout + (long)row * C;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (x[c] - m) * r;
        float dnorm = weight[c] * dy[c];
        a += dnorm;
        b += dnorm * norm;
    }
    float dnorm_mean = block_sum(a, scratch) / C;
    float dnorm_norm_mean = block_sum(b, scratch) / C;
    float* dx = dinp + (long)row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (x[c] - m) * r;
        float d = dy[c];
        float dnorm = weight[c] * d;
        if (dinp != 0) dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        if (dweight != 0) atomicAdd(&dweight[c], norm * d);
        if (dbias != 0) atomicAdd(&dbias[c], d);
    }
}
