#!/bin/sh
# The Debian packages each make target needs; installs with apt-get (as
# root) those missing.
#   sh tools/deps.sh             what make test needs, which is every target's
#                                but bench's and docs' (make deps)
#   sh tools/deps.sh demo build  those targets' (make deps-demo ...)
#   sh tools/deps.sh --list      which target needs which, installing nothing
#   PACKAGES="a b" sh tools/deps.sh   exactly these
set -eu
# build: the core (C99, hiredis, OpenSSL for TLS) for Lua 5.4; build-jit:
# for LuaJIT, OpenResty's luajit2 branch because Debian's luajit cannot be
# installed beside libnginx-mod-http-lua.
BUILD="make gcc liblua5.4-dev libhiredis-dev libssl-dev"
BUILD_JIT="make gcc libluajit2-5.1-dev libhiredis-dev libssl-dev"
# demo: the build, Lua 5.4 and a redis-server (redis-cli to see it up).
DEMO="$BUILD lua5.4 redis-server redis-tools"
# check: the specs under Lua 5.4. busted; redis-sentinel for the Sentinel
# specs; openssl makes spec/06's certificates; luarocks for spec/09 (and
# zip, unzip, git for the packed rock); nginx with the Lua module, curl and
# the LuaJIT core for spec/41; lua-sql-sqlite3 (LuaSQL) for the SQL
# examples; iproute2 (`ip netns`) and faketime for spec/74 and spec/75.
CHECK="$DEMO $BUILD_JIT luajit2 lua-busted redis-sentinel openssl luarocks zip unzip git
nginx libnginx-mod-http-lua libnginx-mod-http-ndk curl lua-sql-sqlite3 iproute2 faketime"
# lint: luacheck, cppcheck, clang-tidy; ldoc (with discount for markdown)
# builds the reference.
LINT="make gcc liblua5.4-dev libhiredis-dev libssl-dev pkg-config lua-check cppcheck clang-tidy lua-ldoc
lua-discount"
# test: check and lint, valgrind, clang's fuzzer runtime, and Lua 5.1-5.3
# for the interpreter matrix (make test-m32 installs its own).
TEST="$CHECK $LINT valgrind clang libclang-rt-14-dev lua5.1 lua5.2 lua5.3 liblua5.1-0-dev liblua5.2-dev
liblua5.3-dev"
# bench: what the specs' servers and nginx need, valgrind (callgrind) and
# gnuplot for the chart.
BENCH="$CHECK valgrind gnuplot-nox"
DIST="$BUILD luarocks zip unzip git"
DOCS="lua-ldoc lua-discount"

TARGETS="demo build build-jit check lint test bench dist docs"
packages_of() {
    case $1 in
        demo) echo "$DEMO" ;;
        build) echo "$BUILD" ;;
        build-jit) echo "$BUILD_JIT" ;;
        check) echo "$CHECK" ;;
        lint) echo "$LINT" ;;
        test) echo "$TEST" ;;
        bench | bench-report) echo "$BENCH" ;;
        dist) echo "$DIST" ;;
        docs) echo "$DOCS" ;;
        *) echo "tools/deps.sh: no target '$1' (targets: $TARGETS)" >&2; exit 2 ;;
    esac
}
# one name a line, each once
unique() { tr ' ' '\n' | sed '/^$/d' | awk '!seen[$0]++'; }

if [ "${1:-}" = "--list" ]; then
    echo "make target  Debian packages (make deps-TARGET installs them; make deps: test's)"
    for t in $TARGETS; do
        printf '%-11s %s\n' "$t" "$(packages_of "$t" | unique | tr '\n' ' ')"
    done
    exit 0
fi

if [ -z "${PACKAGES:-}" ]; then
    PACKAGES=""
    for t in ${*:-test}; do
        list=$(packages_of "$t") || exit 2
        PACKAGES="$PACKAGES $list"
    done
fi
missing=""
for p in $(echo "$PACKAGES" | unique); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages:$missing" >&2
    echo "(as root: apt-get install$missing; or run this make target as root)" >&2
    exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
# Installing nginx must not start the system's nginx on port 80: deny
# service starts for this install unless the machine already has a policy.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
