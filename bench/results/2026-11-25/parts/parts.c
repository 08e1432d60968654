/* Would a dense push and pull sent in parts meet issue 16's ratio_zmq <= 1.1?
 * An experiment, not dcps: n floats go up as P messages that a ROUTER (a
 * thread with its own ZeroMQ context) applies as they arrive (out = w - lr g
 * over each part, then one swap after the last, as the shard's out-of-place
 * update), acknowledged after the last; then a 4-byte pull is answered with w
 * as P messages sent without a copy, which the client checks and copies into
 * its array part by part as they arrive. P = 0 is the bare floor: the same
 * bytes as one message each way, no update, the reply dropped unread.
 *
 * build: cc -O2 -fvect-cost-model=cheap -pthread parts.c -lzmq -o parts
 * usage: parts [n floats, default 1048576] [round trips per run, default 200]
 *              [rounds, default 5]: each round runs P = 0, 1, 2, 4, 8, 16 in turn */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    void *sock;
    size_t n;
    int parts; /* 0: the bare floor */
    float *w, *spare;
} server_t;

static void *server_main(void *arg)
{
    server_t *s = arg;
    int got = 0;
    for (;;) {
        char id[256];
        int idlen = zmq_recv(s->sock, id, sizeof id, 0);
        zmq_msg_t h, m;
        zmq_msg_init(&h);
        zmq_msg_init(&m);
        if (idlen < 0 || zmq_msg_recv(&h, s->sock, 0) < 0)
            return NULL;
        int more = zmq_msg_more(&h);
        if (more && zmq_msg_recv(&m, s->sock, 0) < 0)
            return NULL;
        if (!more) { /* a pull: w in parts (or, bare, one message) */
            int p = s->parts ? s->parts : 1;
            size_t per = s->n / (size_t)p;
            for (int i = 0; i < p; i++) {
                zmq_msg_t out;
                zmq_msg_init_data(&out, s->w + (size_t)i * per, per * 4, NULL, NULL);
                zmq_send(s->sock, id, (size_t)idlen, ZMQ_SNDMORE);
                zmq_msg_send(&out, s->sock, 0);
            }
        } else if (s->parts == 0) { /* bare: acknowledge at once */
            zmq_send(s->sock, id, (size_t)idlen, ZMQ_SNDMORE);
            zmq_send(s->sock, "ack!", 4, 0);
        } else { /* a push part: its index, then its floats */
            uint32_t i;
            memcpy(&i, zmq_msg_data(&h), 4);
            size_t per = s->n / (size_t)s->parts, lo = (size_t)i * per;
            const float *g = zmq_msg_data(&m);
            uint32_t acc = 0;
            for (size_t j = 0; j < per; j++) {
                float o = s->w[lo + j] - 1e-9f * g[j];
                uint32_t u;
                memcpy(&u, &o, 4);
                acc |= (u & 0x7f800000u) + 0x00800000u;
                s->spare[lo + j] = o;
            }
            if (acc & 0x80000000u)
                fprintf(stderr, "non-finite\n");
            if (++got == s->parts) {
                float *t = s->w;
                s->w = s->spare, s->spare = t, got = 0;
                zmq_send(s->sock, id, (size_t)idlen, ZMQ_SNDMORE);
                zmq_send(s->sock, "ack!", 4, 0);
            }
        }
        zmq_msg_close(&h);
        zmq_msg_close(&m);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double run(size_t n, int parts, int trips)
{
    void *sctx = zmq_ctx_new(), *cctx = zmq_ctx_new();
    void *r = zmq_socket(sctx, ZMQ_ROUTER), *d = zmq_socket(cctx, ZMQ_DEALER);
    char ep[64];
    size_t len = sizeof ep;
    zmq_bind(r, "tcp://127.0.0.1:*");
    zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len);
    zmq_connect(d, ep);
    server_t s = {r, n, parts, malloc(4 * n), malloc(4 * n)};
    float *grad = malloc(4 * n), *mine = malloc(4 * n);
    for (size_t i = 0; i < n; i++)
        s.w[i] = s.spare[i] = 1.0f, grad[i] = 1.0f, mine[i] = 0;
    pthread_t th;
    pthread_create(&th, NULL, server_main, &s);
    double *t = malloc(sizeof *t * (size_t)trips);
    int p = parts ? parts : 1;
    size_t per = n / (size_t)p;
    for (int k = -10; k < trips; k++) {
        double t0 = now();
        for (int i = 0; i < p; i++) { /* separate messages: index, then the part, no copy */
            zmq_msg_t m;
            uint32_t idx = (uint32_t)i;
            zmq_send(d, &idx, 4, ZMQ_SNDMORE);
            zmq_msg_init_data(&m, grad + (size_t)i * per, per * 4, NULL, NULL);
            zmq_msg_send(&m, d, 0);
        }
        char ack[4];
        zmq_recv(d, ack, 4, 0);
        zmq_send(d, "pull", 4, 0);
        for (int i = 0; i < p; i++) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            zmq_msg_recv(&m, d, 0);
            if (parts) { /* checked copy into place */
                const uint32_t *v = zmq_msg_data(&m);
                uint32_t acc = 0;
                float *dst = mine + (size_t)i * per;
                for (size_t j = 0; j < per; j++) {
                    acc |= (v[j] & 0x7f800000u) + 0x00800000u;
                    memcpy(&dst[j], &v[j], 4);
                }
                if (acc & 0x80000000u)
                    fprintf(stderr, "non-finite\n");
            }
            zmq_msg_close(&m);
        }
        if (k >= 0)
            t[k] = now() - t0;
    }
    qsort(t, (size_t)trips, sizeof *t, cmp);
    double med = t[trips / 2];
    zmq_close(d);
    zmq_ctx_term(cctx);
    zmq_ctx_shutdown(sctx);
    pthread_join(th, NULL);
    zmq_close(r);
    zmq_ctx_term(sctx);
    free(s.w), free(s.spare), free(grad), free(mine), free(t);
    return med;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1048576;
    int trips = argc > 2 ? atoi(argv[2]) : 200, rounds = argc > 3 ? atoi(argv[3]) : 5;
    const int ps[] = {0, 1, 2, 4, 8, 16}; /* 0: the bare floor */
    printf("round,n,parts,median_ms\n");
    for (int r = 1; r <= rounds; r++)
        for (int i = 0; i < 6; i++) {
            printf("%d,%zu,%d,%.3f\n", r, n, ps[i], run(n, ps[i], trips) * 1e3);
            fflush(stdout);
        }
    return 0;
}
