#!/bin/sh
# `make test`: every suite, one after another, each ending with its own
# "N passed, M failed" line; then the totals of all suites, alone on the
# last line. A suite that exits non-zero without counting a failure counts
# as one failure. Each suite's time is in the summary.
set -u
cd "$(dirname "$0")/.."
SUITES=${SUITES:-"unit lint m32 sanitize valgrind fuzz-smoke matrix servers"}
# The unit suite is Lua 5.4's run: the matrix adds the other interpreters.
export MATRIX="${MATRIX:-5.1 5.2 5.3 jit}"
work=$(mktemp -d /tmp/redlock-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
total_passed=0
total_failed=0
summary=""
started=$(date +%s)
for suite in $SUITES; do
    echo "=== $suite"
    t0=$(date +%s)
    { make -s "test-$suite"; echo $? >"$work/rc"; } 2>&1 | tee "$work/log"
    rc=$(cat "$work/rc")
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$work/log" | tail -n 1)
    p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/p')
    p=${p:-0}
    f=${f:-0}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    summary="$summary  $suite: $p passed, $f failed ($(($(date +%s) - t0)) s)\n"
done
echo "=== summary ($(($(date +%s) - started)) s)"
printf "$summary"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
