#!/usr/bin/env python3
"""Broadcast a numpy array to 8 receiver processes over loopback multicast.

    python bindings/python/examples/bcast_numpy.py [--receivers 8] [--mib 64]

The parent makes a group key and a random group, starts N receiver
processes (each calls ``rmcast.bcast(key=..., group=...)`` and gets the
array back with its dtype and shape), then broadcasts the array from its
own memory with ``rmcast.bcast(array, receivers=N, ...)``. Each receiver
checks its copy and prints a line. Traffic stays on 127.0.0.1 (TTL 1).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time

import numpy as np

import rmcast


def receiver(rank: int, key: str, group: str, expect_sum: float, out: "mp.Queue[str]") -> None:
    a = rmcast.bcast(key=key, group=group, listen_timeout=30, name=f"worker-{rank}")
    ok = np.isclose(a.sum(), expect_sum)
    out.put(f"receiver {rank}: {a.dtype} {a.shape}, sum {'ok' if ok else 'WRONG'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receivers", type=int, default=8)
    ap.add_argument("--mib", type=int, default=64, help="array size in MiB")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        key = os.path.join(tmp, "group.key")
        rmcast.keygen(key)                      # in real use: `rmcast keygen`, shared once
        group = rmcast.random_group()
        n = args.mib * (1 << 20) // 8
        a = np.random.default_rng(0).random(n).reshape(-1, 1024)

        ctx = mp.get_context("spawn")
        results: "mp.Queue[str]" = ctx.Queue()
        procs = [ctx.Process(target=receiver, args=(i, key, group, float(a.sum()), results))
                 for i in range(args.receivers)]
        for p in procs:
            p.start()

        t = time.monotonic()
        report = rmcast.bcast(a, receivers=args.receivers, key=key, group=group, wait=30)
        took = time.monotonic() - t
        for _ in procs:
            print(results.get(timeout=60))
        for p in procs:
            p.join(timeout=30)
        print(f"sent {a.nbytes / (1 << 20):.0f} MiB to {report.verified}/{report.receivers} "
              f"receivers with {report.protocol} in {took:.2f} s "
              f"({report.goodput_mbps:.0f} Mbit/s goodput)")


if __name__ == "__main__":
    main()
