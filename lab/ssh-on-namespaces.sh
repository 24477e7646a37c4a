#!/bin/bash
# The ssh testbed on one machine (root): a namespace LAN (`rmcast-lab up`),
# Debian's sshd in every host namespace with keys made here, an inventory
# for them, and a scenario run from inside h0 over `--testbed ssh` — the
# same thing crates/rmcast-lab/tests/ssh.rs does, for measurements and for
# trying the testbed before a real cluster. The LAN is shaped like the
# netns testbed's (RATE, default 100mbit), so the two testbeds' results can
# be set side by side.
#   sudo bash lab/ssh-on-namespaces.sh lab/scenarios/smoke.toml /tmp/smoke-ssh [RECEIVERS [LAB RUN FLAGS]]
# (after cargo build --release -p rmcast-cli -p rmcast-lab; apt-get install
# openssh-server). The sshds are stopped by PID and the LAN removed on exit.
set -euo pipefail
SCENARIO=$(realpath "$1"); OUT=$(realpath -m "$2"); N=${3:-3}; RATE=${RATE:-100mbit}
LAB=$(realpath "${LAB:-target/release/rmcast-lab}")
RMCAST=$(realpath "${RMCAST:-target/release/rmcast}")
W=$(mktemp -d); PIDS=(); ID=
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "$ID" ] && "$LAB" down "$ID" >/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
ssh-keygen -q -t ed25519 -N '' -f "$W/host_key"; ssh-keygen -q -t ed25519 -N '' -f "$W/user_key"
cp "$W/user_key.pub" "$W/authorized_keys"
ID=$("$LAB" up --receivers "$N" --rate "$RATE" | sed -n 's/^testbed \(rml[a-z0-9]*\) is up.*/\1/p')
[ -n "$ID" ] || { echo "lab up failed" >&2; exit 1; }
mkdir -p /run/sshd
cat > "$W/hosts.toml" <<EOF
[defaults]
user = "root"
key = "$W/user_key"
iface = "eth0"
ssh_options = ["-o", "UserKnownHostsFile=$W/known_hosts", "-o", "StrictHostKeyChecking=accept-new"]
EOF
for i in $(seq 0 "$N"); do
  addr=10.77.0.$((i + 1))
  printf 'ListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\nPidFile none\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nMaxSessions 200\nMaxStartups 200:30:400\n' \
    "$addr" "$W/host_key" "$W/authorized_keys" > "$W/sshd-$i.conf"
  ip netns exec "$ID-h$i" /usr/sbin/sshd -D -e -f "$W/sshd-$i.conf" 2> "$W/sshd-$i.log" &
  PIDS+=($!)
  printf '\n[[hosts]]\nname = "node%d"\naddress = "%s"\nworkdir = "%s/work/node%d"\n' "$i" "$addr" "$W" "$i" >> "$W/hosts.toml"
done
for i in $(seq 0 "$N"); do
  for _ in $(seq 100); do grep -q 'Server listening' "$W/sshd-$i.log" && break; sleep 0.1; done
done
timeout 1800 ip netns exec "$ID-h0" "$LAB" run "$SCENARIO" --testbed ssh --inventory "$W/hosts.toml" \
  --out "$OUT" --rmcast "$RMCAST" --report "${@:4}"
