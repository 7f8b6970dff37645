#!/bin/sh
# The redis-server's instructions per uncontended lock cycle, counted by
# valgrind's callgrind in the server: exact and the same on any machine
# load, where `make bench`'s CPU times move with it. Runs one redis-server
# under callgrind on a free port, then, for the textbook floor (bench/floor
# textbook) and the library with each option combination, 200 and 2200
# cycles between a zeroing and a dump of the counters; prints the
# difference / 2000 and the ratio to the textbook's. Slow (the server runs
# about 50 times slower under callgrind): about a minute.
# usage: sh bench/server_instructions.sh   (after make and build/bench/floor)
set -u
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
BUILD=${REDLOCK_BUILD:-build}
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
    { echo "needs valgrind (callgrind_control)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/redlock-cg.XXXXXX)
PORT=$(( 20000 + $$ % 20000 ))
valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.out" redis-server --port "$PORT" \
    --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" >"$DIR/log" 2>&1 &
VG=$!
trap 'kill $VG 2>/dev/null; wait $VG 2>/dev/null; rm -rf "$DIR"' EXIT
i=0
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "the server did not start" >&2; exit 1; }; sleep 0.2
done
# the library's cycle, n times, with options $2 (default, nofence, nonotify, plain)
lib() {
    LUA_PATH="lua/?.lua;;" LUA_CPATH="$BUILD/?.so;;" $LUA -e "
        local redlock = require 'redlock'
        local n, opt = $1, '$2'
        local o = { servers = { 'redis://127.0.0.1:$PORT' } }
        if opt == 'nofence' or opt == 'plain' then o.fence = false end
        if opt == 'nonotify' or opt == 'plain' then o.notify = false end
        local c = redlock.new(o)
        for _ = 1, n do assert(assert(c:acquire('bench:cg')):release()) end
        c:close()"
}
floor() { "$BUILD/bench/floor" -n "$1" -w 0 -k bench:cg textbook "127.0.0.1:$PORT" >/dev/null; }
# instructions of the server while "$@" runs n cycles
count() {
    n=$1; shift
    callgrind_control -z $VG >/dev/null 2>&1
    "$@" "$n" || exit 1
    callgrind_control -d $VG >/dev/null 2>&1
    f=$(ls -t "$DIR"/cg.out.* | head -1)
    grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}'
}
per_cycle() { a=$(count 200 "$@"); b=$(count 2200 "$@"); echo $(( (b - a) / 2000 )); }
tb=$(per_cycle floor)
echo "redis-server $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/'): instructions per cycle"
printf '%-34s %8s %6s\n' "textbook (SET NX PX, EVALSHA)" "$tb" "1.00x"
for opt in default nofence nonotify plain; do
    l() { lib "$1" "$opt"; }
    v=$(per_cycle l)
    printf '%-34s %8s %6s\n' "redlock, $opt" "$v" "$(awk "BEGIN { printf \"%.2fx\", $v / $tb }")"
done
