/* dcps — one shard's parameter store; see shard.h. */
#include "server/shard.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/schedule.h"
#include "proto/codec.h"
#include "proto/quant.h"
#include "server/groups.h"
#include "server/optimizer.h"
#include "server/snapshot.h"
#include "proto/codec.h"

/* The store (shard.h's opening paragraph says what it holds and why). */
struct dcps_shard {
    int index;
    uint64_t n_params; /* the model's size; 0: unsized (params = auto, not learnt yet) */
    dcps_range_t range;
    size_t n;              /* hi − lo */
    float *mem;            /* the one allocation: the slices below but w, spare and acc */
    dcps_snapshot_t *bufs; /* w, spare, acc and the reply buffers (server/snapshot.h):
                            2 + (sync) + DCPS_SHARD_REPLY_BUFFERS of n floats */
    float *w;              /* n parameters: a buffer of bufs, swapped with spare */
    float *spare;          /* n: the update buffer, where an update writes the new w
                              (sync: a push the new sum) before it is checked; one
                              that no pull reply sends from */
    float *state;          /* states × n: the rule's state (st) then DC-ASGD-a's MS; NULL
                              when the job keeps none */
    float *st[DCPS_RULE_MAX_STATES]; /* the rule's arrays in state: u, m, v or adagrad's
                                        sum; NULL past dcps_rule_states */
    float *ms;             /* in state: the adaptive delay compensation's mean square */
    int states;            /* arrays in state */
    float *gc;             /* n: the delay-compensated gradient (generic rules); NULL otherwise */
    float *bak;            /* workers × n: DC-ASGD's w_bak(m); NULL otherwise */
    float *acc;            /* n: sync mode's sum of the open round (swapped with
                              spare); NULL otherwise */
    struct kept *kept;     /* per rank: its push of the open round (dcps_shard_keep_pushes),
                              or its parts (sync, dcps_shard_push_part); NULL otherwise */
    bool keep_all;         /* dcps_shard_keep_pushes: whole pushes are kept too */
    /* Async, ssp: the dense parts of one push written into the update buffer
     * (staged), which becomes w when the push's last part comes
     * (dcps_shard_push_part; dcps_shard_settle for an interruption). */
    bool staging;
    uint32_t stage_rank;
    uint64_t stage_push;   /* the push's id (the seq of its part 0) */
    int stage_n;           /* ranges staged */
    size_t stage_lo[DCPS_PARTS_MAX], stage_hi[DCPS_PARTS_MAX]; /* local */
    size_t staged;         /* parameters staged */
    float *mirror;         /* n: sync mode's shared mirror (pull = delta); NULL otherwise */
    float *diff;           /* n: w − mirror (pull = delta); NULL otherwise */
    bool delta;            /* pull = delta */
    uint64_t *tag;         /* per mirror (P, or 1 in sync mode): version it was brought to */
    size_t k_pull;         /* entries of a delta: ⌈pull density · n⌉ */
    size_t k_max;          /* the most a pull may ask for (density warm-up: 25%) */
    uint32_t *delta_idx;   /* the last delta computed: up to k_max global indices, values */
    float *delta_val;      /* (shorter values: as the worker decodes them) */
    uint32_t dtype;        /* [compression] values (proto/quant.h) */
    uint8_t *delta_q;      /* shorter values: the last delta's values as sent */
    size_t delta_bytes;
    uint8_t *reply_q;      /* shorter values, pull = dense: a reply of w as sent */
    size_t delta_k;
    int delta_of; /* the mirror it advanced (−1: none), from tag delta_from */
    uint64_t delta_from;
    dcps_topk_ws_t *topk;
    int kind;     /* the fast path (sgd, momentum, dcasgd: server/optimizer.h), or the rule */
    int rule;     /* enum dcps_optimizer: dcps_config_rule */
    int delay;    /* enum dcps_delay: dcps_config_delay */
    bool generic; /* the rule goes through dcps_rule_*: no fast path applies */
    bool lazy;    /* [optimizer] lazy */
    float momentum;
    dcps_dcasgd_t dc;
    dcps_rule_t r;
    dcps_schedule_t sched; /* [optimizer] schedule: the lr of update t is lr · f(t) */
    dcps_groups_t *groups; /* the job's parameter groups (this range's part), or NULL */
    dcps_rule_t *gr;       /* per group: r with its weight decay, prepared at its lr */
    dcps_group_seg_t whole; /* without groups: the one segment [0, n) of rule r */
    dcps_buffers_t *buffers; /* the model's buffers (shard 0 serves them; server/buffers.h) */
    bool initialized; /* set by the first INIT */
    bool restored;    /* state came from a checkpoint (dcps_shard_restored) */
    bool *behind;     /* per rank: restored, and it has not pulled from this process
                         (dcps_shard_behind) */
    uint64_t version; /* incremented by every applied update */
    int workers;
    dcps_session_t *session; /* per rank: its session and last push; this store is their
                                one owner (server/session.h): the router reads them and
                                binds one at HELLO, the functions below record pushes */
    dcps_parts_t *parts;     /* per rank: its latest push's parts, and what it carries of */
    dcps_carried_t *carried; /* a cut one (server/parts.h): the router's to keep */
    double lr;               /* from [optimizer] lr: the schedule's base, kept in double
                                as torch.optim keeps a Python float (adam's step size is
                                computed from it in double, then rounded once) */
    float lr_now;            /* the lr of the update at hand (prepare) */
    size_t floats;           /* what a checkpoint holds, in floats: all of mem but one
                                buffer of n (dcps_shard_spans) */
    uint64_t pushes, duplicates, pulls, dropped;
    uint64_t pulls_copied;        /* dense pulls whose reply copied w (dcps_shard_share) */
    uint64_t rounds_refused;      /* sync rounds not applied: w would not be finite */
    char why[DCPS_SHARD_WHY_MAX]; /* the last refused update's sentence */
    uint64_t deltas;              /* pulls answered with a delta */
    dcps_staleness_t staleness;
};

static void own_w(dcps_shard_t *s, bool keep);

/* A rank's push of the open round as received: k values at idx, or n dense
 * values (idx NULL). */
struct kept {
    bool held;
    uint32_t *idx;
    float *v;
    size_t k, cap;
};

/* Whether the job's rule is one of 0.1's, which have fast paths (sgd,
 * momentum, DC-ASGD: server/optimizer.h); *kind is then the path. */
static bool fast_path(const dcps_shard_t *s, int *kind)
{
    *kind = s->rule;
    if (s->r.weight_decay != 0 || s->r.nesterov)
        return false;
    if (s->delay != DCPS_DELAY_NONE) {
        *kind = DCPS_OPT_DCASGD;
        return s->rule == DCPS_OPT_SGD;
    }
    return s->rule == DCPS_OPT_SGD || (s->rule == DCPS_OPT_MOMENTUM && !s->lazy);
}

/* What the job holds, in floats of n: w and sync mode's sum in the set of
 * buffers (server/snapshot.h), the rest in slices of the one allocation, in
 * this order. */
typedef struct {
    size_t state, bak, acc, mirror, diff;
} layout_t;

static size_t layout(const dcps_config_t *cfg, layout_t *l)
{
    bool sync = cfg->mode == DCPS_MODE_SYNC, delta = cfg->pull == DCPS_PULL_DELTA;
    int delay = dcps_config_delay(cfg);
    l->state = (size_t)dcps_rule_states(dcps_config_rule(cfg)) + (delay == DCPS_DELAY_ADAPTIVE);
    l->bak = !sync && (delay != DCPS_DELAY_NONE || delta) ? (size_t)cfg->workers : 0;
    l->acc = sync;
    l->mirror = sync && delta;
    l->diff = delta;
    return 1 + l->state + l->bak + l->acc + l->mirror + l->diff;
}

