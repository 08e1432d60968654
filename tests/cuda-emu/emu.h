/* dcps tests — the SIMT emulator's device side: CUDA kernel source run on the host.
 *
 * The build force-includes this header (g++ -include) into each kernels/X_gpu.cu,
 * copied as host C++ with one rewrite: `k<<<cfg>>>(args)` becomes
 * `emu::launch(emu::cfg(cfg), k, args)`. Nothing else in the kernel source
 * changes, so the tests run the code that nvcc compiles.
 *
 * What it models (the runtime is tests/cuda-emu/emu_rt.cpp):
 *   - every CUDA thread is a fiber (ucontext); the threads of a block run in a
 *     fresh random order after every __syncthreads and warp collective;
 *   - several blocks of a grid are in flight at once and take turns in a random
 *     order, each with its own __shared__ storage (see __shared__ below), so
 *     blocks interleave and races between them on global memory can show;
 *   - a warp collective whose mask names an exited lane, lanes of one warp in
 *     different collectives, a thread leaving while others wait at a barrier,
 *     and a block that cannot go on abort with a message;
 *   - streams are lazy queues, run in random interleavings that respect stream
 *     order and events; copies from and to pinned memory happen when the queue
 *     runs, not when issued.
 * What it does not model: weak memory ordering, device math (the host's
 * functions are used), anything about speed.
 *
 * Contract with the kernels: they use only what is declared here and in the
 * stand-in headers of tests/cuda-emu/inc; anything else is a compile error, not
 * a silent difference. */
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

/* Per-block __shared__ storage. A kernel's __shared__ variables become
 * static thread_local locals, and every block in flight runs its threads (the
 * fibers) on a host thread of its own: each block therefore sees its own copy
 * of every __shared__ variable, however the blocks interleave, while the kernel
 * source stays unmodified. The scheduler hands the turn from one block's host
 * thread to the next, so only one thread ever runs and a seed still gives one
 * interleaving (emu_rt.cpp, run_turn). A host thread serves one block after
 * another, so a block starts with what the previous one left there: garbage, as
 * on a GPU. (A linker section swapped in and out per block would be simpler,
 * but GCC 12 ignores section attributes on the static locals of templates,
 * which pick<W> and cand_hist<W> are.) */
#define __shared__ static thread_local

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

/* The runtime's C++ conveniences (cuda_runtime.h has the same overloads). */
template <class T> inline cudaError_t cudaMalloc(T **p, size_t n)
{
    return cudaMalloc((void **)p, n);
}
template <class T> inline cudaError_t cudaHostAlloc(T **p, size_t n, unsigned f)
{
    return cudaHostAlloc((void **)p, n, f);
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n)
{
    return cudaMemsetAsync(p, v, n, 0);
}

namespace emu {
extern dim3 g_grid, g_block; /* of the grid now running; one grid runs at a time */
unsigned cur_lin();          /* the running thread's linear index in its block */
dim3 &cur_tid();
dim3 &cur_bid();
[[noreturn]] void die(const char *what);
/* __syncthreads and its _count/_or forms: returns the count of threads whose
 * pred was nonzero, and their OR in *orres when given. */
unsigned barrier(int pred, int *orres);
enum { BALLOT, SHFL, SHFL_DOWN, MATCH_ANY };
/* A warp collective of the given kind over mask: every lane in mask must call
 * it with the same kind and mask; returns this lane's result. */
uint64_t warp_op(int kind, unsigned mask, uint64_t v, int arg);

struct cfg_t {
    dim3 g, b;
    cudaStream_t st;
};
inline cfg_t cfg(dim3 g, dim3 b, size_t = 0, cudaStream_t st = 0)
{
    return {g, b, st};
}
/* Checks the configuration (a bad one sets the launch error, as the runtime
 * does) and queues the grid on c.st; body runs once per thread. */
void enqueue_grid(cfg_t c, std::function<void()> body);
/* The launch: the arguments are copied now, as a real launch copies them. */
template <class... K, class... A> void launch(cfg_t c, void (*k)(K...), A... a)
{
    auto tup = std::make_shared<std::tuple<std::decay_t<K>...>>(a...);
    enqueue_grid(c, [k, tup] { std::apply(k, *tup); });
}
} // namespace emu

