// attention.cu: causal multi-head self-attention, forward, backward and a
// one-token decode step over a KV cache.
//
// Layout (llm.c): qkv (B,T,3C) holds per token [q | k | v], head h at
// channels h*HS .. h*HS+HS-1 of each part; att (B,NH,T,T) the softmax
// probabilities. Scheme: one warp per (b, h, query row); a block is 4 warps
// on 4 consecutive rows of the same (b, h). The warp's query (or dout) row
// is staged in shared memory; lanes split the key positions for scores and
// the head channels for the weighted sums. HS <= ATT_MAX_HS (checked on the
// host).
#include "common.cuh"

#define ATT_WARPS 4
#define ATT_MAX_HS 128

// Grid (ceil(T/4), B*NH), block 128.
extern "C" __global__ void __launch_bounds__(128) attention_forward(float* __restrict__ out, float* __restrict__ att,
                                                                    const float* __restrict__ qkv, int B, int T,
                                                                    int C, int NH) {
    __shared__ float qs[ATT_WARPS][ATT_MAX_HS];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * ATT_WARPS + warp;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    if (t >= T) return;  // whole warp
    const int HS = C / NH;
    const long C3 = 3L * C;
    const float* base = qkv + (long)b * T * C3 + h * HS;
    for (int i = lane; i < HS; i += WARP_SIZE) qs[warp][i] = base[t * C3 + i];
    __syncwarp();
    const float scale = rsqrtf((float)HS);
    float* arow = att + ((long)bh * T + t) * T;

    float mx = NEG_INF;
    for (int s = lane; s <= t; s += WARP_SIZE) {
        const float* k = base + s * C3 + C;
        float dot = 0.0f;
        for (int i = 0; i < HS; i++) dot += qs[warp][i] * k[i];
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

    float* o = out + ((long)b * T + t) * C + h * HS;
    for (int i = lane; i < HS; i += WARP_SIZE) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += arow[s] * base[s * C3 + 2 * C + i];
        o[i] = acc;
    }
}

// Backward, part 1 (per query row t): datt[s] = v_s·dout_t; the softmax
// backward dpre[s] = att[s] (datt[s] - sum_r att[r] datt[r]) goes to the
// scratch dpre (B,NH,T,T); dq_t += scale * sum_s dpre[s] k_s.
// Grid (ceil(T/4), B*NH), block 128.
extern "C" __global__ void __launch_bounds__(128) attention_backward_query(float* __restrict__ dqkv, float* __restrict__ dpre,
                                                                           const float* __restrict__ dout,
                                                                           const float* __restrict__ qkv,
                                                                           const float* __restrict__ att, int B, int T,
                                                                           int C, int NH) {
    __shared__ float ds[ATT_WARPS][ATT_MAX_HS];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * ATT_WARPS + warp;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    if (t >= T) return;
    const int HS = C / NH;
    const long C3 = 3L * C;
    const float* base = qkv + (long)b * T * C3 + h * HS;
    const float* dy = dout + ((long)b * T + t) * C + h * HS;
    for (int i = lane; i < HS; i += WARP_SIZE) ds[warp][i] = dy[i];
    __syncwarp();
    const float scale = rsqrtf((float)HS);
    const float* arow = att + ((long)bh * T + t) * T;
    float* drow = dpre + ((long)bh * T + t) * T;

    float dot_sum = 0.0f;
    for (int s = lane; s <= t; s += WARP_SIZE) {
        const float* v = base + s * C3 + 2 * C;
        float d = 0.0f;
        for (int i = 0; i < HS; i++) d += v[i] * ds[warp][i];
        drow[s] = d;
        dot_sum += arow[s] * d;
    }
    dot_sum = warp_sum(dot_sum);
    for (int s = lane; s < T; s += WARP_SIZE) drow[s] = (s <= t) ? arow[s] * (drow[s] - dot_sum) : 0.0f;
    __syncwarp();

    float* dq = dqkv + ((long)b * T + t) * C3 + h * HS;
    for (int i = lane; i < HS; i += WARP_SIZE) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += drow[s] * base[s * C3 + C + i];
        dq[i] += scale * acc;
    }
}

