#!/bin/bash
# run.sh OUT TAG WORKERS EPOCHS [section.key=value ...] — one sync job of the
# built-in MLP (784,256,128,10, batch 64, SGD lr 0.1, 2 shards, CPU) through
# bench/lib.sh; writes OUT/TAG.csv (rank 0's metrics: one row per epoch, whose
# test_acc is rank 0's own copy, then the final row), OUT/TAG.shardS.log and
# OUT/TAG.final (rank 0's final: line). Programs from $BUILD (default build/).
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
BUILD=${BUILD:-$root/build}
. "$root/bench/lib.sh"
out=$1 tag=$2 w=$3 e=$4
shift 4
mkdir -p "$out"
bench_job "$out/job.ini" sync-delta "$w" 2 "$e" 0.1 784,256,128,10
bench_run "$out" "$tag" "$out/job.ini" 2 "$w" job.mode=sync optimizer.kind=sgd "$@"
echo "$BENCH_FINAL" >"$out/$tag.final"
