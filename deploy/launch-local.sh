#!/usr/bin/env bash
# launch-local.sh — run a whole dcps job on this host: its shards, then its workers.
#
#   launch-local.sh JOB.ini [-w N] [-s SECTION.KEY=VALUE]... [-b BINDIR] [-d RUNDIR] [-e] [-q]
#                   [-- COMMAND [ARG]...]
#
#   -w N     run N workers (sets [job] workers = N for shards and workers alike);
#            default: the job's [job] workers
#   -s K=V   pass --set K=V to every shard and worker (repeatable); with a
#            [server] metrics_port P, shard s serves its metrics at port P + s
#   -b DIR   where dcps-server and dcps-worker are (default: $DCPS_BINDIR, else the
#            build/ of the tree this script is in, else PATH)
#   -d DIR   run directory for logs, endpoint files and metrics; one launch at a time
#            may use it (default: a new run/JOB-TIME-PID/ of its own, run/latest
#            pointing at it)
#   -e       ephemeral ports: the shards bind tcp://127.0.0.1:* instead of the job's
#            endpoints, so that several jobs (or test runs) can share the host
#   -q       quiet: do not echo the workers' progress, only their final lines
#   -- CMD   run CMD as each worker instead of the built-in MLP (a PyTorch script with
#            dcps.torch, say): dcps-worker -- CMD sets DCPS_JOB, DCPS_RANK, DCPS_WORKERS
#            and DCPS_SET (the -s overrides and the shards' endpoints, one a line);
#            the build's Python package (DIR/python) comes first in PYTHONPATH, and a
#            python that cannot import dcps (or torch, for a script that uses it) is
#            refused before anything starts, naming a python that can
#
# It starts one dcps-server per entry of the job's [servers] shards, waits until each
# has written its endpoint file (--endpoint-file), starts the workers (ranks 0 to N-1)
# with those endpoints, waits for them, prints each worker's final: line, then stops
# the shards with SIGTERM. In RUNDIR: shardS.log, shardS.endpoint, workerR.out (stdout),
# workerR.log (stderr), workerR.csv (metrics).
#
# Exit status: 0 if every worker printed its final: line and every shard stopped with
# status 0; 1 otherwise (the failing logs are named); 2 for a bad command line, or a
# job file or -s the programs refuse (their exit status 2); 130 or 143 after SIGINT
# (Ctrl-C) or SIGTERM. Whatever way it ends, it stops every process it
# started and waits for them: no daemon is left behind.
set -uo pipefail

usage() {
    sed -n '4,24s/^# \{0,1\}//p' "$0" | sed '1s/^ */usage: /' >&2
    exit 2
}

say() {
    if [ -t 1 ]; then printf '\033[1m==> %s\033[0m\n' "$*"; else printf '==> %s\n' "$*"; fi
}

# ini_get FILE SECTION KEY: the key's value, continuation lines joined, inline
# comments (" ;...") and surrounding blanks removed; nothing if it is not set.
# Enough for [job] workers and [servers] shards; dcps-server checks the file itself.
ini_get() {
    awk -v want_sec="$2" -v want_key="$3" '
        function flush() { if (found) { print val; found = 0; done = 1 } }
        done { exit }
        /^[ \t]*[;#]/ { next }
        /^[ \t]*\[/ { flush(); sec = $0; gsub(/[][ \t]/, "", sec); cont = 0; next }
        cont && /^[ \t]+[^ \t]/ { v = $0; sub(/[ \t]+;.*/, "", v); val = val v; next }
        { cont = 0; flush() }
        sec == want_sec && index($0, "=") {
            k = substr($0, 1, index($0, "=") - 1); gsub(/[ \t]/, "", k)
            if (k != want_key) next
            v = substr($0, index($0, "=") + 1); sub(/[ \t]+;.*/, "", v)
            val = v; found = 1; cont = 1
        }
        END { flush() }' "$1" | tr -d ' \t'
}

job=
workers=
bindir=${DCPS_BINDIR:-}
run=
ephemeral=0
quiet=0
sets=()
cmd=()
[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage ;; -*) ;; *) job=$1; shift ;; esac
while getopts ':w:s:b:d:eqh' opt; do
    case $opt in
    w) workers=$OPTARG ;;
    s) sets+=(--set "$OPTARG") ;;
    b) bindir=$OPTARG ;;
    d) run=$OPTARG ;;
    e) ephemeral=1 ;;
    q) quiet=1 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
