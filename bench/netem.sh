#!/bin/bash
# bench/netem.sh — the end-to-end experiment on emulated networks.
#
# Every shard and every worker runs in a network namespace of its own, joined
# by a veth pair to a Linux bridge in a "switch" namespace. Both ends of every
# veth are rate limited by tbf: the node's end is its upload, the bridge port
# its download, each RATE. The programs run through `ip netns exec`, the shards
# listen on their namespace's address, and all traffic stays between these
# namespaces. All of them share this machine's cores (2 here): only the network
# is emulated, not separate computers. Two shards, P workers for P in P_LIST,
# async DC-ASGD-a (lr 0.1, lambda0 2), batch 64, and these schemes:
#   dense          push dense, pull dense
#   topk01         top-k push with error feedback, density 0.01; dense pull
#   topk001        the same at density 0.001
#   topk01_delta   top-k push at 0.01; delta pull at the same density
#   topk001_delta  top-k push at 0.001; delta pull at the same density
# Experiments (-x):
#   accuracy  the Fashion-MNIST MLP 784-256-128-10, really trained, EPOCHS
#             epochs of the 60,000 examples, at each rate of -R. Time to 0.85 =
#             the elapsed time of rank 0's first metrics row with test accuracy
#             >= 0.85; test accuracy is evaluated once per epoch, so the time
#             has epoch granularity.
#   scaling   emulated workers (dcps-worker --compute-ms MS: each step sleeps MS
#             ms and pushes a seeded synthetic gradient of the model's size,
#             nothing is evaluated), a 25M-parameter model (784-8192-2304-10;
#             -m 100M: 784-16384-5376-10), at each rate of -r, STEPS steps per
#             worker with a delta pull and DENSE_STEPS with a dense pull (which
#             moves the whole model every step: 0.8 s of a 1 Gbit/s link at 25M).
#             A cell is skipped when its estimated memory is over half of what
#             the machine has available.
#   torch     examples/torch/fashion_cnn.py's CNN, really trained, EPOCHS epochs,
#             at each rate of -R, for each P: DistributedDataParallel over gloo
#             (bench/ddp_cnn.py, one process per worker namespace; one run per
#             variant in the environment's DDP_SYSTEMS, default "ddp", each tuned as
#             bench_ddp_args in bench/lib.sh says), and dcps.torch
#             with dense and with topk01_delta (the example job's DC-ASGD-a, lr 0.1,
#             batch 32; each worker is dcps-worker -- python3 fashion_cnn.py). Rank
#             0's test accuracy after each epoch goes to OUT/torch_RATE.csv
#             (system,P,epoch,elapsed_s,test_acc); bench/torch.sh -x netem plots it.
#             Needs python3-torch and a build with the Python package.
#             The environment may say more: DCPS_SYSTEMS, the dcps.torch runs
#             (default "dense topk01_delta"), each a scheme of -k's list (or
#             fp16: dense pushes and pulls of float16 values) with +buckets
#             (Worker's bucket_mb, BUCKET_MB MiB, default 4) or +ordered (and
#             ordered_pull) or +comm (communication alone: fashion_cnn.py
#             --comm-only, no forward or backward; DDP_SYSTEMS' compute is
#             compute alone, each rank training its own copy); TORCH_ARGS,
#             words for both scripts (fashion_cnn.py --model wide
#             --train-limit N --test-limit N, say); DCPS_SETS, more
#             section.key=value overrides of the dcps.torch job.
#   overlap   bench/overlap.py (issue 30: buckets during backward, ordered
#             pulls) with its one worker in namespace w0 and its two shards in
#             s0 and s1, at each rate of -R, with the arguments of -O (default:
#             its own, an 8.4M-parameter MLP of batch 64). Writes
#             OUT/overlap_RATE.csv (its columns: bench/overlap.py's help).
#   shardcap  bench/shardcap (make bench/shardcap) with its shard in namespace
#             s0 and its driver in w0, so that every request and reply crosses
#             two emulated links, at each rate of -r, with the arguments of
#             -C (default: the netem scaling job's shard, 12,665,216 parameters,
#             DC-ASGD-a, Top-k 0.1% with and without delta pulls, 1 to 8
#             sessions). Writes OUT/shardcap_RATE.csv (its columns:
#             bench/README.md).
# Throughput, per run: samples_per_s = the sum over workers of the `final:`
# line's samples_per_s (each worker's samples over its own training time: from
# after its setup, i.e. data loading, model and connection, to after the final
# barrier and a final dense pull); steady_samples_per_s = the sum over workers
# of their rate between their first and last in-loop metrics rows (without the
# start and the final pull). Scaling efficiency = thr(P) / (P thr(1)) for the
# same experiment, rate and scheme, for both. bytes_per_step = rank 0's bytes
# pushed and pulled (headers included) per step between its first and last
# in-loop metrics rows.
# Writes under OUT: runs.csv (one row per run; # lines give the machine and what
# was emulated), rank 0's metrics CSV (TAG.csv) and the shard logs of every run,
# and gnuplot PNGs: accuracy_RATE.png (test accuracy against time, a panel per
# P), scaling_RATE.png (efficiency against P), bytes_per_step.png.
#
# usage: bench/netem.sh [-o OUT] [-P "1 2 4 8"] [-r "1gbit 10gbit"] [-R "1gbit"]
#            [-d DELAY_MS] [-k "SCHEMES"] [-x "accuracy scaling"] [-e EPOCHS]
#            [-s STEPS] [-S DENSE_STEPS] [-c COMPUTE_MS] [-m 25M|100M] [-C "SHARDCAP ARGS"]
#            [-O "OVERLAP ARGS"]
#            [--prefix P] [--smoke] [--cleanup] [--plot]
#   defaults: OUT bench/results/$(date +%F)/netem, EPOCHS 5, STEPS 60,
#      DENSE_STEPS 8, COMPUTE_MS 50, model 25M, no delay.
#   -d adds DELAY_MS of delay on every node's upload (netem; the round trip
#      between two nodes gains 2 DELAY_MS); needs the sch_netem qdisc.
#   UPLOAD_QUEUE_MS (environment, default 20): the queue of each node's own
#      upload, in ms at the link's rate (the switch's ports keep 20 ms).
#   --smoke: P 1 2, dense and topk001_delta, 1gbit, small models and few steps:
#      checks the machinery in under a minute.
#   --cleanup: removes the namespaces a killed run left (names starting with
#      the prefix, default dcpsnet-) and exits.
#   --plot: runs nothing; draws the PNGs again from OUT's runs.csv and metrics
#      CSVs (give the options of the run that made them).
# Needs root and iproute2 (ip, tc); programs from $BUILD (default build/).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
P_LIST="1 2 4 8" RATES="1gbit 10gbit" ACC_RATES="1gbit" DELAY=0
UPLOAD_QUEUE_MS=${UPLOAD_QUEUE_MS:-20}
[[ $UPLOAD_QUEUE_MS =~ ^[1-9][0-9]*$ ]] || { echo "netem.sh: UPLOAD_QUEUE_MS must be a whole number of milliseconds, at least 1, not '$UPLOAD_QUEUE_MS'" >&2; exit 2; }
SCHEMES="dense topk01 topk001 topk01_delta topk001_delta"
EXPERIMENTS="accuracy scaling" EPOCHS=5 STEPS=60 DENSE_STEPS=8 COMPUTE_MS=50 MODEL=25M
OUT=$root/bench/results/$(date +%F)/netem
PFX=dcpsnet- SMOKE=0 CLEANUP=0 PLOT_ONLY=0
SHARDCAP_ARGS="--params 12665216 --density 0.001 --rules dcasgd_a --encodings topk,topk_delta
    --sessions 1,2,4,8 --full-sweep --seconds 3"
