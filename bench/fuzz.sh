#!/bin/bash
# bench/fuzz.sh — the libFuzzer harnesses of tests/fuzz, run long, with coverage.
#
# Runs each harness (codec: header and payload decoding; router: a shard taking
# sequences of messages in process) for RUNS executions (-r, split over the JOBS
# processes) or SECONDS (-t, each process), with JOBS processes at once (-j, 1)
# under nice, from its seeds, its regression inputs and the corpus of earlier
# runs (kept in WORK, default $BUILD/tests/fuzz/long). Then it merges each corpus
# (libFuzzer -merge=1: the fewest inputs with the same coverage), replays the
# merged corpora through the fuzz-cov programs (clang source-based coverage, no
# sanitizer) and reports the line and branch coverage of proto/codec.c,
# proto/frame.c, server/router.c, server/shard.c and server/consistency.c with
# llvm-profdata and llvm-cov of FUZZ_CC's version.
#
# Writes to OUT (default bench/results/DATE/fuzz): summary.txt (command, machine,
# executions, exec/s, crashes, coverage), coverage.txt (llvm-cov's reports) and
# each process's libFuzzer statistics (NAME.JOB.stats). Inputs that break an
# invariant are left in WORK/NAME/ (crash-*, leak-*, timeout-*, oom-*) and listed;
# the script then exits 1.
#
# usage: bench/fuzz.sh [-r RUNS | -t SECONDS] [-j JOBS] [-n "codec router"] [-w WORK] [-o OUT]
#        (programs from $BUILD, default build/, configured where clang links libFuzzer)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
FUZZ_CC=${FUZZ_CC:-clang}
RUNS= SECONDS_EACH=60 JOBS=1 NAMES="codec router" WORK= OUT=$root/bench/results/$(date +%F)/fuzz
while getopts r:t:j:n:w:o: opt; do
    case $opt in
    r) RUNS=$OPTARG ;;
    t) SECONDS_EACH=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    n) NAMES=$OPTARG ;;
    w) WORK=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,23p "$0" >&2; exit 2 ;;
    esac
done
WORK=${WORK:-$BUILD/tests/fuzz/long}
[ -f "$BUILD/Makefile" ] || { echo "fuzz.sh: no $BUILD/Makefile (configure first, or set BUILD)" >&2; exit 2; }
make -s -C "$BUILD" fuzz fuzz-cov >/dev/null

# llvm-profdata and llvm-cov of the compiler's own version (clang-14 writes
# profiles that only llvm-profdata-14 reads).
major=$("$FUZZ_CC" -dumpversion | cut -d. -f1)
tool() {
    local t
    for t in "$1-$major" "$1"; do
        command -v "$t" >/dev/null && { echo "$t"; return; }
    done
    echo "fuzz.sh: no $1-$major or $1 in PATH (Debian: package llvm-$major)" >&2
    exit 2
}
profdata=$(tool llvm-profdata)
llvmcov=$(tool llvm-cov)

# No allocation stacks in AddressSanitizer's reports, which saves an unwind per malloc.
# Run a crash's input again without it to see them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0}

mkdir -p "$OUT"
summary=$OUT/summary.txt
load=$(cut -d' ' -f1-3 /proc/loadavg)
{
    how="-t $SECONDS_EACH"
    [ -n "$RUNS" ] && how="-r $RUNS"
    echo "# bench/fuzz.sh $how -j $JOBS -n \"$NAMES\" ($(date -u '+%F %T UTC'))"
    echo "commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); load average at start: $load"
    echo "compiler: $("$FUZZ_CC" --version | head -1); -fsanitize=fuzzer,address,undefined; nice -n 10"
    echo
    printf '%-8s %12s %9s %9s %5s %8s %8s %8s\n' harness executions seconds exec/s jobs corpus merged crashes
} >"$summary"

