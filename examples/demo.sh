#!/bin/sh
# The main job: start a throwaway redis-server on a free port in a temporary
# directory, run examples/quickstart.lua against it, stop the server.
set -eu
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
BUILD=${REDLOCK_BUILD:-build}
dir=$(mktemp -d /tmp/redlock-demo.XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( ($(od -An -N2 -tu2 /dev/urandom) % 40000) + 20000 ))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$dir" --logfile "$dir/redis.log" &
    pid=$!
    for _ in $(seq 50); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null && redis-cli -p "$port" ping >/dev/null 2>&1; then break; fi
    wait "$pid" 2>/dev/null || true
    pid=""
done
[ -n "$pid" ] || { echo "could not start redis-server" >&2; exit 1; }
echo "started a throwaway redis-server on 127.0.0.1:$port (pid $pid)"
export LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$BUILD/?.so;;"
"$LUA" examples/quickstart.lua "redis://127.0.0.1:$port"
echo "stopping the redis-server"
