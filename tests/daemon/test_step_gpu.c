/* Tests for the step's device arrays (worker/step.h, dcps_step_use_stream) on a
 * real GPU: for the same gradients a step on device arrays and a step on host
 * arrays, each the one worker of its own job on real shards, push and pull the
 * same bytes and hold bit-identical parameters after every step and after the
 * final pull, with Top-k + error feedback + delta pulls, the density schedule,
 * warm-up and periodic dense steps, and also with dense pushes and pulls, the
 * caller changing streams halfway, and in shorter value formats (int8 Top-k,
 * twobit, bf16 dense); a non-finite device gradient (top-k or
 * dense step) is refused naming the entry, before anything is sent; an option
 * the device path does not do is refused naming the key. Without a GPU the
 * program exits 77 (SKIP); python/tests/test_extension.py checks the refusals
 * that need no GPU. Built with DCPS_EMU it is tests/daemon/test_step_gpu_emu: the
 * same cases on the SIMT emulator of tests/cuda-emu (tests/gpu_probe.h). */
#include "worker/step.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "tests/gpu_probe.h"
#include "tests/harness.h"

/* Parameters, split over 2 shards; the emulator affords the smaller model. */
#define N ((size_t)DCPS_TEST_SIZE(1000003, 20000))
#define STEPS 14

static void teardown(void)
{
    h_cleanup();
}

static void *alloc(size_t bytes)
{
    void *p = calloc(1, bytes);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Starts the two shards of a job with [compression] `compression` and writes
 * the override that points a worker at them into shards (600 bytes). */
static const char *job(const char *name, const char *compression, char *shards)
{
    char text[2048], ep0[256], ep1[256];
    snprintf(text, sizeof text,
             "[job]\nname = stepgpu\nworkers = 1\nmode = async\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nparams = auto\n"
             "[optimizer]\nkind = momentum\nlr = 0.05\nmomentum = 0.9\n"
             "[worker]\ntimeout_ms = 5000\n"
             "[server]\ncheckpoint_every = 0\n"
             "[compression]\n%s",
             compression);
    const char *j = h_write(name, text);
    ck_assert_int_gt(h_server(j, 0, ep0), 0);
    ck_assert_int_gt(h_server(j, 1, ep1), 0);
    snprintf(shards, 600, "servers.shards=%s,%s", ep0, ep1);
    return j;
}

static dcps_step_t *open_step(const char *j, const char *shards, const char *extra)
{
    char err[1024] = "";
    int rc = 0;
    const char *ov[] = {shards, extra};
    dcps_step_t *s = dcps_step_open(j, 0, ov, extra ? 2 : 1, N, &rc, err, sizeof err);
    ck_assert_msg(s != NULL, "dcps_step_open: %d %s", rc, err);
    return s;
}

/* The gradient at params of step t: a pull towards a target, plus noise whose
 * scale varies by entry, so that the selection has a clear top and ties. */
static void gradient(const float *params, int t, float *g)
{
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1000 + (uint64_t)t);
    for (size_t i = 0; i < N; i++) {
        float noise = (float)((double)(dcps_rng_next(&rng) >> 11) / 9007199254740992.0 - 0.5);
        float scale = (i % 97 == 0) ? 4.0f : (i % 5 == 0 ? 0.25f : 1.0f);
        g[i] = 0.5f * (params[i] - (float)(i % 13)) + scale * noise;
    }
    if (t % 4 == 0) /* equal magnitudes: the lower index must win on both paths */
        for (size_t i = 100; i < 140; i++)
            g[i] = (i % 2) ? 3.0f : -3.0f;
}

