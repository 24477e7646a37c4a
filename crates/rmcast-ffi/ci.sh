#!/usr/bin/env bash
# CI of the C library: builds it, installs it under a scratch prefix with
# install.sh, compiles the C examples with the system's cc against the
# installed header and library through pkg-config (shared, with an rpath,
# and static), and runs them, each bounded in time. Traffic stays on this
# machine (127.0.0.1, TTL 1, random groups).
#
# RMCAST_FFI_PROFILE (default `test`) picks the cargo profile of the build.
# RMCAST_FFI_LIB_DIR names a directory that already holds librmcast_ffi.so
# and .a, and skips the build: `cargo test --workspace` leaves them in
# target/debug/deps, built with the workspace's features. (`cargo build -p
# rmcast-ffi` unifies the features of this crate's dependencies alone, so
# it rebuilds libc, ring and rmcast itself: 73 s of a CI run.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
profile=${RMCAST_FFI_PROFILE:-test}
case "$profile" in
  dev | test) out_dir=debug ;;
  *) out_dir=$profile ;;
esac
start=$(date +%s)
for tool in cc pkg-config timeout; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "rmcast-ffi/ci.sh needs $tool (Debian: apt-get install gcc pkg-config coreutils)" >&2
    exit 1
  fi
done

if [ -n "${RMCAST_FFI_LIB_DIR:-}" ]; then
  lib_dir=$RMCAST_FFI_LIB_DIR
  for f in librmcast_ffi.so librmcast_ffi.a; do
    if [ ! -f "$lib_dir/$f" ]; then
      echo "rmcast-ffi/ci.sh: RMCAST_FFI_LIB_DIR=$lib_dir holds no $f" >&2
      exit 1
    fi
  done
  echo "== rmcast-ffi: the library built already, in $lib_dir"
else
  echo "== rmcast-ffi: build ($profile profile)"
  cargo build --locked --profile "$profile" -p rmcast-ffi
  lib_dir=$root/target/$out_dir
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
RMCAST_FFI_LIB_DIR="$lib_dir" "$here/install.sh" "$scratch/prefix" >/dev/null
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir rmcast)
cc=${CC:-cc}  # the system compiler unless CC says otherwise
cflags="-std=c11 -O1 -g -Wall -Wextra -Werror $(pkg-config --cflags rmcast)"

echo "== rmcast-ffi: the header compiles as C and C++"
echo '#include "rmcast.h"' | $cc $cflags -x c -fsyntax-only -
if command -v c++ >/dev/null 2>&1; then
  echo '#include "rmcast.h"' | c++ -Wall -Werror $(pkg-config --cflags rmcast) -x c++ -fsyntax-only -
fi

for ex in roundtrip stream; do
  echo "== rmcast-ffi: examples/c/$ex.c (shared library)"
  # shellcheck disable=SC2086
  $cc $cflags "$here/examples/c/$ex.c" -o "$scratch/$ex" \
    $(pkg-config --libs rmcast) -lpthread -Wl,-rpath,"$libdir"
  timeout 120 "$scratch/$ex"
done

echo "== rmcast-ffi: examples/c/roundtrip.c (static library)"
# The archive by path (-lrmcast_ffi would pick the .so), then the system
# libraries Rust's std needs (rmcast.pc's Libs.private).
# shellcheck disable=SC2086
$cc $cflags "$here/examples/c/roundtrip.c" -o "$scratch/roundtrip-static" \
  "$libdir/librmcast_ffi.a" -lpthread -ldl -lm -lrt -lutil -lgcc_s
if ldd "$scratch/roundtrip-static" | grep -q librmcast_ffi; then
  echo "roundtrip-static links librmcast_ffi.so, not the archive" >&2
  exit 1
fi
timeout 120 "$scratch/roundtrip-static"

echo "== rmcast-ffi: C examples passed in $(($(date +%s) - start)) s"
