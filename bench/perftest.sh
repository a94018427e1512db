# bench/perftest.sh — sourced by bench/compare and bench/read_sizes (inside
# tools/with-rdma): run a perftest pair on the RDMA device and read its table.
# Needs DEV, GID, ADDR and OUT (a scratch directory) set by the caller.

# perftest_pair NAME ARGS...: the server in the background, the client against
# it; the client's output goes to $OUT/NAME.client. Prints the output when the
# client fails.
perftest_pair() {
  local name=$1; shift
  timeout 60 "$@" -d "$DEV" -x "$GID" > "$OUT/$name.server" 2>&1 &
  local spid=$!
  sleep 2
  timeout 60 "$@" -d "$DEV" -x "$GID" "$ADDR" > "$OUT/$name.client" 2>&1
  local rc=$?
  wait $spid 2>/dev/null
  [ $rc = 0 ] || { echo "perftest: $name failed:"; cat "$OUT/$name.client"; }
}
# The data line of a perftest latency table: t_typical (column 5).
lat_typical() { awk '$1 ~ /^[0-9]+$/ && NF >= 7 {v=$5} END {print v}' "$OUT/$1.client"; }
# The data line of a perftest bandwidth table: MsgRate[Mpps] (column 5).
bw_mpps() { awk '$1 ~ /^[0-9]+$/ && NF >= 5 {v=$5} END {print v}' "$OUT/$1.client"; }
