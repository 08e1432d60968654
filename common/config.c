/* dcps — the job file; see config.h.
 *
 * One table of keys drives everything: parsing a file (libinih) or a `--set`
 * override, the defaults, the range checks, dcps_config_dump and
 * dcps_config_write. This file owns the job file's text and the checks between
 * keys; it opens no file named in the job and binds nothing.
 *
 * Every value accepted here can be written back by dcps_config_write and read
 * again: strings are limited to what fits on one line, and the only values that
 * may need several lines (servers.shards, model.layers) may continue on indented
 * lines, which libinih (built with INI_ALLOW_MULTILINE) hands over one by one. */
#include "common/config.h"

#include "common/error.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/shardmap.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* libinih reads each line into INI_MAX_LINE bytes, NUL included. */
#define LINE_CHARS (INI_MAX_LINE - 1)
/* An endpoint must fit, with its comma, on the first line after "shards = ". */
#define ENDPOINT_CHARS (LINE_CHARS - (int)sizeof "shards = ")
/* Room for any list value once its continuation lines are joined. */
#define LIST_CHARS (DCPS_MAX_SHARDS * DCPS_ENDPOINT_MAX)
#define LAYER_MAX 65536

enum type {
    T_INT, T_U64, T_DOUBLE, T_BOOL, T_STRING, T_Z85, T_ENUM, T_LEVEL, T_SHARDS, T_LAYERS, T_IPV4,
    T_PARAMS
};

struct key {
    const char *section, *name;
    enum type type;
    size_t off, size;        /* the field in dcps_config_t */
    const char *def;         /* parsed like any value by dcps_config_defaults */
    double lo, hi;           /* T_INT, T_DOUBLE: bounds; T_STRING: lo = minimum length */
    bool lo_open, hi_open;   /* the bound itself is outside the range */
    bool auto_ok;            /* T_DOUBLE: "auto" is a value too (NAN) */
    const char *const *names; /* T_ENUM, T_LEVEL: the spellings, index = value */
    const char *doc;
    bool live;               /* may change while running: SIGHUP reloads it (server) */
};

static const char *const mode_names[] = {"async", "sync", "ssp", NULL};
static const char *const opt_names[] = {"sgd", "momentum", "dcasgd", "adam", "adamw", "adagrad",
                                        NULL};
static const char *const delay_names[] = {"none", "constant", "adaptive", NULL};
/* Index = enum dcps_schedule_kind (common/schedule.h). */
static const char *const schedule_names[] = {"constant", "step", "cosine", "linear",
                                             "inverse_sqrt", NULL};
static const char *const push_names[] = {"dense", "topk", "twobit", NULL};
static const char *const values_names[] = {"fp32", "fp16", "bf16", "int8", NULL};
static const char *const pull_names[] = {"dense", "delta", NULL};
static const char *const device_names[] = {"auto", "cpu", "gpu", NULL};
/* Index = syslog priority - DCPS_LOG_ERR, as dcps_log_level_parse returns it. */
static const char *const level_names[] = {"err", "warning", "notice", "info", "debug", NULL};

#define FIELD(f) .off = offsetof(dcps_config_t, f), .size = sizeof(((dcps_config_t *)0)->f)
#define ROW(sec, k, t, f, d, doc_)                                                             \
    .section = sec, .name = k, .type = t, FIELD(f), .def = d, .doc = doc_
#define INT(sec, k, f, d, lo_, hi_, doc_) {ROW(sec, k, T_INT, f, d, doc_), .lo = lo_, .hi = hi_}
#define DBL(sec, k, f, d, lo_, lo_open_, hi_, hi_open_, doc_)                                  \
    {ROW(sec, k, T_DOUBLE, f, d, doc_), .lo = lo_, .lo_open = lo_open_, .hi = hi_,              \
     .hi_open = hi_open_}
#define ENUM(sec, k, f, d, names_, doc_) {ROW(sec, k, T_ENUM, f, d, doc_), .names = names_}
#define AUTO_DBL(sec, k, f, lo_, lo_open_, hi_, doc_)                                          \
    {ROW(sec, k, T_DOUBLE, f, "auto", doc_), .lo = lo_, .lo_open = lo_open_, .hi = hi_,         \
     .auto_ok = true}
#define STR(sec, k, f, d, doc_) {ROW(sec, k, T_STRING, f, d, doc_)}
#define OTHER(sec, k, t, f, d, doc_) {ROW(sec, k, t, f, d, doc_)}

