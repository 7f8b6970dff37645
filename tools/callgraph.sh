#!/bin/sh
# The calls between the C core's files (csrc/ and its layer folders), from
# their objects' symbols: file A
# calls file B when A's object uses a symbol B's defines. Prints the edges
# ("a -> b"); fails (exit 1) when they form a cycle, which tsort reports.
# make lint runs it: the C files call each other one way only (see
# docs/development.md, Layout).
set -u
cd "$(dirname "$0")/.."
LUA_CFLAGS=${LUA_CFLAGS:-$(pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)}
dir=$(mktemp -d /tmp/redlock-callgraph.XXXXXX)
trap 'rm -rf "$dir"' EXIT
INC="-Icsrc -Icsrc/protocol -Icsrc/topology -Icsrc/connection -Icsrc/drivers"
for f in csrc/*.c csrc/*/*.c; do
    # shellcheck disable=SC2086
    cc -c -std=c99 -O0 $LUA_CFLAGS $INC -I"${GEN:-build/gen}" -o "$dir/$(basename "$f" .c).o" "$f" || exit 1
done
for o in "$dir"/*.o; do
    b=$(basename "$o" .o)
    nm -g --defined-only "$o" | awk -v f="$b" 'NF == 3 {print $3" "f}'
done | sort > "$dir/defs"
for o in "$dir"/*.o; do
    b=$(basename "$o" .o)
    nm -u "$o" | awk -v f="$b" '{print f" "$NF}'
done > "$dir/uses"
awk 'NR == FNR {d[$1] = $2; next} ($2 in d) && d[$2] != $1 {print $1" "d[$2]}' \
    "$dir/defs" "$dir/uses" | sort -u > "$dir/edges"
sed 's/ / -> /' "$dir/edges"
if ! tsort "$dir/edges" >/dev/null 2>"$dir/loops" || [ -s "$dir/loops" ]; then
    echo "call cycle among csrc/ files:" >&2
    cat "$dir/loops" >&2
    exit 1
fi
