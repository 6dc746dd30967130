#!/usr/bin/env python3
"""PyTorch peer of scripts/gpu-check.sh: the same measurements as troupe's
cudagpu benchmarks (gpu/compute/cuda/gpu_check_test.go), in PyTorch eager
(BF16 autocast over float32 weights, as troupe's mixed precision) and, where
it works, torch.compile; and the logit comparison with transformers + peft.

  gpu_check_torch.py bench --round N --json OUT [--dry] [--compile]
  gpu_check_torch.py compare DIR [--json OUT]
  gpu_check_torch.py summary --go GO_BENCH_LOG --torch TORCH_JSONL --out SUMMARY.md [...]

--dry runs everything on the CPU at toy shapes (one repetition): it checks
that this code runs, and its figures mean nothing.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

try:  # the summary needs no torch
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

QWEN05B = dict(vocab=151936, hidden=896, inter=4864, layers=24, heads=14, kv=2, hd=64)
TOY = dict(vocab=512, hidden=64, inter=128, layers=2, heads=4, kv=2, hd=16)

GEMM_SHAPES = [  # name, N, C, OC as in gemmBenchShapes
    ("4096cubed", 4096, 4096, 4096),
    ("qwen05b-qkv", 4096, 896, 1152),
    ("qwen05b-up", 4096, 896, 4864),
    ("qwen05b-down", 4096, 4864, 896),
    ("qwen05b-head", 4096, 896, 151936),
    ("qwen05b-decode1-down", 1, 4864, 896),
    ("qwen17b-qkv", 4096, 2048, 4096),
    ("qwen17b-up", 4096, 2048, 6144),
    ("qwen17b-down", 4096, 6144, 2048),
]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timeit(fn, dev, reps):
    fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / reps


class Qwen2(torch.nn.Module if torch else object):
    """Qwen2 decoder: RMSNorm, rotate_half RoPE, GQA with q/k/v biases, SwiGLU, tied head."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        H, I, L = c["hidden"], c["inter"], c["layers"]
        q, kv = c["heads"] * c["hd"], c["kv"] * c["hd"]
        self.emb = torch.nn.Embedding(c["vocab"], H)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.qkv = torch.nn.Linear(H, q + 2 * kv)
            m.o = torch.nn.Linear(q, H, bias=False)
            m.gu = torch.nn.Linear(H, 2 * I, bias=False)
            m.down = torch.nn.Linear(I, H, bias=False)
            m.n1 = torch.nn.Parameter(torch.ones(H))
            m.n2 = torch.nn.Parameter(torch.ones(H))
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(H))
        for p in self.parameters():
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)
        inv = 1.0 / (1e6 ** (torch.arange(0, c["hd"], 2).float() / c["hd"]))
        self.register_buffer("inv", inv, persistent=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def rope(self, x, pos):
        f = pos[:, None].float() * self.inv[None, :]
        e = torch.cat([f, f], -1)
        cos, sin = e.cos().to(x.dtype), e.sin().to(x.dtype)
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, tok, cache=None, pos0=0):
        c = self.c
        B, T = tok.shape
        nh, nkv, hd = c["heads"], c["kv"], c["hd"]
        x = self.emb(tok)
        pos = torch.arange(pos0, pos0 + T, device=tok.device)
        for i, m in enumerate(self.layers):
            h = self.rms(x, m.n1)
            q, k, v = m.qkv(h).split([nh * hd, nkv * hd, nkv * hd], -1)
            q = self.rope(q.view(B, T, nh, hd).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, nkv, hd).transpose(1, 2), pos)
            v = v.view(B, T, nkv, hd).transpose(1, 2)
            if cache is not None:
                kc, vc = cache[i]
                kc[:, :, pos0:pos0 + T] = k.to(kc.dtype)
                vc[:, :, pos0:pos0 + T] = v.to(vc.dtype)
                k, v = kc[:, :, :pos0 + T].to(q.dtype), vc[:, :, :pos0 + T].to(q.dtype)
            k = k.repeat_interleave(nh // nkv, 1)
            v = v.repeat_interleave(nh // nkv, 1)
            a = sdpa(q, k, v, T > 1)
            x = x + m.o(a.transpose(1, 2).reshape(B, T, nh * hd))
            g, u = m.gu(self.rms(x, m.n2)).chunk(2, -1)
            x = x + m.down(F.silu(g) * u)
        return self.rms(x, self.norm) @ self.emb.weight.t()


def sdpa(q, k, v, causal):
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool, device=s.device).triu(S - T + 1), float("-inf"))
    return torch.softmax(s.float(), -1).to(v.dtype) @ v


