#!/usr/bin/env bash
# bench/shardcap in miniature (a 64K-parameter shard, 1 and 3 sessions, async and
# sync, a dense and a Top-k + delta encoding, a fraction of a second per phase):
# the shard's own counters (/metrics) agree with what shardcap counted — every
# acknowledged push applied once (async: the version is the push count; sync: the
# rounds, pushes / sessions), every reply a pull the shard answered — the bytes
# per push and per pull are what the encoding puts on the wire, the rates and CPU
# costs are positive, each sweep marks one level as where it saturates, and bad
# options are refused naming what was wrong.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}"
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }

make -s -C "$DCPS_BUILDDIR" bench/shardcap >/dev/null || { echo "FAIL: make bench/shardcap"; exit 1; }
# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
cap=$DCPS_BUILDDIR/bench/shardcap
server=$DCPS_BUILDDIR/dcps-server
n=65536
k=656 # ceil(0.01 n)

if ! TMPDIR=$tmp "$cap" --server "$server" --params 64K --density 0.01 --modes async,sync \
    --rules sgd,dcasgd_a --encodings dense,topk_delta --sessions 1,3 --full-sweep \
    --seconds 0.3 >"$tmp/out.csv" 2>"$tmp/err"; then
    cat "$tmp/err"
    fail "bench/shardcap exits 0"
else
    pass "bench/shardcap exits 0"
fi
cat "$tmp/out.csv"
rows=$(grep -vc '^#' "$tmp/out.csv")
[ "$rows" = 17 ] && pass "a header and 16 rows" || fail "a header and 16 rows: got $rows lines"

# Every check below is one awk over the rows: it prints the offending row.
check() { # NAME AWK-CONDITION-THAT-MUST-HOLD
    local bad
    bad=$(awk -F, -v n=$n -v k=$k 'NR == 1 || /^#/ { next }
        { mode = $1; enc = $3; sessions = $6; pps = $7; push_b = $10; pull_b = $11
          p50 = $12; p99 = $13; q50 = $14; q99 = $15; cyc = $16; cpush = $17; cpull = $18
          tp = $22; tl = $23; sp = $24; sl = $25; sv = $26; sat = $27 }
        !('"$2"') { print }' <(grep -v '^#' "$tmp/out.csv"))
    if [ -z "$bad" ]; then pass "$1"; else fail "$1: $bad"; fi
}
check "the shard counted every acknowledged push" 'sp == tp && tp > 0'
check "the shard answered every pull shardcap counted" 'sl == tl && tl > 0'
check "async: one version per push; sync: one per round of every session" \
    '(mode == "async" && sv == tp) || (mode == "sync" && sv * sessions == tp)'
check "dense: a push and a pull each carry the 4n bytes of the range and a header" \
    'enc != "dense" || (push_b >= 4 * n && push_b < 4 * n + 400 && pull_b >= 4 * n && pull_b < 4 * n + 400)'
check "Top-k + delta: a push and a pull each carry k indices and values and a header" \
    'enc != "topk_delta" || (push_b >= 8 * k && push_b < 8 * k + 400 && pull_b <= 8 * k + 400 && pull_b > 100)'
check "positive rates and CPU costs" 'pps > 0 && cyc > 0 && cpush > 0 && cpull > 0'
check "p50 at most p99" 'p50 <= p99 && q50 <= q99'
sat=$(awk -F, '!/^#/ && NR > 1 { s[$1 "," $2 "," $3] += $27 } END { for (c in s) if (s[c] != 1) print c }' \
    <(grep -v '^#' "$tmp/out.csv"))
[ -z "$sat" ] && pass "each sweep marks one level saturated" || fail "saturated marks: $sat"

# Shorter values and twobit: what a push and a pull carry (a header of < 400 bytes).
if ! TMPDIR=$tmp "$cap" --server "$server" --params 64K --density 0.01 --rules sgd \
    --encodings dense,topk_delta,twobit --values fp16,int8 --sessions 1 --seconds 0.2 \
    >"$tmp/values.csv" 2>"$tmp/err"; then
    cat "$tmp/err"
    fail "bench/shardcap --values exits 0"
fi
# fp16 2 bytes a value, int8 1 and a float32 scale per 256; twobit n/4 and a tau.
bad=$(awk -F, -v n=$n -v k=$k '/^#/ || $1 == "mode" { next }
    { enc = $3; push_b = $10; pull_b = $11; v = $29
      per = v == "fp16" ? 2 : 1; blk = v == "int8" ? 4 : 0
      if (enc == "dense") want_push = want_pull = per * n + blk * n / 256
      else if (enc == "twobit") { want_push = n / 4 + 4; want_pull = 4 * n }
      else { want_push = 4 * k + per * k + blk * int((k + 255) / 256); want_pull = -1 }
      if (push_b < want_push || push_b > want_push + 400 ||
          (want_pull >= 0 && (pull_b < want_pull || pull_b > want_pull + 400))) print }' \
    "$tmp/values.csv")
rows=$(grep -vc '^#' "$tmp/values.csv")
if [ -z "$bad" ] && [ "$rows" = 6 ]; then
    pass "fp16, int8 and twobit pushes and replies carry their format's bytes"
else
    fail "fp16, int8 and twobit bytes ($rows lines): $bad"
fi

# Bad options: refused with status 2 and a sentence naming the option.
refuse() { # WHAT EXPECTED-TEXT ARGS...
    local what=$1 want=$2
    shift 2
    out=$(TMPDIR=$tmp "$cap" --server "$server" "$@" 2>&1)
    rc=$?
    if [ $rc = 2 ] && grep -q -- "$want" <<<"$out"; then pass "refuses $what"; else
        fail "refuses $what (status $rc): $out"; fi
}
refuse "a model too small" '--params: "10" is not a whole number from 64' --params 10
refuse "an unknown rule" 'unknown name "sgdd"' --rules sgd,sgdd
refuse "sessions that do not ascend" '"4,2" does not ascend' --sessions 4,2
refuse "a density of 0" '--density: "0" is not a number' --density 0
refuse "a missing server" 'cannot run' --server "$tmp/nothing"
refuse "an unknown value format" 'unknown name "fp8"' --values fp16,fp8
refuse "--netns without --address" '--netns needs --address' --netns somewhere
exit $status
