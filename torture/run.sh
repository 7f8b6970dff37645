#!/bin/sh
# make torture: runs torture/run.lua for MODE (a mode, a comma-separated
# list, or all) for DURATION seconds each with SEED (drawn when not given),
# everything it starts under one temporary directory; whatever is still
# running there when it ends (a failure, Ctrl-C) is stopped here: each
# directory's `stop` file (namespaces, nginx, process groups), each pid
# file, then the run's own process group. TREE: the tree whose library
# is tried (default this one: the planted-bug demonstration points it at
# a copy). RECORD=1 writes the results table into docs/guarantees.md
# (by default when DURATION >= 600).
# The output is also kept in build/torture/ (the last run's history too).
set -u
cd "$(dirname "$0")/.."
REPO=$(pwd)
SEED=${SEED:-$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')}
MODE=${MODE:-all}
DURATION=${DURATION:-60}
RECORD=${RECORD:-}
if [ -z "$RECORD" ]; then
    # the long run writes the results table; a short one only prints
    RECORD=0
    [ "$DURATION" -ge 600 ] && RECORD=1
fi
TREE=$(cd "${TREE:-$REPO}" && pwd)
LUA=${TORTURE_LUA:-lua5.4}
ROOT=$(mktemp -d /tmp/redlock-torture.XXXXXX)
OUT=$REPO/build/torture
mkdir -p "$OUT"
export REDLOCK_TEST_TMP="$ROOT" TORTURE_REPO="$REPO" TORTURE_TREE="$TREE" TORTURE_LUA="$LUA"
export LUA_PATH="$TREE/lua/?.lua;$TREE/lua/?/init.lua;$REPO/spec/?.lua;$REPO/?.lua;;"
export LUA_CPATH="$TREE/build/?.so;;"
export REDLOCK_BUILD="$TREE/build"

pid=""
# ours PIDFILE: whether the pid in PIDFILE (and its process group) is still
# what the run started. A pid is reused once its process is gone (pid_max
# may be 32768), and a process started after its pid file was written is
# another's; a pid whose process is gone is still its group's id while any
# of the group lives (Linux reuses no live group's id).
CLK_TCK=$(getconf CLK_TCK)
BOOT=$(sed -n 's/^btime //p' /proc/stat)
ours() {
    p=$(cat "$1" 2>/dev/null)
    [ -n "$p" ] || return 1
    # (the fields after "pid (comm) ": the start time is the 20th)
    ticks=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | cut -d" " -f20)
    [ -n "$ticks" ] || return 0
    [ $((BOOT + ticks / CLK_TCK)) -le $(($(stat -c %Y "$1") + 1)) ]
}
stop_all() {
    for stop in "$ROOT"/*/stop; do
        [ -f "$stop" ] || continue
        # (a stop file beside a pid file kills that pid's group)
        for pidfile in "${stop%/stop}/pid" "${stop%/stop}/nginx.pid"; do
            [ -f "$pidfile" ] && ! ours "$pidfile" && continue 2
        done
        sh "$stop" >/dev/null 2>&1
    done
    # (nginx's master: its process group, the stop file's own command)
    for pidfile in "$ROOT"/*/pid "$ROOT"/nginx-*/nginx.pid; do
        [ -f "$pidfile" ] && ours "$pidfile" || continue
        p=$(cat "$pidfile")
        kill -CONT "$p" 2>/dev/null
        kill -KILL "-$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
}
cleanup() {
    # (`kill -SIG -PGID`: dash takes no `--` there)
    [ -n "$pid" ] && kill -TERM "-$pid" 2>/dev/null
    stop_all
    [ -n "$pid" ] && kill -KILL "-$pid" 2>/dev/null
    # once more: what the run started while it was being stopped
    sleep 1
    stop_all
    # the history of the last run, for a violation's replay and reading
    rm -rf "$OUT/last"
    mkdir -p "$OUT/last"
    for d in "$ROOT"/run-*; do
        [ -d "$d" ] && cp -r "$d" "$OUT/last/" 2>/dev/null
    done
    # and the logs of the servers, nginx and the workload's processes
    mkdir -p "$OUT/last/logs"
    for f in "$ROOT"/*/redis.log "$ROOT"/*/error.log "$ROOT"/proc-*/out; do
        [ -f "$f" ] && cp "$f" "$OUT/last/logs/$(basename "$(dirname "$f")")-$(basename "$f")" 2>/dev/null
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# in a process group of its own, so that everything it started is found
# (the log made first: a tail started before the run's redirection found
# no file and printed nothing; tail --pid reads to the end once pid is gone)
: >"$OUT/last.log"
setsid $LUA torture/run.lua "$SEED" "$MODE" "$DURATION" "$RECORD" </dev/null >>"$OUT/last.log" 2>&1 &
pid=$!
tail -n +1 -f "$OUT/last.log" --pid=$pid 2>/dev/null &
tailpid=$!
wait $pid
rc=$?
wait $tailpid
exit $rc
