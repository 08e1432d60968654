/* Tests for kernels/gpu (streams, pinned memory, memset, events) and for the
 * worker's GPU training path. Without a GPU (in every build, with CUDA or
 * without): every runtime call, the copies, sync, and the scatter-add,
 * residual-add and SGD launchers answer DCPS_E_NOGPU and clear their outputs,
 * the destroy/free calls take NULL, and dcps_gpu_why() gives a reason; then the
 * program exits 77 (SKIP) for the rest. With one: copies ordered by an event
 * across two streams arrive whole, memset clears, events never recorded count
 * as complete; and a one-worker job trained with device = gpu reports
 * device=gpu, takes the CPU's number of steps, lands near the CPU's accuracy
 * and repeats itself exactly. Under the emulator (DCPS_EMU) also: a driver too
 * old for the runtime is "no GPU" with the runtime's reason, and running out of
 * device memory is DCPS_E_NOMEM and leaves no error pending. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "config.h"
#include "kernels/blas_gpu.h"
#include "kernels/gpu.h"
#include "model/mlp_gpu.h"
#include "kernels/residual.h"
#include "kernels/topk.h"
#include "tests/gpu_probe.h"
#include "tests/harness.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

/* ---- checks that need no GPU ----------------------------------------------- */

/* What gpu.h, topk.h, residual.h and mlp_gpu.h promise where no GPU is usable:
 * DCPS_E_NOGPU from every call (even with nothing to do), outputs cleared, and
 * a reason to give the user. */