OVERLAP_ARGS="" BUCKET_MB=${BUCKET_MB:-4}
usage() { sed -n '/^# usage:/,/^# Needs root/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in -[oPrRdkxesScmCO] | --prefix) [ $# -ge 2 ] || usage ;; esac
    case $1 in
    -o) OUT=$2; shift ;;
    -P) P_LIST=$2; shift ;;
    -r) RATES=$2; shift ;;
    -R) ACC_RATES=$2; shift ;;
    -d) DELAY=$2; shift ;;
    -k) SCHEMES=$2; shift ;;
    -x) EXPERIMENTS=$2; shift ;;
    -e) EPOCHS=$2; shift ;;
    -s) STEPS=$2; shift ;;
    -S) DENSE_STEPS=$2; shift ;;
    -c) COMPUTE_MS=$2; shift ;;
    -m) MODEL=$2; shift ;;
    -C) SHARDCAP_ARGS=$2; shift ;;
    -O) OVERLAP_ARGS=$2; shift ;;
    --prefix) PFX=$2; shift ;;
    --smoke) SMOKE=1 ;;
    --cleanup) CLEANUP=1 ;;
    --plot) PLOT_ONLY=1 ;;
    *) usage ;;
    esac
    shift
done
die() { echo "netem.sh: $*" >&2; exit 2; }

# Interface names are at most 15 characters: prefix + "w127b".
[[ $PFX =~ ^[a-z][a-z0-9-]{0,9}$ ]] || die "--prefix: 1 to 10 of a-z, 0-9 and -, a letter first"
[[ $DELAY =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "-d: a delay in milliseconds"
[ $PLOT_ONLY = 1 ] || [ "$(id -u)" = 0 ] || die "must run as root: it creates network namespaces, veth pairs and tc qdiscs"
for c in ip tc; do command -v $c >/dev/null || die "needs iproute2 ($c)"; done

mine() { ip netns list | awk '{print $1}' | grep "^$PFX" || true; }
# Stops the programs this script started and removes its namespaces (their
# veths, bridge and qdiscs go with them).
teardown() {
    local pid ns
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    for ns in $(mine); do ip netns del "$ns" 2>/dev/null || true; done
}
if [ $CLEANUP = 1 ]; then
    for ns in $(mine); do ip netns del "$ns" && echo "removed namespace $ns"; done
    exit 0
fi
[ $PLOT_ONLY = 1 ] || [ -z "$(mine)" ] || die "namespaces named $PFX* exist (another run, or one that was killed):" \
    "$(mine | tr '\n' ' ')— run $0 --cleanup${PFX:+ --prefix $PFX} to remove them"

if [ $SMOKE = 1 ]; then
    P_LIST="1 2" RATES=1gbit ACC_RATES=1gbit SCHEMES="dense topk001_delta"
    EPOCHS=2 STEPS=20 DENSE_STEPS=20 COMPUTE_MS=5
fi
case $MODEL in
25M) SCALE_LAYERS=784,8192,2304,10 ;;
100M) SCALE_LAYERS=784,16384,5376,10 ;;
*) die "-m: 25M or 100M" ;;
esac
ACC_LAYERS=784,256,128,10 ACC_LIMIT=0
if [ $SMOKE = 1 ]; then ACC_LAYERS=784,128,10 ACC_LIMIT=12800 SCALE_LAYERS=784,512,10; fi
for p in dcps-server dcps-worker; do
    [ -x "$BUILD/$p" ] || die "no $BUILD/$p (build first, or set BUILD)"