static const struct key keys[] = {
    {ROW("job", "name", T_STRING, job_name, "dcps", "name of the job; id is derived from it"),
     .lo = 1},
    OTHER("job", "id", T_U64, job_id, "0", "job id checked in every message; 0: FNV-1a of name"),
    INT("job", "workers", workers, "2", 1, 1024, "number of worker processes"),
    ENUM("job", "mode", mode, "async", mode_names, "consistency model"),
    INT("job", "staleness", staleness, "4", 0, 1000, "ssp: most steps a worker may run ahead"),
    OTHER("job", "seed", T_U64, seed, "42", "seed of parameter init and data order"),
    {ROW("job", "log_level", T_LEVEL, log_level, "info", "most verbose level logged"),
     .names = level_names, .live = true},
    OTHER("servers", "shards", T_SHARDS, shards, "tcp://127.0.0.1:17001,tcp://127.0.0.1:17002",
          "shard endpoints, comma separated; position = shard index"),
    OTHER("model", "layers", T_LAYERS, layers, "784,256,128,10",
          "layer sizes of the MLP, input first"),
    OTHER("model", "params", T_PARAMS, params, "layers",
          "the model's parameter count: layers (counted from [model] layers), auto (the shards "
          "learn it from rank 0's HELLO: any model) or the count"),
    STR("data", "train_images", train_images,
        "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "training images (IDX)"),
    STR("data", "train_labels", train_labels,
        "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", "training labels (IDX)"),
    STR("data", "test_images", test_images,
        "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "test images (IDX)"),
    STR("data", "test_labels", test_labels,
        "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "test labels (IDX)"),
    INT("data", "batch_size", batch_size, "64", 1, 65536, "examples per step and worker"),
    INT("data", "epochs", epochs, "3", 1, 10000, "passes over the training set"),
    INT("data", "train_limit", train_limit, "0", 0, 1e8,
        "use the first N training examples; 0: all (emulated compute: N examples, 0: 60000)"),
    ENUM("optimizer", "kind", opt_kind, "sgd", opt_names,
         "server update rule, as torch.optim defines it (dcasgd: sgd with delay_compensation)"),
    {ROW("optimizer", "lr", T_DOUBLE, lr, "0.05", "learning rate"), .lo = 0, .lo_open = true,
     .hi = 10, .live = true},
    DBL("optimizer", "momentum", momentum, "0.9", 0, false, 1, true, "momentum coefficient"),
    OTHER("optimizer", "nesterov", T_BOOL, nesterov, "false",
          "momentum: Nesterov's form (torch.optim.SGD's nesterov)"),
    DBL("optimizer", "beta1", beta1, "0.9", 0, false, 1, true,
        "adam, adamw: decay of the gradient's running mean"),
    DBL("optimizer", "beta2", beta2, "0.999", 0, false, 1, true,
        "adam, adamw: decay of the gradient's running mean square"),
    AUTO_DBL("optimizer", "eps", eps, 0, true, 1,
             "adam, adamw, adagrad: added to the root mean square; auto: 1e-8, adagrad 1e-10"),
    AUTO_DBL("optimizer", "weight_decay", weight_decay, 0, false, 1,
             "L2 penalty added to the gradient (adamw: decoupled, w shrinks by lr times it); "
             "auto: 0.01 for adamw, else 0"),
    OTHER("optimizer", "lazy", T_BOOL, lazy, "false",
          "sparse pushes move the rule's state and parameters at the pushed entries only "
          "(as torch.optim.SparseAdam); false: as the dense rule on a gradient zero elsewhere"),
    ENUM("optimizer", "delay_compensation", delay, "none", delay_names,
         "DC-ASGD's correction of stale gradients before any rule: constant lambda or "
         "adaptive (dc_ keys)"),
    DBL("optimizer", "dc_lambda", dc_lambda, "0.04", 0, false, 1e6, false,
        "DC-ASGD delay compensation strength"),
    OTHER("optimizer", "dc_adaptive", T_BOOL, dc_adaptive, "false",
          "DC-ASGD-a: divide lambda by the root mean square of the gradient"),
    DBL("optimizer", "dc_ms_decay", dc_ms_decay, "0.95", 0, false, 1, true,
        "DC-ASGD-a: decay of the mean square"),
    DBL("optimizer", "dc_epsilon", dc_epsilon, "1e-7", 0, true, 1, false,
        "DC-ASGD-a: added to the mean square under the root"),
    ENUM("optimizer", "schedule", sched.kind, "constant", schedule_names,
         "lr schedule: the update after t others of a shard uses lr * f(t) (docs/algorithms.md, "
         "Schedules)"),
    INT("optimizer", "warmup_steps", sched.warmup_steps, "0", 0, 1e9,
        "schedule: update t < N of a shard uses lr * (t+1)/N, any schedule; 0: no warm-up "
        "(not [compression] warmup_steps)"),
    INT("optimizer", "total_steps", sched.total_steps, "0", 0, 1e9,
        "cosine, linear: the lr falls from lr after warmup_steps to min_lr at this update of "
        "a shard, then stays; greater than warmup_steps"),
    INT("optimizer", "step_every", sched.step_every, "1000", 1, 1e9,
        "step: the lr is multiplied by step_gamma every N updates of a shard after the warm-up"),
    DBL("optimizer", "step_gamma", sched.step_gamma, "0.1", 0, true, 1, false,
        "step: the factor of each decay"),
    DBL("optimizer", "min_lr", sched.min_lr, "0", 0, false, 10, false,
        "cosine, linear: the lr at total_steps and after; at most lr"),
    ENUM("compression", "push", push, "dense", push_names,
         "gradient encoding on push; twobit: each entry as +threshold, -threshold or 0"),
    ENUM("compression", "values", values, "fp32", values_names,
         "the format of the values pushed and pulled (dense, topk, delta); int8: a scale per "
         "256 values"),
    DBL("compression", "threshold", threshold, "0.01", 0, true, 1000, false,
        "twobit: an entry of gradient + residual of at least this magnitude is sent as +-this, "
        "the rest stays in the residual"),
    ENUM("compression", "pull", pull, "dense", pull_names,
         "parameter encoding on pull; delta: workers hold a lagging copy, which in sync mode "
         "is the final model"),
    DBL("compression", "pull_density", pull_density, "0", 0, false, 1, false,
        "delta pull: fraction of a shard's entries sent per pull; 0: density"),
    DBL("compression", "density", density, "0.01", 0, true, 1, false,
        "topk: fraction of entries pushed"),
    INT("compression", "density_warmup_epochs", density_warmup_epochs, "0", 0, 1000,
        "topk: density falls geometrically from 25% to density over the first N epochs; 0: off"),
    OTHER("compression", "error_feedback", T_BOOL, error_feedback, "true",
          "topk, twobit, values other than fp32: keep what was not pushed (or what rounding took) "
          "as a residual"),
    DBL("compression", "momentum_correction", momentum_correction, "0", 0, false, 1, true,
        "topk: DGC momentum correction with this momentum factor; 0: off"),
    DBL("compression", "clip_norm", clip_norm, "0", 0, false, 1e6, false,
        "scale each gradient to at most this L2 norm before compression; 0: off"),
    INT("compression", "warmup_steps", warmup_steps, "0", 0, 1e9, "dense pushes before topk starts"),
    INT("compression", "correction_every", correction_every, "0", 0, 1e9,
        "dense push every N steps; 0: never"),
    OTHER("compression", "pipeline", T_BOOL, pipeline, "false",
          "overlap compression and communication with the next step"),
    DBL("compression", "local_lr", local_lr, "0", 0, false, 10, false,
        "pipeline: step size of the local update; 0: [optimizer] lr"),
    INT("compression", "parts", parts, "0", 0, 64,
        "dense pushes and pull replies in N parts a shard, each used as it arrives; 0: by "
        "size (one per 524288 floats of a range, at most 16); 1: whole"),
    ENUM("worker", "device", device, "auto", device_names, "where gradients are computed"),
    INT("worker", "log_every", log_every, "100", 1, 1e9, "progress line every N steps"),
    INT("worker", "buffer_every", buffer_every, "10", 1, 1e9,
        "dcps.torch: share the model's buffers (BatchNorm statistics) every N steps"),
    STR("worker", "metrics", metrics, "", "metrics CSV path; empty: none"),
    INT("worker", "timeout_ms", timeout_ms, "10000", 10, 3600000, "wait for a shard's reply"),
    INT("worker", "retries", retries, "5", 0, 1000, "retries of a request before giving up"),
    INT("worker", "delay_ms", delay_ms, "0", 0, 600000,
        "sleep after each step (experiments: a slow worker)"),
    INT("worker", "compute_ms", compute_ms, "0", 0, 600000,
        "emulated compute: each step sleeps N ms and pushes a seeded synthetic gradient of "
        "the model's size instead of the MLP's (no data read, no evaluation); 0: off"),
    STR("server", "checkpoint_dir", checkpoint_dir, "",
        "directory of the shards' checkpoints, created if missing; empty: none"),
    {ROW("server", "checkpoint_every", T_INT, checkpoint_every, "60",
         "seconds between checkpoints; 0: only the one on SIGTERM"),
     .lo = 0, .hi = 86400, .live = true},
    {ROW("server", "checkpoint_keep", T_INT, checkpoint_keep, "3",
         "checkpoints of a shard kept in checkpoint_dir; older ones are removed"),
     .lo = 1, .hi = 1000, .live = true},
    INT("server", "metrics_port", metrics_port, "0", 0, 65535,
        "Prometheus /metrics on this TCP port of metrics_address; 0: none"),
    OTHER("server", "metrics_address", T_IPV4, metrics_address, "127.0.0.1",
          "IPv4 address the metrics port listens on; 0.0.0.0: every interface"),
    INT("server", "heartbeat_ms", heartbeat_ms, "1000", 10, 600000, "heartbeat interval"),
    INT("server", "dead_after_ms", dead_after_ms, "10000", 10, 3600000,
        "silence after which a worker counts as dead; > heartbeat_ms"),
    OTHER("security", "curve", T_BOOL, curve, "false",
          "encrypt and authenticate every connection with ZeroMQ CURVE: a shard admits only "
          "the workers whose keys are in worker_keys_dir"),
    STR("security", "server_secret_key_file", server_secret_key_file, "",
        "shards, curve: file of the shards' secret key (dcps-server --keygen), mode 0600"),
    OTHER("security", "server_public_key", T_Z85, server_public_key, "",
          "workers, curve: the shards' public key: the text of their key's .pub file"),
    {ROW("security", "worker_keys_dir", T_STRING, worker_keys_dir, "",
         "shards, curve: directory of the admitted workers' public keys, NAME@RANKS.pub: each "
         "for the ranks its name gives"),
     .live = true},
    STR("security", "worker_secret_key_file", worker_secret_key_file, "",
        "workers, curve: file of this worker's secret key (dcps-server --keygen), mode 0600"),
};
#define N_KEYS (sizeof keys / sizeof keys[0])

/* Formats into buf; returns DCPS_E_CONFIG so that a failing check is one line. */
static int say(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return DCPS_E_CONFIG;
}

/* The row of [section] name; -1: a known section has no such key; -2: no such section. */
static int find(const char *section, const char *name)
{
    int r = -2;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].section, section) == 0) {
            if (strcmp(keys[i].name, name) == 0)
                return (int)i;
            r = -1;
        }
    return r;
}

