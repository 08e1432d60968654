#!/usr/bin/env bash
# bench/inside.sh at 64K floats: its probes still find the functions they time
# (a rename would leave it with no round trip), every dense round trip is split
# into the ten segments, each counted the same number of times, the shard's
# update and the worker's copy take time, and no segment's median exceeds the
# round trip's. Skips (77) without root, perf or uprobes.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (uprobes)"; exit 77; }
command -v perf >/dev/null || { echo "SKIP: no perf (linux-perf)"; exit 77; }
[ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ] ||
    { echo "SKIP: no tracefs"; exit 77; }
make -s -C "$DCPS_BUILDDIR" bench/pushpull >/dev/null || { echo "FAIL: make bench/pushpull"; exit 1; }
# Uprobes at all: one on main, removed at once.
perf probe -q -x "$DCPS_BUILDDIR/dcps-server" -a "dcpsintest$$:main=main" 2>/dev/null ||
    { echo "SKIP: uprobes cannot be placed here"; exit 77; }
perf probe -q -d "dcpsintest$$:*"

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
if ! BUILD=$DCPS_BUILDDIR bash "$DCPS_SRCDIR/bench/inside.sh" -s 64K -o "$tmp" >"$tmp/log" 2>&1; then
    cat "$tmp/log"
    echo "FAIL: bench/inside.sh -s 64K"
    exit 1
fi
cat "$tmp/inside.csv"
awk -F, 'NR > 1 { seg[$2] = $3; n[$2] = $6; rows++ }
    END {
        split("push_transfer update push_shard ack pull_request pull_shard reply_transfer copy pull_rest trip", want, " ")
        for (i = 1; i <= 10; i++) if (!(want[i] in seg)) { print "FAIL: no segment " want[i]; bad = 1 }
        if (rows != 10) { print "FAIL: " rows " rows, not 10"; bad = 1 }
        for (s in n) if (n[s] != n["trip"] || n[s] < 5) { print "FAIL: " s " counted " n[s] " times, the trip " n["trip"]; bad = 1 }
        if (!(seg["update"] > 0 && seg["copy"] > 0)) { print "FAIL: the update or the copy took no time"; bad = 1 }
        for (s in seg) if (seg[s] > seg["trip"]) { print "FAIL: " s " (" seg[s] " us) exceeds the trip (" seg["trip"] " us)"; bad = 1 }
        if (!bad) print "PASS: ten segments of " n["trip"] " round trips"
        exit bad
    }' "$tmp/inside.csv"