done
. "$root/bench/lib.sh"

declare -n scheme=BENCH_SCHEMES # bench/lib.sh
for k in $SCHEMES; do [ -n "${scheme[$k]:-}" ] || die "-k: no scheme $k"; done
for x in $EXPERIMENTS; do
    [[ $x =~ ^(accuracy|scaling|torch|overlap|shardcap)$ ]] || die "-x: accuracy, scaling, torch, overlap or shardcap"
done
if [[ " $EXPERIMENTS " == *" shardcap "* ]]; then
    [ -x "$BUILD/bench/shardcap" ] || die "no $BUILD/bench/shardcap (make bench/shardcap in the build directory)"
fi
maxp=0
for p in $P_LIST; do
    [[ $p =~ ^[1-9][0-9]*$ && $p -le 100 ]] || die "-P: worker counts from 1 to 100"
    [ "$p" -gt "$maxp" ] && maxp=$p
done
SHARDS=2
ASYNC="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2"
# Long enough for a dense push of 100M floats that 8 workers share a link with.
PATIENCE="worker.timeout_ms=600000 worker.retries=0 server.dead_after_ms=120000"
params() { echo "$1" | awk -F, '{ n = 0; for (i = 2; i <= NF; i++) n += $(i - 1) * $i + $i; print n }'; }

# tbf needs a bucket of at least one timer tick of traffic to reach its rate; a
# millisecond's worth (64 KB at least) gave 0.95 Gbit/s of TCP payload at 1gbit
# and 9.5 at 10gbit between two of these namespaces on this machine.
rate_bits() {
    echo "$1" | awk '{ v = $0 + 0; u = tolower($0); sub(/^[0-9.]+/, "", u)
        m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : u == "bit" ? 1 : -1
        if (m < 0 || v <= 0) exit 1; printf "%.0f\n", v * m }'
}
for r in $RATES $ACC_RATES; do rate_bits "$r" >/dev/null || die "rate $r: a number and kbit, mbit or gbit"; done

# --- the network ---------------------------------------------------------------
addr() { # node -> its IPv4 address on the bridge's subnet
    case $1 in s*) echo "10.211.0.$((${1#s} + 1))" ;; w*) echo "10.211.0.$((${1#w} + 101))" ;; esac
}

net_up() { # the switch namespace exists already
    local n
    ip -n "${PFX}sw" link set lo up
    ip -n "${PFX}sw" link add br0 type bridge
    ip -n "${PFX}sw" link set br0 up
    for s in $(seq 0 $((SHARDS - 1))); do NODES+=("s$s"); done
    for w in $(seq 0 $((maxp - 1))); do NODES+=("w$w"); done
    for n in "${NODES[@]}"; do
        ip netns add "$PFX$n"
        ip link add "$PFX$n" netns "$PFX$n" type veth peer name "$PFX${n}b" netns "${PFX}sw"
        ip -n "$PFX$n" link set lo up
        ip -n "$PFX$n" addr add "$(addr "$n")/24" dev "$PFX$n"
        ip -n "$PFX$n" link set "$PFX$n" up
        ip -n "${PFX}sw" link set "$PFX${n}b" master br0
        ip -n "${PFX}sw" link set "$PFX${n}b" up
    done
}

# Every link at RATE both ways, with DELAY on each node's upload. A link's queue
# holds 20 ms of traffic at the switch's port (the node's download) and
# UPLOAD_QUEUE_MS (default 20) at the node's own upload: past it the qdisc drops.
# A host's own NIC queue drops less than a switch's port: txqueuelen's 1000
# packets are 120 ms at 100 Mbit/s, 12 ms at 1 Gbit/s.
shape() {
    local rate=$1 burst n
    burst=$(($(rate_bits "$rate") / 8000))
    [ $burst -lt 65536 ] && burst=65536
    for n in "${NODES[@]}"; do
        tc -n "$PFX$n" qdisc del dev "$PFX$n" root 2>/dev/null || true
        if [ "$DELAY" != 0 ]; then
            tc -n "$PFX$n" qdisc add dev "$PFX$n" root handle 1: netem delay "${DELAY}ms" limit 100000
            tc -n "$PFX$n" qdisc add dev "$PFX$n" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency "${UPLOAD_QUEUE_MS}ms"
        else
            tc -n "$PFX$n" qdisc add dev "$PFX$n" root tbf rate "$rate" burst "$burst" latency "${UPLOAD_QUEUE_MS}ms"
        fi
        tc -n "${PFX}sw" qdisc replace dev "$PFX${n}b" root tbf rate "$rate" burst "$burst" latency 20ms
    done
}

