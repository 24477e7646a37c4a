#!/usr/bin/env python3
"""Benchmark: Python ``rmcast.bcast`` of a 1 GiB numpy array to 2 receivers
on loopback, against the CLI moving the same bytes from tmpfs.

    cargo build --release -p rmcast-cli
    pip install ./bindings/python                # release build (the default)
    python bindings/python/bench/bcast_1g.py [--mib 1024] [--runs 3] [--cli target/release/rmcast]

Per run, alternating the two:
- python: a sender process fills a numpy array and calls
  ``rmcast.bcast(a, receivers=2)``; two receiver processes call
  ``rmcast.bcast()`` and get the array in memory.
- cli: ``rmcast send /dev/shm/FILE --receivers 2 --key K --json`` with two
  ``rmcast recv --key K --out /dev/shm/...`` (the same bytes).

Reports each side's goodput (the library's own measure, from the first
announcement to the last confirmation, and the wall time of the send call),
the Python/CLI ratio (median of the runs), and peak RSS: the Python sender's
before and after the send (an extra copy would add the array's size) and
each receiver's. Everything stays on 127.0.0.1 with TTL 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_sender(mib: int, key: str, group: str) -> None:
    import numpy as np
    import rmcast

    a = np.arange(mib * (1 << 20) // 8, dtype=np.uint64)  # touched: resident
    before = maxrss_mib()
    t = time.monotonic()
    r = rmcast.bcast(a, receivers=2, key=key, group=group, wait=60)
    wall = time.monotonic() - t
    print(json.dumps({"seconds": r.seconds, "wall": wall, "goodput_mbps": r.goodput_mbps,
                      "rss_before_mib": before, "rss_peak_mib": maxrss_mib(),
                      "array_mib": a.nbytes / (1 << 20), "ok": r.ok}))


def child_receiver(key: str, group: str) -> None:
    import rmcast

    a = rmcast.bcast(key=key, group=group, listen_timeout=60)
    print(json.dumps({"rss_peak_mib": maxrss_mib(), "bytes": a.nbytes}))


def run_python(mib: int, key: str, group: str) -> dict:
    me = [sys.executable, os.path.abspath(__file__)]
    recvs = [subprocess.Popen(me + ["_receiver", key, group], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    time.sleep(0.5)
    out = subprocess.run(me + ["_sender", str(mib), key, group], stdout=subprocess.PIPE,
                         text=True, check=True, timeout=300).stdout
    res = json.loads(out)
    res["receivers_rss_peak_mib"] = [json.loads(p.communicate(timeout=120)[0])["rss_peak_mib"]
                                     for p in recvs]
    return res


def run_cli(cli: str, path: str, key: str, group: str, outdir: str) -> dict:
    recvs = []
    for i in range(2):
        d = os.path.join(outdir, f"r{i}")
        shutil.rmtree(d, ignore_errors=True)
        recvs.append(subprocess.Popen(
            ["/usr/bin/time", "-f", "%M", cli, "recv", "--key", key, "--group", group,
             "--out", d, "--timeout", "60s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    time.sleep(0.5)
    t = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", cli, "send", path, "--receivers", "2",
                        "--key", key, "--group", group, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    wall = time.monotonic() - t
    r = json.loads(p.stdout)
    rss = [int(q.communicate(timeout=120)[1].strip().splitlines()[-1]) / 1024 for q in recvs]
    return {"seconds": r["seconds"], "wall": wall, "goodput_mbps": r["goodput_mbps"], "ok": r["ok"],
            "rss_peak_mib": int(p.stderr.strip().splitlines()[-1]) / 1024,
            "receivers_rss_peak_mib": rss}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(REPO, "target", "release", "rmcast"))
    args = ap.parse_args()
    import numpy as np
    import rmcast

    shm = tempfile.mkdtemp(prefix="rmcast-bench-", dir="/dev/shm")
    try:
        key = os.path.join(shm, "group.key")
        rmcast.keygen(key)
        src = os.path.join(shm, "src.bin")
        np.arange(args.mib * (1 << 20) // 8, dtype=np.uint64).tofile(src)
        py, cl = [], []
        for i in range(args.runs):
            py.append(run_python(args.mib, key, rmcast.random_group()))
            print("python", json.dumps(py[-1]), flush=True)
            cl.append(run_cli(args.cli, src, key, rmcast.random_group(), shm))
            print("cli   ", json.dumps(cl[-1]), flush=True)
        gp = statistics.median(r["goodput_mbps"] for r in py)
        gc = statistics.median(r["goodput_mbps"] for r in cl)
        wp = statistics.median(r["wall"] for r in py)
        wc = statistics.median(r["wall"] for r in cl)
        print(f"\n{args.mib} MiB to 2 receivers, median of {args.runs} runs")
        print(f"  goodput python {gp:.0f} Mbit/s, cli {gc:.0f} Mbit/s: ratio {gp / gc:.3f}")
        print(f"  send wall time python {wp:.2f} s, cli {wc:.2f} s: ratio {wc / wp:.3f}")
        print(f"  python sender peak RSS {max(r['rss_peak_mib'] for r in py):.0f} MiB for a "
              f"{args.mib} MiB array (before sending {max(r['rss_before_mib'] for r in py):.0f} MiB)")
        print(f"  python receivers peak RSS {max(max(r['receivers_rss_peak_mib']) for r in py):.0f} MiB; "
              f"cli sender {max(r['rss_peak_mib'] for r in cl):.0f} MiB, "
              f"cli receivers {max(max(r['receivers_rss_peak_mib']) for r in cl):.0f} MiB")
    finally:
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_sender":
        child_sender(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "_receiver":
        child_receiver(sys.argv[2], sys.argv[3])
    else:
        main()
