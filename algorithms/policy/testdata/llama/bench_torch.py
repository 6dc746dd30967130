#!/usr/bin/python3
"""PyTorch peer of algorithms/policy's BenchmarkLlama (llama_bench_test.go).

A plain PyTorch module of the Llama/Qwen2 decoder (RMSNorm, rotate_half RoPE,
grouped-query attention, SwiGLU, tied head, Qwen2's q/k/v biases) with a KV
cache, float32, random weights, torch.set_num_threads(2), measuring what the
Go benchmark measures on the same shapes:

  prefill-1x512   one 512-token prompt through the model, KV cache filled,
                  first token picked (tokens/s = 512 / time)
  decode-batchB   B rows of a 16-token prompt, 32 new tokens each, greedy,
                  prefill included (tokens/s = new tokens / time)
  train-4x128     forward + backward + clip_grad_norm_ + AdamW on 4x128
                  tokens (tokens/s = 512 / time)

A "-bf16" suffix (prefill-1x512-bf16, train-4x128-bf16) runs the same under
torch.autocast("cpu", dtype=torch.bfloat16): float32 weights and optimizer,
BF16 matmuls, the peer of the Go benchmark's SetComputeDType(BF16) runs.

Each measurement runs in its own process so that peak-MiB (ru_maxrss) is
that benchmark's. Usage:

  /usr/bin/python3 bench_torch.py                     # all, table on stdout
  /usr/bin/python3 bench_torch.py smollm2-135m train-4x128 2
"""

import math
import os
import resource
import subprocess
import sys
import time

# OpenMP workers spin while they wait by default, which on a shared machine
# burns CPU time that tokens/cpu-s would charge to the model; Go's workers
# park instead. Set before torch loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SHAPES = {
    # vocab, hidden, intermediate, layers, heads, kv heads, head_dim, theta, eps, qkv bias
    "smollm2-135m": (49152, 576, 1536, 30, 9, 3, 64, 100000.0, 1e-5, False),
    "qwen2.5-0.5b": (151936, 896, 4864, 24, 14, 2, 64, 1000000.0, 1e-6, True),
}
BENCHES = ["prefill-1x512", "decode-batch1", "decode-batch32", "train-4x128", "prefill-1x512-bf16", "train-4x128-bf16"]


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, C, I, NH, KVH, HD, eps, bias):
        super().__init__()
        self.NH, self.KVH, self.HD = NH, KVH, HD
        self.ln1, self.ln2 = RMSNorm(C, eps), RMSNorm(C, eps)
        self.q = torch.nn.Linear(C, NH * HD, bias=bias)
        self.k = torch.nn.Linear(C, KVH * HD, bias=bias)
        self.v = torch.nn.Linear(C, KVH * HD, bias=bias)
        self.o = torch.nn.Linear(NH * HD, C, bias=False)
        self.gate = torch.nn.Linear(C, I, bias=False)
        self.up = torch.nn.Linear(C, I, bias=False)
        self.down = torch.nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin, cache=None, start=0):
        B, T, _ = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.NH, self.HD).transpose(1, 2)
        k = self.k(h).view(B, T, self.KVH, self.HD).transpose(1, 2)
        v = self.v(h).view(B, T, self.KVH, self.HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            cache[0][:, :, start:start + T] = k
            cache[1][:, :, start:start + T] = v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        rep = self.NH // self.KVH
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.HD)
        if T > 1:
            S = k.shape[2]
            mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            s = s.masked_fill(~mask, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.NH * self.HD)
        x = x + self.o(a)
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, V, C, I, L, NH, KVH, HD, theta, eps, bias):
        super().__init__()
        self.embed = torch.nn.Embedding(V, C)
        self.blocks = torch.nn.ModuleList(Block(C, I, NH, KVH, HD, eps, bias) for _ in range(L))
        self.norm = RMSNorm(C, eps)
        self.KVH, self.HD = KVH, HD
        self.inv = 1.0 / theta ** (torch.arange(0, HD, 2).float() / HD)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def rope(self, start, T):
        ang = torch.arange(start, start + T).float()[:, None] * self.inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, ids, caches=None, start=0):
        x = self.embed(ids)
        cos, sin = self.rope(start, ids.shape[1])
        for i, b in enumerate(self.blocks):
            x = b(x, cos, sin, None if caches is None else caches[i], start)
        return self.norm(x)

    def logits(self, h):
        return h @ self.embed.weight.t()  # tied head

    def new_caches(self, B, T):
        return [(torch.zeros(B, self.KVH, T, self.HD), torch.zeros(B, self.KVH, T, self.HD)) for _ in self.blocks]


def generate(m, prompts, n):
    """Greedy, equal-length prompts, KV cache; returns new token count."""
    B, P = prompts.shape
    caches = m.new_caches(B, P + n)
    h = m(prompts, caches, 0)
    tok = m.logits(h[:, -1]).argmax(-1)
    out = 1
    for i in range(n - 1):
        h = m(tok[:, None], caches, P + i)
        tok = m.logits(h[:, -1]).argmax(-1)
        out += 1
    return B * out


def run(shape, bench, iters):
    if bench.endswith("-bf16"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return run_(shape, bench[:-len("-bf16")], iters, "-bf16")
    return run_(shape, bench, iters, "")


def run_(shape, bench, iters, suffix):
    torch.manual_seed(1)
    m = Model(*SHAPES[shape])
    V = SHAPES[shape][0]
    if bench == "prefill-1x512":
        ids = (torch.arange(512) * 7 % V)[None]

        def step():
            with torch.no_grad():
                generate(m, ids, 1)
            return 512
    elif bench.startswith("decode-batch"):
        B = int(bench[len("decode-batch"):])
        ids = (torch.arange(B)[:, None] * 31 + torch.arange(16)[None] * 7) % V

        def step():
            with torch.no_grad():
                return generate(m, ids, 32)
    elif bench == "train-4x128":
        seqs = (torch.arange(4)[:, None] * 131 + torch.arange(129)[None] * 17) % V
        decay = [p for p in m.parameters() if p.dim() == 2]
        other = [p for p in m.parameters() if p.dim() != 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                lr=1e-4, betas=(0.9, 0.95), eps=1e-8)

        def step():
            opt.zero_grad(set_to_none=False)
            logits = m.logits(m(seqs[:, :-1]))
            loss = F.cross_entropy(logits.reshape(-1, V), seqs[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            return 512
    else:
        raise SystemExit("unknown benchmark " + bench)
    step()  # warm up, allocate
    t0, c0 = time.perf_counter(), time.process_time()
    tok = sum(step() for _ in range(iters))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch {shape}/{bench}{suffix}\t{tok / wall:.1f} tokens/s\t{tok / cpu:.1f} tokens/cpu-s\t{peak:.0f} peak-MiB", flush=True)


def main():
    torch.set_num_threads(2)
    if len(sys.argv) >= 3:
        run(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2)
        return
    for shape in SHAPES:
        for bench in BENCHES:
            subprocess.run([sys.executable, __file__, shape, bench, "2"], check=True)


if __name__ == "__main__":
    main()