# Packets dropped so far by the qdiscs of every link (both ends).
drops() {
    local n
    for n in "${NODES[@]}"; do
        tc -n "$PFX$n" -s qdisc show dev "$PFX$n"
        tc -n "${PFX}sw" -s qdisc show dev "$PFX${n}b"
    done | awk '{ for (i = 1; i < NF; i++) if ($i == "(dropped") { sub(",", "", $(i + 1)); d += $(i + 1) } }
        END { print d + 0 }'
}

# TCP segments retransmitted and retransmission timeouts so far, summed over the
# nodes' namespaces (each has its own counters): "RETRANS TIMEOUTS".
tcp_losses() {
    local n
    for n in "${NODES[@]}"; do
        ip netns exec "$PFX$n" nstat -asz TcpRetransSegs TcpExtTCPTimeouts 2>/dev/null
    done | awk '$1 == "TcpRetransSegs" { r += $2 } $1 == "TcpExtTCPTimeouts" { t += $2 }
        END { print r + 0, t + 0 }'
}

# run TAG P JOB [section.key=value ...]: the job's shards and its first P
# workers, each in its namespace. Keeps rank 0's metrics as OUT/TAG.csv, every
# rank's as OUT/.TAG.mR.csv (removed by the caller), rank 0's output as
# OUT/TAG.out, the shard logs as OUT/TAG.shardS.log; sets FINALS to the workers'
# `final:` lines and WALL to the seconds from the first worker's start to the
# last one's exit. With WORKER_CMD set (an array), each worker runs it through
# dcps-worker -- WORKER_CMD.
run() {
    local tag=$1 p=$2 job=$3 s r ep list="" failed=0 t0
    shift 3
    local sets=(--set "job.workers=$p") wpids=()
    for s in $(seq 0 $((SHARDS - 1))); do list+="${list:+,}tcp://$(addr "s$s"):17000"; done
    sets+=(--set "servers.shards=$list")
    for kv in "$@"; do sets+=(--set "$kv"); done
    for s in $(seq 0 $((SHARDS - 1))); do
        ep=$OUT/.$tag.endpoint$s
        rm -f "$ep"
        ip netns exec "${PFX}s$s" "$BUILD/dcps-server" --config "$job" --shard "$s" "${sets[@]}" \
            --endpoint-file "$ep" 2>"$OUT/$tag.shard$s.log" &
        PIDS+=($!)
        for _ in $(seq 100); do [ -s "$ep" ] && break; sleep 0.1; done
        [ -s "$ep" ] || { echo "netem.sh: shard $s of $tag did not start:" >&2; cat "$OUT/$tag.shard$s.log" >&2; failed=1; }
        rm -f "$ep"
    done
    t0=$(date +%s.%N)
    local c0 d0 s0 k0 rt0 to0 rt1 to1
    c0=$(cpu_ticks)
    d0=$(drops)
    read -r rt0 to0 < <(tcp_losses)
    s0=$(pid_ticks "${PIDS[@]}")
    k0=$(child_ticks)
    if [ $failed = 0 ]; then
        for r in $(seq 0 $((p - 1))); do
            ip netns exec "${PFX}w$r" "$BUILD/dcps-worker" --config "$job" --rank "$r" "${sets[@]}" \
                --metrics "$OUT/.$tag.m$r.csv" ${WORKER_CMD[@]+-- "${WORKER_CMD[@]}"} \
                >"$OUT/.w$r.out" 2>"$OUT/.w$r.err" &
            wpids+=($!)
            PIDS+=($!)
        done
        for r in "${!wpids[@]}"; do
            wait "${wpids[$r]}" || { failed=1; echo "netem.sh: $tag rank $r failed:" >&2; tail -5 "$OUT/.w$r.err" >&2; }
        done
    fi
    # The workers have been reaped (their CPU is now the shell's children's); the
    # shards still run (theirs is in /proc/PID/stat).
    local k1 s1
    k1=$(child_ticks)
    s1=$(pid_ticks "${PIDS[@]}")
    WALL=$(echo "$t0 $(date +%s.%N)" | awk '{printf "%.2f", $2 - $1}')
    local c1
    c1=$(cpu_ticks)
    CPU=$(echo "$c0 $c1" | awk '{ b = $4 - $1; t = $6 - $3; if (t > 0) printf "%.2f", b / t }')
    STEAL=$(echo "$c0 $c1" | awk '{ t = $6 - $3; if (t > 0) printf "%.3f", ($5 - $2) / t }')
    # Cores the job used (its processes' CPU over the run's wall time) and cores it
    # could have had: its own plus what was idle (steal and other work were not).
    JOB_CORES=$(echo "$s0 $s1 $k0 $k1 $WALL $(getconf CLK_TCK)" | awk '{
        if ($5 > 0) printf "%.2f", (($2 - $1) + ($4 - $3)) / $6 / $5 }')
    SHARD_CPU=$(echo "$s0 $s1 $(getconf CLK_TCK)" | awk '{ printf "%.2f", ($2 - $1) / $3 }')
    WORKER_CPU=$(echo "$k0 $k1 $(getconf CLK_TCK)" | awk '{ printf "%.2f", ($2 - $1) / $3 }')
    AVAIL=$(echo "$JOB_CORES $CPU $(nproc)" | awk '{ if ($2 != "") printf "%.2f", $1 + $3 * (1 - $2) }')
    DROPS=$(($(drops) - d0))
    read -r rt1 to1 < <(tcp_losses)
    RETRANS=$((rt1 - rt0)) TIMEOUTS=$((to1 - to0))
    echo "netem.sh: $tag: ${WALL} s, $DROPS packets dropped by the links, $RETRANS TCP segments retransmitted, $TIMEOUTS retransmission timeouts" >&2
    teardown_programs
    FINALS=$(cat "$OUT"/.w*.out 2>/dev/null | grep '^final:' || true)
    [ -f "$OUT/.$tag.m0.csv" ] && cp "$OUT/.$tag.m0.csv" "$OUT/$tag.csv"
    cp "$OUT/.w0.out" "$OUT/$tag.out" 2>/dev/null || true
    rm -f "$OUT"/.w*.out "$OUT"/.w*.err
    return $failed
}
# Busy, stolen and total ticks of all CPUs so far (/proc/stat; idle and iowait
# count as idle; steal, the time the hypervisor ran something else on our vCPUs,
# counts as busy and is also given alone). Guest time is already in user.
cpu_ticks() {
    awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, $9, t; exit }' /proc/stat
}
# User + system ticks of the given live processes, all their threads (/proc/PID/stat
# fields 14 and 15; the command name, field 2, has no spaces for dcps-server).
pid_ticks() {
    local pid t=0
    for pid in "$@"; do
        [ -r "/proc/$pid/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo $t
}
# User + system ticks of this shell's reaped children (/proc/$$/stat fields 16
# and 17): a worker's CPU is added there when `wait` reaps it.
child_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
teardown_programs() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}