static void same_bits(const float *a, const float *b, const char *what, int t)
{
    for (size_t i = 0; i < N; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            ck_abort_msg("%s, step %d: entry %zu is %a on the device path, %a on the host path",
                         what, t, i, (double)a[i], (double)b[i]);
}

/* Runs both paths over STEPS steps of the same gradients under `compression`
 * and compares parameters after each step, traffic, and the final pull. */
static void compare_paths(const char *compression)
{
    char sh_d[600], sh_h[600];
    const char *jd = job("device.ini", compression, sh_d);
    const char *jh = job("host.ini", compression, sh_h);
    dcps_step_t *dev = open_step(jd, sh_d, NULL), *host = open_step(jh, sh_h, NULL);
    dcps_stream_t stream = NULL;
    ck_assert_int_eq(dcps_gpu_stream_new(&stream), 0);
    int rc = dcps_step_use_stream(dev, stream);
    ck_assert_msg(rc == 0, "use_stream: %d %s", rc, dcps_step_error(dev));

    float *p_h = alloc(N * sizeof(float)), *g_h = alloc(N * sizeof(float));
    float *p_d = alloc(N * sizeof(float)), *g_d = alloc(N * sizeof(float));
    float *d_params = NULL, *d_grad = NULL;
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_params, N * sizeof(float)), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_grad, N * sizeof(float)), 0);
    for (size_t i = 0; i < N; i++)
        p_h[i] = (float)(i % 11) * 0.1f - 0.5f;
    ck_assert_int_eq(dcps_gpu_to_device(d_params, p_h, N * sizeof(float), stream), 0);

    rc = dcps_step_start(dev, d_params);
    ck_assert_msg(rc == 0, "device start: %s", dcps_step_error(dev));
    rc = dcps_step_start(host, p_h);
    ck_assert_msg(rc == 0, "host start: %s", dcps_step_error(host));
    for (int t = 1; t <= STEPS; t++) {
        int epoch = 1 + (t - 1) / 5;
        if (t == STEPS / 2) { /* the caller moves to another stream */
            dcps_stream_t other = NULL;
            ck_assert_int_eq(dcps_gpu_stream_new(&other), 0);
            rc = dcps_step_use_stream(dev, other);
            ck_assert_msg(rc == 0, "use_stream again: %s", dcps_step_error(dev));
            dcps_gpu_stream_destroy(&stream);
            stream = other;
        }
        ck_assert_int_eq(dcps_gpu_to_host(p_d, d_params, N * sizeof(float), stream), 0);
        ck_assert_int_eq(dcps_gpu_sync(stream), 0);
        same_bits(p_d, p_h, "parameters before the step", t);
        gradient(p_d, t, g_d);
        gradient(p_h, t, g_h);
        ck_assert_int_eq(dcps_gpu_to_device(d_grad, g_d, N * sizeof(float), stream), 0);
        rc = dcps_step_run(dev, d_grad, d_params, epoch);
        ck_assert_msg(rc == 0, "device step %d: %s", t, dcps_step_error(dev));
        /* The caller may reuse its gradient at once, in stream order. */
        ck_assert_int_eq(dcps_gpu_memset(d_grad, 0xff, N * sizeof(float), stream), 0);
        rc = dcps_step_run(host, g_h, p_h, epoch);
        ck_assert_msg(rc == 0, "host step %d: %s", t, dcps_step_error(host));
        dcps_client_stats_t sd, shost;
        dcps_step_stats(dev, &sd);
        dcps_step_stats(host, &shost);
        ck_assert_uint_eq(sd.bytes_pushed, shost.bytes_pushed);
        ck_assert_uint_eq(sd.bytes_pulled, shost.bytes_pulled);
        ck_assert_uint_eq(sd.clock, shost.clock);
    }
    ck_assert_int_eq(dcps_gpu_to_host(p_d, d_params, N * sizeof(float), stream), 0);
    ck_assert_int_eq(dcps_gpu_sync(stream), 0);
    same_bits(p_d, p_h, "parameters after the last step", STEPS);

    rc = dcps_step_finish(dev, d_params);
    ck_assert_msg(rc == 0, "device finish: %s", dcps_step_error(dev));
    rc = dcps_step_finish(host, p_h);
    ck_assert_msg(rc == 0, "host finish: %s", dcps_step_error(host));
    ck_assert_int_eq(dcps_gpu_to_host(p_d, d_params, N * sizeof(float), stream), 0);
    ck_assert_int_eq(dcps_gpu_sync(stream), 0);
    same_bits(p_d, p_h, "parameters after the final pull", STEPS);
    dcps_client_stats_t sd, shost;
    dcps_step_stats(dev, &sd);
    dcps_step_stats(host, &shost);
    ck_assert_uint_eq(sd.bytes_pushed, shost.bytes_pushed);
    ck_assert_uint_eq(sd.bytes_pulled, shost.bytes_pulled);

    dcps_step_close(&dev);
    dcps_step_close(&host);
    dcps_gpu_free(d_grad);
    dcps_gpu_free(d_params);
    dcps_gpu_stream_destroy(&stream);
    free(p_h);
    free(g_h);
    free(p_d);
    free(g_d);
}

START_TEST(topk_error_feedback_and_delta_pulls_match_the_host_path_bit_for_bit)
{
    compare_paths("push = topk\ndensity = 0.01\nerror_feedback = true\npull = delta\n"
                  "pull_density = 0.02\ndensity_warmup_epochs = 2\nwarmup_steps = 2\n"
                  "correction_every = 6\n");
}
END_TEST

START_TEST(topk_without_error_feedback_matches_the_host_path)
{
    compare_paths("push = topk\ndensity = 0.05\nerror_feedback = false\npull = delta\n");
}
END_TEST

