// cuda_emu.h: a small CUDA emulation layer that lets troupe's unchanged
// kernel sources (gpu/compute/cuda/kernels/*.cu) compile as C++20 with g++ and run on
// the CPU. It is a test tool (Go build tag `cudaemu`), never a backend.
//
// Execution model (see emu_runtime.cpp):
//   * A launch runs its blocks one after another. Each block runs with one
//     std::thread per CUDA thread; the same OS threads are reused for every
//     block of the launch.
//   * threadIdx, blockIdx, blockDim, gridDim are thread_local variables set
//     by the runtime before each block.
//   * __shared__ is defined as `static`. Kernels declare shared memory as
//     function-local arrays, so `static` gives one copy per kernel that all
//     threads of the running block see; because blocks run strictly one at
//     a time (the runtime joins every thread of block k at a barrier before
//     block k+1 starts) that single copy is exactly "one per block". Like
//     CUDA, it is uninitialised from the kernel's point of view (it keeps
//     the previous block's contents). Dynamic (extern) shared memory is not
//     supported; troupe's kernels do not use it.
//   * __syncthreads is a std::barrier over the block's threads. A thread
//     that returns from the kernel early drops out of the barrier
//     (arrive_and_drop), matching CUDA where exited threads no longer count.
//   * Each warp (32 consecutive linear thread ids) has its own barrier and a
//     32-slot exchange array (double-buffered). A shuffle writes the lane's
//     value to its slot, waits on the warp barrier and reads the source
//     lane's slot; successive collectives alternate between two slot sets
//     so nobody overwrites a slot another lane has yet to read. Votes
//     (__ballot_sync etc.) work the same way. All lanes named in the mask must take part, as in CUDA; the
//     emulator checks that the mask covers the calling lane.
//   * Atomics are std::atomic_ref operations on the target word.
//   * Math functions map to <cmath>; bit casts to std::memcpy.
#pragma once

// TROUPE_EMU tells the kernels (kernels/mma.cuh) to call the emulated
// tensor-core collectives instead of inline PTX.
#define TROUPE_EMU 1

#include <math.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

// Warp holds the exchange slots and barrier of one warp of the running block.
struct Warp {
    std::barrier<>* bar = nullptr;
    int lanes = 32;  // 32, or fewer for the last warp of an odd-sized block
    // Two slot sets used alternately by successive collectives, so one
    // barrier phase per shuffle suffices: a lane can only overwrite set p
    // after the next collective's barrier, which every lane reaches only
    // once it has finished reading set p.
    alignas(64) uint64_t slots[2][32];
    // Fragment exchange of the tensor-core collectives (mma.sync publishes
    // its A and B registers, ldmatrix its row address), on the same parity
    // scheme as slots.
    uint32_t frags[2][32][6];
    const void* ptrs[2][32];
};

// ThreadCtx is the per-OS-thread state of the CUDA thread it plays.
struct ThreadCtx {
    int lane = 0;
    int parity = 0;  // slot set of the next warp collective
    Warp* warp = nullptr;
    std::barrier<>* block_bar = nullptr;
};

extern thread_local ThreadCtx ctx;

[[noreturn]] void fatal(const char* what);

inline void check_mask(unsigned mask) {
    if (!((mask >> ctx.lane) & 1u)) fatal("warp intrinsic called by a lane not in its mask");
}

template <typename T>
inline T exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    Warp& w = *ctx.warp;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    uint64_t* slots = w.slots[ctx.parity];
    ctx.parity ^= 1;
    slots[ctx.lane] = bits;
    w.bar->arrive_and_wait();
    uint64_t got = (src >= 0 && src < w.lanes) ? slots[src] : bits;
    T out;
    std::memcpy(&out, &got, sizeof(T));
    return out;
}

// ---- tensor-core collectives (see mma.cuh in the kernels) -------------------
// The kernels call these through kernels/mma.cuh when TROUPE_EMU is defined,
// and the PTX instructions (mma.sync, ldmatrix, cp.async) under NVRTC.

// mma_layout_bug, when nonzero, makes mma_bf16_16816 read the A fragment
// with registers a1 and a2 swapped (rows 8-15 of k 0-7 taken for rows 0-7
// of k 8-15 and back): a test hook proving the GEMM tests catch a wrong
// fragment layout. Set through emu_set_mma_layout_bug.
extern int mma_layout_bug;

// ldmatrix_conflicts counts the ldmatrix phases (the 8 row addresses of one
// 8x8 matrix, 16 bytes each) whose rows share a shared-memory bank (4-byte
// banks, 32 of them): such a phase takes more than one pass on the
// hardware. Read through emu_ldmatrix_conflicts.
extern std::atomic<long> ldmatrix_conflicts;

