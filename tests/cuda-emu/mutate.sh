#!/bin/sh
# dcps tests — the mutation check of the SIMT emulator: breaks the kernels in
# ways a GPU would punish and the CPU build cannot see, and shows that the
# emulated suites catch each one.
#
# Run by `make emu-mutants` in a build tree (after the emulated suites are
# built), which passes the compilers and flags in the environment:
#   EMU_CC EMU_CFLAGS      compile kernels/blas_gpu.c as the emulated build does
#   EMU_CXX EMU_CXXFLAGS   compile a kernels/*_gpu.cu copy as host C++
#   EMU_LAUNCH_RE          the sed expression that rewrites k<<<cfg>>>(args)
#   EMU_LIBS               what the emulated suites link besides libdcpsemu
# Usage: mutate.sh SRCDIR. Works in tests/cuda-emu/mutants/ of the build tree:
# for each mutant it copies one source file, applies one sed expression (and
# fails if it changed nothing), compiles that file alone, links it in front of
# tests/cuda-emu/.libs/libdcpsemu.a (so it replaces the original object) with
# the suite's own test object, and runs the suite under every emulator
# configuration. Prints one line per mutant; exits 0 only if the unmutated
# suites pass and every mutant is caught.
set -u
srcdir=${1:?usage: mutate.sh SRCDIR}
out=tests/cuda-emu/mutants
lib=tests/cuda-emu/.libs/libdcpsemu.a
status=0
mkdir -p "$out"
test -f "$lib" || { echo "mutate.sh: $lib is missing: run make check first" >&2; exit 2; }

# run PROGRAM LOG: runs the suite (all configurations) with a time limit.
run() {
    timeout 600 "$1" >"$2" 2>&1
}

# why LOG: the first line that says what failed.
why() {
    grep -m1 -E ':[FE]:|EMU ERROR|fake cuBLAS' "$1" | cut -c1-160
}

echo "baseline: the unmutated emulated suites"
for t in topk_gpu mlp_gpu; do
    if run "tests/test_${t}_emu" "$out/baseline-$t.log"; then
        echo "  test_${t}_emu: pass"
    else
        echo "  test_${t}_emu: FAILS unmutated: $(why "$out/baseline-$t.log")"
        status=1
    fi
done

# mutant NAME FILE SUITE DESCRIPTION SED-EXPRESSION...
mutant() {
    name=$1 file=$2 suite=$3 what=$4
    shift 4
    dir=$out/$name
    rm -rf "$dir" && mkdir -p "$dir" || return 1
    base=${file##*/}
    cp "$srcdir/$file" "$dir/$base" || return 1
    for e in "$@"; do
        sed -i -e "$e" "$dir/$base" || return 1
    done
    if cmp -s "$srcdir/$file" "$dir/$base"; then
        echo "$name: NOT APPLIED ($file unchanged: the kernel moved on; update the mutant)"
        status=1
        return
    fi
    case $file in
    *.cu)
        { echo "#line 1 \"$srcdir/$file\""; sed -E "$EMU_LAUNCH_RE" "$dir/$base"; } \
            >"$dir/${base%.cu}.cpp" &&
            $EMU_CXX $EMU_CXXFLAGS -c -o "$dir/mutant.o" "$dir/${base%.cu}.cpp" ;;
    *.c)
        $EMU_CC $EMU_CFLAGS -c -o "$dir/mutant.o" "$dir/$base" ;;
    esac || { echo "$name: does not compile"; status=1; return; }
    # The program sits where the suites do, relative to tests/cuda-emu/fake.
    ln -sfn "$PWD/tests/cuda-emu" "$dir/cuda-emu"
    $EMU_CXX -o "$dir/test_${suite}_emu" "tests/test_${suite}_emu-test_${suite}.o" \
        "$dir/mutant.o" "$lib" -Wl,--export-dynamic $EMU_LIBS ||
        { echo "$name: does not link"; status=1; return; }
    if run "$dir/test_${suite}_emu" "$dir/run.log"; then
        echo "$name: SURVIVED test_${suite}_emu ($what)"
        status=1
    else
        echo "$name: caught by test_${suite}_emu ($what): $(why "$dir/run.log")"
    fi
}

mutant emit-sync kernels/topk_gpu.cu topk_gpu \
    "emit's __syncthreads between two block scans on one TempStorage removed" \
    '/__syncthreads(); \/\* tmp is used again next round \*\//d'
mutant ballot-after-return kernels/topk_gpu.cu topk_gpu \
    "cand_count: lanes past the candidates return before the full-mask ballots" \
    's/^\( *\)\(unsigned int gt = __ballot_sync(FULL, j < ncand && kk > t)\)/\1if (j >= ncand)\n\1    return;\n\1\2/'
mutant tie-rule kernels/topk_gpu.cu topk_gpu \
    "emit's tie rule my_eq < need made my_eq <= need" \
    's/(kk == t \&\& my_eq < need)/(kk == t \&\& my_eq <= need)/'
mutant read-no-barrier kernels/topk_gpu.cu topk_gpu \
    "read_pass: warp 0 adds the per-warp sums without waiting for the other warps" \
    '/^__global__ static void read_pass/,/^}/{/__syncthreads();/d}'
mutant read-overlap kernels/topk_gpu.cu topk_gpu \
    "read_pass: the unrolled loop steps READ_SUMS - 1 strides, reading entries twice" \
    's/i += READ_SUMS \* stride)/i += (READ_SUMS - 1) * stride)/'
mutant blas-unswapped kernels/blas_gpu.c mlp_gpu \
    "dcps_blas_sgemm passes the row-major operands to column-major cuBLAS unswapped" \
    's/op(tb), op(ta), n, m, k, &alpha, d_b, ldb, d_a,/op(ta), op(tb), m, n, k, \&alpha, d_a, lda, d_b,/' \
    's/^\( *\)lda, &beta, d_c, ldc));/\1ldb, \&beta, d_c, ldc));/'
mutant eval-no-wait model/mlp_gpu.cu mlp_gpu \
    "evaluate(): the compute stream no longer waits for the chunk's upload (copied[k])" \
    '/(rc = DCPS_CUDA_CHECK(cudaStreamWaitEvent(st, m->copied\[k\], 0))) != 0 ||/d'

if test $status = 0; then
    echo "all mutants caught"
else
    echo "mutation check FAILED"
fi
exit $status
