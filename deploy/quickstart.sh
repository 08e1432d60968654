#!/usr/bin/env bash
# dcps quickstart, for a fresh Debian 12 machine (run as root, or with sudo).
#
#   deploy/quickstart.sh demo    install what is missing, build, run the example job
#                                (2 shards + 2 workers on 127.0.0.1), print the final lines
#   deploy/quickstart.sh check   install what is missing, build, run the whole test suite,
#                                then `make distcheck` with the CPU-only variant
#   deploy/quickstart.sh torch-demo
#                                install what is missing (python3-torch included), build,
#                                train the PyTorch CNN of examples/torch/ with dcps.torch
#                                (2 shards + 2 workers, Top-k 1% + error feedback, delta
#                                pulls, DC-ASGD-a), print both workers' final: lines
#
# Both are idempotent: packages already there are not reinstalled and the build is
# incremental (in build/). The demo stops everything it started, also on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=$here/build

packages=(gcc g++ make autoconf automake libtool pkg-config
    libzmq3-dev libuv1-dev libprotobuf-c-dev protobuf-c-compiler check libinih-dev
    libsystemd-dev libopenblas-dev zlib1g-dev libmicrohttpd-dev dataset-fashion-mnist
    procps groff-base iproute2 python3-dev python3-numpy python3-torch
    clang libclang-rt-14-dev llvm-14)

# The system Python: Debian's python3-torch is importable there (a python3
# earlier in PATH, from pyenv or a venv, may not see it).
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || echo python3)

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
        (cd "$build" && ../configure -q PYTHON="$py")
    fi
    say "build"
    make -C "$build" -j"$(nproc)" -s
}

# Prints each suite's Check summary (and any failure lines) from the test logs.
summaries() {
    local f
    for f in "$1"/tests/*.log "$1"/python/tests/*.log; do
        [ -f "$f" ] || continue
        grep -hE '^[0-9]+%: Checks:|:[EF]:|skipped|^python: [0-9]+ passed|^SKIP: |^(FAIL|ERROR): test' "$f" |
            sed "s|^|$(basename "$f" .log): |" || true
    done
}

# Prints the whole log of each test that failed in build tree $1.
failing_logs() {
    grep -lE '^:test-result: (FAIL|ERROR)' "$1"/tests/*.trs "$1"/python/tests/*.trs 2>/dev/null | sed 's/\.trs$/.log/' |
        while read -r f; do
            say "failing log: ${f#"$1"/}"
            cat "$f"
        done
}

do_check() {
    local status=0
    say "make check"
    make -C "$build" -j"$(nproc)" check || status=$?
    say "Check summaries"
    summaries "$build"
    if [ $status -ne 0 ]; then
        failing_logs "$build"
        return $status
    fi
    say "make distcheck (CPU-only variant: --without-cuda)"
    make -C "$build" -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS="--without-cuda PYTHON=$py" \
        >"$build/distcheck.log" 2>&1 || status=$?
    local dist
    dist=$(ls -d "$build"/dcps-*/_build/sub 2>/dev/null | head -1 || true)
    grep -hE '^(PASS|FAIL|SKIP|ERROR|# )' "$build/distcheck.log" | sed 's/^/distcheck: /' || true
    if [ $status -ne 0 ]; then
        tail -n 60 "$build/distcheck.log"
        if [ -n "$dist" ]; then
            summaries "$dist"
            failing_logs "$dist"
        fi
        return $status
    fi
    grep -E 'archives ready for distribution|^dcps-.*tar' "$build/distcheck.log" | head -2 || true
    say "all tests passed"
}

# The demo is deploy/launch-local.sh on the example job: it starts the 2 shards
# (127.0.0.1:17001 and :17002), waits for their endpoints, runs the 2 workers with
# their progress on the terminal, prints their final: lines and stops the shards;
# on Ctrl-C it stops everything it started. Logs, endpoints and metrics go to run/.
do_demo() {
    say "2 shards and 2 workers train the Fashion-MNIST MLP (deploy/jobs/local.ini, progress every 200 steps)"
    exec deploy/launch-local.sh deploy/jobs/local.ini -b "$build" -d run
}

# The PyTorch demo: launch-local.sh runs examples/torch/fashion_cnn.py as each
# worker (dcps-worker -- COMMAND), with the package from the build tree.
do_torch_demo() {
    if [ ! -f "$build/python/dcps/_dcps.so" ]; then
        echo "quickstart.sh: $build has no Python package (configured without Python 3" \
            "headers?): remove $build and run this again" >&2
        exit 1
    fi
    say "2 shards and 2 dcps.torch workers train a CNN on Fashion-MNIST (examples/torch/fashion_cnn.ini)"
    PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" exec deploy/launch-local.sh \
        examples/torch/fashion_cnn.ini -b "$build" -d run -- "$py" examples/torch/fashion_cnn.py
}

case "${1:-}" in
demo) install_missing && build_tree && do_demo ;;
torch-demo) install_missing && build_tree && do_torch_demo ;;
check) install_missing && build_tree && do_check ;;
*)
    echo "usage: $0 demo|check|torch-demo" >&2
    exit 2
    ;;
esac
