# bench/lib.sh — what the training experiments share (sourced, not run).
#
# bench_job FILE NAME WORKERS SHARDS EPOCHS LR LAYERS
#     writes a Fashion-MNIST job file with SHARDS shards on ephemeral ports,
#     batch 64, on the CPU; the metrics CSV gets a row per epoch only.
# bench_run OUT TAG JOB SHARDS WORKERS [section.key=value ...]
#     starts the shards and the workers of JOB on this machine with those
#     overrides, waits for all of them, keeps rank 0's metrics CSV as
#     OUT/TAG.csv and the shard logs as OUT/TAG.shardS.log, and sets
#     BENCH_FINAL to rank 0's `final:` line. Fails (returns 1) if any
#     process fails, with its stderr.
# bench_val KEY [LINE]   the value of KEY in LINE (a `final:` line; default
#                         BENCH_FINAL).
# bench_epoch_rows SYSTEM P EPOCHS FILE
#     CSV rows "SYSTEM,P,epoch,elapsed_s,test_acc" from rank 0's output in FILE:
#     one per "rank=0 epoch=E done: ... test_acc=A elapsed_s=T" line, and for a
#     dcps.torch worker, whose finish() evaluates the last epoch, one for EPOCHS
#     from its final: line.
# bench_machine   one line: CPU model and cores.
# bench_ddp_args NAME P EPOCHS
#     bench/ddp_cnn.py's tuning arguments for the DDP variant NAME at P ranks and
#     EPOCHS epochs (bench/torch.sh and bench/netem.sh -x torch run them; fails on an
#     unknown NAME) of BENCH_TRAIN_N examples (default 60,000). The global batch is 32 P, so the linear scaling rule gives lr
#     0.1 P:
#       ddp                lr 0.1 (not scaled: what bench/torch.sh ran until 2026-11-25)
#       ddp_linear         lr 0.1 P
#       ddp_linear_warmup  lr 0.1 P, linear warm-up over the first half epoch
#       ddp_sqrt           lr 0.1 sqrt(P)
#       ddp_fp16           lr 0.1 P, fp16_compress_hook
#       ddp_powersgd       lr 0.1 P, powerSGD_hook rank 2, after the first 10% of the
#                          updates (torch's suggested start), one bucket (bench/ddp_cnn.py)
#       ddp_powersgd_rR_sS the same at rank R, from update S (each part optional:
#                          ddp_powersgd_r4, ddp_powersgd_s2, ddp_powersgd_r1_s2)
#       compute            compute alone: each rank trains its own copy with no
#                          communication (bench/ddp_cnn.py --alone), lr 0.1 P
# BENCH_SCHEMES   bench/netem.sh's compression schemes (also bench/sim/calibrate.sh's):
#                 name -> the job file overrides.

: "${BUILD:?set BUILD to the build directory}"

declare -gA BENCH_SCHEMES=(
    [dense]="compression.push=dense compression.pull=dense"
    [topk01]="compression.push=topk compression.density=0.01 compression.pull=dense"
    [topk001]="compression.push=topk compression.density=0.001 compression.pull=dense"
    [topk01_delta]="compression.push=topk compression.density=0.01 compression.pull=delta"
    [topk001_delta]="compression.push=topk compression.density=0.001 compression.pull=delta"
    [fp16]="compression.push=dense compression.pull=dense compression.values=fp16"
)

bench_machine() {
    echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores"
}

bench_ddp_args() {
    local name=$1 p=$2 epochs=$3 lin sqrt per rank=2 start
    lin=$(awk -v p="$p" 'BEGIN { printf "%g", 0.1 * p }')
    sqrt=$(awk -v p="$p" 'BEGIN { printf "%g", 0.1 * sqrt(p) }')
    # updates an epoch (bench/ddp_cnn.py: the shortest share's) of BENCH_TRAIN_N examples
    # (default 60,000; what its --train-limit leaves)
    per=$((${BENCH_TRAIN_N:-60000} / p / 32))
    case $name in
    ddp) echo "--lr 0.1" ;;
    ddp_linear) echo "--lr $lin" ;;
    ddp_linear_warmup) echo "--lr $lin --warmup-steps $((per / 2))" ;;
    ddp_sqrt) echo "--lr $sqrt" ;;
    ddp_fp16) echo "--lr $lin --hook fp16" ;;
    compute) echo "--lr $lin --alone" ;;
    ddp_powersgd | ddp_powersgd_r[0-9]* | ddp_powersgd_s[0-9]*)
        start=$((per * epochs / 10 > 2 ? per * epochs / 10 : 2))
        [[ $name =~ ^ddp_powersgd(_r([0-9]+))?(_s([0-9]+))?$ ]] ||
            { echo "bench_ddp_args: '$name' is not ddp_powersgd[_rRANK][_sSTART]" >&2; return 1; }
        rank=${BASH_REMATCH[2]:-$rank} start=${BASH_REMATCH[4]:-$start}
        echo "--lr $lin --hook powersgd --powersgd-rank $rank --powersgd-start $start" ;;
    *) echo "bench_ddp_args: no DDP variant '$name'" >&2; return 1 ;;
    esac
}