# Metrics CSV columns: elapsed_s,step,epoch,loss,train_acc,test_acc,
# bytes_pushed,bytes_pulled,bytes_dense,staleness_mean; in-loop rows every
# log_every steps, a row per epoch end, a last row after the final barrier.
steady_rate() { # CSV BATCH: samples/s between the first and the last row but the final one
    awk -F, -v b="$2" 'NR > 1 { n++; t[n] = $1; s[n] = $2 }
        END { if (n >= 3 && t[n - 1] > t[1]) printf "%.1f\n", (s[n - 1] - s[1]) * b / (t[n - 1] - t[1]) }' "$1"
}
steady_bytes() { # CSV: bytes pushed and pulled per step over the same rows
    awk -F, 'NR > 1 { n++; s[n] = $2; by[n] = $7 + $8 }
        END { if (n >= 3 && s[n - 1] > s[1]) printf "%.0f\n", (by[n - 1] - by[1]) / (s[n - 1] - s[1]) }' "$1"
}
time_to() { # CSV ACC: elapsed time of the first row with test accuracy >= ACC
    awk -F, -v a="$2" 'NR > 1 && $6 != "" && $6 != "nan" && $6 + 0 >= a { print $1; exit }' "$1"
}

# One row of runs.csv for the run just made.
record() { # experiment rate P scheme params compute_ms tag
    local x=$1 rate=$2 p=$3 k=$4 n=$5 cms=$6 tag=$7 f0 sum=0 steady=0 r line rr
    f0=$(echo "$FINALS" | grep ' rank=0 ' || true)
    while read -r line; do
        sum=$(echo "$sum $(bench_val samples_per_s "$line")" | awk '{print $1 + $2}')
    done <<<"$FINALS"
    for r in $(seq 0 $((p - 1))); do
        rr=$(steady_rate "$OUT/.$tag.m$r.csv" 64)
        if [ -z "$rr" ]; then steady=; break; fi
        steady=$(echo "$steady $rr" | awk '{print $1 + $2}')
    done
    local bps
    bps=$(steady_bytes "$OUT/$tag.csv")
    echo "$x,$rate,$DELAY,$p,$k,$(bench_val compression "$f0"),$(bench_val pull "$f0"),$(bench_val density "$f0"),$n,$cms,$(bench_val steps "$f0"),$(bench_val elapsed_s "$f0"),$WALL,$sum,,$steady,,${bps:-$(bench_val bytes_per_step "$f0")},$(time_to "$OUT/$tag.csv" 0.85),$(bench_val test_acc "$f0"),$CPU,$DROPS,$STEAL,$SHARD_CPU,$WORKER_CPU,$JOB_CORES,$AVAIL,$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/.rows"
    rm -f "$OUT"/."$tag".m*.csv
    tail -1 "$OUT/.rows"
}

