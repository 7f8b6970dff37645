#!/bin/sh
# Installs what the build, the tests and the demo need from Debian's
# packages, when something is missing. Needs root for apt-get.
set -eu
# Lua 5.1-5.3 and LuaJIT for `make test-matrix`; OpenResty's luajit2 because
# Debian's luajit cannot be installed beside libnginx-mod-http-lua; nginx with
# the Lua module and curl for spec/41-openresty_spec.lua; ldoc (with
# discount for markdown) for the lint that builds the reference; libssl-dev
# and openssl for TLS (the core links OpenSSL; spec/06 makes certificates);
# redis-sentinel for the Sentinel specs; lua-sql-sqlite3 (LuaSQL, every
# Lua) for the SQL examples (docs/fencing.md, examples/); iproute2 (`ip
# netns`, veths) and faketime (libfaketime) for the partition and clock
# specs (spec/74, spec/75).
PACKAGES="${PACKAGES:-lua5.4 liblua5.4-dev libhiredis-dev redis-server redis-tools lua-busted lua-check luarocks
libssl-dev openssl redis-sentinel pkg-config gcc make valgrind clang libclang-rt-14-dev cppcheck clang-tidy
lua5.1 lua5.2 lua5.3 liblua5.1-0-dev liblua5.2-dev liblua5.3-dev luajit2 libluajit2-5.1-dev
nginx libnginx-mod-http-lua libnginx-mod-http-ndk curl lua-ldoc lua-discount lua-sql-sqlite3 iproute2 faketime}"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages:$missing (run 'make deps' as root)" >&2
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