/* The edit distance (Levenshtein: insertions, deletions, substitutions) between
 * a and b, each cut at NAME_CMP characters: longer names are no key's. */
#define NAME_CMP 40
static int distance(const char *a, const char *b)
{
    size_t la = strnlen(a, NAME_CMP), lb = strnlen(b, NAME_CMP);
    int row[NAME_CMP + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (tolower((unsigned char)a[i - 1]) !=
                                            tolower((unsigned char)b[j - 1]));
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* A name counts as a typo of another within this distance: one edit for short
 * names, about one in three letters for longer ones. */
static int typo_max(const char *name)
{
    size_t n = strlen(name);
    return n <= 5 ? 1 : (int)(n / 3);
}

/* What an unknown [section] name (find()'s -1 or -2) was probably meant to be,
 * as "; did you mean [data] epochs?" (dotted: "; did you mean data.epochs?", as
 * --set writes it) into buf; "" when no key is near enough. Tried in order: a key
 * of the same section a typo away; the same name in another section; for an
 * unknown section, a section a typo away, with the key if it has it. */
static void suggest(const char *section, const char *name, bool dotted, char *buf, size_t n)
{
    bool known = find(section, name) == -1;
    int best = -1, best_d = INT32_MAX;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].section, section) == 0) {
            int d = distance(name, keys[i].name);
            if (d <= typo_max(name) && d < best_d)
                best = (int)i, best_d = d;
        }
    for (size_t i = 0; i < N_KEYS && best < 0; i++)
        if (strcmp(keys[i].name, name) == 0)
            best = (int)i;
    const char *sec = NULL;
    for (size_t i = 0; i < N_KEYS && best < 0 && !known; i++) {
        int d = distance(section, keys[i].section);
        if (d > typo_max(section) || d >= best_d)
            continue;
        sec = keys[i].section, best_d = d;
        int k = find(sec, name);
        if (k >= 0)
            best = k;
    }
    buf[0] = '\0';
    if (best >= 0)
        snprintf(buf, n, dotted ? "; did you mean %s.%s?" : "; did you mean [%s] %s?",
                 keys[best].section, keys[best].name);
    else if (sec)
        snprintf(buf, n, "; did you mean [%s]?", sec);
}

static void join_names(const char *const *names, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", names[i]);
}

/* The longest string value that still fits on one line as "name = value". */
static size_t string_max(const struct key *k)
{
    size_t line = LINE_CHARS - strlen(k->name) - 3;
    return k->size - 1 < line ? k->size - 1 : line;
}

/* "[1, 1024]", "(0, 10]": the bounds of a number key. */
static void range_text(const struct key *k, char *buf, size_t n)
{
    snprintf(buf, n, "%c%.10g, %.10g%c", k->lo_open ? '(' : '[', k->lo, k->hi,
             k->hi_open ? ')' : ']');
}

/* What a key accepts, for the reference. */
static void describe(const struct key *k, char *buf, size_t n)
{
    switch (k->type) {
    case T_INT: range_text(k, buf, n); break;
    case T_DOUBLE: {
        size_t at = (size_t)snprintf(buf, n, "%s", k->auto_ok ? "auto or " : "");
        range_text(k, buf + at, n - at);
        break;
    }
    case T_U64: snprintf(buf, n, "[0, %" PRIu64 "]", UINT64_MAX); break;
    case T_BOOL: snprintf(buf, n, "true or false"); break;
    case T_STRING: snprintf(buf, n, "text, %d to %zu characters", (int)k->lo, string_max(k)); break;
    case T_Z85: snprintf(buf, n, "empty or 40 Z85 characters"); break;
    case T_ENUM:
    case T_LEVEL: join_names(k->names, buf, n); break;
    case T_SHARDS:
        snprintf(buf, n, "1 to %d of tcp://, ipc://, inproc://", DCPS_MAX_SHARDS);
        break;
    case T_LAYERS: snprintf(buf, n, "2 to %d sizes in [1, %d]", DCPS_MAX_LAYERS, LAYER_MAX); break;
    case T_IPV4: snprintf(buf, n, "a dotted IPv4 address"); break;
    case T_PARAMS:
        snprintf(buf, n, "layers, auto (at most %" PRIu64 ") or [1, %" PRIu32 "]",
                 DCPS_PARAMS_AUTO_MAX, UINT32_MAX);
        break;
    }
}

