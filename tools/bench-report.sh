#!/bin/sh
# `make bench-report`: runs the benchmarks whose figures README.md and
# docs/benchmarks.md show, keeps each one's figures (bench/report.lua's
# lines) with the command, the commit, the date and the machine in
# bench/figures/NAME.tsv, then writes the tables between the bench-report
# markers of both documents from every bench/figures/*.tsv
# (tools/bench_report.lua). A benchmark that fails keeps its last figures,
# and the exit status says so.
#   sh tools/bench-report.sh                   every benchmark (15-20 minutes)
#   sh tools/bench-report.sh contended nginx   only those (the rest as kept)
#   sh tools/bench-report.sh --write           only rewrite the documents
set -u
cd "$(dirname "$0")/.."
LUA=${LUA:-lua5.4}
# name and command of each benchmark, in the order the documents show them
BENCHES='bench|make -s bench BENCH_EXTRA=
server_instructions|make -s bench-instructions
client_instructions|make -s bench-client-instructions
contended|BENCH_POLL=1 make -s bench-contended
nginx|make -s bench-nginx
nginx_uncontended|make -s bench-nginx-uncontended
redlock|make -s bench-redlock
tls|make -s bench-tls
replicas|make -s bench-replicas
server|make -s bench-server
cluster|make -s bench-cluster
sentinel|make -s bench-sentinel'

if [ "${1:-}" != "--write" ]; then
    mkdir -p bench/figures
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    [ -n "$(git status --porcelain -- . ':!README.md' ':!docs' ':!bench/figures' 2>/dev/null)" ] &&
        commit="$commit with uncommitted changes"
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    failed=""
    tmp=$(mktemp /tmp/redlock-bench-report.XXXXXX)
    trap 'rm -f "$tmp"' EXIT
    echo "$BENCHES" | while IFS='|' read -r name cmd; do
        if [ $# -gt 0 ]; then
            case " $* " in *" $name "*) ;; *) continue ;; esac
        fi
        echo "=== $name: $cmd"
        load=$(cut -d' ' -f1 /proc/loadavg)
        : >"$tmp"
        start=$(date -u +%Y-%m-%d)
        if BENCH_REPORT="$tmp" sh -c "$cmd" </dev/null && [ -s "$tmp" ]; then
            {
                printf 'meta\tcommand\t%s\n' "$cmd"
                printf 'meta\tcommit\t%s\n' "$commit"
                printf 'meta\tdate\t%s\n' "$start"
                printf 'meta\tmachine\t%s x %s\n' "$(nproc)" "${cpu:-unknown CPU}"
                printf 'meta\tload\t%s\n' "$load"
                cat "$tmp"
            } >"bench/figures/$name.tsv"
        else
            echo "bench-report: $name failed or reported nothing: its last figures are kept" >&2
            echo "$name" >>"$tmp.failed"
        fi
    done
    [ -f "$tmp.failed" ] && failed=$(tr '\n' ' ' <"$tmp.failed") && rm -f "$tmp.failed"
fi
names=$(echo "$BENCHES" | cut -d'|' -f1 | tr '\n' ' ')
$LUA tools/bench_report.lua $names || exit 1
if [ -n "${failed:-}" ]; then
    echo "bench-report: failed: $failed" >&2
    exit 1
fi