dcps_shard_t *dcps_shard_new(const dcps_config_t *cfg, int index, int *err)
{
    dcps_shard_t *s = calloc(1, sizeof *s);
    *err = DCPS_E_NOMEM;
    if (!s)
        return NULL;
    s->index = index;
    s->workers = cfg->workers;
    s->rule = dcps_config_rule(cfg);
    s->delay = dcps_config_delay(cfg);
    s->lazy = cfg->lazy;
    s->sched = cfg->sched;
    s->momentum = (float)cfg->momentum;
    s->dc = (dcps_dcasgd_t){0, (float)cfg->dc_lambda, s->delay == DCPS_DELAY_ADAPTIVE,
                            (float)cfg->dc_ms_decay, (float)cfg->dc_epsilon};
    s->r = dcps_rule_new(s->rule, cfg->momentum, cfg->nesterov, cfg->beta1, cfg->beta2,
                         dcps_config_eps(cfg), dcps_config_weight_decay(cfg));
    s->generic = !fast_path(s, &s->kind);
    dcps_shard_set_lr(s, cfg->lr);
    s->delta_of = -1;
    s->dtype = dcps_config_values_dtype(cfg);
    s->session = calloc((size_t)cfg->workers, sizeof *s->session);
    s->behind = calloc((size_t)cfg->workers, sizeof *s->behind);
    s->parts = calloc((size_t)cfg->workers, sizeof *s->parts);
    s->carried = calloc((size_t)cfg->workers, sizeof *s->carried);
    s->buffers = dcps_buffers_new(cfg->workers);
    if (!s->session || !s->behind || !s->parts || !s->carried || !s->buffers ||
        (cfg->n_params && dcps_shard_size(s, cfg, cfg->n_params)))
        goto fail;
    *err = 0;
    return s;

fail:
    dcps_shard_destroy(&s);
    return NULL;
}

void dcps_shard_unsize(dcps_shard_t *s)
{
    s->staging = false;
    dcps_topk_ws_destroy(&s->topk);
    free(s->delta_val);
    free(s->delta_idx);
    free(s->delta_q);
    free(s->reply_q);
    s->delta_q = s->reply_q = NULL;
    free(s->tag);
    free(s->mem);
    dcps_snapshot_drop(&s->bufs); /* freed when no reply holds a buffer any more */
    s->delta_val = s->mem = s->w = s->spare = NULL;
    free(s->gc);
    s->state = s->bak = s->acc = s->mirror = s->diff = s->gc = s->ms = NULL;
    s->st[0] = s->st[1] = NULL;
    s->delta_idx = NULL;
    s->tag = NULL;
    s->delta = false;
    s->k_pull = s->k_max = s->delta_k = s->floats = s->n = 0;
    s->delta_of = -1;
    s->range = (dcps_range_t){0, 0};
    s->n_params = 0;
    dcps_groups_destroy(&s->groups); /* a table is of one size */
    free(s->gr);
    s->gr = NULL;
    s->generic = !fast_path(s, &s->kind);
}

int dcps_shard_size(dcps_shard_t *s, const dcps_config_t *cfg, uint64_t n_params)
{
    layout_t l;
    int err = DCPS_E_NOMEM;
    if (s->n_params != 0)
        return DCPS_E_STATE;
    if (n_params == 0)
        return DCPS_E_INVAL;
    s->n_params = n_params;
    s->range = dcps_shardmap_range(n_params, cfg->n_shards, s->index);
    s->n = (size_t)(s->range.hi - s->range.lo);
    s->floats = s->n * layout(cfg, &l);
    /* w, the sum, the update buffer and the reply buffers, outside what a
     * checkpoint holds, are buffers of the set; the rest is one allocation. */
    size_t rest = s->floats - s->n * (1 + l.acc);
    s->mem = calloc(rest ? rest : 1, sizeof *s->mem);
    s->bufs = dcps_snapshot_new(s->n, 2 + (int)l.acc + DCPS_SHARD_REPLY_BUFFERS);
    if (!s->mem || !s->bufs)
        goto fail;
    s->w = dcps_snapshot_buf(s->bufs, 0);
    s->spare = dcps_snapshot_buf(s->bufs, 1);
    s->acc = l.acc ? dcps_snapshot_buf(s->bufs, 2) : NULL;
    float *at = s->mem;
    s->state = l.state ? at : NULL;
    s->states = (int)l.state;
    for (int j = 0; j < dcps_rule_states(s->rule); j++)
        s->st[j] = at + s->n * (size_t)j;
    s->ms = s->dc.adaptive ? at + s->n * (l.state - 1) : NULL;
    at += s->n * l.state;
    if (s->generic && s->delay != DCPS_DELAY_NONE && !(s->gc = malloc(s->n * sizeof *s->gc)))
        goto fail;
    s->bak = l.bak ? at : NULL;
    at += s->n * l.bak;
    s->mirror = l.mirror ? at : NULL;
    at += s->n * l.mirror;
    s->diff = l.diff ? at : NULL;
    s->delta = l.diff && s->n > 0;
    if (s->dtype != DCPS_DTYPE_F32 && !s->delta &&
        !(s->reply_q = malloc((size_t)dcps_quant_bytes(s->dtype, s->n, DCPS_QUANT_BLOCK))))
        goto fail;
    if (s->delta) {
        double rho = dcps_config_pull_density(cfg);
        s->k_pull = dcps_config_entries(rho, s->n);
        s->k_max = dcps_config_entries(
            dcps_config_density_at(rho, cfg->density_warmup_epochs, 1), s->n);
        s->tag = calloc(s->mirror ? 1 : (size_t)cfg->workers, sizeof *s->tag);
        s->delta_idx = malloc(s->k_max * sizeof *s->delta_idx);
        s->delta_val = malloc(s->k_max * sizeof *s->delta_val);
        s->topk = dcps_topk_ws_new(s->n, &err);
        if (s->dtype != DCPS_DTYPE_F32)
            s->delta_q = malloc((size_t)dcps_quant_bytes(s->dtype, s->k_max, DCPS_QUANT_BLOCK));
        if (!s->tag || !s->delta_idx || !s->delta_val || !s->topk ||
            (s->dtype != DCPS_DTYPE_F32 && !s->delta_q))
            goto fail;
    }
    return 0;

fail:
    dcps_shard_unsize(s);
    return DCPS_E_NOMEM;
}

int dcps_shard_size_auto(dcps_shard_t *s, const dcps_config_t *cfg, uint64_t n_params,
                         const char *advice, char *why, size_t whylen)
{
    if (n_params > DCPS_PARAMS_AUTO_MAX)
        return dcps_say(why, whylen, DCPS_E_SIZE,
                        "%llu parameters, more than the %llu that [model] params = auto "
                        "accepts%s",
                        (unsigned long long)n_params, (unsigned long long)DCPS_PARAMS_AUTO_MAX,
                        advice);
    if (dcps_config_check_size(cfg, n_params, why, whylen) != 0)
        return DCPS_E_SIZE;
    return dcps_shard_size(s, cfg, n_params);
}