bench_job() {
    local file=$1 name=$2 workers=$3 shards=$4 epochs=$5 lr=$6 layers=$7
    local data=/usr/share/datasets/fashion-mnist list
    list=$(printf 'tcp://127.0.0.1:*%.0s, ' $(seq "$shards"))
    cat >"$file" <<EOF
; written by bench/
[job]
name = $name
workers = $workers
[servers]
shards = ${list%, }
[model]
layers = $layers
[data]
train_images = $data/train-images-idx3-ubyte.gz
train_labels = $data/train-labels-idx1-ubyte.gz
test_images = $data/t10k-images-idx3-ubyte.gz
test_labels = $data/t10k-labels-idx1-ubyte.gz
batch_size = 64
epochs = $epochs
[optimizer]
lr = $lr
[worker]
log_every = 1000000
timeout_ms = 30000
device = cpu
EOF
}

bench_run() {
    local out=$1 tag=$2 job=$3 shards=$4 workers=$5
    shift 5
    local sets=() pids=() servers=() eps=() r s ep failed=0
    for kv in "$@"; do sets+=(--set "$kv"); done
    for s in $(seq 0 $((shards - 1))); do
        ep=$out/.$tag.endpoint$s
        rm -f "$ep"
        # A sync job's other shards connect to shard 0, which chose its port.
        "$BUILD/dcps-server" --config "$job" --shard "$s" "${sets[@]}" --endpoint-file "$ep" \
            ${eps[0]:+--leader "${eps[0]}"} 2>"$out/$tag.shard$s.log" &
        servers+=($!)
        for _ in $(seq 100); do [ -s "$ep" ] && break; sleep 0.1; done
        [ -s "$ep" ] || { echo "bench: shard $s of $tag did not start" >&2; cat "$out/$tag.shard$s.log" >&2; failed=1; }
        eps+=("$(cat "$ep" 2>/dev/null)")
        rm -f "$ep"
    done
    local list
    list=$(IFS=,; echo "${eps[*]}")
    sets+=(--set "servers.shards=$list")
    if [ $failed = 0 ]; then
        for r in $(seq 0 $((workers - 1))); do
            local metrics=()
            [ "$r" = 0 ] && metrics=(--metrics "$out/$tag.csv")
            "$BUILD/dcps-worker" --config "$job" --rank "$r" "${sets[@]}" "${metrics[@]}" \
                >"$out/.w$r.out" 2>"$out/.w$r.err" &
            pids+=($!)
        done
        for r in "${!pids[@]}"; do
            wait "${pids[$r]}" || { failed=1; echo "bench: $tag rank $r failed:" >&2; cat "$out/.w$r.err" >&2; }
        done
    fi
    for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null; wait "$s" || true; done
    BENCH_FINAL=$(grep '^final:' "$out/.w0.out" 2>/dev/null || true)
    rm -f "$out"/.w*.out "$out"/.w*.err
    return $failed
}

bench_val() {
    echo "${2-$BENCH_FINAL}" | grep -o " $1=[^ ]*" | head -1 | cut -d= -f2
}

bench_epoch_rows() {
    local sys=$1 p=$2 epochs=$3 file=$4 f
    sed -n "s/^rank=0 epoch=\([0-9]*\) done: .*test_acc=\([0-9.]*\) elapsed_s=\([0-9.]*\).*/$sys,$p,\1,\3,\2/p" "$file"
    f=$(grep '^final: rank=0 ' "$file" | tail -1 || true)
    [ -z "$f" ] || echo "$sys,$p,$epochs,$(bench_val elapsed_s "$f"),$(bench_val test_acc "$f")"
}
