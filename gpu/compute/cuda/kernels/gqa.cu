// gqa.cu: causal grouped-query attention of the Llama/Qwen decoder family,
// forward, backward and a one-token decode step over a KV cache.
//
// Layout (gpu/decoder.go): q (B,T,NH,HD), k and v (B,T,KVH,HD) in separate
// buffers; query head h reads key/value head h/(NH/KVH); att (B,NH,T,T)
// holds the softmax probabilities. The head size HD is independent of the
// model width and at most GQA_MAX_HD (checked on the host).
//
// Scheme (as attention.cu): one warp per (b, head, row); a block is 4 warps
// on 4 consecutive rows of the same (b, head). The warp's query (or dout)
// row is staged in shared memory; lanes split the key positions for scores
// and the head channels for the weighted sums.
#include "common.cuh"

// Match attWarps and attMaxHS in backend.go.
#define GQA_WARPS 4
#define GQA_MAX_HD 128

// Grid (ceil(T/4), B*NH), block 128.
extern "C" __global__ void __launch_bounds__(128) gqa_forward(float* __restrict__ out, float* __restrict__ att,
                                                              const float* __restrict__ q, const float* __restrict__ k,
                                                              const float* __restrict__ v, int B, int T, int NH,
                                                              int KVH, int HD, float scale) {
    __shared__ float qs[GQA_WARPS][GQA_MAX_HD];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * GQA_WARPS + warp;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    if (t >= T) return;  // whole warp
    const int g = h / (NH / KVH);
    const long qstride = (long)NH * HD, kstride = (long)KVH * HD;
    const float* qrow = q + ((long)b * T + t) * qstride + h * HD;
    const float* kbase = k + (long)b * T * kstride + g * HD;
    const float* vbase = v + (long)b * T * kstride + g * HD;
    for (int i = lane; i < HD; i += WARP_SIZE) qs[warp][i] = qrow[i];
    __syncwarp();
    float* arow = att + ((long)bh * T + t) * T;

    float mx = NEG_INF;
    for (int s = lane; s <= t; s += WARP_SIZE) {
        const float* kr = kbase + s * kstride;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++) dot += qs[warp][i] * kr[i];
        dot *= scale;
        arow[s] = dot;
        mx = fmaxf(mx, dot);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= t; s += WARP_SIZE) {
        float e = expf(arow[s] - mx);
        arow[s] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int s = lane; s < T; s += WARP_SIZE) arow[s] = (s <= t) ? arow[s] * inv : 0.0f;
    __syncwarp();  // the weighted sum reads entries other lanes wrote

    float* o = out + ((long)b * T + t) * qstride + h * HD;
    for (int i = lane; i < HD; i += WARP_SIZE) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += arow[s] * vbase[s * kstride + i];
        o[i] = acc;
    }
}

// Backward, part 1 (per query head and row t): datt[s] = v_s·dout_t; the
// softmax backward dpre[s] = att[s] (datt[s] - sum_r att[r] datt[r]) goes to
// the scratch dpre (B,NH,T,T) (entries s <= t only); dq_t += scale * sum_s
// dpre[s] k_s. Grid (ceil(T/4), B*NH), block 128.
extern "C" __global__ void __launch_bounds__(128) gqa_backward_query(float* __restrict__ dq, float* __restrict__ dpre,
                                                                     const float* __restrict__ dout,
                                                                     const float* __restrict__ k,
                                                                     const float* __restrict__ v,
                                                                     const float* __restrict__ att, int B, int T,
                                                                     int NH, int KVH, int HD, float scale) {
    __shared__ float ds[GQA_WARPS][GQA_MAX_HD];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * GQA_WARPS + warp;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    if (t >= T) return;
    const int g = h / (NH / KVH);
    const long qstride = (long)NH * HD, kstride = (long)KVH * HD;
    const float* kbase = k + (long)b * T * kstride + g * HD;
    const float* vbase = v + (long)b * T * kstride + g * HD;
    const float* dy = dout + ((long)b * T + t) * qstride + h * HD;
    for (int i = lane; i < HD; i += WARP_SIZE) ds[warp][i] = dy[i];
    __syncwarp();
    const float* arow = att + ((long)bh * T + t) * T;
    float* drow = dpre + ((long)bh * T + t) * T;

    float dot_sum = 0.0f;
    for (int s = lane; s <= t; s += WARP_SIZE) {
        const float* vr = vbase + s * kstride;
        float d = 0.0f;
        for (int i = 0; i < HD; i++) d += vr[i] * ds[warp][i];
        drow[s] = d;
        dot_sum += arow[s] * d;
    }
    dot_sum = warp_sum(dot_sum);
    for (int s = lane; s <= t; s += WARP_SIZE) drow[s] = arow[s] * (drow[s] - dot_sum);
    __syncwarp();

    float* dqr = dq + ((long)b * T + t) * qstride + h * HD;
    for (int i = lane; i < HD; i += WARP_SIZE) {
        const float* kc = kbase + i;
        float acc = 0.0f;
#pragma unroll 4
        for (int s = 0; s <= t; s++) acc += drow[s] * kc[s * kstride];
        dqr[i] += scale * acc;
    }
}