# --- the experiments -------------------------------------------------------------
if [ $PLOT_ONLY = 0 ]; then
    # Whatever exits from here on removes the namespaces named $PFX*: none of them
    # are another run's.
    NODES=() # namespace suffixes: s0 s1 ... w0 w1 ...
    PIDS=()  # the programs running now, for the trap
    trap 'teardown' EXIT
    trap 'echo "netem.sh: interrupted" >&2; exit 130' INT TERM
    ip netns add "${PFX}sw" || die "cannot create network namespaces (ip netns add ${PFX}sw)"
    if [ "$DELAY" != 0 ] && ! err=$(tc -n "${PFX}sw" qdisc add dev lo root netem delay 1ms 2>&1); then
        die "-d $DELAY needs the netem qdisc (sch_netem), which this kernel lacks ($err)"
    fi

    mkdir -p "$OUT"
    rm -f "$OUT/.rows"
    mem_avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    net_up
    echo "netem.sh: ${#NODES[@]} namespaces ${PFX}s*, ${PFX}w* on the bridge in ${PFX}sw" >&2

    if [[ " $EXPERIMENTS " == *" accuracy "* ]]; then
        bench_job "$OUT/accuracy.ini" netem-accuracy "$maxp" $SHARDS "$EPOCHS" 0.1 "$ACC_LAYERS"
        n=$(params "$ACC_LAYERS")
        for rate in $ACC_RATES; do
            shape "$rate"
            for p in $P_LIST; do
                for k in $SCHEMES; do
                    tag=accuracy-$rate-$k-p$p
                    # shellcheck disable=SC2086
                    run "$tag" "$p" "$OUT/accuracy.ini" $ASYNC ${scheme[$k]} $PATIENCE \
                        data.train_limit=$ACC_LIMIT || die "$tag failed"
                    record accuracy "$rate" "$p" "$k" "$n" 0 "$tag"
                done
            done
        done
    fi

    if [[ " $EXPERIMENTS " == *" scaling "* ]]; then
        n=$(params "$SCALE_LAYERS")
        bench_job "$OUT/scaling.ini" netem-scaling "$maxp" $SHARDS 1 0.1 "$SCALE_LAYERS"
        # What a run holds, from this build's allocations: a worker about 4 copies of
        # the model (parameters, synthetic pool, residual, message buffers), a shard of half the model about 4 plus 2 per worker (DC-ASGD's
        # backup and the delta pull's mirror).
        for rate in $RATES; do
            shape "$rate"
            for p in $P_LIST; do
                need_kb=$((n * 4 * (4 * p + 4 + 2 * p) / 1024))
                for k in $SCHEMES; do
                    tag=scaling-$rate-$k-p$p
                    if [ $need_kb -gt $((mem_avail_kb / 2)) ]; then
                        echo "netem.sh: $tag skipped: needs about $((need_kb / 1048576)) GiB of memory," \
                            "$((mem_avail_kb / 1048576)) GiB available" >&2
                        continue
                    fi
                    s=$STEPS
                    [[ ${scheme[$k]} == *pull=dense* ]] && s=$DENSE_STEPS
                    # Each worker gets s steps: e epochs of train_limit / p / 64
                    # steps within the 60,000 examples.
                    e=$(((s * p * 64 + 59999) / 60000))
                    per=$(((s + e - 1) / e))
                    # shellcheck disable=SC2086
                    run "$tag" "$p" "$OUT/scaling.ini" $ASYNC ${scheme[$k]} $PATIENCE \
                        worker.compute_ms=$COMPUTE_MS data.epochs=$e data.train_limit=$((per * p * 64)) \
                        worker.log_every=$(((per * e + 9) / 10)) || die "$tag failed"
                    record scaling "$rate" "$p" "$k" "$n" "$COMPUTE_MS" "$tag"
                done
            done
        done
    fi
    if [[ " $EXPERIMENTS " == *" torch "* ]]; then
        py=/usr/bin/python3
        [ -x "$py" ] || py=python3
        export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1
        for rate in $ACC_RATES; do
            shape "$rate"
            csv=$OUT/torch_$rate.csv
            echo "system,P,epoch,elapsed_s,test_acc" >"$csv"
            for p in $P_LIST; do
                for d in ${DDP_SYSTEMS:-ddp}; do
                    tag=torch-$rate-$d-p$p
                    dargs=$(bench_ddp_args "$d" "$p" "$EPOCHS") || die "DDP_SYSTEMS: no variant $d"
                    dpids=()
                    for r in $(seq 0 $((p - 1))); do
                        # shellcheck disable=SC2086 # dargs: words from bench_ddp_args
                        ip netns exec "${PFX}w$r" env GLOO_SOCKET_IFNAME="${PFX}w$r" "$py" \
                            "$root/bench/ddp_cnn.py" --world "$p" --rank "$r" --addr "$(addr w0)" \
                            --port 29500 --epochs "$EPOCHS" $dargs ${TORCH_ARGS:-} >"$OUT/.d$r.out" \
                            2>"$OUT/.d$r.err" &
                        dpids+=($!)
                        PIDS+=($!)
                    done
                    for r in "${!dpids[@]}"; do
                        wait "${dpids[$r]}" || { cat "$OUT/.d$r.err" >&2; die "$tag rank $r failed"; }
                    done
                    PIDS=()
                    cp "$OUT/.d0.out" "$OUT/$tag.out"
                    rm -f "$OUT"/.d*.out "$OUT"/.d*.err
                    bench_epoch_rows "$d" "$p" "$EPOCHS" "$OUT/$tag.out" >>"$csv"
                done
                for sys in ${DCPS_SYSTEMS:-dense topk01_delta}; do
                    k=${sys%%+*} how=""
                    [ "$k" = "$sys" ] || how=${sys#*+}
                    tag=torch-$rate-${sys/+/-}-p$p
                    WORKER_CMD=("$py" "$root/examples/torch/fashion_cnn.py")
                    case $how in
                    "") ;;
                    buckets) WORKER_CMD+=(--bucket-mb "$BUCKET_MB") ;;
                    ordered) WORKER_CMD+=(--bucket-mb "$BUCKET_MB" --ordered-pull) ;;
                    comm) WORKER_CMD+=(--comm-only) ;;
                    *) die "DCPS_SYSTEMS: $sys: after + comes buckets, ordered or comm" ;;
                    esac
                    # shellcheck disable=SC2206 # TORCH_ARGS: words for both scripts
                    WORKER_CMD+=(${TORCH_ARGS:-})
                    # shellcheck disable=SC2086
                    run "$tag" "$p" "$root/examples/torch/fashion_cnn.ini" ${scheme[$k]} $PATIENCE \
                        data.epochs=$EPOCHS ${DCPS_SETS:-} || die "$tag failed"
                    WORKER_CMD=()
                    name=dcps_${k%01_delta} # as bench/torch.sh names them: dcps_dense, dcps_topk
                    bench_epoch_rows "$name${how:+_$how}" "$p" "$EPOCHS" "$OUT/$tag.out" >>"$csv"
                done
            done
            echo "netem.sh: wrote $csv" >&2
        done
    fi
    if [[ " $EXPERIMENTS " == *" overlap "* ]]; then
        py=/usr/bin/python3
        [ -x "$py" ] || py=python3
        for rate in $ACC_RATES; do
            shape "$rate"
            # shellcheck disable=SC2086 # OVERLAP_ARGS: words for bench/overlap.py
            ip netns exec "${PFX}w0" env DCPS_BUILDDIR="$BUILD" \
                PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "$py" "$root/bench/overlap.py" \
                --netns "$PFX" $OVERLAP_ARGS >"$OUT/overlap_$rate.csv" 2>"$OUT/overlap_$rate.err" ||
                { cat "$OUT/overlap_$rate.err" >&2; die "overlap at $rate failed"; }
            echo "netem.sh: wrote $OUT/overlap_$rate.csv" >&2
        done
    fi
    if [[ " $EXPERIMENTS " == *" shardcap "* ]]; then
        for rate in $RATES; do
            shape "$rate"
            # shellcheck disable=SC2086
            ip netns exec "${PFX}w0" "$BUILD/bench/shardcap" --server "$BUILD/dcps-server" \
                --netns "${PFX}s0" --address "$(addr s0)" $SHARDCAP_ARGS \
                >"$OUT/shardcap_$rate.csv" 2>"$OUT/shardcap_$rate.err" ||
                { cat "$OUT/shardcap_$rate.err" >&2; die "shardcap at $rate failed"; }
            echo "netem.sh: wrote $OUT/shardcap_$rate.csv" >&2
        done
    fi
    teardown
    [ -s "$OUT/.rows" ] || exit 0 # the torch, overlap or shardcap experiments alone: no runs.csv

    # runs.csv: efficiency = thr(P) / (P thr(1)) against the P = 1 run of the same
    # experiment, rate and scheme (empty without one).
    cpu=$(bench_machine)
    {
        echo "# machine: $cpu, kernel $(uname -r), no GPU (all programs on the CPU)"
        echo "# emulated: $SHARDS shards and P workers, each in its own network namespace with a veth" \
            "pair to one bridge; every link tbf-limited both ways (accuracy: $ACC_RATES; scaling:" \
            "$RATES); added delay ${DELAY} ms per node upload; all namespaces share the same" \
            "$(nproc) cores and memory. accuracy: Fashion-MNIST MLP $ACC_LAYERS ($(params "$ACC_LAYERS")" \
            "parameters), $EPOCHS epochs, really trained. scaling: workers emulated by" \
            "--compute-ms $COMPUTE_MS (sleep, then a synthetic gradient), model $SCALE_LAYERS" \
            "($(params "$SCALE_LAYERS") parameters), $STEPS steps per worker with a delta pull, $DENSE_STEPS" \
            "with a dense pull."
        echo "# async DC-ASGD-a lr 0.1 lambda0 2, batch 64; samples_per_s: sum of the workers' final" \
            "samples_per_s (start to final barrier and dense pull); steady: sum of their rates between" \
            "first and last in-loop metrics rows; time_to_085 in seconds of rank 0, epoch granularity;" \
            "cpu_busy: the fraction of all $(nproc) cores busy (whole machine, /proc/stat) during the run;" \
            "drops: packets the links' qdiscs dropped during the run; steal: the fraction of all" \
            "cores' time the hypervisor took (in cpu_busy too); shard_cpu_s, worker_cpu_s: CPU" \
            "seconds (user + system, every thread) the job's shards and workers used over wall_s;" \
            "job_cores: both over wall_s, the cores the job used; cores_avail: job_cores plus the" \
            "cores idle meanwhile, the cores the job could have had (what other work and steal" \
            "left it); load1 at the run's end."
        echo "experiment,rate,delay_ms,workers,scheme,push,pull,density,params,compute_ms,steps,elapsed_s,wall_s,samples_per_s,efficiency,steady_samples_per_s,steady_efficiency,bytes_per_step,time_to_085,test_acc,cpu_busy,drops,steal,shard_cpu_s,worker_cpu_s,job_cores,cores_avail,load1"
        awk -F, -v OFS=, '
            { row[NR] = $0; if ($4 == 1) { one[$1 "," $2 "," $5] = $14; sone[$1 "," $2 "," $5] = $16 } }
            END {
                for (i = 1; i <= NR; i++) {
                    $0 = row[i]; k = $1 "," $2 "," $5
                    if (one[k] > 0) $15 = sprintf("%.3f", $14 / ($4 * one[k]))
                    if ($16 != "" && sone[k] > 0) $17 = sprintf("%.3f", $16 / ($4 * sone[k]))
                    print
                }
            }' "$OUT/.rows"
    } >"$OUT/runs.csv"
    rm -f "$OUT/.rows"
    echo "netem.sh: wrote $OUT/runs.csv" >&2
