#!/bin/bash
# Makes the bundle that run.sh (beside this file) runs on a GPU machine whose
# image has Python 3.12 + PyTorch with CUDA, gcc and the CUDA toolkit, but none
# of dcps's libraries (libzmq, protobuf-c, inih ...).
#
#   bash bench/results/2026-11-26/gpu-torch/make_bundle.sh BUILD OUT
#
# BUILD: a build tree of this checkout configured with CUDA and the Python
# extension (../configure PYTHON=/usr/bin/python3; make; make tests/mlp_init),
# default shared+static, so that the convenience archives .libs/libdcpsclient.a
# and .libs/libdcpscore.a hold PIC objects (the extension is linked from them on
# the device, against the device's Python headers). OUT: the bundle folder
# (run.sh, run_tests.py and diag_cuda.py are copied next to bundle.tar.xz; with
# PHASES=FILE, FILE too, as phases.sh, which run.sh then runs instead of its own).
# Run from the repository's root. PY312_INCLUDE (optional): a Python 3.12
# include folder to carry, used only if the device's Python has no Python.h.
set -eu
B=$(cd "$1" && pwd)
O=$2
S=$(pwd)
H=$(cd "$(dirname "$0")" && pwd)
rm -rf "$O/stage" && mkdir -p "$O/stage"
T=$O/stage
# the sources the tests read (laid out as in the repository: harness.SRC)
mkdir -p "$T/src/python/dcps" "$T/src/python/tests" "$T/src/examples/torch" "$T/src/include"
cp -p configure.ac "$T/src/"
cp -p python/_dcps.c "$T/src/python/"
cp -p python/dcps/*.py "$T/src/python/dcps/"
cp -p python/tests/*.py "$T/src/python/tests/"
cp -p examples/torch/fashion_cnn.py "$T/src/examples/torch/"
# the headers _dcps.c includes (gcc -MM), config.h from the build tree
for h in $(gcc -MM -I. -I"$B" -I"$B/proto" -I"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" python/_dcps.c |
    tr ' \\' '\n\n' | grep '\.h$' | grep -v -e '^/usr/' -e '/python3\.'); do
    case $h in
    "$B"/* | build/*) cp -p "$h" "$T/src/include/" ;;
    *) mkdir -p "$T/src/include/$(dirname "$h")" && cp -p "$h" "$T/src/include/$h" ;;
    esac
done
# the archives the extension links (PIC: checked here) and CUDA's static runtime
mkdir -p "$T/lib/so"
for a in libdcpsclient.a libdcpscore.a; do
    n=$(readelf -rW "$B/.libs/$a" | awk '/^Relocation section/ { d = ($3 ~ /debug/) }
        !d && /R_X86_64_(32|32S) / { c++ } END { print c + 0 }')
    [ "$n" = 0 ] || { echo "$a has $n absolute relocations: not PIC" >&2; exit 1; }
    cp -p "$B/.libs/$a" "$T/lib/"
done
cudalib=$(sed -n 's/^CUDA_LIBS = -L\([^ ]*\) .*/\1/p' "$B/Makefile")
cp -p "$cudalib/libcudart_static.a" "$T/lib/"
# the programs, stripped, behind wrappers that give them the bundle's libraries
mkdir -p "$T/build/.bin" "$T/build/tests"
for p in dcps-server dcps-worker tests/mlp_init; do
    strip -o "$T/build/.bin/$(basename "$p")" "$B/$p"
    cat >"$T/build/$p" <<WRAP
#!/bin/sh
L=\$(cd "\$(dirname "\$0")" && pwd)
while [ ! -d "\$L/.bin" ]; do L=\$(dirname "\$L"); done
LD_LIBRARY_PATH="\$(dirname "\$L")/lib/so\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$L/.bin/$(basename "$p")" "\$@"
WRAP
    chmod +x "$T/build/$p"
done
# every shared library they and the extension need, but glibc's, libstdc++ and libgcc_s
for f in "$B/dcps-server" "$B/dcps-worker" "$B/tests/mlp_init" "$B/python/.libs/_dcps.so"; do
    ldd "$f" | awk '/=> \// { print $3 }'
done | sort -u | while read -r l; do
    case $(basename "$l") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
        libstdc++.so* | libgcc_s.so* | ld-linux*) ;;
    *) cp -L "$l" "$T/lib/so/" ;;
    esac
done
# the extension links these by name: -lzmq etc. need the .so names
for n in zmq protobuf-c inih; do
    f=$(ls "$T"/lib/so/lib$n.so.* | head -1)
    ln -sf "$(basename "$f")" "$T/lib/so/lib$n.so"
done
if [ -n "${PY312_INCLUDE:-}" ]; then
    mkdir -p "$T/py312" && cp -a "$PY312_INCLUDE" "$T/py312/include"
fi
tar -cJf "$O/bundle.tar.xz" -C "$T" .
rm -rf "$T"
cp -p "$H/run.sh" "$O/run.sh"
cp -p "$H/run_tests.py" "$H/diag_cuda.py" "$O/"
# PHASES (optional): a file of phases that run.sh runs instead of its own
[ -z "${PHASES:-}" ] || cp -p "$PHASES" "$O/phases.sh"
du -sh "$O"