static void every_call_is_nogpu(void)
{
    dcps_stream_t s = (dcps_stream_t)&s;
    dcps_event_t ev = (dcps_event_t)&ev;
    void *p = &p;
    float host[4] = {0};
    ck_assert_int_eq(dcps_gpu_count(), 0);
    ck_assert_msg(*dcps_gpu_why() != '\0', "no reason given for the missing GPU");
    ck_assert_int_eq(dcps_gpu_stream_new(&s), DCPS_E_NOGPU);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(dcps_gpu_event_new(&ev), DCPS_E_NOGPU);
    ck_assert_ptr_null(ev);
    ck_assert_int_eq(dcps_gpu_host_alloc(&p, 4096), DCPS_E_NOGPU);
    ck_assert_ptr_null(p);
    p = &p;
    ck_assert_int_eq(dcps_gpu_alloc(&p, 4096), DCPS_E_NOGPU);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(dcps_gpu_to_device(host, host, sizeof host, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_to_host(host, host, sizeof host, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_sync(NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_memset(NULL, 0, 0, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_event_record(NULL, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_event_wait(NULL, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_gpu_event_sync(NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_scatter_add_gpu(NULL, NULL, NULL, 0, 1.0f, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_residual_add_gpu(NULL, NULL, 0, NULL), DCPS_E_NOGPU);
    ck_assert_int_eq(dcps_mlp_gpu_sgd(NULL, NULL, 0, 0.1f, NULL), DCPS_E_NOGPU);
}

START_TEST(without_a_gpu_every_runtime_call_is_nogpu_and_clears_outputs)
{
    /* Only meaningful where no GPU is usable; with one the cases below run. */
    if (dcps_gpu_count() > 0)
        return;
    every_call_is_nogpu();
}
END_TEST

START_TEST(destroy_and_free_take_null)
{
    dcps_stream_t s = NULL;
    dcps_event_t ev = NULL;
    dcps_gpu_stream_destroy(&s);
    dcps_gpu_stream_destroy(NULL);
    dcps_gpu_event_destroy(&ev);
    dcps_gpu_event_destroy(NULL);
    dcps_gpu_host_free(NULL);
    ck_assert_ptr_null(s);
    ck_assert_ptr_null(ev);
}
END_TEST

#ifdef DCPS_EMU
#include "tests/cuda-emu/emu_hooks.h"

/* An R535-R570 driver under the CUDA 13 runtime: cudaGetDeviceCount fails with
 * "insufficient driver". That is no GPU (so device = auto trains on the CPU),
 * but not a silent one: the reason names the driver's and the runtime's CUDA
 * versions and the driver needed. */
START_TEST(emu_an_old_driver_is_nogpu_with_the_runtimes_reason)
{
    emu_set_old_driver();
    every_call_is_nogpu();
    const char *why = dcps_gpu_why();
    ck_assert_msg(strstr(why, "insufficient") && strstr(why, "12.4") && strstr(why, "13.0") &&
                      strstr(why, "R580"),
                  "reason: %s", why);
}
END_TEST

/* Out of device memory is DCPS_E_NOMEM, with the pointer cleared; the failure
 * is handled there, so a later launch does not report it as its own. */
START_TEST(emu_out_of_memory_is_nomem_and_not_left_pending)
{
    float host[4] = {1.0f, 2.0f, 3.0f, 4.0f}, back[4];
    void *big = &big;
    float *d = NULL;
    emu_set_device_bytes(1 << 20);
    ck_assert_int_eq(dcps_gpu_alloc(&big, 2 << 20), DCPS_E_NOMEM);
    ck_assert_ptr_null(big);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d, sizeof host), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d, host, sizeof host, NULL), 0);
    ck_assert_int_eq(dcps_residual_add_gpu(d, d, 4, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(back, d, sizeof back, NULL), 0);
    ck_assert_float_eq(back[3], 8.0f);
    dcps_gpu_free(d);
}
END_TEST
#endif

/* ---- the runtime on a GPU -------------------------------------------------- */

START_TEST(an_upload_ordered_by_an_event_arrives_whole_on_the_other_stream)
{
    /* Large enough that a download not ordered after the upload would see a
     * part of the old contents. */
    enum { N = DCPS_TEST_SIZE(16 << 20, 1 << 18) };
    size_t bytes = N * sizeof(float);
    dcps_stream_t xs = NULL, cs = NULL;
    dcps_event_t up = NULL, never = NULL;
    float *h = NULL, *back = NULL, *d = NULL;
    ck_assert_int_eq(dcps_gpu_stream_new(&xs), 0);
    ck_assert_int_eq(dcps_gpu_stream_new(&cs), 0);
    ck_assert_ptr_nonnull(xs);
    ck_assert_ptr_ne(xs, cs);
    ck_assert_int_eq(dcps_gpu_event_new(&up), 0);
    ck_assert_int_eq(dcps_gpu_event_new(&never), 0);
    ck_assert_int_eq(dcps_gpu_host_alloc((void **)&h, bytes), 0);
    ck_assert_int_eq(dcps_gpu_host_alloc((void **)&back, bytes), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d, bytes), 0);

    /* Never recorded: complete. */
    ck_assert_int_eq(dcps_gpu_event_sync(never), 0);
    ck_assert_int_eq(dcps_gpu_event_wait(cs, never), 0);

    for (size_t i = 0; i < N; i++)
        h[i] = (float)i;
    ck_assert_int_eq(dcps_gpu_memset(d, 0xff, bytes, cs), 0);
    ck_assert_int_eq(dcps_gpu_sync(cs), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d, h, bytes, xs), 0);
    ck_assert_int_eq(dcps_gpu_event_record(up, xs), 0);
    ck_assert_int_eq(dcps_gpu_event_wait(cs, up), 0);
    ck_assert_int_eq(dcps_gpu_to_host(back, d, bytes, cs), 0);
    ck_assert_int_eq(dcps_gpu_sync(cs), 0);
    ck_assert_int_eq(memcmp(back, h, bytes), 0);

    /* The host may reuse h once the event says the upload has left it. */
    ck_assert_int_eq(dcps_gpu_event_sync(up), 0);

    ck_assert_int_eq(dcps_gpu_memset(d, 0, bytes, cs), 0);
    ck_assert_int_eq(dcps_gpu_to_host(back, d, bytes, cs), 0);
    ck_assert_int_eq(dcps_gpu_sync(cs), 0);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(back[i] == 0.0f && !signbit(back[i]), "element %zu is %g", i,
                      (double)back[i]);

    dcps_gpu_free(d);
    dcps_gpu_host_free(back);
    dcps_gpu_host_free(h);
    dcps_gpu_event_destroy(&never);
    dcps_gpu_event_destroy(&up);
    ck_assert_ptr_null(up);
    dcps_gpu_stream_destroy(&cs);
    dcps_gpu_stream_destroy(&xs);
    ck_assert_ptr_null(xs);
}
END_TEST

/* ---- the worker's GPU path ------------------------------------------------- */

static void teardown(void)
{
    h_cleanup();
}

/* Trains a one-worker, one-shard job (2 epochs of 6000 examples, batches of
 * 32, so the last batch of each epoch is partial) on a fresh shard with the
 * given device and returns the worker's stdout. */
static const char *train_on(const char *device, const char *tag)
{
    char ep[256], shards[300], dev[64];
    const char *j =
        h_write("job.ini", "[job]\nname = gputest\nworkers = 1\n"
                           "[servers]\nshards = tcp://127.0.0.1:*\n"
                           "[model]\nlayers = 784,64,10\n"
                           "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
                           "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
                           "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
                           "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
                           "batch_size = 32\nepochs = 2\ntrain_limit = 6000\n"
                           "[optimizer]\nlr = 0.1\n"
                           "[worker]\nlog_every = 50\ntimeout_ms = 5000\n");
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    snprintf(dev, sizeof dev, "worker.device=%s", device);
    const char *argv[] = {"--config", j, "--rank", "0", "--set", shards, "--set", dev, NULL};
    int st = h_wait(h_spawn("dcps-worker", tag, argv), 300000);
    ck_assert_msg(st == 0, "%s worker exited %d: %s", device, st, h_slurp(h_path(tag, "err")));
    ck_assert_int_eq(h_stop(s, 5000), 0);
    return h_slurp(h_path(tag, "out"));
}

START_TEST(gpu_worker_trains_like_the_cpu_worker_and_repeats_itself)
{
    double want_steps = 2 * ((6000 + 31) / 32);
    const char *out = train_on("cpu", "cpu");
    ck_assert_ptr_nonnull(strstr(out, "device=cpu"));
    double cpu_acc = h_final(out, "test_acc");
    ck_assert_double_eq(h_final(out, "steps"), want_steps);

    out = train_on("gpu", "gpu");
    ck_assert_msg(strstr(out, "device=gpu"), "worker said: %s", out);
    double gpu_acc = h_final(out, "test_acc"), gpu_loss = h_final(out, "test_loss");
    ck_assert_double_eq(h_final(out, "steps"), want_steps);
    /* Matrix products sum in another order on the GPU, so the runs drift
     * apart a little; a wrong batch, parameter or residual would not stay this
     * close. The CPU job reaches about 0.78. */
    ck_assert_msg(gpu_acc >= 0.70 && fabs(gpu_acc - cpu_acc) <= 0.02,
                  "test_acc %g on the GPU, %g on the CPU", gpu_acc, cpu_acc);

    /* One worker, deterministic kernels: auto picks the GPU and gets the same bits. */
    out = train_on("auto", "auto");
    ck_assert_msg(strstr(out, "device=gpu"), "worker said: %s", out);
    ck_assert_double_eq(h_final(out, "test_acc"), gpu_acc);
    ck_assert_double_eq(h_final(out, "test_loss"), gpu_loss);
}
END_TEST

/* What is usable, asked in a child process (a CUDA context does not survive
 * fork(), and Check forks once per test): 0 nothing, 1 a GPU, 2 a GPU and
 * cuBLAS, which the worker's GPU model needs; -1 if the child failed. */
static int probe(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char name[256];
        int n = dcps_gpu_count(), what = 0;
        if (n > 0 && dcps_gpu_name(name, sizeof name) == 0) {
            what = dcps_blas_load(NULL) == 0 ? 2 : 1;
            printf("GPU: %s (%d usable); cuBLAS %s\n", name, n, what == 2 ? "loaded" : "missing");
        }
        fflush(stdout);
        _exit(what);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int main(void)
{
    /* Under the emulator dcps-worker, a program of its own, has no GPU. */
    const int emulated = DCPS_TEST_SIZE(0, 1);
    DCPS_TEST_EMU_SWEEP();
    int gpu = probe(), forking = gpu >= 0;
    /* Without fork the tests share this process: ask here, and leave the
     * worker test (which needs cuBLAS) out rather than load it here. */
    if (gpu < 0)
        gpu = dcps_gpu_count() > 0;

    Suite *s = suite_create("gpu_runtime");
    TCase *none = tcase_create("no_gpu_needed");
    tcase_add_test(none, without_a_gpu_every_runtime_call_is_nogpu_and_clears_outputs);
    tcase_add_test(none, destroy_and_free_take_null);
    suite_add_tcase(s, none);
    if (gpu) {
        TCase *tc = tcase_create("gpu");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, an_upload_ordered_by_an_event_arrives_whole_on_the_other_stream);
#ifdef DCPS_EMU
        tcase_add_test(tc, emu_an_old_driver_is_nogpu_with_the_runtimes_reason);
        tcase_add_test(tc, emu_out_of_memory_is_nomem_and_not_left_pending);
#endif
        suite_add_tcase(s, tc);
    }
    if (gpu == 2 && emulated)
        printf("emulated GPU: the worker test left out (dcps-worker is not emulated)\n");
    if (gpu == 2 && !emulated) {
        TCase *worker = tcase_create("worker");
        tcase_add_checked_fixture(worker, NULL, teardown);
        tcase_set_timeout(worker, 900);
        tcase_add_test(worker, gpu_worker_trains_like_the_cpu_worker_and_repeats_itself);
        suite_add_tcase(s, worker);
    }

    if (dcps_test_run_all(s, forking) != 0)
        return 1;
    if (gpu < 2) {
        printf("no usable %s: %s skipped\n", gpu ? "cuBLAS" : "GPU",
               gpu ? "the GPU worker test" : "the GPU tests");
        return 77;
    }
    return 0;
}
