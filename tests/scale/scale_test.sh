#!/usr/bin/env bash
# Connection scale and churn against a real kvserver on an RDMA device:
#  - KVRDMA_HOLD_CONNECTIONS (500) connections held at once, all doing GET and PUT;
#  - KVRDMA_CHURN_CYCLES (1000 here; 5000 for the full run) connect/disconnect
#    cycles, after which kvserver's open file descriptors, QPs and memory must
#    be back to their baseline (printed before and after).
# Usage: scale_test.sh BUILD_DIR   (KVRDMA_TEST_ADDR names the device's address)
set -u
BUILD=${1:?usage: scale_test.sh BUILD_DIR}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
HOLD=${KVRDMA_HOLD_CONNECTIONS:-500}
CYCLES=${KVRDMA_CHURN_CYCLES:-1000}
PORT=$((10000 + ($$ + 13) % 20000))
LOG=$(mktemp)
ulimit -n 65536 2>/dev/null
# Every connection comes from this one host: no per-address limit, and room
# for all of them (kvserver --max-connections defaults to 1024).
"$BUILD/server/kvserver" --listen "$ADDR" --port "$PORT" --index-mb 8 --log-mb 64 --max-value-bytes 4096 \
  --srq-depth 8192 --max-connections-per-peer 0 --max-connections $((HOLD + 64)) > "$LOG" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -f "$LOG"' EXIT
TOOL="$BUILD/tests/scale/kvrdma_scale"
for _ in $(seq 1 100); do "$BUILD/tools/kvctl" --server "$ADDR:$PORT" stats > /dev/null 2>&1 && break; sleep 0.1; done
sample() {  # fds qps rss_kib
  local fds qps rss
  fds=$(ls /proc/$PID/fd | wc -l)
  qps=$(rdma resource show qp 2>/dev/null | grep -c "pid $PID ")
  rss=$(awk '/^VmRSS/{print $2}' /proc/$PID/status)
  echo "$fds $qps $rss"
}
fails=0
"$TOOL" --server "$ADDR:$PORT" churn 20 > /dev/null || fails=$((fails + 1))   # warm up allocator and caches
sleep 0.5
read -r fd0 qp0 rss0 < <(sample)
echo "baseline:          kvserver has $fd0 open fds, $qp0 QPs, RSS $rss0 KiB"
settle() {  # waits until fds and QPs are back to the baseline (disconnects are asynchronous)
  for _ in $(seq 1 50); do read -r fd qp rss < <(sample); [ "$fd" = "$fd0" ] && [ "$qp" = "$qp0" ] && break; sleep 0.1; done
}
"$TOOL" --server "$ADDR:$PORT" hold "$HOLD" || fails=$((fails + 1))
settle
echo "after $HOLD held and closed: kvserver has $fd open fds, $qp QPs, RSS $rss KiB"
rssh=$rss
"$TOOL" --server "$ADDR:$PORT" churn "$CYCLES" || fails=$((fails + 1))
settle
echo "after $CYCLES cycles: kvserver has $fd open fds, $qp QPs, RSS $rss KiB"
[ "$fd" = "$fd0" ] || { echo "FAIL: file descriptors $fd0 -> $fd"; fails=$((fails + 1)); }
[ "$qp" = "$qp0" ] || { echo "FAIL: QPs $qp0 -> $qp"; fails=$((fails + 1)); }
# Churn must not grow memory (4 MiB of allocator slack); the held phase may
# leave freed memory with the allocator, so it is the reference.
[ $((rss - rssh)) -lt 4096 ] || { echo "FAIL: RSS grew by $((rss - rssh)) KiB over $CYCLES cycles"; fails=$((fails + 1)); }
kill -TERM $PID
for _ in $(seq 1 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
wait $PID; rc=$?
[ $rc = 0 ] || { echo "FAIL: kvserver exit $rc"; tail -20 "$LOG"; fails=$((fails + 1)); }
echo "scale test: $fails failure(s)"
[ $fails = 0 ]
