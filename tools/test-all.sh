#!/bin/sh
# `make test`: every suite, each ending with its own "N passed, M failed"
# line; then the totals of all suites, alone on the last line. A suite that
# exits non-zero without counting a failure counts as one failure. Each
# suite's time is in the summary.
#
# Suites joined by "+" run side by side (their output printed one after
# the other when both are done): the matrix and the server builds spend
# most of their time waiting on servers and timers, not on the 2 cores,
# and share nothing (each server on a port of its own, each interpreter a
# build/<version>/ of its own; neither starts namespaces, Sentinels or
# Clusters, which are Lua 5.4's suites).
set -u
cd "$(dirname "$0")/.."
. tools/totals.sh
SUITES=${SUITES:-"unit lint m32 sanitize valgrind fuzz-smoke matrix+servers"}
# The unit suite is Lua 5.4's run: the matrix adds the other interpreters.
export MATRIX="${MATRIX:-5.1 5.2 5.3 jit}"
work=$(mktemp -d /tmp/redlock-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
total_passed=0
total_failed=0
summary=""
started=$(date +%s)

# run SUITE: make test-SUITE into $work/SUITE.log, its exit code into
# $work/SUITE.rc and its seconds into $work/SUITE.s
run() {
    t0=$(date +%s)
    make -s "test-$1" >"$work/$1.log" 2>&1
    echo $? >"$work/$1.rc"
    echo $(($(date +%s) - t0)) >"$work/$1.s"
}

# count SUITE: its totals added to the summary
count() {
    rc=$(cat "$work/$1.rc")
    # (no totals: 0 and 0, failed if its exit status says so)
    totals "$work/$1.log"
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    summary="$summary  $1: $p passed, $f failed ($(cat "$work/$1.s") s)\n"
}

for group in $SUITES; do
    suites=$(echo "$group" | tr + ' ')
    if [ "$suites" = "$group" ]; then
        # one suite: its output as it comes
        echo "=== $group"
        t0=$(date +%s)
        { make -s "test-$group"; echo $? >"$work/$group.rc"; } 2>&1 | tee "$work/$group.log"
        echo $(($(date +%s) - t0)) >"$work/$group.s"
    else
        echo "=== $suites (side by side)"
        for suite in $suites; do run "$suite" & done
        wait
        for suite in $suites; do
            echo "=== $suite"
            cat "$work/$suite.log"
        done
    fi
    for suite in $suites; do count "$suite"; done
done
echo "=== summary ($(($(date +%s) - started)) s)"
printf "$summary"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