void dcps_shard_destroy(dcps_shard_t **sp)
{
    dcps_shard_t *s = *sp;
    if (!s)
        return;
    dcps_shard_unsize(s);
    dcps_groups_destroy(&s->groups);
    dcps_buffers_destroy(&s->buffers);
    for (int r = 0; s->kept && r < s->workers; r++) {
        free(s->kept[r].idx);
        free(s->kept[r].v);
    }
    free(s->kept);
    free(s->gr);
    free(s->behind);
    free(s->carried);
    free(s->parts);
    free(s->session);
    free(s);
    *sp = NULL;
}

int dcps_shard_init(dcps_shard_t *s, const float *w)
{
    if (s->initialized)
        return 0;
    own_w(s, false);
    memcpy(s->w, w, s->n * sizeof *w);
    for (int m = 0; s->bak && m < s->workers; m++)
        memcpy(s->bak + (size_t)m * s->n, w, s->n * sizeof *w);
    if (s->mirror)
        memcpy(s->mirror, w, s->n * sizeof *w);
    s->initialized = true;
    return 1;
}

void dcps_shard_restored(dcps_shard_t *s)
{
    s->staging = false;
    s->restored = true;
    for (int r = 0; r < s->workers; r++)
        s->behind[r] = true;
    if (!s->delta)
        return;
    for (int mi = 0; mi < (s->mirror ? 1 : s->workers); mi++)
        s->tag[mi] = UINT64_MAX;
    s->delta_of = -1;
}

bool dcps_shard_behind(const dcps_shard_t *s, uint32_t rank)
{
    return s->behind[rank];
}

const dcps_session_t *dcps_shard_session(const dcps_shard_t *s, uint32_t rank)
{
    return &s->session[rank];
}

dcps_parts_t *dcps_shard_parts(dcps_shard_t *s, uint32_t rank)
{
    return &s->parts[rank];
}

dcps_carried_t *dcps_shard_carried(dcps_shard_t *s, uint32_t rank)
{
    return &s->carried[rank];
}

size_t dcps_shard_parts_words(const dcps_shard_t *s)
{
    size_t n = 0;
    for (int r = 0; r < s->workers; r++)
        n += dcps_parts_words(&s->parts[r], &s->carried[r]);
    return n;
}

void dcps_shard_parts_save(const dcps_shard_t *s, uint64_t *w)
{
    for (int r = 0; r < s->workers; r++) {
        dcps_parts_save(&s->parts[r], &s->carried[r], w);
        w += dcps_parts_words(&s->parts[r], &s->carried[r]);
    }
}

int dcps_shard_parts_load(dcps_shard_t *s, const uint64_t *w, size_t words, char *why,
                          size_t whylen)
{
    size_t used = 0;
    int rc = 0;
    for (int r = 0; r < s->workers && rc == 0; r++) {
        rc = dcps_parts_load(&s->parts[r], &s->carried[r], s->range.lo, s->range.hi, w, words,
                             &used, why, whylen);
        w += used, words -= used;
    }
    if (rc == 0 && words != 0)
        rc = dcps_say(why, whylen, 1, "its records of pushes in parts do not fit the file");
    if (rc != 0) {
        memset(s->parts, 0, (size_t)s->workers * sizeof *s->parts);
        memset(s->carried, 0, (size_t)s->workers * sizeof *s->carried);
    }
    return rc;
}

void dcps_shard_open_session(dcps_shard_t *s, uint32_t rank, uint64_t id)
{
    dcps_session_open(&s->session[rank], id);
}

void dcps_shard_duplicate(dcps_shard_t *s)
{
    s->duplicates++;
}

const char *dcps_shard_why(const dcps_shard_t *s)
{
    return s->why;
}

static void applied(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    dcps_session_pushed(&s->session[rank], seq, true);
    s->version++;
    s->pushes++;
}

