#!/usr/bin/env bash
# kvctl round trip against a real kvserver on an RDMA device:
# start kvserver, put/get/del/stats (exit codes 0/1/2/3 as documented),
# conditional put/del (--if-version, --if-absent),
# values from stdin, then SIGTERM: kvserver must exit 0.
# Usage: kvctl_test.sh BUILD_DIR   (KVRDMA_TEST_ADDR must name the device's address)
set -u
BUILD=${1:?usage: kvctl_test.sh BUILD_DIR}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
KVSERVER=$BUILD/server/kvserver
KVCTL=$BUILD/tools/kvctl
PORT=$((10000 + $$ % 20000))
LOG=$(mktemp)
fails=0
check() {  # check NAME EXPECTED_RC ACTUAL_RC
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: exit $3, expected $2"; fails=$((fails + 1)); fi
}
"$KVSERVER" --version | grep -q "kvserver (kvrdma)" && echo "ok   --version" || { echo "FAIL --version"; fails=$((fails + 1)); }
"$KVSERVER" --help | grep -q -- "--max-value-bytes" && echo "ok   --help" || { echo "FAIL --help"; fails=$((fails + 1)); }
"$KVSERVER" --mode bogus > /dev/null 2>&1; check "bad option -> usage error 2" 2 $?
"$KVSERVER" --assembly-mb 1 --max-value-bytes 2000000 > /dev/null 2>&1
check "--assembly-mb below one value -> usage error 2" 2 $?
"$KVSERVER" --help | grep -q -- "--assembly-timeout-ms" && echo "ok   --help lists the assembly limits" ||
  { echo "FAIL --help lacks --assembly-timeout-ms"; fails=$((fails + 1)); }
# Options from a config file (same names as the command line).
CONF=$(mktemp)
printf 'listen = "%s"\nport = %s\nindex-mb = 4\nlog-mb = 64\nworkers = 2\n' "$ADDR" "$PORT" > "$CONF"
"$KVSERVER" --config "$CONF" > "$LOG" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -f "$LOG" "$CONF"' EXIT
ctl() { "$KVCTL" --server "$ADDR:$PORT" "$@"; }
for _ in $(seq 1 100); do
  ctl stats > /dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { echo "FAIL kvserver died:"; cat "$LOG"; exit 1; }
  sleep 0.1
done

ctl put greeting "hello world"; check "put" 0 $?
out=$(ctl get greeting); check "get found" 0 $?
[ "$out" = "hello world" ] && echo "ok   get value" || { echo "FAIL get value: '$out'"; fails=$((fails + 1)); }
ctl get missing > /dev/null; check "get missing -> 1" 1 $?
head -c 100000 /dev/urandom > "$LOG.val"
ctl put blob - < "$LOG.val"; check "put from stdin (100 kB)" 0 $?
ctl get --raw blob > "$LOG.got"; check "get blob" 0 $?
cmp -s "$LOG.val" "$LOG.got" && echo "ok   blob round trip" || { echo "FAIL blob differs"; fails=$((fails + 1)); }
rm -f "$LOG.val" "$LOG.got"
ctl del greeting; check "del" 0 $?
ctl del greeting; check "del again -> 1" 1 $?
ctl get greeting > /dev/null; check "get deleted -> 1" 1 $?
ctl --put-mode write-imm put viaimm yes; check "put via write-imm" 0 $?
[ "$(ctl get viaimm)" = yes ] && echo "ok   write-imm value" || { echo "FAIL write-imm value"; fails=$((fails + 1)); }
stats=$(ctl stats); check "stats" 0 $?
echo "$stats" | grep -q '^puts [0-9]' && echo "$stats" | grep -q '^items 2$' && echo "ok   stats content" \
  || { echo "FAIL stats content:"; echo "$stats"; fails=$((fails + 1)); }
json=$(ctl stats --json); check "stats --json" 0 $?
echo "$json" | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["items"] == 2 and d["puts"] >= 3, d' \
  && echo "ok   stats --json parses (python3 json) with items 2" || { echo "FAIL stats --json: $json"; fails=$((fails + 1)); }
# Conditional writes: exit 3 and the current version on stdout when refused.
v1=$(ctl put --if-absent --print-version cond one); check "put --if-absent (new key)" 0 $?
cur=$(ctl put --if-absent cond two 2> /dev/null); check "put --if-absent (key exists) -> 3" 3 $?
[ "$cur" = "$v1" ] && echo "ok   refused put prints the current version $cur" ||
  { echo "FAIL refused put printed '$cur', expected '$v1'"; fails=$((fails + 1)); }
v2=$(ctl put --if-version "$v1" --print-version cond two); check "put --if-version (current)" 0 $?
ctl put --if-version "$v1" cond three > /dev/null 2>&1; check "put --if-version (stale) -> 3" 3 $?
[ "$(ctl get cond)" = two ] && echo "ok   the refused put changed nothing" || { echo "FAIL cond value"; fails=$((fails + 1)); }
ctl del --if-version "$v1" cond > /dev/null 2>&1; check "del --if-version (stale) -> 3" 3 $?
ctl del --if-version "$v2" cond; check "del --if-version (current)" 0 $?
cur=$(ctl put --if-version "$v2" cond four 2> /dev/null); check "put --if-version of a deleted key -> 3" 3 $?
[ "$cur" = 0 ] && echo "ok   a deleted key's version is 0" || { echo "FAIL deleted key's version '$cur'"; fails=$((fails + 1)); }
ctl put --if-absent --if-version 3 cond x > /dev/null 2>&1; check "--if-absent with --if-version -> usage error 2" 2 $?
ctl put "" x 2> /dev/null; check "empty key -> 2" 2 $?
err=$("$KVCTL" --server "$ADDR:$((PORT + 1))" get k 2>&1); check "no server -> 2" 2 $?
echo "$err" | grep -q "kvctl: connecting" && echo "ok   error message: $err" || { echo "FAIL message: $err"; fails=$((fails + 1)); }

kill -TERM $PID
for _ in $(seq 1 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
wait $PID; rc=$?
check "kvserver exits 0 on SIGTERM" 0 $rc
grep -q "stopped cleanly" "$LOG" && echo "ok   clean stop logged" || { echo "FAIL no clean stop:"; cat "$LOG"; fails=$((fails + 1)); }
echo "kvctl test: $fails failure(s)"
[ $fails = 0 ]
