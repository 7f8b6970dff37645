#!/bin/sh
# The redis-server's instructions per uncontended lock cycle, counted by
# valgrind's callgrind in the server: exact and the same on any machine
# load, where `make bench`'s CPU times move with it. Runs one redis-server
# under callgrind on a free port, then, for the textbook floor (bench/floor
# textbook) and the library with each option combination, 200 and 2200
# cycles between a zeroing and a dump of the counters; prints the
# difference / 2000 and the ratio to the textbook's, three ways: all the
# server's instructions; all but its timer's (serverCron, which runs 10
# times a second whatever the load: under callgrind a cycle takes about 50
# times longer than it does for real, so the timer's share per cycle is
# inflated as much, and more for a client that takes longer per cycle); and
# those inside commands (callgrind's inclusive count of call(), what
# INFO commandstats times: the issue-35 target). Slow (the server runs
# about 50 times slower under callgrind): about a minute.
# usage: sh bench/server_instructions.sh   (after make and build/bench/floor)
# REDLOCK_SERVER: another redis-server binary (e.g. one of ../shared/servers)
set -u
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
BUILD=${REDLOCK_BUILD:-build}
SERVER=${REDLOCK_SERVER:-redis-server}
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null &&
    command -v callgrind_annotate >/dev/null ||
    { echo "needs valgrind (callgrind_control, callgrind_annotate)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/redlock-cg.XXXXXX)
PORT=$(( 20000 + $$ % 20000 ))
valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.out" "$SERVER" --port "$PORT" \
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
# instructions of the server while "$@" runs n cycles: "all timer commands"
# (the timer's and the commands' inclusive counts by function name: the
# servers' dynamic symbol tables name them even in stripped builds)
count() {
    n=$1; shift
    callgrind_control -z $VG >/dev/null 2>&1
    "$@" "$n" || exit 1
    callgrind_control -d $VG >/dev/null 2>&1
    f=$(ls -t "$DIR"/cg.out.* | head -1)
    all=$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')
    callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null | awk -v all="$all" '
        { n = $0; sub(/.*:/, "", n); sub(/ .*/, "", n); v = $1; gsub(",", "", v) }
        n == "serverCron" && !cron { cron = v }
        n == "call" && !cmd { cmd = v }
        END { print all, cron + 0, cmd + 0 }'
}
per_cycle() {
    a=$(count 200 "$@"); b=$(count 2200 "$@")
    echo "$a $b" | awk '{ printf "%d %d %d\n", ($4 - $1) / 2000, ($4 - $5 - $1 + $2) / 2000, ($6 - $3) / 2000 }'
}
ratio() { awk "BEGIN { printf \"%.2fx\", $1 / $2 }"; }
. bench/report.sh
set -- $(per_cycle floor)
tb_all=$1 tb_cron=$2 tb_cmd=$3
version=$("$SERVER" --version | sed 's/ v=\([^ ]*\).*/ \1/')
echo "$version: instructions per cycle"
printf '%-30s %15s %15s %15s\n' "" "all" "all but timer" "inside commands"
printf '%-30s %8s %6s %8s %6s %8s %6s\n' "textbook (SET NX PX, EVALSHA)" \
    "$tb_all" 1.00x "$tb_cron" 1.00x "$tb_cmd" 1.00x
report table server_instructions "The server's instructions per uncontended cycle ($version, callgrind: exact\
 whatever the load), against the textbook lock's" "" "all" "all but the timer's" "inside commands"
report row server_instructions "textbook (SET NX PX, EVALSHA)" "$tb_all" "$tb_cron" "$tb_cmd"
for opt in default nofence nonotify plain; do
    l() { lib "$1" "$opt"; }
    set -- $(per_cycle l)
    printf '%-30s %8s %6s %8s %6s %8s %6s\n' "redlock, $opt" "$1" "$(ratio "$1" "$tb_all")" \
        "$2" "$(ratio "$2" "$tb_cron")" "$3" "$(ratio "$3" "$tb_cmd")"
    report row server_instructions "redlock, $opt" "$1 ($(ratio "$1" "$tb_all"))" \
        "$2 ($(ratio "$2" "$tb_cron"))" "$3 ($(ratio "$3" "$tb_cmd"))"
    if [ "$opt" = default ]; then
        report target 1 "the server's instructions inside commands per cycle, defaults, against the\
 textbook lock's" "$(ratio "$3" "$tb_cmd")" "<= 1.50x" \
            "$(awk "BEGIN { print ($3 <= 1.5 * $tb_cmd) ? \"met\" : \"NOT met\" }")"
    fi
done
