#!/usr/bin/env bash
# Interleaved A/B of two rmcast binaries on one lab scenario, same machine
# (root: the namespace testbed). Runs A, B, A, B, ... ROUNDS times each and
# prints each tool's goodput per run and the ratio of the medians B/A.
#
#   sudo scripts/lab-ab.sh OLD/rmcast NEW/rmcast [SCENARIO] [RECEIVERS] [ROUNDS] [TOOLS]
#
# Defaults: lab/scenarios/fastpath.toml, 30 receivers, 3 rounds, the four
# rmcast UDP protocols. The lab driver is this tree's target/release/rmcast.
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2
scenario=${3:-lab/scenarios/fastpath.toml}
receivers=${4:-30}
rounds=${5:-3}
tools=${6:-rmcast-ack,rmcast-nak-poll,rmcast-ring,rmcast-tree}
out=$(mktemp -d /tmp/rmcast-lab-ab.XXXXXX)
for r in $(seq "$rounds"); do
  for v in a b; do
    bin=$a; [ "$v" = b ] && bin=$b
    timeout 900 target/release/rmcast lab run "$scenario" --rmcast "$bin" \
      --receivers "$receivers" --only "$tools" --out "$out/$v-$r" > "$out/$v-$r.log" 2>&1
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for v in "ab":
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/{v}-{r}/runs.csv")):
            res.setdefault((row["tool"], v), []).append(float(row["goodput_mbps"] or 0))
print("| tool | A Mbit/s | B Mbit/s | B/A (medians) |\n|---|---|---|---|")
for t in sorted({t for t, _ in res}):
    a, b = res[(t, "a")], res[(t, "b")]
    fmt = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    print(f"| {t} | {fmt(a)} | {fmt(b)} | {statistics.median(b) / statistics.median(a):.3f} |")
PY
echo "runs in $out"
