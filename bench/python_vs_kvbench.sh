#!/usr/bin/env bash
# The Python binding's overhead, measured against kvbench in one run on the
# same device: GET p50 at depth 1, and GET throughput with 32 in flight
# (kvbench -d 32) against get_many of 32 keys. Same key count, key and value
# sizes, uniform keys, one client thread, one kvserver. Prints both and the
# ratios (Python / kvbench).
#
#   tools/with-rdma bench/python_vs_kvbench.sh [BUILD]     (default: build)
# Needs the package installed for KVRDMA_PYTHON (default /usr/bin/python3),
# e.g. in BUILD/python-site as tools/test does (PYTHONPATH is set to it).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ADDR=${KVRDMA_TEST_ADDR:?run under tools/with-rdma}
PY=${KVRDMA_PYTHON:-/usr/bin/python3}
KEYS=${KEYS:-10000} VSIZE=${VSIZE:-100} SECS=${SECS:-5}
PORT=$((20000 + $$ % 20000))
OUT=$(mktemp -d)
"$BUILD/server/kvserver" --listen "$ADDR" --port "$PORT" --index-mb 16 --log-mb 256 --workers 2 > "$OUT/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 1 200); do "$BUILD/tools/kvctl" --server "$ADDR:$PORT" stats > /dev/null 2>&1 && break; sleep 0.05; done

common=(-s "$ADDR:$PORT" -w C --distribution uniform --keys "$KEYS" --value-size "$VSIZE" -t 1 --warmup 1 --duration "$SECS")
"$BUILD/bench/kvbench/kvbench" "${common[@]}" --preload -d 1 --json "$OUT/kb1.json" > "$OUT/kb1.log"
"$BUILD/bench/kvbench/kvbench" "${common[@]}" -d 32 --json "$OUT/kb32.json" > "$OUT/kb32.log"
PYTHONPATH=${PYTHONPATH:-$BUILD/python-site} "$PY" "$ROOT/python/bench/bench_get.py" "$ADDR" "$PORT" \
  --keys "$KEYS" --value-size "$VSIZE" --duration "$SECS" --batch 32 --json "$OUT/py.json"

"$PY" - "$OUT" <<'PYEOF'
import json, sys
d = sys.argv[1]
kb1 = json.load(open(f"{d}/kb1.json"))["results"]["read"]
kb32 = json.load(open(f"{d}/kb32.json"))["results"]["read"]
py = json.load(open(f"{d}/py.json"))
print()
print(f"{'':34} {'kvbench':>12} {'python':>12} {'python/kvbench':>15}")
print(f"{'GET p50 at depth 1 (us)':34} {kb1['p50_us']:12.1f} {py['depth1']['p50_us']:12.1f} {py['depth1']['p50_us'] / kb1['p50_us']:15.2f}")
print(f"{'GET/s, depth 1':34} {kb1['ops_per_sec']:12.0f} {py['depth1']['ops_per_sec']:12.0f} {py['depth1']['ops_per_sec'] / kb1['ops_per_sec']:15.2f}")
print(f"{'GET/s, 32 in flight / get_many 32':34} {kb32['ops_per_sec']:12.0f} {py['batched']['ops_per_sec']:12.0f} {py['batched']['ops_per_sec'] / kb32['ops_per_sec']:15.2f}")
PYEOF
