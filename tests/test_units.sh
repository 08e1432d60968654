#!/usr/bin/env bash
# The systemd units pass `systemd-analyze verify` with no warning at all.
#
# The units are made from deploy/systemd/*.in by the Makefile's own substitution,
# with bindir = this build tree, so that verify finds ExecStart's program (it checks
# that it exists and is executable). Each template is verified as an instance
# (dcps-server@0.service), the way systemd loads it, with the man pages of this
# build on MANPATH so that Documentation= is checked too. systemd-analyze exits 0
# on unknown keys and bad values and only warns on stderr, so any line on stderr
# fails the test; the test then checks that it would catch a misspelt key and a
# bad value.
#
# Then the programs run a short job under the seccomp policy their units ask for:
# SystemCallFilter= (groups expanded by systemd-analyze), SystemCallErrorNumber=,
# RestrictAddressFamilies= and MemoryDenyWriteExecute=, applied by tests/sandbox_exec.c (the worker on the
# CPU path: its CUDA path is not run here), once plain and once with CURVE. Two lines of the server's unit are
# there because libzmq aborts without them: it opens a netlink socket to list the
# interfaces before it binds (AF_NETLINK), and sets its I/O threads' scheduling
# policy (@resources). A unit without either must make the shard die, which also
# shows that the policy is really applied. This part is skipped without a C
# compiler or the Fashion-MNIST files. Exit 77 (skip) without systemd-analyze.
set -uo pipefail

command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
: "${DCPS_BUILDDIR:?run through make check}" "${MAKE:=make}"

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
mkdir -p "$tmp/units" "$tmp/bad"

# A make of its own: without the MAKEFLAGS (and jobserver) of `make check`.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $MAKE --no-print-directory -s -C "$DCPS_BUILDDIR" units-to-dir \
    UNITS_OUT="$tmp/units" bindir="$DCPS_BUILDDIR" || { echo "FAIL: cannot make the units"; exit 1; }
for u in dcps-server dcps-worker; do
    [ -s "$tmp/units/$u@.service" ] || { echo "FAIL: no $u@.service"; exit 1; }
    cp "$tmp/units/$u@.service" "$tmp/units/$u@0.service"
done

# Documentation=man:...: verify runs man(1) for each page; give it this build's.
man_opt=--man=yes
if command -v man >/dev/null; then
    for page in dcps-server.8 dcps-worker.1 dcps.conf.5; do
        mkdir -p "$tmp/man/man${page##*.}"
        cp "$DCPS_BUILDDIR/man/$page" "$tmp/man/man${page##*.}/" || { echo "FAIL: no man/$page"; exit 1; }
    done
    export MANPATH=$tmp/man
else
    man_opt=--man=no
fi

# verify DIR UNIT...: 0 if systemd-analyze exits 0 and prints nothing about our
# units. Its stderr is kept in $tmp/stderr.
verify() {
    local dir=$1 rc=0
    shift
    (cd "$dir" && systemd-analyze verify "$man_opt" "$@") >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
    # Dropped: warnings that start with the path of a unit file outside $dir. Units
    # that ours pull in (network-online.target and what it wants) are the host's,
    # and verify reports their problems too ("/lib/systemd/system/x.service:9: ...").
    # Every other line counts, whatever it says.
    grep -v -E "^/" "$tmp/stderr" >"$tmp/ours"
    grep -E "^$dir/" "$tmp/stderr" >>"$tmp/ours"
    [ $rc -eq 0 ] && [ ! -s "$tmp/ours" ]
}

status=0
if verify "$tmp/units" "$tmp/units/dcps-server@0.service" "$tmp/units/dcps-worker@0.service"; then
    echo "PASS: systemd-analyze verify: dcps-server@0.service dcps-worker@0.service, no output"
else
    echo "FAIL: systemd-analyze verify:"
    cat "$tmp/stderr" "$tmp/stdout"
    status=1
fi
if grep -E "^/" "$tmp/stderr" | grep -v -E "^$tmp/units/" >"$tmp/ignored"; then
    echo "(ignored lines, about the host's units:)"
    cat "$tmp/ignored"
fi

