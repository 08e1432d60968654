#!/bin/bash
# bench/soak.sh — the soak test: many emulated workers against two shards for minutes.
#
# For each configuration of -x it starts SHARDS (2) shards and WORKERS (64) emulated
# workers (dcps-worker --compute-ms COMPUTE_MS: each step sleeps COMPUTE_MS ms and
# pushes a seeded synthetic gradient of the model's size; no data file is read) and
# lets them run to their end. Each worker gets STEPS = DURATION * 1000 / STEP_MS steps
# in 10 epochs (STEP_MS defaults to COMPUTE_MS, so a run lasts at least DURATION; give
# the measured time of a step to make it last about DURATION). Configurations:
#   async-dense  mode async, DC-ASGD-a (lr 0.05, lambda0 2), dense push and pull
#   async-topk   the same with top-k pushes (density 0.01, error feedback) and delta
#                pulls (density 0.01)
#   sync-dense   mode sync, SGD with momentum 0.9 (lr 0.05), dense push and pull
#   sync-topk    the same with top-k pushes and delta pulls
# Every INTERVAL (10) s it writes a row to OUT/CONFIG.csv: the time since the
# workers started, the fraction of the machine's CPU busy since the last row
# (/proc/stat), the workers still running and their RSS together, and per shard S:
# sS_rss_kb, sS_hwm_kb and sS_anon_kb (VmRSS, VmHWM, RssAnon from /proc), sS_mem_bytes (the bytes the
# shard says it holds, the sum of dcps_memory_bytes), sS_pushes, sS_pulls,
# sS_version, sS_errors (dcps_errors_total, every code), sS_dropped, sS_live
# (dcps_live_workers), sS_heap_kb and sS_heap_free_kb (dcps_heap_bytes: malloc's
# bytes in use and kept free) from its metrics endpoint, and sS_cpu_s (its CPU seconds).
# A last row is taken after every worker has exited, before the shards are stopped.
#
# At the end of each configuration OUT/summary.txt gets its numbers and a PASS or
# FAIL per target:
#   rss      every shard's RSS stays flat within GROWTH (5) % after the first WARMUP (60) s:
#            the trend of the samples from WARMUP s while every worker runs moves
#            by at most GROWTH % of where it starts, from the first of those
#            samples to the last. The trend is the Theil-Sen line: its slope is the
#            median of the slopes between every two samples, its intercept the
#            median of what each sample leaves. One sample can be up to a push and
#            a pull reply per worker above another (dense: 2 x 4N / SHARDS bytes
#            each), as many as are queued at that moment, and the shard gives free
#            pages back every 5 s (malloc_trim), so a single sample or the lowest
#            of a minute says little, and a least-squares line is tilted by where
#            in the run such spikes happen to fall; the Theil-Sen line is not moved
#            by spikes in up to 29% of the samples, and a leak or fragmentation,
#            which raises all of them, tilts it as much as it tilts the data. Also
#            given: the least-squares line, the lowest sample and the median of
#            the first and the last minute, the highest sample, and the same trends
#            of malloc's bytes in use (dcps_heap_bytes), which a leak raises and
#            the allocator does not.
#   errors   no error: dcps_errors_total 0 on every shard, no "warning:" or "err:"
#            line in a shard's log, no "err:" line in a worker's log and no
#            warning there other than a resend, no worker declared dead, no sync push
#            dropped, every shard stopped with status 0.
#   workers  every worker exited 0 and printed its final: line, within HANG_S
#            (3 DURATION + 300 s; after that the rest are killed: a hang).
# Retries are reported, not a target: the client logs each resend of a request
# ("asking again") and the final: line counts them (retries=).
# OUT/summary.csv has a row per configuration with these numbers.
# Also under OUT: CONFIG.shardS.log (the shards' logs), CONFIG.workers.txt (rank,
# exit status and final: line of every worker), CONFIG.worker-warnings.log (each
# warning or error line of the workers' logs, after its rank), job.ini.
#
# usage: bench/soak.sh [-w WORKERS] [-n SHARDS] [-t DURATION] [-c COMPUTE_MS]
#            [-s STEP_MS] [-i INTERVAL] [-W WARMUP] [-G GROWTH] [-l LAYERS] [-p PARAMS]
#            [-x "async-dense async-topk sync-dense sync-topk"] [-P PORT] [-o OUT] [-R]
#   defaults: 64 workers, 2 shards, 600 s, compute 100 ms, STEP_MS = COMPUTE_MS,
#      INTERVAL 10 s, WARMUP 60 s, GROWTH 5 (%: the rss target), the MLP 784,256,128,10 (235,146 parameters; -p N
#      gives the shards and workers a model of N parameters instead), all four
#      configurations, metrics on ports from PORT (19100) up that nothing listens on,
#      OUT bench/results/$(date +%F)/soak.
#   -R: runs nothing; evaluates the recorded run in OUT again (its CSVs, logs and
#      workers.txt; give the options of the run that made them) and writes
#      summary.txt (keeping its first lines: command, commit, machine, job) and
#      summary.csv anew, with this script's targets; the summary.txt the run wrote
#      is kept as summary-at-run.txt.
# Exit status: 0 if every target of every configuration passed, 1 otherwise, 2 for a
# bad option. Programs from $BUILD (default build/).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
WORKERS=64 SHARDS=2 DURATION=600 COMPUTE_MS=100 STEP_MS='' INTERVAL=10 WARMUP=60 GROWTH=5
LAYERS=784,256,128,10 PARAMS=layers PORT=19100 EPOCHS=10 AGAIN=0
CONFIGS="async-dense async-topk sync-dense sync-topk"
OUT=$root/bench/results/$(date +%F)/soak
cmdline="bench/soak.sh $*"
usage() { sed -n '/^# usage:/,/^# bad option/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts w:n:t:c:s:i:W:G:l:p:x:P:o:R opt; do
    case $opt in
    w) WORKERS=$OPTARG ;;
    n) SHARDS=$OPTARG ;;
    t) DURATION=$OPTARG ;;
    c) COMPUTE_MS=$OPTARG ;;
    s) STEP_MS=$OPTARG ;;
    i) INTERVAL=$OPTARG ;;
    W) WARMUP=$OPTARG ;;
    G) GROWTH=$OPTARG ;;
    l) LAYERS=$OPTARG ;;
    p) PARAMS=$OPTARG ;;
    x) CONFIGS=$OPTARG ;;
    P) PORT=$OPTARG ;;
    o) OUT=$OPTARG ;;
    R) AGAIN=1 ;;
    *) usage ;;
    esac
