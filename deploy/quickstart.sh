#!/usr/bin/env bash
# dcps quickstart, for a fresh Debian 12 machine (run as root, or with sudo).
#
#   deploy/quickstart.sh demo    install what is missing, build, run the example job
#                                (2 shards + 2 workers on 127.0.0.1), print the final lines
#   deploy/quickstart.sh check   install what is missing, build, run the whole test suite,
#                                then `make distcheck` with the CPU-only variant
#
# Both are idempotent: packages already there are not reinstalled and the build is
# incremental (in build/). The demo stops everything it started, also on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=$here/build
run=$here/run

packages=(gcc g++ make autoconf automake libtool pkg-config
    libzmq3-dev libuv1-dev libprotobuf-c-dev protobuf-c-compiler check libinih-dev
    libsystemd-dev libopenblas-dev zlib1g-dev libmicrohttpd-dev dataset-fashion-mnist)

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

install_missing() {
    local missing=() p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing: ${missing[*]}"
    local sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

build_tree() {
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        say "autoreconf"
        autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
    fi
    mkdir -p "$build"
    if [ ! -f "$build/Makefile" ]; then
        say "configure (CUDA auto-detected)"
        (cd "$build" && ../configure -q)
    fi
    say "build"
    make -C "$build" -j"$(nproc)" -s
}

# Prints each suite's Check summary (and any failure lines) from the test logs.
summaries() {
    local f
    for f in "$1"/tests/*.log; do
        [ -f "$f" ] || continue
        grep -hE '^[0-9]+%: Checks:|:[EF]:|skipped' "$f" | sed "s|^|$(basename "$f" .log): |" || true
    done
}

do_check() {
    local status=0
    say "make check"
    make -C "$build" -j"$(nproc)" check || status=$?
    say "Check summaries"
    summaries "$build"
    if [ $status -ne 0 ]; then
        say "failing logs"
        grep -lE '^(FAIL|ERROR)' "$build"/tests/*.trs 2>/dev/null | sed 's/\.trs$/.log/' | xargs -r cat
        return $status
    fi
    say "make distcheck (CPU-only variant: --without-cuda)"
    make -C "$build" -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS=--without-cuda \
        >"$build/distcheck.log" 2>&1 || status=$?
    local dist
    dist=$(ls -d "$build"/dcps-*/_build/sub 2>/dev/null | head -1 || true)
    grep -hE '^(PASS|FAIL|SKIP|ERROR|# )' "$build/distcheck.log" | sed 's/^/distcheck: /' || true
    if [ $status -ne 0 ]; then
        tail -n 60 "$build/distcheck.log"
        [ -n "$dist" ] && summaries "$dist"
        return $status
    fi
    grep -E 'archives ready for distribution|^dcps-.*tar' "$build/distcheck.log" | head -2 || true
    say "all tests passed"
}

pids=()
stop_all() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}

do_demo() {
    local job=deploy/jobs/local.ini s r status=0
    mkdir -p "$run"
    rm -f "$run"/*.endpoint
    trap 'stop_all; exit 130' INT TERM
    trap stop_all EXIT
    # The job file's shards are 127.0.0.1:17001 and :17002.
    for s in 0 1; do
        "$build/dcps-server" --config "$job" --shard $s --endpoint-file "$run/shard$s.endpoint" \
            2>"$run/shard$s.log" &
        pids+=($!)
    done
    for s in 0 1; do
        for _ in $(seq 100); do [ -s "$run/shard$s.endpoint" ] && break; sleep 0.05; done
        if [ ! -s "$run/shard$s.endpoint" ]; then
            echo "shard $s did not start:" >&2
            cat "$run/shard$s.log" >&2
            return 1
        fi
        say "shard $s serving at $(cat "$run/shard$s.endpoint") (log: run/shard$s.log)"
    done
    say "2 workers training the Fashion-MNIST MLP (progress every 200 steps)"
    local wp=()
    for r in 0 1; do
        # Not `worker | tee`: $! must be the worker's pid, so that stop_all reaches it.
        OPENBLAS_NUM_THREADS=1 "$build/dcps-worker" --config "$job" --rank $r \
            --metrics "$run/worker$r.csv" 2>"$run/worker$r.log" > >(tee "$run/worker$r.out") &
        wp+=($!)
        pids+=($!)
    done
    for r in 0 1; do wait "${wp[$r]}" || status=1; done
    stop_all
    say "final lines"
    for r in 0 1; do
        grep '^final:' "$run/worker$r.out" || { echo "worker $r failed:"; cat "$run/worker$r.log"; status=1; }
    done
    say "metrics CSV: run/worker0.csv run/worker1.csv; server logs: run/shard0.log run/shard1.log"
    return $status
}

case "${1:-}" in
demo) install_missing && build_tree && do_demo ;;
check) install_missing && build_tree && do_check ;;
*)
    echo "usage: $0 demo|check" >&2
    exit 2
    ;;
esac
