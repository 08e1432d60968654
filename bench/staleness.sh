#!/bin/bash
# bench/staleness.sh — how staleness hurts asynchronous SGD, and what DC-ASGD recovers.
#
# Trains the Fashion-MNIST MLP with WORKERS worker processes on one shard on this
# machine (more workers than cores: each gradient is many updates old when it
# arrives) for every seed, with four update schemes:
#   asgd      mode = async, kind = sgd
#   dcasgd_c  mode = async, kind = dcasgd, constant lambda (LAMBDA_C)
#   dcasgd_a  mode = async, kind = dcasgd, adaptive lambda0 = 2
#   sync      mode = sync,  kind = sgd (the mean of the WORKERS gradients per step)
# or, with -k KIND (adam, adamw, adagrad, momentum), the same four for that rule:
#   KIND, dc_KIND_c and dc_KIND_a (delay_compensation = constant, adaptive: the
#   same lambdas) and sync_KIND.
# and writes under OUT: rank 0's metrics CSV of every run, final.csv (one row per
# run: the final test accuracy after the closing barrier, which every rank
# evaluates on the same parameters, and the shard's staleness), summary.csv (mean
# and standard deviation over the seeds) and test_acc.png (gnuplot).
#
# usage: bench/staleness.sh [-w WORKERS] [-e EPOCHS] [-l LR] [-c LAMBDA_C] [-s "SEEDS"]
#                           [-k KIND] [-o OUT]   (programs from $BUILD, default build/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
WORKERS=16 EPOCHS=5 LR=0.1 LAMBDA_C=0.04 SEEDS="1 2 3" KIND=sgd
OUT=$root/bench/results/$(date +%F)/staleness
while getopts w:e:l:c:s:k:o: opt; do
    case $opt in
    w) WORKERS=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    l) LR=$OPTARG ;;
    c) LAMBDA_C=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    k) KIND=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,23p "$0" >&2; exit 2 ;;
    esac
done
. "$root/bench/lib.sh"
for p in dcps-server dcps-worker; do
    [ -x "$BUILD/$p" ] || { echo "staleness.sh: no $BUILD/$p (build first, or set BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
bench_job "$OUT/job.ini" staleness "$WORKERS" 1 "$EPOCHS" "$LR" 784,128,10

if [ "$KIND" = sgd ]; then
    declare -A scheme=(
        [asgd]="job.mode=async optimizer.kind=sgd"
        [dcasgd_c]="job.mode=async optimizer.kind=dcasgd optimizer.dc_lambda=$LAMBDA_C"
        [dcasgd_a]="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2"
        [sync]="job.mode=sync optimizer.kind=sgd"
    )
    order="asgd dcasgd_c dcasgd_a sync"
else
    k=optimizer.kind=$KIND dc=optimizer.delay_compensation
    declare -A scheme=(
        [$KIND]="job.mode=async $k"
        [dc_${KIND}_c]="job.mode=async $k $dc=constant optimizer.dc_lambda=$LAMBDA_C"
        [dc_${KIND}_a]="job.mode=async $k $dc=adaptive optimizer.dc_lambda=2"
        [sync_$KIND]="job.mode=sync $k"
    )
    order="$KIND dc_${KIND}_c dc_${KIND}_a sync_$KIND"
fi

{
    echo "# $(bench_machine);" \
        "$WORKERS workers on one shard, $EPOCHS epochs, rule $KIND, lr $LR, batch 64, MLP 784-128-10"
    echo "scheme,seed,test_acc,test_loss,elapsed_s,worker_staleness_mean,worker_staleness_max,shard_staleness_mean,shard_staleness_max"
} >"$OUT/final.csv"

run() { # scheme seed
    local name=$1 seed=$2 shard
    # shellcheck disable=SC2086
    bench_run "$OUT" "$name-s$seed" "$OUT/job.ini" 1 "$WORKERS" ${scheme[$name]} job.seed="$seed" ||
        { echo "staleness.sh: $name seed $seed failed" >&2; exit 1; }
    shard=$(grep -o 'staleness: mean [0-9.]* max [0-9]*' "$OUT/$name-s$seed.shard0.log")
    echo "$name,$seed,$(bench_val test_acc),$(bench_val test_loss),$(bench_val elapsed_s),$(bench_val staleness_mean),$(bench_val staleness_max),$(echo "$shard" | awk '{print $3","$5}')" |
        tee -a "$OUT/final.csv"
}

for seed in $SEEDS; do
    for name in $order; do run "$name" "$seed"; done
done

awk -F, -v order="$order" '
    /^#/ || $1 == "scheme" { next }
    { n[$1]++; s[$1] += $3; q[$1] += $3 * $3; st[$1] += $8 }
    END {
        print "scheme,runs,test_acc_mean,test_acc_sd,shard_staleness_mean"
        split(order, o, " ")
        for (i = 1; i <= 4; i++) {
            k = o[i]; if (!n[k]) continue
            m = s[k] / n[k]; v = n[k] > 1 ? (q[k] - n[k] * m * m) / (n[k] - 1) : 0
            printf "%s,%d,%.4f,%.4f,%.2f\n", k, n[k], m, sqrt(v > 0 ? v : 0), st[k] / n[k]
        }
    }' "$OUT/final.csv" | tee "$OUT/summary.csv"

if command -v gnuplot >/dev/null; then
    first=${SEEDS%% *}
    plots=""
    for name in $order; do
        # epoch-end rows carry test_acc (column 6)
        plots="$plots${plots:+, }'$OUT/$name-s$first.csv' using 2:(\$6 > 0 ? \$6 : 1/0) with linespoints title '$name'"
    done
    gnuplot <<EOF
set datafile separator ','
set terminal pngcairo size 800,500 noenhanced
set output '$OUT/test_acc.png'
set title "Fashion-MNIST MLP, $WORKERS async workers on $(nproc) cores (seed $first)"
set xlabel 'steps of rank 0 (one of $WORKERS workers)'
set ylabel 'test accuracy'
set key bottom right
set grid
plot $plots
EOF
fi