fi

command -v gnuplot >/dev/null || { echo "netem.sh: no gnuplot, no plots" >&2; exit 0; }
# --- the plots -------------------------------------------------------------------
[ -s "$OUT/runs.csv" ] || die "no $OUT/runs.csv to plot"
plot=$OUT/.plot
mkdir -p "$plot"
# One colour per scheme in every plot.
declare -A colour=([dense]=black [topk01]='#1f77b4' [topk001]='#2ca02c' [topk01_delta]='#ff7f0e'
    [topk001_delta]='#d62728')
rows() { grep -v '^#' "$OUT/runs.csv" | tail -n +2; }
np=$(echo "$P_LIST" | wc -w)
[ "$DELAY" != 0 ] && delay_note=" + ${DELAY} ms per upload" || delay_note=""
for rate in $ACC_RATES; do
    [[ " $EXPERIMENTS " == *" accuracy "* ]] || break
    {
        echo "set datafile separator ','"
        echo "set terminal pngcairo size 1100,$((np > 2 ? 800 : 420)) noenhanced"
        echo "set output '$OUT/accuracy_$rate.png'"
        echo "set multiplot layout $(((np + 1) / 2)),$((np > 1 ? 2 : 1)) title" \
            "'Fashion-MNIST MLP $ACC_LAYERS, async DC-ASGD-a, $SHARDS shards, links at $rate$delay_note: test accuracy (once per epoch) against time'"
        echo "set grid; set key bottom right; set yrange [0.6:0.92]"
        echo "set xlabel 'seconds (rank 0)'; set ylabel 'test accuracy'"
        for p in $P_LIST; do
            plots=""
            for k in $SCHEMES; do
                f=$OUT/accuracy-$rate-$k-p$p.csv
                [ -f "$f" ] && plots+="'$f' using 1:(\$6 > 0 ? \$6 : 1/0) with linespoints linecolor rgb '${colour[$k]}' title '$k', "
            done
            echo "set title 'P = $p'"
            echo "plot ${plots}0.85 with lines dashtype 2 linecolor 'gray' title '0.85'"
        done
        echo "unset multiplot"
    } | gnuplot
