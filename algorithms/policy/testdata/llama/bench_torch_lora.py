#!/usr/bin/python3
"""PyTorch peer of algorithms/policy's BenchmarkLoRA (llama_bench_test.go).

A plain PyTorch Llama (RMSNorm, rotate_half RoPE, grouped-query attention,
SwiGLU, tied head; SmolLM2-135M's shape, float32, random weights,
torch.set_num_threads(2)) with a hand-written LoRA: each of the seven
projections gets y += scaling * (x @ A.T) @ B.T with A (r, in) and B (out, r)
as trainable parameters, the base's parameters frozen (requires_grad False,
so autograd computes no weight gradients for them and AdamW holds no state
for them). It measures what the Go benchmark measures:

  train-full-4x128       forward + backward + clip_grad_norm_ + AdamW, all weights
  train-lora-r16-4x128   the same with rank-16 adapters on all projections only

Each measurement runs in its own process so peak-MiB (ru_maxrss) is its own.

  /usr/bin/python3 bench_torch_lora.py                 # both, table on stdout
  /usr/bin/python3 bench_torch_lora.py train-lora-r16-4x128 2
"""

import math
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # parked, not spinning, OpenMP workers

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# SmolLM2-135M: vocab, hidden, intermediate, layers, heads, kv heads, head_dim, theta, eps
SHAPE = (49152, 576, 1536, 30, 9, 3, 64, 100000.0, 1e-5)
BENCHES = ["train-full-4x128", "train-lora-r16-4x128"]


class LoRALinear(torch.nn.Module):
    """nn.Linear without bias plus an optional LoRA term (PEFT's init: A
    kaiming-uniform, B zero; here B is random so the adapter matters)."""

    def __init__(self, fin, fout):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(fout, fin) * 0.02)
        self.A = self.B = None

    def add_lora(self, r, alpha):
        fout, fin = self.weight.shape
        bound = 1 / math.sqrt(fin)
        self.A = torch.nn.Parameter((torch.rand(r, fin) * 2 - 1) * bound)
        self.B = torch.nn.Parameter(torch.randn(fout, r) * 0.01)
        self.s = alpha / r

    def forward(self, x):
        y = x @ self.weight.t()
        if self.A is not None:
            y = y + ((x @ self.A.t()) * self.s) @ self.B.t()
        return y


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
    def __init__(self, C, I, NH, KVH, HD, eps):
        super().__init__()
        self.NH, self.KVH, self.HD = NH, KVH, HD
        self.ln1, self.ln2 = RMSNorm(C, eps), RMSNorm(C, eps)
        self.q, self.k, self.v = LoRALinear(C, NH * HD), LoRALinear(C, KVH * HD), LoRALinear(C, KVH * HD)
        self.o = LoRALinear(NH * HD, C)
        self.gate, self.up, self.down = LoRALinear(C, I), LoRALinear(C, I), LoRALinear(I, C)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.NH, self.HD).transpose(1, 2)
        k = self.k(h).view(B, T, self.KVH, self.HD).transpose(1, 2)
        v = self.v(h).view(B, T, self.KVH, self.HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.NH // self.KVH
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.HD)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.NH * self.HD)
        x = x + self.o(a)
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, V, C, I, L, NH, KVH, HD, theta, eps):
        super().__init__()
        self.embed = torch.nn.Embedding(V, C)
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = torch.nn.ModuleList(Block(C, I, NH, KVH, HD, eps) for _ in range(L))
        self.norm = RMSNorm(C, eps)
        self.inv = 1.0 / theta ** (torch.arange(0, HD, 2).float() / HD)

    def forward(self, ids):
        x = self.embed(ids)
        ang = torch.arange(ids.shape[1]).float()[:, None] * self.inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.norm(x) @ self.embed.weight.t()


def run(bench, iters):
    torch.manual_seed(1)
    m = Model(*SHAPE)
    V = SHAPE[0]
    if bench == "train-lora-r16-4x128":
        for p in m.parameters():
            p.requires_grad_(False)
        for b in m.blocks:
            for lin in (b.q, b.k, b.v, b.o, b.gate, b.up, b.down):
                lin.add_lora(16, 32)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    B, T = 4, 128
    seq = (torch.arange(B)[:, None] * 131 + torch.arange(T + 1)[None] * 17) % V

    def step():
        opt.zero_grad(set_to_none=True)
        logits = m(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), seq[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    step()  # warm-up: allocations, AdamW state
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(iters):
        step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tok = iters * B * T
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch/smollm2-135m/{bench}\t{tok / wall:.1f} tokens/s\t{tok / cpu:.1f} tokens/cpu-s\t{peak:.0f} peak-MiB"
          f"\t{sum(p.numel() for p in params)} trainable")


def main():
    torch.set_num_threads(2)
    if len(sys.argv) == 3:
        run(sys.argv[1], int(sys.argv[2]))
        return
    for bench in BENCHES:
        subprocess.run([sys.executable, __file__, bench, "2"], check=True)


if __name__ == "__main__":
    main()