# The check itself: a misspelt key and a bad value must each fail it.
for broken in 's/^WatchdogSec=/WatchdogSek=/' 's/^ProtectSystem=strict/ProtectSystem=stricter/'; do
    sed -e "$broken" "$tmp/units/dcps-server@0.service" >"$tmp/bad/dcps-server@0.service"
    if cmp -s "$tmp/units/dcps-server@0.service" "$tmp/bad/dcps-server@0.service"; then
        echo "FAIL: $broken changed nothing in the unit"
        status=1
    elif verify "$tmp/bad" "$tmp/bad/dcps-server@0.service"; then
        echo "FAIL: a unit edited with $broken passes the check"
        status=1
    else
        echo "PASS: a unit edited with $broken fails: $(head -n 1 "$tmp/ours")"
    fi
done

# --- the programs under their units' seccomp policy ----------------------------------
job=${DCPS_SRCDIR:-$DCPS_BUILDDIR}/deploy/jobs/local.ini
data=$(awk -F' *= *' '$1 == "train_images" { print $2 }' "$job")
if [ ! -r "$data" ]; then
    echo "SKIP: no $data: the programs are not run under their units' policy"
    exit $status
fi
if ! ${CC:-cc} -o "$tmp/sandbox_exec" "${DCPS_SRCDIR:-$DCPS_BUILDDIR}/tests/sandbox_exec.c" 2>"$tmp/cc.err"; then
    echo "SKIP: cannot build tests/sandbox_exec.c: $(cat "$tmp/cc.err")"
    exit $status
fi
# The numbers behind the names, from the C headers of this machine.
printf '#include <sys/syscall.h>\n#include <sys/socket.h>\n#include <errno.h>\n' |
    ${CC:-cc} -dM -E - >"$tmp/defs.h"