static int out_of_range(const struct key *k, const char *v, char *why, size_t n)
{
    char range[64];
    range_text(k, range, sizeof range);
    return say(why, n, "value %s is outside %s%s", v, range, k->auto_ok ? " (or auto)" : "");
}

static bool in_range(const struct key *k, double x)
{
    return (k->lo_open ? x > k->lo : x >= k->lo) && (k->hi_open ? x < k->hi : x <= k->hi);
}

/* A string must read back the same from a job file: libinih ends a value at a ';'
 * that starts it or follows white space, and a control character would not survive. */
static int parse_string(const struct key *k, const char *v, char *field, char *why, size_t n)
{
    size_t len = strlen(v);
    if (len < (size_t)k->lo)
        return say(why, n, "must not be empty");
    if (len > string_max(k))
        return say(why, n, "is %zu characters, more than %zu", len, string_max(k));
    for (const char *p = v; *p; p++) {
        if (iscntrl((unsigned char)*p))
            return say(why, n, "contains a control character");
        if (*p == ';' && (p == v || isspace((unsigned char)p[-1])))
            return say(why, n, "contains a ';' that would start a comment");
    }
    memset(field, 0, k->size);
    memcpy(field, v, len);
    return 0;
}

/* Splits a comma-separated list into at most max trimmed, non-empty entries
 * (e[i], len[i]). Returns the count, or DCPS_E_CONFIG with the reason in why. */
static int split(const char *v, int max, const char **e, int *len, char *why, size_t n)
{
    for (int count = 0;; v++) {
        const char *end = v + strcspn(v, ","), *next = end;
        while (v < end && isspace((unsigned char)*v))
            v++;
        while (end > v && isspace((unsigned char)end[-1]))
            end--;
        if (count == max)
            return say(why, n, "more than %d entries", max);
        if (end == v)
            return say(why, n, "entry %d is empty", count + 1);
        e[count] = v;
        len[count++] = (int)(end - v);
        if (*next == '\0')
            return count;
        v = next;
    }
}

static int parse_shards(dcps_config_t *cfg, const char *v, char *why, size_t n)
{
    static const char *const schemes[] = {"tcp://", "ipc://", "inproc://"};
    const char *e[DCPS_MAX_SHARDS];
    int len[DCPS_MAX_SHARDS], count = split(v, DCPS_MAX_SHARDS, e, len, why, n);
    if (count < 0)
        return count;
    memset(cfg->shards, 0, sizeof cfg->shards);
    for (int i = 0; i < count; i++) {
        int s = 0;
        while (s < 3 && strncmp(e[i], schemes[s], strlen(schemes[s])) != 0)
            s++;
        if (len[i] > ENDPOINT_CHARS)
            return say(why, n, "endpoint %d is longer than %d characters", i + 1, ENDPOINT_CHARS);
        if ((int)strcspn(e[i], " \t\r\n\v\f") < len[i])
            return say(why, n, "endpoint %d \"%.*s\" contains a space", i + 1, len[i], e[i]);
        if (s == 3)
            return say(why, n, "endpoint %d \"%.*s\" does not start with tcp://, ipc:// or inproc://",
                       i + 1, len[i], e[i]);
        if (len[i] == (int)strlen(schemes[s]))
            return say(why, n, "endpoint %d \"%.*s\" has no address", i + 1, len[i], e[i]);
        memcpy(cfg->shards[i], e[i], (size_t)len[i]);
    }
    cfg->n_shards = count;
    return 0;
}

/* Parameter indices travel as uint32 on the wire, so a model has fewer than 2^32. */
static int parse_layers(dcps_config_t *cfg, const char *v, char *why, size_t n)
{
    const char *e[DCPS_MAX_LAYERS];
    int len[DCPS_MAX_LAYERS], count = split(v, DCPS_MAX_LAYERS, e, len, why, n);
    if (count < 0)
        return count;
    if (count < 2)
        return say(why, n, "needs at least 2 sizes (input and output), got %d", count);
    uint64_t params = 0;
    memset(cfg->layers, 0, sizeof cfg->layers);
    for (int i = 0; i < count; i++) {
        char num[16], *end;
        snprintf(num, sizeof num, "%.*s", len[i], e[i]);
        long x = strtol(num, &end, 10);
        if (len[i] >= (int)sizeof num || *end || x < 1 || x > LAYER_MAX)
            return say(why, n, "size %d \"%.*s\" is not an integer in [1, %d]", i + 1, len[i], e[i],
                       LAYER_MAX);
        cfg->layers[i] = (int)x;
        if (i > 0)
            params += (uint64_t)cfg->layers[i - 1] * (uint64_t)x + (uint64_t)x;
    }
    if (params > UINT32_MAX)
        return say(why, n, "the model has %" PRIu64 " parameters, more than %" PRIu32
                   " (indices are 32-bit on the wire)", params, UINT32_MAX);
    cfg->n_layers = count;
    cfg->n_params = params;
    return 0;
}

/* "layers", "auto" or a count in [1, 2^32 - 1] (indices are 32-bit on the wire). */
static int parse_params(uint64_t *field, const char *v, char *why, size_t n)
{
    char *end;
    if (strcasecmp(v, "layers") == 0) {
        *field = DCPS_PARAMS_LAYERS;
        return 0;
    }
    if (strcasecmp(v, "auto") == 0) {
        *field = DCPS_PARAMS_AUTO;
        return 0;
    }
    errno = 0;
    unsigned long long x = isdigit((unsigned char)*v) ? strtoull(v, &end, 10) : 0;
    if (!isdigit((unsigned char)*v) || *end || errno == ERANGE || x < 1 || x > UINT32_MAX)
        return say(why, n, "\"%s\" is not layers, auto or a parameter count in [1, %" PRIu32 "]",
                   v, UINT32_MAX);
    *field = x;
    return 0;
}

/* Parses v as key k into cfg. Returns 0, or DCPS_E_CONFIG with what is wrong in why. */
/* A T_DOUBLE value: a finite number in the key's range, or "auto" (NAN) where
 * the key takes it. */
