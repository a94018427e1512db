#!/usr/bin/env bash
# Lease expiry across processes: a kvctl holding a lock is killed with
# SIGKILL; another client gets the lock after the lease and not before.
# Usage: lock_lease_test.sh BUILD_DIR   (KVRDMA_TEST_ADDR names the device's address)
set -u
BUILD=${1:?usage: lock_lease_test.sh BUILD_DIR}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
PORT=$((10000 + ($$ + 7) % 20000))
LEASE_MS=4000
DIR=$(mktemp -d)
"$BUILD/server/kvserver" --listen "$ADDR" --port "$PORT" --index-mb 4 --log-mb 64 --log-level debug > "$DIR/server.log" 2>&1 &
SPID=$!
trap 'kill -9 $SPID $HPID 2>/dev/null; rm -rf "$DIR"' EXIT
HPID=
ctl() { "$BUILD/tools/kvctl" --server "$ADDR:$PORT" --timeout-ms 20000 "$@"; }
for _ in $(seq 1 100); do ctl stats > /dev/null 2>&1 && break; sleep 0.1; done
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

mkfifo "$DIR/holder"
# The kvctl process itself (not a subshell) is the holder, so SIGKILL hits it.
"$BUILD/tools/kvctl" --server "$ADDR:$PORT" lock k --lease-ms $LEASE_MS --hold-ms -1 > "$DIR/holder" &
HPID=$!
read -r line < "$DIR/holder"
[ "$line" = locked ] || { echo "FAIL: holder did not get the lock ('$line')"; exit 1; }
T0=$(now_ms)
kill -9 $HPID
wait $HPID 2>/dev/null
kill -0 $HPID 2>/dev/null && { echo "FAIL: the holder survived SIGKILL"; exit 1; }
echo "holder killed with SIGKILL while holding the lock (lease $LEASE_MS ms)"
ctl trylock k; rc=$?
T1=$(now_ms)
if [ $rc != 1 ]; then echo "FAIL: trylock $((T1 - T0)) ms after the kill exited $rc, expected 1 (held)"; exit 1; fi
[ $((T1 - T0)) -lt $LEASE_MS ] || { echo "FAIL: the first trylock came too late to prove anything"; exit 1; }
echo "ok   $((T1 - T0)) ms after the kill: still locked"
ctl lock k --lease-ms 1000 --hold-ms 0 > /dev/null; rc=$?
T2=$(now_ms)
[ $rc = 0 ] || { echo "FAIL: lock after the lease exited $rc"; exit 1; }
echo "ok   lock taken over $((T2 - T0)) ms after the kill"
# Not before the lease (the lease started before T0; allow clock granularity).
if [ $((T2 - T0)) -lt $((LEASE_MS - 500)) ]; then echo "FAIL: taken over before the lease ended"; exit 1; fi
if [ $((T2 - T0)) -gt $((LEASE_MS + 8000)) ]; then echo "FAIL: took far longer than the lease"; exit 1; fi
kill -TERM $SPID
for _ in $(seq 1 100); do kill -0 $SPID 2>/dev/null || break; sleep 0.1; done
if kill -0 $SPID 2>/dev/null; then
  echo "FAIL: kvserver still running 10 s after SIGTERM; threads:"
  for t in /proc/$SPID/task/*; do echo "  $(cat "$t/comm") $(cat "$t/wchan" 2>/dev/null)"; done
  cat "$DIR/server.log"
  exit 1
fi
wait $SPID; rc=$?
[ $rc = 0 ] || { echo "FAIL: kvserver exit $rc"; cat "$DIR/server.log"; exit 1; }
echo "lock lease test: ok"