#define threadIdx (emu::cur_tid())
#define blockIdx (emu::cur_bid())
#define blockDim (emu::g_block)
#define gridDim (emu::g_grid)

inline void __syncthreads()
{
    emu::barrier(0, nullptr);
}
inline int __syncthreads_count(int p)
{
    return (int)emu::barrier(p, nullptr);
}
inline int __syncthreads_or(int p)
{
    int r;
    emu::barrier(p, &r);
    return r;
}
inline unsigned __ballot_sync(unsigned m, int p)
{
    return (unsigned)emu::warp_op(emu::BALLOT, m, p != 0, 0);
}
template <class T> inline T __shfl_sync(unsigned m, T v, int src)
{
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = emu::warp_op(emu::SHFL, m, u, src);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d)
{
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = emu::warp_op(emu::SHFL_DOWN, m, u, (int)d);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
inline unsigned __match_any_sync(unsigned m, unsigned v)
{
    return (unsigned)emu::warp_op(emu::MATCH_ANY, m, v, 0);
}
inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}
inline int __ffs(unsigned x)
{
    return __builtin_ffs((int)x);
}
inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
/* The host is SSE, round to nearest, no flush to zero: the plain operators are
 * the _rn ones; volatile keeps the compiler from contracting them into an FMA. */
inline float __fadd_rn(float a, float b)
{
    volatile float r = a + b;
    return r;
}
inline float __fsub_rn(float a, float b)
{
    volatile float r = a - b;
    return r;
}
inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
/* Threads are fibers that switch only at barriers and collectives, so a
 * read-modify-write is atomic as it stands. */
template <class T, class V> inline T atomicAdd(T *p, V v)
{
    T o = *p;
    *p = o + (T)v;
    return o;
}
template <class A, class B> inline auto min(A a, B b)
{
    return a < b ? a : b;
}
template <class A, class B> inline auto max(A a, B b)
{
    return a > b ? a : b;
}

/* Reference stand-ins for the two CUB algorithms the kernels use. */
namespace cub {
template <class T, int N> struct BlockScan {
    struct TempStorage {
        T v[N];
    };
    TempStorage &s;
    BlockScan(TempStorage &t) : s(t) {}
    void ExclusiveSum(T in, T &out)
    {
        T a;
        ExclusiveSum(in, out, a);
    }
    /* No barrier at the end: as with CUB, reusing the storage needs the
     * caller's __syncthreads, and a missing one shows as a wrong sum. */
    void ExclusiveSum(T in, T &out, T &agg)
    {
        unsigned t = emu::cur_lin();
        if (emu::g_block.x * emu::g_block.y * emu::g_block.z != (unsigned)N)
            emu::die("BlockScan with a block size other than its template's");
        s.v[t] = in;
        __syncthreads();
        T acc = 0, tot = 0;
        for (int i = 0; i < N; i++) {
            if ((unsigned)i < t)
                acc += s.v[i];
            tot += s.v[i];
        }
        out = acc;
        agg = tot;
    }
};
struct DeviceScan {
    /* CUB's two-phase protocol: with tmp NULL only the scratch size is set. */
    template <class In, class Out, class NumT>
    static cudaError_t ExclusiveSum(void *tmp, size_t &bytes, In in, Out out, NumT n,
                                    cudaStream_t st = 0)
    {
        if (!tmp) {
            bytes = 16;
            return cudaSuccess;
        }
        if (bytes < 16)
            return cudaErrorInvalidValue;
        emu::enqueue_grid(emu::cfg(1, 1, 0, st), [in, out, n] {
            typedef typename std::remove_reference<decltype(*out)>::type T;
            T acc = 0;
            for (NumT i = 0; i < n; i++) {
                T v = in[i];
                out[i] = acc;
                acc += v;
            }
        });
        return cudaPeekAtLastError(); /* as CUB: a failed launch is left pending */
    }
};
} // namespace cub