status=0
for h in $NAMES; do
    bin=$BUILD/tests/fuzz/fuzz_$h
    dir=$WORK/$h
    mkdir -p "$dir/corpus"
    seeds=("$root/tests/fuzz/corpus/$h")
    [ -d "$root/tests/fuzz/regress/$h" ] && seeds+=("$root/tests/fuzz/regress/$h")
    limit=(-max_total_time="$SECONDS_EACH")
    [ -n "$RUNS" ] && limit=(-runs=$(((RUNS + JOBS - 1) / JOBS)))
    echo "fuzz_$h: $JOBS process(es), $how" >&2
    start=$(date +%s.%N)
    pids=()
    for j in $(seq "$JOBS"); do
        # Each process its own seed; they share the corpus directory and read
        # each other's finds (-reload).
        nice -n 10 "$bin" "${limit[@]}" -seed="$j${start%.*}" -max_len=4096 -timeout=10 \
            -rss_limit_mb=2048 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
            -dict="$root/tests/fuzz/dcps.dict" -artifact_prefix="$dir/" \
            "$dir/corpus" "${seeds[@]}" >"$dir/log.$j" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || status=1
    done
    secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
    execs=0
    for j in $(seq "$JOBS"); do
        grep '^stat::' "$dir/log.$j" >"$OUT/$h.$j.stats" || true
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log.$j")
        execs=$((execs + ${n:-0}))
    done
    before=$(find "$dir/corpus" -type f | wc -l)
    rm -rf "$dir/merged"
    mkdir -p "$dir/merged"
    nice -n 10 "$bin" -merge=1 -max_len=4096 -rss_limit_mb=2048 "$dir/merged" "$dir/corpus" "${seeds[@]}" \
        >"$dir/merge.log" 2>&1
    rm -rf "$dir/corpus"
    mv "$dir/merged" "$dir/corpus"
    after=$(find "$dir/corpus" -type f | wc -l)
    crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    printf '%-8s %12d %9.1f %9.0f %5d %8d %8d %8d\n' "$h" "$execs" "$secs" \
        "$(echo "$execs $secs" | awk '{print $2 ? $1 / $2 : 0}')" "$JOBS" "$before" "$after" \
        "$crashes" >>"$summary"
    if [ "$crashes" -gt 0 ]; then
        find "$dir" -maxdepth 1 -type f -name '*-*' ! -name 'log.*' | sed 's/^/  input: /' >>"$summary"
        status=1
    fi
done

# Coverage of the merged corpora (and the seeds and regression inputs, which
# the merge keeps), per harness and both together.
files=(proto/codec.c proto/frame.c server/router.c server/shard.c server/consistency.c)
{
    echo
    echo "coverage of the merged corpora (clang source-based coverage, $llvmcov report):"
    printf '%-22s %-30s %-30s %-30s\n' file codec router both
} >>"$summary"
: >"$OUT/coverage.txt"
objects=()
profiles=()
for h in $NAMES; do
    rm -f "$WORK/$h.profraw"
    LLVM_PROFILE_FILE=$WORK/$h.profraw "$BUILD/tests/fuzz/cov_$h" "$WORK/$h/corpus" >/dev/null 2>&1
    "$profdata" merge -sparse "$WORK/$h.profraw" -o "$WORK/$h.profdata"
    profiles+=("$WORK/$h.profraw")
    objects+=("$BUILD/tests/fuzz/cov_$h")
    { echo "== $h"; "$llvmcov" report "$BUILD/tests/fuzz/cov_$h" -instr-profile="$WORK/$h.profdata"; } \
        >>"$OUT/coverage.txt"
done
"$profdata" merge -sparse "${profiles[@]}" -o "$WORK/all.profdata"
cov_args=("${objects[0]}")
for o in "${objects[@]:1}"; do cov_args+=(-object "$o"); done
{ echo "== both"; "$llvmcov" report "${cov_args[@]}" -instr-profile="$WORK/all.profdata"; } \
    >>"$OUT/coverage.txt"
# A report line: Filename Regions Missed Cover Functions Missed Executed Lines
# Missed Cover Branches Missed Cover. Prints "lines L/N (P), branches B/M (Q)".
cover() {
    awk -v f="$2" '$0 ~ "^== " { on = ($2 == h) } on && index($1, f) && $1 ~ (f "$") {
        printf "%d/%d %s, %d/%d %s", $8 - $9, $8, $10, $11 - $12, $11, $13; found = 1 }
        END { if (!found) printf "-" }' h="$1" "$OUT/coverage.txt"
}
for f in "${files[@]}"; do
    printf '%-22s' "$f" >>"$summary"
    for h in codec router both; do
        printf ' %-30s' "$(cover "$h" "$f")" >>"$summary"
    done
    echo >>"$summary"
done
echo "(lines covered/lines cover%, branches covered/branches cover%)" >>"$summary"
cat "$summary"
exit $status
