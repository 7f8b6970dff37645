#!/bin/sh
# Lint: luacheck, cppcheck, clang-tidy and ldoc, each one test; ends with the
# "N passed, M failed" line.
set -u
cd "$(dirname "$0")/.."
LUA_CFLAGS=${LUA_CFLAGS:-$(pkg-config --cflags lua5.4)}
# the generated scripts_gen.h and composed scripts (make lint makes them)
GEN=${GEN:-build/gen}
[ -f "$GEN/scripts_gen.h" ] || { echo "no $GEN/scripts_gen.h: run make lint" >&2; exit 1; }
export GEN
passed=0
failed=0
check() {
    name=$1
    shift
    if out=$("$@" 2>&1); then
        echo "ok - $name"
        passed=$((passed + 1))
    else
        echo "not ok - $name"
        printf '%s\n' "$out" | sed 's/^/# /'
        failed=$((failed + 1))
    fi
}
check luacheck luacheck --no-color -q lua spec examples $(ls -d bench tools torture 2>/dev/null)
# the Redis scripts, composed as Redis gets them (.luacheckrc: std redis)
check "luacheck scripts" luacheck --no-color -q "$GEN/scripts"
check cppcheck cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
    --std=c99 --inline-suppr -I csrc -I csrc/protocol -I csrc/topology -I csrc/connection \
    -I csrc/drivers -I "$GEN" $LUA_CFLAGS csrc fuzz
# shellcheck disable=SC2086
check clang-tidy sh -c "clang-tidy --quiet csrc/*.c csrc/*/*.c fuzz/*.c -- -std=c99 -I$GEN \
    -Icsrc -Icsrc/protocol -Icsrc/topology -Icsrc/connection -Icsrc/drivers $LUA_CFLAGS 2>&1 |
    grep -E '(warning|error):' && exit 1 || exit 0"
# the C files call each other one way only (docs/development.md, Layout)
check "no call cycle among csrc/ files" sh tools/callgraph.sh
# the Lua modules require each other one way only, at their top
check "no require cycle among lua/ modules" sh tools/requires.sh
# (busted keeps the last finally of a test: an earlier one never runs)
check "one finally per test" sh tools/one_finally.sh
# the benchmarks' C programs still build against the core's headers
check "bench programs build" make --no-print-directory -s bench-bins
# the reference `make docs` builds: a doc comment that no longer matches
# its function is an error
check ldoc sh -c 'd=$(mktemp -d) && ldoc --fatalwarnings -d "$d" . >/dev/null; rc=$?; rm -rf "$d"; exit $rc'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
