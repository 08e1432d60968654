/* dcps — a shard's checkpoints; see checkpoint.h. */
#include "server/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/io.h"
#include "common/log.h"

/* The file is the host's memory of each field: only little-endian hosts write
 * the format's byte order. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dcps checkpoints are little-endian; this host is not"
#endif

#define MAGIC "DCPSCKPT"
#define HEADER_SIZE 128
#define HEADER_CRC_AT 124 /* the header's own CRC covers the bytes before it */
#define TRAILER_SIZE 4
#define FLAG_INITIALIZED 1u
#define FLAG_ADAPTIVE 2u
#define FLAG_DELAY 4u        /* format 3: delay compensation (adaptive: with FLAG_ADAPTIVE) */
#define FORMAT_NO_SESSIONS 1 /* format 1: per rank only the highest applied seq */
#define FORMAT_DCASGD 2      /* format 2 (and 1): kind dcasgd is sgd with delay compensation */

/* The header as fields; encoded at fixed offsets by put_header. */
typedef struct {
    uint32_t format, header_size;
    uint64_t job_id, n_params, lo, hi;
    uint32_t index, workers, kind, mode, pull, flags;
    uint64_t version, seq, created, floats, payload_len;
} header_t;

/* A checkpoint file of the shard in the directory, by its name. */
typedef struct {
    uint64_t seq, version;
    char *name;
} entry_t;

