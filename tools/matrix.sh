#!/bin/sh
# Builds the C core for each interpreter into build/<version>/ and runs the
# whole spec suite under each (spec/run.sh with LUA and REDLOCK_BUILD),
# MATRIX_JOBS interpreters at once (default 2), each running JOBS spec
# files at once (default 4). Prints each interpreter's result as it ends,
# the failures, and at the end one line "N passed, M failed" for all of
# them together.
# usage: sh tools/matrix.sh [busted args...]; MATRIX="5.1 jit" picks some.
set -u
cd "$(dirname "$0")/.."
. tools/totals.sh
. tools/pool.sh
MATRIX=${MATRIX:-5.1 5.2 5.3 5.4 jit}
export JOBS="${JOBS:-4}"
LOGS=build/matrix
mkdir -p "$LOGS"
POOL=$(mktemp -d /tmp/redlock-matrix.XXXXXX)
trap 'rm -rf "$POOL"' EXIT
trap 'pool_stop; exit 130' INT TERM

lua_of() {
    case $1 in
        jit) echo luajit ;;
        *) echo "lua$1" ;;
    esac
}

# the busted args, for each run
args=$(quoted "$@")

# run VERSION N: builds, then runs the specs, into the log
run() {
    v=$1 n=$2
    (
        lua=$(lua_of "$v")
        if make -s --no-print-directory LUA_VERSION="$v" BUILD="build/$v" build build-tests >"$LOGS/$v.log" 2>&1; then
            eval "LUA=\$lua REDLOCK_BUILD=build/\$v sh spec/run.sh $args" >"$LOGS/$v.log" 2>&1 &
            echo $! >"$POOL/$n.pid"
            wait $!
        else
            echo "$lua: build failed" >>"$LOGS/$v.log"
        fi
        : >"$POOL/$n.done"
    ) &
}

passed=0 failed=0
report() {
    log=$LOGS/$1.log
    lua=$(lua_of "$1")
    # (no totals: the build or the run ended before them)
    totals "$log" || line="0 passed, 1 failed" f=1
    echo "$lua ($("$lua" -v 2>&1 | head -n 1 | cut -d" " -f1-2)): $line"
    if grep -q '^not ok' "$log"; then
        grep -A 12 '^not ok' "$log" | head -n 60
    elif [ "$f" -gt 0 ]; then
        tail -n 30 "$log"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
}

# shellcheck disable=SC2086
pool "${MATRIX_JOBS:-2}" run report $MATRIX
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
