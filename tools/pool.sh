# shellcheck shell=sh
# Sourced by spec/run.sh, tools/matrix.sh, tools/test-servers.sh and
# tools/test-all.sh: a pool of background jobs.
#
# pool WIDTH START REPORT ITEM...: calls `START ITEM N` for each ITEM (N: 1,
# 2, ...), at most WIDTH of them running at once, and `REPORT ITEM N` for
# each as it ends, in the order they end. START starts its job in the
# background (in the caller's shell, so the caller may note its pid) and
# the job creates the file "$POOL/N.done" when it is done; POOL is a fresh
# directory of the caller's (the pool keeps nothing else there). A job
# whose shell's pid START wrote to "$POOL/N.sub" counts as done if that
# shell is gone without saying so (killed: REPORT then finds no result).
pool() {
    _width=$1 _start=$2 _report=$3
    shift 3
    _n=0 _running="" _left=$#
    while [ "$_left" -gt 0 ]; do
        _still=""
        for _j in $_running; do
            if [ ! -f "$POOL/$_j.done" ] && [ -f "$POOL/$_j.sub" ] && ! kill -0 "$(cat "$POOL/$_j.sub")" 2>/dev/null \
                && [ ! -f "$POOL/$_j.done" ]; then
                : >"$POOL/$_j.done"
            fi
            if [ -f "$POOL/$_j.done" ]; then
                eval "_item=\$_item_$_j"
                "$_report" "$_item" "$_j"
                _left=$((_left - 1))
            else
                _still="$_still $_j"
            fi
        done
        _running=$_still
        while [ $# -gt 0 ] && [ "$(echo $_running | wc -w)" -lt "$_width" ]; do
            _n=$((_n + 1))
            eval "_item_$_n=\$1"
            "$_start" "$1" "$_n"
            _running="$_running $_n"
            shift
        done
        [ "$_left" -gt 0 ] && sleep 0.2
    done
}

# quoted ARG...: the arguments as one string of quoted words, for an eval
# in a job (sh has no arrays to hand a job its arguments in).
quoted() {
    for _a in "$@"; do printf " '%s'" "$(printf '%s' "$_a" | sed "s/'/'\\\\''/g")"; done
}

# pool_stop: interrupted: TERM to what each job wrote to "$POOL/N.pid" (a
# pid, or -PGID for a process group: a spec/run.sh, which then stops all
# its files started), then waits for the jobs. (A job started with & by a
# non-interactive shell ignores SIGINT: Ctrl-C alone would leave it
# running.)
pool_stop() {
    trap '' INT TERM
    for _p in "$POOL"/*.pid; do
        [ -f "$_p" ] && kill -TERM "$(cat "$_p")" 2>/dev/null
    done
    wait
}
