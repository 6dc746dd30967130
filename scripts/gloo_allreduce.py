#!/usr/bin/python3
"""Allreduce bus bandwidth of torch.distributed's Gloo backend, the peer of
troupe's collectives (scripts/allreduce-bench), with the same sizes and the
same JSON lines.

    /usr/bin/python3 scripts/gloo_allreduce.py --procs 4 --min 1KiB --max 256MiB
    /usr/bin/python3 scripts/gloo_allreduce.py --procs 2 --tcp   # Gloo over TCP
                                                                 # (it has no TLS)

Processes are started with torch.multiprocessing (spawn) and meet through a
FileStore in a temporary directory, removed at the end. Gloo connects
them over TCP on the loopback interface (GLOO_SOCKET_IFNAME=lo). Bus
bandwidth is NCCL's: size * 2(n-1)/n / time of one allreduce.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time


def parse_size(s):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", s)
    if not m:
        raise SystemExit(f"size {s!r}: want a number of bytes, KiB, MiB or GiB")
    return int(m.group(1)) * {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]


def member(rank, args, store_path):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, args.procs)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=args.procs)
    n = args.procs
    size = args.min
    while size <= args.max:
        t = torch.full((size // 4,), 0.5, dtype=torch.float32)
        dist.all_reduce(t)  # warm-up
        # Rank 0 decides the iteration count so every member runs the same.
        start = time.perf_counter()
        dist.all_reduce(t)
        one = time.perf_counter() - start
        iters = torch.tensor([max(3, min(10000, int(args.time / max(one, 1e-6))))], dtype=torch.float32)
        dist.broadcast(iters, 0)
        k = int(iters.item())
        dist.barrier()
        start = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(t)
        d = (time.perf_counter() - start) / k
        if rank == 0:
            busbw = size * 2 * (n - 1) / n / d / 1e9
            print(json.dumps({"impl": "gloo", "algo": "gloo", "transport": "tcp", "procs": n, "bytes": size,
                              "iters": k, "seconds": d, "busbw_gbps": busbw}), flush=True)
        size *= 2
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--min", default="1KiB")
    p.add_argument("--max", default="256MiB")
    p.add_argument("--time", type=float, default=0.5, help="seconds per size")
    p.add_argument("--tcp", action="store_true", help="accepted for symmetry with allreduce-bench -tls; Gloo always uses TCP")
    args = p.parse_args()
    args.min, args.max = parse_size(args.min), parse_size(args.max)
    if args.procs < 2:
        raise SystemExit("--procs: want at least 2")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp

    d = tempfile.mkdtemp(prefix="gloo-allreduce-")
    try:
        mp.spawn(member, args=(args, os.path.join(d, "store")), nprocs=args.procs, join=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
