#!/bin/sh
# Installs what the build, the tests and the demo need from Debian's
# packages, when something is missing. Needs root for apt-get.
set -eu
PACKAGES="${PACKAGES:-lua5.4 liblua5.4-dev libhiredis-dev redis-server redis-tools lua-busted lua-check luarocks
pkg-config gcc make valgrind clang libclang-rt-14-dev cppcheck clang-tidy}"
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
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
