#!/bin/sh
# Runs every spec with busted under $LUA (default lua5.4) and ends with one
# line "N passed, M failed" (skipped tests, busted's pending, are neither:
# the line before says how many and why). Every redis-server the specs start lives under
# one temporary directory; whatever is still running there when the suite
# ends (a spec failed, busted crashed) is stopped here.
set -u
LUA=${LUA:-lua5.4}
BUSTED=${BUSTED:-/usr/bin/busted}
ROOT=$(mktemp -d /tmp/redlock-test.XXXXXX)
export REDLOCK_TEST_TMP="$ROOT" REDLOCK_LUA="$LUA"

cleanup() {
    # a directory's `stop` file stops what one pid cannot (nginx's workers)
    for stop in "$ROOT"/*/stop; do
        [ -f "$stop" ] && sh "$stop"
    done
    for pidfile in "$ROOT"/*/pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# $LUA may carry a wrapper (valgrind ...): split on purpose
$LUA "$BUSTED" -o TAP "$@" >"$ROOT/tap.log" 2>&1
rc=$?
cat "$ROOT/tap.log"
# a test that ended in busted's pending ("ok N - # SKIP why") is skipped,
# not passed: said on its own line (with why) before the last one
skipped=$(grep -c '^ok [0-9]* - # SKIP' "$ROOT/tap.log")
passed=$(($(grep -c '^ok ' "$ROOT/tap.log") - skipped))
failed=$(grep -c '^not ok ' "$ROOT/tap.log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # busted failed outside any test (a spec file that does not load)
fi
if [ "$skipped" -gt 0 ]; then
    echo "$skipped skipped:"
    grep '^ok [0-9]* - # SKIP' "$ROOT/tap.log" | sed 's/^ok [0-9]* - # SKIP \(spec\/helper.lua:[0-9]*: \)\{0,1\}/  /' | sort | uniq -c
fi
echo "$passed passed, $failed failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