/* --- CRC-32C, slicing by 8 ------------------------------------------------------ */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* the reflected polynomial */
        crc_table[0][i] = c;
    }
    /* crc_table[t][b]: byte b followed by t zero bytes. */
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t dcps_checkpoint_crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    for (; n && ((uintptr_t)p & 7); n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
    }
    for (; n; n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* --- encoding ------------------------------------------------------------------- */

static void put32(uint8_t *b, size_t at, uint32_t v)
{
    memcpy(b + at, &v, 4);
}

static void put64(uint8_t *b, size_t at, uint64_t v)
{
    memcpy(b + at, &v, 8);
}

static uint32_t get32(const uint8_t *b, size_t at)
{
    uint32_t v;
    memcpy(&v, b + at, 4);
    return v;
}

static uint64_t get64(const uint8_t *b, size_t at)
{
    uint64_t v;
    memcpy(&v, b + at, 8);
    return v;
}

/* The header's layout, in byte offsets; get_header reads the same ones. */
static void put_header(uint8_t *b, const header_t *h)
{
    memset(b, 0, HEADER_SIZE);
    memcpy(b, MAGIC, 8);
    put32(b, 8, h->format);
    put32(b, 12, h->header_size);
    put64(b, 16, h->job_id);
    put64(b, 24, h->n_params);
    put64(b, 32, h->lo);
    put64(b, 40, h->hi);
    put32(b, 48, h->index);
    put32(b, 52, h->workers);
    put32(b, 56, h->kind);
    put32(b, 60, h->mode);
    put32(b, 64, h->pull);
    put32(b, 68, h->flags);
    put64(b, 72, h->version);
    put64(b, 80, h->seq);
    put64(b, 88, h->created);
    put64(b, 96, h->floats);
    put64(b, 104, h->payload_len);
    put32(b, HEADER_CRC_AT, dcps_checkpoint_crc32c(0, b, HEADER_CRC_AT));
}

static void get_header(const uint8_t *b, header_t *h)
{
    *h = (header_t){
        .format = get32(b, 8),
        .header_size = get32(b, 12),
        .job_id = get64(b, 16),
        .n_params = get64(b, 24),
        .lo = get64(b, 32),
        .hi = get64(b, 40),
        .index = get32(b, 48),
        .workers = get32(b, 52),
        .kind = get32(b, 56),
        .mode = get32(b, 60),
        .pull = get32(b, 64),
        .flags = get32(b, 68),
        .version = get64(b, 72),
        .seq = get64(b, 80),
        .created = get64(b, 88),
        .floats = get64(b, 96),
        .payload_len = get64(b, 104),
    };
}

/* Words per rank of the shard's part of the tail: its session record
 * (server/session.h), or in format 1 the highest applied seq. */
static size_t stride(uint32_t format)
{
    return format == FORMAT_NO_SESSIONS ? 1 : DCPS_SESSION_WORDS;
}

/* The shard's words in the tail (dcps_shard_save) in `format`. */
static size_t shard_words(int workers, uint32_t format)
{
    return DCPS_SHARD_WORDS(workers) - (DCPS_SESSION_WORDS - stride(format)) * (size_t)workers;
}

/* Bytes of the payload after the floats, in 8-byte words: the shard's (every
 * rank's session record, the counters, the staleness histogram), then the
 * consistency model's (dcps_consistency_save). */
static size_t tail_size(int workers, uint32_t format)
{
    return (shard_words(workers, format) + DCPS_CONSISTENCY_WORDS(workers)) * 8;
}

/* Format 3 ends its payload with the shard's parameter groups: a word count w,
 * then w words of dcps_groups_save (w = 0: no groups). Their bytes, for s. */
static size_t groups_bytes(const dcps_shard_t *s, uint32_t format)
{
    const dcps_groups_t *g = dcps_shard_groups(s);
    return format >= 3 ? 8 * (1 + (g ? dcps_groups_words(g) : 0)) : 0;
}

/* After the groups, format 3 ends with the model's buffers (server/buffers.h):
 * a word count w, then w words of dcps_buffers_save. A format 3 file written
 * before buffers were kept ends after the groups: it has none. */
static size_t buffers_bytes(const dcps_shard_t *s, uint32_t format)
{
    return format >= 3 ? 8 * (1 + dcps_buffers_words(dcps_shard_buffers(s))) : 0;
}

/* After the buffers, format 3 ends with every rank's record of its latest push
 * in parts and of a cut one it carries (server/parts.h): a word count w, then
 * w words of dcps_shard_parts_save. A file written before they were kept ends
 * after the buffers: no rank has any. */
static size_t parts_bytes(const dcps_shard_t *s, uint32_t format)
{
    return format >= 3 ? 8 * (1 + dcps_shard_parts_words(s)) : 0;
}

/* The most bytes a group table may take in a file of a shard of n parameters. */
static size_t groups_bytes_max(size_t n)
{
    return 8 * (3 + 2 * (size_t)DCPS_GROUPS_MAX +
                3 * (n < DCPS_GROUP_RANGES_MAX ? n : DCPS_GROUP_RANGES_MAX));
}

static size_t payload_size(const dcps_shard_stats_t *s, uint32_t format)
{
    return s->floats * sizeof(float) + tail_size(s->workers, format);
}

/* The header this shard and job would write in `format` (seq and created are
 * the caller's). */
static void header_of(header_t *h, const dcps_config_t *cfg, const dcps_shard_stats_t *s, int mode,
                      uint32_t format)
{
    *h = (header_t){
        .format = format,
        .header_size = HEADER_SIZE,
        .job_id = cfg->job_id,
        .n_params = s->n_params,
        .lo = s->range.lo,
        .hi = s->range.hi,
        .index = (uint32_t)s->index,
        .workers = (uint32_t)s->workers,
        .kind = (uint32_t)s->kind,
        .mode = (uint32_t)mode,
        .pull = (uint32_t)cfg->pull,
        .flags = (s->initialized ? FLAG_INITIALIZED : 0) | (s->adaptive ? FLAG_ADAPTIVE : 0) |
                 (s->delay != DCPS_DELAY_NONE ? FLAG_DELAY : 0),
        .version = s->version,
        .floats = s->floats,
        .payload_len = payload_size(s, format),
    };
}

/* --- the directory -------------------------------------------------------------- */

/* Parses a decimal number that starts at *p (at least one digit) and moves *p
 * past it. */
static bool number(const char **p, uint64_t *v)
{
    char *end;
    if (**p < '0' || **p > '9')
        return false;
    errno = 0;
    *v = strtoull(*p, &end, 10);
    if (errno)
        return false;
    *p = end;
    return true;
}

/* Whether name is "shard-<index>-<seq>-v<version>.ckpt" of this shard. */
static bool parse_name(const char *name, int index, uint64_t *seq, uint64_t *version)
{
    uint64_t i;
    const char *p = name;
    if (strncmp(p, "shard-", 6) != 0)
        return false;
    p += 6;
    if (!number(&p, &i) || i != (uint64_t)index || *p++ != '-' || !number(&p, seq))
        return false;
    if (strncmp(p, "-v", 2) != 0)
        return false;
    p += 2;
    return number(&p, version) && strcmp(p, ".ckpt") == 0;
}

/* Whether name is a temporary file of this shard ("shard-<index>-….ckpt.tmp"). */
static bool is_temp(const char *name, int index)
{
    char prefix[32];
    size_t n = strlen(name), t = strlen(".ckpt.tmp");
    int len = snprintf(prefix, sizeof prefix, "shard-%d-", index);
    return strncmp(name, prefix, (size_t)len) == 0 && n > t &&
           strcmp(name + n - t, ".ckpt.tmp") == 0;
}

static void free_entries(entry_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

/* Newest first: by seq, then version. */
static int newest_first(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? 1 : -1;
    return x->version < y->version ? 1 : x->version > y->version ? -1 : 0;
}

/* The checkpoints of shard `index` in dir, newest first, into *out (*n of
 * them; free with free_entries). With temps, also removes temporary files a
 * crash left. Returns 0, DCPS_E_IO or DCPS_E_NOMEM. */
static int list(const char *dir, int index, bool temps, entry_t **out, size_t *n, char *err,
                size_t errlen)
{
    entry_t *e = NULL;
    size_t count = 0, cap = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    *out = NULL;
    *n = 0;
    if (!d)
        return dcps_say(err, errlen, DCPS_E_IO, "cannot read checkpoint directory %s: %s", dir,
                        strerror(errno));
    while ((de = readdir(d)) != NULL) {
        uint64_t seq, version;
        if (temps && is_temp(de->d_name, index)) {
            if (unlinkat(dirfd(d), de->d_name, 0) != 0)
                DCPS_WARN("cannot remove %s/%s: %s", dir, de->d_name, strerror(errno));
            continue;
        }
        if (!parse_name(de->d_name, index, &seq, &version))
            continue;
        if (count == cap) {
            size_t c = cap ? 2 * cap : 16;
            entry_t *grown = realloc(e, c * sizeof *e);
            if (!grown)
                goto nomem;
            e = grown;
            cap = c;
        }
        e[count] = (entry_t){seq, version, strdup(de->d_name)};
        if (!e[count].name)
            goto nomem;
        count++;
    }
    closedir(d);
    if (count)
        qsort(e, count, sizeof *e, newest_first);
    *out = e;
    *n = count;
    return 0;

nomem:
    closedir(d);
    free_entries(e, count);
    return dcps_say(err, errlen, DCPS_E_NOMEM, "listing %s: out of memory", dir);
}

static int join(char *buf, size_t len, const char *dir, const char *name, const char *suffix)
{
    size_t n = (size_t)snprintf(buf, len, "%s/%s%s", dir, name, suffix);
    return n < len ? 0 : -1;
}

int dcps_checkpoint_prepare(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    char probe[DCPS_PATH_MAX + 64];
    if (!dir || !*dir)
        return dcps_say(err, errlen, DCPS_E_INVAL, "no checkpoint directory given");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dcps_say(err, errlen, DCPS_E_IO, "cannot create checkpoint directory %s: %s", dir,
                        strerror(errno));
    if (stat(dir, &st) != 0)
        return dcps_say(err, errlen, DCPS_E_IO, "checkpoint directory %s: %s", dir,
                        strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return dcps_say(err, errlen, DCPS_E_IO, "checkpoint directory %s is not a directory", dir);
    snprintf(probe, sizeof probe, "%s/.dcps-probe-%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return dcps_say(err, errlen, DCPS_E_IO, "checkpoint directory %s is not writable: %s", dir,
                        strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

/* --- writing -------------------------------------------------------------------- */

/* Writes n bytes and adds them to *crc. Returns 0 or -1 (errno set). */
static int write_all(int fd, const void *data, size_t n, uint32_t *crc)
{
    *crc = dcps_checkpoint_crc32c(*crc, data, n);
    return dcps_write_full(fd, data, n);
}

/* Writes the shard's floats in their order (dcps_shard_spans: w and the sync
 * sum move between buffers, so they are not one block) and adds them to *crc.
 * Returns 0 or -1 (errno set). */
static int write_floats(int fd, const dcps_shard_t *s, uint32_t *crc)
{
    dcps_span_t sp[DCPS_SHARD_SPANS];
    size_t k = dcps_shard_spans(s, sp);
    for (size_t i = 0; i < k; i++)
        if (write_all(fd, sp[i].p, sp[i].n * sizeof *sp[i].p, crc) != 0)
            return -1;
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Removes all but the newest `keep` of the n checkpoints in e (newest first),
 * and those of version `hold` (0: none), and drops the removed ones from e.
 * Returns how many e lists then. */
static size_t prune(const char *dir, entry_t *e, size_t n, size_t keep, uint64_t hold)
{
    size_t kept = keep < n ? keep : n;
    for (size_t i = kept; i < n; i++) {
        char path[DCPS_PATH_MAX + 256];
        if (hold && e[i].version == hold) {
            e[kept++] = e[i];
            continue;
        }
        if (join(path, sizeof path, dir, e[i].name, "") != 0)
            DCPS_WARN("cannot remove old checkpoint %s in %s: the path is too long", e[i].name,
                      dir);
        else if (unlink(path) != 0)
            DCPS_WARN("cannot remove old checkpoint %s: %s", path, strerror(errno));
        else
            DCPS_DEBUG("removed old checkpoint %s", path);
        free(e[i].name);
    }
    return kept;
}

uint64_t dcps_checkpoint_bytes(const dcps_shard_t *s)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    return HEADER_SIZE + (uint64_t)st.floats * sizeof(float) +
           tail_size(st.workers, DCPS_CHECKPOINT_FORMAT) + groups_bytes(s, DCPS_CHECKPOINT_FORMAT) +
           buffers_bytes(s, DCPS_CHECKPOINT_FORMAT) + parts_bytes(s, DCPS_CHECKPOINT_FORMAT) +
           sizeof(uint32_t);
}

/* Writes tmp, a new file: the header, the shard's floats, the tail and the
 * CRC-32C of them all, then fsyncs it. Returns 0, or DCPS_E_IO with err and
 * nothing of tmp left. */
static int write_tmp(const char *tmp, const header_t *h, const dcps_shard_t *s, const void *tail,
                     size_t tsize, char *err, size_t errlen)
{
    uint8_t head[HEADER_SIZE];
    uint32_t crc = 0;
    int rc, fd;
    put_header(head, h);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        return dcps_say(err, errlen, DCPS_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    const char *what = "write";
    if (write_all(fd, head, sizeof head, &crc) != 0 || write_floats(fd, s, &crc) != 0 ||
        write_all(fd, tail, tsize, &crc) != 0 ||
        write_all(fd, &crc, sizeof crc, &(uint32_t){0}) != 0 || (what = "fsync", fsync(fd)) != 0) {
        rc = dcps_say(err, errlen, DCPS_E_IO, "cannot %s %s: %s", what, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (close(fd) != 0) {
        rc = dcps_say(err, errlen, DCPS_E_IO, "cannot close %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return rc;
    }
    return 0;
}

/* Renames the written tmp to final (its path then goes to path, if not NULL)
 * and fsyncs dir. Returns 0, or DCPS_E_IO with err: tmp is removed if the
 * rename failed; if only the directory's fsync did, the file is complete and
 * in place, and only its name may not survive a power loss. */
static int publish(const char *dir, const char *tmp, const char *final, char *path, size_t pathlen,
                   char *err, size_t errlen)
{
    if (rename(tmp, final) != 0) {
        int rc = dcps_say(err, errlen, DCPS_E_IO, "cannot rename %s to %s: %s", tmp, final,
                          strerror(errno));
        unlink(tmp);
        return rc;
    }
    if (path)
        snprintf(path, pathlen, "%s", final);
    if (fsync_dir(dir) != 0)
        return dcps_say(err, errlen, DCPS_E_IO, "%s written, but fsync of directory %s failed: %s",
                        final, dir, strerror(errno));
    return 0;
}

int dcps_checkpoint_save(const char *dir, const dcps_config_t *cfg, const dcps_shard_t *s,
                         const dcps_consistency_t *cons, int keep, uint64_t hold, char *path,
                         size_t pathlen, char *err, size_t errlen)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    const size_t tsize = tail_size(st.workers, DCPS_CHECKPOINT_FORMAT);
    const size_t gbytes = groups_bytes(s, DCPS_CHECKPOINT_FORMAT);
    const size_t bbytes = buffers_bytes(s, DCPS_CHECKPOINT_FORMAT);
    const size_t pbytes = parts_bytes(s, DCPS_CHECKPOINT_FORMAT);
    char name[96], final[DCPS_PATH_MAX + 128], tmp[DCPS_PATH_MAX + 128];
    uint64_t *tail = NULL;
    entry_t *e;
    size_t n;
    header_t h;
    int rc;

    if (cons->workers != st.workers)
        return dcps_say(err, errlen, DCPS_E_INVAL, "consistency model of %d workers, shard of %d",
                        cons->workers, st.workers);
    if ((rc = list(dir, st.index, true, &e, &n, err, errlen)) != 0)
        return rc;
    /* Room first: with the new file there are to be at most `keep` of them, so
     * the oldest go before it is written, not after (a full disk would
     * otherwise never get them back). With keep = 1 the only one stays until
     * the new one is in place: a crash or a full disk must not leave none. */
    n = prune(dir, e, n, keep > 1 ? (size_t)keep - 1 : 1, hold);
    header_of(&h, cfg, &st, cons->mode, DCPS_CHECKPOINT_FORMAT);
    h.payload_len += gbytes + bbytes + pbytes;
    h.seq = n ? e[0].seq + 1 : 1;
    h.created = (uint64_t)time(NULL);
    snprintf(name, sizeof name, "shard-%d-%010" PRIu64 "-v%012" PRIu64 ".ckpt", st.index, h.seq,
             h.version);
    if (join(final, sizeof final, dir, name, "") != 0 ||
        join(tmp, sizeof tmp, dir, name, ".tmp") != 0) {
        rc = dcps_say(err, errlen, DCPS_E_INVAL, "checkpoint path in %s is too long", dir);
        goto out;
    }
    if (!(tail = malloc(tsize + gbytes + bbytes + pbytes))) {
        rc = dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", final);
        goto out;
    }
    dcps_shard_save(s, tail);
    dcps_consistency_save(cons, tail + shard_words(st.workers, DCPS_CHECKPOINT_FORMAT));
    tail[tsize / 8] = gbytes / 8 - 1;
    if (dcps_shard_groups(s))
        dcps_groups_save(dcps_shard_groups(s), tail + tsize / 8 + 1);
    tail[(tsize + gbytes) / 8] = bbytes / 8 - 1;
    dcps_buffers_save(dcps_shard_buffers(s), tail + (tsize + gbytes) / 8 + 1);
    tail[(tsize + gbytes + bbytes) / 8] = pbytes / 8 - 1;
    dcps_shard_parts_save(s, tail + (tsize + gbytes + bbytes) / 8 + 1);
    if ((rc = write_tmp(tmp, &h, s, tail, tsize + gbytes + bbytes + pbytes, err, errlen)) != 0 ||
        (rc = publish(dir, tmp, final, path, pathlen, err, errlen)) != 0)
        goto out;
    /* The new one is newer than all listed: keep it and the keep - 1 newest. */
    n = prune(dir, e, n, keep > 1 ? (size_t)keep - 1 : 0, hold);
out:
    free(tail);
    free_entries(e, n);
    return rc;
}

/* --- reading -------------------------------------------------------------------- */

/* Reads the shard's floats into place, in their order, and adds them to *crc.
 * Returns the bytes read (fewer at the end of the file), or -1. */
static ssize_t read_floats(int fd, dcps_shard_t *s, uint32_t *crc)
{
    dcps_span_t sp[DCPS_SHARD_SPANS];
    size_t k = dcps_shard_spans(s, sp), total = 0;
    for (size_t i = 0; i < k; i++) {
        size_t want = sp[i].n * sizeof *sp[i].p;
        ssize_t got = dcps_read_full(fd, sp[i].p, want);
        if (got < 0)
            return -1;
        *crc = dcps_checkpoint_crc32c(*crc, sp[i].p, (size_t)got);
        total += (size_t)got;
        if ((size_t)got < want)
            break;
    }
    return (ssize_t)total;
}

/* Zeroes the shard's floats (a checkpoint that was read into them is refused). */
static void zero_floats(dcps_shard_t *s)
{
    dcps_span_t sp[DCPS_SHARD_SPANS];
    size_t k = dcps_shard_spans(s, sp);
    for (size_t i = 0; i < k; i++)
        memset(sp[i].p, 0, sp[i].n * sizeof *sp[i].p);
}

static const char *delay_name(uint32_t flags)
{
    return dcps_config_delay_name(!(flags & FLAG_DELAY)      ? DCPS_DELAY_NONE
                                  : flags & FLAG_ADAPTIVE ? DCPS_DELAY_ADAPTIVE
                                                          : DCPS_DELAY_CONSTANT);
}

/* Why header h (checksum good) does not fit what this shard would write, in
 * why; false if it fits. */
static bool foreign(const header_t *h, const header_t *want, char *why, size_t n)
{
    if (h->job_id != want->job_id)
        snprintf(why, n, "job id %" PRIu64 ", this job is %" PRIu64, h->job_id, want->job_id);
    else if (h->index != want->index)
        snprintf(why, n, "shard %u, this is shard %u", h->index, want->index);
    else if (h->n_params != want->n_params || h->lo != want->lo || h->hi != want->hi)
        snprintf(why, n,
                 "range [%" PRIu64 ", %" PRIu64 ") of %" PRIu64 " parameters, this shard serves "
                 "[%" PRIu64 ", %" PRIu64 ") of %" PRIu64,
                 h->lo, h->hi, h->n_params, want->lo, want->hi, want->n_params);
    else if (h->workers != want->workers)
        snprintf(why, n, "%u workers, this job has %u", h->workers, want->workers);
    else if (h->kind != want->kind)
        snprintf(why, n, "optimizer %s, this job uses %s", dcps_config_optimizer_name((int)h->kind),
                 dcps_config_optimizer_name((int)want->kind));
    else if (h->mode != want->mode)
        snprintf(why, n, "mode %s, this job runs %s", dcps_config_mode_name((int)h->mode),
                 dcps_config_mode_name((int)want->mode));
    else if (h->pull != want->pull)
        snprintf(why, n, "pull %s, this job uses %s", dcps_config_pull_name((int)h->pull),
                 dcps_config_pull_name((int)want->pull));
    else if ((h->flags ^ want->flags) & (FLAG_ADAPTIVE | FLAG_DELAY))
        snprintf(why, n, "delay_compensation %s, this job has %s", delay_name(h->flags),
                 delay_name(want->flags));
    else if (h->floats != want->floats || h->payload_len != want->payload_len)
        snprintf(why, n,
                 "state of %" PRIu64 " floats in %" PRIu64 " bytes, this shard has %" PRIu64
                 " in %" PRIu64,
                 h->floats, h->payload_len, want->floats, want->payload_len);
    else
        return false;
    return true;
}

/* Reads the header of the open file fd and checks what it can alone: the
 * magic, its length, the format and its own CRC. Returns 0 with the header in
 * head and h and the file's size in *size, or 1 with the reason in why. */
static int read_header(int fd, uint8_t head[HEADER_SIZE], header_t *h, off_t *size, char *why,
                       size_t n)
{
    struct stat st;
    uint32_t crc, stored;
    ssize_t got = fstat(fd, &st) == 0 ? dcps_read_full(fd, head, HEADER_SIZE) : -1;
    if (got < 0)
        return dcps_say(why, n, 1, "cannot read: %s", strerror(errno));
    *size = st.st_size;
    if (memcmp(head, MAGIC, got < 8 ? (size_t)got : 8) != 0)
        return dcps_say(why, n, 1, "not a dcps checkpoint (bad magic)");
    if (got < HEADER_SIZE)
        return dcps_say(why, n, 1, "truncated: %zd of at least %d bytes (no complete header)", got,
                        HEADER_SIZE);
    get_header(head, h);
    if (h->format < FORMAT_NO_SESSIONS || h->format > DCPS_CHECKPOINT_FORMAT ||
        h->header_size != HEADER_SIZE)
        return dcps_say(why, n, 1,
                        "format %u with a header of %u bytes, this dcps reads formats %d to %d "
                        "(%d)",
                        h->format, h->header_size, FORMAT_NO_SESSIONS, DCPS_CHECKPOINT_FORMAT,
                        HEADER_SIZE);
    crc = dcps_checkpoint_crc32c(0, head, HEADER_CRC_AT);
    if ((stored = get32(head, HEADER_CRC_AT)) != crc)
        return dcps_say(why, n, 1, "header checksum mismatch (stored %08x, computed %08x)", stored,
                        crc);
    /* Before format 3 the rule and its delay compensation were one kind: an
     * sgd or momentum file had none, whatever its dc_adaptive flag said; the
     * floats were laid out as format 3 lays out the same job's. */
    if (h->format <= FORMAT_DCASGD) {
        if (h->kind == DCPS_OPT_DCASGD)
            h->kind = DCPS_OPT_SGD, h->flags |= FLAG_DELAY;
        else
            h->flags &= ~FLAG_ADAPTIVE;
    }
    return 0;
}

/* params = auto: an unsized shard takes its size from a file of its job and
 * shard (the header is checksummed, but checked as a HELLO's would be); then
 * the file must fit it like any other. Returns 0 (*sized if it was sized), 1
 * with why, or DCPS_E_NOMEM. */
static int size_from(const header_t *h, const dcps_config_t *cfg, dcps_shard_t *s, bool *sized,
                     char *why, size_t n)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    if (st.n_params || h->job_id != cfg->job_id || h->index != (uint32_t)st.index)
        return 0;
    int rc = dcps_shard_size_auto(s, cfg, h->n_params, "", why, n);
    if (rc == DCPS_E_SIZE)
        return 1;
    if (rc != 0)
        return DCPS_E_NOMEM;
    *sized = true;
    return 0;
}

/* Reads the payload after the header into the shard's floats (straight into
 * place: no second copy of a large shard) and into tail (tsize bytes), then the
 * stored CRC, adding all but that to *crc. Returns 0; 1 with why if the file
 * cannot be read or ends early. */
static int read_payload(int fd, dcps_shard_t *s, void *tail, size_t tsize, uint32_t *crc,
                        uint32_t *stored, char *why, size_t n)
{
    size_t fbytes = dcps_shard_stats(s).floats * sizeof(float);
    ssize_t got = read_floats(fd, s, crc);
    if (got == (ssize_t)fbytes) {
        got = dcps_read_full(fd, tail, tsize);
        if (got == (ssize_t)tsize) {
            *crc = dcps_checkpoint_crc32c(*crc, tail, tsize);
            got = dcps_read_full(fd, stored, sizeof *stored);
            got = got == (ssize_t)sizeof *stored ? 0 : got < 0 ? -1 : -2;
        } else {
            got = got < 0 ? -1 : -2;
        }
    } else {
        got = got < 0 ? -1 : -2;
    }
    if (got == -1)
        return dcps_say(why, n, 1, "cannot read: %s", strerror(errno));
    if (got == -2)
        return dcps_say(why, n, 1, "truncated while reading (the file changed?)");
    return 0;
}

/* Whether a file of `size` bytes and header h fits what this shard would
 * write: false with why if not. */
static bool fits(const header_t *h, off_t size, const dcps_config_t *cfg, const dcps_shard_t *s,
                 int mode, char *why, size_t n)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    header_t want;
    header_of(&want, cfg, &st, mode, h->format);
    if (h->format >= 3) { /* a group table and buffers of any size they may have, by words */
        const uint64_t base = want.payload_len + 8;
        want.payload_len = base;
        if (h->payload_len >= base &&
            h->payload_len - base <=
                groups_bytes_max(st.n) + 8 * (1 + dcps_buffers_words_max(st.workers)) +
                    8 * (1 + (uint64_t)st.workers * DCPS_PARTS_WORDS_MAX) &&
            (h->payload_len - base) % 8 == 0)
            want.payload_len = h->payload_len;
    }
    if (foreign(h, &want, why, n))
        return false;
    uint64_t expect = HEADER_SIZE + h->payload_len + TRAILER_SIZE;
    if ((uint64_t)size != expect) {
        snprintf(why, n,
                 (uint64_t)size < expect ? "truncated: %lld of %" PRIu64 " bytes"
                                         : "%lld bytes, %" PRIu64 " expected",
                 (long long)size, expect);
        return false;
    }
    return true;
}

/* The group table of a format 3 file (w words: their count, then them) into
 * s. Returns 0, 1 with why if they are no table for s, or DCPS_E_NOMEM. */
static int load_groups(dcps_shard_t *s, const uint64_t *w, size_t words, char *why, size_t n)
{
    size_t used = 0;
    int err;
    if (w[0] != words - 1)
        return dcps_say(why, n, 1, "its group table's length does not fit the file");
    if (w[0] == 0)
        return 0;
    dcps_groups_t *g = dcps_groups_load(w + 1, words - 1, dcps_shard_stats(s).n, &used, &err,
                                        why, n);
    if (!g)
        return err == DCPS_E_NOMEM ? err : 1;
    if (used != words - 1) {
        dcps_groups_destroy(&g);
        return dcps_say(why, n, 1, "its group table's length does not fit the file");
    }
    err = dcps_shard_set_groups(s, &g, why, n);
    return err == DCPS_E_NOMEM ? err : err ? 1 : 0;
}

/* The tables at the end of a format 3 file (`words` words): the groups, then
 * the buffers and the records of pushes in parts (each absent in a file
 * written before it was kept). Returns as load_groups. */
static int load_tables(dcps_shard_t *s, const uint64_t *w, size_t words, char *why, size_t n)
{
    if (w[0] >= words)
        return dcps_say(why, n, 1, "its group table's length does not fit the file");
    const size_t gwords = 1 + (size_t)w[0];
    int rc = load_groups(s, w, gwords, why, n);
    if (rc != 0 || gwords == words)
        return rc;
    w += gwords, words -= gwords;
    if (w[0] >= words)
        return dcps_say(why, n, 1, "its buffers' length does not fit the file");
    const size_t bwords = 1 + (size_t)w[0];
    if ((rc = dcps_buffers_load(dcps_shard_buffers(s), w + 1, bwords - 1, why, n)) != 0 ||
        bwords == words)
        return rc;
    w += bwords, words -= bwords;
    if (w[0] != words - 1)
        return dcps_say(why, n, 1, "its records of pushes in parts do not fit the file");
    return dcps_shard_parts_load(s, w + 1, words - 1, why, n);
}

/* Loads one file into s and c if it is usable. Returns 0; 1 if it is not, with
 * the reason in why (s's floats are then zero again, the rest unchanged, and
 * a shard it sized unsized again); or DCPS_E_NOMEM. */
static int load(const char *file, const dcps_config_t *cfg, dcps_shard_t *s, dcps_consistency_t *c,
                char *why, size_t n)
{
    uint8_t head[HEADER_SIZE];
    uint64_t *tail = NULL;
    header_t h = {0};
    off_t size = 0;
    uint32_t crc, stored;
    int rc = 1;
    bool touched = false, sized = false;

    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dcps_say(why, n, 1, "cannot open: %s", strerror(errno));
    if (read_header(fd, head, &h, &size, why, n) != 0 ||
        (rc = size_from(&h, cfg, s, &sized, why, n)) != 0 ||
        !fits(&h, size, cfg, s, c->mode, why, n)) {
        rc = rc ? rc : 1;
        goto out;
    }
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    size_t tsize = tail_size(st.workers, h.format);
    size_t gbytes = h.payload_len - payload_size(&st, h.format); /* fits checked it */
    tsize += gbytes;
    if (!(tail = malloc(tsize))) {
        rc = DCPS_E_NOMEM;
        goto out;
    }
    /* The floats are zeroed again if the checksum fails. */
    touched = true;
    crc = dcps_checkpoint_crc32c(0, head, sizeof head);
    if ((rc = read_payload(fd, s, tail, tsize, &crc, &stored, why, n)) != 0)
        goto out;
    if (stored != crc) {
        rc = dcps_say(why, n, 1, "checksum mismatch (stored %08x, computed %08x)", stored, crc);
        goto out;
    }
    if (gbytes && (rc = load_tables(s, tail + (tsize - gbytes) / 8, gbytes / 8, why, n)) != 0)
        goto out;
    dcps_shard_load(s, h.version, (h.flags & FLAG_INITIALIZED) != 0, tail, stride(h.format));
    dcps_consistency_load(c, tail + shard_words(h.workers, h.format));
    if (h.format == FORMAT_NO_SESSIONS)
        DCPS_NOTICE("%s is a checkpoint of format %d, which holds no sessions: every worker "
                    "says HELLO again, and a push retried across the restart is applied again",
                    file, FORMAT_NO_SESSIONS);
    touched = false;
out:
    if (touched)
        zero_floats(s);
    if (sized && rc != 0)
        dcps_shard_unsize(s);
    free(tail);
    close(fd);
    return rc;
}

int dcps_checkpoint_newest(const char *dir, int index, size_t *count, uint64_t *version,
                           char *err, size_t errlen)
{
    entry_t *e;
    size_t n;
    struct stat st;
    *count = 0;
    *version = 0;
    if (stat(dir, &st) != 0 && errno == ENOENT)
        return 0;
    int rc = list(dir, index, false, &e, &n, err, errlen);
    if (rc != 0)
        return rc;
    *count = n;
    *version = n ? e[0].version : 0;
    free_entries(e, n);
    return 0;
}

static int restore(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                   dcps_consistency_t *cons, bool any, uint64_t version, char *path,
                   size_t pathlen, char *err, size_t errlen);

int dcps_checkpoint_restore(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                            dcps_consistency_t *cons, char *path, size_t pathlen, char *err,
                            size_t errlen)
{
    return restore(dir, cfg, s, cons, true, 0, path, pathlen, err, errlen);
}

int dcps_checkpoint_restore_version(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                                    dcps_consistency_t *cons, uint64_t version, char *path,
                                    size_t pathlen, char *err, size_t errlen)
{
    return restore(dir, cfg, s, cons, false, version, path, pathlen, err, errlen);
}

/* Restores the newest usable checkpoint (of `version` only, unless any). */
static int restore(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                   dcps_consistency_t *cons, bool any, uint64_t version, char *path,
                   size_t pathlen, char *err, size_t errlen)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    char file[DCPS_PATH_MAX + 256], why[384], newest[384] = "";
    entry_t *e;
    size_t n;
    int rc;

    if (st.initialized || st.version != 0)
        return dcps_say(err, errlen, DCPS_E_STATE,
                        "shard %d already holds parameters (version %" PRIu64
                        "); restore only into a new one",
                        st.index, st.version);
    if (cons->workers != st.workers)
        return dcps_say(err, errlen, DCPS_E_INVAL, "consistency model of %d workers, shard of %d",
                        cons->workers, st.workers);
    if ((rc = list(dir, st.index, false, &e, &n, err, errlen)) != 0)
        return rc;
    if (!any) { /* only that version's: the others are not there */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (e[i].version == version)
                e[k++] = e[i];
            else
                free(e[i].name);
        }
        n = k;
    }
    rc = dcps_say(err, errlen, 0, "no checkpoint of shard %d in %s", st.index, dir);
    for (size_t i = 0; i < n; i++) {
        if (join(file, sizeof file, dir, e[i].name, "") != 0) {
            snprintf(file, sizeof file, "%s", e[i].name);
            snprintf(why, sizeof why, "path too long");
        } else {
            int r = load(file, cfg, s, cons, why, sizeof why);
            if (r == 0) {
                dcps_shard_restored(s);
                if (path)
                    snprintf(path, pathlen, "%s", file);
                rc = dcps_say(err, errlen, 1, "restored %s", file);
                break;
            }
            if (r == DCPS_E_NOMEM) {
                rc = dcps_say(err, errlen, r, "%s: out of memory", file);
                break;
            }
        }
        DCPS_WARN("checkpoint %s refused: %s", file, why);
        if (i == 0)
            snprintf(newest, sizeof newest, "%s", why);
        if (i + 1 == n)
            rc = dcps_say(
                err, errlen, DCPS_E_DATA,
                "none of the %zu checkpoints of shard %d in %s is usable; the newest, %s: %s", n,
                st.index, dir, e[0].name, newest);
    }
    free_entries(e, n);
    return rc;
}
