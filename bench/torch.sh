#!/bin/bash
# bench/torch.sh — dcps.torch against DistributedDataParallel, and its overhead over
# dcps-worker, on this host's loopback.
#
#   bench/torch.sh [-b BUILD] [-o OUT] [-P "2 4"] [-e EPOCHS] [-D "DDP VARIANTS"]
#                  [-x tta|overhead|netem|all]
#
#   tta       time to accuracy on examples/torch/fashion_cnn.py's CNN (about 215,000
#             parameters), batch 32 a worker, EPOCHS epochs (default 5), for P in -P
#             (default "2"), these systems one after the other in one invocation:
#               ddp*       torch.nn.parallel.DistributedDataParallel over gloo, SGD
#                          (bench/ddp_cnn.py; synchronous: gradients averaged), one
#                          run per variant of -D (bench_ddp_args in bench/lib.sh: the
#                          lr scaled with P or not, warm-up, fp16 or PowerSGD hooks);
#                          default "ddp ddp_linear ddp_linear_warmup ddp_sqrt ddp_fp16
#                          ddp_powersgd"
#               dcps_dense dcps.torch, 2 shards, async DC-ASGD-a, lr 0.1, dense push and pull
#               dcps_topk  dcps.torch, 2 shards, async DC-ASGD-a, Top-k 1% with error
#                          feedback and delta pulls (examples/torch/fashion_cnn.ini)
#             Each rank evaluates the whole test set after every epoch; rank 0's
#             (elapsed_s, test_acc) pairs go to OUT/tta.csv, and the time to 0.88 is
#             rank 0's elapsed time at the end of the first epoch at or above it
#             (epoch granularity). Every run shares this machine's cores: OUT/load.csv
#             has the load average (1 min) before and after each run.
#   overhead  the same MLP (784-256-128-10, one epoch of 60,000 examples, batch 64,
#             async, dense, 2 shards, 1 worker) through dcps-worker (OpenBLAS computes)
#             and through dcps.torch (python/tests/mlp_worker.py; PyTorch computes), 3
#             runs each, alternating, and PyTorch's forward and backward alone (the
#             same loop without dcps). OUT/overhead.csv: one row per run with the
#             steady samples/s (the median of the progress windows of 32 steps, the
#             first left out). Then bench/torch_step.py times a dcps.torch step in
#             parts (PyTorch's compute, libdcps's step, dcps.torch's own wrapper) in
#             OUT/step_breakdown.csv: the wrapper's share is dcps.torch's overhead over
#             the C step that dcps-worker runs.
#
#   report    runs nothing: writes the summary and the plots again from OUT's CSVs.
#   netem     the tta experiment with every shard and worker in a network namespace of
#             its own behind a 1 Gbit/s link (bench/netem.sh -x torch, which takes
#             -D's variants as DDP_SYSTEMS; root only): OUT/netem/torch_1gbit.csv.
# Writes OUT/tta.csv, OUT/overhead.csv, OUT/summary.txt (with the machine) and, when
# gnuplot is present, a PNG per CSV and P (tta_P2.png, netem/torch_1gbit_P2.png). OUT defaults to bench/results/<date>-torch.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$here/build
OUT=
PLIST="2"
EPOCHS=5
EXP=all
DDP_SYSTEMS="ddp ddp_linear ddp_linear_warmup ddp_sqrt ddp_fp16 ddp_powersgd"
while getopts 'b:o:P:e:D:x:' o; do
    case $o in
    b) BUILD=$(cd "$OPTARG" && pwd) ;;
    o) OUT=$OPTARG ;;
    P) PLIST=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    D) DDP_SYSTEMS=$OPTARG ;;
    x) EXP=$OPTARG ;;
    *) sed -n '4,7p' "$0" >&2; exit 2 ;;
    esac
done
export BUILD
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
for d in $DDP_SYSTEMS; do bench_ddp_args "$d" 1 1 >/dev/null || exit 2; done
OUT=${OUT:-$here/bench/results/$(date +%F)-torch}
mkdir -p "$OUT"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$py" -c 'import torch, dcps' || { echo "torch.sh: needs python3-torch and a build with Python" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT

# The 1-minute load average now.
load1() { cut -d' ' -f1 /proc/loadavg; }

