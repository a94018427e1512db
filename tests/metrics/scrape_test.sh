#!/usr/bin/env bash
# kvserver --metrics-listen on an RDMA device: scrape /metrics with curl
# during a kvbench run (workload A: reads and updates), check that the
# counters move as the run says they must, that a bad request gets its HTTP
# error while the run goes on, and that python3-prometheus-client's parser
# reads every scrape. Prints an excerpt of a scrape taken mid-run.
# Usage: scrape_test.sh BUILD_DIR   (under tools/with-rdma: KVRDMA_TEST_ADDR)
set -u
BUILD=${1:?usage: scrape_test.sh BUILD_DIR}
ADDR=${KVRDMA_TEST_ADDR:-}
if [ -z "$ADDR" ]; then echo "SKIP: KVRDMA_TEST_ADDR unset (run under tools/with-rdma)"; exit 77; fi
command -v curl > /dev/null || { echo "FAIL: curl missing (tools/setup installs it)"; exit 1; }
PY=${KVRDMA_PYTHON:-/usr/bin/python3}
"$PY" -c "import prometheus_client" 2> /dev/null || { echo "FAIL: python3-prometheus-client missing (tools/setup)"; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=$((10000 + $$ % 20000))
MPORT=$((PORT + 1))
DIR=$(mktemp -d)
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BUILD/server/kvserver" --help | grep -q -- "--metrics-listen ADDR:PORT\|--metrics-listen TEXT" && ok "--help explains --metrics-listen" \
  || bad "--help: $("$BUILD/server/kvserver" --help | grep -A3 metrics)"
"$BUILD/server/kvserver" --listen "$ADDR" --port "$PORT" --index-mb 4 --log-mb 64 --segment-mb 2 --workers 2 \
  --metrics-listen "127.0.0.1:$MPORT" > "$DIR/server.log" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null; rm -rf "$DIR"' EXIT
scrape() { curl -sS --max-time 5 "http://127.0.0.1:$MPORT/metrics"; }
for _ in $(seq 1 200); do
  scrape > "$DIR/s0.txt" 2> /dev/null && break
  kill -0 $PID 2> /dev/null || { echo "FAIL kvserver died:"; cat "$DIR/server.log"; exit 1; }
  sleep 0.05
done
value() {  # value FILE SAMPLE -> the sample's value (0 if absent)
  awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$1"
}
[ "$(value "$DIR/s0.txt" kvrdma_puts_total)" = 0 ] && ok "idle server: kvrdma_puts_total 0" || bad "first scrape: $(head -c 300 "$DIR/s0.txt")"

# Three slow clients hold connections with half a request through the run.
exec 5<>"/dev/tcp/127.0.0.1/$MPORT" 6<>"/dev/tcp/127.0.0.1/$MPORT" 7<>"/dev/tcp/127.0.0.1/$MPORT"
for fd in 5 6 7; do printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n' >&$fd; done
"$BUILD/bench/kvbench/kvbench" -s "$ADDR:$PORT" -w A --keys 2000 --value-size 256 -t 2 -d 4 --duration 6 \
  --warmup 0 --json "$DIR/bench.json" > "$DIR/bench.log" 2>&1 &
BENCH=$!
# The scrapes below are "during the run": wait (bounded) until PUTs are
# being applied, instead of a guessed 1.5 s.
for _ in $(seq 1 400); do
  scrape > "$DIR/wait.txt" 2> /dev/null
  [ "$(value "$DIR/wait.txt" kvrdma_puts_total)" -gt 0 ] && break
  kill -0 $BENCH 2> /dev/null || break
  sleep 0.05
done
i=0
while kill -0 $BENCH 2> /dev/null; do
  i=$((i + 1))
  scrape > "$DIR/s$i.txt" || bad "scrape $i during the run failed"
  [ $i = 1 ] && code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$MPORT/metrics") && \
    { [ "$code" = 405 ] && ok "POST during the run -> 405" || bad "POST -> $code"; }
  [ $i = 1 ] && code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/nope") && \
    { [ "$code" = 404 ] && ok "wrong path during the run -> 404" || bad "wrong path -> $code"; }
  sleep 0.3
done
wait $BENCH; brc=$?
exec 5>&- 6>&- 7>&-
[ $brc = 0 ] && ok "kvbench exit 0" || { bad "kvbench exit $brc"; cat "$DIR/bench.log"; }
scrape > "$DIR/end.txt" || bad "final scrape"
mid=$DIR/s$(( (i + 1) / 2 )).txt
[ "$i" -ge 1 ] && ok "$i scrape(s) during the run" || bad "no scrape during the run"

# Counters: PUTs during the run (the mid-run scrape is between 0 and the
# end), the end at least kvbench's acknowledged updates, service-time
# histogram count (one per request message) >= the messages that carried
# the PUTs (a PUT alone, or several in one: protocol 10), two connections
# while it ran, closed afterwards.
p_mid=$(value "$mid" kvrdma_puts_total); p_end=$(value "$DIR/end.txt" kvrdma_puts_total)
updates=$("$PY" -c "import json; r = json.load(open('$DIR/bench.json'))['results']; print(r.get('update', {}).get('ops', 0))")
{ [ "$p_mid" -gt 0 ] && [ "$p_mid" -lt "$p_end" ]; } && ok "puts_total moved during the run ($p_mid mid-run, $p_end at the end)" \
  || bad "puts_total mid $p_mid end $p_end"
[ "$p_end" -ge "$updates" ] && ok "puts_total $p_end >= kvbench's measured updates $updates" || bad "puts_total $p_end < updates $updates"
h_end=$(value "$DIR/end.txt" kvrdma_worker_service_seconds_count)
b_msgs=$(value "$DIR/end.txt" kvrdma_batched_messages_total); b_reqs=$(value "$DIR/end.txt" kvrdma_batched_requests_total)
put_msgs=$(( p_end - b_reqs + b_msgs ))
{ [ "$b_reqs" -ge "$b_msgs" ] && [ "$h_end" -ge "$put_msgs" ] && [ "$put_msgs" -gt 0 ]; } \
  && ok "service-time histogram count $h_end >= the $put_msgs messages of $p_end puts ($b_reqs of them in $b_msgs shared messages)" \
  || bad "histogram count $h_end < the $put_msgs messages of $p_end puts ($b_reqs of them in $b_msgs shared messages)"
[ "$(value "$mid" kvrdma_connections)" = 2 ] && ok "2 connections mid-run" || bad "connections mid-run: $(value "$mid" kvrdma_connections)"
for _ in $(seq 1 100); do scrape > "$DIR/end.txt"; [ "$(value "$DIR/end.txt" kvrdma_connections)" = 0 ] && break; sleep 0.05; done
[ "$(value "$DIR/end.txt" 'kvrdma_connections_closed_total{reason="client"}')" = 2 ] && ok "2 connections closed by the client" \
  || bad "closed by client: $(grep connections_closed "$DIR/end.txt")"
[ "$(value "$DIR/end.txt" kvrdma_errors_total)" = 0 ] && ok "no errors counted" || bad "errors: $(value "$DIR/end.txt" kvrdma_errors_total)"

# The real parser on every scrape (it raises on anything malformed).
if "$PY" "$HERE/parse_with_prometheus_client.py" "$DIR"/s*.txt "$DIR/end.txt"; then ok "python3-prometheus-client parsed every scrape"; else bad "parser"; fi

echo "---- excerpt of $(basename "$mid") (mid-run)"
grep -E '^kvrdma_(puts_total|deletes_total|errors_total|connections |connections_accepted|worker_service_seconds_(count|sum|bucket\{le="(5e-05|0.0001|0.00025)"\})|items|index_load_ratio|log_(live|used|free)_bytes|log_segments|grace_queue|cleaner_passes|evictions|locks)' "$mid"
echo "----"
kill -TERM $PID; wait $PID; rc=$?
[ $rc = 0 ] && ok "kvserver exits 0 on SIGTERM with the metrics port open" || bad "kvserver exit $rc"
echo "metrics scrape test: $fails failure(s)"
[ $fails = 0 ]
