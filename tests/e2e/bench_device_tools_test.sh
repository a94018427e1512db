#!/usr/bin/env bash
# The benchmarks that time work requests on the device in one process
# (bench/device_pair.h): kvrdma_read_floor and kvrdma_rendezvous_cost, short,
# on the loopback transport and on the RDMA device. Each must exit 0 and
# print a line per pattern or way with a positive p50.
# Usage: bench_device_tools_test.sh BUILD_DIR   (KVRDMA_TEST_ADDR must name the device's address)
set -u
BUILD=${1:?usage: bench_device_tools_test.sh BUILD_DIR}
if [ -z "${KVRDMA_TEST_ADDR:-}" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
fails=0
check() {  # NAME EXPECTED_LINES COMMAND...: the command's rows (p50 in column P50COL) must all be > 0
  local name=$1 want=$2 col=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  local rows
  rows=$(printf '%s\n' "$out" | awk -v c="$col" 'NR > 1 && $c + 0 > 0 {n++} END {print n + 0}')
  if [ $rc -ne 0 ] || [ "$rows" != "$want" ]; then
    echo "FAIL: $name (exit $rc, $rows of $want rows with a positive p50):"; printf '%s\n' "$out"; fails=$((fails + 1))
  else
    echo "ok: $name"; printf '%s\n' "$out"
  fi
}
for where in --loopback ""; do
  check "kvrdma_read_floor ${where:-device}" 3 4 "$BUILD/bench/kvrdma_read_floor" $where --iters 40 --round 20
  check "kvrdma_read_floor ${where:-device} --spread-mb 4" 3 4 "$BUILD/bench/kvrdma_read_floor" $where --iters 40 --round 20 --spread-mb 4 --region-mb 16
  check "kvrdma_rendezvous_cost ${where:-device}" 3 3 "$BUILD/bench/kvrdma_rendezvous_cost" $where --iters 3 --sizes 4096
done
# A wrong argument is refused with the usage error code.
"$BUILD/bench/kvrdma_read_floor" --loopback --spread-mb 64 --region-mb 64 > /dev/null 2>&1
rc=$?
if [ $rc -ne 2 ]; then echo "FAIL: --spread-mb past half of --region-mb exited $rc, not 2"; fails=$((fails + 1)); fi
exit $((fails > 0))
