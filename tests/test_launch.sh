#!/usr/bin/env bash
# The launchers run a real job end to end on this host, and leave nothing behind:
# - deploy/launch-local.sh: 2 shards and 2 workers train a short job; both final:
#   lines appear, it exits 0, no shard is left; with a bad -s value it exits 1; after
#   SIGINT (Ctrl-C) in the middle of training it exits 130 and every process it
#   started is gone.
# - deploy/slurm/dcps.sbatch, under stand-ins for scontrol and srun that run the
#   tasks on this host (two "nodes" named localhost): both workers finish, the shards
#   stop.
# - both with "-- CMD": each worker runs CMD (through dcps-worker -- CMD) with the
#   job, its rank and the overrides in DCPS_JOB, DCPS_RANK, DCPS_WORKERS, DCPS_SET.
# Exit 77 (skip) without the Fashion-MNIST files.
set -uo pipefail

: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:=$DCPS_BUILDDIR}"
job=$DCPS_SRCDIR/deploy/jobs/local.ini
data=$(awk -F' *= *' '$1 == "train_images" { print $2 }' "$job")
[ -r "$data" ] || { echo "SKIP: no $data (Debian package dataset-fashion-mnist)"; exit 77; }

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
# Processes whose command line names $tmp (the shards' endpoint files and logs do,
# and the stand-ins' paths): ours, since mktemp made the name unique.
leftovers() { pgrep -af -- "$tmp/" || true; }
# Should a launcher fail to stop something, the test still leaves nothing running:
# it ends those processes, by pid, before it goes.
cleanup() {
    local p
    for p in $(pgrep -f -- "$tmp/"); do kill -KILL "$p" 2>/dev/null; done
}
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }

# A tiny job: one epoch over 2,000 examples.
small=(-s data.epochs=1 -s data.train_limit=2000 -s worker.log_every=10)
launch=$DCPS_SRCDIR/deploy/launch-local.sh

# A metrics port for the job: each shard gets its own, port + shard.
# Shard s serves its metrics at P + s: a P whose P + 1 is free too (a free P alone
# met a P + 1 another test held, once, in a parallel distcheck).
port=$(python3 -c '
import socket
while True:
    a, b = socket.socket(), socket.socket()
    a.bind(("127.0.0.1", 0))
    try:
        b.bind(("127.0.0.1", a.getsockname()[1] + 1))
    except OSError:
        continue
    print(a.getsockname()[1])
    break')
rc=0
bash "$launch" "$job" -w 2 -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q "${small[@]}" \
    -s "server.metrics_port=$port" >"$tmp/out" 2>&1 || rc=$?
finals=$(grep -c '^final: ' "$tmp/out")
if [ $rc -eq 0 ] && [ "$finals" -eq 2 ] && grep -q '^final: rank=0 ' "$tmp/out" &&
    grep -q '^final: rank=1 ' "$tmp/out"; then
    pass "launch-local.sh: 2 shards, 2 workers, both final: lines, exit 0"
else
    fail "launch-local.sh: exit $rc, $finals final: lines"
    cat "$tmp/out"
fi
if grep -q ":$port/metrics" "$tmp/run/shard0.log" && grep -q ":$((port + 1))/metrics" "$tmp/run/shard1.log"; then
    pass "launch-local.sh -s server.metrics_port=P: shard s serves its metrics at P + s"
else
    fail "launch-local.sh -s server.metrics_port=$port: the shards said"
    grep -h metrics "$tmp/run"/shard*.log
fi
[ -z "$(leftovers)" ] && pass "no process left after a run" || fail "left running: $(leftovers)"

# Any command as the workers (a dcps.torch script, say): dcps-worker -- CMD hands
# it the job file, its rank, the worker count and the overrides with the shards'
# bound endpoints.
rc=0
bash "$launch" "$job" -w 2 -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q "${small[@]}" -- \
    sh -c 'printf "%s\n" "$DCPS_SET" >"$0/set$DCPS_RANK"
           echo "final: rank=$DCPS_RANK workers=$DCPS_WORKERS job=$DCPS_JOB"' "$tmp" \
    >"$tmp/out" 2>&1 || rc=$?
if [ $rc -eq 0 ] && grep -q "^final: rank=0 workers=2 job=$(realpath "$job")\$" "$tmp/out" &&
    grep -q '^final: rank=1 workers=2 ' "$tmp/out" &&
    grep -qE '^servers\.shards=tcp://127\.0\.0\.1:[0-9]+,tcp://127\.0\.0\.1:[0-9]+$' "$tmp/set1" &&
    grep -qx 'data.train_limit=2000' "$tmp/set0"; then
    pass "launch-local.sh -- CMD: each worker runs CMD with DCPS_JOB, DCPS_RANK, DCPS_WORKERS, DCPS_SET"
else
    fail "launch-local.sh -- CMD: exit $rc"
    cat "$tmp/out" "$tmp"/set* 2>/dev/null
fi
[ -z "$(leftovers)" ] && pass "no process left after a command run" || fail "left running: $(leftovers)"

rc=0
bash "$launch" "$job" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q -s optimizer.lr=99 >"$tmp/out" 2>&1 || rc=$?
if [ $rc -eq 1 ] && grep -q 'did not start' "$tmp/out"; then
    pass "launch-local.sh: a bad -s value (a shard does not start) gives exit status 1"
else
    fail "launch-local.sh with a bad -s value: exit $rc"
    cat "$tmp/out"
fi
[ -z "$(leftovers)" ] && pass "no process left after a failed start" || fail "left running: $(leftovers)"

# Ctrl-C: SIGINT to the launcher while its workers train. Job control gives it a
# process group of its own, so that SIGINT is not ignored as it would be in a
# background job.
set -m
bash "$launch" "$job" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q -s data.epochs=100 >"$tmp/out" 2>&1 &
lpid=$!
set +m
for _ in $(seq 200); do
    grep -q 'training' "$tmp/out" 2>/dev/null && break
    sleep 0.05
done
sleep 0.5
kill -INT "$lpid"
rc=0
wait "$lpid" || rc=$?
if [ $rc -eq 130 ]; then
    pass "launch-local.sh: SIGINT while training ends it with exit status 130"
else
    fail "launch-local.sh after SIGINT: exit $rc"
    cat "$tmp/out"
fi
[ -z "$(leftovers)" ] && pass "no process left after SIGINT" || fail "left running: $(leftovers)"

# dcps.sbatch with stand-ins: scontrol lists two nodes, both this host; srun starts
# its tasks here with SLURM_PROCID set and passes SIGTERM on to them.
mkdir -p "$tmp/bin" "$tmp/submit"
cat >"$tmp/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
[ "$1 $2" = "show hostnames" ] && printf 'localhost\nlocalhost\n'
EOF
cat >"$tmp/bin/srun" <<'EOF'
#!/usr/bin/env bash
n= nodes=1 per=1
while [ $# -gt 0 ]; do
    case $1 in
    --ntasks=*) n=${1#*=} ;;
    --nodes=*) nodes=${1#*=} ;;
    --ntasks-per-node=*) per=${1#*=} ;;
    --*) ;;
    *) break ;;
    esac
    shift
