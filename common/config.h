/* dcps — the job file.
 *
 * One INI file describes a job; servers and workers read the same file. Every key
 * is a row of one table (config.c): section, name, type, default, range and a
 * one-line description. The table drives parsing, the checks, `--set` overrides
 * and `--dump-config`, so a key cannot exist without its default and its doc.
 *
 * Errors name the file (or "--set"), the line (or the argument's position) and the
 * key: "job.ini:12: [optimizer] lr: 7 is outside [0, 10]". An unknown key, a key
 * given twice, a bad value and a syntax error all stop the load. */
#ifndef DCPS_CONFIG_H
#define DCPS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/schedule.h"

#define DCPS_MAX_SHARDS 64
#define DCPS_MAX_LAYERS 16
#define DCPS_ENDPOINT_MAX 256
#define DCPS_PATH_MAX 1024
#define DCPS_NAME_MAX 64

/* [model] params: how the model's size n is known. DCPS_PARAMS_LAYERS (the
 * default): counted from [model] layers, the built-in MLP. DCPS_PARAMS_AUTO:
 * the shards learn n from rank 0's HELLO (server/router.c), so that a model of
 * any shape needs no arithmetic; each worker program knows its own model's n.
 * Any other value is n itself. */
#define DCPS_PARAMS_LAYERS 0
#define DCPS_PARAMS_AUTO UINT64_MAX
/* The largest n a shard learns from rank 0: a HELLO comes from the network,
 * and a shard sizes its memory by it. 2^30 is also the largest vector the
 * Top-k selection handles (kernels/topk.h); a larger model gives params. */
#define DCPS_PARAMS_AUTO_MAX ((uint64_t)1 << 30)

enum dcps_mode { DCPS_MODE_ASYNC, DCPS_MODE_SYNC, DCPS_MODE_SSP };
/* [optimizer] kind. dcasgd is sgd with delay compensation (dcps_config_delay). */
enum dcps_optimizer {
    DCPS_OPT_SGD, DCPS_OPT_MOMENTUM, DCPS_OPT_DCASGD, DCPS_OPT_ADAM, DCPS_OPT_ADAMW,
    DCPS_OPT_ADAGRAD
};
/* [optimizer] delay_compensation. */
enum dcps_delay { DCPS_DELAY_NONE, DCPS_DELAY_CONSTANT, DCPS_DELAY_ADAPTIVE };
enum dcps_push { DCPS_PUSH_DENSE, DCPS_PUSH_TOPK, DCPS_PUSH_TWOBIT };
enum dcps_values { DCPS_VALUES_FP32, DCPS_VALUES_FP16, DCPS_VALUES_BF16, DCPS_VALUES_INT8 };
enum dcps_pull { DCPS_PULL_DENSE, DCPS_PULL_DELTA };
enum dcps_device { DCPS_DEVICE_AUTO, DCPS_DEVICE_CPU, DCPS_DEVICE_GPU };

