#!/usr/bin/env bash
# Fewer bits per value end to end: the demo job (deploy/jobs/local.ini, its
# 784-256-128-10 MLP on Fashion-MNIST, SGD, 2 shards) run by
# deploy/launch-local.sh for one epoch (of its 6) with one worker (-w 1), so
# that a run is deterministic (fp32 gives the same accuracy every time, 0.8375
# here; two async workers differ by up to 0.015 from run to run at this
# length) and a difference is the format's alone; with
# [compression] values = fp32 (the reference), fp16, int8, push = twobit, and
# Top-k 1% with delta pulls in int8, and float32 and int8 with parts = 4. Each must
# - finish (its final: line, exit 0);
# - reach a test accuracy at most 0.02 below fp32's (here fp16 was 0.0015
#   above, int8 0.0017 below; bench/values.sh puts every format within 0.006 of
#   fp32 on the whole job with 2 workers), and at least 0.75;
# - send what its format says: rank 0's traffic_ratio (bytes over what dense
#   float32 would have sent, headers included) about 1/2 for fp16 (0.48-0.52),
#   1/4 for int8 (0.24-0.27, its scales and headers included), and for twobit
#   pushes at most 1/12 of fp32's bytes_pushed (2 bits of 32: 1/16, plus headers).
# Exit 77 (skip) without the Fashion-MNIST files.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:=$DCPS_BUILDDIR}"
job=$DCPS_SRCDIR/deploy/jobs/local.ini
data=$(awk -F' *= *' '$1 == "train_images" { print $2 }' "$job")
[ -r "$data" ] || { echo "SKIP: no $data (Debian package dataset-fashion-mnist)"; exit 77; }

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }

val() { echo "$2" | grep -o " $1=[^ ]*" | head -1 | cut -d= -f2; }

# run NAME OVERRIDE...: rank 0's final: line into final_NAME, or a failure.
declare -A final
run() {
    local name=$1 args=() o
    shift
    for o in "$@"; do args+=(-s "$o"); done
    local out=$tmp/$name.out
    if ! bash "$DCPS_SRCDIR/deploy/launch-local.sh" "$job" -w 1 -b "$DCPS_BUILDDIR" \
        -d "$tmp/$name" -e -q -s data.epochs=1 -s worker.device=cpu \
        "${args[@]}" >"$out" 2>&1; then
        fail "$name: launch-local.sh failed"
        cat "$out"
        return 1
    fi
    local r0
    r0=$(grep '^final: rank=0 ' "$out")
    if [ -z "$r0" ]; then
        fail "$name: no final: line"
        cat "$out"
        return 1
    fi
    final[$name]=$r0
}

# within X LO HI: LO <= X <= HI
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

run fp32 compression.values=fp32 || exit 1
ref=$(val test_acc "${final[fp32]}")
ref_push=$(val bytes_pushed "${final[fp32]}")
within "$ref" 0.75 1 || fail "fp32 reaches only $ref"
declare -A ratio=([fp16]="0.48 0.52" [int8]="0.24 0.27")
for name in fp16 int8 twobit topk-int8; do
    case $name in
    twobit) run "$name" compression.push=twobit compression.threshold=0.01 ;;
    topk-int8) run "$name" compression.push=topk compression.density=0.01 compression.pull=delta \
        compression.values=int8 ;;
    *) run "$name" "compression.values=$name" ;;
    esac || continue
    line=${final[$name]}
    acc=$(val test_acc "$line")
    if within "$acc" "$(awk -v r="$ref" 'BEGIN { print r - 0.02 }')" 1 && within "$acc" 0.75 1; then
        pass "$name: test accuracy $acc, fp32's $ref (at most 0.02 below it)"
    else
        fail "$name: test accuracy $acc, fp32's $ref: more than 0.02 below it, or below 0.75"
    fi
    if [ -n "${ratio[$name]:-}" ]; then
        tr=$(val traffic_ratio "$line")
        # shellcheck disable=SC2086
        if within "$tr" ${ratio[$name]}; then
            pass "$name: traffic ratio $tr to dense float32"
        else
            fail "$name: traffic ratio $tr, not within ${ratio[$name]}"
        fi
    fi
done
# Parts (docs/protocol.md section 17) with and without shorter values: float32 in 4
# parts ends where whole float32 does, bit for bit (one worker: deterministic); int8
# values go whole whatever [compression] parts says, so int8 with parts = 4 is int8.
for base in fp32 int8; do
    [ -n "${final[$base]:-}" ] || continue
    run "$base-parts" "compression.values=$base" compression.parts=4 || continue
    a=$(val test_loss "${final[$base-parts]}") b=$(val test_loss "${final[$base]}")
    if [ "$a" = "$b" ]; then
        pass "$base with parts = 4: test loss $a, the same as whole"
    else
        fail "$base with parts = 4: test loss $a, whole $b"
    fi
done
if [ -n "${final[twobit]:-}" ]; then
    push=$(val bytes_pushed "${final[twobit]}")
    if [ $((push * 12)) -le "$ref_push" ]; then
        pass "twobit: $push bytes pushed, fp32 $ref_push (at most 1/12)"
    else
        fail "twobit: $push bytes pushed, more than 1/12 of fp32's $ref_push"
    fi
fi
exit $status
