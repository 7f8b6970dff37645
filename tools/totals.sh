# shellcheck shell=sh
# Sourced by tools/matrix.sh, test-servers.sh and test-all.sh: `totals LOG`
# sets line, p and f from the last "N passed, M failed" line of LOG; with
# none, "0 passed, 0 failed" and status 1 (the caller decides what a suite
# without totals means: a crash, or a suite that said "skipped").
totals() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/p')
    if [ -z "$p" ] || [ -z "$f" ]; then
        line="0 passed, 0 failed" p=0 f=0
        return 1
    fi
}