done
[ $OPTIND -gt $# ] || usage
die() { echo "soak.sh: $*" >&2; exit 2; }
for v in WORKERS SHARDS DURATION COMPUTE_MS INTERVAL WARMUP GROWTH PORT ${STEP_MS:+STEP_MS}; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v: a whole number, not \"${!v}\""
done
[ "$WORKERS" -ge 1 ] && [ "$SHARDS" -ge 1 ] && [ "$COMPUTE_MS" -ge 1 ] && [ "$INTERVAL" -ge 1 ] ||
    die "WORKERS, SHARDS, COMPUTE_MS and INTERVAL must be at least 1"
STEP_MS=${STEP_MS:-$COMPUTE_MS}
[ "$STEP_MS" -ge 1 ] || die "STEP_MS must be at least 1"
declare -A config=(
    [async-dense]="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2 compression.push=dense compression.pull=dense"
    [async-topk]="job.mode=async optimizer.kind=dcasgd optimizer.dc_adaptive=true optimizer.dc_lambda=2 compression.push=topk compression.density=0.01 compression.pull=delta"
    [sync-dense]="job.mode=sync optimizer.kind=sgd compression.push=dense compression.pull=dense"
    [sync-topk]="job.mode=sync optimizer.kind=sgd compression.push=topk compression.density=0.01 compression.pull=delta"
)
for x in $CONFIGS; do [ -n "${config[$x]:-}" ] || die "-x: no configuration $x (${!config[*]})"; done
[ $AGAIN = 1 ] || for p in dcps-server dcps-worker; do
    [ -x "$BUILD/$p" ] || die "no $BUILD/$p (build first, or set BUILD)"
done
. "$root/bench/lib.sh"

STEPS=$(((DURATION * 1000 + STEP_MS - 1) / STEP_MS))
PER=$(((STEPS + EPOCHS - 1) / EPOCHS)) # steps per epoch; STEPS is rounded up to EPOCHS * PER
STEPS=$((PER * EPOCHS))
BATCH=64
HANG_S=$((3 * DURATION + 300))
n_params() { echo "$LAYERS" | awk -F, '{ n = 0; for (i = 2; i <= NF; i++) n += $(i - 1) * $i + $i; print n }'; }
N=$PARAMS
[ "$PARAMS" = layers ] && N=$(n_params)

mkdir -p "$OUT" || die "cannot create $OUT"
RUN=$(mktemp -d "${TMPDIR:-/tmp}/dcps-soak.XXXXXX")
SERVERS=() WPIDS=()
# Whatever way the script ends, it stops what it started, by pid, and removes RUN.
stop_all() {
    local p
    for p in "${WPIDS[@]}" "${SERVERS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${WPIDS[@]}" "${SERVERS[@]}"; do wait "$p" 2>/dev/null; done
    WPIDS=() SERVERS=()
}
trap 'stop_all; rm -rf "$RUN"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The job: emulated workers need no [data] file, only the number of examples
# (train_limit) that, with the batch size and the epochs, gives each its STEPS.
list=$(printf 'tcp://127.0.0.1:*%.0s, ' $(seq "$SHARDS"))
[ $AGAIN = 1 ] || cat >"$OUT/job.ini" <<EOF
; written by bench/soak.sh
[job]
name = soak
workers = $WORKERS
[servers]
shards = ${list%, }
[model]
layers = $LAYERS
params = $PARAMS
[data]
batch_size = $BATCH
epochs = $EPOCHS
train_limit = $((PER * BATCH * WORKERS))
[optimizer]
lr = 0.05
[worker]
compute_ms = $COMPUTE_MS
log_every = $PER
device = cpu
EOF

machine=$(bench_machine)
grep -qw hypervisor /proc/cpuinfo && machine="$machine (virtual: the CPUs have the hypervisor flag)"
machine="$machine, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    machine="$machine, GPU: $(nvidia-smi -L | head -1)"
else
    machine="$machine, no GPU"
fi
[ $AGAIN = 1 ] || {
    echo "# dcps soak test, $(date -u '+%F %T UTC')"
    echo "command: $cmdline"
    echo "commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "machine: $machine; $(uname -sr); run at niceness $(nice)"
    echo "job: $SHARDS shards, $WORKERS emulated workers (compute_ms $COMPUTE_MS), model $LAYERS" \
        "($N parameters), batch $BATCH, $STEPS steps a worker ($EPOCHS epochs of $PER)," \
        "meant to last about $DURATION s (STEP_MS $STEP_MS); samples every $INTERVAL s," \
        "RSS growth measured after the first $WARMUP s; a run longer than $HANG_S s is a hang"
    echo
} >"$OUT/summary.txt"

if [ $AGAIN = 1 ]; then
    [ -s "$OUT/summary.txt" ] || die "-R: no $OUT/summary.txt"
    # What the run itself said stays, once, in summary-at-run.txt.
    [ -e "$OUT/summary-at-run.txt" ] || cp "$OUT/summary.txt" "$OUT/summary-at-run.txt"
    { sed '/^$/q' "$OUT/summary.txt" | sed '$d' | grep -v '^evaluated again: '
      echo "evaluated again: bench/soak.sh $* at commit $(git -C "$root" describe --always --dirty 2>/dev/null ||
          echo unknown), $(date -u '+%F %T UTC'), from the recorded CSVs, logs and workers.txt"
      echo; } >"$OUT/summary.txt.new"
    mv "$OUT/summary.txt.new" "$OUT/summary.txt"
    rm -f "$OUT/summary.csv"
