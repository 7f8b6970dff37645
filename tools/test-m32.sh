#!/bin/sh
# `make test-m32`: the core's C where size_t and long are 32 bits, so size
# arithmetic that only wraps there is caught. Every csrc/ file compiles
# with -m32 under the build's warnings (syntax only: Debian's i386 Lua and
# hiredis are not installed to link against), and the encoder's size check
# (spec/c/encode_bound.c, no Lua) is built with -m32 and run, under
# qemu-i386 where this kernel runs no i386 programs. Ends with the
# "N passed, M failed" line.
set -u
cd "$(dirname "$0")/.."
PACKAGES="gcc-multilib qemu-user" sh tools/deps.sh || exit 1
CC=${CC:-cc}
out=${BUILD:-build}/m32
mkdir -p "$out"
# the build's own warnings, from the Makefile (one list, not two)
: "${WARN:?run it as make test-m32, which passes the build's WARN}"
# the generated scripts_gen.h (csrc/protocol/script.c includes it)
: "${GEN:?run it as make test-m32, which makes GEN/scripts_gen.h}"
# Debian's luaconf.h includes a multiarch header that lives only in the
# host's triplet directory; it names paths, nothing that depends on the width.
LUA_CFLAGS="$(pkg-config --cflags lua5.4) -idirafter /usr/include/$($CC -print-multiarch)"
passed=0
failed=0
result() {
    if [ "$1" -eq 0 ]; then
        echo "ok - $2"
        passed=$((passed + 1))
    else
        echo "not ok - $2"
        failed=$((failed + 1))
    fi
}

INC="-Icsrc -Icsrc/protocol -Icsrc/topology -Icsrc/connection -Icsrc/drivers"
for f in csrc/*.c csrc/*/*.c; do
    # shellcheck disable=SC2086
    $CC -m32 -fsyntax-only $WARN -pthread $LUA_CFLAGS $INC -I"$GEN" "$f"
    result $? "compiles for 32 bits: $f"
done

rm -f "$out/encode_bound" "$out/encode_bound.out"
# shellcheck disable=SC2086
$CC -m32 $WARN -O2 -g $INC -o "$out/encode_bound" spec/c/encode_bound.c csrc/protocol/resp.c
result $? "encode_bound builds for 32 bits"
printf 'int main(void) { return 0; }\n' >"$out/probe.c"
run=""
if $CC -m32 -o "$out/probe" "$out/probe.c" && ! "$out/probe" 2>/dev/null; then
    run="qemu-i386 -L /"
fi
# the program's own lines ("ok N - ..." / "not ok N - ..."), each a test;
# a crash or a non-zero exit is one failure more
$run "$out/encode_bound" >"$out/encode_bound.out" 2>&1
rc=$?
sed 's/^/# /' "$out/encode_bound.out"
p=$(grep -c '^ok ' "$out/encode_bound.out")
f=$(grep -c '^not ok ' "$out/encode_bound.out")
passed=$((passed + p))
failed=$((failed + f))
[ "$p" -gt 0 ] || { echo "not ok - encode_bound printed no result"; failed=$((failed + 1)); }
[ "$rc" -eq 0 ] || { echo "not ok - encode_bound exited $rc${run:+ (under $run)}"; failed=$((failed + 1)); }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
