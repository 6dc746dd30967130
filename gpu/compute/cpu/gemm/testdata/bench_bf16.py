#!/usr/bin/python3
"""Runs, in one process run, the float32 family products (BenchmarkFamily, fwd
and dX), the same products with BF16 weights (BenchmarkBF16), the FMA and
VDPBF16PS peaks, the decode matrix–vector products (BenchmarkDecode) and
STREAM copy, `--runs` times, and prints two markdown tables (best of the
runs): BF16 against float32 GFLOP/s, and decode GB/s of weights read
against STREAM copy. Run from the repository root:

    /usr/bin/python3 gpu/compute/cpu/gemm/testdata/bench_bf16.py --runs 2
"""
import argparse
import collections
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_table import go_bench, loadavg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--benchtime", default="300ms")
    args = ap.parse_args()
    binary = "/tmp/gemm_bench.test"
    subprocess.run(["go", "test", "-c", "-o", binary, "./gpu/compute/cpu/gemm"], check=True)
    best = collections.defaultdict(lambda: collections.defaultdict(float))
    loads = []
    for r in range(args.runs):
        loads.append(loadavg())
        for pat in ("Peak|KernelBF16", "Family$/t./[a-z0-9]+/[a-z]+/(fwd|dX)", "^BenchmarkBF16$", "Decode|StreamCopy"):
            for k, v in go_bench(binary, pat, args.benchtime).items():
                for unit, x in v.items():
                    best[k][unit] = max(best[k][unit], x)
        print(f"run {r + 1}/{args.runs} done, load {loadavg()}", file=sys.stderr)
    loads.append(loadavg())
    print(f"load averages (1/5/15 min) at run starts and end: {'; '.join(loads)}")
    pk = best["Peak/avx512/t1"]["GFLOP/s-best"]
    pbf = best["Peak/bf16/t1"]["GFLOP/s-best"]
    print(f"one-core peaks (best call): FMA avx512 {pk:.1f}, VDPBF16PS {pbf:.1f} GFLOP/s; "
          f"BF16 micro-kernel alone {best['KernelBF16']['GFLOP/s-best']:.1f}")
    print()
    print("| shape | thr | fp32 best | BF16 best | BF16/fp32 | fp32 /core | BF16 /core | BF16/fp32 | BF16 % of BF16 peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sorted(best):
        if not k.startswith("BF16/"):
            continue
        key = k.split("/", 2)[2]
        f = best.get("Family/" + key)
        if not f:
            continue
        b = best[k]
        t = key.split("/")[0][1:]
        print(f"| {key.split('/', 1)[1]} | {t} | {f['GFLOP/s-best']:.1f} | {b['GFLOP/s-best']:.1f} | "
              f"{b['GFLOP/s-best'] / f['GFLOP/s-best']:.2f} | {f['GFLOP/s-core']:.1f} | {b['GFLOP/s-core']:.1f} | "
              f"{b['GFLOP/s-core'] / f['GFLOP/s-core']:.2f} | {100 * b['GFLOP/s-core'] / pbf:.0f}% |")
    print()
    for t in (1, 2):
        s = best[f"StreamCopy/t{t}"]
        print(f"STREAM copy t{t}: {s['GB/s-best']:.1f} GB/s (read+write), {s['read-GB/s-best']:.1f} GB/s read")
    print()
    print("| weight [out,in] | thr | BF16 GemvBF16 GB/s | BF16 % of copy read | fp32 Sgemm row path GB/s | time BF16/fp32 |")
    print("|---|---|---|---|---|---|")
    for k in sorted(best):
        if not k.startswith("Decode/bf16/"):
            continue
        key = k[len("Decode/bf16/"):]
        t = key.split("/")[0][1:]
        b, f = best[k]["GB/s-best"], best["Decode/f32/" + key]["GB/s-best"]
        rd = best[f"StreamCopy/t{t}"]["read-GB/s-best"]
        # Same weights: BF16 has half the bytes, so time ratio = (1/2)/b / (1/f).
        print(f"| {key.split('/', 1)[1]} | {t} | {b:.1f} | {100 * b / rd:.0f}% | {f:.1f} | {0.5 * f / b:.2f} |")


if __name__ == "__main__":
    main()
