#!/bin/bash
# bench/char_lm.sh — the character-level transformer of examples/torch/char_lm.py
# (Debian's fortunes): held-out bits per character of dcps.torch jobs against
# single-process torch.optim on the same samples.
#
#   bench/char_lm.sh [-b BUILD] [-o OUT] [-x "SYSTEM ..."] [-l "LR ..."]
#
#   SYSTEMs (-x; default "reference dcps_adamw dcps_sgd"):
#     reference      char_lm.py --reference examples/torch/char_lm.ini: one process,
#                    torch.optim.AdamW, warm-up and cosine decay by LambdaLR, no weight
#                    decay on biases and norm layers, the job's batch size and epochs
#     dcps_adamw     examples/torch/char_lm.ini through deploy/launch-local.sh: 2 shards,
#                    2 workers, async, Top-k 1% with error feedback, delta pulls, AdamW
#                    and its schedule on the shards (deploy/quickstart.sh torch-lm). When
#                    this build refuses the job file, skipped with its reason in the summary
#     dcps_sgd       examples/torch/char_lm_sgd.ini: the same job with plain SGD on the
#                    shards (constant lr)
#     reference_sgd  char_lm.py --reference examples/torch/char_lm_sgd.ini: plain SGD
#                    (torch.optim.SGD) in one process
#     report         runs nothing: writes the summary and the plot again from OUT's files
#   -l "LR ...": the SGD systems once per lr ([optimizer] lr), tagged SYSTEM_lrLR: the
#                sweep that chose char_lm_sgd.ini's lr.
#
# Every process is one torch thread (the reference too: it runs alone, the 2 workers
# and 2 shards of a dcps job share this machine's cores). Writes to OUT (default
# bench/results/<date>-char-lm): heldout.csv (system,updates,samples,bpc,acc,elapsed_s:
# each held-out evaluation, rank 0's for a dcps job, whose updates and samples are
# rank 0's times the workers until the last row, the job's totals), runs.csv
# (system,wall_s,bpc: the run's wall time from start to end, shards included, and its
# final held-out bpc, or "diverged" when a worker refused a gradient that was not
# finite), commands.txt (each invocation; a second one with the same OUT adds its rows),
# skipped.txt (the systems skipped, and why),
# summary.txt (the commands, the machine, the final bpc of each system and its ratio to
# the reference's), heldout.png (gnuplot, when present) and each run's output in logs/.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$here/build
OUT=
SYSTEMS="reference dcps_adamw dcps_sgd"
LRS=
command_line="bench/char_lm.sh$(printf ' %q' "$@")"
while getopts 'b:o:x:l:' o; do
    case $o in
    b) BUILD=$(cd "$OPTARG" && pwd) ;;
    o) OUT=$OPTARG ;;
    x) SYSTEMS=$OPTARG ;;
    l) LRS=$OPTARG ;;
    *) sed -n '6,6p' "$0" >&2; exit 2 ;;
    esac
done
export BUILD
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
OUT=${OUT:-$here/bench/results/$(date +%F)-char-lm}
mkdir -p "$OUT/logs"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$py" -c 'import torch, dcps' || { echo "char_lm.sh: needs python3-torch and a build with Python" >&2; exit 1; }
script=$here/examples/torch/char_lm.py
adamw_job=$here/examples/torch/char_lm.ini
sgd_job=$here/examples/torch/char_lm_sgd.ini
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -s "$OUT/heldout.csv" ] || echo "system,updates,samples,bpc,acc,elapsed_s" >"$OUT/heldout.csv"
[ -s "$OUT/runs.csv" ] || echo "system,wall_s,bpc" >"$OUT/runs.csv"
[ "$SYSTEMS" = report ] || echo "$command_line  # $(date -u +%FT%TZ)" >>"$OUT/commands.txt"

# rows SYSTEM FILE: heldout.csv rows from the held-out lines of one output (rank 0's
# for a dcps job); then the run's row of runs.csv with WALL.
rows() {
    local sys=$1 file=$2 wall=$3
    awk -v s="$sys" '/^heldout: / && ($2 == "reference" || $3 == "rank=0") {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%s,%s,%s,%s,%s,%s\n", s, v["updates"], v["samples"], v["bpc"], v["acc"], v["elapsed_s"]
            last = v["bpc"] }
        END { if (last == "") exit 1 }' "$file" >>"$OUT/heldout.csv" ||
        { echo "char_lm.sh: $sys: no held-out line in $file" >&2; exit 1; }
    echo "$sys,$wall,$(grep '^heldout: ' "$file" | grep -E ' (reference|rank=0) ' | tail -1 |
        sed 's/.* bpc=\([0-9.]*\).*/\1/')" >>"$OUT/runs.csv"
}

