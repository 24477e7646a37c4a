#!/usr/bin/env bash
# Installs the rmcast C library under a prefix: lib/librmcast_ffi.{so,a},
# include/rmcast.h and lib/pkgconfig/rmcast.pc. Builds the library first
# (release) unless RMCAST_FFI_LIB_DIR names a directory that holds it.
#
#   crates/rmcast-ffi/install.sh /usr/local      # or ~/.local, /opt/rmcast, ...
#   PKG_CONFIG_PATH=/usr/local/lib/pkgconfig cc app.c $(pkg-config --cflags --libs rmcast)
#
# LIBDIR (default PREFIX/lib) and INCLUDEDIR (default PREFIX/include) may
# be set in the environment.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
prefix=$(realpath -m "$1")
libdir=${LIBDIR:-$prefix/lib}
includedir=${INCLUDEDIR:-$prefix/include}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -1)

lib_dir=${RMCAST_FFI_LIB_DIR:-}
if [ -z "$lib_dir" ]; then
  (cd "$root" && cargo build --release --locked -p rmcast-ffi)
  lib_dir=$root/target/release
fi
for f in librmcast_ffi.so librmcast_ffi.a; do
  if [ ! -f "$lib_dir/$f" ]; then
    echo "$lib_dir/$f is missing: build it with \`cargo build --release -p rmcast-ffi\`" >&2
    exit 1
  fi
done

install -d "$libdir/pkgconfig" "$includedir"
install -m 0755 "$lib_dir/librmcast_ffi.so" "$libdir/"
install -m 0644 "$lib_dir/librmcast_ffi.a" "$libdir/"
install -m 0644 "$here/include/rmcast.h" "$includedir/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@INCLUDEDIR@|$includedir|" \
  -e "s|@VERSION@|$version|" "$here/rmcast.pc.in" > "$libdir/pkgconfig/rmcast.pc"
echo "installed rmcast $version: $libdir/librmcast_ffi.{so,a}, $includedir/rmcast.h, $libdir/pkgconfig/rmcast.pc"