typedef struct dcps_config {
    /* [job] */
    char job_name[DCPS_NAME_MAX];
    uint64_t job_id; /* 0 in the file: derived from job_name (FNV-1a), never 0 after load */
    int workers;
    int mode; /* enum dcps_mode */
    int staleness;
    uint64_t seed;
    char log_level[16];

    /* [servers] */
    int n_shards;
    char shards[DCPS_MAX_SHARDS][DCPS_ENDPOINT_MAX];

    /* [model] */
    int n_layers; /* sizes, input first: 784,256,128,10 gives n_layers = 4 */
    int layers[DCPS_MAX_LAYERS];
    uint64_t params;   /* [model] params as given: DCPS_PARAMS_LAYERS, DCPS_PARAMS_AUTO or n */
    uint64_t n_params; /* the model's size n: from layers (sum of in*out + out) or params;
                          0 with params = auto, until the program sets it (a shard
                          learns it from rank 0; a worker knows its model) */

    /* [data] */
    char train_images[DCPS_PATH_MAX];
    char train_labels[DCPS_PATH_MAX];
    char test_images[DCPS_PATH_MAX];
    char test_labels[DCPS_PATH_MAX];
    int batch_size;
    int epochs;
    int train_limit; /* use only the first train_limit training examples; 0: all */

    /* [optimizer] */
    int opt_kind; /* enum dcps_optimizer */
    double lr;
    double momentum;
    bool nesterov;
    double beta1, beta2;
    double eps;          /* NAN: auto, the rule's torch default (dcps_config_eps) */
    double weight_decay; /* NAN: auto (dcps_config_weight_decay) */
    bool lazy;
    int delay;           /* enum dcps_delay, as given (dcps_config_delay resolves kind = dcasgd) */
    double dc_lambda;
    bool dc_adaptive;
    double dc_ms_decay;
    double dc_epsilon;
    /* [optimizer] schedule */
    dcps_schedule_t sched; /* schedule, warmup_steps, total_steps, step_every, step_gamma,
                              min_lr: the lr of each update (common/schedule.h) */

    /* [compression] */
    int push; /* enum dcps_push */
    int pull; /* enum dcps_pull */
    int values;       /* enum dcps_values: the wire format of pushed and pulled values */
    double threshold; /* push = twobit: tau */
    double density;
    double pull_density; /* 0: density */
    int parts;           /* dense pushes and replies in parts per shard; 0: by size */
    int density_warmup_epochs; /* 0: off */
    bool error_feedback;
    double momentum_correction; /* 0: off; else the momentum factor */
    double clip_norm;           /* 0: off */
    int warmup_steps;
    int correction_every;
    bool pipeline;
    double local_lr; /* 0: [optimizer] lr */

    /* [worker] */
    int device; /* enum dcps_device */
    int log_every;
    int buffer_every; /* dcps.torch: buffers go to or come from shard 0 every N steps */
    char metrics[DCPS_PATH_MAX];
    int timeout_ms;
    int retries;
    int delay_ms;
    int compute_ms; /* 0: the MLP computes the gradients */

    /* [server] */
    char checkpoint_dir[DCPS_PATH_MAX];
    int checkpoint_every; /* seconds; 0: only on SIGTERM */
    int checkpoint_keep;
    int metrics_port;
    char metrics_address[16]; /* dotted IPv4 */
    int heartbeat_ms;
    int dead_after_ms;

    /* [security] */
    bool curve;
    char server_secret_key_file[DCPS_PATH_MAX];
    char server_public_key[64];
    char worker_keys_dir[DCPS_PATH_MAX];
    char worker_secret_key_file[DCPS_PATH_MAX];
} dcps_config_t;

/* The parameter count of the MLP of [model] layers: the sum over layers of
 * in*out + out (weights and biases). */
uint64_t dcps_config_layers_params(const dcps_config_t *cfg);

/* Whether a model of n parameters fits the job: n in [1, 2^32 - 1] (indices
 * are 32-bit on the wire), and every shard of the shard map owns some (n at
 * least 64 per shard, common/shardmap.h). Returns 0, or DCPS_E_SIZE with a
 * sentence in why that starts with n ("110 parameters, too few for the 3
 * [servers] shards: shard 0 would own none"). The load checks it for layers
 * and an explicit params; with params = auto, whoever learns n does. */
int dcps_config_check_size(const dcps_config_t *cfg, uint64_t n, char *why, size_t whylen);

/* Fills cfg with every key's default. */
void dcps_config_defaults(dcps_config_t *cfg);

/* Loads `path` over the defaults, then applies the overrides ("section.key=value",
 * in order), then checks the keys against each other (derived values, shard
 * count against model size, ...). Returns 0, or DCPS_E_CONFIG with a sentence in
 * err (file, line, key and what is wrong) and cfg in an unspecified state.
 * path may be NULL: defaults plus overrides only. */
int dcps_config_load(dcps_config_t *cfg, const char *path, const char *const *overrides,
                     size_t n_overrides, char *err, size_t errlen);