# reference SYSTEM JOB [LR]: one process with torch.optim, as JOB says (lr replaced).
reference() {
    local sys=$1 job=$2 lr=${3:-} t0=$SECONDS
    if [ -n "$lr" ]; then
        sed "s/^lr = .*/lr = $lr/" "$job" >"$tmp/job.ini"
        job=$tmp/job.ini
    fi
    echo "==> $sys: $script --reference ${2#"$here"/}${lr:+ (lr = $lr)}" >&2
    "$py" "$script" --reference "$job" >"$OUT/logs/$sys.out" 2>&1 ||
        { tail -n 20 "$OUT/logs/$sys.out" >&2; exit 1; }
    rows "$sys" "$OUT/logs/$sys.out" $((SECONDS - t0))
}

# dcps SYSTEM JOB [LR]: the job's shards and 2 workers on this host.
dcps() {
    local sys=$1 job=$2 lr=${3:-} t0=$SECONDS why
    if ! why=$("$BUILD/dcps-worker" --config "$job" --rank 0 -- true 2>&1); then
        why="$sys: this build refuses ${job#"$here"/}: ${why//"$here"\//}"
        echo "==> $sys: skipped: ${why#*: }" >&2
        echo "$why" >>"$OUT/skipped.txt"
        return 0
    fi
    echo "==> $sys: deploy/launch-local.sh ${job#"$here"/}${lr:+ -s optimizer.lr=$lr}" >&2
    local rc=0
    bash "$here/deploy/launch-local.sh" "$job" -b "$BUILD" -d "$tmp/$sys" -e -q \
        ${lr:+-s "optimizer.lr=$lr"} -- "$py" "$script" >"$tmp/$sys.launch" 2>&1 || rc=$?
    for f in "$tmp/$sys"/worker*.out "$tmp/$sys"/worker*.log "$tmp/$sys"/shard*.log; do
        # (the tree's paths in a traceback, relative to it)
        sed "s|$here/||g" "$f" >"$OUT/logs/$sys.$(basename "$f")"
    done
    if [ $rc -ne 0 ]; then
        # A rate that diverges is a result of the sweep, not a failure of the bench.
        if grep -q 'NonFiniteError' "$tmp/$sys"/worker*.log; then
            echo "==> $sys: diverged: $(grep -h -m1 'NonFiniteError' "$tmp/$sys"/worker*.log | head -1)" >&2
            echo "$sys,$((SECONDS - t0)),diverged" >>"$OUT/runs.csv"
            return 0
        fi
        cat "$tmp/$sys.launch" "$tmp/$sys"/worker*.log >&2
        exit 1
    fi
    rows "$sys" "$tmp/$sys/worker0.out" $((SECONDS - t0))
}

for sys in $SYSTEMS; do
    case $sys in
    reference) reference reference "$adamw_job" ;;
    dcps_adamw) dcps dcps_adamw "$adamw_job" ;;
    dcps_sgd | reference_sgd)
        run=${sys%%_*}
        [ "$run" = dcps ] || run=reference
        if [ -z "$LRS" ]; then
            $run "$sys" "$sgd_job"
        else
            for lr in $LRS; do $run "${sys}_lr$lr" "$sgd_job" "$lr"; done
        fi
        ;;
    report) ;; # the summary and the plot again, from OUT's files
    *) echo "char_lm.sh: unknown system $sys" >&2; exit 2 ;;
    esac
done

{
    echo "# summary written $(date -u +%FT%TZ); the runs of OUT/commands.txt:"
    sed 's/^/#   /' "$OUT/commands.txt"
    echo "# machine: $(bench_machine); loopback; every process shares these cores"
    echo "# $("$py" -c 'import torch; print("torch", torch.__version__)'); model and corpus:" \
        "$(grep -h -m1 '^corpus: ' "$OUT"/logs/*.out | head -1 | sed 's/^corpus: //')"
    [ -s "$OUT/skipped.txt" ] && sed 's/^/skipped: /' "$OUT/skipped.txt"
    echo "final held-out bits per character, and the ratio to the reference's (AdamW, one process):"
    awk -F, 'NR > 1 { bpc[$1] = $3; wall[$1] = $2; order[++n] = $1 }
        END { ref = bpc["reference"]
              for (i = 1; i <= n; i++) { s = order[i]
                  printf "  %-24s bpc %s  wall %5d s", s, bpc[s], wall[s]
                  if (ref != "" && bpc[s] ~ /^[0-9.]+$/) printf "  ratio %.4f", bpc[s] / ref
                  printf "\n" } }' "$OUT/runs.csv"
} | tee "$OUT/summary.txt"

if command -v gnuplot >/dev/null; then
    {
        echo "set terminal pngcairo size 900,500 noenhanced"
        echo "set output '$OUT/heldout.png'"
        echo "set title 'char_lm.py on fortunes: held-out bits per character, $(nproc --all) cores shared'"
        echo "set xlabel 'samples (windows of 65 bytes) seen by the job'; set ylabel 'held-out bits per character'"
        echo "set key top right; set datafile separator ','; set grid"
        printf "plot "
        sep=
        for sys in $(awk -F, 'NR > 1 && !seen[$1]++ { print $1 }' "$OUT/heldout.csv"); do
            printf "%s'< grep \"^%s,\" %s' using 3:4 with linespoints title '%s'" \
                "$sep" "$sys" "$OUT/heldout.csv" "$sys"
            sep=", "
        done
        echo
    } | gnuplot
fi
