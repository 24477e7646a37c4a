#!/usr/bin/env bash
# Check (default) or bless every golden file: the simulator's whole reports
# for fixed seeds and the PRMP cases (rmcast-sim), and the fsu
# suite's `--backend sim --quick` report and runs (rmcast-lab). See the
# "Golden files" section of docs/architecture.md.
#
#   scripts/golden.sh          check: fails on any byte of difference
#   scripts/golden.sh bless    rewrite tests/golden/*.txt from this tree
#
# After blessing, review `git diff -- '*/tests/golden/*'` and say in the
# commit which change each difference is (a bug fixed, a behaviour chosen).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-check}" in
  check) unset RMCAST_GOLDEN_BLESS ;;
  bless) export RMCAST_GOLDEN_BLESS=1 ;;
  *) echo "usage: $0 [check|bless]" >&2; exit 2 ;;
esac
cargo test --locked -p rmcast-sim --test golden
cargo test --locked -p rmcast-sim --test stream_golden
cargo test --locked -p rmcast-lab --test golden
if [ "${1:-check}" = bless ]; then
  git status --short -- '*/tests/golden/*'
fi