/* Refuses settings that the table accepts, so that job files keep their shape,
 * but that this build cannot run (a sentence in err naming the key and path,
 * DCPS_E_CONFIG); never replaces them silently. Today that is [security] curve
 * = true with a libzmq built without CURVE. Both programs call it after
 * dcps_config_load, before they bind or connect. */
int dcps_config_supported(const dcps_config_t *cfg, const char *path, char *err, size_t errlen);

/* Which side of the job a program is: the keys each needs differ. */
enum dcps_role { DCPS_ROLE_SERVER, DCPS_ROLE_WORKER };

/* With [security] curve = true, checks that the keys `role` needs are set: a
 * shard needs server_secret_key_file and worker_keys_dir, a worker
 * server_public_key and worker_secret_key_file. Returns 0, or DCPS_E_CONFIG
 * with a sentence in err naming path (if not NULL) and the first key missing.
 * Opens no file: reading the keys is common/keys.h's. */
int dcps_config_check_role(const dcps_config_t *cfg, const char *path, int role, char *err,
                           size_t errlen);

/* Writes the reference: one line per key with its default, range and doc, in
 * INI form (a valid job file of defaults). */
void dcps_config_dump(FILE *out);

/* Writes the values in cfg as a job file (what a program actually runs with). */
void dcps_config_write(const dcps_config_t *cfg, FILE *out);

/* SIGHUP: takes a reloaded job file `next` into the running one. Only keys
 * marked as reloadable in the reference (dcps_config_dump: [optimizer] lr,
 * [job] log_level, [server] checkpoint_every and checkpoint_keep, [security]
 * worker_keys_dir) may differ:
 * then they are copied
 * into *running, `changes` lists them ("[optimizer] lr 0.05 -> 0.02; ...",
 * empty if nothing changed) and it returns 0. If any other key differs it
 * returns DCPS_E_CONFIG, err lists every such key with both values, and
 * *running is unchanged. */
int dcps_config_reload(dcps_config_t *running, const dcps_config_t *next, char *changes,
                       size_t clen, char *err, size_t errlen);

/* The name of an enum value as the job file spells it ("async", "dcasgd"). */
const char *dcps_config_mode_name(int mode);
const char *dcps_config_optimizer_name(int kind);
const char *dcps_config_push_name(int push);
const char *dcps_config_pull_name(int pull);
const char *dcps_config_values_name(int values);
/* The FrameDesc dtype of [compression] values: 1 (float32), or a shorter
 * format of proto/quant.h (4 float16, 5 bfloat16, 6 int8). */
uint32_t dcps_config_values_dtype(const dcps_config_t *cfg);
const char *dcps_config_delay_name(int delay);

/* The update rule a shard applies: [optimizer] kind, with dcasgd read as sgd
 * (its delay compensation is dcps_config_delay's). */
int dcps_config_rule(const dcps_config_t *cfg);

/* [optimizer] delay_compensation, or for kind = dcasgd with none given,
 * adaptive or constant as dc_adaptive says. */
int dcps_config_delay(const dcps_config_t *cfg);

/* [optimizer] eps and weight_decay with auto resolved as torch.optim's
 * defaults: eps 1e-10 for adagrad, else 1e-8; weight_decay 0.01 for adamw,
 * else 0. */
double dcps_config_eps(const dcps_config_t *cfg);
double dcps_config_weight_decay(const dcps_config_t *cfg);

/* The density of epoch `epoch` (from 1; below 1 counts as 1) under DGC's
 * warm-up over `warmup_epochs` E: for e <= E, 0.25^(1 - (e-1)/E) · density^((e-1)/E),
 * falling geometrically from 25% towards density; density itself after, and
 * always when density >= 0.25 or E is 0. Never above 0.25 in the warm-up. */
double dcps_config_density_at(double density, int warmup_epochs, int epoch);

/* The entries a selection at `density` takes of n: ⌈density · n⌉, at least 1
 * and at most n (docs/algorithms.md). */
size_t dcps_config_entries(double density, size_t n);

/* The density of delta pulls: [compression] pull_density, or density if 0. */
double dcps_config_pull_density(const dcps_config_t *cfg);

#endif
