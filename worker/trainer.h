/* dcps — the trainer: one worker rank of a data-parallel job.
 *
 * Trains the job's MLP on its share of the training set through the shards:
 * for each batch it computes the gradient at the parameters it last pulled,
 * adds it to its error-feedback residual, pushes, and pulls the parameters back.
 * Rank 0 initialises the shards (seeded) when they are empty; the others wait.
 * After its last batch a worker tells the shards it is done (so that no step
 * waits for it), meets the others at a barrier and evaluates the final model.
 * Progress goes to `out` every [worker] log_every steps, the metrics CSV to
 * metrics_path if set, and the last line on `out` is the `final:` summary. */
#ifndef DCPS_TRAINER_H
#define DCPS_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "common/config.h"

/* Emulated compute ([worker] compute_ms > 0): the worker reads no data file.
 * Its training set is [data] train_limit examples, or DCPS_EMULATED_EXAMPLES
 * (the size of Fashion-MNIST's training set, not read from it) when that is 0,
 * dealt to the ranks as real examples are; with batch_size and epochs it sets
 * the number of steps. It evaluates nothing: test_acc, test_loss and the losses
 * are NaN. Each step sleeps compute_ms and its gradient is the window
 * pool[off, off + n) of a pool of n + DCPS_SYNTH_SLACK values drawn once per
 * rank from N(0, DCPS_SYNTH_STD²), seeded by the job's seed and the rank, where
 * off = dcps_trainer_synthetic_offset(seed, rank, step) is in
 * [0, DCPS_SYNTH_SLACK]. A window costs nothing to draw, so the workers spend
 * their CPU on what a GPU worker would spend it on: compressing and
 * communicating. */
#define DCPS_EMULATED_EXAMPLES 60000
#define DCPS_SYNTH_SLACK 1048576
#define DCPS_SYNTH_STD 0.01f
void dcps_trainer_synthetic_pool(uint64_t seed, int rank, float *pool, size_t len);
size_t dcps_trainer_synthetic_offset(uint64_t seed, int rank, long step);

/* Runs the whole job for `rank`. Returns 0, or a negative code with a sentence in
 * err. metrics_path may be NULL or "" (no CSV). */
int dcps_trainer_run(const dcps_config_t *cfg, int rank, const char *metrics_path, FILE *out,
                     char *err, size_t errlen);

#endif