inline float bf16_bits_to_float(uint32_t h) {
    uint32_t u = h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// mma_bf16_16816 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for
// the calling lane: d = A·B + c with the PTX ISA fragment layouts
// ("Matrix Fragments for mma.m16n8k16 with floating point type"), g =
// lane/4, t = lane%4: A (16x16, row) a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g,
// 2t+8..) a3:(g+8, 2t+8..), the lower half of each register the lower
// column; B (16x8, col) b0:(k 2t..2t+1, n g) b1:(k 2t+8.., n g); C/D
// c0,c1:(g, 2t, 2t+1) c2,c3:(g+8, 2t, 2t+1). The bf16 products are exact
// in float32; the sums are float32 in k order.
inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    Warp& w = *ctx.warp;
    if (w.lanes != 32) fatal("mma.sync in a partial warp");
    uint32_t(*f)[6] = w.frags[ctx.parity];
    ctx.parity ^= 1;
    const int lane = ctx.lane;
    for (int i = 0; i < 4; i++) f[lane][i] = a[i];
    f[lane][4] = b[0];
    f[lane][5] = b[1];
    w.bar->arrive_and_wait();
    const int g = lane >> 2, t = lane & 3;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float acc = c[i];
        for (int k = 0; k < 16; k++) {
            int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            if (mma_layout_bug && (reg == 1 || reg == 2)) reg = 3 - reg;
            const uint32_t ar = f[(row & 7) * 4 + (k & 7) / 2][reg];
            const uint32_t br = f[col * 4 + (k & 7) / 2][4 + (k >= 8 ? 1 : 0)];
            const float av = bf16_bits_to_float((k & 1) ? ar >> 16 : ar & 0xffffu);
            const float bv = bf16_bits_to_float((k & 1) ? br >> 16 : br & 0xffffu);
            acc = std::fma(av, bv, acc);
        }
        out[i] = acc;
    }
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

// ldmatrix is ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16: lanes
// 8j..8j+7 give the row addresses of matrix j (num = 1, 2 or 4; the other
// lanes' addresses are ignored) and lane l receives in r[j] the elements
// (row l/4, cols 2(l%4), 2(l%4)+1) of matrix j, or with trans (rows 2(l%4),
// 2(l%4)+1, col l/4), the first element in the lower half.
inline void ldmatrix(uint32_t* r, int num, bool trans, const void* row) {
    Warp& w = *ctx.warp;
    if (w.lanes != 32) fatal("ldmatrix in a partial warp");
    const void** p = w.ptrs[ctx.parity];
    ctx.parity ^= 1;
    const int lane = ctx.lane;
    p[lane] = row;
    w.bar->arrive_and_wait();
    if (lane == 0) {
        for (int j = 0; j < num; j++) {
            unsigned used = 0;
            bool conflict = false;
            for (int i = 0; i < 8; i++) {
                const uintptr_t a = reinterpret_cast<uintptr_t>(p[8 * j + i]);
                if (a & 15) fatal("ldmatrix row address not 16-byte aligned");
                const unsigned banks = 0xfu << ((a >> 2) & 31);  // 4 consecutive banks, a 16-byte aligned
                if (used & banks) conflict = true;
                used |= banks;
            }
            if (conflict) ldmatrix_conflicts.fetch_add(1);
        }
    }
    for (int j = 0; j < num; j++) {
        uint16_t lo, hi;
        if (!trans) {
            const uint16_t* rp = static_cast<const uint16_t*>(p[8 * j + lane / 4]);
            lo = rp[2 * (lane % 4)];
            hi = rp[2 * (lane % 4) + 1];
        } else {
            lo = static_cast<const uint16_t*>(p[8 * j + 2 * (lane % 4)])[lane / 4];
            hi = static_cast<const uint16_t*>(p[8 * j + 2 * (lane % 4) + 1])[lane / 4];
        }
        r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}

// cp.async: a copy is read from global memory when issued and lands in
// shared memory only when cp.async.wait_group lets its group complete, so
// a kernel that reads a stage before waiting for it sees stale data here
// too. Per thread, like the hardware's async-copy groups.
struct AsyncCopy {
    void* dst;
    int bytes;
    unsigned char data[16];
};
struct AsyncState {
    AsyncCopy pending[512];
    int n = 0;           // pending copies
    int committed = 0;   // of them, those in committed groups
    int group_end[64];   // end index (exclusive) of each committed group, oldest first
    int groups = 0;
};
extern thread_local AsyncState async_state;

// cp_async copies bytes (4, 8 or 16) from src; src_bytes < bytes zero-fills
// the rest (src_bytes = 0: nothing is read).
inline void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
    AsyncState& s = async_state;
    if (s.n == 512) fatal("too many cp.async copies in flight");
    AsyncCopy& c = s.pending[s.n++];
    c.dst = dst;
    c.bytes = bytes;
    std::memset(c.data, 0, sizeof c.data);
    if (src_bytes > 0) std::memcpy(c.data, src, src_bytes < bytes ? src_bytes : bytes);
}
inline void cp_async_commit() {
    AsyncState& s = async_state;
    if (s.groups == 64) fatal("too many cp.async groups in flight");
    s.group_end[s.groups++] = s.n;
    s.committed = s.n;
}
// cp_async_wait completes every committed group but the newest n.
inline void cp_async_wait(int n) {
    AsyncState& s = async_state;
    if (s.groups <= n) return;
    const int done = s.groups - n, end = s.group_end[done - 1];
    for (int i = 0; i < end; i++) std::memcpy(s.pending[i].dst, s.pending[i].data, s.pending[i].bytes);
    std::memmove(s.pending, s.pending + end, (s.n - end) * sizeof(AsyncCopy));
    s.n -= end;
    s.committed -= end;
    for (int g = done; g < s.groups; g++) s.group_end[g - done] = s.group_end[g] - end;
    s.groups -= done;
}
// cp_async_reset drops what a block left in flight (run before each block).
inline void cp_async_reset() {
    async_state.n = 0;
    async_state.committed = 0;
    async_state.groups = 0;
}

