#!/usr/bin/python3
"""numpy/OpenBLAS peer of BenchmarkFamily (bench_test.go): the same float32
products, timed the same way (best single call, mean, and per busy core
from the process CPU time). Thread count and kernel come from the
environment, which OpenBLAS reads when numpy is imported:

    OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Zen /usr/bin/python3 bench_numpy.py

Prints one line per shape: "t<threads>/<name> best mean core" in GFLOP/s.
"""
import os
import sys
import time

import numpy as np

TOKENS = 512
FAMILY = [
    ("smol135m", [("q", 576, 576), ("kv", 576, 192), ("up", 576, 1536), ("down", 1536, 576), ("lmhead", 576, 49152)]),
    ("qwen05b", [("q", 896, 896), ("kv", 896, 128), ("up", 896, 4864), ("down", 4864, 896), ("lmhead", 896, 151936)]),
]


def shapes():
    """(name, fn building the operands and returning a closure, flops)."""
    rng = np.random.default_rng(1)

    def mk(*shape):
        return (rng.random(shape, dtype=np.float32) * 2 - 1)

    out = []
    a, b = mk(512, 512), mk(512, 512)
    out.append(("cube512/NN", lambda a=a, b=b: a @ b, 2 * 512**3))
    for model, layers in FAMILY:
        for name, fin, fout in layers:
            tag = f"{model}/{name}"
            flops = 2 * TOKENS * fin * fout
            out.append((tag + "/fwd", (TOKENS, fin, fout, "fwd"), flops))
            out.append((tag + "/dX", (TOKENS, fin, fout, "dX"), flops))
            out.append((tag + "/dW", (TOKENS, fin, fout, "dW"), flops))
    return out, mk


def main():
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "?")
    filt = sys.argv[1] if len(sys.argv) > 1 else ""
    min_time = float(os.environ.get("BENCH_MIN_TIME", "0.3"))
    lst, mk = shapes()
    for name, spec, flops in lst:
        if filt and filt not in name:
            continue
        if callable(spec):
            fn = spec
        else:
            n, fin, fout, kind = spec
            x, w, dy = mk(n, fin), mk(fout, fin), mk(n, fout)
            # PyTorch Linear: Y = X·Wᵀ, dX = dY·W, dW = dYᵀ·X; the .T views
            # reach sgemm as transpose flags, without copies.
            fn = {"fwd": lambda: x @ w.T, "dX": lambda: dy @ w, "dW": lambda: dy.T @ x}[kind]
        fn()  # warm up
        best, reps = float("inf"), 0
        t0, c0 = time.perf_counter(), time.process_time()
        while reps < 3 or time.perf_counter() - t0 < min_time:
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
            reps += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"t{threads}/{name} {flops / best / 1e9:.2f} {flops * reps / wall / 1e9:.2f} {flops * reps / cpu / 1e9:.2f}", flush=True)


if __name__ == "__main__":
    main()
