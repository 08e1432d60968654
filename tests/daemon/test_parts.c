/* dcps — pushes and pull replies in parts (docs/protocol.md, section 17) through
 * the C client: against real dcps-server shards, a job whose workers send and
 * take every dense message in parts ends with the parameters, bit for bit, of
 * the same job sent whole (async with momentum, and a sync round of two ranks,
 * one in parts and one whole); and against a hostile shard (a ROUTER socket of
 * this process that answers PULL with the parts it is told to), the client
 * takes good parts into place and refuses a missing, repeated, misplaced or
 * surplus part with a sentence saying which. */
#include <check.h>

#include "tests/check_run.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "proto/frame.h"
#include "tests/harness.h"
#include "worker/internal.h"

#define N 100000 /* parameters: 2 shards of 50048 and 49952 */
#define STEPS 3

static void teardown(void)
{
    h_cleanup();
}

/* A client of rank `rank` for job j on the shards named by `shards`
 * ("servers.shards=..."), sending dense messages in `parts` parts. */
static dcps_client_t *client(const char *j, const char *shards, int rank, int parts)
{
    dcps_config_t cfg;
    char e[1024], p[64];
    snprintf(p, sizeof p, "compression.parts=%d", parts);
    const char *ov[] = {shards, p};
    ck_assert_int_eq(dcps_config_load(&cfg, j, ov, 2, e, sizeof e), 0);
    int rc;
    dcps_client_t *c = dcps_client_new(&cfg, rank, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "client: %s", e);
    return c;
}

/* One rank's steps: pull, push its gradient, STEPS times, then a last pull into w. */
typedef struct {
    dcps_client_t *c;
    int rank;
    float *w, *g;
    int rc;
} rank_t;

static void *steps(void *arg)
{
    rank_t *k = arg;
    for (int t = 0; t < STEPS && k->rc == 0; t++) {
        h_gradient(k->g, N, (uint64_t)(7 * t + k->rank + 1));
        if ((k->rc = dcps_client_pull(k->c, k->w)) == 0)
            k->rc = dcps_client_push_dense(k->c, k->g);
    }
    if (k->rc == 0)
        k->rc = dcps_client_pull(k->c, k->w);
    return NULL;
}

/* Runs job j (written under name) on two fresh shards with `workers` ranks,
 * rank r sending in parts[r] parts, and returns rank 0's final parameters. */
static float *run(const char *j, int workers, const int *parts)
{
    char ep0[256], ep1[256], shards[600];
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    rank_t k[2];
    pthread_t th[2];
    for (int r = 0; r < workers; r++) {
        k[r] = (rank_t){client(j, shards, r, parts[r]), r, malloc(N * sizeof(float)),
                        malloc(N * sizeof(float)), 0};
        ck_assert_ptr_nonnull(k[r].w);
        ck_assert_ptr_nonnull(k[r].g);
    }
    for (size_t i = 0; i < N; i++)
        k[0].w[i] = 0.5f + (float)(i % 97) * 1e-3f;
    ck_assert_int_eq(dcps_client_init(k[0].c, k[0].w), 0);
    for (int r = 0; r < workers; r++)
        ck_assert_int_eq(pthread_create(&th[r], NULL, steps, &k[r]), 0);
    for (int r = 0; r < workers; r++) {
        pthread_join(th[r], NULL);
        ck_assert_msg(k[r].rc == 0, "rank %d: %s", r, dcps_client_error(k[r].c));
    }
    dcps_client_stats_t st;
    dcps_client_stats(k[0].c, &st);
    ck_assert_uint_eq(st.pushes, STEPS);
    for (int r = 0; r < workers; r++) {
        dcps_client_close(&k[r].c);
        free(k[r].g);
        if (r > 0)
            free(k[r].w);
    }
    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
    return k[0].w;
}

static const char *job(const char *name, const char *mode, int workers, const char *optimizer)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[job]\nname = parts\nworkers = %d\nmode = %s\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nparams = %d\n[optimizer]\n%s\n"
             "[worker]\ntimeout_ms = 5000\n",
             workers, mode, N, optimizer);
    return h_write(name, text);
}