tta() {
    echo "system,P,epoch,elapsed_s,test_acc" >"$OUT/tta.csv"
    echo "system,P,args,load_before,load_after" >"$OUT/load.csv"
    local P sys args before
    for P in $PLIST; do
        for sys in $DDP_SYSTEMS; do
            # DDP: P processes, a fresh port each time.
            local port=$((20000 + RANDOM % 20000)) pids=()
            args=$(bench_ddp_args "$sys" "$P" "$EPOCHS")
            before=$(load1)
            for ((r = 0; r < P; r++)); do
                # shellcheck disable=SC2086 # args: words from bench_ddp_args
                "$py" "$here/bench/ddp_cnn.py" --world "$P" --rank "$r" --port "$port" \
                    --epochs "$EPOCHS" $args >"$run/ddp$r.out" 2>"$run/ddp$r.err" &
                pids+=($!)
            done
            for p in "${pids[@]}"; do wait "$p" || { cat "$run"/ddp*.err >&2; exit 1; }; done
            bench_epoch_rows "$sys" "$P" "$EPOCHS" "$run/ddp0.out" >>"$OUT/tta.csv"
            echo "$sys,$P,$args,$before,$(load1)" >>"$OUT/load.csv"
        done
        for sys in dcps_dense dcps_topk; do
            before=$(load1)
            local sets=(-s "data.epochs=$EPOCHS")
            [ $sys = dcps_dense ] && sets+=(-s compression.push=dense -s compression.pull=dense)
            bash "$here/deploy/launch-local.sh" "$here/examples/torch/fashion_cnn.ini" -w "$P" \
                -b "$BUILD" -d "$run/$sys" -e -q "${sets[@]}" -- \
                "$py" "$here/examples/torch/fashion_cnn.py" >"$run/$sys.launch" 2>&1 ||
                { cat "$run/$sys.launch" >&2; exit 1; }
            bench_epoch_rows "$sys" "$P" "$EPOCHS" "$run/$sys/worker0.out" >>"$OUT/tta.csv"
            echo "$sys,$P,${sets[*]},$before,$(load1)" >>"$OUT/load.csv"
            grep '^final:' "$run/$sys/worker0.out" | sed "s/^/$sys P=$P /" >>"$OUT/finals.txt"
        done
    done
}

overhead() {
    local job=$run/mlp.ini i
    bench_job "$job" torch-overhead 1 2 1 0.1 784,256,128,10
    sed -i 's/^log_every = .*/log_every = 32/' "$job"
    echo "path,run,samples_per_s" >"$OUT/overhead.csv"
    local img=$data/train-images-idx3-ubyte.gz lab=$data/train-labels-idx1-ubyte.gz
    for i in 1 2 3; do
        bash "$here/deploy/launch-local.sh" "$job" -b "$BUILD" -d "$run/c" -e -q >/dev/null 2>&1
        echo "dcps-worker,$i,$(steady "$run/c/worker0.out")" >>"$OUT/overhead.csv"
        bash "$here/deploy/launch-local.sh" "$job" -b "$BUILD" -d "$run/t" -e -q -- "$py" \
            "$here/python/tests/mlp_worker.py" --layers 784,256,128,10 --images "$img" \
            --labels "$lab" >/dev/null 2>&1
        echo "dcps.torch,$i,$(steady "$run/t/worker0.out")" >>"$OUT/overhead.csv"
        "$py" - "$img" "$lab" "$i" <<'EOF' >>"$OUT/overhead.csv"
import sys, time, numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, "examples/torch")
from fashion_cnn import read_idx
torch.set_num_threads(1)
x = torch.from_numpy(read_idx(sys.argv[1]).reshape(-1, 784).astype(np.float32) / 255)
y = torch.from_numpy(read_idx(sys.argv[2]).astype(np.int64))
m = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                        torch.nn.ReLU(), torch.nn.Linear(128, 10))
perm = torch.randperm(len(y))
t0 = time.monotonic()
for at in range(0, len(y) - 63, 64):
    sel = perm[at:at + 64]
    F.cross_entropy(m(x[sel]), y[sel]).backward()
    m.zero_grad()
print(f"torch-compute-only,{sys.argv[3]},{(len(y) // 64 * 64) / (time.monotonic() - t0):.0f}")
EOF
    done
    DCPS_BUILDDIR=$BUILD "$py" "$here/bench/torch_step.py" 3 >"$OUT/step_breakdown.csv" 2>/dev/null
}

