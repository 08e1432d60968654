#!/bin/bash
# bench/dc_torch.sh — delay compensation for a rule other than SGD, on a real PyTorch model:
# examples/torch/fashion_cnn.py (the job examples/torch/fashion_cnn.ini: 2 shards, async,
# Top-k 1% with error feedback, delta pulls) with P workers on this host, the shards
# applying KIND (default adam, lr LR) without and with adaptive delay compensation
# (delay_compensation = adaptive, dc_lambda = 2, as bench/staleness.sh), for each seed.
#
#   bench/dc_torch.sh [-b BUILD] [-o OUT] [-w P] [-e EPOCHS] [-k KIND] [-l LR] [-s "SEEDS"]
#
# Writes OUT/final.csv (one row per run: rank 0's final test accuracy and loss after the
# closing barrier, which every rank evaluates on the same parameters) and OUT/summary.csv
# (mean and standard deviation over the seeds).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$here/build OUT=$here/bench/results/$(date +%F)/dc-torch
P=4 EPOCHS=2 KIND=adam LR=0.001 SEEDS="1 2 3"
while getopts b:o:w:e:k:l:s: opt; do
    case $opt in
    b) BUILD=$OPTARG ;;
    o) OUT=$OPTARG ;;
    w) P=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    k) KIND=$OPTARG ;;
    l) LR=$OPTARG ;;
    s) SEEDS=$OPTARG ;;
    *) sed -n 2,13p "$0" >&2; exit 2 ;;
    esac
done
. "$here/bench/lib.sh"
py=/usr/bin/python3
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
{
    echo "# $(bench_machine); fashion_cnn, $P async workers, 2 shards, Top-k 1% + delta pulls, $EPOCHS epochs, $KIND lr $LR"
    echo "scheme,seed,test_acc,test_loss,elapsed_s,staleness_mean,staleness_max"
} >"$OUT/final.csv"
for seed in $SEEDS; do
    for scheme in "$KIND" "dc_${KIND}_a"; do
        sets=(-s "data.epochs=$EPOCHS" -s "job.seed=$seed" -s "optimizer.kind=$KIND"
              -s "optimizer.lr=$LR" -s optimizer.dc_adaptive=false)
        if [ "$scheme" = "$KIND" ]; then
            sets+=(-s optimizer.delay_compensation=none)
        else
            sets+=(-s optimizer.delay_compensation=adaptive -s optimizer.dc_lambda=2)
        fi
        run=$OUT/$scheme-s$seed
        rm -rf "$run"
        bash "$here/deploy/launch-local.sh" "$here/examples/torch/fashion_cnn.ini" -w "$P" \
            -b "$BUILD" -d "$run" -e -q "${sets[@]}" -- \
            "$py" "$here/examples/torch/fashion_cnn.py" >"$run.launch" 2>&1 ||
            { cat "$run.launch" >&2; exit 1; }
        rm -f "$run.launch" "$run"/*.endpoint
        line=$(grep '^final:' "$run/worker0.out")
        val() { echo "$line" | grep -o " $1=[^ ]*" | cut -d= -f2; }
        echo "$scheme,$seed,$(val test_acc),$(val test_loss),$(val elapsed_s),$(val staleness_mean),$(val staleness_max)" |
            tee -a "$OUT/final.csv"
    done
done
awk -F, '
    /^#/ || $1 == "scheme" { next }
    { if (!(($1) in n)) order[++m] = $1; n[$1]++; s[$1] += $3; q[$1] += $3 * $3; l[$1] += $4 }
    END {
        print "scheme,runs,test_acc_mean,test_acc_sd,test_loss_mean"
        for (i = 1; i <= m; i++) {
            k = order[i]; a = s[k] / n[k]; v = n[k] > 1 ? (q[k] - n[k] * a * a) / (n[k] - 1) : 0
            printf "%s,%d,%.4f,%.4f,%.4f\n", k, n[k], a, sqrt(v > 0 ? v : 0), l[k] / n[k]
        }
    }' "$OUT/final.csv" | tee "$OUT/summary.csv"