START_TEST(async_momentum_in_parts_ends_bit_for_bit_as_whole)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("async.ini", "async", 1, "kind = momentum\nlr = 0.05"));
    float *whole = run(j, 1, (const int[]){1}), *parts = run(j, 1, (const int[]){7});
    ck_assert_int_eq(memcmp(whole, parts, N * sizeof *whole), 0);
    /* And the job moved: a test that pushed nothing would pass the line above. */
    ck_assert_float_ne(whole[0], 0.5f);
    free(whole);
    free(parts);
}
END_TEST

START_TEST(a_sync_round_of_a_rank_in_parts_and_a_whole_one_is_the_whole_rounds)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("sync.ini", "sync", 2, "kind = sgd\nlr = 0.1"));
    float *whole = run(j, 2, (const int[]){1, 1}), *parts = run(j, 2, (const int[]){3, 64});
    ck_assert_int_eq(memcmp(whole, parts, N * sizeof *whole), 0);
    ck_assert_float_ne(whole[1], 0.5f + 1e-3f);
    free(whole);
    free(parts);
}
END_TEST

/* --- a hostile shard ------------------------------------------------------------------- */

#define FAKE_N 300

/* What the fake shard answers a PULL with: parts (index, count, lo, hi), in order. */
typedef struct {
    void *sock;
    int n;
    uint32_t part[6], parts[6];
    uint64_t lo[6], hi[6];
} fake_t;

static void answer(fake_t *f, const dcps_frames_t *in, const dcps_msg_t *req)
{
    static float values[FAKE_N];
    for (int i = 0; i < FAKE_N; i++)
        values[i] = (float)i + 0.5f;
    dcps_buf_t id = {zmq_msg_data((zmq_msg_t *)&in->part[0]),
                     zmq_msg_size((zmq_msg_t *)&in->part[0])};
    dcps_msg_t m;
    if (req->type == DCPS_MSG_HELLO) {
        dcps_msg_reply(&m, req, DCPS_MSG_WELCOME);
        m.n_params = FAKE_N, m.range_hi = FAKE_N, m.workers = 1, m.initialized = true;
        dcps_frames_send(f->sock, &id, &m, NULL, NULL, 0);
        return;
    }
    if (req->type != DCPS_MSG_PULL) {
        dcps_msg_reply(&m, req, req->type);
        dcps_frames_send(f->sock, &id, &m, NULL, NULL, 0);
        return;
    }
    for (int i = 0; i < f->n; i++) {
        dcps_msg_reply(&m, req, DCPS_MSG_PULL_REPLY);
        m.range_hi = FAKE_N, m.param_version = 4;
        m.has |= DCPS_HAS_PART | DCPS_HAS_LR;
        m.part = f->part[i], m.parts = f->parts[i], m.part_lo = f->lo[i], m.part_hi = f->hi[i];
        uint64_t hi = f->hi[i] > FAKE_N ? FAKE_N : f->hi[i];
        m.nframes = 1;
        m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, hi - f->lo[i]};
        m.payload[0] = (dcps_buf_t){values + f->lo[i], (hi - f->lo[i]) * sizeof(float)};
        dcps_frames_send(f->sock, &id, &m, NULL, NULL, 0);
    }
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    for (;;) {
        dcps_frames_t in;
        if (dcps_frames_recv(f->sock, &in, 0) <= 0)
            return NULL;
        dcps_msg_t req;
        char why[256];
        dcps_buf_t fr[DCPS_MAX_PARTS];
        for (int i = 2; i < in.n; i++)
            fr[i - 2] = (dcps_buf_t){zmq_msg_data(&in.part[i]), zmq_msg_size(&in.part[i])};
        if (in.n >= 2 && dcps_codec_unpack(zmq_msg_data(&in.part[1]), zmq_msg_size(&in.part[1]), fr,
                                           (size_t)(in.n - 2), 0, &req, why, sizeof why) == 0)
            answer(f, &in, &req);
        dcps_frames_close(&in);
    }
}

