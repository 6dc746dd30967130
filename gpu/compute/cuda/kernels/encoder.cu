// encoder.cu: token + position embedding, forward and backward.
#include "common.cuh"

// out[b,t,c] = wte[inp[b,t],c] + wpe[t,c]; one thread per output element.
// Ids outside [0,V) leave the row at 0 and raise TROUPE_ERR_TOKEN in *err.
extern "C" __global__ void encoder_forward(float* __restrict__ out, const int* __restrict__ inp,
                                           const float* __restrict__ wte, const float* __restrict__ wpe,
                                           int B, int T, int C, int V, unsigned int* err) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long total = (long)B * T * C;
    if (idx >= total) return;
    long bt = idx / C;
    int c = (int)(idx % C);
    int t = (int)(bt % T);
    int tok = inp[bt];
    if (tok < 0 || tok >= V) {
        out[idx] = 0.0f;
        if (c == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    out[idx] = wte[(long)tok * C + c] + wpe[(long)t * C + c];
}

// dwte[inp[b,t],c] += dout[b,t,c]; dwpe[t,c] += dout[b,t,c] (dwpe may be
// null). Several positions can hold the same token, so dwte uses atomics;
// dwpe rows are shared by the B batch rows, so it uses atomics as well.
extern "C" __global__ void encoder_backward(float* dwte, float* dwpe, const float* __restrict__ dout,
                                            const int* __restrict__ inp, int B, int T, int C, int V,
                                            unsigned int* err) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long total = (long)B * T * C;
    if (idx >= total) return;
    long bt = idx / C;
    int c = (int)(idx % C);
    int t = (int)(bt % T);
    int tok = inp[bt];
    float d = dout[idx];
    if (tok < 0 || tok >= V) {
        if (c == 0) atomicOr(err, TROUPE_ERR_TOKEN);
        return;
    }
    atomicAdd(&dwte[(long)tok * C + c], d);
    if (dwpe != 0) atomicAdd(&dwpe[(long)t * C + c], d);
}