static int parse_double(const struct key *k, double *field, const char *v, char *why, size_t n)
{
    char *end;
    if (k->auto_ok && strcasecmp(v, "auto") == 0) {
        *field = NAN;
        return 0;
    }
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || isspace((unsigned char)*v))
        return say(why, n, "\"%s\" is not a number%s", v, k->auto_ok ? " (or auto)" : "");
    if (errno == ERANGE)
        return say(why, n, "value %s cannot be represented as a double", v);
    if (!isfinite(x))
        return say(why, n, "\"%s\" is not a finite number%s", v, k->auto_ok ? " (or auto)" : "");
    if (!in_range(k, x))
        return out_of_range(k, v, why, n);
    *field = x;
    return 0;
}

static int set_value(dcps_config_t *cfg, const struct key *k, const char *v, char *why, size_t n)
{
    char *field = (char *)cfg + k->off, *end;
    char names[128];
    errno = 0;
    switch (k->type) {
    case T_INT: {
        long x = strtol(v, &end, 10);
        if (end == v || *end || isspace((unsigned char)*v))
            return say(why, n, "\"%s\" is not an integer", v);
        if (errno == ERANGE || !in_range(k, (double)x))
            return out_of_range(k, v, why, n);
        *(int *)field = (int)x;
        return 0;
    }
    case T_U64: {
        /* strtoull would accept "-1" as UINT64_MAX. */
        unsigned long long x = isdigit((unsigned char)*v) ? strtoull(v, &end, 10) : 0;
        if (!isdigit((unsigned char)*v) || *end)
            return say(why, n, "\"%s\" is not a non-negative integer", v);
        if (errno == ERANGE)
            return say(why, n, "value %s is outside [0, %" PRIu64 "]", v, UINT64_MAX);
        *(uint64_t *)field = x;
        return 0;
    }
    case T_DOUBLE: return parse_double(k, (double *)field, v, why, n);
    case T_BOOL: {
        static const char *const spell[] = {"false", "true", "no", "yes", "off", "on", "0", "1"};
        for (int i = 0; i < 8; i++)
            if (strcasecmp(v, spell[i]) == 0) {
                *(bool *)field = i % 2;
                return 0;
            }
        return say(why, n, "\"%s\" is not a boolean (true/false, yes/no, on/off, 1/0)", v);
    }
    case T_ENUM:
        for (int i = 0; k->names[i]; i++)
            if (strcasecmp(v, k->names[i]) == 0) {
                *(int *)field = i;
                return 0;
            }
        join_names(k->names, names, sizeof names);
        return say(why, n, "\"%s\" is not one of %s", v, names);
    case T_LEVEL: {
        int level = dcps_log_level_parse(v);
        if (level < 0) {
            join_names(k->names, names, sizeof names);
            return say(why, n, "\"%s\" is not one of %s", v, names);
        }
        return parse_string(k, k->names[level - DCPS_LOG_ERR], field, why, n);
    }
    case T_Z85:
        if (*v && dcps_key_parse(v, strlen(v), NULL, why, n) != 0)
            return DCPS_E_CONFIG;
        return parse_string(k, v, field, why, n);
    case T_IPV4: {
        struct in_addr a;
        if (inet_pton(AF_INET, v, &a) != 1)
            return say(why, n, "\"%s\" is not a dotted IPv4 address such as 127.0.0.1", v);
        return parse_string(k, v, field, why, n);
    }
    case T_STRING: return parse_string(k, v, field, why, n);
    case T_SHARDS: return parse_shards(cfg, v, why, n);
    case T_LAYERS: return parse_layers(cfg, v, why, n);
    case T_PARAMS: return parse_params((uint64_t *)field, v, why, n);
    }
    return say(why, n, "bad key type");
}

void dcps_config_defaults(dcps_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_KEYS; i++) {
        char why[256];
        if (set_value(cfg, &keys[i], keys[i].def, why, sizeof why) != 0) {
            /* A default that fails its own key's checks is a bug in the table. */
            fprintf(stderr, "dcps: config table: [%s] %s: default: %s\n", keys[i].section,
                    keys[i].name, why);
            abort();
        }
    }
}

/* Reading one file. libinih goes on after an error (no INI_STOP_ON_FIRST_ERROR), so
 * the earliest error is kept, and the reader ends the stream once one is known. */
struct load {
    dcps_config_t *cfg;
    const char *path;
    FILE *fp;
    int line;         /* lines read so far */
    bool indented;    /* the current line starts with white space */
    bool after_key;   /* a key was read in this section: an indented line continues it */
    int pending;      /* list key whose lines are still being joined, or -1 */
    int pending_line; /* where that key was given */
    char list[LIST_CHARS];
    int seen[N_KEYS]; /* line where each key was given, 0 if not yet */
    int err_line;     /* earliest error, 0 if none */
    char *err;
    size_t errlen;
};

static void fail(struct load *st, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct load *st, int line, const char *fmt, ...)
{
    if (st->err_line && st->err_line <= line)
        return;
    st->err_line = line;
    int used = snprintf(st->err, st->errlen, "%s:%d: ", st->path, line);
    if (used < 0 || (size_t)used >= st->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err + used, st->errlen - (size_t)used, fmt, ap);
    va_end(ap);
}

/* An fgets that counts lines and refuses one that does not fit the buffer. */
static char *read_line(char *str, int num, void *stream)
{
    struct load *st = stream;
    if (st->err_line || !fgets(str, num, st->fp)) {
        if (!st->err_line && ferror(st->fp))
            fail(st, st->line + 1, "cannot read: %s", strerror(errno));
        return NULL;
    }
    st->line++;
    size_t len = strlen(str);
    if (len > 0 && str[len - 1] != '\n') {
        int c = getc(st->fp);
        if (c != '\n' && c != EOF) {
            fail(st, st->line, "line too long (more than %d characters)", num - 1);
            return NULL;
        }
    }
    /* libinih's rule: an indented line after a key continues it; else '[' opens a section. */
    const char *s = str + strspn(str, " \t\r\n\v\f");
    st->indented = s > str && *s;
    if (!(st->indented && st->after_key) && *s == '[')
        st->after_key = false;
    return str;
}

static void flush(struct load *st)
{
    char why[256];
    if (st->pending < 0 || st->err_line)
        return;
    const struct key *k = &keys[st->pending];
    st->pending = -1;
    if (set_value(st->cfg, k, st->list, why, sizeof why) != 0)
        fail(st, st->pending_line, "[%s] %s: %s", k->section, k->name, why);
}

