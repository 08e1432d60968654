#!/bin/bash
# dcps on a real GPU: bench/topk's GPU read pass after the fix (a grid that fills
# the device, READ_SUMS sums per thread, one atomic per block), against the read
# pass before it, and the top-k GPU suite with its new read-pass test.
#
#   bash .gpu3/run.sh          (from the repository root; OUT: where the logs and
#                               CSVs go, default /tmp/gpuout)
#
# This is the copy kept with the results of 2026-11-26; the run used it as
# .gpu3/run.sh, an ignored folder at the repository's root. The bundle, beside
# the script (README.md beside this copy says how it was made):
#   bin/topk            bench/topk of branch h-readpass (the fixed read pass)
#   bin/topk-before     bench/topk of the 2026-11-26 GPU run (commit f5ac0ee)
#   bin/test_topk_gpu   tests/test_topk_gpu of branch h-readpass
#   lib/                libsubunit.so.0 (the test's one library outside glibc,
#                       libstdc++ and libgcc_s), from the 2026-11-26 bundle
# All built --without-python --disable-shared, CUDA runtime static, stripped.
set -u
H=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpuout}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET:-190} # seconds for the whole script; each step gets what is left
left() { echo $((BUDGET - ($(date +%s) - T0))); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l : 5)); }

main() {
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -srm)"
echo "== nvidia-smi -L"
nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | sed 's/^/   /' || true
echo "== cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"

W=${TMPDIR:-/tmp}/dcps-gpu3
rm -rf "$W" && mkdir -p "$W/tmp"
dcps_env() {
    env LD_LIBRARY_PATH="$H/lib" OPENBLAS_NUM_THREADS=1 TMPDIR="$W/tmp" CK_VERBOSITY=verbose "$@"
}

# The top-k GPU suite, with gpu_read_pass_sums_every_entry_once.
lim=$(cap 80)
echo "== test_topk_gpu (timeout ${lim}s)"
s=$(date +%s%N)
dcps_env timeout -k 5 "$lim" "$H/bin/test_topk_gpu" >"$OUT/tests.log" 2>&1
rc=$?
ms=$((($(date +%s%N) - s) / 1000000))
case $rc in 0) v=PASS ;; 77) v=SKIP ;; 124 | 137) v=TIMEOUT ;; *) v=FAIL ;; esac
echo "test,status,seconds" >"$OUT/tests.csv"
echo "tests/test_topk_gpu,$v($rc),$((ms / 1000)).$(printf %03d $((ms % 1000)))" >>"$OUT/tests.csv"
grep -E '^[0-9]+%|read_pass|:[FE]:' "$OUT/tests.log"
echo "== test_topk_gpu: exit $rc $v ${ms} ms"

# bench/topk after the fix: the default grid (every class, N up to 2^27), as the
# 2026-11-26 run ran it.
lim=$(cap 80)
echo "== bench/topk (after; timeout ${lim}s)"
dcps_env timeout -k 5 "$lim" "$H/bin/topk" 134217728 >"$OUT/topk.csv"
echo "bench/topk exit $?"
grep -E '^#|^gpu,normal,' "$OUT/topk.csv"

# bench/topk before the fix, on the same GPU: the normal class only (its read_ms
# is the same for every class, since the pass does not look at the values).
lim=$(cap 40)
echo "== bench/topk (before; timeout ${lim}s)"
dcps_env timeout -k 5 "$lim" "$H/bin/topk-before" 134217728 normal >"$OUT/topk_before.csv"
echo "bench/topk-before exit $?"
grep -E '^gpu,normal,' "$OUT/topk_before.csv"

# read_ms per N, before and after, and the bandwidth it implies (4 N bytes read).
awk -F, 'FNR == 1 { f++ }
    $1 == "gpu" && $2 == "normal" && $4 == "0.001" { r[f, $3] = $8; ns[$3] = 1 }
    END { print "n,bytes,read_ms_before,read_ms_after,gb_per_s_before,gb_per_s_after"
          for (n in ns) {
              b = 4 * n; x = r[2, n]; y = r[1, n]
              printf("%s,%d,%s,%s,%.0f,%.0f\n", n, b, x, y, x > 0 ? b / x / 1e6 : 0, y > 0 ? b / y / 1e6 : 0)
          } }' "$OUT/topk.csv" "$OUT/topk_before.csv" | sort -t, -k1,1n >"$OUT/read.csv"
cat "$OUT/read.csv"

# With the time left: the suite again under compute-sanitizer's memcheck.
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CS" ] && [ "$(left)" -gt 70 ]; then
    lim=$(cap 60)
    echo "== memcheck test_topk_gpu (timeout ${lim}s)"
    dcps_env timeout -k 5 "$lim" "$CS" --tool memcheck --error-exitcode 99 "$H/bin/test_topk_gpu" \
        >>"$OUT/tests.log" 2>&1
    rc=$?
    case $rc in 0) v=PASS ;; 77) v=SKIP ;; 99) v=MEMCHECK_ERRORS ;; 124 | 137) v=TIMEOUT ;; *) v=FAIL ;; esac
    echo "== memcheck test_topk_gpu: exit $rc $v"
    echo "memcheck:tests/test_topk_gpu,$v($rc)," >>"$OUT/tests.csv"
else
    echo "== memcheck skipped (compute-sanitizer: ${CS:-none}, $(left) s left)"
fi
echo "== done in $(($(date +%s) - T0)) s"
}
main 2>&1 | tee "$OUT/run.log"
