#!/bin/sh
# `make test`: every suite, each ending with its own "N passed, M failed"
# line; then the totals of all suites, alone on the last line. A suite that
# exits non-zero without counting a failure counts as one failure. Each
# suite's time is in the summary.
#
# Groups run one after another; the suites of a group (joined by "+") run
# side by side, each printed whole when it ends. The specs spend most of
# their time waiting on servers and timers, and every spec file runs in a
# directory, process group and set of ports of its own (spec/run.sh), so
# suites share nothing but the 2 cores: each group pairs suites that wait
# with suites that compute (lint, valgrind, the fuzzers), about the same
# CPU time in each group.
#
# The Lua 5.4 suite is the sanitize suite: every spec against the
# ASan+UBSan build (`make check`, or `make test-unit`, runs the same specs
# against the default build); the matrix adds the other interpreters, the
# servers suite the other server versions (docs/development.md says where
# each spec runs, and why).
set -u
cd "$(dirname "$0")/.."
. tools/totals.sh
. tools/pool.sh
# A new suite X is a make target test-X that ends with its own "N passed,
# M failed" line, named in a group here. torture-smoke (make
# test-torture-smoke: about 3 minutes, mostly waiting) runs beside the
# sanitize suite.
SUITES=${SUITES:-"sanitize+valgrind+m32+fuzz-smoke+torture-smoke lint+matrix+servers"}
# The matrix: the interpreters other than the sanitize suite's Lua 5.4.
export MATRIX="${MATRIX:-5.1 5.2 5.3 jit}"
# Every suite shares the cores with others: the clock-bound specs' times
# doubled at least (spec/helper.lua's ms).
export REDLOCK_TIME_SCALE="${REDLOCK_TIME_SCALE:-2}"
work=$(mktemp -d /tmp/redlock-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'pool_stop; exit 130' INT TERM
total_passed=0
total_failed=0
summary=""
started=$(date +%s)

# run SUITE N: make test-SUITE in the background, into $POOL/SUITE.log, its
# exit code into $POOL/SUITE.rc and its seconds into $POOL/SUITE.s
run() {
    (
        t0=$(date +%s)
        # (a process group of its own, for pool_stop)
        setsid make -s "test-$1" >"$POOL/$1.log" 2>&1 </dev/null &
        echo "-$!" >"$POOL/$2.pid"
        wait $!
        echo $? >"$POOL/$1.rc"
        echo $(($(date +%s) - t0)) >"$POOL/$1.s"
        : >"$POOL/$2.done"
    ) &
}

# report SUITE: its output, and its totals added to the summary
report() {
    echo "=== $1 ($(cat "$POOL/$1.s") s)"
    cat "$POOL/$1.log"
    rc=$(cat "$POOL/$1.rc")
    # (no totals: 0 and 0, failed if its exit status says so)
    totals "$POOL/$1.log"
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    summary="$summary  $1: $p passed, $f failed ($(cat "$POOL/$1.s") s)\n"
}

for group in $SUITES; do
    suites=$(echo "$group" | tr + ' ')
    # (a pool's directory of its own: its jobs are numbered from 1)
    POOL=$work/$(echo "$group" | tr + -)
    mkdir -p "$POOL"
    echo "=== $(echo $suites | sed 's/ / + /g') ($(date +%H:%M:%S))"
    # shellcheck disable=SC2086
    pool "$(echo $suites | wc -w)" run report $suites
done
echo "=== summary ($(($(date +%s) - started)) s)"
printf "$summary"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