static int on_pair(void *user, const char *section, const char *name, const char *value)
{
    struct load *st = user;
    char why[256];
    if (st->indented && st->after_key && st->pending >= 0) {
        size_t used = strlen(st->list);
        const char *sep = used && st->list[used - 1] != ',' ? "," : "";
        if ((size_t)snprintf(st->list + used, sizeof st->list - used, "%s%s", sep, value)
            >= sizeof st->list - used)
            fail(st, st->line, "[%s] %s: value too long", section, name);
        return !st->err_line;
    }
    flush(st);
    if (st->err_line)
        return 0;
    if (st->indented && st->after_key) {
        fail(st, st->line, "[%s] %s: indented line continues this value; only lists may span lines",
             section, name);
        return 0;
    }
    st->after_key = true;
    int i = find(section, name);
    if (i < 0 && !*section)
        fail(st, st->line, "%s: key outside any [section]", name);
    else if (i < 0) {
        char hint[160];
        suggest(section, name, false, hint, sizeof hint);
        fail(st, st->line, "[%s] %s: unknown %s%s", section, name, i == -1 ? "key" : "section",
             hint);
    }
    else if (st->seen[i])
        fail(st, st->line, "[%s] %s: key given twice (first on line %d)", section, name,
             st->seen[i]);
    if (st->err_line)
        return 0;
    st->seen[i] = st->line;
    if (keys[i].type == T_SHARDS || keys[i].type == T_LAYERS) {
        st->pending = i;
        st->pending_line = st->line;
        snprintf(st->list, sizeof st->list, "%s", value);
        return 1;
    }
    if (set_value(st->cfg, &keys[i], value, why, sizeof why) != 0)
        fail(st, st->line, "[%s] %s: %s", section, name, why);
    return !st->err_line;
}

