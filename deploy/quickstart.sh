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
#   deploy/quickstart.sh torch-lm
#                                the same with the character-level transformer of
#                                examples/torch/char_lm.py on Debian's fortunes (package
#                                fortunes): 2 shards + 2 workers, async, Top-k 1% + delta
#                                pulls, AdamW with warm-up and cosine decay on the shards;
#                                prints the held-out bits per character and the final: lines
#   deploy/quickstart.sh packages
#                                build the Debian packages (debian/) from a clean copy of
#                                the tree into build/deb/, lintian them, install them, run
#                                a 2-shard, 2-worker job and other checks with the installed
#                                files only, then purge what it installed
#                                (DCPS_KEEP_PACKAGES=1 keeps it); PASS/FAIL lines, exit 1
#                                on a failure. `check` ends with it when
#                                DCPS_CHECK_PACKAGES=1 (CI's .ci/run sets it)
#
# All are idempotent: packages already there are not reinstalled and the build is
# incremental (in build/). The demo stops everything it started, also on Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=$here/build

packages=(gcc g++ make autoconf automake libtool pkg-config
    libzmq3-dev libuv1-dev libprotobuf-c-dev protobuf-c-compiler check libinih-dev
    libsystemd-dev libopenblas-dev zlib1g-dev libmicrohttpd-dev dataset-fashion-mnist
    procps groff-base iproute2 python3-dev python3-numpy python3-torch python3-torchvision
    fortunes
    clang libclang-rt-14-dev llvm-14 python3-zmq python3-protobuf protobuf-compiler)
# What `packages` needs besides: the Debian tools, and systemd-analyze and man for
# the units. The build dependencies (debian/control) are all in the list above.
deb_packages=(dpkg-dev debhelper dh-python lintian systemd man-db)

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
        -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
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