START_TEST(dense_push_and_pull_match_the_host_path)
{
    compare_paths("push = dense\npull = dense\n");
}
END_TEST

/* _i 0: a NaN on a top-k step; 1: an Inf on a dense step (warm-up). */
/* Shorter values (docs/algorithms.md, fewer bits per value): encoded on the host
 * after the device selects or downloads, and what rounding took goes back into
 * the device residual, so the two paths keep the same residual bit for bit. */
START_TEST(shorter_values_match_the_host_path_bit_for_bit)
{
    static const char *const cases[] = {
        "push = topk\ndensity = 0.01\npull = delta\nvalues = int8\nwarmup_steps = 2\n"
        "correction_every = 6\n",
        "push = twobit\nthreshold = 0.5\npull = dense\nvalues = fp16\ncorrection_every = 5\n",
        "push = dense\npull = dense\nvalues = bf16\n",
    };
    compare_paths(cases[_i]);
}
END_TEST

START_TEST(a_nonfinite_device_gradient_is_refused_naming_the_entry_before_sending)
{
    char sh[600];
    const char *j = job("nan.ini",
                        _i ? "push = topk\nwarmup_steps = 1\npull = delta\n"
                           : "push = topk\ndensity = 0.01\npull = delta\n",
                        sh);
    dcps_step_t *s = open_step(j, sh, NULL);
    ck_assert_int_eq(dcps_step_use_stream(s, NULL), 0);
    const size_t offsets[] = {0, 12000};
    const char *names[] = {"fc1.weight", "fc2.weight"};
    ck_assert_int_eq(dcps_step_set_names(s, offsets, names, 2), 0);
    float *h = alloc(N * sizeof(float)), *d_params = NULL, *d_grad = NULL;
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_params, N * sizeof(float)), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_grad, N * sizeof(float)), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_params, h, N * sizeof(float), NULL), 0);
    ck_assert_int_eq(dcps_step_start(s, d_params), 0);
    h[12345] = _i ? -INFINITY : NAN;
    ck_assert_int_eq(dcps_gpu_to_device(d_grad, h, N * sizeof(float), NULL), 0);
    dcps_client_stats_t before, after;
    dcps_step_stats(s, &before);
    ck_assert_int_eq(dcps_step_run(s, d_grad, d_params, 1), DCPS_E_NONFINITE);
    dcps_step_stats(s, &after);
    ck_assert_uint_eq(before.bytes_sent, after.bytes_sent);
    const char *why = dcps_step_error(s);
    ck_assert_msg(strstr(why, "fc2.weight, entry 345 (model entry 12345)") &&
                      strstr(why, _i ? "inf" : "nan"),
                  "%s", why);
    ck_assert_int_eq(dcps_step_run(s, d_grad, d_params, 1), DCPS_E_STATE);
    /* A failed step keeps its first sentence, whatever is called next. */
    ck_assert_int_eq(dcps_step_use_stream(s, NULL), DCPS_E_STATE);
    ck_assert_msg(strstr(dcps_step_error(s), "model entry 12345"), "%s", dcps_step_error(s));
    dcps_step_close(&s);
    dcps_gpu_free(d_grad);
    dcps_gpu_free(d_params);
    free(h);
}
END_TEST

START_TEST(options_the_device_path_lacks_are_refused_naming_the_key)
{
    char sh[600];
    const char *j = job("opts.ini", "push = topk\n", sh);
    static const char *const cases[][2] = {
        {"compression.momentum_correction=0.9", "[compression] momentum_correction"},
        {"compression.clip_norm=1", "[compression] clip_norm"},
        {"compression.pipeline=true", "[compression] pipeline"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dcps_step_t *s = open_step(j, sh, cases[c][0]);
        ck_assert_int_eq(dcps_step_use_stream(s, NULL), DCPS_E_CONFIG);
        ck_assert_msg(strstr(dcps_step_error(s), cases[c][1]), "%s", dcps_step_error(s));
        dcps_step_close(&s);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("step_gpu");
    TCase *tc = tcase_create("device arrays");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, topk_error_feedback_and_delta_pulls_match_the_host_path_bit_for_bit);
    tcase_add_test(tc, topk_without_error_feedback_matches_the_host_path);
    tcase_add_test(tc, dense_push_and_pull_match_the_host_path);
    tcase_add_loop_test(tc, shorter_values_match_the_host_path_bit_for_bit, 0, 3);
    tcase_add_loop_test(tc, a_nonfinite_device_gradient_is_refused_naming_the_entry_before_sending,
                        0, 2);
    tcase_add_test(tc, options_the_device_path_lacks_are_refused_naming_the_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    DCPS_TEST_EMU_SWEEP();
    return dcps_test_run_gpu(suite());
}
