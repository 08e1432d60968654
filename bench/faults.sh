#!/bin/bash
# bench/faults.sh — issue 29's long run: N faults at random moments (default 200)
# across async, sync and ssp, through bench/faults.py, into OUT (default
# bench/results/DATE/faults). Programs from $BUILD (default build/).
#
# -b: dcps.torch workers with buckets and ordered pulls (bench/faults.py --buckets).
#
# usage: bench/faults.sh [-n N] [-s FIRST_SEED] [-o OUT] [-b]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
N=200 SEED=1 OUT=$root/bench/results/$(date +%F)/faults BUCKETS=()
while getopts n:s:o:b opt; do
    case $opt in
    n) N=$OPTARG ;;
    s) SEED=$OPTARG ;;
    o) OUT=$OPTARG ;;
    b) BUCKETS=(--buckets) ;;
    *) sed -n 2,9p "$0" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
# PYTHONPATH: the build's dcps package, for -b's dcps.torch workers
DCPS_BUILDDIR=$BUILD DCPS_SRCDIR=$root PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH} \
    /usr/bin/python3 "$root/bench/faults.py" "$N" "$OUT" \
    "$SEED" "${BUCKETS[@]}" 2>&1 | tee "$OUT/log.txt"
