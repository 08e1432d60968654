#!/bin/bash
# dcps.torch's CUDA path on a real GPU: builds the extension dcps._dcps for the
# device's Python (3.12 there) from the bundle, then runs the CUDA cases of
# python/tests (test_torch.CudaModel, test_extension.DeviceArrays), a
# measurement of the same comparison with more settings (diag_cuda.py), a few
# CPU cases as a sanity check, and with the time left the two suites whole.
#
#   bash .gpu2/run.sh          (OUT: where the log goes; default /tmp/gpu2out)
#
# This is the copy kept with the results; the run used it as .gpu2/run.sh, an
# ignored folder at the repository's root made by make_bundle.sh (beside this
# copy), with run_tests.py and diag_cuda.py next to it and bundle.tar.xz:
#   src/     configure.ac, python/_dcps.c, python/dcps/*.py, the test modules,
#            examples/torch/fashion_cnn.py, include/ (the headers _dcps.c needs,
#            config.h of the build)
#   lib/     libdcpsclient.a, libdcpscore.a (PIC, libtool's convenience archives
#            of a shared build), libcudart_static.a (CUDA 13.0); so/: the shared
#            libraries of the programs and the extension but glibc's, libstdc++
#            and libgcc_s
#   build/   dcps-server, dcps-worker, tests/mlp_init: wrappers that give the
#            stripped programs in build/.bin the libraries of lib/so
#   py312/   Python 3.12 headers, used only if the device's Python has none
#   data/ (beside the tarball): Fashion-MNIST, train-* cut to 10,000 examples
set -u
H=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu2out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET:-280}   # seconds for the whole script; each step gets what is left
left() { echo $((BUDGET - ($(date +%s) - T0))); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
PY=${PY:-python3}

main() {
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -srm)"
echo "== nvidia-smi -L"
nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
echo "== $(command -v "$PY"): $("$PY" --version 2>&1); $(gcc --version | head -1)"
"$PY" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1
"$PY" -c 'import torch, numpy; print("torch.version.cuda", torch.version.cuda, "numpy", numpy.__version__, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' 2>&1

W=${TMPDIR:-/tmp}/dcps-gpu2
rm -rf "$W"
mkdir -p "$W/tmp"
tar -xJf "$H/bundle.tar.xz" -C "$W" || { echo "cannot unpack the bundle"; return 1; }

# The extension, as Makefile.am's python/_dcps.la links it (the client and core
# archives whole, the client's libraries, CUDA's static runtime, only
# PyInit__dcps exported), for this Python; the bundle's libraries by RPATH
# (DT_RPATH, so that libzmq's own dependencies are found there too).
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ ! -e "$PYINC/Python.h" ]; then
    if [ "$PYVER" = 3.12 ] && [ -e "$W/py312/include/Python.h" ]; then
        echo "== no $PYINC/Python.h: the bundle's Python 3.12 headers"
        PYINC=$W/py312/include
    else
        echo "== no Python.h for Python $PYVER"; return 1
    fi
fi
EXT=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")')
mkdir -p "$W/build/python/dcps"
cp "$W"/src/python/dcps/*.py "$W/build/python/dcps/"
echo '{ global: PyInit__dcps; local: *; };' >"$W/dcps.ver"
SO=$W/build/python/dcps/_dcps$EXT
STDCXX=-lstdc++   # g++'s link name; without it, the runtime library itself
case $(gcc -print-file-name=libstdc++.so) in /*) ;; *)
    STDCXX=$(gcc -print-file-name=libstdc++.so.6)
    case $STDCXX in /*) ;; *) STDCXX=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }') ;; esac ;;
esac
echo "== gcc: $SO (Python.h from $PYINC)"
gcc -shared -fPIC -O2 -std=c11 -D_GNU_SOURCE -fno-math-errno -pthread -Wall \
    -I"$PYINC" -I"$W/src/include" "$W/src/python/_dcps.c" \
    -Wl,--whole-archive "$W/lib/libdcpsclient.a" "$W/lib/libdcpscore.a" -Wl,--no-whole-archive \
    -L"$W/lib/so" -lzmq -lprotobuf-c -linih "$W/lib/libcudart_static.a" \
    -ldl -lrt $STDCXX -lpthread -lm \
    -Wl,--disable-new-dtags -Wl,-rpath,"$W/lib/so" -Wl,--version-script="$W/dcps.ver" \
    -Wl,-soname,_dcps.so -o "$SO" || { echo "== the extension did not link"; return 1; }
echo "== ldd (not the bundle's):"
ldd "$SO" | grep -v "$W/lib/so" | sed 's/ (0x.*//'

DATA=/usr/share/datasets/fashion-mnist
if [ ! -s "$DATA/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$DATA" && cp "$H"/data/*.gz "$DATA"/ && echo "== data: $DATA filled from the bundle (train cut to 10,000)"
else
    echo "== data: $DATA present"
fi

# What make check gives the Python suites (Makefile.am AM_TESTS_ENVIRONMENT).
export DCPS_BUILDDIR=$W/build DCPS_SRCDIR=$W/src PYTHONPATH=$W/build/python \
    OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TMPDIR=$W/tmp
"$PY" -c 'import dcps, dcps._dcps as d; print("== dcps", dcps.__version__, "gpu_count", d.gpu_count(), d.__file__)' 2>&1

echo "phase,exit,seconds" >"$W/phases.csv"
phase() {  # phase NAME LIMIT COMMAND...
    local name=$1 lim rc s ms
    lim=$(cap "$2")
    shift 2
    echo "== $name (timeout ${lim}s): $*"
    s=$(date +%s%N)
    timeout -k 5 "$lim" "$@"
    rc=$?
    ms=$((($(date +%s%N) - s) / 1000000))
    echo "== $name: exit $rc, $((ms / 1000)).$(printf %03d $((ms % 1000))) s"
    echo "$name,$rc,$((ms / 1000)).$(printf %03d $((ms % 1000)))" >>"$W/phases.csv"
}
TD=$W/src/python/tests
if [ -e "$H/phases.sh" ]; then  # another run's phases (make_bundle.sh PHASES=)
    . "$H/phases.sh"
else
# 1. the CUDA cases
phase gpu-tests 150 "$PY" "$H/run_tests.py" test_torch.CudaModel test_extension.DeviceArrays
# 2. the same comparison measured, more settings
phase diag 70 "$PY" "$H/diag_cuda.py"
# 3. CPU sanity
phase cpu-sanity 90 "$PY" "$H/run_tests.py" test_torch.Refusals test_torch.SyncEqualsSGD \
    test_extension.Errors test_extension.Arrays
# 4. with the time left, the suites whole, as make check runs them
[ "$(left)" -gt 30 ] && phase test_extension.py 30 "$PY" "$TD/test_extension.py"
[ "$(left)" -gt 90 ] && phase test_torch.py 200 "$PY" "$TD/test_torch.py"
fi
echo "== phases:"
cat "$W/phases.csv"
cp "$W/phases.csv" "$OUT/phases.csv"
if ls -d "$W"/tmp/dcps-test-* >/dev/null 2>&1; then
    tar -czf "$OUT/scratch.tar.gz" -C "$W" tmp 2>/dev/null && echo "== kept scratch: $OUT/scratch.tar.gz"
fi
echo "== done in $(($(date +%s) - T0)) s"
}
set -o pipefail
main 2>&1 | tee "$OUT/torch_gpu.log"
