/* dcps tests — running the real programs; see harness.h. */
#include "tests/harness.h"
#include "tests/scratch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static dcps_scratch_t dir;
static pid_t procs[H_MAX_PROCS];
static int n_procs;

/* Made on first use in each process: Check forks a process per test, and a
 * test's directory is that process's to remove when it passes. */
const char *h_dir(void)
{
    if (dir.owner != getpid() && dcps_scratch_new(&dir) != 0) {
        perror("h_dir: mkdtemp");
        abort();
    }
    return dir.path;
}

/* A path buffer that stays valid for the next 15 calls. */
static char *slot(void)
{
    static char buf[16][512];
    static int at;
    return buf[at++ % 16];
}

const char *h_path(const char *tag, const char *ext)
{
    char *p = slot();
    snprintf(p, 512, "%s/%s.%s", h_dir(), tag, ext);
    return p;
}

const char *h_write(const char *name, const char *text)
{
    char *p = slot();
    snprintf(p, 512, "%s/%s", h_dir(), name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(p);
        abort();
    }
    return p;
}

pid_t h_spawn(const char *prog, const char *tag, const char *const *argv)
{
    char path[512];
    const char *bd = getenv("DCPS_BUILDDIR");
    const char *args[64];
    int n = 0;

    snprintf(path, sizeof path, "%s/%s", bd && *bd ? bd : ".", prog);
    args[n++] = path;
    while (*argv && n < 63)
        args[n++] = *argv++;
    args[n] = NULL;
    const char *out = h_path(tag, "out"), *err = h_path(tag, "err");
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        execv(path, (char *const *)args);
        _exit(127);
    }
    if (pid > 0 && n_procs < H_MAX_PROCS)
        procs[n_procs++] = pid;
    return pid;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Exit statuses of processes h_running reaped, for h_wait. */
static pid_t reaped_pid[H_MAX_PROCS];
static int reaped_status[H_MAX_PROCS], n_reaped;

static void forget(pid_t pid)
{
    for (int i = 0; i < n_procs; i++)
        if (procs[i] == pid)
            procs[i] = procs[--n_procs];
}

static int decode(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int h_running(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, WNOHANG) != pid)
        return 1;
    forget(pid);
    if (n_reaped < H_MAX_PROCS) {
        reaped_pid[n_reaped] = pid;
        reaped_status[n_reaped++] = status;
    }
    return 0;
}

int h_wait(pid_t pid, int timeout_ms)
{
    double until = now_ms() + timeout_ms;
    int status;
    for (int i = 0; i < n_reaped; i++)
        if (reaped_pid[i] == pid) {
            status = reaped_status[i];
            reaped_pid[i] = reaped_pid[--n_reaped];
            reaped_status[i] = reaped_status[n_reaped];
            return decode(status);
        }
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            forget(pid);
            return decode(status);
        }
        if (r < 0)
            return -1;
        if (now_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            forget(pid);
            return -1;
        }
        usleep(10000);
    }
}

int h_stop(pid_t pid, int timeout_ms)
{
    kill(pid, SIGTERM);
    return h_wait(pid, timeout_ms);
}

/* Shard 0's endpoint, for shard s > 0 (--leader: a sync job's other shards
 * connect to shard 0, server/rounds.h), when shard 0 was started here with a
 * port of its choosing; else NULL. */
static const char *leader_of(int s, char *buf, size_t len)
{
    FILE *f = s > 0 ? fopen(h_path("server0", "endpoint"), "r") : NULL;
    bool ok = f && fgets(buf, (int)len, f);
    if (f)
        fclose(f);
    if (!ok)
        return NULL;
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

pid_t h_server(const char *job, int s, char *endpoint)
{
    char shard[16], tag[32], ep0[256];
    snprintf(shard, sizeof shard, "%d", s);
    snprintf(tag, sizeof tag, "server%d", s);
    const char *leader = leader_of(s, ep0, sizeof ep0);
    const char *epf = h_path(tag, "endpoint");
    unlink(epf);
    const char *argv[] = {"--config", job,    "--shard", shard, "--endpoint-file",
                          epf,      leader ? "--leader" : NULL, leader, NULL};
    pid_t pid = h_spawn("dcps-server", tag, argv);
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(epf, "r");
        if (f) {
            char *ok = fgets(endpoint, 256, f);
            fclose(f);
            if (ok) {
                endpoint[strcspn(endpoint, "\n")] = 0;
                return pid;
            }
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            forget(pid);
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

const char *h_slurp(const char *path)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    buf[n] = 0;
    return buf;
}

double h_final(const char *text, const char *key)
{
    const char *line = NULL, *p = text;
    while ((p = strstr(p, "final:")) != NULL) {
        if (p == text || p[-1] == '\n')
            line = p;
        p++;
    }
    if (!line)
        return NAN;
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *end = strchr(line, '\n');
    const char *v = strstr(line, pat);
    if (!v || (end && v > end))
        return NAN;
    return strtod(v + strlen(pat), NULL);
}

int h_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

double h_metric(int port, const char *series)
{
    static char buf[1 << 17];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {5, 0};
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    size_t n = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NAN;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1) {
        close(fd);
        return NAN;
    }
    for (ssize_t got; n < sizeof buf - 1 && (got = recv(fd, buf + n, sizeof buf - 1 - n, 0)) > 0;)
        n += (size_t)got;
    buf[n] = '\0';
    close(fd);
    for (const char *v = strstr(buf, series); v; v = strstr(v + 1, series))
        if (v[-1] == '\n' && v[strlen(series)] == ' ')
            return strtod(v + strlen(series) + 1, NULL);
    return NAN;
}

void h_gradient(float *g, size_t n, uint64_t seed)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * seed;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g[i] =
            (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * (float)(1u << (x & 7)) * 1e-2f;
    }
}

void h_cleanup(void)
{
    for (int i = 0; i < n_procs; i++) {
        kill(procs[i], SIGKILL);
        waitpid(procs[i], NULL, 0);
    }
    n_procs = 0;
}
