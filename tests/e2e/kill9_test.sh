#!/usr/bin/env bash
# kvserver killed with SIGKILL at a random moment of a write load, CYCLES
# times, on one --data-dir: after each restart every acknowledged PUT/DELETE
# is there with its version and nothing never written appears.
#
# A cycle: kvserver starts on the data dir (--fsync always, everysec, no in
# turn; it recovers what the earlier cycles left), kvrdma_crash_load writes
# (4 connections, one write in flight each, PUT 80 % / DELETE 20 % of keys
# ck-0 .. ck-(KEYS-1), the same keys every cycle; values of 16-200 bytes,
# and in every other cycle one PUT in ten of 3,000-60,000 bytes: fragmented
# and rendezvous PUTs) starting from the resolved
# expectations of the cycle before, kvserver is killed with SIGKILL after a
# random 0.3-2.0 s, restarted on the same dir with the same mode, and
# `kvrdma_crash_load --check` compares it with every key's last acknowledged
# write (and settles the writes that were in flight at the kill); then that
# kvserver is killed too (idle) and the next cycle starts. At the end the dir
# must pass kvserver --verify.
#
# A SIGKILLed kvserver is not waited for: on the Soft-RoCE guest its last
# thread stays in the rxe driver's __rxe_cleanup for ~50-206 s before the
# process is reaped. What the next kvserver needs is the data dir's flock
# (its fd is closed before the device's, so it is released at once) and a
# port (the dead one's listener may live until the reap): each start takes a
# new port, and waits only until the lock is free.
#
# Usage: kill9_test.sh BUILD_DIR [CYCLES]   (CYCLES default 5; KVRDMA_TEST_ADDR
# names the device's address: run it under tools/with-rdma)
# Knobs: KVRDMA_KILL9_KEYS (2000), KVRDMA_KILL9_LOG_MB (64), KVRDMA_KILL9_KEEP=DIR
# (on failure, copy the data dir, state files and logs there; the guest's
# /tmp is gone after tools/with-rdma returns).
set -u
BUILD=${1:?usage: kill9_test.sh BUILD_DIR [CYCLES]}
BUILD=$(cd "$BUILD" && pwd)
CYCLES=${2:-5}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
KEYS=${KVRDMA_KILL9_KEYS:-2000}
LOG_MB=${KVRDMA_KILL9_LOG_MB:-64}
BASE_PORT=$((10000 + ($$ + 29) % 20000))
STARTS=0
PORT=$BASE_PORT
DIR=$(mktemp -d)
DATA=$DIR/data
SPID= LPID=
trap 'kill -9 $SPID $LPID 2>/dev/null; rm -rf "$DIR"' EXIT
LOAD=$BUILD/tests/e2e/kvrdma_crash_load
ctl() { "$BUILD/tools/kvctl" --server "$ADDR:$PORT" --timeout-ms 5000 "$@"; }
SLOG=
fail() {
  echo "FAIL: $*"
  for f in "$DIR"/server.*.log; do
    [ -e "$f" ] || continue
    case "$f" in "$DIR/server.$cycle".*) echo "--- $(basename "$f") (tail)"; tail -n 30 "$f" ;; esac
  done
  # A kvserver this script did not kill that died of SIGKILL: the kernel's
  # out-of-memory killer is the usual cause here (each killed kvserver's
  # registered memory stays pinned until rxe reaps it, minutes later).
  dmesg 2>/dev/null | grep -i -E "out of memory|oom-kill|invoked oom" | tail -n 5 | sed 's/^/kernel: /'
  grep -E "^(MemTotal|MemAvailable|Unevictable):" /proc/meminfo 2>/dev/null | sed 's/^/meminfo: /'
  if [ -n "${KVRDMA_KILL9_KEEP:-}" ]; then
    mkdir -p "$KVRDMA_KILL9_KEEP" && cp -a "$DIR"/. "$KVRDMA_KILL9_KEEP"/ && echo "kept $DIR in $KVRDMA_KILL9_KEEP"
  fi
  exit 1
}
# start_server MODE TAG: kvserver on the data dir, serving when it returns.
# (--segment-mb 1 needs a smaller --max-value-bytes than the default 1 MiB: a
# segment must hold the largest entry.)
start_server() {
  SLOG=$DIR/server.$cycle.$2.log
  STARTS=$((STARTS + 1))
  PORT=$(( BASE_PORT + STARTS ))
  "$BUILD/server/kvserver" --listen "$ADDR" --port "$PORT" --data-dir "$DATA" --fsync "$1" --index-mb 4 \
    --log-mb "$LOG_MB" --segment-mb 1 --max-value-bytes 65536 --workers 2 > "$SLOG" 2>&1 &
  SPID=$!
  local i
  for i in $(seq 1 300); do
    ctl stats > /dev/null 2>&1 && return 0
    kill -0 $SPID 2>/dev/null || { wait $SPID; fail "kvserver ($1, $2) exited with $? before it served"; }
    sleep 0.1
  done
  fail "kvserver ($1, $2) did not serve within 30 s"
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# SIGKILL, then wait until the data dir's lock is free (not for the reap,
# above); KILL_MS: how long that took.
kill_server() {
  local t0 i; t0=$(now_ms)
  kill -9 $SPID 2>/dev/null
  for i in $(seq 1 600); do
    flock -n "$DATA/kvrdma.lock" true 2>/dev/null && break
    sleep 0.1
  done
  flock -n "$DATA/kvrdma.lock" true 2>/dev/null || fail "the data dir is still locked 60 s after SIGKILL of kvserver $SPID"
  SPID=
  KILL_MS=$(( $(now_ms) - t0 ))
}
# "N keys ... in M ms" from the recovery line of the log $1.
recovery_of() {
  sed -n 's/.*store: recovered \([0-9]*\) keys from \([0-9]*\) writes in \([0-9]*\) segment files.* in \([0-9]*\) ms.*/\1 keys from \2 writes in \3 segment files in \4 ms/p' "$1" | tail -n 1
}
field() { sed -n "s/.*$1 \([0-9]*\).*/\1/p" "$2" | head -n 1; }

MODES=(always everysec no)
TOTAL_ACKED=0 TOTAL_KEYS=0 TOTAL_VERSIONS=0 TOTAL_UNKNOWN=0 TOTAL_APPLIED=0 EARLY=0
T_START=$(date +%s)
PREV=
for cycle in $(seq 1 "$CYCLES"); do
  mode=${MODES[$(( (cycle - 1) % 3 ))]}
  start_server "$mode" a
  seed=$(( (RANDOM << 15 | RANDOM) * 1000 + cycle ))
  # Every other cycle, one PUT in ten carries 3,000-60,000 bytes: in
  # fragments up to 16 KiB, rendezvous PUTs above (the server READs the
  # value into a staging slot, then the store copies it into the log).
  LARGE=() RDV=()
  if [ $((cycle % 2)) = 0 ]; then LARGE=(--large 10:3000-60000) RDV=(--rendezvous-bytes 16384); fi
  "$LOAD" --server "$ADDR:$PORT" --keys "$KEYS" --seed "$seed" --state "$DIR/state.$cycle" \
    ${PREV:+--state-in "$PREV"} "${LARGE[@]}" "${RDV[@]}" > "$DIR/load.$cycle.log" 2>&1 &
  LPID=$!
  ms=$((300 + RANDOM % 1701))
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  kill -0 $LPID 2>/dev/null || { wait $LPID; cat "$DIR/load.$cycle.log"; fail "cycle $cycle: the load exited with $? before the kill"; }
  kill_server
  kill_ms=$KILL_MS
  t0=$(now_ms)
  # The load would stop within its operation timeout (3 s) once the server is
  # gone; SIGTERM stops it now (a write in flight is unknown, as at a timeout).
  kill -TERM $LPID 2>/dev/null
  for _ in $(seq 1 300); do kill -0 $LPID 2>/dev/null || break; sleep 0.1; done
  kill -0 $LPID 2>/dev/null && { kill -9 $LPID; cat "$DIR/load.$cycle.log"; fail "cycle $cycle: the load still ran 30 s after the kill"; }
  wait $LPID; lrc=$?
  LPID=
  stop_ms=$(( $(now_ms) - t0 ))
  case $lrc in
    0) ;;
    3) EARLY=$((EARLY + 1)) ;;  # killed before any write was acknowledged: the check still runs
    *) cat "$DIR/load.$cycle.log"; fail "cycle $cycle ($mode): the load exited with $lrc" ;;
  esac
  acked=$(field "acked writes" "$DIR/load.$cycle.log")
  large=$(field "large puts" "$DIR/load.$cycle.log")
  rdv=$(field "rendezvous puts" "$DIR/load.$cycle.log")
  unknown=$(field "unknown" "$DIR/load.$cycle.log")
  t0=$(now_ms)
  start_server "$mode" b
  start_ms=$(( $(now_ms) - t0 ))
  rec=$(recovery_of "$SLOG")
  [ -n "$rec" ] || fail "cycle $cycle ($mode): no 'store: recovered' line in the restarted kvserver's log"
  t0=$(now_ms)
  "$LOAD" --server "$ADDR:$PORT" --check "$DIR/state.$cycle" --resolved "$DIR/resolved.$cycle" "${RDV[@]}" \
    > "$DIR/check.$cycle.log" 2>&1
  crc=$?
  check_ms=$(( $(now_ms) - t0 ))
  if [ $crc != 0 ]; then
    cat "$DIR/load.$cycle.log" "$DIR/check.$cycle.log"
    fail "cycle $cycle ($mode, killed after $ms ms): the check exited with $crc"
  fi
  keys=$(field "check: keys" "$DIR/check.$cycle.log")
  versions=$(field "acked versions verified" "$DIR/check.$cycle.log")
  applied=$(field "unknown applied" "$DIR/check.$cycle.log")
  printf 'cycle %3d  %-8s  killed after %4d ms  acked %6d (large %d, rendezvous %d)  unknown %d (applied %d)  restart: recovered %s  checked %d keys, %d versions  (ms: kill %d, load stop %d, restart %d, check %d)\n' \
    "$cycle" "$mode" "$ms" "$acked" "${large:-0}" "${rdv:-0}" "$unknown" "$applied" "$rec" "$keys" "$versions" "$kill_ms" "$stop_ms" "$start_ms" "$check_ms"
  TOTAL_ACKED=$((TOTAL_ACKED + acked)) TOTAL_KEYS=$((TOTAL_KEYS + keys)) TOTAL_VERSIONS=$((TOTAL_VERSIONS + versions))
  TOTAL_UNKNOWN=$((TOTAL_UNKNOWN + unknown)) TOTAL_APPLIED=$((TOTAL_APPLIED + applied))
  PREV=$DIR/resolved.$cycle
  kill_server  # idle: the check's own conditional writes must survive it too (checked next cycle)
done
cycle=verify
"$BUILD/server/kvserver" --data-dir "$DATA" --verify > "$DIR/server.verify.log" 2>&1; vrc=$?
tail -n 1 "$DIR/server.verify.log"
[ $vrc = 0 ] || { cat "$DIR/server.verify.log"; fail "kvserver --verify exited with $vrc on the final data dir"; }
echo "keys checked after restarts: $TOTAL_KEYS, acked versions verified: $TOTAL_VERSIONS," \
  "writes in flight at the kill: $TOTAL_UNKNOWN (applied $TOTAL_APPLIED), cycles killed before any ack: $EARLY," \
  "$(( $(date +%s) - T_START )) s"
echo "kill -9 cycles: $CYCLES, acknowledged writes checked: $TOTAL_ACKED, lost: 0"
