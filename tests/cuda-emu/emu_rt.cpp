/* dcps tests — the SIMT emulator's runtime: fibers, barriers and warp
 * collectives, blocks in flight with their own shared memory, lazy streams and
 * events, and the CUDA runtime API of tests/cuda-emu/inc/cuda_runtime_api.h.
 *
 * One host thread runs at a time (each block in flight has a host thread of its
 * own, which gives it its own __shared__ storage, but they run strictly in
 * turn, in the order the seed draws). Work issued on a stream is queued and runs
 * when the host waits for it (a synchronisation, a copy into pageable memory, a
 * free), and now and then the front of another stream runs in between, so the
 * order of independent streams changes from run to run. A grid runs to its end
 * once started; inside it, blocks and threads interleave at every barrier and
 * warp collective in an order drawn from EMU_SEED.
 *
 * Environment, read once at start:
 *   EMU_SEED    the interleaving seed (default 1);
 *   EMU_SMS     the SM count the device reports (default 2; an H100 has 132);
 *   EMU_BLOCKS  blocks of a grid in flight at once (default 4);
 *   EMU_EAGER   run stream work when issued instead of lazily.
 * Failures a test can ask for are in tests/cuda-emu/emu_hooks.h. */
#include "emu.h"
#include "tests/cuda-emu/emu_hooks.h"

#include <pthread.h>
#include <ucontext.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <vector>

namespace emu {

/* ---- fibers: a context switch ------------------------------------------------
 * swapcontext() also saves and restores the signal mask, a system call each
 * way, which made it two thirds of the emulator's time. Fibers never touch the
 * mask, so on x86-64 a switch is done here by hand: push the callee-saved
 * registers and the SSE/x87 control words, swap stack pointers, pop. Elsewhere
 * ucontext does it. ctx_make() prepares a context that starts in fn. */
#if defined(__x86_64__)
struct Ctx {
    void *sp;
};
extern "C" void emu_ctx_switch(void **save_sp, void *load_sp);
asm(R"(
    .text
    .globl emu_ctx_switch
    .hidden emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
)");
static void ctx_switch(Ctx &save, Ctx &load)
{
    emu_ctx_switch(&save.sp, load.sp);
}
/* The new stack, from its top: a zero return address for fn (which never
 * returns; the slot keeps the ABI's alignment at fn's entry), fn as the return
 * address of emu_ctx_switch, six zeroed registers, the current control words. */
static void ctx_make(Ctx &c, char *stack, size_t size, void (*fn)())
{
    uint64_t *top = (uint64_t *)((uintptr_t)(stack + size) & ~(uintptr_t)15);
    uint32_t csr[2];
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    top[-1] = 0;
    top[-2] = (uint64_t)(uintptr_t)fn;
    for (int r = 3; r <= 8; r++)
        top[-r] = 0;
    memcpy(&top[-9], csr, sizeof csr);
    c.sp = &top[-9];
}
#else
struct Ctx {
    ucontext_t uc;
};
static void ctx_switch(Ctx &save, Ctx &load)
{
    swapcontext(&save.uc, &load.uc);
}
static void ctx_make(Ctx &c, char *stack, size_t size, void (*fn)())
{
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, fn, 0);
}
#endif

