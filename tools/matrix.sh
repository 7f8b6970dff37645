#!/bin/sh
# Builds the C core for each interpreter into build/<version>/ and runs the
# whole spec suite under each (spec/run.sh with LUA and REDLOCK_BUILD).
# Prints each interpreter's result, the failures, and at the end one line
# "N passed, M failed" for all of them together.
# usage: sh tools/matrix.sh [busted args...]; MATRIX="5.1 jit" picks some.
set -u
cd "$(dirname "$0")/.."
. tools/totals.sh
MATRIX=${MATRIX:-5.1 5.2 5.3 5.4 jit}
LOGS=build/matrix
mkdir -p "$LOGS"
passed=0 failed=0
for v in $MATRIX; do
    case $v in
        jit) lua=luajit ;;
        *) lua=lua$v ;;
    esac
    log=$LOGS/$v.log
    if ! make -s --no-print-directory LUA_VERSION="$v" BUILD="build/$v" build >"$log" 2>&1; then
        echo "$lua: build failed (see $log)"
        cat "$log"
        failed=$((failed + 1))
        continue
    fi
    LUA=$lua REDLOCK_BUILD=build/$v sh spec/run.sh "$@" >"$log" 2>&1
    # (no totals: the run ended before them)
    totals "$log" || line="0 passed, 1 failed" f=1
    echo "$lua ($("$lua" -v 2>&1 | head -n 1 | cut -d" " -f1-2)): $line"
    grep -A 12 '^not ok' "$log" | head -n 60
    passed=$((passed + p))
    failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