/* Pulls 3 parts from a fake shard that answers with f's parts; returns the
 * client's code, its error text in e, and the values in w. */
static int pull_from(fake_t *f, float *w, char *e, size_t elen)
{
    void *ctx = zmq_ctx_new();
    f->sock = zmq_socket(ctx, ZMQ_ROUTER);
    zmq_setsockopt(f->sock, ZMQ_LINGER, &(int){0}, sizeof(int));
    ck_assert_int_eq(zmq_bind(f->sock, "tcp://127.0.0.1:*"), 0);
    char ep[256], shards[300], err[1024];
    size_t len = sizeof ep;
    zmq_getsockopt(f->sock, ZMQ_LAST_ENDPOINT, ep, &len);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fake_main, f), 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *text = "[job]\nname = fake\nworkers = 1\n[servers]\nshards = tcp://127.0.0.1:1\n"
                       "[model]\nparams = 300\n[worker]\ntimeout_ms = 300\nretries = 0\n";
    dcps_config_t cfg;
    const char *ov[] = {shards, "compression.parts=3"};
    ck_assert_int_eq(dcps_config_load(&cfg, h_write("fake.ini", text), ov, 2, err, sizeof err), 0);
    int rc;
    dcps_client_t *c = dcps_client_new(&cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    rc = dcps_client_pull(c, w);
    snprintf(e, elen, "%s", rc ? dcps_client_error(c) : "");
    dcps_client_close(&c);
    zmq_ctx_shutdown(ctx); /* ends fake_main's receive (ETERM) */
    pthread_join(th, NULL);
    zmq_close(f->sock);
    zmq_ctx_term(ctx);
    return rc;
}

START_TEST(client_takes_good_parts_and_refuses_bad_ones_naming_them)
{
    float w[FAKE_N];
    char e[1024];
    fake_t good = {
        .n = 3, .part = {0, 1, 2}, .parts = {3, 3, 3}, .lo = {0, 100, 200}, .hi = {100, 200, 300}};
    memset(w, 0, sizeof w);
    ck_assert_int_eq(pull_from(&good, w, e, sizeof e), 0);
    for (int i = 0; i < FAKE_N; i++)
        ck_assert_float_eq(w[i], (float)i + 0.5f);
    static const struct {
        fake_t f;
        const char *says;
    } bad[] = {
        {{.n = 2, .part = {0, 2}, .parts = {3, 3}, .lo = {0, 200}, .hi = {100, 300}},
         "part 2 of 3 of version 4 came where part 1 of 3 of version 4 was due"},
        {{.n = 3,
          .part = {0, 1, 1},
          .parts = {3, 3, 3},
          .lo = {0, 100, 100},
          .hi = {100, 200, 200}},
         "part 1 of 3 of version 4 came where part 2 of 3"},
        {{.n = 2, .part = {0, 1}, .parts = {3, 3}, .lo = {0, 150}, .hi = {100, 200}},
         "part 1 of 3 covers [150, 200), where [100, …) of the range [0, 300) was due"},
        {{.n = 3,
          .part = {0, 1, 2},
          .parts = {3, 3, 3},
          .lo = {0, 100, 200},
          .hi = {100, 200, 250}},
         "part 2 of 3 covers [200, 250), where [200, …) of the range [0, 300) was due, up to "
         "its end"},
        {{.n = 1, .part = {0}, .parts = {4}, .lo = {0}, .hi = {100}},
         "part 0 of 4, this pull asked for 3 parts"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_t f = bad[i].f;
        int rc = pull_from(&f, w, e, sizeof e);
        ck_assert_int_eq(rc, DCPS_E_FIELD);
        ck_assert_msg(strstr(e, "sent a bad PULL_REPLY part: ") && strstr(e, bad[i].says),
                      "case %zu: %s", i, e);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("parts");
    TCase *tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, async_momentum_in_parts_ends_bit_for_bit_as_whole);
    tcase_add_test(tc, a_sync_round_of_a_rank_in_parts_and_a_whole_one_is_the_whole_rounds);
    tcase_add_test(tc, client_takes_good_parts_and_refuses_bad_ones_naming_them);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
