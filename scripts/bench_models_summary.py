#!/usr/bin/python3
"""Summarises scripts/bench-models.sh's raw output as Markdown tables.

For every shape and benchmark: troupe's and PyTorch's medians (tokens/s,
tokens per CPU-second, peak MiB) and the medians of the per-round ratios,
with their range. For decode at batch 1: troupe's weight bytes a
steady-state step (weight-GB/s) against the mean of the STREAM copies run
just before and just after it, the issue's bandwidth target.

usage: bench_models_summary.py RAW
"""

import re
import statistics
import sys

ROUND = re.compile(r"^== round (\d+)")
COPY = re.compile(r"^BenchmarkStreamCopy/t2\S*\s+\d+\s+\d+ ns/op\s+([\d.]+) GB/s")
TROUPE = re.compile(r"^BenchmarkLlama/([^/\s]+)/(\S+?)-\d+\s+\d+\s+\d+ ns/op\s+(.*)$")
TORCH = re.compile(r"^torch (\S+?)/(\S+)\t([\d.]+) tokens/s\t([\d.]+) tokens/cpu-s\t(\d+) peak-MiB")


def parse(lines):
    """Returns per (shape, bench) lists of (round, troupe metrics, torch
    metrics), and the decode rows' (round, weight GB/s, copy GB/s)."""
    rows, decode = {}, {}
    rnd, last_copy, waiting = 0, None, []
    for line in lines:
        if m := ROUND.match(line):
            rnd = int(m.group(1))
        elif m := COPY.match(line):
            c = float(m.group(1))
            for key, gb, r in waiting:  # decode runs since the last copy
                if last_copy is not None:
                    decode.setdefault(key, []).append((r, gb, (last_copy + c) / 2))
            waiting, last_copy = [], c
        elif m := TROUPE.match(line):
            key = (m.group(1), m.group(2))
            met = {k: float(v) for v, k in re.findall(r"([\d.]+) (\S+)", m.group(3))}
            rows.setdefault(key, {}).setdefault(rnd, {})["troupe"] = met
            if "weight-GB/s" in met and key[1].startswith("decode-batch1"):
                waiting.append((key, met["weight-GB/s"], rnd))
        elif m := TORCH.match(line):
            key = (m.group(1), m.group(2))
            rows.setdefault(key, {}).setdefault(rnd, {})["torch"] = {
                "tokens/s": float(m.group(3)), "tokens/cpu-s": float(m.group(4)), "peak-MiB": float(m.group(5))}
    return rows, decode


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ratio(xs):
    if not xs:
        return "—"
    return f"{med(xs):.2f}× ({min(xs):.2f}–{max(xs):.2f})"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    if lines and lines[0].startswith("#"):
        print(lines[0].lstrip("# "))
        print()
    rows, decode = parse(lines)
    if not rows:
        sys.exit(f"{sys.argv[1]}: no benchmark results")
    print("| shape / benchmark | troupe tok/s, tok/cpu-s, MiB | PyTorch tok/s, tok/cpu-s, MiB | ratio wall (range) | per CPU-s (range) |")
    print("|---|---|---|---|---|")
    for key, by in rows.items():
        tr = [v["troupe"] for v in by.values() if "troupe" in v]
        to = [v["torch"] for v in by.values() if "torch" in v]
        both = [v for v in by.values() if "troupe" in v and "torch" in v]
        rw = [v["troupe"]["tokens/s"] / v["torch"]["tokens/s"] for v in both]
        rc = [v["troupe"]["tokens/cpu-s"] / v["torch"]["tokens/cpu-s"] for v in both]

        def cell(ms):
            if not ms:
                return "—"
            return ", ".join(f"{med([m.get(k, float('nan')) for m in ms]):.1f}" for k in ("tokens/s", "tokens/cpu-s", "peak-MiB"))
        print(f"| {key[0]} {key[1]} | {cell(tr)} | {cell(to)} | {ratio(rw)} | {ratio(rc)} |")
    if decode:
        print()
        print("| decode at batch 1 | weight GB/s a step | copy GB/s around it | fraction of the copy (range) | n |")
        print("|---|---|---|---|---|")
        for key, runs in decode.items():
            fr = [gb / c for _, gb, c in runs]
            print(f"| {key[0]} {key[1]} | {med([g for _, g, _ in runs]):.1f} | {med([c for _, _, c in runs]):.1f} | "
                  f"{100 * med(fr):.0f}% ({100 * min(fr):.0f}–{100 * max(fr):.0f}) | {len(runs)} |")


if __name__ == "__main__":
    main()
