#!/usr/bin/env bash
# bench/sim/calibrate.sh [-o OUT] [-s "SCHEMES"] [-n "STEPS_A STEPS_B"]
#
# The worker's CPU time per step, as bench/netem.sh's scaling experiment runs it
# (dcps-worker --compute-ms 50 on the 25M-parameter model, 2 shards, async
# DC-ASGD-a), on 127.0.0.1 with no link limit: one worker, run twice per scheme
# with STEPS_A and STEPS_B steps (default 4 and 16); the difference of the two
# runs' CPU (user + system, from /usr/bin/time), divided by the difference of
# their steps, is the CPU one step costs the worker (error feedback, Top-k,
# encoding, its share of the kernel's TCP, applying the pull), without what
# setting up costs. The same difference of the worker's training time (its
# final: line's elapsed_s) is the wall time of a step on loopback, and of the two
# shards' CPU (/proc/PID/stat) their CPU per step (bench/shardcap measures the
# shards apart, on replayed traffic). Writes OUT/worker_cpu.csv (scheme, steps_a,
# cpu_a_s, steps_b, cpu_b_s, cpu_per_step_s, wall_per_step_s, shard_cpu_per_step_s, load1)
# and OUT/calibrate.txt (the command, the machine). Default OUT: bench/results/DATE/sim.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$root/build}
OUT=$root/bench/results/$(date -u +%Y-%m-%d)/sim
SCHEMES="dense topk01 topk001 topk01_delta topk001_delta"
STEPS="4 16"
die() { echo "calibrate.sh: $*" >&2; exit 2; }
while getopts "o:s:n:" o; do
    case $o in
    o) OUT=$OPTARG ;;
    s) SCHEMES=$OPTARG ;;
    n) STEPS=$OPTARG ;;
    *) die "usage: calibrate.sh [-o OUT] [-s SCHEMES] [-n \"STEPS_A STEPS_B\"]" ;;
    esac
done
read -r sa sb <<<"$STEPS"
[[ $sa =~ ^[1-9][0-9]*$ && $sb =~ ^[1-9][0-9]*$ && $sb -gt $sa ]] ||
    die "-n: two step counts, the second larger (got \"$STEPS\")"
for p in dcps-server dcps-worker; do [ -x "$BUILD/$p" ] || die "no $BUILD/$p (build first, or set BUILD)"; done
[ -x /usr/bin/time ] || die "needs /usr/bin/time (Debian package time)"
. "$root/bench/lib.sh"
declare -n scheme=BENCH_SCHEMES
for k in $SCHEMES; do [ -n "${scheme[$k]:-}" ] || die "-s: no scheme $k"; done
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/dcps-calibrate-XXXXXX")
trap 'rm -rf "$work"' EXIT
bench_job "$work/job.ini" calibrate 1 2 1 0.1 784,8192,2304,10
ASYNC="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2"
PATIENCE="worker.timeout_ms=600000 worker.retries=0 server.dead_after_ms=120000"

# CPU seconds (user + system) of one worker doing S steps, its training time
# (elapsed_s of its final: line) and the two shards' CPU seconds (/proc), on one line.
worker_cpu() {
    local k=$1 s=$2 sets=() pids=() eps=() ep
    # shellcheck disable=SC2086
    for kv in $ASYNC ${scheme[$k]} $PATIENCE worker.compute_ms=50 data.epochs=1 \
        data.train_limit=$((s * 64)) worker.log_every=1000000; do sets+=(--set "$kv"); done
    for sh in 0 1; do
        ep=$work/ep$sh
        rm -f "$ep"
        "$BUILD/dcps-server" --config "$work/job.ini" --shard $sh "${sets[@]}" --endpoint-file "$ep" \
            2>"$work/shard$sh.log" &
        pids+=($!)
        for _ in $(seq 100); do [ -s "$ep" ] && break; sleep 0.1; done
        [ -s "$ep" ] || { cat "$work/shard$sh.log" >&2; die "shard $sh did not start"; }
        eps+=("$(cat "$ep")")
    done
    /usr/bin/time -f "%U %S" -o "$work/time" "$BUILD/dcps-worker" --config "$work/job.ini" --rank 0 \
        "${sets[@]}" --set "servers.shards=${eps[0]},${eps[1]}" >"$work/w.out" 2>"$work/w.err" ||
        { cat "$work/w.err" >&2; die "$k with $s steps failed"; }
    local shard_s=0 hz
    hz=$(getconf CLK_TCK)
    for p in "${pids[@]}"; do
        shard_s=$(awk -v s="$shard_s" -v hz="$hz" '{ printf "%.2f", s + ($14 + $15) / hz }' "/proc/$p/stat")
        kill -TERM "$p"
        wait "$p" || true
    done
    echo "$(awk '{ printf "%.3f", $1 + $2 }' "$work/time") $(grep -o ' elapsed_s=[0-9.]*' "$work/w.out" |
        cut -d= -f2) $shard_s"
}

{
    echo "bench/sim/calibrate.sh -o $OUT -s \"$SCHEMES\" -n \"$STEPS\""
    echo "machine: $(bench_machine); started $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/calibrate.txt"
echo "scheme,steps_a,cpu_a_s,steps_b,cpu_b_s,cpu_per_step_s,wall_per_step_s,shard_cpu_per_step_s,load1" \
    >"$OUT/worker_cpu.csv"
for k in $SCHEMES; do
    read -r ca ea xa <<<"$(worker_cpu "$k" "$sa")"
    read -r cb eb xb <<<"$(worker_cpu "$k" "$sb")"
    echo "$k,$sa,$ca,$sb,$cb,$(awk -v a="$ca" -v b="$cb" -v ea="$ea" -v eb="$eb" -v xa="$xa" \
        -v xb="$xb" -v sa="$sa" -v sb="$sb" 'BEGIN { d = sb - sa
        printf "%.4f,%.4f,%.4f", (b - a) / d, (eb - ea) / d, (xb - xa) / d }'),$(cut -d' ' -f1 /proc/loadavg)" \
        >>"$OUT/worker_cpu.csv"
done
echo "ended $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/calibrate.txt"
cat "$OUT/worker_cpu.csv"