static unsigned env_u(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

static std::mt19937_64 rng(env_u("EMU_SEED", 1));
static const unsigned sms = env_u("EMU_SMS", 2), in_flight = env_u("EMU_BLOCKS", 4);
static const bool eager = getenv("EMU_EAGER") != NULL;

/* ---- threads, warps, blocks ------------------------------------------------- */

struct Warp {
    unsigned in_mask = 0, gen = 0, exited = 0, mask = 0;
    int kind = -1;
    uint64_t in[32], out[32];
    int arg[32];
};
struct Fiber;
struct Block {
    dim3 bid;
    unsigned live = 0, arrived = 0, gen = 0, acc_count = 0, res_count = 0;
    int acc_or = 0, res_or = 0;
    Warp warps[32];
    std::vector<Fiber> fibers;
};
struct Fiber {
    Ctx ctx;
    dim3 tid;
    unsigned lin;
    Block *blk;
    bool done;
};

/* Only one host thread runs at any time (see run_turn), so these need no lock;
 * the hand-over's mutex orders every access. */
static Fiber *cur;
dim3 g_grid, g_block;
static thread_local Ctx sched; /* where a fiber of this host thread yields to */
static unsigned long progress;        /* bumped by every barrier, collective and exit */
static const std::function<void()> *body;

unsigned cur_lin()
{
    return cur->lin;
}
dim3 &cur_tid()
{
    return cur->tid;
}
dim3 &cur_bid()
{
    return cur->blk->bid;
}
void die(const char *what)
{
    if (cur)
        fprintf(stderr, "EMU ERROR: %s (block %u, thread %u)\n", what, cur->blk->bid.x, cur->lin);
    else
        fprintf(stderr, "EMU ERROR: %s\n", what);
    abort();
}
static void yield()
{
    ctx_switch(cur->ctx, sched);
}

unsigned barrier(int pred, int *orres)
{
    Block *b = cur->blk;
    unsigned g = b->gen;
    b->acc_count += pred != 0;
    b->acc_or |= pred != 0;
    progress++;
    if (++b->arrived == b->live) {
        b->res_count = b->acc_count;
        b->res_or = b->acc_or;
        b->acc_count = 0;
        b->acc_or = 0;
        b->arrived = 0;
        b->gen++;
    } else {
        while (b->gen == g)
            yield();
    }
    if (orres)
        *orres = b->res_or;
    return b->res_count;
}

/* The last lane to arrive computes every lane's result; the others wait for
 * the warp's generation to change. */
uint64_t warp_op(int kind, unsigned mask, uint64_t v, int arg)
{
    Block *b = cur->blk;
    unsigned lane = cur->lin % 32;
    Warp &w = b->warps[cur->lin / 32];
    if (!(mask >> lane & 1))
        die("calling lane not in the mask");
    if (mask & w.exited)
        die("warp collective names an exited (or nonexistent) lane");
    if (w.in_mask == 0) {
        w.kind = kind;
        w.mask = mask;
    } else if (w.kind != kind || w.mask != mask) {
        die("lanes of one warp in different collectives or masks");
    }
    w.in[lane] = v;
    w.arg[lane] = arg;
    w.in_mask |= 1u << lane;
    unsigned g = w.gen;
    progress++;
    if (w.in_mask == mask) {
        uint64_t r = 0;
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1))
                continue;
            switch (kind) {
            case BALLOT:
                r |= (uint64_t)(w.in[l] != 0) << l;
                break;
            case SHFL: {
                int s = w.arg[l] & 31;
                if (!(mask >> s & 1))
                    die("shfl source lane not in the mask");
                w.out[l] = w.in[s];
                break;
            }
            case SHFL_DOWN: {
                int s = l + w.arg[l];
                if (s < 32 && !(mask >> s & 1))
                    die("shfl_down source lane not in the mask");
                w.out[l] = s < 32 ? w.in[s] : w.in[l];
                break;
            }
            case MATCH_ANY: {
                uint64_t m = 0;
                for (int j = 0; j < 32; j++)
                    if ((mask >> j & 1) && w.in[j] == w.in[l])
                        m |= 1ull << j;
                w.out[l] = m;
                break;
            }
            }
        }
        if (kind == BALLOT)
            for (int l = 0; l < 32; l++)
                w.out[l] = r;
        w.in_mask = 0;
        w.gen++;
    } else {
        while (w.gen == g) {
            if (mask & w.exited)
                die("warp collective waits for a lane that exited");
            yield();
        }
    }
    return w.out[lane];
}

static void trampoline()
{
    (*body)();
    Fiber *f = cur;
    Block *b = f->blk;
    f->done = true;
    b->warps[f->lin / 32].exited |= 1u << (f->lin % 32);
    b->live--;
    progress++;
    if (b->arrived && b->arrived == b->live)
        die("a thread exited while others wait at __syncthreads");
    ctx_switch(f->ctx, sched);
}

/* The host threads that run blocks, one per slot of blocks in flight. A turn is
 * handed to a worker and the scheduler waits until it is handed back, so the
 * threads run strictly one at a time, in the scheduler's (seeded) order; what
 * they are for is their thread_local storage, the blocks' __shared__ memory. */
struct Worker {
    std::mutex m;
    std::condition_variable cv;
    Block *todo = nullptr; /* the block whose turn it is; NULL when done */
};
static std::vector<Worker *> workers;

/* Runs every unfinished thread of b, in a random order, to its next barrier,
 * collective or exit: one turn of block b. */
