#!/usr/bin/env bash
# bench/netem.sh --smoke runs the shards and workers each in a network namespace
# of its own, joined by rate-limited veth pairs: every run gives a row with
# positive throughput and bytes per step, top-k sends far fewer bytes than
# dense, each run's packet losses are told, gnuplot draws the PNGs, and no
# namespace or link is left behind; a bad UPLOAD_QUEUE_MS is refused.
# Skips (77) without root or where network namespaces cannot be made.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}"
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }

# A queue that is not a whole number of milliseconds is refused before anything
# is made (so without root too), with what was wrong.
msg=$(UPLOAD_QUEUE_MS=0 BUILD=$DCPS_BUILDDIR bash "$DCPS_SRCDIR/bench/netem.sh" --plot 2>&1)
rc=$?
[ $rc = 2 ] && [[ $msg == *"UPLOAD_QUEUE_MS must be a whole number of milliseconds, at least 1, not '0'"* ]] &&
    pass "UPLOAD_QUEUE_MS=0 refused" || fail "UPLOAD_QUEUE_MS=0: exit $rc, $msg"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces, veth, tc)"; exit 77; }
for c in ip tc; do command -v $c >/dev/null || { echo "SKIP: no $c (iproute2)"; exit 77; }; done
# A prefix of its own, so that a bench run on this machine does not collide.
pfx=dcpst$(($$ % 1000))-
probe=${pfx}probe
if ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP: ip netns add is not permitted here"
    exit 77
fi
# What the script needs, tried in the probe namespace: a veth pair, a bridge, tbf.
why=$( { ip -n "$probe" link add "${pfx}a" type veth peer name "${pfx}b" &&
    ip -n "$probe" link add "${pfx}br" type bridge &&
    tc -n "$probe" qdisc add dev "${pfx}a" root tbf rate 1gbit burst 64kb latency 20ms; } 2>&1)
probe_rc=$?
ip netns del "$probe"
[ $probe_rc = 0 ] || { echo "SKIP: veth, bridge or tc tbf does not work here: $why"; exit 77; }

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
out=$tmp/out
if ! BUILD=$DCPS_BUILDDIR bash "$DCPS_SRCDIR/bench/netem.sh" --smoke --prefix "$pfx" -o "$out" \
    >"$tmp/log" 2>&1; then
    cat "$tmp/log"
    fail "bench/netem.sh --smoke"
fi

n=$(grep -cE '^netem\.sh: scaling-1gbit-dense-p2: [0-9.]+ s, [0-9]+ packets dropped by the links, [0-9]+ TCP segments retransmitted, [0-9]+ retransmission timeouts$' "$tmp/log")
[ "$n" = 1 ] && pass "a run's losses on the links are told" ||
    fail "no line of scaling-1gbit-dense-p2's drops and retransmissions: $(grep -m3 dropped "$tmp/log")"

# Nothing named after the prefix is left: namespaces, and links in this one.
left=$( (ip netns list; ip -o link) | grep -F "$pfx")
if [ -n "$left" ]; then
    fail "left behind: $left"
    for ns in $(ip netns list | awk '{print $1}' | grep "^$pfx"); do ip netns del "$ns"; done
else
    pass "no namespace or link named $pfx* remains"
fi

csv=$out/runs.csv
if [ ! -s "$csv" ]; then
    fail "no $csv"
    exit 1
fi
grep -q '^# machine: .*cores' "$csv" && grep -q '^# emulated: .*tbf' "$csv" &&
    pass "runs.csv states the machine and what was emulated" ||
    fail "runs.csv lacks its # machine: and # emulated: lines"
# 2 experiments x 2 worker counts x 2 schemes, each with positive throughput and
# bytes per step, and an efficiency for P = 2.
rows=$(grep -v '^#' "$csv" | tail -n +2)
n=$(echo "$rows" | grep -c .)
[ "$n" = 8 ] && pass "8 runs" || { fail "$n runs, not 8:"; cat "$csv"; }
bad=$(echo "$rows" | awk -F, '!($14 > 0 && $18 > 0 && ($4 == 1 || $15 > 0))')
[ -z "$bad" ] && pass "every run has positive throughput, bytes per step and efficiency" ||
    fail "runs without throughput, bytes or efficiency: $bad"
for x in accuracy scaling; do
    echo "$rows" | awk -F, -v x="$x" '$1 == x && $4 == 2 { b[$5] = $18 }
        END { exit !(b["dense"] > 50 * b["topk001_delta"] && b["topk001_delta"] > 0) }' &&
        pass "$x: top-k at 0.001 with delta pulls sends under 1/50 of dense's bytes" ||
        fail "$x: bytes per step of dense and topk001_delta not as expected"
done
# The shards listened on their namespace's address, not on the loopback.
grep -q 'at tcp://10\.211\.0\.1:17000' "$out"/scaling-1gbit-dense-p2.shard0.log &&
    pass "shard 0 served on its namespace's address" ||
    fail "shard 0 did not serve on 10.211.0.1: $(head -3 "$out"/scaling-1gbit-dense-p2.shard0.log)"

if command -v gnuplot >/dev/null; then
    for png in accuracy_1gbit scaling_1gbit bytes_per_step; do
        if [ "$(head -c 4 "$out/$png.png" 2>/dev/null | tail -c 3)" = PNG ]; then
            pass "$png.png"
        else
            fail "no $png.png"
        fi
    done
else
    echo "SKIP: no gnuplot, PNGs not checked"
fi
exit $status
