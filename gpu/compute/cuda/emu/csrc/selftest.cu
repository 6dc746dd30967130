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
