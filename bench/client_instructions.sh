#!/bin/sh
# The client's instructions per uncontended lock cycle, counted by
# valgrind's callgrind in the client process (user space: the library's
# Lua, its C core, hiredis, libc; not the kernel): exact and the same on any
# machine load, where `make bench`'s client CPU moves with it. Starts one
# plain redis-server on a free port, then runs the textbook floor (bench/floor
# textbook) and the library (the cycle with each option combination,
# with_lock, try_acquire on a held key) for 200 and 2200 cycles each under
# callgrind; prints the difference / 2000 (start-up cancels out) and the
# ratio to the textbook loop's. About a minute.
# usage: sh bench/client_instructions.sh   (after make and build/bench/floor)
set -u
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
BUILD=${REDLOCK_BUILD:-build}
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
DIR=$(mktemp -d /tmp/redlock-cgc.XXXXXX)
PORT=$(( 20000 + $$ % 20000 ))
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" >"$DIR/log" 2>&1 &
RS=$!
trap 'kill $RS 2>/dev/null; wait $RS 2>/dev/null; rm -rf "$DIR"' EXIT
i=0
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "the server did not start" >&2; exit 1; }; sleep 0.1
done
# instructions of "$@" run with n ($1) cycles
count() {
    n=$1; shift
    "$@" "$n" "$DIR/cg.out" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
    v=$(grep -E '^(summary|totals):' "$DIR/cg.out" | head -1 | awk '{print $2}')
    rm -f "$DIR/cg.out"
    echo "$v"
}
floor() {
    valgrind --tool=callgrind --callgrind-out-file="$2" "$BUILD/bench/floor" -n "$1" -w 0 -k bench:cgc \
        textbook "127.0.0.1:$PORT"
}
# the library, n cycles of $what
lib() {
    LUA_PATH="lua/?.lua;;" LUA_CPATH="$BUILD/?.so;;" valgrind --tool=callgrind --callgrind-out-file="$2" \
        $LUA -e "
        local redlock = require 'redlock'
        local n, what = $1, '$what'
        local o = { servers = { 'redis://127.0.0.1:$PORT' } }
        if what == 'nofence' or what == 'plain' then o.fence = false end
        if what == 'nonotify' or what == 'plain' then o.notify = false end
        local c = redlock.new(o)
        if what == 'with_lock' then
            local fn = function() end
            for _ = 1, n do assert(c:with_lock('bench:cgc', fn)) end
        elseif what == 'try_held' then
            local holder = redlock.new(o)
            local held = assert(holder:acquire('bench:cgh', { ttl = 600000 }))
            for _ = 1, n do assert(not c:try_acquire('bench:cgh')) end
            held:release()
            holder:close()
        else
            for _ = 1, n do assert(assert(c:acquire('bench:cgc')):release()) end
        end
        c:close()"
}
per_cycle() { a=$(count 200 "$@"); b=$(count 2200 "$@"); echo $(( (b - a) / 2000 )); }
. bench/report.sh
tb=$(per_cycle floor)
echo "client instructions per cycle ($LUA; user space)"
printf '%-34s %8s %6s\n' "textbook C loop (SET NX PX, EVALSHA)" "$tb" "1.00x"
report table client_instructions "The client's instructions per cycle ($LUA, user space, callgrind)"\
 "" "instructions" "against the textbook C loop"
report row client_instructions "textbook C loop (SET NX PX, EVALSHA)" "$tb" "1.00x"
for what in default nofence nonotify plain with_lock try_held; do
    v=$(per_cycle lib)
    r=$(awk "BEGIN { printf \"%.2fx\", $v / $tb }")
    printf '%-34s %8s %6s\n' "redlock, $what" "$v" "$r"
    report row client_instructions "redlock, $what" "$v" "$r"
done
