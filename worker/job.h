/* dcps — what a trainer does around the step: the job's values for feeding it
 * data, each rank's share of the training set, and the `final:` line.
 *
 * The step (worker/step.h) knows nothing of data, epochs or results: it takes
 * gradients and gives parameters back. What both of its trainers need beyond
 * that lives here, so that they do it the same way: dcps-worker's trainer
 * (worker/trainer.c) and dcps.torch, through the extension (python/_dcps.c).
 * This module is part of libdcpsclient, so that the extension can call it,
 * but no installed header declares it: libdcps does not export it. */
#ifndef DCPS_WORKER_JOB_H
#define DCPS_WORKER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/step.h"

/* The job's values a caller needs to feed a step: its rank and worker count,
 * the mode (enum dcps_mode), the seed, batch size and epochs of [data], the
 * [worker] log_every and buffer_every, and the model's size. */
typedef struct {
    int rank, workers, mode, batch_size, epochs, log_every, buffer_every;
    uint64_t seed;
    size_t n;
    /* [optimizer], resolved (auto keys given their value): what dcps.torch
     * compares a param group's torch.optim options with */
    const char *optimizer; /* the rule's name (never dcasgd) */
    double lr, momentum, beta1, beta2, eps, weight_decay;
    bool nesterov;
} dcps_job_t;

/* Fills out with the values of the job that step s was opened with. */
void dcps_job_get(const dcps_step_t *s, dcps_job_t *out);

/* Rank `rank`'s share of epoch `epoch` (from 1) of a training set of n
 * examples: a permutation of 0..n−1 seeded by seed and epoch, of which rank r
 * of P takes positions r, r + P, r + 2P, ... in that order; every rank computes
 * the same permutation, so the shares are disjoint. Writes the share to the
 * start of order (n entries of room) and returns its length. dcps-worker's
 * batches are consecutive runs of batch_size entries of it, the last one
 * possibly shorter; dcps.torch.shard uses the same order. */
uint32_t dcps_job_share(uint64_t seed, int epoch, int rank, int workers, uint32_t n,
                        uint32_t *order);

/* What the caller knows of the run, for the final: line. NAN: unknown. */
typedef struct {
    double test_acc, test_loss, train_loss;
    int epochs;         /* epochs trained */
    uint64_t samples;   /* training examples this process computed */
    const char *device; /* where the model ran ("cpu", "gpu"); NULL: "cpu" */
    int compute_ms;     /* emulated compute per step; 0: none */
    double elapsed_s;   /* seconds of training, measured by the caller (dcps.torch
                           leaves out its user's evaluation); 0: since dcps_step_start */
} dcps_job_result_t;

/* Writes the `final:` line (docs/operating.md, Output; no newline) of the
 * worker that step s is into buf: rank, the caller's results, steps, elapsed
 * time (r->elapsed_s, or since dcps_step_start when that is 0), traffic, and
 * the job's mode, optimizer and compression. Returns the length it needed (as
 * snprintf). */
int dcps_job_summary(const dcps_step_t *s, const dcps_job_result_t *r, char *buf, size_t len);

#endif
