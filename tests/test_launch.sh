#!/usr/bin/env bash
# The launchers run a real job end to end on this host, and leave nothing behind:
# - deploy/launch-local.sh: 2 shards and 2 workers train a short job (async, then sync); both final:
#   lines appear, it exits 0, no shard is left; with a bad -s value or a misspelt key
#   it exits 2, as dcps-server does; after SIGINT (Ctrl-C) in the middle of training
#   it exits 130 and every process it started is gone.
# - run directories: two launches at once from a tree (no -b, no -d) each get a
#   run directory of their own and both succeed, each final: line shown once, each
#   worker's no-GPU reason logged once; a second launch into a -d directory in use
#   is refused and leaves the first alone; the metrics files named are this run's.
# - a python command: a python3 first in PATH that cannot import dcps.torch is
#   refused before anything starts, naming one that can.
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

# A sync job of 2 shards on ephemeral ports: shard 1 must be told shard 0's address
# (--leader), which the job file's `*` port does not give; both ranks end on one model.
rc=0
bash "$launch" "$job" -w 2 -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q "${small[@]}" \
    -s job.mode=sync >"$tmp/out" 2>&1 || rc=$?
accs=$(grep '^final: ' "$tmp/out" | grep -o 'test_acc=[0-9.]*' | sort -u | wc -l)
if [ $rc -eq 0 ] && [ "$(grep -c '^final: ' "$tmp/out")" -eq 2 ] && [ "$accs" -eq 1 ] &&
    grep -q 'mode=sync' "$tmp/out"; then
    pass "launch-local.sh -e with a sync job of 2 shards: the second follows the first, both ranks end on one model"
else
    fail "launch-local.sh -e -s job.mode=sync: exit $rc"
    cat "$tmp/out"
fi

# A tree as a user's checkout has it after the demo: deploy/launch-local.sh and a
# build/ (this build's), for the launcher's defaults (no -b, no -d).
tree=$tmp/tree
mkdir -p "$tree/deploy" && cp "$launch" "$tree/deploy/" &&
    ln -s "$(cd "$DCPS_BUILDDIR" && pwd)" "$tree/build"
# Two launches at once, not quiet: each its own run directory, both complete.
(cd "$tree" && exec bash deploy/launch-local.sh "$job" -e "${small[@]}") >"$tmp/a.out" 2>&1 &
apid=$!
(cd "$tree" && exec bash deploy/launch-local.sh "$job" -e "${small[@]}") >"$tmp/b.out" 2>&1 &
bpid=$!
ra=0 rb=0
wait $apid || ra=$?
wait $bpid || rb=$?
dirs=$(find "$tree/run" -mindepth 1 -maxdepth 1 -type d -name 'local-*' | wc -l)
if [ $ra -eq 0 ] && [ $rb -eq 0 ] && [ "$dirs" -eq 2 ] && [ -L "$tree/run/latest" ] &&
    [ "$(grep -c '^final: ' "$tmp/a.out")" -eq 2 ] && [ "$(grep -c '^final: ' "$tmp/b.out")" -eq 2 ]; then
    pass "two launches at once: a run directory each (run/local-TIME-PID, run/latest), both exit 0, each final: line once"
else
    fail "two launches at once: exit $ra and $rb, $dirs run directories, final: lines $(grep -c '^final: ' "$tmp/a.out") and $(grep -c '^final: ' "$tmp/b.out")"
    cat "$tmp/a.out" "$tmp/b.out"
    ls -la "$tree/run"
fi
# A worker that falls back to the CPU says why once, in troubleshooting.md's words.
gpu_lines=$(cat "$tree"/run/local-*/worker0.log | grep -c 'no usable GPU')
if [ "$gpu_lines" -eq 0 ] || { [ "$gpu_lines" -eq 2 ] &&
    [ "$(cat "$tree"/run/local-*/worker0.log | grep -c '\[worker\] device = auto: no usable GPU (.*); computing on the CPU')" -eq 2 ]; }; then
    pass "each worker says why it computes on the CPU at most once ($gpu_lines lines in two runs' worker0.log)"
else
    fail "no-GPU lines in two runs' worker0.log:"
    grep -h 'GPU' "$tree"/run/local-*/worker0.log
fi
[ -z "$(leftovers)" ] && pass "no process left after two runs at once" || fail "left running: $(leftovers)"

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
    grep -q 'metrics: none written;' "$tmp/out" &&
    grep -qE '^servers\.shards=tcp://127\.0\.0\.1:[0-9]+,tcp://127\.0\.0\.1:[0-9]+$' "$tmp/set1" &&
    grep -qx 'data.train_limit=2000' "$tmp/set0"; then
    pass "launch-local.sh -- CMD: each worker runs CMD with DCPS_JOB, DCPS_RANK, DCPS_WORKERS, DCPS_SET; no earlier run's metrics named"