done
n=${n:-$((nodes * per))}
pids=()
for ((i = 0; i < n; i++)); do
    SLURM_PROCID=$i "$@" &
    pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
st=0
for p in "${pids[@]}"; do
    wait "$p"; r=$?
    while kill -0 "$p" 2>/dev/null; do wait "$p"; r=$?; done
    [ $r -eq 0 ] || st=$r
done
exit $st
EOF
chmod +x "$tmp/bin/scontrol" "$tmp/bin/srun"
rc=0
(cd "$tmp/submit" &&
    PATH=$tmp/bin:$PATH SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=1 SLURM_SUBMIT_DIR=$tmp/submit \
        DCPS_BINDIR=$DCPS_BUILDDIR DCPS_PORT=$((20000 + RANDOM % 20000)) \
        bash "$DCPS_SRCDIR/deploy/slurm/dcps.sbatch" "$job" --set data.epochs=1 \
        --set data.train_limit=2000 >"$tmp/out" 2>&1) || rc=$?
finals=$(grep -c '^final: ' "$tmp/out")
if [ $rc -eq 0 ] && [ "$finals" -eq 2 ] && grep -q 'workers=2' "$tmp/out"; then
    pass "dcps.sbatch (srun and scontrol stand-ins): 2 workers, both final: lines, exit 0"
else
    fail "dcps.sbatch: exit $rc, $finals final: lines"
    cat "$tmp/out" "$tmp"/submit/dcps-1/*.log
fi
[ -z "$(leftovers)" ] && pass "no process left after dcps.sbatch" || fail "left running: $(leftovers)"

# dcps.sbatch JOB --set ... -- CMD: the overrides reach CMD too, with the shards.
rc=0
(cd "$tmp/submit" &&
    PATH=$tmp/bin:$PATH SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=2 SLURM_SUBMIT_DIR=$tmp/submit \
        DCPS_BINDIR=$DCPS_BUILDDIR DCPS_PORT=$((20000 + RANDOM % 20000)) \
        bash "$DCPS_SRCDIR/deploy/slurm/dcps.sbatch" "$job" --set data.epochs=1 -- \
        sh -c 'echo "final: rank=$DCPS_RANK set=$(printf "%s" "$DCPS_SET" | tr "\n" " ")"' \
        >"$tmp/out" 2>&1) || rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^final: rank=[01] set=servers.shards=tcp://[^ ]* .*data.epochs=1 $' \
    "$tmp/out")" -eq 2 ]; then
    pass "dcps.sbatch -- CMD: both workers run CMD with the overrides and the shards"
else
    fail "dcps.sbatch -- CMD: exit $rc"
    cat "$tmp/out"
fi
[ -z "$(leftovers)" ] && pass "no process left after dcps.sbatch -- CMD" || fail "left running: $(leftovers)"
exit $status
