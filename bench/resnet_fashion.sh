#!/usr/bin/env bash
# resnet_fashion.sh — examples/torch/resnet_fashion.py (torchvision ResNet-18, BatchNorm,
# DataLoader num_workers=2, bfloat16 autocast on the CPU) on 2 shards and 2 workers,
# both workers killed with SIGKILL at a random moment mid-run and restarted (the shards
# keep running: dt.sampler skips the steps they hold), then two checks: every rank's
# final: test_acc is the same, and the saved state dict loaded into a fresh torchvision
# model without dcps evaluates to the reported test accuracy.
#
#   bench/resnet_fashion.sh [OUTDIR]      (default: bench/results/$(date +%F)/resnet)
#
# Environment: BUILD (default build), PY (/usr/bin/python3), TRAIN_LIMIT (4096),
# TEST_LIMIT (0: all 10,000), EPOCHS (2), KILL_MIN/KILL_MAX (the kill comes when rank 0
# has made between these steps; default 20 and 80).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
TRAIN_LIMIT=${TRAIN_LIMIT:-4096}
TEST_LIMIT=${TEST_LIMIT:-0}
EPOCHS=${EPOCHS:-2}
KILL_MIN=${KILL_MIN:-20}
KILL_MAX=${KILL_MAX:-80}
out=${1:-bench/results/$(date +%F)/resnet}
job=examples/torch/resnet_fashion.ini
run=$(mktemp -d /tmp/resnet-fashion.XXXXXX)
mkdir -p "$out"
export PYTHONPATH=$BUILD/python OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
sets=(--set "data.epochs=$EPOCHS" --set "server.checkpoint_dir=$run/ckpt" --set worker.log_every=5)
script=(examples/torch/resnet_fashion.py --train-limit "$TRAIN_LIMIT" --test-limit "$TEST_LIMIT" --out "$run/out")
log() { echo "$(date +%T) $*" | tee -a "$out/run.log"; }
: >"$out/run.log"
log "command: $0 $* (TRAIN_LIMIT=$TRAIN_LIMIT TEST_LIMIT=$TEST_LIMIT EPOCHS=$EPOCHS KILL_MIN=$KILL_MIN KILL_MAX=$KILL_MAX); run dir $run"

pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# The shards, on ephemeral ports.
for s in 0 1; do
    "$BUILD/dcps-server" --config "$job" --shard $s --endpoint-file "$run/shard$s.endpoint" \
        "${sets[@]}" --set "servers.shards=tcp://127.0.0.1:*,tcp://127.0.0.1:*" 2>"$run/shard$s.log" &
    pids+=($!); spid[$s]=$!
done
for s in 0 1; do
    for _ in $(seq 200); do [ -s "$run/shard$s.endpoint" ] && break; sleep 0.05; done
    [ -s "$run/shard$s.endpoint" ] || { log "shard $s did not start"; cat "$run/shard$s.log"; exit 1; }
done
bound=$(cat "$run/shard0.endpoint" "$run/shard1.endpoint" | paste -sd, -)

start_workers() {  # start_workers ATTEMPT
    for r in 0 1; do
        "$BUILD/dcps-worker" --config "$job" --rank $r "${sets[@]}" --set "servers.shards=$bound" \
            -- "$PY" "${script[@]}" >"$run/worker$r.$1.out" 2>"$run/worker$r.$1.log" &
        wpid[$r]=$!
    done
}
steps_of_rank0() {  # the last step= of rank 0's progress lines (stdout)
    grep -o ' step=[0-9]*' "$run/worker0.$1.out" 2>/dev/null | tail -n 1 | cut -d= -f2
}

descendants() {  # descendants PID...: every process below them, by parent pid
    local p c
    for p in "$@"; do
        for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do echo "$c"; descendants "$c"; done
    done
}

t0=$(date +%s.%N)
kill_at=$((KILL_MIN + RANDOM % (KILL_MAX - KILL_MIN + 1)))
log "first run; both workers will be killed (SIGKILL) once rank 0 has logged step >= $kill_at"
start_workers 1
killed=0
while kill -0 "${wpid[0]}" 2>/dev/null; do
    s=$(steps_of_rank0 1)
    if [ -n "$s" ] && [ "$s" -ge "$kill_at" ]; then
        # Each worker and its DataLoader processes (its children, by pid), SIGKILL.
        kids=$(descendants "${wpid[0]}" "${wpid[1]}")
        for r in 0 1; do kill -KILL "${wpid[$r]}" 2>/dev/null; done
        for k in $kids; do kill -KILL "$k" 2>/dev/null; done
        wait "${wpid[0]}" "${wpid[1]}" 2>/dev/null
        killed=1
        log "killed both workers with SIGKILL at rank 0's logged step $s"
        break
    fi
    sleep 0.2
done
[ $killed -eq 1 ] || { log "the run ended before the kill (rank 0 logged step ${s:-none}); lower KILL_MAX"; exit 1; }
sleep $((RANDOM % 3))
log "restarting both workers (the shards kept running)"
start_workers 2
rc=0
for r in 0 1; do wait "${wpid[$r]}" || { rc=$?; log "worker $r failed with status $rc"; tail -n 20 "$run/worker$r.2.log"; }; done
t1=$(date +%s.%N)
log "workers done; wall time with the kill and restart: $(echo "$t1 - $t0" | bc) s"
for s in 0 1; do kill -TERM "${spid[$s]}"; wait "${spid[$s]}"; log "shard $s stopped (status $?)"; done
pids=()

for r in 0 1; do
    cp "$run/worker$r.1.out" "$out/worker$r.first.out"; cp "$run/worker$r.1.log" "$out/worker$r.first.log"
    cp "$run/worker$r.2.out" "$out/worker$r.resumed.out"; cp "$run/worker$r.2.log" "$out/worker$r.resumed.log"
done
cp "$run/shard0.log" "$out/shard0.log"; cp "$run/shard1.log" "$out/shard1.log"
grep -h '^final:' "$run"/worker?.2.out | tee "$out/final.txt"
grep -h 'resum' "$run"/worker?.2.out "$run"/worker?.2.log | tee -a "$out/run.log"

# Check 1: the same test_acc (and test_loss) on every rank.
accs=$(grep -ho 'test_acc=[0-9.]*' "$out/final.txt" | sort -u)
losses=$(grep -ho 'test_loss=[0-9.]*' "$out/final.txt" | sort -u)
ok=0
if [ "$(grep -c '^final:' "$out/final.txt")" -eq 2 ] && [ "$(echo "$accs" | wc -l)" -eq 1 ] && [ "$(echo "$losses" | wc -l)" -eq 1 ]; then
    log "check 1 passed: both ranks report $accs $losses"
else
    log "check 1 FAILED: $(echo $accs) $(echo $losses)"; ok=1
fi
# Check 2: the saved state dict in a fresh torchvision model, without dcps.
PYTHONPATH="" "$PY" "${script[@]}" --check | tee "$out/check.txt"
got=$(grep -o 'test_acc=[0-9.]*' "$out/check.txt" | cut -d= -f2)
want=${accs#test_acc=}
if [ -n "$got" ] && "$PY" -c "import sys; sys.exit(0 if abs(float('$got') - float('$want')) < 5e-5 else 1)"; then
    log "check 2 passed: the fresh model gives test_acc=$got, the job reported $want"
else
    log "check 2 FAILED: the fresh model gives test_acc=$got, the job reported $want"; ok=1
fi
ls -l "$run/out/model.pt" | tee -a "$out/run.log"
rc2=$rc; [ $ok -eq 0 ] || rc2=1
log "exit status $rc2"
exit $rc2