else
    fail "launch-local.sh -- CMD: exit $rc"
    cat "$tmp/out" "$tmp"/set* 2>/dev/null
fi
[ -z "$(leftovers)" ] && pass "no process left after a command run" || fail "left running: $(leftovers)"

rc=0
bash "$launch" "$job" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q -s optimizer.lr=99 >"$tmp/out" 2>&1 || rc=$?
if [ $rc -eq 2 ] && grep -q 'did not start' "$tmp/out"; then
    pass "launch-local.sh: a bad -s value (a shard does not start) gives exit status 2"
else
    fail "launch-local.sh with a bad -s value: exit $rc"
    cat "$tmp/out"
fi
sed 's/^epochs = /epoch = /' "$job" >"$tmp/typo.ini"
rc=0
bash "$launch" "$tmp/typo.ini" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q >"$tmp/out" 2>&1 || rc=$?
if [ $rc -eq 2 ] && grep -q 'typo.ini:[0-9]*: \[data\] epoch: unknown key; did you mean \[data\] epochs?' "$tmp/out"; then
    pass "launch-local.sh: a misspelt key in the job file gives exit status 2, and the key it means"
else
    fail "launch-local.sh with a misspelt key: exit $rc"
    cat "$tmp/out"
fi
[ -z "$(leftovers)" ] && pass "no process left after a failed start" || fail "left running: $(leftovers)"

# A python3 first in PATH that cannot import dcps.torch (pyenv's, a venv's): the
# launcher says so before it starts anything, and names one that can.
mkdir -p "$tmp/pybin"
printf '#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n' >"$tmp/pybin/python3"
chmod +x "$tmp/pybin/python3"
printf 'import dcps.torch\n' >"$tmp/train.py"
if [ -x /usr/bin/python3 ] && [ -f "$DCPS_BUILDDIR/python/dcps/__init__.py" ] &&
    PYTHONPATH=$DCPS_BUILDDIR/python /usr/bin/python3 -c 'import torch, dcps.torch' 2>/dev/null; then
    rc=0
    (cd "$tree" && PATH=$tmp/pybin:$PATH exec bash deploy/launch-local.sh "$job" -e -q -- \
        python3 "$tmp/train.py") >"$tmp/out" 2>&1 || rc=$?
    if [ $rc -eq 2 ] && grep -qF "python3 ($tmp/pybin/python3) cannot import torch, dcps.torch" "$tmp/out" &&
        grep -q '/usr/bin/python3 can' "$tmp/out" && ! grep -q 'serving at' "$tmp/out"; then
        pass "launch-local.sh -- python3 X.py: a python3 without dcps.torch is refused (exit 2), naming /usr/bin/python3"
    else
        fail "launch-local.sh -- python3 with a python3 that lacks dcps.torch: exit $rc"
        cat "$tmp/out"
    fi
else
    echo "SKIP (python check): /usr/bin/python3 cannot import torch and this build's dcps.torch"
fi

# Ctrl-C: SIGINT to the launcher while its workers train. Job control gives it a
# process group of its own, so that SIGINT is not ignored as it would be in a
# background job; env --default-signal gives it SIGINT's default disposition,
# which a shell cannot restore for itself when it started with SIGINT ignored (a
# make check run under nohup or from a background job): then the launcher could
# not trap it, and ran its 100 epochs to the end (exit 0 after 115 s).
set -m
env --default-signal=INT bash "$launch" "$job" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q \
    -s data.epochs=100 >"$tmp/out" 2>&1 &
lpid=$!
set +m
for _ in $(seq 200); do
    grep -q 'training' "$tmp/out" 2>/dev/null && break
    sleep 0.05
done
sleep 0.5
# A second launch into the same directory is refused and leaves the first alone.
rc=0
bash "$launch" "$job" -b "$DCPS_BUILDDIR" -d "$tmp/run" -e -q "${small[@]}" >"$tmp/second" 2>&1 || rc=$?
if [ $rc -eq 1 ] && grep -q "$tmp/run is in use by another launch-local.sh (pid $lpid)" "$tmp/second" &&
    [ -s "$tmp/run/shard0.endpoint" ] && [ -s "$tmp/run/worker0.log" ] && kill -0 "$lpid" 2>/dev/null; then
    pass "a second launch-local.sh -d DIR while one runs there: refused (exit 1), the first untouched"
else
    fail "a second launch-local.sh -d DIR while one runs there: exit $rc"
    cat "$tmp/second"
    ls -la "$tmp/run"
fi
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