static void swap(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

static bool held(const dcps_shard_t *s, const float *p)
{
    return dcps_snapshot_held(s->bufs, dcps_snapshot_find(s->bufs, p));
}

/* Makes the update buffer one that no pull reply sends from: it is written
 * next. There is one: dcps_shard_share lets replies hold at most
 * DCPS_SHARD_REPLY_BUFFERS buffers, and besides w and the sum there are that
 * many and one more. */
static void free_spare(dcps_shard_t *s)
{
    if (!held(s, s->spare))
        return;
    for (int i = 0; i < dcps_snapshot_count(s->bufs); i++) {
        float *b = dcps_snapshot_buf(s->bufs, i);
        if (b != s->w && b != s->acc && !dcps_snapshot_held(s->bufs, i)) {
            s->spare = b;
            return;
        }
    }
    /* A bug in dcps_shard_share's bound, not a state to serve on from. */
    DCPS_ERR("shard %d: every update buffer is held by a pull reply", s->index);
    abort();
}

/* Before w is written in place: if a pull reply sends from w's buffer, w moves
 * to one that none does (a copy, when `keep`), and the reply keeps the old. */
static void own_w(dcps_shard_t *s, bool keep)
{
    if (!held(s, s->w))
        return;
    free_spare(s);
    if (keep)
        memcpy(s->spare, s->w, s->n * sizeof *s->w);
    swap(&s->w, &s->spare);
}

/* Refuses an update: the sentence goes to s->why. Returns DCPS_E_NONFINITE. */
static int refuse(dcps_shard_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(dcps_shard_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    return DCPS_E_NONFINITE;
}

/* The sentence for parameter i (local) that the update would make `would`. */
static int refuse_param(dcps_shard_t *s, size_t i, float would, float g, const char *of)
{
    if (isfinite(would))
        return refuse(s, "the update would make the %s state of parameter %llu non-finite "
                         "(%s %g); nothing applied",
                      s->generic ? dcps_config_optimizer_name(s->rule) : "DC-ASGD-a",
                      (unsigned long long)(s->range.lo + i), of, (double)g);
    return refuse(s, "the update would make parameter %llu %g (it is %g, %s %g); nothing "
                     "applied",
                  (unsigned long long)(s->range.lo + i), (double)would, (double)s->w[i], of,
                  (double)g);
}

/* The value of a sparse gradient at local position i (0 off its entries). */
static float sparse_at(const dcps_shard_t *s, const uint32_t *idx, const float *v, size_t k,
                       size_t i)
{
    for (size_t j = 0; j < k; j++)
        if (idx[j] - s->range.lo == i)
            return v[j];
    return 0.0f;
}

/* The learning rate of the next update: the base, scaled by the schedule at
 * the count of updates applied so far (the version). */
static double lr_at(const dcps_shard_t *s)
{
    return dcps_schedule_lr(&s->sched, s->lr, s->version);
}

/* Before an update: the rules' learning rate and step (adam's t: this is
 * update version + 1). */
static void prepare(dcps_shard_t *s)
{
    const double lr = lr_at(s);
    s->lr_now = (float)lr;
    s->dc.lr = s->lr_now;
    if (!s->generic)
        return; /* the fast paths take lr_now and dc alone */
    dcps_rule_at(&s->r, lr, s->version + 1);
    for (uint32_t j = 0; s->groups && j < s->groups->n_groups; j++)
        dcps_rule_at(&s->gr[j], lr * s->groups->opt[j].lr_factor, s->version + 1);
}

/* The segments the rule runs over, each with its rule: the groups' in this
 * range, or without groups one segment [0, n) of the job's rule. */
static size_t segments(dcps_shard_t *s, const dcps_group_seg_t **seg)
{
    if (s->groups) {
        *seg = s->groups->seg;
        return s->groups->n_segs;
    }
    s->whole = (dcps_group_seg_t){0, s->n, 0};
    *seg = &s->whole;
    return 1;
}

static const dcps_rule_t *rule_of(const dcps_shard_t *s, const dcps_group_seg_t *seg)
{
    return s->groups ? &s->gr[seg->group] : &s->r;
}

/* The rule's state arrays from local offset a on. */
static void state_at(const dcps_shard_t *s, size_t a, float *st[DCPS_RULE_MAX_STATES])
{
    for (int j = 0; j < DCPS_RULE_MAX_STATES; j++)
        st[j] = s->st[j] ? s->st[j] + a : NULL;
}

/* The sentence for a gradient that delay compensation would make non-finite
 * (`of` names g, as refuse_param's). */
static int refuse_delay(dcps_shard_t *s, size_t i, float g, const char *of)
{
    return refuse(s, "delay compensation would make the gradient of parameter %llu or its "
                     "mean square non-finite (%s %g); nothing applied",
                  (unsigned long long)(s->range.lo + i), of, (double)g);
}

/* The gradient a rule of dcps_rule_* takes at local parameter i of a range
 * from a, whose values g holds: delay compensation's (gc), or g's own. */
static const float *grad_at(const dcps_shard_t *s, const float *g, size_t a, size_t i)
{
    return s->gc ? s->gc + i : g + (i - a);
}

/* The job's rule with a dense gradient over the local range [a, a + m), against
 * backup bak (DC-ASGD): the new w of the range into spare, checked. g holds
 * the range's m values (g[0] is parameter a). Returns 0, or DCPS_E_NONFINITE
 * with the sentence (`of` names g in it); nothing of the shard changes. */
static int rule_to(dcps_shard_t *s, const float *bak, const float *g, size_t a, size_t m,
                   const char *of)
{
    size_t bad;
    free_spare(s);
    if (s->generic && s->delay != DCPS_DELAY_NONE) {
        bad = dcps_delay_dense_to(s->gc + a, s->w + a, bak + a, s->ms ? s->ms + a : NULL, g, m,
                                  &s->dc);
        if (bad < m)
            return refuse_delay(s, a + bad, g[bad], of);
    }
    if (s->generic) {
        const dcps_group_seg_t *seg;
        const size_t segs = segments(s, &seg);
        bad = a + m;
        for (size_t j = 0; j < segs && bad == a + m; j++) {
            const size_t lo = seg[j].lo > a ? seg[j].lo : a;
            const size_t hi = seg[j].hi < a + m ? seg[j].hi : a + m;
            if (lo >= hi)
                continue;
            float *st[DCPS_RULE_MAX_STATES];
            state_at(s, lo, st);
            const size_t at = dcps_rule_dense_to(rule_of(s, &seg[j]), s->spare + lo, s->w + lo,
                                                 st, grad_at(s, g, a, lo), hi - lo);
            if (at < hi - lo)
                bad = lo + at;
        }
        bad -= a;
    } else if (s->kind == DCPS_OPT_MOMENTUM)
        bad = dcps_momentum_dense_to(s->spare + a, s->w + a, s->state + a, g, m, s->lr_now,
                                     s->momentum);
    else if (s->kind == DCPS_OPT_DCASGD)
        bad = dcps_dcasgd_dense_to(s->spare + a, s->w + a, bak + a,
                                   s->state ? s->state + a : NULL, g, m, &s->dc);
    else
        bad = dcps_sgd_dense_to(s->spare + a, s->w + a, g, m, s->lr_now);
    return bad < m ? refuse_param(s, a + bad, s->spare[a + bad], g[bad], of) : 0;
}

/* After rule_to passed over [a, a + m): the rule's state of the range moves; wold
 * holds the range's parameters before the update (wold[0] is parameter a). */
static void rule_state(dcps_shard_t *s, const float *wold, const float *g, size_t a, size_t m)
{
    if (s->generic) {
        const dcps_group_seg_t *seg;
        const size_t segs = segments(s, &seg);
        for (size_t j = 0; j < segs; j++) {
            const size_t lo = seg[j].lo > a ? seg[j].lo : a;
            const size_t hi = seg[j].hi < a + m ? seg[j].hi : a + m;
            if (lo >= hi)
                continue;
            float *st[DCPS_RULE_MAX_STATES];
            state_at(s, lo, st);
            dcps_rule_dense_state(rule_of(s, &seg[j]), st, wold + (lo - a), grad_at(s, g, a, lo),
                                  hi - lo);
        }
        if (s->ms)
            dcps_dcasgd_dense_state(s->ms + a, g, m, &s->dc);
    } else if (s->kind == DCPS_OPT_MOMENTUM) {
        dcps_momentum_dense_state(s->state + a, g, m, s->momentum);
    } else if (s->kind == DCPS_OPT_DCASGD) {
        if (s->state)
            dcps_dcasgd_dense_state(s->state + a, g, m, &s->dc);
    }
}

/* After rule_to passed over the whole range: the new w becomes w, and the state
 * moves. */
static void rule_commit(dcps_shard_t *s, const float *g)
{
    swap(&s->w, &s->spare);
    rule_state(s, s->spare, g, 0, s->n);
}

/* Mirror number `mi`: worker mi's backup, or the shared one of sync mode. */
static float *mirror_of(const dcps_shard_t *s, int mi)
{
    return s->mirror ? s->mirror : s->bak + (size_t)mi * s->n;
}

/* The block of an INT8 frame of k values: one scale when that is all of them. */
static uint32_t block_of(const dcps_shard_t *s, size_t k)
{
    return s->dtype == DCPS_DTYPE_I8 && k > DCPS_QUANT_BLOCK ? DCPS_QUANT_BLOCK : 0;
}

/* out (a delta's values, or w dense) as sent in the shorter format. */
static void encoded(const dcps_shard_t *s, dcps_pull_t *out, const void *bytes, size_t len)
{
    out->encoded = bytes;
    out->bytes = len;
    out->dtype = s->dtype;
    out->block = block_of(s, out->k);
}

/* Brings mirror mi from its tag to the current version by the top k of
 * w − mirror, kept as the last delta. Returns 0, or DCPS_E_NONFINITE when
 * w − mirror or the moved mirror would not be finite (the mirror is then
 * unchanged). */
static int advance(dcps_shard_t *s, int mi, size_t k)
{
    float *m = mirror_of(s, mi);
    for (size_t i = 0; i < s->n; i++)
        s->diff[i] = s->w[i] - m[i];
    int rc = dcps_topk_cpu(s->diff, s->n, k, s->delta_idx, s->delta_val, s->topk);
    if (rc != 0)
        return rc;
    /* Shorter values: what is sent, and the mirror moves by what the worker
     * decodes, so the rounding error stays in w − mirror for a later delta. */
    if (s->dtype != DCPS_DTYPE_F32) {
        uint32_t block = block_of(s, k);
        dcps_quant_encode(s->dtype, block, 0, s->delta_val, k, s->delta_q, s->delta_val);
        s->delta_bytes = (size_t)dcps_quant_bytes(s->dtype, k, block);
    }
    /* The worker adds the same values with the same float addition. Both terms
     * are finite, but next to ±FLT_MAX their sum may round to Inf: such a delta
     * is not sent (the caller answers dense, and w is finite). */
    for (size_t j = 0; j < k; j++)
        if (!isfinite(m[s->delta_idx[j]] + s->delta_val[j]))
            return DCPS_E_NONFINITE;
    dcps_scatter_add_cpu(m, s->delta_idx, s->delta_val, k, 1.0f);
    for (size_t j = 0; j < k; j++)
        s->delta_idx[j] += (uint32_t)s->range.lo;
    s->delta_k = k;
    s->delta_of = mi;
    s->delta_from = s->tag[mi];
    s->tag[mi] = s->version;
    return 0;
}

/* Mirror mi becomes w (tag: the current version); a delta kept for it is void. */
static void reset(dcps_shard_t *s, int mi)
{
    memcpy(mirror_of(s, mi), s->w, s->n * sizeof *s->w);
    s->tag[mi] = s->version;
    if (s->delta_of == mi)
        s->delta_of = -1;
}

void dcps_shard_pull(dcps_shard_t *s, uint32_t rank, bool holds, uint64_t held, uint64_t want,
                     bool exact, dcps_pull_t *out)
{
    s->pulls++;
    /* A tag is vouched for only if this process gave it to this session: a
     * session's first pull, and every rank's first after a restore (versions
     * repeat there with other contents, above and below the restored one), are
     * answered as if it held nothing (the sync mirror, shared, may carry a tag
     * equal to the one named). */
    if (!s->session[rank].pulled)
        holds = false;
    s->session[rank].pulled = true;
    s->behind[rank] = false;
    *out = (dcps_pull_t){.dense = true, .values = s->w, .k = s->n};
    if (!s->delta) {
        float *bak = s->bak ? s->bak + (size_t)rank * s->n : NULL;
        if (s->dtype != DCPS_DTYPE_F32 && !exact) { /* w_bak(rank): what the worker decodes */
            dcps_quant_encode(s->dtype, block_of(s, s->n), 0, s->w, s->n, s->reply_q, bak);
            encoded(s, out, s->reply_q, (size_t)dcps_quant_bytes(s->dtype, s->n, block_of(s, s->n)));
        } else if (bak) {
            memcpy(bak, s->w, s->n * sizeof *s->w);
        }
        return;
    }
    int mi = s->mirror ? 0 : (int)rank;
    if (exact && !s->mirror) {
        reset(s, mi);
        return;
    }
    /* Sync mode: every worker computes its gradient on the shared mirror, so
     * the mirror is the model and w is the mirror plus what no delta has sent
     * yet (docs/algorithms.md). An exact pull gets the mirror, brought to this
     * version as the next delta pull would bring it. */
    if (s->tag[mi] != s->version) {
        size_t k = want == 0 ? s->k_pull : want < s->k_max ? (size_t)want : s->k_max;
        if (!(exact || (holds && held == s->tag[mi])) || advance(s, mi, k) != 0)
            reset(s, mi);
    }
    if (exact)
        out->values = mirror_of(s, mi);
    else if (holds && held == s->tag[mi])
        *out = (dcps_pull_t){.dense = false}; /* nothing changed since */
    else if (holds && s->delta_of == mi && held == s->delta_from) {
        *out = (dcps_pull_t){.values = s->delta_val, .idx = s->delta_idx, .k = s->delta_k};
        if (s->dtype != DCPS_DTYPE_F32)
            encoded(s, out, s->delta_q, s->delta_bytes);
    }
    else
        out->values = mirror_of(s, mi);
    s->deltas += !out->dense;
}

void *dcps_shard_share(dcps_shard_t *s, const float *values)
{
    int i = values == s->w ? dcps_snapshot_find(s->bufs, values) : -1;
    if (i < 0)
        return NULL;
    if (!dcps_snapshot_held(s->bufs, i) &&
        dcps_snapshot_held_count(s->bufs) >= DCPS_SHARD_REPLY_BUFFERS) {
        s->pulls_copied++;
        return NULL;
    }
    return dcps_snapshot_hold(s->bufs, i);
}

int dcps_shard_apply_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g)
{
    dcps_shard_settle(s);
    prepare(s);
    int rc = rule_to(s, s->bak ? s->bak + (size_t)rank * s->n : NULL, g, 0, s->n, "gradient");
    if (rc)
        return rc;
    rule_commit(s, g);
    applied(s, rank, seq);
    return 0;
}

/* The entries of a sparse push (k global indices, ascending) that fall in
 * segment seg: [*j0, returned). */
static size_t entries_in(const dcps_shard_t *s, const dcps_group_seg_t *seg, const uint32_t *idx,
                         size_t k, size_t *j0)
{
    size_t j = *j0;
    while (j < k && idx[j] - s->range.lo < seg->lo)
        j++;
    *j0 = j;
    while (j < k && idx[j] - s->range.lo < seg->hi)
        j++;
    return j;
}

/* A sparse push with a rule of dcps_rule_*: delay compensation of its
 * entries, then the rule, once per segment (parameter groups) with its
 * options: lazy (its entries in place, checked first) or not (out of place,
 * as dense). Returns 0 or DCPS_E_NONFINITE, nothing changed. */
static int generic_sparse(dcps_shard_t *s, const float *bak, const uint32_t *idx, const float *v,
                          size_t k)
{
    const uint64_t lo = s->range.lo;
    const float *g = v;
    const dcps_group_seg_t *seg;
    const size_t segs = segments(s, &seg);
    size_t bad, j0, j1;
    if (s->gc) {
        bad = dcps_delay_sparse_to(s->gc, s->w, bak, s->ms, lo, idx, v, k, &s->dc);
        if (bad < k)
            return refuse_delay(s, idx[bad] - lo, v[bad], "gradient");
        g = s->gc;
    }
    if (s->lazy) {
        j0 = 0;
        for (size_t q = 0; q < segs; q++, j0 = j1) {
            const dcps_rule_t *r = rule_of(s, &seg[q]);
            j1 = entries_in(s, &seg[q], idx, k, &j0);
            bad = j0 + dcps_rule_lazy_check(r, s->w, s->st, lo, idx + j0, g + j0, j1 - j0);
            if (bad < j1) {
                /* The rule on copies of that one entry, for the sentence. */
                const size_t i = idx[bad] - lo;
                float wi = s->w[i], a = s->st[0] ? s->st[0][i] : 0,
                      b = s->st[1] ? s->st[1][i] : 0;
                float *const one[2] = {s->st[0] ? &a : NULL, s->st[1] ? &b : NULL};
                dcps_rule_lazy(r, &wi, one, idx[bad], &idx[bad], &g[bad], 1);
                return refuse_param(s, i, wi, v[bad], "gradient");
            }
        }
        own_w(s, true);
        j0 = 0;
        for (size_t q = 0; q < segs; q++, j0 = j1) {
            j1 = entries_in(s, &seg[q], idx, k, &j0);
            dcps_rule_lazy(rule_of(s, &seg[q]), s->w, s->st, lo, idx + j0, g + j0, j1 - j0);
        }
    } else {
        free_spare(s);
        j0 = 0;
        for (size_t q = 0; q < segs; q++, j0 = j1) {
            const size_t a = seg[q].lo, m = seg[q].hi - a;
            float *st[DCPS_RULE_MAX_STATES];
            state_at(s, a, st);
            j1 = entries_in(s, &seg[q], idx, k, &j0);
            bad = a + dcps_rule_sparse_to(rule_of(s, &seg[q]), s->spare + a, s->w + a, st, m,
                                          lo + a, idx + j0, g + j0, j1 - j0);
            if (bad < a + m)
                return refuse_param(s, bad, s->spare[bad], sparse_at(s, idx, v, k, bad),
                                    "gradient");
        }
        swap(&s->w, &s->spare);
        j0 = 0;
        for (size_t q = 0; q < segs; q++, j0 = j1) {
            const size_t a = seg[q].lo;
            float *st[DCPS_RULE_MAX_STATES];
            state_at(s, a, st);
            j1 = entries_in(s, &seg[q], idx, k, &j0);
            dcps_rule_sparse_state(rule_of(s, &seg[q]), st, s->spare + a, seg[q].hi - a, lo + a,
                                   idx + j0, g + j0, j1 - j0);
        }
    }
    if (s->ms)
        dcps_dcasgd_sparse_state(s->ms, lo, idx, v, k, &s->dc);
    return 0;
}

/* A sparse gradient of k > 0 entries with the job's rule, in place or out of
 * place as the rule needs; the version does not move. Returns 0 or
 * DCPS_E_NONFINITE, nothing changed. */
static int sparse_update(dcps_shard_t *s, uint32_t rank, const uint32_t *idx, const float *v,
                         size_t k)
{
    const uint64_t lo = s->range.lo;
    size_t bad;
    prepare(s);
    if (s->generic)
        return generic_sparse(s, s->bak ? s->bak + (size_t)rank * s->n : NULL, idx, v, k);
    switch (s->kind) {
    case DCPS_OPT_MOMENTUM:
        /* It moves every parameter (u decays everywhere): out of place, as dense. */
        free_spare(s);
        bad = dcps_momentum_sparse_to(s->spare, s->w, s->state, s->n, lo, idx, v, k,
                                      s->lr_now, s->momentum);
        if (bad < s->n)
            return refuse_param(s, bad, s->spare[bad], sparse_at(s, idx, v, k, bad),
                                "gradient");
        swap(&s->w, &s->spare);
        dcps_momentum_sparse_state(s->state, s->n, lo, idx, v, k, s->momentum);
        break;
    case DCPS_OPT_DCASGD: {
        float *bak = s->bak + (size_t)rank * s->n;
        bad = dcps_dcasgd_sparse_check(s->w, bak, s->state, lo, idx, v, k, &s->dc);
        if (bad < k) {
            /* The rule on copies of that one entry, for the sentence. */
            size_t i = idx[bad] - lo;
            float wi = s->w[i], ms = s->state ? s->state[i] : 0.0f;
            dcps_dcasgd_sparse(&wi, &bak[i], s->state ? &ms : NULL, idx[bad], &idx[bad],
                               &v[bad], 1, &s->dc);
            return refuse_param(s, i, wi, v[bad], "gradient");
        }
        own_w(s, true);
        dcps_dcasgd_sparse(s->w, bak, s->state, lo, idx, v, k, &s->dc);
        break;
    }
    default:
        bad = dcps_sgd_sparse_check(s->w, lo, idx, v, k, s->lr_now);
        if (bad < k) {
            size_t i = idx[bad] - lo;
            return refuse_param(s, i, s->w[i] - s->lr_now * v[bad], v[bad], "gradient");
        }
        own_w(s, true);
        dcps_sgd_sparse(s->w, lo, idx, v, k, s->lr_now);
    }
    return 0;
}

int dcps_shard_apply_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq, const uint32_t *idx,
                            const float *v, size_t k)
{
    if (k == 0)
        return 0; /* no update (shard.h) */
    dcps_shard_settle(s);
    int rc = sparse_update(s, rank, idx, v, k);
    if (rc == 0)
        applied(s, rank, seq);
    return rc;
}

