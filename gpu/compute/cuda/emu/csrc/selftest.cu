// selftest.cu: a kernel exercising the emulator's intrinsics that troupe's
// kernels use rarely or not at all (barrier after early exit, shuffles up /
// indexed, ballot, shared memory per block). Compiled only into the test
// emulator; emu_selftest_test.go checks its output.
#define SELFTEST_FULL 0xffffffffu

// out: 6 ints per thread. Threads with threadIdx.x >= n_active leave before
// the last barrier; the others count themselves in shared memory.
extern "C" __global__ void emu_selftest(int* out, int n_active) {
    __shared__ int s[1024];
    __shared__ int cnt;
    const int t = threadIdx.x, lane = t % 32;
    int* o = out + (blockIdx.x * blockDim.x + t) * 6;
    s[t] = t + blockIdx.x * 1000;
    __syncthreads();
    o[0] = s[blockDim.x - 1 - t];  // another thread's write: needs the barrier
    o[1] = __shfl_down_sync(SELFTEST_FULL, lane, 3);
    o[2] = __shfl_up_sync(SELFTEST_FULL, lane, 2);
    o[3] = __shfl_sync(SELFTEST_FULL, lane * 10, 5);
    o[4] = (int)__ballot_sync(SELFTEST_FULL, lane % 3 == 0);
    if (t == 0) cnt = 0;
    __syncthreads();
    if (t >= n_active) return;  // exited threads no longer count at barriers
    atomicAdd(&cnt, 1);
    __syncthreads();
    o[5] = cnt;
}

// emu_selftest_tc: the tensor-core collectives of kernels/mma.cuh on one
// warp. out: 20 words per lane: ldmatrix x1, x2, x4 (words 0-6), the same
// with .trans (7-13), of a 16x16 tile of b16 values r*16+c whose 8x8
// matrices j (rows 8(j/2).., cols 8(j%2)..) lanes 8j..8j+7 address; then
// cp.async groups (14-17) and pack_bf16x2 of two ties (18). in: 64 words.
#include "mma.cuh"
extern "C" __global__ void emu_selftest_tc(unsigned* out, const unsigned* in) {
    alignas(16) __shared__ unsigned short tile[16][16];  // rows of 32 bytes, not swizzled: ldmatrix phases conflict
    __shared__ unsigned s2[32], s3[32], s4[32];
    const int l = threadIdx.x;
    unsigned* o = out + l * 20;
    for (int i = l; i < 256; i += 32) tile[i / 16][i % 16] = (unsigned short)i;
    s2[l] = s3[l] = s4[l] = 7;
    __syncthreads();
    const int j = l / 8;
    const unsigned short* row = &tile[(j >= 2 ? 8 : 0) + l % 8][(j & 1) * 8];
    ldmatrix_x1(o + 0, row);
    ldmatrix_x2(o + 1, row);
    ldmatrix_x4(o + 3, row);
    ldmatrix_x1_trans(o + 7, row);
    ldmatrix_x2_trans(o + 8, row);
    ldmatrix_x4_trans(o + 10, row);
    cp_async4(&s2[l], &in[l], 4);
    cp_async_commit();
    cp_async4(&s3[l], &in[32 + l], 4);
    cp_async4(&s4[l], &in[32 + l], 0);  // zero-fill
    cp_async_commit();
    cp_async_wait<1>();  // the first group only
    o[14] = s2[l];
    o[15] = s3[l];
    cp_async_wait<0>();
    o[16] = s3[l];
    o[17] = s4[l];
    // 1 + 2^-8 ties to 1.0 (even); 1 + 3*2^-8 ties up to 1 + 2^-6.
    o[18] = pack_bf16x2(1.00390625f, 1.01171875f);
    o[19] = 0;
}
