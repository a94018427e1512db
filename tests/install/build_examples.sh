#!/usr/bin/env bash
# Installs BUILD into BUILD/install (cmake --install) and builds examples/
# against that installed package only: with CMake (find_package(kvrdma)) into
# BUILD/examples, and with pkg-config (examples/build_with_pkg_config.sh)
# into BUILD/examples/pkg-config. Also checks what the install contains.
# tools/test runs it on the host; tests/install/install_test.sh (label rdma)
# then runs the programs against a kvserver on the RDMA device.
#
#   tests/install/build_examples.sh [BUILD]     (default: build)
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
PREFIX=$BUILD/install
OUT=$BUILD/examples

rm -rf "$PREFIX" "$OUT"
cmake --install "$BUILD" --prefix "$PREFIX" > "$BUILD/install.log"
echo "installed into $PREFIX ($(wc -l < "$BUILD/install.log") files)"

# What a real library install has (lib may be lib/ or lib/<multiarch>/).
fails=0
need() { if compgen -G "$PREFIX/$1" > /dev/null; then echo "ok   $1"; else echo "FAIL missing $1"; fails=$((fails + 1)); fi; }
need "lib*/libkvrdma.so"
need "lib*/libkvrdma.so.*"
need "lib*/libkvrdma.a"
need "lib*/cmake/kvrdma/kvrdmaConfig.cmake"
need "lib*/cmake/kvrdma/kvrdmaConfigVersion.cmake"
need "lib*/cmake/kvrdma/kvrdmaTargets.cmake"
need "lib*/pkgconfig/kvrdma.pc"
need "include/kvrdma/client.h"
need "include/kvrdma/status.h"
need "include/kvrdma/sharded_client.h"
need "bin/kvserver"
need "bin/kvctl"
[ -e "$BUILD/bench/kvbench/kvbench" ] && need "bin/kvbench"
extra=$(find "$PREFIX/include" -type f ! -path "$PREFIX/include/kvrdma/*.h")
if [ -n "$extra" ]; then echo "FAIL headers outside include/kvrdma: $extra"; fails=$((fails + 1)); fi
# Only the public API is exported from the shared library.
so=$(compgen -G "$PREFIX/lib*/libkvrdma.so" | head -n1)
# (The list is read whole: `grep -q` under pipefail could turn a match into a pass.)
exported=$(nm -D --defined-only "$so" | c++filt | grep -vE ' (kvrdma::(Client|ShardedClient|Status)::|kvrdma::CodeName|KVRDMA_0)' || true)
if [ -n "$exported" ]; then
  echo "FAIL libkvrdma.so exports more than the public API:"
  echo "$exported" | head
  fails=$((fails + 1))
else
  echo "ok   libkvrdma.so exports only the public API ($(nm -D --defined-only "$so" | grep -c ' T ') functions)"
fi
[ $fails = 0 ] || exit 1

# CMake consumer: nothing of the build tree on its paths.
cmake -S "$ROOT/examples" -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$OUT.configure.log" 2>&1 \
  || { cat "$OUT.configure.log"; echo "FAIL configuring examples/ against $PREFIX"; exit 1; }
grep 'kvrdma .* from' "$OUT.configure.log" | sed 's/^-- /ok   /'
cmake --build "$OUT" -j "${KVRDMA_JOBS:-2}" > "$OUT.build.log" 2>&1 \
  || { cat "$OUT.build.log"; echo "FAIL building examples/"; exit 1; }
echo "ok   examples/ built with find_package(kvrdma): $OUT/hello_kvrdma, $OUT/hello_kvrdma_static"

# pkg-config consumer.
PKG_CONFIG_PATH=$(dirname "$(compgen -G "$PREFIX/lib*/pkgconfig/kvrdma.pc" | head -n1)") \
  "$ROOT/examples/build_with_pkg_config.sh" "$OUT/pkg-config" \
  || { echo "FAIL building the pkg-config consumer"; exit 1; }
echo "ok   pkg-config consumer built"