// Backward, part 2 (per key row s, after part 1):
// dk_s += scale * sum_{t>=s} dpre[t,s] q_t; dv_s += sum_{t>=s} att[t,s] dout_t.
// Lanes split the head channels. Grid (ceil(T/4), B*NH), block 128.
extern "C" __global__ void __launch_bounds__(128) attention_backward_kv(float* __restrict__ dqkv, const float* __restrict__ dpre,
                                                                        const float* __restrict__ dout,
                                                                        const float* __restrict__ qkv,
                                                                        const float* __restrict__ att, int B, int T,
                                                                        int C, int NH) {
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int s = blockIdx.x * ATT_WARPS + warp;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    if (s >= T) return;
    const int HS = C / NH;
    const long C3 = 3L * C;
    const float* base = qkv + (long)b * T * C3 + h * HS;
    const float* dbase = dout + (long)b * T * C + h * HS;
    const float* acol = att + (long)bh * T * T + s;
    const float* dcol = dpre + (long)bh * T * T + s;
    const float scale = rsqrtf((float)HS);
    float* dk = dqkv + ((long)b * T + s) * C3 + C + h * HS;
    float* dv = dk + C;
    for (int i = lane; i < HS; i += WARP_SIZE) {
        float ak = 0.0f, av = 0.0f;
#pragma unroll 4
        for (int t = s; t < T; t++) {
            ak += dcol[(long)t * T] * base[t * C3 + i];
            av += acol[(long)t * T] * dbase[(long)t * C + i];
        }
        dk[i] += scale * ak;
        dv[i] += av;
    }
}

// One decoding step: qkv (B,3C) is the new token at position pos; cache
// (B,maxT,2C) holds [k | v] per position. Each warp (b,h) stores its head's
// k, v at pos, then attends q over positions 0..pos. scores (B*NH, maxT) is
// scratch. Grid ceil(B*NH/4), block 128.
extern "C" __global__ void __launch_bounds__(128) attention_decode(float* __restrict__ out, float* __restrict__ cache,
                                                                   float* __restrict__ scores,
                                                                   const float* __restrict__ qkv, int B, int maxT,
                                                                   int pos, int C, int NH) {
    __shared__ float qs[ATT_WARPS][ATT_MAX_HS];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int bh = blockIdx.x * ATT_WARPS + warp;
    if (bh >= B * NH) return;
    const int b = bh / NH, h = bh % NH;
    const int HS = C / NH;
    const float* q = qkv + (long)b * 3 * C + h * HS;
    float* cbase = cache + (long)b * maxT * 2 * C + h * HS;
    float* ck = cbase + (long)pos * 2 * C;
    for (int i = lane; i < HS; i += WARP_SIZE) {
        qs[warp][i] = q[i];
        ck[i] = q[C + i];
        ck[C + i] = q[2 * C + i];
    }
    __syncwarp();
    const float scale = rsqrtf((float)HS);
    float* sc = scores + (long)bh * maxT;
    float mx = NEG_INF;
    for (int s = lane; s <= pos; s += WARP_SIZE) {
        const float* k = cbase + (long)s * 2 * C;
        float dot = 0.0f;
        for (int i = 0; i < HS; i++) dot += qs[warp][i] * k[i];
        dot *= scale;
        sc[s] = dot;
        mx = fmaxf(mx, dot);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int s = lane; s <= pos; s += WARP_SIZE) {
        float e = expf(sc[s] - mx);
        sc[s] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    __syncwarp();
    float* o = out + (long)b * C + h * HS;
    for (int i = lane; i < HS; i += WARP_SIZE) {
        float acc = 0.0f;
        for (int s = 0; s <= pos; s++) acc += sc[s] * cbase[(long)s * 2 * C + C + i];
        o[i] = acc * inv;
    }
}
