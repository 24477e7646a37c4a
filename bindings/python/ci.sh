#!/usr/bin/env bash
# CI for the Python package: a fresh virtual environment, `pip install
# ./bindings/python` (maturin from PyPI, pinned in pyproject.toml), the
# pinned test tools, then the pytest suite. Run from anywhere; exits
# non-zero on any failure.
#
# The install builds the release profile, the wheel users get: a
# less-optimised profile was measured to build no faster (~40-60 s from
# clean on 2 cores either way; the time goes into the dependencies).
# Set RMCAST_PY_LINT=1 to also run rustfmt and clippy on the extension crate.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="$(mktemp -d "${TMPDIR:-/tmp}/rmcast-py-ci.XXXXXX")"
trap 'rm -rf "$venv"' EXIT

start=$SECONDS
step() { printf '== bindings/python: %s (%ds)\n' "$*" $((SECONDS - start)); }

if [[ "${RMCAST_PY_LINT:-0}" == 1 ]]; then
    step "rustfmt, clippy"
    (cd "$here" && cargo fmt -- --check && cargo clippy --locked --all-targets -- -D warnings)
fi

step "venv in $venv"
if ! "$python" -m venv "$venv"; then
    echo "bindings/python/ci.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input -q)

step "pip install ./bindings/python and test tools"
"${pip[@]}" install "$here" -r "$here/requirements-test.txt"

step "pytest"
# Run from the tests' directory with the installed package, not the source tree.
cd "$here/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider .
step "done"
