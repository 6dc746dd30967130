// loss.cu: softmax + cross-entropy and the log-softmax gather (log-probs of
// chosen tokens), forward and fused backward. One block per row of V logits;
// blockDim.x is a multiple of 32; threads stride the vocabulary.
#include "common.cuh"

// Shared body: probs = softmax(logits row) and out = sign * log p[target],
// computed as logit[target] - max - log(sum exp). probs may alias logits:
// logit[target] is read before the first barrier, and every read of the row
// by this block happens before the final pass that overwrites it.
__device__ __forceinline__ void softmax_gather_row(float* __restrict__ out, float* probs, const float* logits,
                                                   const int* __restrict__ targets, int N, int V, float sign,
                                                   unsigned int* err) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    if (row >= N) return;
    const float* x = logits + (long)row * V;
    const int tgt = targets[row];
    const bool ok = tgt >= 0 && tgt < V;
    float xt = 0.0f;
    if (threadIdx.x == 0 && ok) xt = x[tgt];
    float mx = NEG_INF;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, x[v]);
    mx = block_max(mx, scratch);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(x[v] - mx);
    s = block_sum(s, scratch);  // ends with a barrier: all reads of x are done
    const float inv = 1.0f / s;
    float* p = probs + (long)row * V;
    for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] = expf(x[v] - mx) * inv;
    if (threadIdx.x == 0) {
        if (ok) {
            out[row] = sign * (xt - mx - logf(s));
        } else {
            out[row] = 0.0f;
            atomicOr(err, TROUPE_ERR_TOKEN);
        }
    }
}

// losses[n] = -log softmax(logits[n])[targets[n]]; probs (N,V) = softmax.
// Grid N, block 128.
extern "C" __global__ void crossentropy_forward(float* losses, float* probs, const float* logits,
                                                const int* targets, int N, int V, unsigned int* err) {
    softmax_gather_row(losses, probs, logits, targets, N, V, -1.0f, err);
}

// logp[n] = log softmax(logits[n])[targets[n]]; probs (N,V) = softmax.
// Grid N, block 128.
extern "C" __global__ void logprob_forward(float* logp, float* probs, const float* logits, const int* targets,
                                           int N, int V, unsigned int* err) {
    softmax_gather_row(logp, probs, logits, targets, N, V, 1.0f, err);
}

// dlogits[n,v] += sign * (probs[n,v] - [v==targets[n]]) * dl[n].
// Cross-entropy uses sign +1 with dl = dlosses; the log-prob gather uses
// sign -1 with dl = dlogp. Grid N, block 128.
__device__ __forceinline__ void softmax_gather_backward_row(float* __restrict__ dlogits, const float* __restrict__ probs,
                                                            const float* __restrict__ dl,
                                                            const int* __restrict__ targets, int N, int V,
                                                            float sign, unsigned int* err) {
    const int row = blockIdx.x;
    if (row >= N) return;
    const int tgt = targets[row];
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    const float d = sign * dl[row];
    const float* p = probs + (long)row * V;
    float* g = dlogits + (long)row * V;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float ind = (v == tgt) ? 1.0f : 0.0f;
        g[v] += (p[v] - ind) * d;
    }
}

extern "C" __global__ void crossentropy_backward(float* dlogits, const float* probs, const float* dlosses,
                                                 const int* targets, int N, int V, unsigned int* err) {
    softmax_gather_backward_row(dlogits, probs, dlosses, targets, N, V, 1.0f, err);
}

extern "C" __global__ void logprob_backward(float* dlogits, const float* probs, const float* dlogp,
                                            const int* targets, int N, int V, unsigned int* err) {
    softmax_gather_backward_row(dlogits, probs, dlogp, targets, N, V, -1.0f, err);
}