# The job file comes first, or after the options; a command may follow "--".
[ -z "$job" ] && [ $# -ge 1 ] && [ "$1" != -- ] && { job=$1; shift; }
[ $# -ge 1 ] && [ "$1" = -- ] && shift
cmd=("$@")
[ -n "$job" ] || usage
[ -r "$job" ] || { echo "launch-local.sh: cannot read $job" >&2; exit 2; }
# The programs: -b, $DCPS_BINDIR, the build/ of the tree this script is in (the
# quickstart's), or PATH (the installed packages').
tree_build=$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)/build
if [ -z "$bindir" ] && [ -x "$tree_build/dcps-server" ]; then
    bindir=$tree_build
elif [ -z "$bindir" ]; then
    server=$(command -v dcps-server) ||
        { echo "launch-local.sh: no dcps-server in $tree_build nor in PATH: build it" \
            "(deploy/quickstart.sh demo), or use -b DIR" >&2; exit 2; }
    bindir=$(dirname "$server")
fi
for p in dcps-server dcps-worker; do
    [ -x "$bindir/$p" ] || { echo "launch-local.sh: no $bindir/$p" >&2; exit 2; }
done
# A build tree's Python package, for a command that imports dcps.
if [ -f "$bindir/python/dcps/__init__.py" ]; then
    pkg=$(cd "$bindir/python" && pwd)
    export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
fi

# check_python: a command that runs a python must find dcps there (and torch, if
# its script names it), or every worker would fail alike after the shards started.
# Exits 2 naming the python, what it lacks and a python that has it, if any.
check_python() {
    local py=${cmd[0]} path script='' a mods=dcps why other='' c
    case ${py##*/} in python | python3 | python3.[0-9]*) ;; *) return 0 ;; esac
    path=$(command -v "$py") || { echo "launch-local.sh: $py: command not found" >&2; exit 2; }
    for a in "${cmd[@]:1}"; do
        case $a in *.py) script=$a; break ;; esac
    done
    [ -n "$script" ] && [ -r "$script" ] && grep -qw torch "$script" && mods="torch, dcps.torch"
    why=$("$py" -c "import $mods" 2>&1 >/dev/null) && return 0
    for c in /usr/bin/python3 $(type -ap python3); do
        [ "$c" != "$path" ] && [ -x "$c" ] && "$c" -c "import $mods" >/dev/null 2>&1 &&
            { other=$c; break; }
    done
    echo "launch-local.sh: $py ($path) cannot import $mods: $(printf '%s\n' "$why" | tail -n 1)" >&2
    if [ -n "$other" ]; then
        echo "launch-local.sh: $other can (Debian's python3-torch is for /usr/bin/python3):" \
            "give it after --, as in: ... -- $other ${cmd[*]:1}" >&2
    elif [ -z "${pkg:-}" ] && [ "$bindir" = "$tree_build" ]; then
        echo "launch-local.sh: $bindir has no Python package (configured without Python 3" \
            "headers?): install python3-dev, remove $bindir and build again" >&2
    else
        echo "launch-local.sh: no python3 here can; install python3-torch (and python3-dcps" \
            "without a build tree), or use a python that has them" >&2
    fi
    exit 2
}
[ ${#cmd[@]} -gt 0 ] && check_python

# The shard and worker counts and the metrics port: the job's, or the last -s
# that sets them.
shards=$(ini_get "$job" servers shards)
job_workers=$(ini_get "$job" job workers)
metrics_port=$(ini_get "$job" server metrics_port)
for a in "${sets[@]}"; do
    case $a in
    servers.shards=*) shards=${a#servers.shards=} ;;
    job.workers=*) job_workers=${a#job.workers=} ;;
    server.metrics_port=*) metrics_port=${a#server.metrics_port=} ;;
    esac
done
case ${metrics_port:-0} in *[!0-9]*) metrics_port=0 ;; esac  # dcps-server says what is wrong
nshards=$(printf '%s' "${shards:-tcp://127.0.0.1:17001,tcp://127.0.0.1:17002}" | tr ',' '\n' | grep -c .)
if [ -n "$workers" ]; then
    case $workers in '' | *[!0-9]* | 0) echo "launch-local.sh: -w: \"$workers\" is not a worker count" >&2; exit 2 ;; esac
    sets+=(--set "job.workers=$workers")
else
    workers=${job_workers:-2}
fi
server_sets=()
if [ $ephemeral -eq 1 ]; then
    eps=$(for ((s = 0; s < nshards; s++)); do printf 'tcp://127.0.0.1:*\n'; done | paste -sd, -)
    server_sets=(--set "servers.shards=$eps")
fi

# The run directory: one launch's own. Without -d a new one, named after the job,
# the time and this process; run/latest points at the newest. With -d, a lock
# refuses a second launch in the same directory before it touches anything there.
if [ -z "$run" ]; then
    name=$(basename "$job" .ini)
    run=run/$name-$(date +%Y%m%d-%H%M%S)-$$
    mkdir -p "$run" || exit 2
    ln -sfn "${run#run/}" run/latest 2>/dev/null || true
fi
mkdir -p "$run" || exit 2
if command -v flock >/dev/null; then
    exec {lock}>>"$run/.lock"
    if ! flock -n "$lock"; then
        echo "launch-local.sh: $run is in use by another launch-local.sh (pid $(cat "$run/.lock" 2>/dev/null)):" \
            "give another -d DIR, or no -d for a run directory of its own" >&2
        exit 1
    fi
    echo $$ >"$run/.lock"
fi
# What an earlier launch left here is not this run's.
rm -f "$run"/shard*.endpoint "$run"/shard*.log "$run"/worker*.out "$run"/worker*.log "$run"/worker*.csv

# Every process started and not yet waited for (shards, workers and tees alike):
# only these are ever signalled, so a recycled pid is never hit.
declare -A live=()
reap() {  # reap PID: waits for it; returns its exit status
    local rc=0
    wait "$1" || rc=$?
    unset "live[$1]"
    return $rc
}
stop_all() {
    local p
    for p in "${!live[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${!live[@]}"; do reap "$p"; done
}
trap 'stop_all' EXIT
trap 'echo "launch-local.sh: interrupted, stopping everything" >&2; stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

# Starts shard $1 (one host, one port each: shard s serves its metrics at the job's port
# + s) and waits for its endpoint file; the others get --leader, shard 0's endpoint, which
# a sync job with several shards needs when the job file's ports are ephemeral.
spids=()
endpoints=()
start_shard() {
    local s=$1 port_set=() lead=()
    if [ "${metrics_port:-0}" -gt 0 ]; then
        port_set=(--set "server.metrics_port=$((metrics_port + s))")
        say "shard $s: metrics at port $((metrics_port + s))"
    fi
    [ "$s" -gt 0 ] && lead=(--leader "${endpoints[0]}")
    "$bindir/dcps-server" --config "$job" --shard "$s" --endpoint-file "$run/shard$s.endpoint" \
        "${lead[@]}" "${sets[@]}" "${server_sets[@]}" "${port_set[@]}" 2>"$run/shard$s.log" &
    spids[$s]=$!
    live[$!]=1
    for _ in $(seq 200); do
        [ -s "$run/shard$s.endpoint" ] && break
        kill -0 "${spids[$s]}" 2>/dev/null || break
        sleep 0.05
    done
    if [ ! -s "$run/shard$s.endpoint" ]; then
        echo "launch-local.sh: shard $s did not start ($run/shard$s.log):" >&2
        cat "$run/shard$s.log" >&2
        # Exit status 2 is dcps-server's for a bad job file or option: so is ours.
        local rc=0
        kill -0 "${spids[$s]}" 2>/dev/null || reap "${spids[$s]}" || rc=$?
        [ $rc -eq 2 ] && exit 2
        exit 1
    fi
    endpoints[$s]=$(cat "$run/shard$s.endpoint")
    say "shard $s serving at ${endpoints[$s]} (log: $run/shard$s.log)"
}
for ((s = 0; s < nshards; s++)); do start_shard "$s"; done
bound=$(printf '%s\n' "${endpoints[@]}" | paste -sd, -)

say "$workers worker(s) training; output in $run/worker<rank>.out"
# One BLAS thread per worker: several workers on one host would fight over the cores.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
wpids=()
for ((r = 0; r < workers; r++)); do
    # stdout goes through tee on its own descriptor, not `worker | tee`: $! must be
    # the worker's pid, and the tee is waited for before the output is read. The
    # final: lines are shown once, at the end, each worker's in rank order.
    if [ $quiet -eq 0 ]; then
        exec {out}> >(tee "$run/worker$r.out" | grep --line-buffered -v '^final:')
        live[$!]=1
    else
        exec {out}>"$run/worker$r.out"
    fi
    # With a command, dcps-worker checks the job and hands the worker's place to it.
    "$bindir/dcps-worker" --config "$job" --rank "$r" --metrics "$run/worker$r.csv" \
        "${sets[@]}" --set "servers.shards=$bound" ${cmd[@]+-- "${cmd[@]}"} \
        >&$out 2>"$run/worker$r.log" &
    wpids+=($!)
    live[$!]=1
    exec {out}>&-
done

status=0
wstatus=()
for ((r = 0; r < workers; r++)); do
    rc=0
    reap "${wpids[$r]}" || rc=$?
    wstatus+=($rc)
done
# The shards: SIGTERM, and each must exit 0 (a crashed shard is a failure too).
for ((s = 0; s < nshards; s++)); do
    kill -TERM "${spids[$s]}" 2>/dev/null
    if ! reap "${spids[$s]}"; then
        echo "launch-local.sh: shard $s failed; see $run/shard$s.log" >&2
        status=1
    fi
done
stop_all  # the tees, which end once the workers have

say "final lines"
for ((r = 0; r < workers; r++)); do
    if [ "${wstatus[$r]}" -eq 0 ] && grep '^final:' "$run/worker$r.out"; then
        continue
    fi
    echo "launch-local.sh: worker $r failed (exit status ${wstatus[$r]}); $run/worker$r.log:" >&2
    tail -n 20 "$run/worker$r.log" >&2
    # dcps-worker's 2: a job file or option it refuses (a command's: its usage).
    [ "${wstatus[$r]}" -eq 2 ] && status=2
    [ $status -eq 2 ] || status=1
done
# Only what this run wrote: a command (a dcps.torch script) may write no metrics.
metrics=$(for ((r = 0; r < workers; r++)); do [ -s "$run/worker$r.csv" ] && echo "$run/worker$r.csv"; done | paste -sd' ' -)
say "metrics: ${metrics:-none written}; logs: $run/shard<s>.log, $run/worker<rank>.log"
exit $status