static void turn_of(Block *b)
{
    std::vector<unsigned> run(b->fibers.size());
    for (unsigned t = 0; t < run.size(); t++)
        run[t] = t;
    std::shuffle(run.begin(), run.end(), rng);
    for (unsigned t : run) {
        Fiber &f = b->fibers[t];
        if (f.done)
            continue;
        cur = &f;
        ctx_switch(sched, f.ctx);
        cur = nullptr;
    }
}

static void *work(void *arg)
{
    Worker *w = (Worker *)arg;
    std::unique_lock<std::mutex> lock(w->m);
    for (;;) {
        w->cv.wait(lock, [w] { return w->todo != nullptr; });
        turn_of(w->todo);
        w->todo = nullptr;
        w->cv.notify_all();
    }
    return NULL;
}

/* A child of fork() has none of its parent's worker threads (Check forks a
 * process per test): it starts its own pool, leaking the parent's records. */
static void forget_workers()
{
    workers.clear();
}

/* Gives block b its turn on the host thread of slot s and waits for it. */
static void run_turn(size_t s, Block *b)
{
    while (workers.size() <= s) {
        static std::once_flag atfork;
        std::call_once(atfork, [] { pthread_atfork(NULL, NULL, forget_workers); });
        Worker *w = new Worker;
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, work, w) != 0)
            die("cannot start a host thread for a block");
        pthread_attr_destroy(&attr);
        workers.push_back(w);
    }
    Worker *w = workers[s];
    std::unique_lock<std::mutex> lock(w->m);
    w->todo = b;
    w->cv.notify_all();
    w->cv.wait(lock, [w] { return w->todo == nullptr; });
}

static const size_t STACK = 1 << 16; /* bytes per thread; kernels keep little on it */

/* Starts block number id of the grid in slot b, its threads on stacks. */
static void start_block(Block &b, size_t id, cfg_t c, unsigned nt, char *stacks)
{
    /* Reset in place: the fibers' array is reused, not reallocated, per block. */
    b.live = nt;
    b.arrived = b.gen = b.acc_count = b.res_count = 0;
    b.acc_or = b.res_or = 0;
    for (Warp &w : b.warps)
        w = Warp();
    b.bid = dim3(id % c.g.x, id / c.g.x % c.g.y, id / c.g.x / c.g.y);
    unsigned nwarps = (nt + 31) / 32;
    if (nt % 32) /* lanes past the block's end count as exited */
        b.warps[nwarps - 1].exited = ~0u << (nt % 32);
    b.fibers.resize(nt);
    for (unsigned t = 0; t < nt; t++) {
        Fiber &f = b.fibers[t];
        f.lin = t;
        f.tid = dim3(t % c.b.x, t / c.b.x % c.b.y, t / c.b.x / c.b.y);
        f.blk = &b;
        f.done = false;
        ctx_make(f.ctx, stacks + t * STACK, STACK, trampoline);
    }
}

/* Runs a whole grid. Up to in_flight blocks are resident at once, each in a slot
 * with its own stacks and host thread (so its own shared memory); blocks start
 * in a random order. In a round every resident block gets a turn with
 * probability 3/4 (at least one does), in a random order (run_turn). A finished
 * block frees its slot for the next. A round in which no thread moves is a
 * deadlock. */
static void run_grid(cfg_t c, const std::function<void()> &fn)
{
    unsigned nt = c.b.x * c.b.y * c.b.z;
    size_t nb = (size_t)c.g.x * c.g.y * c.g.z;
    size_t slots = std::min<size_t>(nb, in_flight ? in_flight : 1);
    g_grid = c.g;
    g_block = c.b;
    body = &fn;
    std::vector<size_t> order(nb);
    for (size_t i = 0; i < nb; i++)
        order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    static std::vector<char> stacks; /* grows between grids only: no fiber lives then */
    if (stacks.size() < slots * nt * STACK)
        stacks.resize(slots * nt * STACK);
    std::vector<Block> slot(slots);
    std::vector<bool> busy(slots, false);
    std::vector<size_t> turn(slots);
    size_t next = 0, running = 0;
    for (;;) {
        for (size_t s = 0; s < slots && next < nb; s++)
            if (!busy[s]) {
                start_block(slot[s], order[next++], c, nt, &stacks[s * nt * STACK]);
                busy[s] = true;
                running++;
            }
        if (running == 0)
            break;
        for (size_t s = 0; s < slots; s++)
            turn[s] = s;
        std::shuffle(turn.begin(), turn.end(), rng);
        unsigned long p0 = progress;
        bool any = false;
        for (size_t s : turn) {
            if (!busy[s] || (any && rng() % 4 == 0))
                continue;
            any = true;
            run_turn(s, &slot[s]);
            if (slot[s].live == 0) {
                busy[s] = false;
                running--;
            }
        }
        if (progress == p0)
            die("deadlock: no thread of the blocks in flight can go on");
    }
}

