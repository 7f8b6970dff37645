#!/bin/sh
# Runs each libFuzzer target for SECONDS (first argument, default 60) on a
# copy of its corpus under fuzz/corpus/, so the tree's corpus stays small.
# Each target is one test; prints executions and ends with the totals line.
set -u
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD=${BUILD:-build}
work=$(mktemp -d /tmp/redlock-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
for target in reply url; do
    mkdir -p "$work/$target"
    cp fuzz/corpus/$target/* "$work/$target/" 2>/dev/null
    if "$BUILD/fuzz/${target}_fuzz" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/" "$work/$target" >"$work/$target.log" 2>&1; then
        runs=$(grep -E '^stat::number_of_executed_units' "$work/$target.log" | awk '{print $2}')
        echo "ok - fuzz $target: ${runs:-?} executions in ${SECONDS_EACH} s, no crash, leak or UB"
        passed=$((passed + 1))
    else
        echo "not ok - fuzz $target"
        tail -40 "$work/$target.log" | sed 's/^/# /'
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
            [ -f "$a" ] && { echo "# artifact $(basename "$a"):"; od -c "$a" | head -5 | sed 's/^/#   /'; }
        done
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
