#!/bin/bash
# dcps on a real GPU: the GPU test programs and the GPU benchmarks, from a
# self-contained bundle made on the build machine (Debian 12, CUDA 13.0,
# ./configure --without-python --disable-shared, static cudart, cuBLAS dlopened).
#
#   bash .gpu/run.sh          (OUT: where the logs and CSVs go; default /tmp/gpuout)
#
# This is the copy kept with the results of 2026-11-26; the run used it as
# .gpu/run.sh, an ignored folder at the repository's root (README.md beside this
# copy says how the bundle was made). The bundle, beside the script:
#   bundle.tar.xz   build/ (dcps-server, dcps-worker, the six real-GPU test programs,
#                   bench/topk; stripped) and lib/ (every shared library they need
#                   outside the glibc family, libstdc++ and libgcc_s)
#   data/           Fashion-MNIST: t10k-* as published, train-* cut to the first
#                   10,000 examples (the GPU tests read at most the first 6,000)
#   topk_torch.py   bench/topk_torch.py
# The test programs hard-code /usr/share/datasets/fashion-mnist/: if that folder
# has no data, the script fills it from data/ (it needs root then).
set -u
H=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpuout}
mkdir -p "$OUT"
TL=$OUT/tests.log
: >"$TL"
T0=$(date +%s)
BUDGET=${BUDGET:-300}   # seconds for the whole script; each step gets what is left
left() { echo $((BUDGET - ($(date +%s) - T0))); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l : 5)); }

main() {
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -srm)"
echo "== nvidia-smi -L"
nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | sed 's/^/   /' || true
nvidia-smi 2>&1 | sed -n '1,4p' || true
echo "== cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"

W=${TMPDIR:-/tmp}/dcps-gpu-bundle
rm -rf "$W"
mkdir -p "$W/tmp"
tar -xJf "$H/bundle.tar.xz" -C "$W" || { echo "cannot unpack the bundle"; return 1; }
B=$W/build