// Backward, part 2 (per key/value head g and key row s, after part 1): the
// query heads of g's group are summed here, so no two warps write the same
// dk, dv row and no atomics are needed:
//   dk_s += scale * sum_{h in g} sum_{t>=s} dpre[h,t,s] q_{t,h}
//   dv_s += sum_{h in g} sum_{t>=s} att[h,t,s] dout_{t,h}
// Lanes split the head channels. Grid (ceil(T/4), B*KVH), block 128.
extern "C" __global__ void __launch_bounds__(128) gqa_backward_kv(float* __restrict__ dk, float* __restrict__ dv,
                                                                  const float* __restrict__ dpre,
                                                                  const float* __restrict__ dout,
                                                                  const float* __restrict__ q,
                                                                  const float* __restrict__ att, int B, int T, int NH,
                                                                  int KVH, int HD, float scale) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int s = blockIdx.x * GQA_WARPS + warp;
    const int bg = blockIdx.y, b = bg / KVH, g = bg % KVH;
    if (s >= T) return;
    const int group = NH / KVH;
    const long qstride = (long)NH * HD, kstride = (long)KVH * HD;
    float* dkr = dk + ((long)b * T + s) * kstride + g * HD;
    float* dvr = dv + ((long)b * T + s) * kstride + g * HD;
    for (int i = lane; i < HD; i += WARP_SIZE) {
        float ak = 0.0f, av = 0.0f;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const long bh = (long)b * NH + h;
            const float* acol = att + bh * T * T + s;
            const float* dcol = dpre + bh * T * T + s;
            const float* qb = q + (long)b * T * qstride + h * HD + i;
            const float* db = dout + (long)b * T * qstride + h * HD + i;
#pragma unroll 4
            for (int t = s; t < T; t++) {
                ak += dcol[(long)t * T] * qb[t * qstride];
                av += acol[(long)t * T] * db[t * qstride];
            }
        }
        dkr[i] += scale * ak;
        dvr[i] += av;
    }
}

// One decoding step, one new token per batch row at its own position pos[b]:
// q (B,NH,HD), k, v (B,KVH,HD); cache (B,maxT,2,KVH,HD) holds k then v per
// position. Each warp (b,h) attends q over positions 0..pos[b], taking
// position pos[b] from the new k, v, so no warp reads what another writes in
// the same launch; the first query head of each group stores the new k, v
// into the cache. scores (B*NH, maxT) is scratch. A position outside
// [0,maxT) zeroes the row's output, leaves the cache alone and raises
// TROUPE_ERR_DECODE_POS. Grid ceil(B*NH/4), block 128.
extern "C" __global__ void __launch_bounds__(128) gqa_decode(float* __restrict__ out, float* __restrict__ cache,
                                                             float* __restrict__ scores, const float* __restrict__ q,
                                                             const float* __restrict__ k, const float* __restrict__ v,
                                                             const int* __restrict__ pos, int B, int maxT, int NH,
                                                             int KVH, int HD, float scale, unsigned int* err) {
    __shared__ float qs[GQA_WARPS][GQA_MAX_HD];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int bh = blockIdx.x * GQA_WARPS + warp;
    if (bh >= B * NH) return;
    const int b = bh / NH, h = bh % NH;
    const int group = NH / KVH, g = h / group;
    float* o = out + (long)bh * HD;
    const int p = pos[b];
    if (p < 0 || p >= maxT) {
        for (int i = lane; i < HD; i += WARP_SIZE) o[i] = 0.0f;
        if (lane == 0 && h == 0) atomicOr(err, TROUPE_ERR_DECODE_POS);
        return;
    }
    const long KD = (long)KVH * HD, cstride = 2 * KD;
    const float* knew = k + (long)b * KD + g * HD;
    const float* vnew = v + (long)b * KD + g * HD;
    float* cbase = cache + (long)b * maxT * cstride + g * HD;
    const float* qh = q + (long)bh * HD;
    const bool writer = h % group == 0;
    float* ck = cbase + p * cstride;
    for (int i = lane; i < HD; i += WARP_SIZE) {
        qs[warp][i] = qh[i];
        if (writer) {
            ck[i] = knew[i];
            ck[KD + i] = vnew[i];
        }
    }
    __syncwarp();
    float* sc = scores + (long)bh * maxT;
    float mx = NEG_INF;
    for (int s = lane; s <= p; s += WARP_SIZE) {
        const float* kr = (s == p) ? knew : cbase + s * cstride;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++) dot += qs[warp][i] * kr[i];
        dot *= scale;
        sc[s] = dot;
        mx = fmaxf(mx, dot);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= p; s += WARP_SIZE) {
        float e = expf(sc[s] - mx);
        sc[s] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    __syncwarp();
    const float* cv = cbase + KD;
    for (int i = lane; i < HD; i += WARP_SIZE) {
        float acc = 0.0f;
        for (int s = 0; s < p; s++) acc += sc[s] * cv[s * cstride + i];
        acc += sc[p] * vnew[i];
        o[i] = acc * inv;
    }
}