/* ---- streams and events ------------------------------------------------------ */

struct Event;
/* One queued operation: work (fn), a wait for an event's generation, or the
 * recording of one. */
struct Op {
    std::function<void()> fn;
    Event *wait = nullptr;
    unsigned long wait_gen = 0;
    Event *rec = nullptr;
    unsigned long rec_gen = 0;
};
struct Stream {
    std::deque<Op> q;
};
struct Event {
    unsigned long recorded = 0, completed = 0;
    Stream *on = nullptr;
};
static Stream legacy;
static std::vector<Stream *> streams{&legacy};
static std::map<uintptr_t, size_t> pinned, device; /* allocations: start -> bytes */
static size_t device_used, device_limit;
static int depth;

static Stream *S(cudaStream_t s)
{
    return s ? (Stream *)s : &legacy;
}
static bool is_pinned(const void *p)
{
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin())
        return false;
    --it;
    return (uintptr_t)p < it->first + it->second;
}
static void run_one(Stream *s);
static void run_until(Event *e, unsigned long g)
{
    while (e->completed < g) {
        if (!e->on || e->on->q.empty())
            die("waiting for an event that can never complete");
        run_one(e->on);
    }
}
/* Now and then, run the front of another stream whose wait is satisfied. */
static void jitter()
{
    if (depth > 4 || streams.size() < 2 || rng() % 3)
        return;
    Stream *o = streams[rng() % streams.size()];
    if (o->q.empty())
        return;
    Op &f = o->q.front();
    if (f.wait && f.wait->completed < f.wait_gen)
        return;
    run_one(o);
}
static void run_one(Stream *s)
{
    depth++;
    if (s->q.front().wait)
        run_until(s->q.front().wait, s->q.front().wait_gen);
    Op op = std::move(s->q.front());
    s->q.pop_front();
    if (op.fn)
        op.fn();
    if (op.rec && op.rec_gen > op.rec->completed)
        op.rec->completed = op.rec_gen;
    jitter();
    depth--;
}
static void drain(Stream *s)
{
    while (!s->q.empty())
        run_one(s);
}
static void drain_all()
{
    for (size_t i = 0; i < streams.size(); i++)
        drain(streams[i]);
}
static void enqueue(cudaStream_t st, std::function<void()> fn)
{
    Op op;
    op.fn = std::move(fn);
    S(st)->q.push_back(std::move(op));
    if (eager)
        drain(S(st));
}

/* ---- errors ------------------------------------------------------------------ */

/* As the runtime: a failing call returns its error and also leaves it as the
 * thread's last error, which cudaGetLastError() returns and clears. */
static cudaError_t last_error;
static bool old_driver;
static unsigned long launch_countdown;

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

void enqueue_grid(cfg_t c, std::function<void()> fn)
{
    unsigned nt = c.b.x * c.b.y * c.b.z;
    if (old_driver) {
        fail(cudaErrorInsufficientDriver);
        return;
    }
    if (launch_countdown && --launch_countdown == 0) {
        fail(cudaErrorLaunchOutOfResources);
        return;
    }
    if (nt == 0 || nt > 1024 || c.g.x == 0 || c.g.x > 0x7fffffffu || c.g.y > 65535 ||
        c.g.z > 65535 || c.g.y == 0 || c.g.z == 0) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    enqueue(c.st, [c, fn] { run_grid(c, fn); });
}
} // namespace emu

using namespace emu;

/* Every entry point but the error and version queries starts with this: with a
 * driver too old for the runtime, nothing works. */
#define NEEDS_DRIVER()                                                                             \
    do {                                                                                           \
        if (old_driver)                                                                            \
            return fail(cudaErrorInsufficientDriver);                                              \
    } while (0)

