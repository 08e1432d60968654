#!/bin/bash
# bench/faults.sh — issue 29's long run: N faults at random moments (default 200)
# across async, sync and ssp, through bench/faults.py, into OUT (default
# bench/results/DATE/faults). Programs from $BUILD (default build/).
#
# usage: bench/faults.sh [-n N] [-s FIRST_SEED] [-o OUT]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
N=200 SEED=1 OUT=$root/bench/results/$(date +%F)/faults
while getopts n:s:o: opt; do
    case $opt in
    n) N=$OPTARG ;;
    s) SEED=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,7p "$0" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
DCPS_BUILDDIR=$BUILD DCPS_SRCDIR=$root /usr/bin/python3 "$root/bench/faults.py" "$N" "$OUT" \
    "$SEED" 2>&1 | tee "$OUT/log.txt"
