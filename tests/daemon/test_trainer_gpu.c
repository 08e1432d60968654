/* Tests for the trainer's GPU path (worker/trainer.c) on a real GPU: the
 * built-in MLP trained on the GPU hands the step its device gradient and
 * parameters (dcps_step_use_stream), and the run is bit for bit the run in
 * which the step gets the pinned host copies and compresses on the host (the
 * path the trainer keeps for what the device path does not do: here a
 * clip_norm no gradient reaches), with Top-k + error feedback + delta pulls,
 * warm-up, dense corrections and the density schedule; both land near the CPU
 * path's accuracy in the same number of steps. Each run is rank 0 of a
 * one-worker job on two real shards, in this process (dcps_trainer_run).
 * Without a GPU and cuBLAS the program exits 77 (SKIP). Built with DCPS_EMU it
 * is tests/daemon/test_trainer_gpu_emu: the same case on the SIMT emulator of
 * tests/cuda-emu (tests/gpu_probe.h). */
#include "worker/trainer.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "kernels/blas_gpu.h"
#include "kernels/gpu.h"
#include "tests/gpu_probe.h"
#include "tests/harness.h"

#define DATA "/usr/share/datasets/fashion-mnist/"
#define COMPRESSION                                                                                \
    "push = topk\ndensity = 0.01\nerror_feedback = true\npull = delta\npull_density = 0.02\n"      \
    "density_warmup_epochs = 2\nwarmup_steps = 2\ncorrection_every = 6\n"
/* What the trainer logs when its step compresses on the GPU, and on the host. */
#define ON_THE_GPU "compresses its gradients on the GPU"
#define ON_THE_HOST "compresses its gradients on the host"

static void teardown(void)
{
    h_cleanup();
}

/* One run: the worker's stdout and its log. */
typedef struct {
    char *out, *log;
    size_t out_len, log_len;
} run_t;

/* Trains rank 0 of a one-worker job (2 epochs of 1000 examples in batches of
 * 32, the last one partial) on two fresh shards with [worker] device and
 * [compression] compression, in this process. */
static run_t train(const char *device, const char *compression)
{
    char text[2048], ep0[256], ep1[256], shards[600], dev[64], err[1024] = "";
    snprintf(text, sizeof text,
             "[job]\nname = trainergpu\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nlayers = 784,32,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 2\ntrain_limit = 1000\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 10\ntimeout_ms = 5000\n"
             "[server]\ncheckpoint_every = 0\n"
             "[compression]\n%s",
             compression);
    const char *j = h_write("job.ini", text);
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    snprintf(dev, sizeof dev, "worker.device=%s", device);
    const char *ov[] = {shards, dev};
    dcps_config_t *cfg = malloc(sizeof *cfg);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, j, ov, 2, err, sizeof err) == 0, "%s", err);

    run_t r = {0};
    FILE *out = open_memstream(&r.out, &r.out_len), *log = open_memstream(&r.log, &r.log_len);
    ck_assert(out && log);
    dcps_log_set_stream(log);
    int rc = dcps_trainer_run(cfg, 0, NULL, out, err, sizeof err);
    dcps_log_set_stream(NULL);
    fclose(out);
    fclose(log);
    free(cfg);
    ck_assert_msg(rc == 0, "device = %s: %s\n%s", device, err, r.log);
    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
    return r;
}

/* The lines of text that end an epoch ("rank=0 epoch=1 done: ..."), which
 * hold no timing: two runs of the same bits print the same ones. */
static void epoch_lines(const char *text, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    while (*text) {
        const char *end = strchr(text, '\n');
        size_t n = end ? (size_t)(end - text) + 1 : strlen(text);
        if (memmem(text, n, " done: ", 7) && at + n < len) {
            memcpy(buf + at, text, n);
            at += n;
            buf[at] = '\0';
        }
        text += n;
    }
}

START_TEST(gpu_path_on_device_arrays_is_the_host_compressors_run_bit_for_bit)
{
    run_t dev = train("gpu", COMPRESSION);
    ck_assert_msg(strstr(dev.out, "device=gpu"), "worker said: %s", dev.out);
    ck_assert_msg(strstr(dev.log, ON_THE_GPU) && !strstr(dev.log, ON_THE_HOST),
                  "the step did not say it compressed on the GPU:\n%s", dev.log);

    /* A clip_norm that no gradient of this model reaches changes nothing but
     * where the step compresses: the device path does not clip. */
    run_t host = train("gpu", COMPRESSION "clip_norm = 1000000\n");
    ck_assert_msg(strstr(host.out, "device=gpu"), "worker said: %s", host.out);
    ck_assert_msg(strstr(host.log, ON_THE_HOST) && strstr(host.log, "[compression] clip_norm") &&
                      !strstr(host.log, ON_THE_GPU),
                  "the step did not say it compressed on the host:\n%s", host.log);

    static const char *const keys[] = {"test_acc",     "test_loss",    "train_loss",   "steps",
                                       "bytes_pushed", "bytes_pulled", "traffic_ratio"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        ck_assert_msg(h_final(dev.out, keys[k]) == h_final(host.out, keys[k]),
                      "%s: %.17g on device arrays, %.17g on host arrays", keys[k],
                      h_final(dev.out, keys[k]), h_final(host.out, keys[k]));
    char a[1024], b[1024];
    epoch_lines(dev.out, a, sizeof a);
    epoch_lines(host.out, b, sizeof b);
    ck_assert_msg(*a && strcmp(a, b) == 0, "device arrays:\n%s\nhost arrays:\n%s", a, b);

    /* Matrix products sum in another order on the GPU, so the runs drift
     * apart a little; a wrong batch, parameter or residual would not stay
     * this close. */
    run_t cpu = train("cpu", COMPRESSION);
    ck_assert_ptr_nonnull(strstr(cpu.out, "device=cpu"));
    double want_steps = 2 * ((1000 + 31) / 32);
    ck_assert_double_eq(h_final(cpu.out, "steps"), want_steps);
    ck_assert_double_eq(h_final(dev.out, "steps"), want_steps);
    double gpu_acc = h_final(dev.out, "test_acc"), cpu_acc = h_final(cpu.out, "test_acc");
    ck_assert_msg(gpu_acc >= 0.5 && fabs(gpu_acc - cpu_acc) <= 0.03,
                  "test_acc %g on the GPU, %g on the CPU", gpu_acc, cpu_acc);
    free(dev.out);
    free(dev.log);
    free(host.out);
    free(host.log);
    free(cpu.out);
    free(cpu.log);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("trainer_gpu");
    TCase *tc = tcase_create("gpu path");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, gpu_path_on_device_arrays_is_the_host_compressors_run_bit_for_bit);
    suite_add_tcase(s, tc);
    return s;
}

/* The trainer's GPU model needs cuBLAS besides the GPU. */
static int cublas_loads(void)
{
    return dcps_blas_load(NULL);
}

int main(void)
{
    DCPS_TEST_EMU_SWEEP();
    return dcps_test_run_gpu_if(suite(), cublas_loads);
}