/* The sentence for entry i of the round's sum that a push would make `would`. */
static int refuse_sum(dcps_shard_t *s, size_t i, float would, float g)
{
    return refuse(s, "adding it to the round's sum would make the entry of parameter %llu %g "
                     "(the sum holds %g, the push %g); not added",
                  (unsigned long long)(s->range.lo + i), (double)would, (double)s->acc[i],
                  (double)g);
}

/* Keeps rank's push (idx NULL: k = n dense values) when the shard keeps them;
 * then it is held once added. A part of a push in parts (`part`) is always
 * kept, added to the parts of the push kept before it (while they are held),
 * as entries (idx NULL: k dense values from local offset a), so that a round
 * that closes without the rank takes them back out. Returns 0 or DCPS_E_NOMEM
 * (nothing added). */
static int keep(dcps_shard_t *s, uint32_t rank, const uint32_t *idx, const float *v, size_t k,
                bool part, size_t a)
{
    if (part && !s->kept)
        s->kept = calloc((size_t)s->workers, sizeof *s->kept);
    struct kept *p = s->kept && (part || s->keep_all) ? &s->kept[rank] : NULL;
    if (part && !s->kept) {
        refuse(s, "no memory to keep rank %u's parts", rank);
        return DCPS_E_NOMEM;
    }
    if (!p)
        return 0;
    size_t at = part && p->held && p->k != SIZE_MAX ? p->k : 0;
    if (at + k > p->cap) {
        k += at;
        float *nv = realloc(p->v, k * sizeof *nv);
        if (nv)
            p->v = nv;
        uint32_t *ni = realloc(p->idx, k * sizeof *ni);
        if (ni)
            p->idx = ni;
        if (!nv || !ni) {
            refuse(s, "no memory to keep rank %u's push of %zu entries", rank, k);
            return DCPS_E_NOMEM;
        }
        p->cap = k;
        k -= at;
    }
    memcpy(p->v + at, v, k * sizeof *v);
    for (size_t j = 0; idx && j < k; j++)
        p->idx[at + j] = idx[j];
    for (size_t j = 0; part && !idx && j < k; j++)
        p->idx[at + j] = (uint32_t)(s->range.lo + a + j);
    p->k = idx || part ? at + k : SIZE_MAX;
    p->held = part && at > 0;
    return 0;
}

