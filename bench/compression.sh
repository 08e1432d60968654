#!/bin/bash
# bench/compression.sh — what compressed communication costs in accuracy and
# saves in bytes.
#
# Trains the Fashion-MNIST MLP with WORKERS worker processes and SHARDS shards
# on this machine, for every seed, in two modes (async with DC-ASGD-a, and
# sync with SGD) and these schemes:
#   dense         push dense, pull dense
#   ef01          top-k with error feedback, density 0.01, delta pull
#   ef001         top-k with error feedback, density 0.001, delta pull
#   noef001       top-k without error feedback, density 0.001, delta pull
#   ef01_dpull    top-k with error feedback, density 0.01, dense pull
#   ef001_dpull   top-k with error feedback, density 0.001, dense pull
#   ef001_p01     top-k with error feedback, density 0.001, delta pull at 0.01
#   ef01_pipe     ef01 with the CD-SGD pipeline (local step, every 10th push dense)
# Writes under OUT: rank 0's metrics CSV of every run, final.csv (one row per
# run: final test accuracy of the shards' parameters after the closing barrier,
# bytes pushed and pulled by rank 0 per step, and their ratio to what dense
# would have sent), summary.csv (mean and standard deviation over the seeds),
# and gnuplot PNGs of seed 1: test accuracy against steps and against bytes.
#
# usage: bench/compression.sh [-w WORKERS] [-n SHARDS] [-e EPOCHS] [-l LR]
#                             [-s "SEEDS"] [-m "MODES"] [-k "SCHEMES"] [-o OUT]
#        (programs from $BUILD, default build/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
WORKERS=4 SHARDS=2 EPOCHS=4 LR=0.1 SEEDS="1 2 3" MODES="async sync"
SCHEMES="dense ef01 ef001 noef001 ef01_dpull ef001_dpull ef001_p01 ef01_pipe"
OUT=$root/bench/results/$(date +%F)/compression
while getopts w:n:e:l:s:m:k:o: opt; do
    case $opt in
    w) WORKERS=$OPTARG ;;
    n) SHARDS=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    l) LR=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    m) MODES=$OPTARG ;;
    k) SCHEMES=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,24p "$0" >&2; exit 2 ;;
    esac
done
. "$root/bench/lib.sh"
for p in dcps-server dcps-worker; do
    [ -x "$BUILD/$p" ] || { echo "compression.sh: no $BUILD/$p (build first, or set BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
LAYERS=784,128,10
bench_job "$OUT/job.ini" compression "$WORKERS" "$SHARDS" "$EPOCHS" "$LR" "$LAYERS"

declare -A mode=(
    [async]="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2"
    [sync]="job.mode=sync optimizer.kind=sgd"
)
topk="compression.push=topk compression.pull=delta compression.error_feedback=true"
declare -A scheme=(
    [dense]="compression.push=dense compression.pull=dense"
    [ef01]="$topk compression.density=0.01"
    [ef001]="$topk compression.density=0.001"
    [noef001]="$topk compression.density=0.001 compression.error_feedback=false"
    [ef01_dpull]="$topk compression.density=0.01 compression.pull=dense"
    [ef001_dpull]="$topk compression.density=0.001 compression.pull=dense"
    [ef001_p01]="$topk compression.density=0.001 compression.pull_density=0.01"
    [ef01_pipe]="$topk compression.density=0.01 compression.pipeline=true compression.correction_every=10"
)

{
    echo "# $(bench_machine); $WORKERS workers, $SHARDS shards, $EPOCHS epochs, lr $LR," \
        "batch 64, MLP $LAYERS, device cpu"
    echo "mode,scheme,seed,test_acc,test_loss,steps,elapsed_s,bytes_pushed,bytes_pulled,bytes_per_step,traffic_ratio"
} >"$OUT/final.csv"

for seed in $SEEDS; do
    for m in $MODES; do
        for k in $SCHEMES; do
            tag=$m-$k-s$seed
            # shellcheck disable=SC2086
            bench_run "$OUT" "$tag" "$OUT/job.ini" "$SHARDS" "$WORKERS" ${mode[$m]} ${scheme[$k]} \
                job.seed="$seed" || { echo "compression.sh: $tag failed" >&2; exit 1; }
            echo "$m,$k,$seed,$(bench_val test_acc),$(bench_val test_loss),$(bench_val steps),$(bench_val elapsed_s),$(bench_val bytes_pushed),$(bench_val bytes_pulled),$(bench_val bytes_per_step),$(bench_val traffic_ratio)" |
                tee -a "$OUT/final.csv"
        done
    done
done

awk -F, '
    /^#/ || $1 == "mode" { next }
    { k = $1 "," $2; if (!(k in n)) order[++nk] = k
      n[k]++; s[k] += $4; q[k] += $4 * $4; b[k] += $10; r[k] += $11 }
    END {
        print "mode,scheme,runs,test_acc_mean,test_acc_sd,bytes_per_step,traffic_ratio"
        for (i = 1; i <= nk; i++) {
            k = order[i]; m = s[k] / n[k]
            v = n[k] > 1 ? (q[k] - n[k] * m * m) / (n[k] - 1) : 0
            printf "%s,%d,%.4f,%.4f,%.0f,%.5f\n", k, n[k], m, sqrt(v > 0 ? v : 0), b[k] / n[k], r[k] / n[k]
        }
    }' "$OUT/final.csv" | tee "$OUT/summary.csv"

# Plots of seed 1: the CSV columns are elapsed_s,step,epoch,loss,train_acc,
# test_acc,bytes_pushed,bytes_pulled,bytes_dense,staleness_mean, one row per
# epoch and one after the closing barrier.
if command -v gnuplot >/dev/null; then
    first=${SEEDS%% *}
    for m in $MODES; do
        plots_s="" plots_b=""
        for k in $SCHEMES; do
            f=$OUT/$m-$k-s$first.csv
            [ -f "$f" ] || continue
            plots_s+="'$f' using 2:(\$6 > 0 ? \$6 : 1/0) with linespoints title '$k', "
            plots_b+="'$f' using ((\$7 + \$8) / 1e6):(\$6 > 0 ? \$6 : 1/0) with linespoints title '$k', "
        done
        gnuplot <<EOF
set datafile separator ','
set terminal pngcairo size 900,420 noenhanced
set key bottom right
set grid
set ylabel 'test accuracy'
set output '$OUT/test_acc_steps_$m.png'
set title 'Fashion-MNIST MLP, $WORKERS workers, $SHARDS shards, $m (seed $first): accuracy against steps'
set xlabel 'step (rank 0)'
plot ${plots_s%, }
set output '$OUT/test_acc_bytes_$m.png'
set title 'accuracy against megabytes sent and received by rank 0 ($m, seed $first)'
set xlabel 'MB (log scale)'
set logscale x
plot ${plots_b%, }
EOF
    done
fi
