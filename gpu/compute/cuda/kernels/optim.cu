// optim.cu: AdamW (fp32, and fp32 master weights with a bf16 copy) and the
// sum of squares behind global gradient-norm clipping.
#include "common.cuh"

// One AdamW step on element i; returns the new parameter. bc1 = 1-b1^step,
// bc2 = 1-b2^step are computed on the host.
__device__ __forceinline__ float adamw_step(float p, float g, float* m, float* v, long i, float lr, float b1,
                                            float b2, float eps, float wd, float bc1, float bc2, float gscale) {
    g *= gscale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

// params -= lr * (mhat/(sqrt(vhat)+eps) + wd*params), grads scaled by gscale.
extern "C" __global__ void adamw_update(float* params, const float* grads, float* m, float* v, int N, float lr,
                                        float b1, float b2, float eps, float wd, float bc1, float bc2,
                                        float gscale) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        params[i] = adamw_step(params[i], grads[i], m, v, i, lr, b1, b2, eps, wd, bc1, bc2, gscale);
    }
}

// bf16 path: the fp32 master weights are updated as in adamw_update and the
// bf16 copy the forward reads (matmul_forward_bf16) is refreshed from them,
// rounded to nearest even. Keeping the master in fp32 stops small updates
// from vanishing below bf16's 8-bit mantissa.
extern "C" __global__ void adamw_update_bf16(float* master, bf16* params, const float* grads, float* m, float* v,
                                             int N, float lr, float b1, float b2, float eps, float wd, float bc1,
                                             float bc2, float gscale) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        float p = adamw_step(master[i], grads[i], m, v, i, lr, b1, b2, eps, wd, bc1, bc2, gscale);
        master[i] = p;
        params[i] = float_to_bf16(p);
    }
}

// *out += sum_i x[i]^2, accumulated in double: per thread over a grid-stride
// loop, then across the warp with shuffles, across the block through shared
// memory, and across blocks with one double atomicAdd per block (sm_60+).
// The host zeroes *out first. blockDim.x is a multiple of 32.
extern "C" __global__ void sum_squares(double* out, const float* x, int N) {
    __shared__ double part[32];
    double s = 0.0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        double xi = (double)x[i];
        s += xi * xi;
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    s = warp_sum_d(s);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = (lane < (int)(blockDim.x / WARP_SIZE)) ? part[lane] : 0.0;
        s = warp_sum_d(s);
        if (lane == 0) atomicAdd(out, s);
    }
}