static int load_file(dcps_config_t *cfg, const char *path, char *err, size_t errlen)
{
    struct load st = {.cfg = cfg, .path = path, .pending = -1, .err = err, .errlen = errlen};
    if (!(st.fp = fopen(path, "r")))
        return say(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    int ret = ini_parse_stream(read_line, &st, on_pair, &st);
    flush(&st);
    if (ret > 0) /* the first line libinih could not parse */
        fail(&st, ret, "syntax error");
    else if (ret < 0) /* -2: libinih could not allocate its line buffer */
        fail(&st, 1, "libinih is out of memory");
    fclose(st.fp);
    return st.err_line ? DCPS_E_CONFIG : 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    for (size_t n = strlen(s); n && isspace((unsigned char)s[n - 1]); n--)
        s[n - 1] = '\0';
    return s;
}

/* "section.key=value"; errors name it by its text (at most 80 characters). */
static int apply_override(dcps_config_t *cfg, const char *arg, char *err, size_t errlen)
{
    char *copy = strdup(arg), why[256], me[96];
    snprintf(me, sizeof me, "--set \"%.80s%s\"", arg, strlen(arg) > 80 ? "…" : "");
    for (char *c = me; *c; c++) /* the text goes into a log line */
        if (iscntrl((unsigned char)*c))
            *c = '?';
    if (!copy)
        return say(err, errlen, "%s: out of memory", me);
    char *eq = strchr(copy, '='), *dot = eq ? memchr(copy, '.', (size_t)(eq - copy)) : NULL;
    char *section = copy, *name = copy, *value = copy;
    if (dot) {
        *dot = *eq = '\0';
        section = trim(copy), name = trim(dot + 1), value = trim(eq + 1);
    }
    int i = dot && *section && *name ? find(section, name) : -3, rc = 0;
    if (i == -3)
        rc = say(err, errlen, "%s: not section.key=value", me);
    else if (i < 0) {
        char hint[160];
        suggest(section, name, true, hint, sizeof hint);
        rc = say(err, errlen, "%s: [%s] %s: unknown %s%s", me, section, name,
                 i == -1 ? "key" : "section", hint);
    }
    else if (set_value(cfg, &keys[i], value, why, sizeof why) != 0)
        rc = say(err, errlen, "%s: [%s] %s: %s", me, section, name, why);
    free(copy);
    return rc;
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 14695981039346656037u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* The schedule's keys against each other and lr (common/schedule.h). A reload
 * that lowers lr below min_lr fails here too, and is refused as a whole. */
static int check_schedule(const dcps_config_t *cfg, const char *src, char *err, size_t errlen)
{
    const dcps_schedule_t *s = &cfg->sched;
    if ((s->kind == DCPS_SCHED_COSINE || s->kind == DCPS_SCHED_LINEAR) &&
        s->total_steps <= s->warmup_steps)
        return say(err, errlen,
                   "%s: [optimizer] schedule = %s needs [optimizer] total_steps (%d) greater "
                   "than [optimizer] warmup_steps (%d): the lr falls to min_lr between them",
                   src, schedule_names[s->kind], s->total_steps, s->warmup_steps);
    if (s->min_lr > cfg->lr)
        return say(err, errlen,
                   "%s: [optimizer] min_lr (%g) must be at most [optimizer] lr (%g): the "
                   "schedule falls from lr to min_lr",
                   src, s->min_lr, cfg->lr);
    return 0;
}

/* The checks between keys, after every value is in; src names where they came from. */
static int check(dcps_config_t *cfg, const char *src, char *err, size_t errlen)
{
    if (cfg->job_id == 0)
        cfg->job_id = fnv1a64(cfg->job_name);
    if (cfg->job_id == 0) /* 0 means "derive"; no job may end up with it */
        cfg->job_id = 1;
    if (cfg->dead_after_ms <= cfg->heartbeat_ms)
        return say(err, errlen,
                   "%s: [server] dead_after_ms (%d) must be greater than [server] heartbeat_ms (%d)",
                   src, cfg->dead_after_ms, cfg->heartbeat_ms);
    /* DGC's velocity is accumulated in the residual, and only the sent part of it is
     * cleared: without the residual there is nowhere to keep it. */
    if (cfg->momentum_correction > 0 && !cfg->error_feedback)
        return say(err, errlen,
                   "%s: [compression] momentum_correction (%g) needs [compression] "
                   "error_feedback = true: momentum correction accumulates into the residual",
                   src, cfg->momentum_correction);
    if (cfg->nesterov && (cfg->opt_kind != DCPS_OPT_MOMENTUM || cfg->momentum == 0))
        return say(err, errlen,
                   "%s: [optimizer] nesterov = true needs kind = momentum with momentum > 0 "
                   "(kind is %s, momentum %g)",
                   src, dcps_config_optimizer_name(cfg->opt_kind), cfg->momentum);
    if (cfg->delay != DCPS_DELAY_NONE && cfg->dc_adaptive && cfg->delay != DCPS_DELAY_ADAPTIVE)
        return say(err, errlen,
                   "%s: [optimizer] dc_adaptive = true contradicts delay_compensation = %s: "
                   "give delay_compensation = adaptive, or drop dc_adaptive",
                   src, dcps_config_delay_name(cfg->delay));
    if (cfg->opt_kind == DCPS_OPT_ADAMW && cfg->lr * dcps_config_weight_decay(cfg) >= 1)
        return say(err, errlen,
                   "%s: [optimizer] lr (%g) times weight_decay (%g) must be below 1: adamw "
                   "multiplies every parameter by 1 - lr * weight_decay each update",
                   src, cfg->lr, dcps_config_weight_decay(cfg));
    int rc = check_schedule(cfg, src, err, errlen);
    if (rc != 0)
        return rc;
    /* With params = auto the size is checked when it is known: by a shard when
     * rank 0 says HELLO (server/router.c), by a worker program when it sets it. */
    char why[160];
    if (cfg->params == DCPS_PARAMS_AUTO)
        cfg->n_params = 0;
    else if (cfg->params == DCPS_PARAMS_LAYERS)
        cfg->n_params = dcps_config_layers_params(cfg);
    else
        cfg->n_params = cfg->params;
    if (cfg->n_params && dcps_config_check_size(cfg, cfg->n_params, why, sizeof why) != 0) {
        if (cfg->params == DCPS_PARAMS_LAYERS)
            return say(err, errlen, "%s: [model] layers give %s", src, why);
        return say(err, errlen, "%s: [model] params = %" PRIu64 " gives %s", src, cfg->params,
                   why);
    }
    return 0;
}

uint64_t dcps_config_layers_params(const dcps_config_t *cfg)
{
    uint64_t n = 0;
    for (int i = 1; i < cfg->n_layers; i++)
        n += (uint64_t)cfg->layers[i - 1] * (uint64_t)cfg->layers[i] + (uint64_t)cfg->layers[i];
    return n;
}

int dcps_config_check_size(const dcps_config_t *cfg, uint64_t n, char *why, size_t whylen)
{
    if (n == 0 || n > UINT32_MAX) {
        snprintf(why, whylen, "%" PRIu64 " parameters, outside [1, %" PRIu32 "] (indices are "
                 "32-bit on the wire)", n, UINT32_MAX);
        return DCPS_E_SIZE;
    }
    for (int s = 0; s < cfg->n_shards; s++) {
        dcps_range_t r = dcps_shardmap_range(n, cfg->n_shards, s);
        if (r.hi == r.lo) {
            snprintf(why, whylen,
                     "%" PRIu64 " parameters, too few for the %d [servers] shards: shard %d "
                     "would own none",
                     n, cfg->n_shards, s);
            return DCPS_E_SIZE;
        }
    }
    return 0;
}

int dcps_config_load(dcps_config_t *cfg, const char *path, const char *const *overrides,
                     size_t n_overrides, char *err, size_t errlen)
{
    if (!err)
        errlen = 0;
    if (errlen)
        err[0] = '\0';
    dcps_config_defaults(cfg);
    if (path && load_file(cfg, path, err, errlen) != 0)
        return DCPS_E_CONFIG;
    for (size_t i = 0; i < n_overrides; i++)
        if (apply_override(cfg, overrides[i], err, errlen) != 0)
            return DCPS_E_CONFIG;
    return check(cfg, path ? path : "--set", err, errlen);
}

static void section_header(FILE *out, const struct key *k)
{
    if (k == keys || strcmp(k[-1].section, k->section) != 0)
        fprintf(out, "\n[%s]\n", k->section);
}

void dcps_config_dump(FILE *out)
{
    char range[160];
    fprintf(out, "; dcps job file: every key with its default value.\n"
                 "; Any key can be overridden with --set section.key=value.\n");
    for (const struct key *k = keys; k < keys + N_KEYS; k++) {
        section_header(out, k);
        describe(k, range, sizeof range);
        fprintf(out, "; %s (%s%s)\n%s =%s%s\n", k->doc, range, k->live ? "; reloaded on SIGHUP" : "",
                k->name, *k->def ? " " : "", k->def);
    }
}

/* Shortest of %.15g..%.17g that reads back as the same double. */
static void write_double(FILE *out, double x)
{
    char buf[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, " %.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, out);
}

/* The endpoints, packed into lines of at most LINE_CHARS; later lines are indented,
 * so libinih hands them over as continuations. */
static void write_shards(FILE *out, const dcps_config_t *cfg)
{
    int col = (int)strlen("shards =");
    for (int s = 0; s < cfg->n_shards; s++) {
        const char *sep = s + 1 < cfg->n_shards ? "," : "";
        bool wrap = s > 0 && col + (int)strlen(cfg->shards[s]) + (int)strlen(sep) > LINE_CHARS;
        if (wrap) {
            fputs("\n   ", out);
            col = 3;
        }
        col += fprintf(out, "%s%s%s", s == 0 || wrap ? " " : "", cfg->shards[s], sep);
    }
}

static const char *name_of(const char *const *names, int v)
{
    for (int i = 0; names[i]; i++)
        if (i == v)
            return names[i];
    return "unknown";
}

/* Writes " value" of key k as a job file spells it (nothing for an empty string). */
static void write_value(const struct key *k, const dcps_config_t *cfg, FILE *out)
{
    const char *field = (const char *)cfg + k->off;
    switch (k->type) {
    case T_INT: fprintf(out, " %d", *(const int *)field); break;
    case T_U64: fprintf(out, " %" PRIu64, *(const uint64_t *)field); break;
    case T_DOUBLE:
        if (isnan(*(const double *)field))
            fputs(" auto", out);
        else
            write_double(out, *(const double *)field);
        break;
    case T_BOOL: fputs(*(const bool *)field ? " true" : " false", out); break;
    case T_ENUM: fprintf(out, " %s", name_of(k->names, *(const int *)field)); break;
    case T_STRING:
    case T_Z85:
    case T_IPV4:
    case T_LEVEL: fprintf(out, "%s%s", *field ? " " : "", field); break;
    case T_SHARDS: write_shards(out, cfg); break;
    case T_LAYERS:
        for (int i = 0; i < cfg->n_layers; i++)
            fprintf(out, "%c%d", i ? ',' : ' ', cfg->layers[i]);
        break;
    case T_PARAMS: {
        uint64_t p = *(const uint64_t *)field;
        if (p == DCPS_PARAMS_LAYERS || p == DCPS_PARAMS_AUTO)
            fputs(p == DCPS_PARAMS_AUTO ? " auto" : " layers", out);
        else
            fprintf(out, " %" PRIu64, p);
        break;
    }
    }
}

void dcps_config_write(const dcps_config_t *cfg, FILE *out)
{
    fprintf(out, "; dcps job file, as run.\n");
    for (const struct key *k = keys; k < keys + N_KEYS; k++) {
        section_header(out, k);
        fprintf(out, "%s =", k->name);
        write_value(k, cfg, out);
        fputc('\n', out);
    }
}

/* The value of key k in cfg as text; the caller frees it. NULL: out of memory. */
static char *value_text(const struct key *k, const dcps_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    write_value(k, cfg, f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Appends "[section] key old -> new" to buf (after "; " if buf has text). */
static void note_change(char *buf, size_t n, const struct key *k, const char *was, const char *now)
{
    size_t at = strlen(buf);
    if (at + 1 < n)
        snprintf(buf + at, n - at, "%s[%s] %s%s ->%s", at ? "; " : "", k->section, k->name,
                 *was ? was : " (empty)", *now ? now : " (empty)");
}

int dcps_config_reload(dcps_config_t *running, const dcps_config_t *next, char *changes,
                       size_t clen, char *err, size_t errlen)
{
    bool changed[N_KEYS] = {false};
    int refused = 0;
    *changes = *err = '\0';
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        char *was = value_text(k, running), *now = value_text(k, next);
        if (!was || !now) {
            free(was);
            free(now);
            say(err, errlen, "out of memory comparing [%s] %s", k->section, k->name);
            return DCPS_E_NOMEM;
        }
        if (strcmp(was, now) != 0) {
            changed[i] = true;
            if (k->live) {
                note_change(changes, clen, k, was, now);
            } else {
                note_change(err, errlen, k, was, now);
                refused++;
            }
        }
        free(was);
        free(now);
    }
    if (refused)
        return DCPS_E_CONFIG;
    for (size_t i = 0; i < N_KEYS; i++)
        if (changed[i])
            memcpy((char *)running + keys[i].off, (const char *)next + keys[i].off, keys[i].size);
    return 0;
}

const char *dcps_config_mode_name(int mode) { return name_of(mode_names, mode); }
const char *dcps_config_optimizer_name(int kind) { return name_of(opt_names, kind); }
const char *dcps_config_push_name(int push) { return name_of(push_names, push); }
const char *dcps_config_pull_name(int pull) { return name_of(pull_names, pull); }
const char *dcps_config_values_name(int values) { return name_of(values_names, values); }

uint32_t dcps_config_values_dtype(const dcps_config_t *cfg)
{
    static const uint32_t dtype[] = {[DCPS_VALUES_FP32] = 1, [DCPS_VALUES_FP16] = 4,
                                     [DCPS_VALUES_BF16] = 5, [DCPS_VALUES_INT8] = 6};
    return cfg->values >= 0 && cfg->values <= DCPS_VALUES_INT8 ? dtype[cfg->values] : 1;
}
const char *dcps_config_delay_name(int delay) { return name_of(delay_names, delay); }

int dcps_config_rule(const dcps_config_t *cfg)
{
    return cfg->opt_kind == DCPS_OPT_DCASGD ? DCPS_OPT_SGD : cfg->opt_kind;
}

int dcps_config_delay(const dcps_config_t *cfg)
{
    if (cfg->opt_kind != DCPS_OPT_DCASGD || cfg->delay != DCPS_DELAY_NONE)
        return cfg->delay;
    return cfg->dc_adaptive ? DCPS_DELAY_ADAPTIVE : DCPS_DELAY_CONSTANT;
}

double dcps_config_eps(const dcps_config_t *cfg)
{
    if (!isnan(cfg->eps))
        return cfg->eps;
    return cfg->opt_kind == DCPS_OPT_ADAGRAD ? 1e-10 : 1e-8;
}

double dcps_config_weight_decay(const dcps_config_t *cfg)
{
    if (!isnan(cfg->weight_decay))
        return cfg->weight_decay;
    return cfg->opt_kind == DCPS_OPT_ADAMW ? 0.01 : 0;
}

#define WARMUP_DENSITY 0.25

double dcps_config_density_at(double density, int warmup_epochs, int epoch)
{
    int e = epoch < 1 ? 1 : epoch;
    if (e > warmup_epochs || density >= WARMUP_DENSITY)
        return density;
    double t = (double)(e - 1) / warmup_epochs;
    double d = pow(WARMUP_DENSITY, 1 - t) * pow(density, t);
    /* Never above the start, even by a rounding of pow: epoch 1 has the most. */
    return d < WARMUP_DENSITY ? d : WARMUP_DENSITY;
}

size_t dcps_config_entries(double density, size_t n)
{
    double k = ceil(density * (double)n);
    if (k < 1)
        return 1;
    return k < (double)n ? (size_t)k : n;
}

double dcps_config_pull_density(const dcps_config_t *cfg)
{
    return cfg->pull_density > 0 ? cfg->pull_density : cfg->density;
}

int dcps_config_supported(const dcps_config_t *cfg, const char *path, char *err, size_t errlen)
{
    if (cfg->curve && !dcps_keys_available())
        return say(err, errlen,
                   "%s: [security] curve = true, but this libzmq was built without CURVE "
                   "(zmq_has(\"curve\") is false): install one built with libsodium, or set "
                   "curve = false",
                   path);
    return 0;
}

/* A [security] key that one side of the job needs with curve = true. */
struct need {
    const char *value, *key, *what;
};

int dcps_config_check_role(const dcps_config_t *cfg, const char *path, int role, char *err,
                           size_t errlen)
{
    const struct need server[] = {
        {cfg->server_secret_key_file, "server_secret_key_file", "the shards' secret key file"},
        {cfg->worker_keys_dir, "worker_keys_dir", "the directory of the workers' public keys"},
    };
    const struct need worker[] = {
        {cfg->server_public_key, "server_public_key", "the shards' public key"},
        {cfg->worker_secret_key_file, "worker_secret_key_file", "this worker's secret key file"},
    };
    const struct need *need = role == DCPS_ROLE_SERVER ? server : worker;
    if (!cfg->curve)
        return 0;
    for (int i = 0; i < 2; i++)
        if (!*need[i].value)
            return say(err, errlen, "%s%s[security] curve = true needs [security] %s (%s), which "
                       "is not set",
                       path ? path : "", path ? ": " : "", need[i].key, need[i].what);
    return 0;
}