def autocast(dev):
    return torch.autocast(dev.type, dtype=torch.bfloat16)


def bench(args):
    dev = torch.device("cpu" if args.dry else "cuda")
    torch.manual_seed(0)
    reps = 1 if args.dry else 5
    cfg = TOY if args.dry else QWEN05B
    T = 16 if args.dry else 512
    rows = []

    def emit(name, value, unit, mode):
        rows.append(dict(round=args.round, bench=name, mode=mode, value=value, unit=unit))

    modes = ["eager"] + (["compile"] if args.compile and hasattr(torch, "compile") else [])
    for mode in modes:
        # GEMM: out = inp · Wᵀ in BF16 (cuBLAS through torch.matmul).
        for name, N, C, OC in GEMM_SHAPES:
            if args.dry:
                N, C, OC = max(1, N // 64), C // 64, OC // 64
            a = torch.randn(N, C, device=dev, dtype=torch.bfloat16)
            w = torch.randn(OC, C, device=dev, dtype=torch.bfloat16)
            f = (lambda a, w: a @ w.t())
            if mode == "compile":
                f = torch.compile(f)
            t = timeit(lambda: f(a, w), dev, reps)
            emit("Gemm/" + name, 2 * N * C * OC / t / 1e12, "TFLOP/s", mode)
        model = Qwen2(cfg).to(dev)
        fwd = torch.compile(model) if mode == "compile" else model
        for B in (1, 32):
            tok = torch.randint(0, cfg["vocab"], (B, T), device=dev)
            with torch.no_grad(), autocast(dev):
                t = timeit(lambda: fwd(tok)[:, -1].argmax(-1), dev, reps)
            emit(f"Qwen/prefill-{B}x512", B * T / t, "tokens/s", mode)
            if mode == "compile":
                continue  # compiling decode (a graph per length) and training costs minutes
            # Decode: a 16-token prompt then new tokens through a KV cache.
            new = 4 if args.dry else 32
            cache = [(torch.zeros(B, cfg["kv"], 16 + new, cfg["hd"], device=dev, dtype=torch.bfloat16),
                      torch.zeros(B, cfg["kv"], 16 + new, cfg["hd"], device=dev, dtype=torch.bfloat16))
                     for _ in range(cfg["layers"])]
            prompt = torch.randint(0, cfg["vocab"], (B, 16), device=dev)

            def gen(n):
                with torch.no_grad(), autocast(dev):
                    nxt = model(prompt, cache, 0)[:, -1].argmax(-1, keepdim=True)
                    for i in range(n - 1):
                        nxt = model(nxt, cache, 16 + i)[:, -1].argmax(-1, keepdim=True)
            t1 = timeit(lambda: gen(1), dev, reps)
            tn = timeit(lambda: gen(new), dev, reps)
            step = max(tn - t1, 1e-9) / (new - 1)
            emit(f"Qwen/decode-batch{B}", B / step, "tokens/s", mode)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for B in () if mode == "compile" else ((1, 2) if args.dry else (1, 8, 32)):
            tok = torch.randint(0, cfg["vocab"], (B, T + 1), device=dev)

            def step():
                with autocast(dev):
                    logits = fwd(tok[:, :-1])
                    loss = F.cross_entropy(logits.float().reshape(-1, cfg["vocab"]), tok[:, 1:].reshape(-1))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            t = timeit(step, dev, max(1, reps // 2))
            emit(f"Qwen/train-{B}x512", B * T / t, "tokens/s", mode)
        del model, fwd, opt
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    with open(args.json, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def compare(args):
    """Loads troupe's checkpoint and adapter with transformers + peft and
    compares log-probs with troupe's."""
    out = dict(status="skipped")
    try:
        from transformers import AutoModelForCausalLM
        from peft import PeftModel
    except ImportError as e:
        out["reason"] = f"transformers/peft not importable: {e}"
    else:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        base = AutoModelForCausalLM.from_pretrained(os.path.join(args.dir, "base"), torch_dtype=torch.float32).to(dev)
        model = PeftModel.from_pretrained(base, os.path.join(args.dir, "adapter")).to(dev).eval()
        ref = json.load(open(os.path.join(args.dir, "troupe_logprobs.json")))
        tok = torch.tensor(ref["tokens"], device=dev)
        with torch.no_grad():
            lp = torch.log_softmax(model(tok).logits.float(), -1)[:, :-1]
            lp = lp.gather(-1, tok[:, 1:, None])[..., 0]
        mine = torch.tensor(ref["logprobs"], device=dev)
        diff = (lp - mine).abs().max().item()
        out = dict(status="ok" if diff < 1e-2 else "MISMATCH", max_abs_logprob_diff=diff, rows=len(ref["tokens"]))
    print(json.dumps(out))
    if args.json:
        json.dump(out, open(args.json, "w"))


BENCH_RE = re.compile(r"^Benchmark(GPU\w+)/(\S+?)(?:-\d+)?\s+\d+\s+(.*)$")


def parse_go(path):
    """Go benchmark lines -> {(bench, round): value} of the metric matched to the torch unit."""
    res = {}
    rnd = 0
    for line in open(path):
        if line.startswith("### round "):
            rnd = int(line.split()[2])
            continue
        m = BENCH_RE.match(line.strip())
        if not m:
            continue
        group, sub, rest = m.groups()
        name = {"GPUGemm": "Gemm", "GPUQwen": "Qwen"}.get(group, group) + "/" + sub
        f = rest.split()
        metrics = {f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2) if re.match(r"^[\d.eE+-]+$", f[i])}
        res.setdefault(name, {})[rnd] = metrics
    return res


def summary(args):
    go = parse_go(args.go) if args.go and os.path.exists(args.go) else {}
    torch_rows = [json.loads(l) for l in open(args.torch)] if args.torch and os.path.exists(args.torch) else []
    lines = [f"# GPU check summary ({args.device})", ""]
    if args.dry:
        lines += ["**Dry run on the CPU at toy shapes: the figures mean nothing; this only shows the script runs.**", ""]
    lines += ["| benchmark | troupe (median of rounds) | PyTorch eager | troupe / eager | torch.compile | troupe / compile |",
              "|---|---|---|---|---|---|"]
    names = sorted({r["bench"] for r in torch_rows} | set(go))
    for n in names:
        unit = next((r["unit"] for r in torch_rows if r["bench"] == n), "")
        tv = [m.get(unit) for m in go.get(n, {}).values() if m.get(unit) is not None]
        t = statistics.median(tv) if tv else None
        cell = lambda v: "—" if v is None else f"{v:,.3g} {unit}"
        pe = [r["value"] for r in torch_rows if r["bench"] == n and r["mode"] == "eager"]
        pc = [r["value"] for r in torch_rows if r["bench"] == n and r["mode"] == "compile"]
        e = statistics.median(pe) if pe else None
        c = statistics.median(pc) if pc else None
        ratio = lambda a, b: "—" if a is None or not b else f"{a / b:.2f}×"
        lines.append(f"| {n} | {cell(t)} | {cell(e)} | {ratio(t, e)} | {cell(c)} | {ratio(t, c)} |")
    for extra in args.section or []:
        if os.path.exists(extra):
            lines += ["", open(extra).read().rstrip()]
    open(args.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--round", type=int, default=1)
    b.add_argument("--json", required=True)
    b.add_argument("--dry", action="store_true")
    b.add_argument("--compile", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("--json")
    s = sub.add_parser("summary")
    s.add_argument("--go")
    s.add_argument("--torch")
    s.add_argument("--out", required=True)
    s.add_argument("--device", default="unknown device")
    s.add_argument("--dry", action="store_true")
    s.add_argument("--section", action="append", help="a Markdown file appended to the summary")
    a = p.parse_args()
    {"bench": bench, "compare": compare, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
