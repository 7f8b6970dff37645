#!/bin/sh
# `make bench`: runs bench/bench.lua (the cases in bench/cases/ against the C
# floor) with redis-servers of its own, started by spec/helper.lua on free
# ports under one temporary directory; whatever is still running there when
# the benchmark ends, however it ends, is stopped here. Arguments go to
# bench/bench.lua (--rounds N --scale X --only id,id --regime split|shared|both|unpinned
# --unix --out DIR --strict).
set -u
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
BUILD=${REDLOCK_BUILD:-build}
ROOT=$(mktemp -d /tmp/redlock-bench.XXXXXX)
export REDLOCK_TEST_TMP="$ROOT" REDLOCK_LUA="$LUA" REDLOCK_BUILD="$BUILD"
export REDLOCK_FLOOR="${REDLOCK_FLOOR:-$BUILD/bench/floor}"

child=""
cleanup() {
    [ -n "$child" ] && kill "$child" 2>/dev/null
    for pidfile in "$ROOT"/*/pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# in the background, so that a signal to this script stops it at once
LUA_PATH="lua/?.lua;lua/?/init.lua;bench/?.lua;spec/?.lua;;" LUA_CPATH="$BUILD/?.so;;" \
    $LUA bench/bench.lua "$@" &
child=$!
wait "$child"
rc=$?
child=""
exit "$rc"
