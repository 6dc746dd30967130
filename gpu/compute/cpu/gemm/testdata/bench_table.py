#!/usr/bin/python3
"""Runs BenchmarkFamily (troupe's Sgemm) and bench_numpy.py (OpenBLAS) in
the same session, alternating, `--runs` times, and prints a markdown table
of the best GFLOP/s of each side per shape, their ratio, and each as a
fraction of the machine's FMA peak measured in the same run
(BenchmarkPeak). Run from the repository root:

    /usr/bin/python3 gpu/compute/cpu/gemm/testdata/bench_table.py --runs 3 --coretypes SkylakeX,Zen,Haswell

Each OpenBLAS core type is tried (OPENBLAS_CORETYPE, set only for the
numpy process); the table uses the one fastest over all shapes at one
thread, and names it.
"""
import argparse
import collections
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, env=e, check=True, capture_output=True, text=True).stdout


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def go_bench(binary, pattern, benchtime):
    out = run([binary, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime])
    res = {}
    for line in out.splitlines():
        m = re.match(r"Benchmark(\S+?)-\d+\s+\d+\s+\S+ ns/op(.*)", line)
        if not m:
            continue
        metrics = dict((u, float(v)) for v, u in re.findall(r"([\d.]+) (\S+)", m.group(2)))
        res[m.group(1)] = metrics
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--coretypes", default="SkylakeX,Zen,Haswell")
    ap.add_argument("--filter", default="", help="substring of shape names")
    ap.add_argument("--benchtime", default="300ms")
    args = ap.parse_args()
    binary = "/tmp/gemm_bench.test"
    subprocess.run(["go", "test", "-c", "-o", binary, "./gpu/compute/cpu/gemm"], check=True)
    cores = args.coretypes.split(",")
    best_go = collections.defaultdict(float)
    core_go = collections.defaultdict(float)
    best_np = collections.defaultdict(lambda: collections.defaultdict(float))
    core_np = collections.defaultdict(lambda: collections.defaultdict(float))
    peak = collections.defaultdict(float)
    loads = []
    gofilt = "Family$/" + (".*" + re.escape(args.filter) if args.filter else "")
    for r in range(args.runs):
        loads.append(loadavg())
        for k, v in go_bench(binary, "Peak", "200ms").items():
            peak[k] = max(peak[k], v.get("GFLOP/s-best", v["GFLOP/s"]))
        # A time budget for the many short products, then three calls of
        # each (the long ones run once within any budget).
        for bt in (args.benchtime, "3x"):
            for k, v in go_bench(binary, "Family$", bt).items():
                if args.filter and args.filter not in k:
                    continue
                key = k[len("Family/"):]
                best_go[key] = max(best_go[key], v["GFLOP/s-best"])
                core_go[key] = max(core_go[key], v.get("GFLOP/s-core", 0))
        for ct in cores:
            for t in (1, 2):
                out = run(["/usr/bin/python3", os.path.join(HERE, "bench_numpy.py"), args.filter],
                          env={"OPENBLAS_NUM_THREADS": str(t), "OPENBLAS_CORETYPE": ct})
                for line in out.split("\n"):
                    f = line.split()
                    if len(f) == 4:
                        best_np[ct][f[0]] = max(best_np[ct][f[0]], float(f[1]))
                        core_np[ct][f[0]] = max(core_np[ct][f[0]], float(f[3]))
        loads.append(loadavg())
        print(f"run {r + 1}/{args.runs} done, load {loads[-1]}", file=sys.stderr)

    def geo(ct):
        v = [x for k, x in best_np[ct].items() if k.startswith("t1/")]
        return math.exp(sum(map(math.log, v)) / len(v)) if v else 0

    ranking = sorted(cores, key=geo, reverse=True)
    ct = ranking[0]
    print(f"OpenBLAS core types by geometric-mean GFLOP/s at 1 thread: " +
          ", ".join(f"{c} {geo(c):.1f}" for c in ranking) + f"; table uses {ct}")
    print(f"load averages (1/5/15 min) at run starts/ends: {'; '.join(loads)}")
    pk = {t: peak.get(f"Peak/avx512/t{t}", 0) or peak.get(f"Peak/avx2/t{t}", 0) for t in (1, 2)}
    print("FMA peak (BenchmarkPeak, best call): " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(peak.items())))
    print("Best call (wall clock) and per busy core (flops / process CPU time); % of peak is per")
    print("core against the one-core FMA peak. Ratios are troupe / OpenBLAS from the same runs.")
    print()
    print(f"| shape | thr | troupe best | OpenBLAS ({ct}) best | ratio | troupe /core | OpenBLAS /core | ratio | troupe % peak | OpenBLAS % peak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(best_go, key=lambda k: (k.split("/", 1)[1] if "/" in k else k, k)):
        t = int(key.split("/")[0][1:])
        g, n = best_go[key], best_np[ct].get(key, 0)
        gc, nc = core_go[key], core_np[ct].get(key, 0)
        r1 = f"{g / n:.2f}" if n else "-"
        r2 = f"{gc / nc:.2f}" if nc else "-"
        print(f"| {key.split('/', 1)[1]} | {t} | {g:.1f} | {n:.1f} | {r1} | {gc:.1f} | {nc:.1f} | {r2} | {100 * gc / pk[1]:.0f}% | {100 * nc / pk[1]:.0f}% |")

if __name__ == "__main__":
    main()
