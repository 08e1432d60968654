#!/bin/bash
# bench/values.sh — fewer bits per value: bytes on the wire and final accuracy.
#
# Runs the demo job (deploy/jobs/local.ini: the 784-256-128-10 MLP on
# Fashion-MNIST, async SGD at lr 0.1, 2 workers, 2 shards, 6 epochs) through
# deploy/launch-local.sh on this machine, on the CPU, with these [compression]
# settings, each for every seed ([job] seed):
#   dense-fp32 dense-fp16 dense-bf16 dense-int8   push = dense, pull = dense
#   twobit                                        push = twobit (threshold TAU), pull = dense
#   topk-fp32 topk-fp16 topk-bf16 topk-int8       push = topk at 1%, pull = delta
# (values = the format's name; twobit's pulls are fp32). Writes under OUT:
# command.txt (this command line and the machine), values.csv (one row per run:
# rank 0's final: line's test accuracy of the shards' model, bytes pushed and
# pulled per step, traffic ratio to dense fp32) and each run's logs.
#
# usage: bench/values.sh [-e EPOCHS] [-s "SEEDS"] [-k "CONFIGS"] [-t TAU] [-o OUT]
#        (programs from $BUILD, default build/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
EPOCHS=6 SEEDS="1 2" TAU=0.01
CONFIGS="dense-fp32 dense-fp16 dense-bf16 dense-int8 twobit topk-fp32 topk-fp16 topk-bf16 topk-int8"
OUT=$root/bench/results/$(date +%F)/values
args=$(printf " %q" "$@")
while getopts e:s:k:t:o: opt; do
    case $opt in
    e) EPOCHS=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    k) CONFIGS=$OPTARG ;;
    t) TAU=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,18p "$0" >&2; exit 2 ;;
    esac
done
. "$root/bench/lib.sh"
for p in dcps-server dcps-worker; do
    [ -x "$BUILD/$p" ] || { echo "values.sh: no $BUILD/$p (build first, or set BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT/runs"
{
    echo "bench/values.sh$args"
    echo "# $(bench_machine); deploy/jobs/local.ini, 2 workers, 2 shards, $EPOCHS epochs, device cpu"
} >"$OUT/command.txt"

settings() { # CONFIG: the -s overrides of launch-local.sh
    local push=${1%%-*} values=${1#*-}
    case $push in
    dense) echo "-s compression.push=dense -s compression.pull=dense -s compression.values=$values" ;;
    topk) echo "-s compression.push=topk -s compression.density=0.01 -s compression.pull=delta" \
        "-s compression.values=$values" ;;
    twobit) echo "-s compression.push=twobit -s compression.threshold=$TAU -s compression.pull=dense" ;;
    *) echo "values.sh: unknown config $1" >&2; return 2 ;;
    esac
}

echo "config,seed,test_acc,test_loss,steps,bytes_pushed,bytes_pulled,bytes_per_step,traffic_ratio,elapsed_s" \
    >"$OUT/values.csv"
for seed in $SEEDS; do
    for k in $CONFIGS; do
        run=$OUT/runs/$k-s$seed
        rm -rf "$run"
        # shellcheck disable=SC2046
        if ! bash "$root/deploy/launch-local.sh" "$root/deploy/jobs/local.ini" -w 2 -b "$BUILD" \
            -d "$run" -e -q -s "data.epochs=$EPOCHS" -s "job.seed=$seed" -s worker.device=cpu \
            $(settings "$k") >"$run.out" 2>&1; then
            echo "values.sh: $k seed $seed failed: $run.out" >&2
            exit 1
        fi
        BENCH_FINAL=$(grep '^final: rank=0 ' "$run.out")
        row="$k,$seed"
        for key in test_acc test_loss steps bytes_pushed bytes_pulled bytes_per_step traffic_ratio \
            elapsed_s; do
            row+=",$(bench_val $key)"
        done
        echo "$row" | tee -a "$OUT/values.csv"
    done
done