# Prints each suite's Check summary (and any failure lines) from the test logs:
# the unit suites of tests/, the daemon suites of tests/daemon/ (as daemon/NAME:
# a module may have a suite in each) and the Python suites.
summaries() {
    local f name
    for f in "$1"/tests/*.log "$1"/tests/daemon/*.log "$1"/python/tests/*.log; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .log)
        case $f in "$1"/tests/daemon/*) name=daemon/$name ;; esac
        grep -hE '^[0-9]+%: Checks:|:[EF]:|skipped|^python: [0-9]+ passed|^SKIP: |^(FAIL|ERROR): test' "$f" |
            sed "s|^|$name: |" || true
    done
}

# Prints the whole log of each test that failed in build tree $1.
failing_logs() {
    grep -lE '^:test-result: (FAIL|ERROR)' "$1"/tests/*.trs "$1"/tests/daemon/*.trs "$1"/python/tests/*.trs 2>/dev/null | sed 's/\.trs$/.log/' |
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
    if [ "${DCPS_CHECK_PACKAGES:-0}" = 1 ]; then
        do_packages || return
    fi
    say "all tests passed"
}

# pass/fail: one line each; fail counts in the caller's local $fails.
pass() { echo "PASS: $*"; }
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
deb_names=(dcps-common dcps-server dcps-worker libdcps1 libdcps-dev python3-dcps)
# The lintian warnings justified in docs/packaging.md; any other, or an error, fails.
lintian_justified=(initial-upload-closes-no-bugs)

# The Debian packages, end to end (docs/packaging.md). Each check prints PASS: or
# FAIL:; a failed build, lintian or installation ends it, the checks after the
# installation all run. What it installed, and only that, is purged on the way
# out, whatever happened, unless DCPS_KEEP_PACKAGES=1.
do_packages() {
    local t0=$SECONDS fails=0 sudo= out=$build/deb
    [ "$(id -u)" -eq 0 ] || sudo=sudo

    local version deb_version
    version=$(sed -n 's/^AC_INIT(\[dcps\], \[\([^]]*\)\].*/\1/p' configure.ac)
    deb_version=$(dpkg-parsechangelog -S Version)
    if [ "${deb_version%-*}" = "$version" ]; then
        pass "debian/changelog's version $deb_version is configure.ac's $version and a revision"
    else
        fail "debian/changelog's version $deb_version does not match configure.ac's $version"
    fi

    # A clean copy: the files git knows, committed or not, less the ignored ones
    # (so no in-tree build). debian/ is not in the release tarball (make dist).
    git rev-parse --git-dir >/dev/null 2>&1 ||
        { fail "not a git checkout: the packages are built from one"; return 1; }
    local src=$out/dcps-$version
    say "packages: clean copy of the tree in ${src#"$here"/}"
    rm -rf "$out" && mkdir -p "$src"
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf - | tar -xf - -C "$src"

    # No tests in the package build unless DEB_BUILD_OPTIONS says so: `check` runs
    # them all (DEB_BUILD_OPTIONS=parallel=2 runs make check inside it too).
    local opts=${DEB_BUILD_OPTIONS-nocheck parallel=$(nproc)} debs=() p
    say "packages: dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=$opts), log in ${out#"$here"/}/build.log"
    if (cd "$src" && DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1; then
        for p in "${deb_names[@]}"; do debs+=("$(ls "$out/${p}_"*.deb 2>/dev/null)"); done
        pass "dpkg-buildpackage -us -uc -b: $(cd "$out" && ls ./*.deb | sed 's|^\./||' | paste -sd' ')"
    else
        tail -n 40 "$out/build.log"
        fail "dpkg-buildpackage (${out#"$here"/}/build.log)"
        return 1
    fi

    # lintian exits 1 when it finds an error, 2 when it cannot run.
    local tags unjustified lrc=0
    lintian --tag-display-limit 0 "$out"/dcps_*.changes >"$out/lintian.log" 2>&1 || lrc=$?
    if [ $lrc -gt 1 ]; then
        cat "$out/lintian.log"
        fail "lintian did not run (exit status $lrc)"
        return 1
    fi
    tags=$(awk '/^[EW]: / {print $1, $3}' "$out/lintian.log" | sort | uniq -c |
        awk '{printf "%s%s %s (x%d)", sep, $2, $3, $1; sep = ", "}')
    unjustified=$(awk '/^[EW]: / {print $1, $3}' "$out/lintian.log" |
        grep -vxF -f <(printf 'W: %s\n' "${lintian_justified[@]}") | sort -u | paste -sd, - || true)
    if [ -z "$unjustified" ]; then
        pass "lintian: no error; warnings: ${tags:-none} (justified in docs/packaging.md)"
    else
        cat "$out/lintian.log"
        fail "lintian: $unjustified: fix it, or justify it in docs/packaging.md and here"
        return 1
    fi

    local new=()
    for p in "${deb_names[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || new+=("$p")
    done
    if [ "${DCPS_KEEP_PACKAGES:-0}" != 1 ] && [ ${#new[@]} -gt 0 ]; then
        # shellcheck disable=SC2064  # expanded now: the list is fixed
        trap "say 'packages: purging ${new[*]}'; $sudo apt-get purge -y -qq -o DPkg::Lock::Timeout=300 ${new[*]} >/dev/null" EXIT
    fi
    if DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 "${debs[@]}" >"$out/install.log" 2>&1; then
        pass "apt-get install: ${deb_names[*]}"
    else
        cat "$out/install.log"
        fail "apt-get install of the packages"
        return 1
    fi
    deb_checks "$version" || fails=$((fails + $?))
    echo "packages: $((SECONDS - t0)) s, $fails failure(s); the .deb files are in ${out#"$here"/}/"
    [ $fails -eq 0 ]
}

# The installed packages in use, from installed files only: the programs in
# /usr/bin, the job file in /etc/dcps, the launcher of the examples, a PATH without
# the build tree. Returns the number of failures.
deb_checks() {
    local version=$1 fails=0 tmp out
    local ipath=/usr/sbin:/usr/bin:/sbin:/bin examples=/usr/share/doc/dcps-common/examples
    tmp=$(mktemp -d)

    if dpkg-query -W -f='${Conffiles}\n' dcps-common | grep -q '^ /etc/dcps/job.ini '; then
        pass "/etc/dcps/job.ini is a conffile of dcps-common"
    else
        fail "/etc/dcps/job.ini is not a conffile of dcps-common"
    fi
    if out=$(env PATH=$ipath dcps-server --version 2>&1) && [ "$out" = "dcps-server $version" ]; then
        pass "dcps-server --version (PATH=$ipath): $out"
    else
        fail "dcps-server --version: $out"
    fi

    say "packages: 2 shards and 2 workers, 1 epoch on 2,000 examples, with the installed files"
    if (cd "$tmp" && env -u PYTHONPATH -u LD_LIBRARY_PATH PATH=$ipath \
        bash "$examples/launch-local.sh" /etc/dcps/job.ini -b /usr/bin -e -q -d "$tmp/run" \
        -s data.epochs=1 -s data.train_limit=2000) >"$tmp/job.out" 2>&1 &&
        [ "$(grep -c '^final: ' "$tmp/job.out")" -eq 2 ]; then
        grep '^final: ' "$tmp/job.out"
        pass "the job: /usr/bin/dcps-server x2, /usr/bin/dcps-worker x2, /etc/dcps/job.ini, $examples/launch-local.sh"
    else
        tail -n 40 "$tmp/job.out" "$tmp"/run/*.log 2>/dev/null
        fail "the job with the installed files"
    fi

    if out=$(cd "$tmp" && env -u PYTHONPATH PATH=$ipath python3 -c \
        'import dcps, dcps.torch; print(dcps.__version__, dcps.__file__)' 2>&1) &&
        [ "$out" = "$version /usr/lib/python3/dist-packages/dcps/__init__.py" ]; then
        pass "python3 -c 'import dcps, dcps.torch': $out"
    else
        fail "python3 -c 'import dcps, dcps.torch': $out"
    fi

    # A program built against libdcps-dev through pkg-config, run against libdcps1.
    cat >"$tmp/prog.c" <<'PROG'
#include <dcps/dcps.h>
#include <dcps/error.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int code = 0;
    char why[256] = "";
    dcps_client_t *c = dcps_client_open(argc > 1 ? argv[1] : "", 0, NULL, 0, &code, why, sizeof why);
    if (c || code != DCPS_E_CONFIG)
        return 1;
    printf("%s: %s\n", dcps_strerror(code), why);
    return 0;
}
PROG
    # (ld.so may name the library by /lib, the same directory on a merged /usr.)
    local lib=
    # shellcheck disable=SC2016  # expanded by the inner shell
    if out=$(cd "$tmp" && env PATH=$ipath sh -c 'cc -std=c11 -Wall -Wextra -Werror -o prog prog.c \
        $(pkg-config --cflags --libs dcps) && ./prog none.ini' 2>&1) &&
        lib=$(ldd "$tmp/prog" | awk '$1 == "libdcps.so.1" {print $3}') &&
        [[ $lib =~ ^(/usr)?/lib/[a-z0-9_]+-linux-gnu[a-z0-9_]*/libdcps\.so\.1$ ]]; then
        pass "cc prog.c \$(pkg-config --cflags --libs dcps), run with $lib: $out"
    else
        fail "a program built against libdcps-dev: $out${lib:+ (libdcps.so.1 from $lib)}"
    fi

    if out=$(man -w dcps-server dcps-worker dcps.conf 2>&1); then
        pass "man pages: $(printf '%s\n' "$out" | paste -sd' ')"
    else
        fail "man -w dcps-server dcps-worker dcps.conf: $out"
    fi

    # The installed units, each template as the instance systemd loads, with the
    # installed programs and man pages. Warnings about the host's own units (what
    # network-online.target pulls in) do not count; any other line does.
    local unitdir=/lib/systemd/system u
    mkdir -p "$tmp/units"
    for u in dcps-server dcps-worker; do cp "$unitdir/$u@.service" "$tmp/units/$u@0.service"; done
    if (cd "$tmp/units" && systemd-analyze verify --man=yes "$tmp/units/dcps-server@0.service" \
        "$tmp/units/dcps-worker@0.service") \
        >"$tmp/verify.out" 2>&1 && ! grep -qvE '^/(lib|usr|etc|run)/' "$tmp/verify.out"; then
        pass "systemd-analyze verify: $unitdir/dcps-server@.service and dcps-worker@.service (as @0), no warning"
    else
        cat "$tmp/verify.out"
        fail "systemd-analyze verify of the installed units"
    fi
    rm -rf "$tmp"
    return $fails
}

# The demo is deploy/launch-local.sh on the example job: it starts the 2 shards
# (127.0.0.1:17001 and :17002), waits for their endpoints, runs the 2 workers with
# their progress on the terminal, prints their final: lines and stops the shards;
# on Ctrl-C it stops everything it started. Logs, endpoints and metrics go to a
# run directory of this run's own, run/local-TIME-PID/ (run/latest points at the
# newest): a second demo at the same time fails to bind the same ports, and says
# so, without touching the first one's files.
do_demo() {
    say "2 shards and 2 workers train the Fashion-MNIST MLP (deploy/jobs/local.ini, progress every 200 steps)"
    exec deploy/launch-local.sh deploy/jobs/local.ini -b "$build"
}

# The PyTorch demo: launch-local.sh runs examples/torch/fashion_cnn.py as each
# worker (dcps-worker -- COMMAND), with the package from the build tree (the
# launcher puts $build/python in PYTHONPATH).
do_torch_demo() {
    if [ ! -f "$build/python/dcps/_dcps.so" ]; then
        echo "quickstart.sh: $build has no Python package (configured without Python 3" \
            "headers?): remove $build and run this again" >&2
        exit 1
    fi
    say "2 shards and 2 dcps.torch workers train a CNN on Fashion-MNIST (examples/torch/fashion_cnn.ini)"
    exec deploy/launch-local.sh examples/torch/fashion_cnn.ini -b "$build" -- \
        "$py" examples/torch/fashion_cnn.py
}

# The transformer demo: launch-local.sh runs examples/torch/char_lm.py as each
# worker. A build whose shards do not know the AdamW job's keys yet refuses
# char_lm.ini (dcps-worker checks it, exit status 2): then the same job with plain
# SGD on the shards (char_lm_sgd.ini) runs instead, and says so.
do_torch_lm() {
    if [ ! -f "$build/python/dcps/_dcps.so" ]; then
        echo "quickstart.sh: $build has no Python package (configured without Python 3" \
            "headers?): remove $build and run this again" >&2
        exit 1
    fi
    local job=examples/torch/char_lm.ini
    say "2 shards and 2 dcps.torch workers train a character-level transformer on Debian's fortunes ($job)"
    exec deploy/launch-local.sh "$job" -b "$build" -- "$py" examples/torch/char_lm.py
}

case "${1:-}" in
demo) install_missing && build_tree && do_demo ;;
torch-demo) install_missing && build_tree && do_torch_demo ;;
torch-lm) install_missing && build_tree && do_torch_lm ;;
check)
    [ "${DCPS_CHECK_PACKAGES:-0}" = 1 ] && packages+=("${deb_packages[@]}")
    install_missing && build_tree && do_check
    ;;
packages)
    packages+=("${deb_packages[@]}")
    install_missing && do_packages
    ;;
*)
    echo "usage: $0 demo|check|torch-demo|torch-lm|packages" >&2
    exit 2
    ;;
esac