number() {  # number NAME: its value in the headers, through aliases (AF_UNIX, PF_UNIX, PF_LOCAL, 1)
    awk -v n="$1" '$1 == "#define" { v[$2] = $3 }
        END { x = n; for (i = 0; i < 8 && (x in v); i++) x = v[x]; print x }' "$tmp/defs.h"
}
expand() {  # expand @group|name: system call names, groups expanded recursively
    case $1 in
    @*) systemd-analyze syscall-filter "$1" | awk '/^    [@a-z0-9_]/ { print $1 }' |
        while read -r x; do expand "$x"; done ;;
    *) echo "$1" ;;
    esac
}
# policy UNIT: writes $tmp/UNIT.nrs (the allowed call numbers), prints
# "ERRNO FAMILIES MDWE" (MDWE: 1 with MemoryDenyWriteExecute=yes).
policy() {
    local unit=$tmp/units/$1 v item
    : >"$tmp/allow"
    : >"$tmp/deny"
    while IFS= read -r v; do
        for item in ${v#\~}; do
            expand "$item" >>"$tmp/$([ "${v#\~}" = "$v" ] && echo allow || echo deny)"
        done
    done < <(sed -n 's/^SystemCallFilter=//p' "$unit")
    sort -u "$tmp/allow" -o "$tmp/allow"
    sort -u "$tmp/deny" -o "$tmp/deny"
    comm -23 "$tmp/allow" "$tmp/deny" | while read -r v; do
        awk -v n="__NR_$v" '$1 == "#define" && $2 == n { print $3 }' "$tmp/defs.h"
    done >"$tmp/$1.nrs"
    local e fams=
    e=$(sed -n 's/^SystemCallErrorNumber=//p' "$unit")
    for item in $(sed -n 's/^RestrictAddressFamilies=//p' "$unit"); do
        fams=$fams${fams:+,}$(number "$item")
    done
    local mdwe=0
    grep -qx 'MemoryDenyWriteExecute=yes' "$unit" && mdwe=1
    echo "$([ -n "$e" ] && number "$e" || echo 0) $fams $mdwe"
}
mkdir -p "$tmp/sbin"
for p in server worker; do
    read -r err fams mdwe < <(policy "dcps-$p@0.service")
    printf '#!/bin/sh\nexec "%s" "%s" %s %s %s "%s" "$@"\n' "$tmp/sandbox_exec" "$tmp/dcps-$p@0.service.nrs" \
        "$err" "$fams" "$mdwe" "$DCPS_BUILDDIR/dcps-$p" >"$tmp/sbin/dcps-$p"
    chmod +x "$tmp/sbin/dcps-$p"
    echo "dcps-$p@.service: $(wc -l <"$tmp/dcps-$p@0.service.nrs") system calls allowed, errno $err," \
        "address families $fams, MemoryDenyWriteExecute $mdwe"
done
# In a build with -fsanitize=address, LeakSanitizer stops the process's threads
# with ptrace at exit, which the filter forbids (as it should).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
launch=${DCPS_SRCDIR:-$DCPS_BUILDDIR}/deploy/launch-local.sh
small=(-s data.epochs=1 -s data.train_limit=2000 -s compression.push=topk -s compression.pull=delta)
rc=0
bash "$launch" "$job" -b "$tmp/sbin" -d "$tmp/run" -e -q "${small[@]}" >"$tmp/out" 2>&1 || rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^final: ' "$tmp/out")" -eq 2 ]; then
    echo "PASS: 2 shards and 2 workers train under their units' system-call filter and address families"
else
    echo "FAIL: under their units' seccomp policy: launch-local.sh exit $rc"
    cat "$tmp/out" "$tmp"/run/*.log
    status=1
fi
# The same with [security] curve = true: the CURVE handshakes (libsodium) and the
# shard's ZAP handler must fit the policy too.
mkdir -p "$tmp/keys/workers"
if ! "$DCPS_BUILDDIR/dcps-server" --keygen "$tmp/keys/server.key" >"$tmp/keys/server.txt" 2>"$tmp/out" ||
    ! "$DCPS_BUILDDIR/dcps-server" --keygen "$tmp/keys/worker.key" >/dev/null 2>>"$tmp/out"; then
    echo "SKIP: no CURVE key pair ($(tail -n 1 "$tmp/out")): not run under the policy with CURVE"
else
    cp "$tmp/keys/worker.key.pub" "$tmp/keys/workers/worker@all.pub" # any rank
    curve=(-s security.curve=true -s "security.server_secret_key_file=$tmp/keys/server.key"
        -s "security.server_public_key=$(cat "$tmp/keys/server.txt")"
        -s "security.worker_keys_dir=$tmp/keys/workers"
        -s "security.worker_secret_key_file=$tmp/keys/worker.key")
    rc=0
    bash "$launch" "$job" -b "$tmp/sbin" -d "$tmp/run-curve" -e -q "${small[@]}" "${curve[@]}" \
        >"$tmp/out" 2>&1 || rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^final: ' "$tmp/out")" -eq 2 ] &&
        grep -q 'admitted a connection' "$tmp"/run-curve/shard0.log; then
        echo "PASS: the same with [security] curve = true"
    else
        echo "FAIL: with CURVE under their units' seccomp policy: launch-local.sh exit $rc"
        cat "$tmp/out" "$tmp"/run-curve/*.log
        status=1
    fi
fi
# A shard whose unit also denies @resources, or leaves out AF_NETLINK, must die:
# the reasons for those lines in the unit, and proof that the policy is applied.
must_die() {  # must_die WHAT SED-EXPRESSION
    sed -e "$2" "$tmp/units/dcps-server@.service" >"$tmp/units/dcps-server@0.service"
    if cmp -s "$tmp/units/dcps-server@.service" "$tmp/units/dcps-server@0.service"; then
        echo "FAIL: $2 changed nothing in the unit"
        status=1
        return
    fi
    local err fams mdwe rc=0
    read -r err fams mdwe < <(policy "dcps-server@0.service")
    # In a subshell whose stderr is dropped: that is where bash reports the abort.
    (timeout 10 "$tmp/sandbox_exec" "$tmp/dcps-server@0.service.nrs" "$err" "$fams" "$mdwe" \
        "$DCPS_BUILDDIR/dcps-server" --config "$job" --shard 0 \
        --set "servers.shards=tcp://127.0.0.1:*,tcp://127.0.0.1:*" >"$tmp/out" 2>&1
        exit $?) 2>/dev/null || rc=$?
    # It dies (libzmq aborts, possibly in its I/O thread after the bind), rather
    # than serving until the timeout stops it (124).
    if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
        echo "PASS: with $1 the shard dies (exit $rc: $(tail -n 1 "$tmp/out"))"
    else
        echo "FAIL: with $1 the shard kept serving (exit $rc); the policy is not applied"
        status=1
    fi
}
must_die "SystemCallFilter=~@privileged @resources" 's/^SystemCallFilter=~@privileged$/& @resources/'
must_die "RestrictAddressFamilies= without AF_NETLINK" 's/^\(RestrictAddressFamilies=.*\) AF_NETLINK/\1/'
exit $status
