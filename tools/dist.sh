#!/bin/sh
# `make dist`: the source rock of this version, for `luarocks install`.
# Writes into DIR (default build/dist): redlock-VERSION.tar.gz (git archive
# of the tree, tracked files with their uncommitted changes),
# redlock-VERSION-1.src.rock (luarocks pack: the rockspec and that
# archive) and a manifest, so that DIR serves as a rocks server:
#   luarocks --lua-version 5.4 install --only-server=DIR redlock VERSION
# VERSION is redlock.VERSION (lua/redlock.lua).
set -eu
cd "$(dirname "$0")/.."
out=${1:-build/dist}
version=$(sed -n 's/^ *VERSION = "\([0-9.]*\)",$/\1/p' lua/redlock.lua)
[ -n "$version" ] || { echo "dist: no VERSION = \"x.y.z\", in lua/redlock.lua" >&2; exit 1; }
rockspec=redlock-$version-1.rockspec
[ -f "$rockspec" ] || { echo "dist: redlock.VERSION is $version but there is no $rockspec" >&2; exit 1; }
name=redlock-$version
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/$name.tar.gz" "$out/$name-1.src.rock" "$out/$rockspec"
# a commit of the work tree as it is (none when it is clean)
tree=$(git stash create)
[ -n "$tree" ] && echo "dist: the tree has uncommitted changes: packed as they are"
git archive --format=tar.gz --prefix="$name/" -o "$out/$name.tar.gz" "${tree:-HEAD}"
# luarocks pack fetches the source from a temporary directory, where the
# rockspec's file name does not resolve: it packs a copy naming the
# archive by its full path, and the rock then gets the rockspec itself
# (the archive's name is all that installing the rock reads).
stage=$(mktemp -d /tmp/redlock-dist.XXXXXX)
trap 'rm -rf "$stage"' EXIT
sed "s|^   url = \"$name.tar.gz\",|   url = \"file://$out/$name.tar.gz\",|" "$rockspec" >"$stage/$rockspec"
grep -q "file://" "$stage/$rockspec" || { echo "dist: $rockspec: no url = \"$name.tar.gz\"" >&2; exit 1; }
(cd "$out" && luarocks pack "$stage/$rockspec" >/dev/null)
cp "$rockspec" "$stage/$rockspec"
(cd "$stage" && zip -q "$out/$name-1.src.rock" "$rockspec")
(cd "$out" && luarocks-admin make-manifest . >/dev/null)
echo "dist: $out/$name-1.src.rock"
