#!/usr/bin/env bash
# kvserver refuses to start with an empty shared secret (issue 25, item 8):
# an empty --auth-token-file (or one holding only a newline) or --auth-token ""
# would otherwise turn authentication off without a word. The refusal comes
# before any RDMA device is opened, so this runs without one (label unit).
# Usage: auth_token_file_test.sh BUILD_DIR
set -u
BUILD=${1:?usage: auth_token_file_test.sh BUILD_DIR}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail=0

# expect_refused DESCRIPTION MESSAGE ARGS...: kvserver exits 2 at once and prints MESSAGE.
expect_refused() {
  local what=$1 want=$2
  shift 2
  timeout 20 "$BUILD/server/kvserver" --port 1 "$@" > "$DIR/out" 2>&1
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$DIR/out"; then
    echo "FAIL: $what: exit $rc (want 2), output:"
    sed 's/^/  | /' "$DIR/out"
    fail=1
  else
    echo "ok: $what: exit 2: $(head -1 "$DIR/out")"
  fi
}

: > "$DIR/empty"
printf '\n' > "$DIR/newline"
printf '\r\n\n' > "$DIR/newlines"
expect_refused "empty token file" "is empty: refusing to start without authentication" --auth-token-file "$DIR/empty"
expect_refused "token file with only a newline" "is empty: refusing to start without authentication" \
  --auth-token-file "$DIR/newline"
expect_refused "token file with only CR LF LF" "is empty: refusing to start without authentication" \
  --auth-token-file "$DIR/newlines"
expect_refused "empty --auth-token" "--auth-token is empty: refusing to start without authentication" \
  --auth-token ""
exit $fail
