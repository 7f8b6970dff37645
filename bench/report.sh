# What a benchmark in sh hands `make bench-report`: the lines of
# bench/report.lua, appended to $BENCH_REPORT when it is set.
#   report table ID CAPTION HEADER...;  report row ID CELL...
report() {
    [ -n "${BENCH_REPORT:-}" ] || return 0
    (IFS="$(printf '\t')"; echo "$*") >>"$BENCH_REPORT"
}