done
for rate in $RATES; do
    [[ " $EXPERIMENTS " == *" scaling "* ]] || break
    plots=""
    for k in $SCHEMES; do
        rows | awk -F, -v r="$rate" -v k="$k" '$1 == "scaling" && $2 == r && $5 == k && $15 != "" {
            print $4, $15, ($17 == "" ? "?" : $17) }' >"$plot/scaling-$rate-$k"
        [ -s "$plot/scaling-$rate-$k" ] || continue
        plots+="'$plot/scaling-$rate-$k' using 1:2 with linespoints linecolor rgb '${colour[$k]}' pointtype 7 title '$k', "
        plots+="'' using 1:3 with linespoints linecolor rgb '${colour[$k]}' dashtype 2 pointtype 6 title '$k (steady)', "
    done
    [ -n "$plots" ] || continue
    gnuplot <<EOF
set terminal pngcairo size 1000,520 noenhanced
set output '$OUT/scaling_$rate.png'
set title "emulated workers (--compute-ms $COMPUTE_MS, $(params "$SCALE_LAYERS") parameters), $SHARDS shards, links at $rate$delay_note\\nscaling efficiency; solid: whole run, dashed: steady state; all namespaces share $(nproc) cores"
set xlabel 'workers P'
set ylabel 'throughput(P) / (P throughput(1))'
set logscale x 2
set xtics (${P_LIST// /, })
set xrange [0.8:$((maxp * 5 / 4 + 1))]
set yrange [0:1.2<*]
set grid
set key outside right
plot ${plots}1 with lines linecolor 'gray30' dashtype 3 linewidth 1.5 title 'ideal', 0.8 with lines linecolor 'gray50' dashtype 2 title '0.8'
EOF
done
# Bytes per step of rank 0 at the largest P and the first rate, per scheme.
cols=() titles=()
for x in accuracy scaling; do
    [[ " $EXPERIMENTS " == *" $x "* ]] || continue
    r=$ACC_RATES layers=$ACC_LAYERS
    [ $x = scaling ] && r=$RATES layers=$SCALE_LAYERS
    cols+=("$x,${r%% *}")
    titles+=("$x ($(params "$layers") parameters)")
done
for k in $SCHEMES; do
    line=$k
    for c in "${cols[@]}"; do
        b=$(rows | awk -F, -v c="$c" -v k="$k" -v p="$maxp" '$1 "," $2 == c && $5 == k && $4 == p { print $18 }')
        line+=" ${b:-?}"
    done
    echo "$line"
done >"$plot/bytes"
plots=""
for i in "${!titles[@]}"; do
    plots+="'$plot/bytes' using $((i + 2)):xtic(1) title '${titles[$i]}', "
done
gnuplot <<EOF
set terminal pngcairo size 900,480 noenhanced
set output '$OUT/bytes_per_step.png'
set title "bytes pushed and pulled per step by rank 0 (P = $maxp), headers included"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [1000:*]
set ylabel 'bytes per step (log scale)'
set grid ytics
set key top right
plot ${plots%, }
EOF
rm -rf "$plot"
echo "netem.sh: plots in $OUT" >&2
