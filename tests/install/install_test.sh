#!/usr/bin/env bash
# The installed package, run for real: a kvserver on the RDMA device, then the
# programs tests/install/build_examples.sh built against BUILD/install
# (examples/ with find_package(kvrdma), shared and static, and the pkg-config
# consumer, shared and static); finally SIGTERM: kvserver must exit 0.
# Usage: install_test.sh BUILD_DIR   (KVRDMA_TEST_ADDR must name the device's address)
set -u
BUILD=${1:?usage: install_test.sh BUILD_DIR}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
EX=$BUILD/examples
if [ ! -x "$EX/hello_kvrdma" ]; then
  echo "SKIP: $EX/hello_kvrdma not built: run tests/install/build_examples.sh $BUILD first (tools/test does)"
  exit 77
fi
KVSERVER=$BUILD/install/bin/kvserver
PORT=$((10000 + ($$ + 7919) % 20000))
LOG=$(mktemp)
fails=0
"$KVSERVER" --listen "$ADDR" --port "$PORT" --index-mb 4 --log-mb 64 --workers 2 > "$LOG" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 100); do
  "$BUILD/install/bin/kvctl" --server "$ADDR:$PORT" stats > /dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { echo "FAIL kvserver died:"; cat "$LOG"; exit 1; }
  sleep 0.1
done

run() {  # run NAME CMD...: must exit 0
  local name=$1; shift
  echo "---- $name: $*"
  "$@"
  local rc=$?
  if [ $rc = 0 ]; then echo "ok   $name"; else echo "FAIL $name: exit $rc"; fails=$((fails + 1)); fi
}
run "example (libkvrdma.so, find_package)" "$EX/hello_kvrdma" "$ADDR:$PORT"
run "example (libkvrdma.a, find_package)" "$EX/hello_kvrdma_static" "$ADDR:$PORT"
run "pkg-config consumer (libkvrdma.so)" "$EX/pkg-config/kvrdma_pc_hello" "$ADDR" "$PORT"
run "pkg-config consumer (libkvrdma.a)" "$EX/pkg-config/kvrdma_pc_hello_static" "$ADDR" "$PORT"
if ldd "$EX/hello_kvrdma" | grep -q "$BUILD/install/lib.*/libkvrdma.so"; then
  echo "ok   hello_kvrdma uses the installed libkvrdma.so"
else
  echo "FAIL hello_kvrdma does not use the installed libkvrdma.so:"; ldd "$EX/hello_kvrdma"; fails=$((fails + 1))
fi

kill -TERM $PID
for _ in $(seq 1 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
wait $PID; rc=$?
if [ $rc = 0 ]; then echo "ok   kvserver exits 0 on SIGTERM"; else echo "FAIL kvserver exit $rc:"; cat "$LOG"; fails=$((fails + 1)); fi
echo "installed-package test: $fails failure(s)"
[ $fails = 0 ]
