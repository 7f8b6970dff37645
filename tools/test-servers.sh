#!/bin/sh
# `make test-servers`: the core, legacy, Redlock, fences, renewal and
# waiting specs under Lua 5.4 against every server build found: each folder
# of $REDLOCK_TEST_SERVERS (default ../shared/servers beside the repository)
# that holds a redis-server (Redis 2.4 to 7.4, Valkey). The full unit suite
# already runs against the redis-server on PATH, so each version runs the
# specs that tell versions apart (SPECS_FOR below). Tests that need what a
# version lacks are skipped there, by name (spec/helper.lua's needs).
# Prints one line per server as it ends, its failures, and at the end
# "N passed, M failed"; without server builds, one line saying so.
set -u
cd "$(dirname "$0")/.."
. tools/totals.sh
export JOBS="${JOBS:-4}"
DIR=${REDLOCK_TEST_SERVERS:-../shared/servers}
found=""
if [ -d "$DIR" ]; then
    DIR=$(cd "$DIR" && pwd)
    for d in "$DIR"/*/; do
        [ -x "$d/redis-server" ] && found="$found ${d%/}"
    done
fi
if [ -z "$found" ]; then
    if [ -n "${REDLOCK_TEST_SERVERS:-}" ]; then
        echo "servers: skipped: no server builds (no folder with a redis-server in REDLOCK_TEST_SERVERS=$REDLOCK_TEST_SERVERS)"
    else
        echo "servers: skipped: no server builds (set REDLOCK_TEST_SERVERS, or put them in ../shared/servers)"
    fi
    exit 0
fi

# The specs per server version (x*10000 + y*100 + z). Every version runs
# the core, lock and legacy specs (01, 03, 10), the operations registry
# (16) and what it gives (14-versions); from 2.6.12 on, the fence faults
# (25: each a couple of seconds); the rest where they tell something about
# that version:
#   before 2.6.12  legacy mode only (auto picks it): contention (05), the
#                  legacy renewal (12), and auto's detection (13: the old
#                  wrong-password text, no scripting in mode script)
#   2.6, 2.8       script mode without TIME in scripts (no hand-off, fences
#                  from the counter): detection (13: MISCONF, EVAL renamed
#                  away), Redlock (20), fences and keys left (22), waiting
#                  (32: whole-second BLPOP, woken)
#   3.2 to 5.0     everything: contention, detection, Redlock, fences,
#                  renewal (30), waiting with the hand-off on whole-second
#                  BLPOP
#   6.0, 6.2       fractional BLPOP, ACL (13: users without +@scripting;
#                  no channel rules before 6.2): detection, Redlock,
#                  renewal, waiting
#   7.2 and later  (Debian's 7.0.15 runs the whole suite): Redlock,
#                  waiting, and WAITAOF (08-replicas_aof)
# REDLOCK_TEST_TOPOLOGIES=1 adds the Sentinel (2.8+) and Cluster (3.0+)
# specs (about 5 minutes more in all; not in `make test`).
specs_for() {
    v=$1
    s="spec/01-core_spec.lua spec/03-lock_spec.lua spec/10-legacy_spec.lua spec/14-versions_spec.lua"
    s="$s spec/16-ops_spec.lua"
    [ "$v" -ge 20612 ] && s="$s spec/25-fence_faults_spec.lua"
    if [ "${REDLOCK_TEST_TOPOLOGIES:-}" = 1 ]; then
        [ "$v" -ge 20800 ] && s="$s spec/07-sentinel_spec.lua"
        [ "$v" -ge 30000 ] && s="$s spec/23-cluster_spec.lua"
    fi
    if [ "$v" -lt 20612 ]; then
        echo "$s spec/05-contention_spec.lua spec/12-legacy_renew_spec.lua spec/13-detect_spec.lua"
    elif [ "$v" -lt 30200 ]; then
        echo "$s spec/13-detect_spec.lua spec/20-redlock_spec.lua spec/22-keys_spec.lua spec/32-notify_spec.lua"
    elif [ "$v" -lt 60000 ]; then
        echo "$s spec/05-contention_spec.lua spec/13-detect_spec.lua spec/20-redlock_spec.lua" \
            "spec/22-keys_spec.lua spec/30-renew_spec.lua spec/32-notify_spec.lua"
    elif [ "$v" -lt 70000 ]; then
        echo "$s spec/13-detect_spec.lua spec/20-redlock_spec.lua spec/30-renew_spec.lua" \
            "spec/32-notify_spec.lua"
    else
        echo "$s spec/20-redlock_spec.lua spec/32-notify_spec.lua spec/08-replicas_aof_spec.lua"
    fi
}

version_of() {
    "$1/redis-server" --version 2>/dev/null | sed -n 's/.*v\(ersion \|=\)\([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\2 \3 \4/p' |
        { read -r a b c && echo $((a * 10000 + b * 100 + c)); }
}

LOGS=build/servers
mkdir -p "$LOGS"
POOL=$(mktemp -d /tmp/redlock-servers.XXXXXX)
trap 'rm -rf "$POOL"' EXIT
trap 'pool_stop; exit 130' INT TERM
. tools/pool.sh

# run DIR N: the specs of server folder DIR into its log, in the background
run() {
    (
        start=$(date +%s)
        # (the list split on purpose)
        # shellcheck disable=SC2046
        REDLOCK_SERVER_DIR=$1 LUA=lua5.4 sh spec/run.sh $(specs_for "$(version_of "$1")") \
            >"$LOGS/$(basename "$1").log" 2>&1 &
        echo $! >"$POOL/$2.pid"
        wait $!
        echo $(($(date +%s) - start)) >"$POOL/$2.s"
        : >"$POOL/$2.done"
    ) &
}

passed=0 failed=0 skipped=0
report() {
    name=$(basename "$1")
    log=$LOGS/$name.log
    # (no totals: the run ended before them)
    totals "$log" || line="0 passed, 1 failed" f=1
    k=$(sed -n 's/^\([0-9]*\) skipped:$/\1/p' "$log")
    k=${k:-0}
    echo "$name: $p passed, $f failed, $k skipped ($(cat "$POOL/$2.s") s; $log)"
    grep -A 6 '^not ok' "$log" | head -n 40
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
}

# SERVER_JOBS builds at once (default 3), each running JOBS spec files at
# once (default 4), oldest first
# shellcheck disable=SC2046
pool "${SERVER_JOBS:-3}" run report \
    $(for d in $found; do echo "$(version_of "$d") $d"; done | sort -n | cut -d" " -f2)
echo "servers: $skipped skipped in all (why: grep SKIP $LOGS/*.log)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
