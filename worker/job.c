/* dcps — the job around a step; see job.h.
 *
 * Everything here reads the step only through dcps_step_info (internal.h) and
 * the step's public counters, so the step keeps no trainer state of its own. */
#include "worker/job.h"

#include <inttypes.h>
#include <stdio.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/rng.h"
#include "worker/internal.h"

void dcps_job_get(const dcps_step_t *s, dcps_job_t *out)
{
    dcps_step_info_t in;
    dcps_step_info(s, &in);
    *out = (dcps_job_t){.rank = in.rank,
                        .workers = in.cfg->workers,
                        .mode = in.cfg->mode,
                        .batch_size = in.cfg->batch_size,
                        .epochs = in.cfg->epochs,
                        .log_every = in.cfg->log_every,
                        .buffer_every = in.cfg->buffer_every,
                        .seed = in.cfg->seed,
                        .n = in.n,
                        .optimizer = dcps_config_optimizer_name(dcps_config_rule(in.cfg)),
                        .lr = in.cfg->lr,
                        .momentum = in.cfg->momentum,
                        .beta1 = in.cfg->beta1,
                        .beta2 = in.cfg->beta2,
                        .eps = dcps_config_eps(in.cfg),
                        .weight_decay = dcps_config_weight_decay(in.cfg),
                        .nesterov = in.cfg->nesterov};
}

uint32_t dcps_job_share(uint64_t seed, int epoch, int rank, int workers, uint32_t n,
                        uint32_t *order)
{
    uint32_t k = 0;
    dcps_rng_t rng;
    dcps_rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    dcps_rng_shuffle_u32(&rng, order, n);
    for (uint32_t i = (uint32_t)rank; i < n; i += (uint32_t)workers)
        order[k++] = order[i];
    return k;
}

int dcps_job_summary(const dcps_step_t *s, const dcps_job_result_t *r, char *buf, size_t len)
{
    dcps_step_info_t in;
    dcps_client_stats_t st;
    dcps_step_info(s, &in);
    dcps_step_stats(s, &st);
    const dcps_config_t *cfg = in.cfg;
    double elapsed = r->elapsed_s > 0   ? r->elapsed_s
                     : in.started_s > 0 ? dcps_now_s() - in.started_s
                                        : 0;
    uint64_t dense = st.bytes_pushed_dense + st.bytes_pulled_dense;
    uint64_t ran = st.clock - dcps_step_resumed(s); /* steps this process computed */
    return snprintf(
        buf, len,
        "final: rank=%d test_acc=%.4f test_loss=%.4f train_loss=%.4f steps=%" PRIu64
        " epochs=%d elapsed_s=%.2f samples_per_s=%.0f bytes_pushed=%" PRIu64
        " bytes_pulled=%" PRIu64 " bytes_per_step=%.0f traffic_ratio=%.5f mode=%s optimizer=%s "
        "compression=%s pull=%s values=%s density=%g pipeline=%s staleness_mean=%.3f staleness_max=%" PRIu64
        " dropped=%" PRIu64 " retries=%" PRIu64 " device=%s workers=%d compute_ms=%d",
        in.rank, r->test_acc, r->test_loss, r->train_loss, st.clock, r->epochs, elapsed,
        elapsed > 0 ? (double)r->samples / elapsed : 0.0, st.bytes_pushed, st.bytes_pulled,
        (double)(st.bytes_pushed + st.bytes_pulled) / (double)(ran ? ran : 1),
        dense ? (double)(st.bytes_pushed + st.bytes_pulled) / (double)dense : 1.0,
        dcps_config_mode_name(cfg->mode), dcps_config_optimizer_name(cfg->opt_kind),
        dcps_config_push_name(cfg->push), dcps_config_pull_name(cfg->pull),
        dcps_config_values_name(cfg->values), cfg->push == DCPS_PUSH_TOPK ? cfg->density : 1.0, cfg->pipeline ? "true" : "false",
        st.staleness_count ? (double)st.staleness_sum / (double)st.staleness_count : 0.0,
        st.staleness_max, st.dropped, st.retries, r->device ? r->device : "cpu", cfg->workers,
        r->compute_ms);
}
