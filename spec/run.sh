#!/bin/sh
# Runs spec files with busted under $LUA (default lua5.4), $JOBS of them at
# once (default 6: the specs mostly wait on servers and timers), each in a
# busted process of its own, in a process group of its own, with a
# temporary directory of its own ($REDLOCK_TEST_TMP) where the helpers put
# every server, nginx and network namespace it starts. A file's TAP is
# printed when the file ends, then a line with its counts and seconds; at
# the end one line "N passed, M failed" (skipped tests, busted's pending,
# are neither: the line before says how many and why).
#
# usage: sh spec/run.sh [busted options] [spec files or directories]
# (no file: every spec/*_spec.lua). Whatever a file left running (it failed,
# busted crashed) is stopped when that file ends, and everything when the
# run ends or is interrupted. REDLOCK_KEEP=DIR: a failed file's temporary
# directory (its servers' logs, nginx's, the workers' output) is moved
# there.
set -u
# What is preloaded into Lua (the sanitizer runtimes: make test-sanitize)
# goes to the busted processes only, not to this script's own commands
# (LeakSanitizer aborts mktemp and date).
PRELOAD=${LD_PRELOAD:-}
unset LD_PRELOAD
LUA=${LUA:-lua5.4}
BUSTED=${BUSTED:-/usr/bin/busted}
JOBS=${JOBS:-6}
ROOT=$(mktemp -d /tmp/redlock-test.XXXXXX)
POOL=$ROOT
export REDLOCK_LUA="$LUA"
. tools/pool.sh

# The slowest files first (from a run of the Lua 5.4 suite), so that the
# last to start are short ones; the others follow in name order. A hint
# for the pool only: a file missing here starts later.
FIRST="24-conformance_cluster 24-conformance_sentinel 41-openresty 07-sentinel 75-partitions 08-replicas 23-cluster 70-faults
42-openresty_topologies 32-notify 30-renew 60-examples 50-cli 36-kinds_openresty 35-group
38-kinds_topologies 22-keys 20-redlock"

# stop DIR: stops what the specs of one file started under DIR: a
# directory's `stop` file first (it stops what one pid cannot: nginx's
# workers, a network namespace), then every server by its pid file, if
# that pid is still the server's (its working directory is the pid file's:
# a dead server's pid may be another process's by now).
stop() {
    for s in "$1"/*/stop; do
        [ -f "$s" ] && sh "$s"
    done
    for pidfile in "$1"/*/pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "${pidfile%/pid}" ] || continue
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
}

# Interrupted (or done): the busted processes and all they started first,
# so that none starts a server after its directory was cleaned. A job that
# has ended (N.done) is left alone: its shell's pid may be another
# process's by now (pids wrap at 32768 here), another run's spec or server.
cleanup() {
    trap - INT TERM
    for job in "$ROOT"/*/; do
        [ -f "${job%/}.done" ] && continue
        [ -f "$job/pgid" ] && kill -TERM "-$(cat "$job/pgid")" 2>/dev/null
        [ -f "$job/sub" ] && kill -TERM "$(cat "$job/sub")" 2>/dev/null
    done
    for job in "$ROOT"/*/; do
        [ -d "$job/tmp" ] && stop "$job/tmp"
        [ -f "$job/pgid" ] && kill -KILL "-$(cat "$job/pgid")" 2>/dev/null
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The arguments: spec files (and directories of them), and busted's
# options, given to every file's run (kept quoted in $opts, for eval).
files="" opts=""
for a in "$@"; do
    if [ -d "$a" ]; then
        files="$files $(ls "$a"/*_spec.lua 2>/dev/null | tr '\n' ' ')"
    elif [ -f "$a" ] && [ "${a%.lua}" != "$a" ]; then
        files="$files $a"
    else
        opts="$opts $(quoted "$a")"
    fi
done
[ -z "$files" ] && files=$(ls spec/*_spec.lua)
ordered=""
for f in $FIRST; do
    case " $(echo $files) " in *" spec/${f}_spec.lua "*) ordered="$ordered spec/${f}_spec.lua" ;; esac
done
for f in $files; do
    case " $ordered " in *" $f "*) ;; *) ordered="$ordered $f" ;; esac
done

# start FILE N: runs one file in the background in $ROOT/N/: its TAP in
# out, busted's exit code in rc, its seconds in s; N.done once everything
# it started is stopped.
start() {
    job=$ROOT/$2
    mkdir -p "$job/tmp"
    echo "$1" >"$job/file"
    (
        t0=$(date +%s)
        # setsid: not a group leader here, so it execs in place, and
        # busted's pid is its group's ($LUA may carry a wrapper, valgrind
        # ...: split on purpose)
        eval "REDLOCK_TEST_TMP=\$job/tmp setsid env \${PRELOAD:+LD_PRELOAD=\"\$PRELOAD\"} \$LUA \"\$BUSTED\" \
            -o TAP $opts \"\$1\" >\"\$job/out\" 2>&1 </dev/null &"
        echo $! >"$job/pgid"
        wait $!
        echo $? >"$job/rc"
        stop "$job/tmp"
        # (what the file left in its group: a worker, a delayed kill)
        kill -KILL "-$(cat "$job/pgid")" 2>/dev/null
        # a failed file: its servers' last log lines, for a run whose
        # directories are gone (CI): a crash, a shutdown, a kill
        if [ "$(cat "$job/rc")" -ne 0 ] || grep -q '^not ok' "$job/out"; then
            for log in "$job"/tmp/*/redis.log; do
                [ -f "$log" ] && tail -n 3 "$log" | sed "s|^|# $(basename "$(dirname "$log")"): |" >>"$job/out"
            done
        fi
        if [ -n "${REDLOCK_KEEP:-}" ] && { [ "$(cat "$job/rc")" -ne 0 ] || grep -q '^not ok' "$job/out"; }; then
            mkdir -p "$REDLOCK_KEEP" && mv "$job/tmp" "$(mktemp -d "$REDLOCK_KEEP/$(basename "$1" .lua).XXXXXX")"
        fi
        rm -rf "$job/tmp" "$job/pgid"
        echo $(($(date +%s) - t0)) >"$job/s"
        : >"$ROOT/$2.done"
    ) &
    echo $! >"$job/sub"
    echo $! >"$ROOT/$2.sub"
}

# report FILE N: its TAP, and its counts added to the totals (a file whose
# busted failed outside any test, one that does not load, is one failure)
passed=0 failed=0
report() {
    job=$ROOT/$2
    rc=$(cat "$job/rc" 2>/dev/null || echo 1)
    p=$(grep -c '^ok ' "$job/out")
    k=$(grep -c '^ok [0-9]* - # SKIP' "$job/out")
    f=$(grep -c '^not ok ' "$job/out")
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    cat "$job/out"
    [ -f "$job/rc" ] || echo "# $1: its runner was killed before the file ended"
    echo "# $1: $((p - k)) passed, $f failed, $k skipped ($(cat "$job/s" 2>/dev/null || echo ?) s)"
    passed=$((passed + p - k))
    failed=$((failed + f))
}

# shellcheck disable=SC2086
pool "$JOBS" start report $ordered

cat "$ROOT"/*/out >"$ROOT/all.tap" 2>/dev/null
skipped=$(grep -c '^ok [0-9]* - # SKIP' "$ROOT/all.tap")
if [ "$skipped" -gt 0 ]; then
    echo "$skipped skipped:"
    grep '^ok [0-9]* - # SKIP' "$ROOT/all.tap" | sed 's/^ok [0-9]* - # SKIP \(spec\/helper.lua:[0-9]*: \)\{0,1\}/  /' | sort | uniq -c
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
