// emu_runtime.cpp: launch machinery and the C API of the CUDA emulator (see
// cuda_emu.h for the execution model). Built into a shared library together
// with the kernel sources by the Go test (build tag cudaemu) and called
// through purego.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace emu {

thread_local ThreadCtx ctx;
thread_local AsyncState async_state;
int mma_layout_bug = 0;
std::atomic<long> ldmatrix_conflicts{0};

void fatal(const char* what) {
    std::fprintf(stderr, "cuda_emu: %s\n", what);
    std::abort();
}

static std::map<std::string, Thunk>& registry() {
    static std::map<std::string, Thunk> r;
    return r;
}

namespace {
// One launch at a time (__shared__ statics are per kernel). Memory calls
// and registration take it too: the Go caller may issue consecutive calls
// from different OS threads, and the mutex makes that ordering visible to
// ThreadSanitizer (TROUPE_EMU_CXXFLAGS=-fsanitize=thread), which cannot see
// Go's scheduler.
std::mutex launch_mu;
}  // namespace

Registrar::Registrar(const char* name, Thunk t) {
    std::lock_guard<std::mutex> lock(launch_mu);
    registry()[name] = t;
}

namespace {

struct Launch;

// Resets the per-block barriers once every thread has finished a block (run
// by std::barrier on one thread before any thread is released).
struct BlockReset {
    Launch* l;
    void operator()() noexcept;
};

struct Launch {
    Thunk fn;
    void** args;
    dim3 grid, block;
    int nthreads;
    std::unique_ptr<std::barrier<>> block_bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    std::vector<std::unique_ptr<Warp>> warps;
    std::unique_ptr<std::barrier<BlockReset>> end_bar;

    void reset() {
        block_bar = std::make_unique<std::barrier<>>(nthreads);
        for (size_t w = 0; w < warps.size(); w++) {
            warp_bars[w] = std::make_unique<std::barrier<>>(warps[w]->lanes);
            warps[w]->bar = warp_bars[w].get();
        }
    }
};

void BlockReset::operator()() noexcept { l->reset(); }

void run_thread(Launch* l, int t) {
    const dim3 b = l->block, g = l->grid;
    threadIdx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
    blockDim = b;
    gridDim = g;
    ctx.lane = t % 32;
    const long nblocks = (long)g.x * g.y * g.z;
    for (long blk = 0; blk < nblocks; blk++) {
        blockIdx = uint3{(unsigned)(blk % g.x), (unsigned)((blk / g.x) % g.y), (unsigned)(blk / ((long)g.x * g.y))};
        ctx.block_bar = l->block_bar.get();
        ctx.warp = l->warps[t / 32].get();
        ctx.parity = 0;
        cp_async_reset();
        l->fn(l->args);
        // This thread is done with the block: stop counting it in the block's
        // and warp's barriers (threads still running may sync without it).
        ctx.block_bar->arrive_and_drop();
        ctx.warp->bar->arrive_and_drop();
        l->end_bar->arrive_and_wait();
    }
}

}  // namespace
}  // namespace emu

extern "C" {

// emu_launch runs kernel `name` over the grid. args follows cuLaunchKernel:
// args[i] points to the value of parameter i. Returns 0 on success, 1 for an
// unknown kernel, 2 for a bad launch shape.
int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
               void** args) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    auto it = emu::registry().find(name);
    if (it == emu::registry().end()) return 1;
    long nthreads = (long)bx * by * bz;
    if (gx == 0 || gy == 0 || gz == 0 || nthreads <= 0 || nthreads > 1024) return 2;
    emu::Launch l;
    l.fn = it->second;
    l.args = args;
    l.grid = dim3(gx, gy, gz);
    l.block = dim3(bx, by, bz);
    l.nthreads = (int)nthreads;
    int nwarps = (int)((nthreads + 31) / 32);
    l.warps.resize(nwarps);
    l.warp_bars.resize(nwarps);
    for (int w = 0; w < nwarps; w++) {
        l.warps[w] = std::make_unique<emu::Warp>();
        l.warps[w]->lanes = (w == nwarps - 1 && nthreads % 32) ? (int)(nthreads % 32) : 32;
    }
    l.reset();
    l.end_bar = std::make_unique<std::barrier<emu::BlockReset>>(nthreads, emu::BlockReset{&l});
    std::vector<std::thread> ts;
    ts.reserve(nthreads);
    for (int t = 0; t < nthreads; t++) ts.emplace_back(emu::run_thread, &l, t);
    for (auto& t : ts) t.join();
    return 0;
}

// emu_set_mma_layout_bug switches the wrong-fragment-layout test hook of
// the emulated mma.sync (see cuda_emu.h) on (1) or off (0).
void emu_set_mma_layout_bug(int on) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    emu::mma_layout_bug = on;
}

// emu_ldmatrix_conflicts is the number of ldmatrix phases with a bank
// conflict so far (see cuda_emu.h).
long emu_ldmatrix_conflicts() { return emu::ldmatrix_conflicts.load(); }

int emu_kernel_count() {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    return (int)emu::registry().size();
}

const char* emu_kernel_name(int i) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    int k = 0;
    for (auto& kv : emu::registry())
        if (k++ == i) return kv.first.c_str();
    return nullptr;
}

void* emu_malloc(size_t n) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    size_t sz = (n + 255) / 256 * 256;
    if (sz == 0) sz = 256;
    void* p = std::aligned_alloc(256, sz);
    if (p) std::memset(p, 0, sz);
    return p;
}

void emu_free(void* p) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    std::free(p);
}

void emu_memcpy(void* dst, const void* src, size_t n) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    std::memmove(dst, src, n);
}

void emu_memset32(void* dst, unsigned v, size_t count) {
    std::lock_guard<std::mutex> lock(emu::launch_mu);
    unsigned* d = static_cast<unsigned*>(dst);
    for (size_t i = 0; i < count; i++) d[i] = v;
}

}  // extern "C"
