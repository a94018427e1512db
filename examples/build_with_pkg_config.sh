#!/usr/bin/env bash
# Builds examples/kvrdma_pc_hello.cc with nothing but the compiler and
# pkg-config, twice: against libkvrdma.so and against libkvrdma.a (whose
# dependencies come from Requires.private / Libs.private, `--static`).
#
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig examples/build_with_pkg_config.sh OUTDIR
set -euo pipefail
OUT=${1:?usage: build_with_pkg_config.sh OUTDIR}
SRC=$(cd "$(dirname "$0")" && pwd)/kvrdma_pc_hello.cc
CXX=${CXX:-c++}
mkdir -p "$OUT"
pkg-config --exists --print-errors kvrdma
echo "kvrdma $(pkg-config --modversion kvrdma): cflags '$(pkg-config --cflags kvrdma)'"
libdir=$(realpath "$(pkg-config --variable=libdir kvrdma)")
# shellcheck disable=SC2046
"$CXX" -std=c++20 -Wall -Wextra -Werror $(pkg-config --cflags kvrdma) "$SRC" -o "$OUT/kvrdma_pc_hello" \
  $(pkg-config --libs kvrdma) -Wl,-rpath,"$libdir"
echo "built $OUT/kvrdma_pc_hello: $(pkg-config --libs kvrdma)"
static_libs=$(pkg-config --static --libs kvrdma | sed -E 's/(^| )-lkvrdma( |$)/\1-l:libkvrdma.a\2/')
# shellcheck disable=SC2046,SC2086
"$CXX" -std=c++20 -Wall -Wextra -Werror $(pkg-config --cflags kvrdma) "$SRC" -o "$OUT/kvrdma_pc_hello_static" \
  $static_libs
echo "built $OUT/kvrdma_pc_hello_static: $static_libs"
if readelf -d "$OUT/kvrdma_pc_hello_static" | grep -q 'libkvrdma\.so'; then
  echo "build_with_pkg_config.sh: the static build needs libkvrdma.so" >&2
  exit 1
fi
