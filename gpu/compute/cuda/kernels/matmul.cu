// matmul.cu: tiled shared-memory matrix multiply for the three directions of
// a Linear layer (forward, input gradient, weight gradient), the bias
// gradient, and a bf16-storage forward.
//
// All three directions are one generic kernel body computing
//   Cm[m,n] (=|+=) sum_k A(m,k) * B(k,n)   (+ bias[n])
// where A(m,k) = A[m*sam + k*sak] and B(k,n) = B[k*sbk + n*sbn], so the
// transposes of the backward passes are just different strides. A block of
// 16x16 threads computes a 64x64 tile of Cm, each thread a 4x4 register
// block; K advances in slices of 16 staged in shared memory. Global loads
// pick the thread->element mapping whose stride is 1 so they coalesce.
// Float32 accumulation throughout.
#include "common.cuh"

#define MM_BM 64
#define MM_BN 64
#define MM_BK 16
#define MM_T 16   // threads per block side (16x16 = 256 threads)
#define MM_R 4    // outputs per thread per side (MM_BM / MM_T)
#define MM_PAD 4  // shared-memory row padding against bank conflicts

template <typename TA, typename TB>
__device__ __forceinline__ void matmul_tile(float* __restrict__ Cm, const TA* __restrict__ A,
                                            const TB* __restrict__ Bm, const float* __restrict__ bias,
                                            int M, int N, int K, long sam, long sak, long sbk, long sbn,
                                            long ldc, int accumulate) {
    __shared__ float As[MM_BK][MM_BM + MM_PAD];  // As[k][m]
    __shared__ float Bs[MM_BK][MM_BN + MM_PAD];  // Bs[k][n]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * MM_T + tx;
    const int m0 = blockIdx.y * MM_BM, n0 = blockIdx.x * MM_BN;
    float acc[MM_R][MM_R];
#pragma unroll
    for (int i = 0; i < MM_R; i++)
#pragma unroll
        for (int j = 0; j < MM_R; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += MM_BK) {
        // Stage A(m0.., k0..) and B(k0.., n0..): 1024 elements each, 4 per thread.
#pragma unroll
        for (int r = 0; r < (MM_BK * MM_BM) / (MM_T * MM_T); r++) {
            int e = tid + r * MM_T * MM_T;
            int kk, mm;
            if (sak == 1) { kk = e % MM_BK; mm = e / MM_BK; }
            else          { mm = e % MM_BM; kk = e / MM_BM; }
            int gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < K) ? load_f(A, gm * sam + gk * sak) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < (MM_BK * MM_BN) / (MM_T * MM_T); r++) {
            int e = tid + r * MM_T * MM_T;
            int kk, nn;
            if (sbn == 1) { nn = e % MM_BN; kk = e / MM_BN; }
            else          { kk = e % MM_BK; nn = e / MM_BK; }
            int gn = n0 + nn, gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < K) ? load_f(Bm, gk * sbk + gn * sbn) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MM_BK; kk++) {
            float a[MM_R], b[MM_R];
#pragma unroll
            for (int i = 0; i < MM_R; i++) a[i] = As[kk][ty + i * MM_T];
#pragma unroll
            for (int j = 0; j < MM_R; j++) b[j] = Bs[kk][tx + j * MM_T];
#pragma unroll
            for (int i = 0; i < MM_R; i++)
#pragma unroll
                for (int j = 0; j < MM_R; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // before the next slice overwrites the tiles
    }
#pragma unroll
    for (int i = 0; i < MM_R; i++) {
        int m = m0 + ty + i * MM_T;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < MM_R; j++) {
            int n = n0 + tx + j * MM_T;
            if (n >= N) continue;
            float v = acc[i][j];
            if (bias != 0) v += bias[n];
            long o = (long)m * ldc + n;
            if (accumulate) Cm[o] += v;
            else Cm[o] = v;
        }
    }
}

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC, may be null).
// Grid (ceil(OC/64), ceil(N/64)), block (16,16).
extern "C" __global__ void __launch_bounds__(256) matmul_forward(float* out, const float* inp, const float* weight,
                                                                 const float* bias, int N, int C, int OC) {
    matmul_tile<float, float>(out, inp, weight, bias, N, OC, C, C, 1, 1, C, OC, 0);
}

// bf16 storage path: inp and weight are bf16 (half the bytes to move; the
// weights come from adamw_bf16's copy of the fp32 master weights), products
// and sums are float32, out is float32. Same grid as matmul_forward.
extern "C" __global__ void __launch_bounds__(256) matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight,
                                                                      const float* bias, int N, int C, int OC) {
    matmul_tile<bf16, bf16>(out, inp, weight, bias, N, OC, C, C, 1, 1, C, OC, 0);
}

// dinp (N,C) += dout (N,OC) @ weight (OC,C). Grid (ceil(C/64), ceil(N/64)).
extern "C" __global__ void __launch_bounds__(256) matmul_backward_input(float* dinp, const float* dout,
                                                                        const float* weight, int N, int C, int OC) {
    matmul_tile<float, float>(dinp, dout, weight, 0, N, C, OC, OC, 1, C, 1, C, 1);
}

// dweight (OC,C) += dout^T (OC,N) @ inp (N,C). Grid (ceil(C/64), ceil(OC/64)).
extern "C" __global__ void __launch_bounds__(256) matmul_backward_weight(float* dweight, const float* dout,
                                                                         const float* inp, int N, int C, int OC) {
    matmul_tile<float, float>(dweight, dout, inp, 0, OC, C, N, 1, OC, C, 1, C, 1);
}

// dbias[o] += sum_n dout[n,o]. Block (32,8): 32 columns per block, the 8 rows
// of threads stride over N and are summed through shared memory.
// Grid ceil(OC/32).
extern "C" __global__ void matmul_backward_bias(float* dbias, const float* dout, int N, int OC) {
    __shared__ float part[8][33];
    int o = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (o < OC)
        for (int n = threadIdx.y; n < N; n += blockDim.y) s += dout[(long)n * OC + o];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float t = 0.0f;
        for (int r = 0; r < (int)blockDim.y; r++) t += part[r][threadIdx.x];
        dbias[o] += t;
    }
}
