#!/bin/sh
# The requires between the library's Lua modules (lua/): module A requires
# B when A's file has require "B" (or require("B")) for a redlock module.
# Prints the edges ("a -> b"); fails (exit 1) when they form a cycle, which
# tsort reports, or when such a require stands inside a function or a block
# (an indented line), where it would hide one. make lint runs it: the
# modules require each other one way only (docs/development.md, Layout).
# A kind's module, require("redlock.nginx." .. name) directly in a loop of
# a file's top level (over core.topology_kinds()), is a require of each
# such module of a kind of csrc/topology/topo.h's REDLOCK_KINDS.
set -u
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/redlock-requires.XXXXXX)
trap 'rm -rf "$dir"' EXIT
kinds=$(sed -n 's/^#define REDLOCK_KINDS(X) //p' csrc/topology/topo.h | tr -c 'a-z0-9_()X' ' ' |
    sed 's/X(\([a-z0-9_]*\))/\1/g')
find lua -name '*.lua' | sort | while read -r f; do
    m=$(printf '%s\n' "${f#lua/}" | sed 's/\.lua$//; s|/init$||; s|/|.|g')
    awk -v m="$m" -v f="$f" '
        /^[ \t]*--/ { next }
        /^[^ \t]/ { top = $0 }
        {
            line = $0
            while (match(line, /require[ \t]*\(?[ \t]*["'"'"']redlock[A-Za-z0-9_.]*["'"'"']/)) {
                req = substr(line, RSTART, RLENGTH)
                sub(/^require[ \t]*\(?[ \t]*["'"'"']/, "", req)
                sub(/["'"'"']$/, "", req)
                if (req ~ /\.$/) {
                    if (top ~ /^for / && $0 ~ /^    [^ \t]/) print "kinds " m " " req
                    else print "inside " f ":" NR ": " req
                } else if (req != "redlock.core") {
                    if ($0 ~ /^[ \t]/) print "inside " f ":" NR ": " req
                    else print m " " req
                }
                line = substr(line, RSTART + RLENGTH)
            }
        }' "$f"
done > "$dir/all"
grep '^kinds ' "$dir/all" | while read -r _ m prefix; do
    for k in $kinds; do
        [ -f "lua/$(printf '%s' "$prefix$k" | tr . /).lua" ] && echo "$m $prefix$k"
    done
done > "$dir/kinds"
grep -v '^kinds ' "$dir/all" > "$dir/rest"
cat "$dir/rest" "$dir/kinds" > "$dir/all"
grep '^inside ' "$dir/all" | sed 's/^inside //' > "$dir/inside"
grep -v '^inside ' "$dir/all" | sort -u > "$dir/edges"
sed 's/ / -> /' "$dir/edges"
rc=0
if [ -s "$dir/inside" ]; then
    echo "require of a redlock module inside a function or block (move it to the top):" >&2
    cat "$dir/inside" >&2
    rc=1
fi
if ! tsort "$dir/edges" >/dev/null 2>"$dir/loops" || [ -s "$dir/loops" ]; then
    echo "require cycle among lua/ modules:" >&2
    cat "$dir/loops" >&2
    rc=1
fi
exit $rc
