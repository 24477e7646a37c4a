#!/bin/bash
# Loopback: a flat group of 4 receivers against a cascade through two relays
# (1 receiver + relay 1 on group A, 1 receiver + relay 2 on B, 2 receivers on
# C), three runs each, the sender's goodput. Every process is bounded by
# `timeout`; the scratch directory is removed at the end.
#   RATE=200mbit SIZE_MIB=32 bash lab/relay-loopback-bench.sh   (after cargo build --release)
set -u
B=$(realpath "${RMCAST:-target/release/rmcast}")
RATE=${RATE:-200mbit}; SIZE_MIB=${SIZE_MIB:-32}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; cd "$W"
$B keygen -o g.key 2>/dev/null; export RMCAST_KEY_FILE=$W/g.key
head -c $((SIZE_MIB << 20)) /dev/urandom > obj.bin
report() { python3 -c "import json,sys;d=json.load(sys.stdin);print(d['ok'],round(d['goodput_mbps'],1))"; }
for rep in 1 2 3; do
  P=$((20000 + RANDOM % 20000))
  A=239.77.2.1:$P; Bg=239.77.2.2:$((P+1)); C=239.77.2.3:$((P+2))
  rm -rf o; pids=()
  for k in 1 2 3 4; do timeout 120 $B recv --group $A --out o/f$k --name f$k --timeout 60s >/dev/null 2>&1 & pids+=($!); done
  sleep 0.3
  flat=$(timeout 120 $B send obj.bin --group $A --receivers 4 --rate $RATE --json 2>/dev/null | report)
  wait "${pids[@]}"
  rm -rf o; pids=()
  timeout 120 $B recv --group $A --out o/a1 --name a1 --timeout 60s >/dev/null 2>&1 & pids+=($!)
  timeout 120 $B recv --group $Bg --out o/b1 --name b1 --timeout 60s >/dev/null 2>&1 & pids+=($!)
  for k in 1 2; do timeout 120 $B recv --group $C --out o/c$k --name c$k --timeout 60s >/dev/null 2>&1 & pids+=($!); done
  timeout 120 $B relay --from $Bg --to $C --receivers 2 --name r2 --timeout 60s >/dev/null 2>&1 & pids+=($!)
  timeout 120 $B relay --from $A --to $Bg --receivers 2 --name r1 --timeout 60s >/dev/null 2>&1 & pids+=($!)
  sleep 0.3
  casc=$(timeout 120 $B send obj.bin --group $A --receivers 2 --rate $RATE --json 2>/dev/null | report)
  wait "${pids[@]}"
  ok=1; for f in o/*/obj.bin; do cmp -s obj.bin "$f" || ok=0; done
  echo "run $rep: flat (ok, Mbit/s): $flat | cascade: $casc | copies: $(ls o/*/obj.bin | wc -l), all equal: $ok"
done