fi
# The first port from $1 up that nothing on this host listens on, and not in $2.
free_port() {
    local p=$1
    while ss -Htln "sport = :$p" | grep -q . || [[ " $2 " == *" $p "* ]]; do p=$((p + 1)); done
    echo "$p"
}

# Busy and total CPU time of the machine so far, in ticks (/proc/stat).
cpu_now() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat; }

# Milliseconds since the epoch, without a process.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# RUNNING: the pids of the workers still running, from the shell's own job table
# (a pid that /proc shows could be another process's by now: pids wrap at 32768
# here). Not in a subshell, which has a job table of its own.
running_workers() {
    local p j
    declare -A w=()
    for p in "${WPIDS[@]}"; do w[$p]=1; done
    RUNNING=()
    j=$(jobs -rp)
    for p in $j; do [ -n "${w[$p]:-}" ] && RUNNING+=("$p"); done
}

# One CSV row: elapsed seconds, CPU busy, workers running and their RSS, then per
# shard its /proc numbers and metrics.
sample() {
    local elapsed=$1 row p alive=0 wrss=0 wcpu=0 r cpu s hz
    hz=$(getconf CLK_TCK)
    read -r busy total < <(cpu_now)
    cpu=$(awk -v b="$busy" -v t="$total" -v pb="$prev_busy" -v pt="$prev_total" \
        'BEGIN { printf "%.3f", (t > pt) ? (b - pb) / (t - pt) : 0 }')
    prev_busy=$busy prev_total=$total
    running_workers
    if [ ${#RUNNING[@]} -gt 0 ]; then
        # One awk for all of them; a worker that ends meanwhile is left out.
        read -r alive wrss < <(cd /proc && awk '/^VmRSS/ { n++; r += $2 } END { print n + 0, r + 0 }' \
            "${RUNNING[@]/%//status}" 2>/dev/null)
        wcpu=$(cd /proc && awk '{ sub(/.*\) /, ""); t += $12 + $13 } END { print t + 0 }' \
            "${RUNNING[@]/%//stat}" 2>/dev/null)
    fi
    row="$elapsed,$cpu,$alive,$wrss,$(awk -v t="$wcpu" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')"
    for s in "${!SERVERS[@]}"; do
        p=${SERVERS[$s]}
        local st m
        st=$(awk '/^VmRSS/ { r = $2 } /^VmHWM/ { h = $2 } /^RssAnon/ { a = $2 } END { print r "," h "," a }' \
            "/proc/$p/status" 2>/dev/null)
        [ -n "$st" ] || st=,,
        m=$(curl -s -m 2 "http://127.0.0.1:${MPORTS[$s]}/metrics" 2>/dev/null | awk '
            /^dcps_memory_bytes/ { mem += $NF }
            /^dcps_pushes_total/ { pu = $NF }
            /^dcps_pulls_total/ { pl = $NF }
            /^dcps_version/ { v = $NF }
            /^dcps_errors_total/ { e += $NF }
            /^dcps_dropped_pushes_total/ { d = $NF }
            /^dcps_live_workers/ { l = $NF }
            /^dcps_heap_bytes.*kind="in_use"/ { hu = $NF }
            /^dcps_heap_bytes.*kind="free"/ { hf = $NF }
            END { if (pu == "") print ",,,,,,,,"
                  else printf "%d,%d,%d,%d,%d,%d,%d,%d,%d\n", mem, pu, pl, v, e, d, l, hu / 1024, hf / 1024 }')
        r=$(awk -v hz="$hz" '{ sub(/.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$p/stat" 2>/dev/null)
        row="$row,$st,$m,$r"
    done
    echo "$row" >>"$csv"
}

# run_config NAME: one configuration, start to summary.
run_config() {
    local name=$1 s r ep list sets=() p failed_start=0
    csv=$OUT/$name.csv
    local dir=$RUN/$name
    mkdir -p "$dir"
    for kv in ${config[$name]}; do sets+=(--set "$kv"); done
    {
        echo "# $name: ${config[$name]}; $WORKERS workers, $SHARDS shards, $STEPS steps each, compute_ms $COMPUTE_MS, $N parameters"
        printf 'elapsed_s,cpu_busy,workers_running,workers_rss_kb,workers_cpu_s'
        for s in $(seq 0 $((SHARDS - 1))); do
            printf ',s%d_rss_kb,s%d_hwm_kb,s%d_anon_kb,s%d_mem_bytes,s%d_pushes,s%d_pulls,s%d_version,s%d_errors,s%d_dropped,s%d_live,s%d_heap_kb,s%d_heap_free_kb,s%d_cpu_s' \
                "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s" "$s"
        done
        echo
    } >"$csv"

    MPORTS=()
    local eps=()
    for s in $(seq 0 $((SHARDS - 1))); do
        MPORTS[$s]=$(free_port "$PORT" "${MPORTS[*]}")
        ep=$dir/shard$s.endpoint
        # A sync job's other shards connect to shard 0, which chose its port.
        "$BUILD/dcps-server" --config "$OUT/job.ini" --shard "$s" "${sets[@]}" \
            --set server.metrics_port="${MPORTS[$s]}" --endpoint-file "$ep" \
            ${eps[0]:+--leader "${eps[0]}"} 2>"$dir/shard$s.log" &
        SERVERS[$s]=$!
        for _ in $(seq 100); do [ -s "$ep" ] && break; sleep 0.1; done
        if [ ! -s "$ep" ]; then
            echo "soak.sh: shard $s of $name did not start:" >&2
            cat "$dir/shard$s.log" >&2
            failed_start=1
            break
        fi
        eps+=("$(cat "$ep")")
    done
    list=$(IFS=,; echo "${eps[*]}")
    sets+=(--set "servers.shards=$list")

    local t0 elapsed next=0 hang=0 running
    read -r prev_busy prev_total < <(cpu_now)
    t0=$(now_ms)
    if [ $failed_start = 0 ]; then
        for r in $(seq 0 $((WORKERS - 1))); do
            OPENBLAS_NUM_THREADS=1 "$BUILD/dcps-worker" --config "$OUT/job.ini" --rank "$r" "${sets[@]}" \
                >"$dir/w$r.out" 2>"$dir/w$r.log" &
            WPIDS[$r]=$!
        done
        echo "soak.sh: $name: $WORKERS workers and $SHARDS shards started" >&2
    fi
    # Sample every INTERVAL seconds until every worker has exited.
    while :; do
        elapsed=$(($(now_ms) - t0))
        running_workers
        running=${#RUNNING[@]}
        [ "$running" = 0 ] && break
        if [ $elapsed -ge $((next * 1000)) ]; then
            sample "$((elapsed / 1000)).$((elapsed / 100 % 10))"
            next=$((next + INTERVAL))
        fi
        if [ $elapsed -gt $((HANG_S * 1000)) ]; then
            hang=$running
            echo "soak.sh: $name: $running workers still running after $HANG_S s: a hang; killing them" >&2
            for p in "${WPIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 1
    done
    local wall=$(($(now_ms) - t0))
    wall=$((wall / 1000)).$((wall / 100 % 10))
    sample "$wall"

    # Exit statuses and final lines; then the shards stop.
    local ok=0 finals=0 st
    : >"$OUT/$name.workers.txt"
    for r in "${!WPIDS[@]}"; do
        wait "${WPIDS[$r]}"
        st=$?
        [ $st = 0 ] && ok=$((ok + 1))
        local f
        f=$(grep '^final: ' "$dir/w$r.out" | tail -1)
        [ -n "$f" ] && finals=$((finals + 1))
        echo "$r,$st,$f" >>"$OUT/$name.workers.txt"
    done
    WPIDS=()
    local shard_bad=0
    for s in "${!SERVERS[@]}"; do
        kill -TERM "${SERVERS[$s]}" 2>/dev/null
        wait "${SERVERS[$s]}" || shard_bad=$((shard_bad + 1))
        cp "$dir/shard$s.log" "$OUT/$name.shard$s.log"
    done
    SERVERS=()
    [ $failed_start = 1 ] && shard_bad=$((shard_bad + 1))
    for r in $(seq 0 $((WORKERS - 1))); do
        grep -E ' (warning|err): ' "$dir/w$r.log" 2>/dev/null | sed "s/^/$r: /"
    done >"$OUT/$name.worker-warnings.log"

    echo "$wall $ok $finals $hang $shard_bad" >"$OUT/$name.run"
    summarize "$name"
}

# again NAME: summarize NAME's recorded run. Its .run file has the wall time, the
# workers that exited 0 and printed a final: line, the hung ones and the shards
# that did not stop with 0; without one (a run of an earlier version of this
# script) they are taken from the CSV's last row, workers.txt and the shards'
# logs ("stopped:" lines), and no worker counts as hung (one that was would have
# no final: line anyway).
again() {
    local name=$1 wall ok finals bad=0 s
    [ -s "$OUT/$name.csv" ] || { echo "soak.sh: -R: no $OUT/$name.csv; $name left out" >&2; return; }
    if [ ! -s "$OUT/$name.run" ]; then
        wall=$(tail -1 "$OUT/$name.csv" | cut -d, -f1)
        ok=$(awk -F, '$2 == 0' "$OUT/$name.workers.txt" | wc -l)
        finals=$(grep -c ',final: ' "$OUT/$name.workers.txt")
        for s in $(seq 0 $((SHARDS - 1))); do
            grep -q ' stopped: version ' "$OUT/$name.shard$s.log" 2>/dev/null || bad=$((bad + 1))
        done
        echo "$wall $ok $finals 0 $bad" >"$OUT/$name.run"
    fi
    summarize "$name"
}

# summarize NAME: the configuration's block in summary.txt (and on stdout) and its
# row in summary.csv, from its CSV, logs, workers.txt and .run file (wall time,
# workers that exited 0 and that printed their final: line, hung workers, shards
# that did not stop with 0); sets FAILED when a target failed.
summarize() {
    local name=$1 wall ok finals hang shard_bad
    read -r wall ok finals hang shard_bad <"$OUT/$name.run"
    local resend worker_err worker_warn shard_lines dead retries dropped_final stats cpu
    resend=$(grep -c 'asking again' "$OUT/$name.worker-warnings.log")
    worker_err=$(grep -c ' err: ' "$OUT/$name.worker-warnings.log")
    worker_warn=$(grep ' warning: ' "$OUT/$name.worker-warnings.log" | grep -vc 'asking again')
    shard_lines=$(cat "$OUT/$name".shard*.log | grep -cE ' (warning|err): ')
    dead=$(cat "$OUT/$name".shard*.log | grep -c 'declared dead')
    sum_key() { awk -v k=" $1=" '{ i = index($0, k); if (i) n += substr($0, i + length(k)) + 0 } END { print n + 0 }' "$OUT/$name.workers.txt"; }
    retries=$(sum_key retries)
    dropped_final=$(sum_key dropped)
    # Per shard from the CSV, over the rows where every worker ran: its RSS at the
    # start, the median of the samples of the minute from WARMUP s, and at the end,
    # the median of the samples of the run's last minute (a median, so that the
    # messages in flight at one sample do not count as growth); the highest
    # sample from WARMUP s on; bytes held, errors and dropped pushes at the last
    # scrape. Then CPU: the machine's busy fraction on average, and this job's
    # share of the cores (workers' and shards' CPU seconds at the last row where
    # every worker ran).
    stats=$(awk -F, -v w="$WARMUP" -v shards="$SHARDS" -v workers="$WORKERS" -v n="$(nproc)" '
        # The median and the lowest of rss[s, i] over the rows i with win[i].
        function window(a, s,    i, m, med) {
            m = 0
            split("", v)
            for (i = 1; i <= rows; i++)
                if (win[i] && a[s, i] != "") v[++m] = a[s, i] + 0
            if (!m) { lo = "-"; return "-" }
            med = median_of(v, m)
            lo = v[1]
            return med
        }
        function pct(a, b) { return a == "-" || b == "-" ? "-" : sprintf("%.2f", 100 * (b - a) / a) }
        # Sorts v[1..m] in place: heapsort (no recursion, which mawk limits).
        function sift(v, i, m,    c, x) {
            while ((c = 2 * i) <= m) {
                if (c < m && v[c + 1] > v[c]) c++
                if (v[i] >= v[c]) return
                x = v[i]; v[i] = v[c]; v[c] = x; i = c
            }
        }
        function hsort(v, m,    i, x) {
            for (i = int(m / 2); i >= 1; i--) sift(v, i, m)
            for (i = m; i > 1; i--) { x = v[1]; v[1] = v[i]; v[i] = x; sift(v, 1, i - 1) }
        }
        function median_of(v, m) { hsort(v, m); return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
        # The Theil-Sen line through a[s, i] over the rows of win: sets tlo and thi
        # to its values at the first and last of them; "-" with fewer than 2.
        function theilsen(a, s,    i, j, m, p, b, t0, t1, x, y, d, r) {
            m = 0
            split("", x); split("", y)
            for (i = 1; i <= rows; i++)
                if (win[i] && a[s, i] != "") { m++; x[m] = el[i] + 0; y[m] = a[s, i] + 0 }
            if (m < 2) { tlo = thi = "-"; return }
            p = 0
            split("", d)
            for (i = 1; i < m; i++)
                for (j = i + 1; j <= m; j++)
                    if (x[j] != x[i]) d[++p] = (y[j] - y[i]) / (x[j] - x[i])
            if (!p) { tlo = thi = "-"; return }
            b = median_of(d, p)
            split("", r)
            for (i = 1; i <= m; i++) r[i] = y[i] - b * x[i]
            t0 = x[1]; t1 = x[m]; i = median_of(r, m)
            tlo = sprintf("%.0f", i + b * t0); thi = sprintf("%.0f", i + b * t1)
        }
        # The least-squares line through a[s, i] over the rows of win: sets tlo and thi
        # to its values at the first and last of them; "-" with fewer than 2.
        function trend(a, s,    i, m, st, sy, stt, sty, t0, t1, b) {
            m = st = sy = stt = sty = 0
            for (i = 1; i <= rows; i++)
                if (win[i] && a[s, i] != "") {
                    if (!m) t0 = el[i]
                    t1 = el[i]; m++; st += el[i]; sy += a[s, i]; stt += el[i] * el[i]; sty += el[i] * a[s, i]
                }
            if (m < 2 || stt * m == st * st) { tlo = thi = "-"; return }
            b = (m * sty - st * sy) / (m * stt - st * st)
            tlo = sprintf("%.0f", sy / m + b * (t0 - st / m)); thi = sprintf("%.0f", sy / m + b * (t1 - st / m))
        }
        /^#/ { next }
        /^elapsed/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
        {
            rows++; busy += $2
            el[rows] = $1; all[rows] = $3 == workers
            if (all[rows]) {
                t = $1; jc = $5; for (s = 0; s < shards; s++) jc += $col["s" s "_cpu_s"]
                if ($4 > wr) wr = $4
            }
            for (s = 0; s < shards; s++) {
                rss[s, rows] = $col["s" s "_rss_kb"]
                if ("s" s "_heap_kb" in col) heap[s, rows] = $col["s" s "_heap_kb"]
                if ($col["s" s "_pushes"] != "") {
                    mem[s] = $col["s" s "_mem_bytes"]; err[s] = $col["s" s "_errors"]
                    drop[s] = $col["s" s "_dropped"]
                }
            }
        }
        END {
            for (s = 0; s < shards; s++) {
                for (i = 1; i <= rows; i++) win[i] = all[i] && el[i] >= w && el[i] < w + 60
                a = window(rss, s); alo = lo; window(heap, s); hlo = lo
                for (i = 1; i <= rows; i++) win[i] = all[i] && el[i] >= w && el[i] > t - 60
                b = window(rss, s); blo = lo; window(heap, s); hblo = lo
                for (i = 1; i <= rows; i++) win[i] = all[i] && el[i] >= w
                theilsen(heap, s); hta = tlo; htb = thi
                trend(rss, s); lsa = tlo; lsb = thi
                theilsen(rss, s)
                mx = 0
                for (i = 1; i <= rows; i++) if (all[i] && el[i] >= w && rss[s, i] > mx) mx = rss[s, i]
                printf "%d %s %s %s %s %s %s %s %s %d %d %d %s %s %s %s %s %s %s %s %s %s\n", s, a, b, pct(a, b), mx, pct(a, mx),
                    alo, blo, pct(alo, blo), err[s], drop[s], mem[s], hlo, hblo, pct(hlo, hblo),
                    tlo, thi, pct(tlo, thi), hta, htb, pct(hta, htb), pct(lsa, lsb)
            }
            printf "cpu %.0f %.0f %d %d %d\n", rows ? 100 * busy / rows : 0, (t > 0) ? 100 * jc / (t * n) : 0, n,
                wr, wr / workers
        }' "$OUT/$name.csv")
    cpu=$(grep '^cpu ' <<<"$stats")

    local rss_ok=PASS err_ok=PASS work_ok=PASS metrics_err=0 dropped=0 report row
    local s r0 r1 g mx peak f0 f1 fg e d mem h0 h1 hg t0 t1 tg u0 u1 ug lg
    report="== $name: ${config[$name]}
wall $wall s (workers started to all exited), $STEPS steps a worker; CPU: this job $(cut -d' ' -f3 <<<"$cpu")% of $(cut -d' ' -f4 <<<"$cpu") cores while every worker ran (workers and shards), the machine $(cut -d' ' -f2 <<<"$cpu")% busy on average (all its users); the workers' RSS together at most $(cut -d' ' -f5 <<<"$cpu") kB ($(cut -d' ' -f6 <<<"$cpu") kB a worker)"
    row="$name,$wall,$STEPS,$(cut -d' ' -f3 <<<"$cpu")"
    while read -r s r0 r1 g mx peak f0 f1 fg e d mem h0 h1 hg t0 t1 tg u0 u1 ug lg; do
        [ "$s" = cpu ] && continue
        report="$report
shard $s: RSS by its trend (Theil-Sen) from $WARMUP s $t0 kB to $t1 kB: growth $tg% (least-squares line: $lg%); lowest sample of the first minute from $WARMUP s and of the last minute $f0 and $f1 kB ($fg%), medians $r0 and $r1 kB ($g%); highest sample from $WARMUP s on $mx kB ($peak% over the first median); holds $mem bytes by its metrics; malloc's bytes in use (dcps_heap_bytes) by its trend $u0 kB to $u1 kB ($ug%), lowest of the same minutes $h0 and $h1 kB ($hg%); errors_total $e, dropped pushes $d"
        if [ "$tg" = - ] || awk -v g="$tg" -v m="$GROWTH" 'BEGIN { exit !(g > m || g < -m) }'; then rss_ok=FAIL; fi
        metrics_err=$((metrics_err + e)) dropped=$((dropped + d))
        row="$row,$t0,$t1,$tg,$lg,$f0,$f1,$fg,$r0,$r1,$g,$mx,$peak,$u0,$u1,$ug"
    done <<<"$stats"
    [ "$(grep -vc '^cpu ' <<<"$stats")" = "$SHARDS" ] || rss_ok=FAIL
    [ $((metrics_err + shard_lines + worker_err + worker_warn + dead + dropped + dropped_final + shard_bad)) = 0 ] ||
        err_ok=FAIL
    [ "$ok" = "$WORKERS" ] && [ "$finals" = "$WORKERS" ] && [ "$hang" = 0 ] || work_ok=FAIL
    report="$report
errors: metrics $metrics_err; shard log warning/err lines $shard_lines; worker err lines $worker_err, other worker warnings $worker_warn; workers declared dead $dead; dropped pushes $dropped (workers' final lines: $dropped_final); shards not stopping with status 0: $shard_bad
retries: $resend resend lines in the workers' logs, retries= in their final lines: $retries
workers: $ok of $WORKERS exited 0, $finals printed their final: line"
    [ "$hang" = 0 ] || report="$report; $hang were still running after $HANG_S s and were killed (a hang)"
    report="$report
targets: rss $rss_ok, errors $err_ok, workers $work_ok
"
    echo "$report" | tee -a "$OUT/summary.txt"
    if [ ! -s "$OUT/summary.csv" ]; then
        local head="config,wall_s,steps,job_cpu_pct"
        for s in $(seq 0 $((SHARDS - 1))); do
            head="$head,s${s}_rss_kb_start,s${s}_rss_kb_end,s${s}_growth_pct,s${s}_least_squares_growth_pct"
            head="$head,s${s}_rss_kb_lowest_start,s${s}_rss_kb_lowest_end,s${s}_lowest_growth_pct"
            head="$head,s${s}_rss_kb_median_start,s${s}_rss_kb_median_end,s${s}_median_growth_pct,s${s}_rss_kb_max,s${s}_peak_pct"
            head="$head,s${s}_heap_kb_start,s${s}_heap_kb_end,s${s}_heap_growth_pct"
        done
        echo "$head,errors,resend_lines,retries,workers_exit0,workers_final,rss,errors_target,workers_target" >"$OUT/summary.csv"
    fi
    echo "$row,$((metrics_err + shard_lines + worker_err + worker_warn + dead + dropped + dropped_final + shard_bad)),$resend,$retries,$ok,$finals,$rss_ok,$err_ok,$work_ok" >>"$OUT/summary.csv"
    [ $rss_ok$err_ok$work_ok = PASSPASSPASS ] || FAILED=1
}

FAILED=0
for name in $CONFIGS; do
    if [ $AGAIN = 1 ]; then again "$name"; else run_config "$name"; fi
done
echo "soak.sh: results in $OUT" >&2
exit $FAILED