# The median samples_per_s of a worker's progress lines, the first window left out.
steady() {
    grep '^rank=0 step=' "$1" | sed -n '2,$s/.* samples_per_s=\([0-9]*\).*/\1/p' | sort -n |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# The same three systems with every worker and shard in a network namespace of
# its own behind a 1 Gbit/s link (root only; bench/netem.sh -x torch).
netem() {
    BUILD=$BUILD DDP_SYSTEMS=$DDP_SYSTEMS bash "$here/bench/netem.sh" -x torch -R 1gbit -P "$PLIST" -e "$EPOCHS" \
        -o "$OUT/netem"
}

case $EXP in
tta) tta ;;
overhead) (cd "$here" && overhead) ;;
netem) netem ;;
all) tta; (cd "$here" && overhead) ;;
report) ;; # the summary and the plots again, from OUT's CSVs
*) echo "torch.sh: -x tta|overhead|netem|all|report" >&2; exit 2 ;;
esac

{
    echo "# bench/torch.sh -P \"$PLIST\" -e $EPOCHS, summary written $(date -u +%FT%TZ)"
    echo "# machine: $(bench_machine); loopback; every process shares these cores"
    echo "# $("$py" -c 'import torch; print("torch", torch.__version__)')"
    for csv in "$OUT/tta.csv" "$OUT/netem/torch_1gbit.csv"; do
        [ -s "$csv" ] || continue
        echo "${csv#"$OUT"/}: time to test_acc >= 0.88 (rank 0, end of the first epoch at or above)," \
            "and the last epoch:"
        awk -F, 'NR > 1 && $5 >= 0.88 && !(($1 "," $2) in seen) { seen[$1 "," $2] = 1
                 printf "  %-10s P=%s  %7.1f s (epoch %s, test_acc %s)\n", $1, $2, $4, $3, $5 }
                 NR > 1 { last[$1 "," $2] = $0 }
                 END { for (k in last) { split(last[k], f, ",")
                       printf "  %-10s P=%s  last epoch %s at %.1f s: test_acc %s\n", f[1], f[2], f[3], f[4], f[5] } }' \
            "$csv"
    done
    if [ -s "$OUT/overhead.csv" ]; then
        echo "MLP 784-256-128-10, 1 worker, 2 shards, dense, batch 64: samples/s in the steady"
        echo "state (median of the progress windows; median of 3 runs) and ms per step:"
        for p in dcps-worker dcps.torch torch-compute-only; do
            awk -F, -v p="$p" '$1 == p { print $3 }' "$OUT/overhead.csv" | sort -n |
                awk -v p="$p" '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]
                    printf "  %-20s %7.0f samples/s  %.3f ms/step\n", p, m, 64000 / m }'
        done
    fi
    if [ -s "$OUT/step_breakdown.csv" ]; then
        echo "a dcps.torch step in parts (bench/torch_step.py; ms per step, median of the runs):"
        for c in 3 4 5 6; do
            awk -F, -v c=$c 'NR == 1 { name = $c; next } { print name, $c }' \
                "$OUT/step_breakdown.csv" | sort -k2 -n |
                awk '{ n = $1; v[NR] = $2 } END { printf "  %-12s %s\n", n, v[int((NR + 1) / 2)] }'
        done
    fi
} | tee "$OUT/summary.txt"

# plot CSV NETWORK: OUT/<CSV's name>_P<P>.png for each P, test accuracy against time.
plot() {
    local csv=$1 net=$2 P sys sep
    command -v gnuplot >/dev/null && [ -s "$csv" ] || return 0
    for P in $PLIST; do
        grep -q "^[a-z_]*,$P," "$csv" || continue # no run with P workers in this CSV
        {
            echo "set terminal pngcairo size 900,500 noenhanced"
            echo "set output '${csv%.csv}_P$P.png'"
            echo "set title 'Fashion-MNIST CNN, P = $P workers, $net, $(nproc --all) cores shared'"
            echo "set xlabel 'elapsed s (rank 0)'; set ylabel 'test accuracy (rank 0)'"
            echo "set key bottom right; set datafile separator ','; set grid"
            printf "plot "
            sep=
            # shellcheck disable=SC2013 # system names: one word each
            for sys in $(cut -d, -f1 "$csv" | sed 1d | awk '!seen[$0]++'); do
                printf "%s'< grep \"^%s,%s,\" %s' using 4:5 with linespoints title '%s'" \
                    "$sep" "$sys" "$P" "$csv" "$sys"
                sep=", "
            done
            echo
        } | gnuplot
    done
}
plot "$OUT/tta.csv" loopback
plot "$OUT/netem/torch_1gbit.csv" "1 Gbit/s links (bench/netem.sh)"
