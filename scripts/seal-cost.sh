#!/usr/bin/env bash
# The CPU cost of sealing: one `rmcast send` and one `rmcast recv` as
# separate processes on loopback, object and copy on tmpfs, sealed and
# --insecure interleaved, each side under /usr/bin/time. Prints CPU-s per GB
# (user + sys) of each side and the goodput, per run, and the medians.
#
#   scripts/seal-cost.sh [SIZE_MIB=1024] [RUNS=3] [PACKET_SIZE=1472]
#
# Needs `cargo build --release -p rmcast-cli`. Loopback only (TTL 1).
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
runs=${2:-3}
packet=${3:-1472}
rm_bin=target/release/rmcast
work=$(mktemp -d /dev/shm/rmcast-seal-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
head -c "$((size_mib << 20))" /dev/urandom > "$work/obj.bin"
"$rm_bin" keygen -o "$work/group.key" 2>/dev/null
gb=$(awk "BEGIN { print $size_mib * 1048576 / 1e9 }")
declare -A rows
for run in $(seq 1 "$runs"); do
  for mode in sealed insecure; do
    if [ "$mode" = sealed ]; then keyargs=(--key "$work/group.key"); else keyargs=(--insecure); fi
    g="239.77.$((RANDOM % 200 + 10)).$((RANDOM % 200 + 10)):$((RANDOM % 20000 + 20000))"
    rm -rf "$work/out"
    /usr/bin/time -f "%U %S" -o "$work/r.time" "$rm_bin" recv "${keyargs[@]}" --group "$g" \
      --out "$work/out" --timeout 60s --json > "$work/r.json" 2>/dev/null &
    rpid=$!
    sleep 0.3
    /usr/bin/time -f "%U %S" -o "$work/s.time" "$rm_bin" send "${keyargs[@]}" "$work/obj.bin" \
      --receivers 1 --group "$g" --packet-size "$packet" --json > "$work/s.json" 2>/dev/null
    wait "$rpid"
    cmp -s "$work/obj.bin" "$work/out/obj.bin" || { echo "copy differs ($mode)"; exit 1; }
    s=$(awk -v gb="$gb" '{ printf "%.3f", ($1 + $2) / gb }' "$work/s.time")
    r=$(awk -v gb="$gb" '{ printf "%.3f", ($1 + $2) / gb }' "$work/r.time")
    mbps=$(python3 -c "import json; print(round(json.load(open('$work/s.json'))['goodput_mbps'], 1))")
    echo "run $run $mode: sender $s CPU-s/GB, receiver $r CPU-s/GB, $mbps Mbit/s"
    rows[$mode]+="$s $r $mbps"$'\n'
  done
done
for mode in sealed insecure; do
  printf '%s' "${rows[$mode]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
s, r, g = (statistics.median(c) for c in zip(*rows))
print(f"median '"$mode"': sender {s:.3f}, receiver {r:.3f} CPU-s/GB, {g:.1f} Mbit/s")'
done
