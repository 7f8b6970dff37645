#!/bin/sh
# Lint: no test calls busted's finally() twice. busted keeps one finally
# per test, the last one given, so an earlier cleanup would silently never
# run. Counts the finally( calls between one it( and the next, per spec
# file; prints each test that has more than one.
set -u
cd "$(dirname "$0")/.."
awk '
    FNR == 1 { flush(); test = "" }
    /(^|[^.A-Za-z_])it\(/ { flush(); test = FILENAME ":" FNR; n = 0 }
    { line = $0; while (match(line, /(^|[^.A-Za-z_])finally\(/)) { n++; line = substr(line, RSTART + RLENGTH) } }
    function flush() { if (test != "" && n > 1) { print test ": " n " calls of finally (busted keeps the last)"; bad = 1 } }
    END { flush(); exit bad }
' spec/*_spec.lua
