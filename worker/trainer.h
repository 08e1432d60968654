/* dcps — the trainer: one worker rank of a data-parallel job.
 *
 * Trains the job's MLP on its share of the training set through the shards:
 * for each batch it computes the gradient at the parameters it last pulled,
 * adds it to its error-feedback residual, pushes, and pulls the parameters back.
 * Rank 0 initialises the shards (seeded) when they are empty; the others wait.
 * Progress goes to `out` every [worker] log_every steps, the metrics CSV to
 * metrics_path if set, and the last line on `out` is the `final:` summary. */
#ifndef DCPS_TRAINER_H
#define DCPS_TRAINER_H

#include <stdio.h>

#include "common/config.h"

/* Runs the whole job for `rank`. Returns 0, or a negative code with a sentence in
 * err. metrics_path may be NULL or "" (no CSV). */
int dcps_trainer_run(const dcps_config_t *cfg, int rank, const char *metrics_path, FILE *out,
                     char *err, size_t errlen);

#endif