extern "C" {

void emu_set_old_driver(void)
{
    old_driver = true;
}
void emu_set_device_bytes(size_t bytes)
{
    device_limit = bytes;
}
void emu_fail_launch(unsigned long nth)
{
    launch_countdown = nth;
}
size_t emu_pending(void)
{
    size_t n = 0;
    for (Stream *s : streams)
        n += s->q.size();
    return n;
}

/* For the stand-in cuBLAS (fakecublas.c): queue fn(ctx) on stream. */
void emu_host_enqueue(void *stream, void (*fn)(void *), void *ctx)
{
    enqueue((cudaStream_t)stream, [fn, ctx] { fn(ctx); });
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}
const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInitializationError:
        return "initialization error";
    case cudaErrorLaunchOutOfResources:
        return "too many resources requested for launch";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorStubLibrary:
        return "CUDA driver is a stub library";
    case cudaErrorSystemDriverMismatch:
        return "system has unsupported display driver / cuda driver combination";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    }
    return "unrecognized error code";
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}
/* With the old driver: an R550, whose newest CUDA is 12.4. */
cudaError_t cudaDriverGetVersion(int *v)
{
    *v = old_driver ? 12040 : 13000;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0;
    NEEDS_DRIVER();
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d)
{
    NEEDS_DRIVER();
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int)
{
    NEEDS_DRIVER();
    snprintf(p->name, sizeof p->name, "SIMT emulator (%u SMs)", sms);
    p->multiProcessorCount = (int)sms;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr, int)
{
    NEEDS_DRIVER();
    *v = (int)sms;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = NULL;
    NEEDS_DRIVER();
    if (device_limit && n > device_limit - std::min(device_used, device_limit))
        return fail(cudaErrorMemoryAllocation);
    if (!(*p = malloc(n ? n : 1)))
        return fail(cudaErrorMemoryAllocation);
    memset(*p, 0xcd, n); /* garbage, as on a device */
    device[(uintptr_t)*p] = n;
    device_used += n;
    return cudaSuccess;
}
/* Like the runtime's: waits for all work of the device first. */
cudaError_t cudaFree(void *p)
{
    NEEDS_DRIVER();
    drain_all();
    auto it = device.find((uintptr_t)p);
    if (p && it == device.end())
        return fail(cudaErrorInvalidValue);
    if (p) {
        device_used -= it->second;
        device.erase(it);
    }
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned)
{
    *p = NULL;
    NEEDS_DRIVER();
    if (!(*p = malloc(n ? n : 1)))
        return fail(cudaErrorMemoryAllocation);
    pinned[(uintptr_t)*p] = n ? n : 1;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p)
{
    NEEDS_DRIVER();
    drain_all();
    pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    NEEDS_DRIVER();
    enqueue(s, [p, v, n] { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st)
{
    NEEDS_DRIVER();
    if (k == cudaMemcpyHostToDevice && !is_pinned(src)) {
        /* Pageable source: staged now, written to the device in stream order. */
        auto snap = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        enqueue(st, [d, snap, n] { memcpy(d, snap->data(), n); });
    } else if (k == cudaMemcpyDeviceToHost && !is_pinned(d)) {
        /* Pageable destination: returns once the copy is done. */
        drain(S(st));
        memcpy(d, src, n);
    } else {
        enqueue(st, [d, src, n] { memmove(d, src, n); });
    }
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    NEEDS_DRIVER();
    drain(S(s));
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = NULL;
    NEEDS_DRIVER();
    Stream *n = new Stream;
    streams.push_back(n);
    *s = (cudaStream_t)n;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    NEEDS_DRIVER();
    Stream *p = S(s);
    if (p == &legacy)
        return fail(cudaErrorInvalidValue);
    drain(p);
    streams.erase(std::find(streams.begin(), streams.end(), p));
    delete p;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned)
{
    *e = NULL;
    NEEDS_DRIVER();
    *e = (cudaEvent_t) new Event;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    NEEDS_DRIVER();
    delete (Event *)e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    NEEDS_DRIVER();
    Event *ev = (Event *)e;
    Op op;
    op.rec = ev;
    op.rec_gen = ++ev->recorded;
    ev->on = S(s);
    S(s)->q.push_back(std::move(op));
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned)
{
    NEEDS_DRIVER();
    Event *ev = (Event *)e;
    if (ev->recorded == 0)
        return cudaSuccess;
    Op op;
    op.wait = ev;
    op.wait_gen = ev->recorded;
    S(s)->q.push_back(std::move(op));
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    NEEDS_DRIVER();
    Event *ev = (Event *)e;
    run_until(ev, ev->recorded);
    return cudaSuccess;
}
}
