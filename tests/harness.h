/* dcps tests — running the real programs.
 *
 * Helpers for the integration tests: a scratch directory, job files, starting
 * dcps-server and dcps-worker from the build tree (DCPS_BUILDDIR) with their
 * output in files, waiting with a bound, and reading the `final:` line. Servers
 * bind tcp://127.0.0.1:* (an ephemeral port) and report the port through
 * --endpoint-file. Everything started is killed by h_cleanup. */
#ifndef DCPS_TEST_HARNESS_H
#define DCPS_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H_MAX_PROCS 32

/* A fresh directory under TMPDIR for this test, made on the first call in the
 * test's process; static storage. It is removed when the test passes and kept
 * when it fails (tests/scratch.h). */
const char *h_dir(void);

/* Writes `text` to h_dir()/name and returns the path (static, per name slot). */
const char *h_write(const char *name, const char *text);

/* Starts prog (dcps-server or dcps-worker, from DCPS_BUILDDIR) with argv (NULL
 * terminated, without argv[0]); stdout and stderr go to h_dir()/<tag>.out and
 * .err. Returns the pid; the process is killed by h_cleanup if still running. */
pid_t h_spawn(const char *prog, const char *tag, const char *const *argv);

/* Starts shard s of job, waits until it has bound, and stores its endpoint in
 * endpoint (256 bytes). Returns the pid, or -1 if it did not bind within 10 s. */
pid_t h_server(const char *job, int s, char *endpoint);

/* Waits for pid at most timeout_ms. Returns its exit status, 128 + signal if it
 * was killed by one, or -1 on timeout (it is then killed with SIGKILL). */
int h_wait(pid_t pid, int timeout_ms);

/* 1 while pid runs; 0 once it has exited (h_wait then returns its status). */
int h_running(pid_t pid);

/* Sends SIGTERM and waits as h_wait does. */
int h_stop(pid_t pid, int timeout_ms);

/* Reads a whole file into a static buffer ("" if missing). */
const char *h_slurp(const char *path);

/* The path of h_dir()/<tag>.<ext> (static, rotating buffers). */
const char *h_path(const char *tag, const char *ext);

/* From the last line starting with "final:" in text, the value of key as a
 * double; NAN if absent. */
double h_final(const char *text, const char *key);

/* A TCP port of 127.0.0.1 that was free a moment ago. */
int h_free_port(void);

/* The value of one sample of the Prometheus text served at 127.0.0.1:port
 * /metrics: `series` is the whole series name with its labels
 * ("dcps_version{shard=\"0\"}"); NAN if the page or the series is missing. */
double h_metric(int port, const char *series);

/* Fills g[0..n) with a gradient drawn from seed (a xorshift stream): values
 * in ±0.005 · 2^0..7, mixed magnitudes, so that float rounding shows. */
void h_gradient(float *g, size_t n, uint64_t seed);

/* Kills every process h_spawn started that is still running. */
void h_cleanup(void);

#endif