// f2bf rounds to bf16 as cvt.rn.bf16.f32: nearest, ties to even; NaN stays
// a (quiet) NaN.
inline uint32_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x0040u) & 0xffffu;
    return ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) & 0xffffu;
}

// Thunk calls a kernel with its arguments unpacked from a cuLaunchKernel-style
// array of pointers to argument values.
using Thunk = void (*)(void** args);

template <typename... A, std::size_t... I>
inline void call_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_reference_t<A>*>(args[I])...);
}

template <typename... A>
inline void call(void (*f)(A...), void** args) {
    call_impl(f, args, std::index_sequence_for<A...>{});
}

struct Registrar {
    Registrar(const char* name, Thunk t);
};

}  // namespace emu

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

// EMU_REGISTER(kernel) makes an extern "C" kernel launchable by name.
#define EMU_REGISTER(fn) \
    static emu::Registrar emu_registrar_##fn(#fn, [](void** a) { emu::call(fn, a); });

// ---- qualifiers -----------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
#define __constant__ static const
#define __launch_bounds__(...)

// ---- synchronisation ---------------------------------------------------------
inline void __syncthreads() { emu::ctx.block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu::check_mask(mask);
    emu::ctx.warp->bar->arrive_and_wait();
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- warp shuffles and votes ------------------------------------------------
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    emu::check_mask(mask);
    int base = emu::ctx.lane & ~(width - 1);
    return emu::exchange(v, base + (src % width));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    emu::check_mask(mask);
    int src = emu::ctx.lane ^ lane_mask;
    if ((src & ~(width - 1)) != (emu::ctx.lane & ~(width - 1))) src = emu::ctx.lane;
    return emu::exchange(v, src);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    emu::check_mask(mask);
    int lane = emu::ctx.lane;
    int src = lane + (int)delta;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;  // beyond the segment: own value
    return emu::exchange(v, src);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    emu::check_mask(mask);
    int lane = emu::ctx.lane;
    int src = lane - (int)delta;
    if (src < (lane & ~(width - 1))) src = lane;
    return emu::exchange(v, src);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    emu::check_mask(mask);
    emu::Warp& w = *emu::ctx.warp;
    uint64_t* slots = w.slots[emu::ctx.parity];
    emu::ctx.parity ^= 1;
    slots[emu::ctx.lane] = pred ? 1 : 0;
    w.bar->arrive_and_wait();
    unsigned out = 0;
    for (int l = 0; l < w.lanes; l++)
        if (((mask >> l) & 1u) && slots[l]) out |= 1u << l;
    return out & mask;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == __ballot_sync(mask, 1); }
inline unsigned __activemask() {
    int n = emu::ctx.warp->lanes;
    return n == 32 ? 0xffffffffu : ((1u << n) - 1u);
}

// ---- atomics ------------------------------------------------------------------
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
inline int atomicOr(int* p, int v) { return std::atomic_ref<int>(*p).fetch_or(v); }
inline unsigned atomicAnd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_and(v); }
inline int atomicExch(int* p, int v) { return std::atomic_ref<int>(*p).exchange(v); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).exchange(v); }
inline float atomicExch(float* p, float v) { return std::atomic_ref<float>(*p).exchange(v); }
inline int atomicCAS(int* p, int cmp, int v) {
    std::atomic_ref<int>(*p).compare_exchange_strong(cmp, v);
    return cmp;
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) {
    std::atomic_ref<unsigned>(*p).compare_exchange_strong(cmp, v);
    return cmp;
}
inline int atomicMax(int* p, int v) {
    std::atomic_ref<int> r(*p);
    int old = r.load();
    while (old < v && !r.compare_exchange_weak(old, v)) {
    }
    return old;
}
inline int atomicMin(int* p, int v) {
    std::atomic_ref<int> r(*p);
    int old = r.load();
    while (old > v && !r.compare_exchange_weak(old, v)) {
    }
    return old;
}

// ---- bit casts and math -----------------------------------------------------
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <typename T>
inline T __ldg(const T* p) {
    return *p;
}