static void kept_added(dcps_shard_t *s, uint32_t rank)
{
    if (s->kept)
        s->kept[rank].held = true;
}

int dcps_shard_keep_pushes(dcps_shard_t *s)
{
    s->keep_all = true;
    if (s->kept)
        return 0;
    s->kept = calloc((size_t)s->workers, sizeof *s->kept);
    return s->kept ? 0 : DCPS_E_NOMEM;
}

bool dcps_shard_round_holds(const dcps_shard_t *s, uint32_t rank)
{
    return s->kept && s->kept[rank].held;
}

bool dcps_shard_round_remove(dcps_shard_t *s, uint32_t rank)
{
    struct kept *p = s->kept ? &s->kept[rank] : NULL;
    if (!p || !p->held)
        return false;
    if (p->k == SIZE_MAX)
        for (size_t i = 0; i < s->n; i++)
            s->acc[i] -= p->v[i];
    else
        for (size_t j = 0; j < p->k; j++)
            s->acc[p->idx[j] - s->range.lo] -= p->v[j];
    p->held = false;
    return true;
}

int dcps_shard_accumulate_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g)
{
    int rc = keep(s, rank, NULL, g, s->n, false, 0);
    if (rc != 0)
        return rc;
    free_spare(s);
    size_t bad = dcps_add_dense_to(s->spare, s->acc, g, s->n);
    if (bad < s->n)
        return refuse_sum(s, bad, s->spare[bad], g[bad]);
    swap(&s->acc, &s->spare);
    kept_added(s, rank);
    dcps_session_pushed(&s->session[rank], seq, true);
    s->pushes++;
    return 0;
}