# cuBLAS (dlopened by the GPU MLP as libcublas.so.13): the system's, CUDA's, or
# the one PyTorch's wheels bring.
CUBLAS_DIR=
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13 '; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
        $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in ("cu13", "cublas")]' 2>/dev/null); do
        if [ -e "$d/libcublas.so.13" ]; then CUBLAS_DIR=$d; break; fi
    done
    if [ -z "$CUBLAS_DIR" ]; then
        f=$(find /usr /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
        [ -n "$f" ] && CUBLAS_DIR=$(dirname "$f")
    fi
fi
echo "== cuBLAS: $(ldconfig -p 2>/dev/null | grep -m1 'libcublas\.so\.13 ' | sed 's/.*=> //')${CUBLAS_DIR:+$CUBLAS_DIR/libcublas.so.13}"
DL=$W/lib${CUBLAS_DIR:+:$CUBLAS_DIR}

DATA=/usr/share/datasets/fashion-mnist
if [ ! -s "$DATA/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$DATA" && cp "$H"/data/*.gz "$DATA"/ && echo "== data: $DATA filled from the bundle (train cut to 10,000)"
else
    echo "== data: $DATA present"
fi

# The environment make check gives the tests (Makefile.am AM_TESTS_ENVIRONMENT),
# with this bundle's libraries. Only dcps's programs get LD_LIBRARY_PATH.
dcps_env() {
    env LD_LIBRARY_PATH="$DL" DCPS_BUILDDIR="$B" OPENBLAS_NUM_THREADS=1 TMPDIR="$W/tmp" \
        CK_VERBOSITY=verbose "$@"
}

echo "test,status,seconds" >"$OUT/tests.csv"
for t in tests/test_topk_gpu tests/test_residual_gpu tests/test_mlp_gpu \
    tests/daemon/test_gpu_runtime tests/daemon/test_step_gpu tests/daemon/test_trainer_gpu; do
    lim=$(cap 150)
    echo "== $t (timeout ${lim}s)" | tee -a "$TL"
    s=$(date +%s%N)
    (cd "$(dirname "$B/$t")" && dcps_env timeout -k 5 "$lim" "$B/$t") >>"$TL" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - s) / 1000000))
    sec=$((ms / 1000)).$(printf %03d $((ms % 1000)))
    case $rc in 0) v=PASS ;; 77) v=SKIP ;; 124 | 137) v=TIMEOUT ;; *) v=FAIL ;; esac
    echo "== $t: exit $rc $v ${sec}s" | tee -a "$TL"
    echo "$t,$v($rc),$sec" >>"$OUT/tests.csv"
done
echo "== tests:"
cat "$OUT/tests.csv"

# bench/topk: CPU (one thread) and GPU rows of the same run, the whole default grid.
lim=$(cap 90)
echo "== bench/topk (timeout ${lim}s)"
dcps_env timeout -k 5 "$lim" "$B/bench/topk" >"$OUT/topk.csv"
echo "bench/topk exit $?"
grep '^#' "$OUT/topk.csv"

# torch.topk on the same GPU, the grid of bench/topk's normal rows.
lim=$(cap 60)
echo "== bench/topk_torch.py (timeout ${lim}s)"
if python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout -k 5 "$lim" python3 "$H/topk_torch.py" >"$OUT/topk_torch.csv"
    echo "topk_torch.py exit $?"
else
    echo "no PyTorch with CUDA: skipped"
fi

# GPU top-k against CPU top-k and torch.topk, same run.
[ -e "$OUT/topk_torch.csv" ] || : >"$OUT/topk_torch.csv"
if grep -q '^gpu,' "$OUT/topk.csv"; then
    awk -F, 'FNR == 1 { f++ }
        f == 1 && $1 == "cpu" { cpu[$2 "," $3 "," $4] = $6 }
        f == 1 && $1 == "gpu" { gpu[$2 "," $3 "," $4] = $6; order[++m] = $2 "," $3 "," $4 }
        f == 2 && $1 == "torch_cuda" { tor["normal," $2 "," $3] = $5 }
        END { print "class,n,density,cpu_ms,gpu_ms,cpu_over_gpu,torch_ms,gpu_over_torch"
              for (i = 1; i <= m; i++) {
                  key = order[i]; t = ""; r = ""; c = ""
                  if (key in tor) { t = tor[key]; r = sprintf("%.2f", gpu[key] / tor[key]) }
                  if (gpu[key] > 0) c = sprintf("%.2f", cpu[key] / gpu[key])
                  printf("%s,%s,%s,%s,%s,%s\n", key, cpu[key], gpu[key], c, t, r) } }' \
        "$OUT/topk.csv" "$OUT/topk_torch.csv" >"$OUT/topk_ratios.csv"
    cat "$OUT/topk_ratios.csv"
fi

# dcps-worker trained on the CPU and on the GPU: one shard, one worker, the MLP
# 784-256-128-10, batch 64, 2 epochs of 10,000 examples, async SGD.
echo "device,run,final" >"$OUT/trainer.csv"
J=$W/tmp/bench.ini
cat >"$J" <<EOF
[job]
name = gpubench
workers = 1
[servers]
shards = tcp://127.0.0.1:*
[model]
layers = 784,256,128,10
[data]
train_images = $DATA/train-images-idx3-ubyte.gz
train_labels = $DATA/train-labels-idx1-ubyte.gz
test_images = $DATA/t10k-images-idx3-ubyte.gz
test_labels = $DATA/t10k-labels-idx1-ubyte.gz
batch_size = 64
epochs = 2
train_limit = 10000
[optimizer]
lr = 0.1
[worker]
log_every = 100000
timeout_ms = 5000
[server]
checkpoint_every = 0
EOF
for run in 1 2; do
    for dev in cpu gpu; do
        [ "$(left)" -gt 20 ] || { echo "== trainer: out of time"; break 2; }
        ep=$W/tmp/ep.$dev.$run
        rm -f "$ep"
        dcps_env "$B/dcps-server" --config "$J" --shard 0 --endpoint-file "$ep" >"$W/tmp/server.$dev.$run.log" 2>&1 &
        spid=$!
        for _ in $(seq 500); do [ -s "$ep" ] && break; sleep 0.02; done
        out=$(dcps_env timeout -k 5 "$(cap 60)" "$B/dcps-worker" --config "$J" --rank 0 \
            --set "servers.shards=$(head -1 "$ep")" --set "worker.device=$dev" 2>"$W/tmp/worker.$dev.$run.err")
        wrc=$?
        kill -TERM "$spid" 2>/dev/null
        wait "$spid"
        fin=$(printf '%s\n' "$out" | grep '^final:' | tail -1)
        echo "== trainer $dev run $run: exit $wrc: $fin"
        [ $wrc -eq 0 ] || cat "$W/tmp/worker.$dev.$run.err"
        echo "$dev,$run,\"$fin\"" >>"$OUT/trainer.csv"
    done
done

# With the time left: the kernel suites again under compute-sanitizer's memcheck
# (Check forks each test; the sanitizer follows the children). Output: tests.log.
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
for t in tests/test_topk_gpu tests/test_residual_gpu tests/test_mlp_gpu; do
    [ -n "$CS" ] || { echo "== no compute-sanitizer"; break; }
    [ "$(left)" -gt 30 ] || { echo "== memcheck: out of time"; break; }
    lim=$(cap 60)
    echo "== memcheck $t (timeout ${lim}s)" | tee -a "$TL"
    (cd "$(dirname "$B/$t")" && dcps_env timeout -k 5 "$lim" "$CS" --tool memcheck --error-exitcode 99 \
        "$B/$t") >>"$TL" 2>&1
    rc=$?
    case $rc in 0) v=PASS ;; 77) v=SKIP ;; 99) v=MEMCHECK_ERRORS ;; 124 | 137) v=TIMEOUT ;; *) v=FAIL ;; esac
    echo "== memcheck $t: exit $rc $v" | tee -a "$TL"
    echo "memcheck:$t,$v($rc)," >>"$OUT/tests.csv"
done

# Whatever a failing test left in its scratch folder (logs of the daemons it ran).
if [ -n "$(ls -A "$W/tmp" 2>/dev/null | grep -v -e '^bench.ini$' -e '^ep\.' -e '^server\.' -e '^worker\.')" ]; then
    tar -czf "$OUT/scratch.tar.gz" -C "$W" tmp 2>/dev/null && echo "== left in scratch: $OUT/scratch.tar.gz"
fi
echo "== done in $(($(date +%s) - T0)) s"
}
main 2>&1 | tee "$OUT/run.log"