int dcps_shard_accumulate_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq,
                                 const uint32_t *idx, const float *v, size_t k)
{
    size_t bad = dcps_add_sparse_check(s->acc, s->range.lo, idx, v, k);
    int rc = bad < k ? 0 : keep(s, rank, idx, v, k, false, 0);
    if (rc != 0)
        return rc;
    if (bad < k) {
        size_t i = idx[bad] - s->range.lo;
        return refuse_sum(s, i, s->acc[i] + v[bad], v[bad]);
    }
    for (size_t j = 0; j < k; j++)
        s->acc[idx[j] - s->range.lo] += v[j];
    kept_added(s, rank);
    dcps_session_pushed(&s->session[rank], seq, true);
    s->pushes++;
    return 0;
}

int dcps_shard_apply_round(dcps_shard_t *s, int pushes)
{
    const float scale = 1.0f / (float)pushes;
    for (size_t i = 0; i < s->n; i++)
        s->acc[i] *= scale;
    prepare(s);
    /* Every worker computed this round's gradient on the same parameters: w,
     * or with delta pulls the shared mirror. */
    if (rule_to(s, s->mirror ? s->mirror : s->w, s->acc, 0, s->n,
                "the round's mean gradient")) {
        dcps_shard_clear_round(s);
        s->rounds_refused++;
        return DCPS_E_NONFINITE;
    }
    rule_commit(s, s->acc);
    dcps_shard_clear_round(s);
    s->version++;
    return 0;
}

void dcps_shard_clear_round(dcps_shard_t *s)
{
    memset(s->acc, 0, s->n * sizeof *s->acc);
    for (int r = 0; s->kept && r < s->workers; r++)
        s->kept[r].held = false;
}

void dcps_shard_drop(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    dcps_session_pushed(&s->session[rank], seq, false);
    s->dropped++;
}

/* Records a push whose gradient is d updates old. */
static void note(dcps_shard_t *s, uint64_t d)
{
    dcps_staleness_t *st = &s->staleness;
    int b = 0;
    while (b < DCPS_STALENESS_BUCKETS - 1 && d >> b)
        b++;
    st->hist[b]++;
    st->count++;
    st->sum += d;
    if (d > st->max)
        st->max = d;
}

void dcps_shard_note_staleness(dcps_shard_t *s, uint64_t based_on)
{
    note(s, s->version - based_on);
}

int dcps_shard_push(dcps_shard_t *s, bool sync, uint32_t rank, uint64_t seq, uint64_t based_on,
                    const uint32_t *idx, const float *v, size_t k, char *why, size_t whylen)
{
    const uint64_t d = s->version - based_on; /* before this push moves the version */
    int rc;
    if (sync)
        rc = idx ? dcps_shard_accumulate_sparse(s, rank, seq, idx, v, k)
                 : dcps_shard_accumulate_dense(s, rank, seq, v);
    else if (idx && k == 0)
        return 0; /* no update, so no staleness either (shard.h) */
    else
        rc = idx ? dcps_shard_apply_sparse(s, rank, seq, idx, v, k)
                 : dcps_shard_apply_dense(s, rank, seq, v);
    if (rc != 0)
        return dcps_say(why, whylen, rc, "%s", s->why);
    note(s, d);
    return 0;
}

/* Sync: part [a, a + m) (local) of rank's push, dense (idx NULL: m values) or
 * k sparse entries in it, added to the open round's sum and kept, so that a
 * round that closes without the rank's whole push takes it back out. */
static int accumulate_part(dcps_shard_t *s, uint32_t rank, size_t a, size_t m,
                           const uint32_t *idx, const float *v, size_t k)
{
    size_t bad;
    if (idx) {
        bad = dcps_add_sparse_check(s->acc, s->range.lo, idx, v, k);
        if (bad < k) {
            size_t i = idx[bad] - s->range.lo;
            return refuse_sum(s, i, s->acc[i] + v[bad], v[bad]);
        }
    } else {
        free_spare(s);
        bad = dcps_add_dense_to(s->spare + a, s->acc + a, v, m);
        if (bad < m)
            return refuse_sum(s, a + bad, s->spare[a + bad], v[bad]);
    }
    int rc = keep(s, rank, idx, v, idx ? k : m, true, a);
    if (rc != 0)
        return rc;
    if (idx)
        for (size_t j = 0; j < k; j++)
            s->acc[idx[j] - s->range.lo] += v[j];
    else
        memcpy(s->acc + a, s->spare + a, m * sizeof *s->acc);
    kept_added(s, rank);
    return 0;
}

void dcps_shard_settle(dcps_shard_t *s)
{
    if (!s->staging)
        return;
    s->staging = false;
    if (s->staged == s->n || held(s, s->w) || s->staged > s->n / 2) {
        /* The rest of w into the update buffer, which becomes w. */
        size_t at = 0;
        for (int i = 0; i <= s->stage_n; i++) {
            /* The gaps between the staged ranges, in order of their starts. */
            size_t next = s->n, end = s->n;
            for (int j = 0; j < s->stage_n; j++)
                if (s->stage_lo[j] >= at && s->stage_lo[j] < next)
                    next = s->stage_lo[j], end = s->stage_hi[j];
            memcpy(s->spare + at, s->w + at, (next - at) * sizeof *s->w);
            at = end;
        }
        swap(&s->w, &s->spare);
    } else {
        for (int j = 0; j < s->stage_n; j++)
            memcpy(s->w + s->stage_lo[j], s->spare + s->stage_lo[j],
                   (s->stage_hi[j] - s->stage_lo[j]) * sizeof *s->w);
    }
}

/* Async, ssp: part [a, a + m) (local) of rank's push `push` with the job's
 * rule, dense (idx NULL: m values, staged: written out of place into the
 * update buffer, which becomes w with the push's last part) or k sparse
 * entries (in w, after whatever was staged); the version does not move. */
static int apply_part(dcps_shard_t *s, uint32_t rank, uint64_t push, size_t a, size_t m,
                      const uint32_t *idx, const float *v, size_t k)
{
    if (s->staging && (idx || s->stage_rank != rank || s->stage_push != push ||
                       s->stage_n == DCPS_PARTS_MAX))
        dcps_shard_settle(s);
    if (idx)
        return k == 0 ? 0 : sparse_update(s, rank, idx, v, k);
    prepare(s);
    int rc = rule_to(s, s->bak ? s->bak + (size_t)rank * s->n : NULL, v, a, m, "gradient");
    if (rc != 0)
        return rc;
    rule_state(s, s->w + a, v, a, m);
    if (!s->staging)
        s->staging = true, s->stage_rank = rank, s->stage_push = push, s->stage_n = 0,
        s->staged = 0;
    s->stage_lo[s->stage_n] = a;
    s->stage_hi[s->stage_n++] = a + m;
    s->staged += m;
    return 0;
}

int dcps_shard_push_part(dcps_shard_t *s, bool sync, uint32_t rank, uint64_t seq, uint64_t push,
                         uint64_t based_on, uint64_t lo, uint64_t hi, const uint32_t *idx,
                         const float *v, size_t k, bool last, char *why, size_t whylen)
{
    const uint64_t d = s->version - based_on;
    const size_t a = (size_t)(lo - s->range.lo), m = (size_t)(hi - lo);
    int rc = sync ? accumulate_part(s, rank, a, m, idx, v, k)
                  : apply_part(s, rank, push, a, m, idx, v, k);
    if (rc != 0)
        return dcps_say(why, whylen, rc, "%s", s->why);
    dcps_session_pushed(&s->session[rank], seq, true);
    if (last)
        dcps_shard_settle(s); /* the staged parts become w */
    if (last) {
        s->pushes++;
        s->version += !sync;
        note(s, d);
    }
    return 0;
}

size_t dcps_shard_spans(const dcps_shard_t *s, dcps_span_t out[DCPS_SHARD_SPANS])
{
    const size_t n = s->n;
    size_t k = 0;
    if (!s->mem)
        return 0;
    out[k++] = (dcps_span_t){s->w, n};
    if (s->state)
        out[k++] = (dcps_span_t){s->state, n * (size_t)s->states};
    if (s->bak)
        out[k++] = (dcps_span_t){s->bak, n * (size_t)s->workers};
    if (s->acc)
        out[k++] = (dcps_span_t){s->acc, n};
    if (s->mirror)
        out[k++] = (dcps_span_t){s->mirror, n};
    if (s->diff)
        out[k++] = (dcps_span_t){s->diff, n};
    return k;
}

/* The counters a checkpoint holds, in dcps_shard_save's order. */
#define COUNTERS 5

void dcps_shard_save(const dcps_shard_t *s, uint64_t *words)
{
    const uint64_t counters[COUNTERS] = {s->pushes, s->duplicates, s->pulls, s->dropped, s->deltas};
    const dcps_staleness_t *st = &s->staleness;
    for (int r = 0; r < s->workers; r++, words += DCPS_SESSION_WORDS)
        dcps_session_save(&s->session[r], words);
    memcpy(words, counters, sizeof counters);
    words += COUNTERS;
    *words++ = st->count, *words++ = st->sum, *words++ = st->max;
    memcpy(words, st->hist, sizeof st->hist);
}

void dcps_shard_load(dcps_shard_t *s, uint64_t version, bool initialized, const uint64_t *words,
                     size_t stride)
{
    s->staging = false;
    uint64_t *const counters[COUNTERS] = {&s->pushes, &s->duplicates, &s->pulls, &s->dropped,
                                          &s->deltas};
    dcps_staleness_t *st = &s->staleness;
    for (int r = 0; r < s->workers; r++, words += stride) {
        if (stride == DCPS_SESSION_WORDS)
            dcps_session_load(&s->session[r], words);
        else
            s->session[r] = (dcps_session_t){0};
    }
    for (int i = 0; i < COUNTERS; i++)
        *counters[i] = *words++;
    st->count = *words++, st->sum = *words++, st->max = *words++;
    memcpy(st->hist, words, sizeof st->hist);
    s->version = version;
    s->initialized = initialized;
}

dcps_shard_view_t dcps_shard_view(const dcps_shard_t *s)
{
    return (dcps_shard_view_t){.w = s->w,
                               .spare = s->spare,
                               .state = s->state,
                               .bak = s->bak,
                               .acc = s->acc,
                               .mirror = s->mirror,
                               .tag = s->tag,
                               .delta_of = s->delta_of};
}

void dcps_shard_set_lr(dcps_shard_t *s, double lr)
{
    s->lr = lr;
    s->dc.lr = (float)lr;
}

int dcps_shard_set_groups(dcps_shard_t *s, dcps_groups_t **gp, char *why, size_t whylen)
{
    dcps_groups_t *g = *gp;
    int rc = 0;
    *gp = NULL;
    if (s->groups || s->initialized) {
        rc = dcps_say(why, whylen, DCPS_E_STATE,
                      "the shard has its parameters already; groups are set with them");
        goto out;
    }
    for (uint32_t j = 0; s->rule == DCPS_OPT_ADAMW && j < g->n_groups; j++)
        if (s->lr * g->opt[j].lr_factor * g->opt[j].weight_decay >= 1) {
            rc = dcps_say(why, whylen, DCPS_E_FIELD,
                          "parameter group %u: lr %g times its lr_factor %g and weight_decay %g "
                          "must be below 1: adamw multiplies every parameter by 1 - lr * "
                          "weight_decay each update",
                          j, (double)s->lr, g->opt[j].lr_factor, g->opt[j].weight_decay);
            goto out;
        }
    dcps_rule_t *gr = malloc(g->n_groups * sizeof *gr);
    if (!gr || (s->delay != DCPS_DELAY_NONE && !s->gc && s->n &&
                !(s->gc = malloc(s->n * sizeof *s->gc)))) {
        free(gr);
        rc = dcps_say(why, whylen, DCPS_E_NOMEM, "out of memory for the parameter groups");
        goto out;
    }
    for (uint32_t j = 0; j < g->n_groups; j++) {
        gr[j] = s->r;
        gr[j].weight_decay = g->opt[j].weight_decay;
    }
    s->gr = gr;
    s->groups = g;
    g = NULL;
    s->generic = true; /* the fast paths know one rule for the whole range */
out:
    dcps_groups_destroy(&g);
    return rc;
}

const dcps_groups_t *dcps_shard_groups(const dcps_shard_t *s)
{
    return s->groups;
}

dcps_buffers_t *dcps_shard_buffers(const dcps_shard_t *s)
{
    return s->buffers;
}

void dcps_shard_memory_kinds(const dcps_shard_t *s, dcps_shard_memory_t *out)
{
    const size_t vec = s->n * sizeof *s->w;
    size_t tags = s->tag ? (s->mirror ? 1 : (size_t)s->workers) : 0;
    out->parameters = vec;
    out->optimizer_state = vec * (size_t)s->states + (s->gc ? vec : 0);
    out->worker_backups = s->bak ? vec * (size_t)s->workers : 0;
    out->sync_sum = s->acc ? vec : 0;
    out->delta_pull = (s->diff ? vec : 0) + (s->mirror ? vec : 0) + tags * sizeof *s->tag +
                      s->k_max * (sizeof *s->delta_idx + sizeof *s->delta_val) +
                      (s->delta ? s->n : 0) + /* the selection's workspace, about n bytes */
                      (s->delta_q ? (size_t)dcps_quant_bytes(s->dtype, s->k_max, DCPS_QUANT_BLOCK)
                                  : 0);
    out->update_buffer = s->spare ? vec : 0;
    out->reply_buffers = (s->spare ? vec * DCPS_SHARD_REPLY_BUFFERS : 0) +
                         (s->reply_q ? (size_t)dcps_quant_bytes(s->dtype, s->n, DCPS_QUANT_BLOCK)
                                     : 0);
    out->sequence_numbers = (size_t)s->workers * (sizeof *s->session + sizeof *s->behind +
                                                  sizeof *s->parts + sizeof *s->carried);
}

size_t dcps_shard_memory(const dcps_shard_t *s)
{
    dcps_shard_memory_t k;
    dcps_shard_memory_kinds(s, &k);
    return k.parameters + k.optimizer_state + k.worker_backups + k.sync_sum + k.delta_pull +
           k.update_buffer + k.reply_buffers + k.sequence_numbers;
}

dcps_shard_stats_t dcps_shard_stats(const dcps_shard_t *s)
{
    return (dcps_shard_stats_t){
        .index = s->index,
        .n_params = s->n_params,
        .range = s->range,
        .n = s->n,
        .workers = s->workers,
        .kind = s->rule,
        .delay = s->delay,
        .adaptive = s->dc.adaptive,
        .lr = (float)s->lr,
        .initialized = s->initialized,
        .restored = s->restored,
        .delta = s->delta,
        .version = s->version,
        .floats = s->floats,
        .k_pull = s->k_pull,
        .k_max = s->k_max,
        .pushes = s->pushes,
        .duplicates = s->duplicates,
        .pulls = s->pulls,
        .dropped = s->dropped,
        .pulls_copied = s->pulls_copied,
        .rounds_refused = s->rounds_refused,
        .deltas = s->deltas,
        .staleness = s->staleness,
    };
}
