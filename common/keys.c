/* dcps — CURVE keys and the files that hold them; see keys.h.
 *
 * Secrets pass through stack buffers here; each is wiped (explicit_bzero, which
 * the compiler may not drop) before the function returns. */
#include "common/keys.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/error.h"
#include "common/io.h"
#include "common/log.h"

/* Z85's alphabet (RFC 32), index = digit value. */
static const char z85_chars[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/* More than any key file holds: a larger file is refused without reading on. */
#define FILE_MAX 128

int dcps_keys_available(void)
{
    return zmq_has("curve") ? 1 : 0;
}

static bool is_z85(char c)
{
    return c && strchr(z85_chars, c);
}

int dcps_key_parse(const char *text, size_t len, uint8_t *key, char *why, size_t n)
{
    char z[DCPS_KEY_Z85 + 1];
    uint8_t out[DCPS_KEY_BYTES];
    if (len != DCPS_KEY_Z85)
        return dcps_say(why, n, DCPS_E_DATA, "is %zu characters; a Z85 key has %d", len,
                        DCPS_KEY_Z85);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (is_z85(text[i]))
            continue;
        if (isprint(c))
            return dcps_say(why, n, DCPS_E_DATA, "'%c' is not a Z85 character", c);
        return dcps_say(why, n, DCPS_E_DATA, "byte 0x%02x is not a Z85 character", c);
    }
    memcpy(z, text, len);
    z[len] = '\0';
    /* Every character is a digit, but 5 digits may still exceed 32 bits. */
    int rc = zmq_z85_decode(out, z) ? 0 : DCPS_E_DATA;
    if (rc != 0)
        dcps_say(why, n, rc,
                 "is not a Z85 key: a group of 5 characters is worth more than 32 bits");
    else if (key)
        memcpy(key, out, sizeof out);
    explicit_bzero(z, sizeof z);
    explicit_bzero(out, sizeof out);
    return rc;
}

void dcps_key_text(const uint8_t *key, char *text)
{
    zmq_z85_encode(text, key, DCPS_KEY_BYTES);
}

/* The checks of a key file's text buf[0, len): one key, then at most "\n". */
static int check_text(const char *path, const char *buf, size_t len, uint8_t *key, char *err,
                      size_t errlen)
{
    char why[128];
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len == 0)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: is empty; a key file holds one Z85 key of %d characters", path,
                        DCPS_KEY_Z85);
    size_t key_chars = 0;
    while (key_chars < len && is_z85(buf[key_chars]))
        key_chars++;
    if (key_chars >= DCPS_KEY_Z85 && len > DCPS_KEY_Z85)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: trailing data after the %d-character key (%zu bytes); only a newline "
                        "may follow it",
                        path, DCPS_KEY_Z85, len - DCPS_KEY_Z85);
    if (dcps_key_parse(buf, len, key, why, sizeof why) != 0)
        return dcps_say(err, errlen, DCPS_E_DATA, "%s: %s", path, why);
    return 0;
}

int dcps_key_read(const char *path, bool secret, uint8_t *key, char *err, size_t errlen)
{
    char buf[FILE_MAX + 1];
    struct stat st;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return dcps_say(err, errlen, DCPS_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = dcps_say(err, errlen, DCPS_E_IO, "%s: not a regular file", path);
        goto out;
    }
    /* Refused before it is read: a key others could read may be theirs too. */
    if (secret && (st.st_mode & 077)) {
        rc = dcps_say(err, errlen, DCPS_E_IO,
                      "%s: permissions %04o are too open for a secret key: group and others must "
                      "have no access (chmod 600 %s)",
                      path, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    ssize_t got = dcps_read_full(fd, buf, sizeof buf);
    if (got < 0)
        rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot read: %s", path, strerror(errno));
    else if (got > FILE_MAX)
        rc = dcps_say(err, errlen, DCPS_E_DATA,
                      "%s: more than %d bytes; a key file holds one Z85 key of %d characters", path,
                      FILE_MAX, DCPS_KEY_Z85);
    else
        rc = check_text(path, buf, (size_t)got, key, err, errlen);
    explicit_bzero(buf, sizeof buf);
out:
    close(fd);
    return rc;
}

int dcps_key_public(const uint8_t *secret, uint8_t *pub)
{
    char sz[DCPS_KEY_Z85 + 1], pz[DCPS_KEY_Z85 + 1];
    dcps_key_text(secret, sz);
    int rc = zmq_curve_public(pz, sz) == 0 ? 0 : DCPS_E_ZMQ;
    if (rc == 0)
        zmq_z85_decode(pub, pz);
    explicit_bzero(sz, sizeof sz);
    return rc;
}

/* Writes "text\n" to fd with the given mode and syncs it; -1 with errno. */
static int write_key(int fd, const char *text, mode_t mode)
{
    char line[DCPS_KEY_Z85 + 2];
    snprintf(line, sizeof line, "%s\n", text);
    int rc = dcps_write_full(fd, line, strlen(line));
    explicit_bzero(line, sizeof line);
    /* The umask may have taken bits away; the modes are part of the contract. */
    if (rc == 0 && (fchmod(fd, mode) != 0 || fsync(fd) != 0))
        rc = -1;
    return rc;
}

/* Creates path for writing; refuses an existing file. */
static int create(const char *path, mode_t mode, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
    if (fd < 0 && errno == EEXIST)
        dcps_say(err, errlen, DCPS_E_IO, "%s: exists already; not replaced", path);
    else if (fd < 0)
        dcps_say(err, errlen, DCPS_E_IO, "%s: cannot create: %s", path, strerror(errno));
    return fd;
}

int dcps_key_generate(const char *path, char *pub, char *err, size_t errlen)
{
    char pub_path[4096], sz[DCPS_KEY_Z85 + 1], pz[DCPS_KEY_Z85 + 1];
    int rc = DCPS_E_IO, sfd, pfd;
    if ((size_t)snprintf(pub_path, sizeof pub_path, "%s.pub", path) >= sizeof pub_path)
        return dcps_say(err, errlen, DCPS_E_INVAL, "%s: path too long", path);
    if (zmq_curve_keypair(pz, sz) != 0)
        return dcps_say(err, errlen, DCPS_E_ZMQ, "cannot make a key pair: %s%s",
                        zmq_strerror(errno),
                        dcps_keys_available() ? "" : " (this libzmq was built without CURVE)");
    sfd = create(path, 0600, err, errlen);
    if (sfd < 0)
        goto fail_secret;
    pfd = create(pub_path, 0644, err, errlen);
    if (pfd < 0)
        goto fail_public;
    if (write_key(sfd, sz, 0600) != 0)
        dcps_say(err, errlen, DCPS_E_IO, "%s: cannot write: %s", path, strerror(errno));
    else if (write_key(pfd, pz, 0644) != 0)
        dcps_say(err, errlen, DCPS_E_IO, "%s: cannot write: %s", pub_path, strerror(errno));
    else
        rc = 0;
    if (close(pfd) != 0 && rc == 0)
        rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot write: %s", pub_path, strerror(errno));
    if (rc != 0)
        unlink(pub_path);
fail_public:
    if (close(sfd) != 0 && rc == 0)
        rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot write: %s", path, strerror(errno));
    if (rc != 0)
        unlink(path);
fail_secret:
    if (rc == 0)
        memcpy(pub, pz, sizeof pz);
    explicit_bzero(sz, sizeof sz);
    return rc;
}

/* --- the workers' public keys -------------------------------------------------------- */

/* Ranks lo to hi, both included. */
typedef struct {
    uint32_t lo, hi;
} span_t;

struct entry {
    uint8_t key[DCPS_KEY_BYTES];
    char *name;
    span_t *ranks; /* the ranks the key may speak for, from its name */
    size_t n_ranks;
};

struct dcps_keyset {
    struct entry *e;
    size_t n, cap;
};

static bool is_pub(const char *name)
{
    size_t len = strlen(name);
    return name[0] != '.' && len > 4 && strcmp(name + len - 4, ".pub") == 0;
}

/* Parses a rank at *p (decimal digits, at most 2^32 − 1) and moves *p past it. */
static bool rank_at(const char **p, uint32_t *v)
{
    uint64_t x = 0;
    const char *q = *p;
    if (*q < '0' || *q > '9')
        return false;
    for (; *q >= '0' && *q <= '9'; q++)
        if ((x = x * 10 + (uint64_t)(*q - '0')) > UINT32_MAX)
            return false;
    *v = (uint32_t)x;
    *p = q;
    return true;
}

/* Parses the ranks of a worker key's file name, NAME@RANKS.pub (see keys.h),
 * into e->ranks; workers > 0 refuses ranks of workers and above. Returns 0 or a
 * code with a sentence naming path. */
static int parse_ranks(struct entry *e, const char *path, int workers, char *err, size_t errlen)
{
    size_t len = strlen(e->name) - 4; /* without ".pub" */
    const char *at = memrchr(e->name, '@', len);
    if (!at || at == e->name)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: the name does not say which ranks this key may speak for: rename "
                        "it %.*s@RANKS.pub, for example %.*s@0-3.pub (ranks 0 to 3), "
                        "%.*s@0,2,5.pub or %.*s@all.pub (any rank)",
                        path, (int)len, e->name, (int)len, e->name, (int)len, e->name, (int)len,
                        e->name);
    const char *p = at + 1, *end = e->name + len;
    int ranks_len = (int)(end - p);
    if (ranks_len == 3 && strncmp(p, "all", 3) == 0) {
        if (!(e->ranks = malloc(sizeof *e->ranks)))
            return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", path);
        e->ranks[0] = (span_t){0, UINT32_MAX};
        e->n_ranks = 1;
        return 0;
    }
    size_t items = 1;
    for (const char *q = p; q < end; q++)
        items += *q == ',';
    if (!(e->ranks = calloc(items, sizeof *e->ranks)))
        return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < items; i++) {
        span_t *r = &e->ranks[i];
        bool ok = rank_at(&p, &r->lo);
        r->hi = r->lo;
        if (ok && *p == '-') {
            p++;
            ok = rank_at(&p, &r->hi);
        }
        if (!ok || (p != end && *p != ','))
            return dcps_say(err, errlen, DCPS_E_DATA,
                            "%s: '%.*s' is not a list of ranks: after the last '@' comes all, or "
                            "ranks and ranges of ranks separated by commas, such as 0-3,5",
                            path, ranks_len, at + 1);
        if (r->hi < r->lo)
            return dcps_say(err, errlen, DCPS_E_DATA,
                            "%s: the range %u-%u of its ranks runs backwards (write %u-%u)", path,
                            r->lo, r->hi, r->hi, r->lo);
        if (workers > 0 && r->hi >= (uint32_t)workers)
            return dcps_say(err, errlen, DCPS_E_DATA,
                            "%s: rank %u is outside the job, whose %d workers are ranks 0 to %d",
                            path, r->hi, workers, workers - 1);
        p++; /* past ',' (or end) */
    }
    e->n_ranks = items;
    return 0;
}

/* Adds the key file dir/name to set. Returns 0 or a code with err. */
static int add(dcps_keyset_t *set, const char *dir, const char *name, int workers, char *err,
               size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return dcps_say(err, errlen, DCPS_E_INVAL, "%s/%s: path too long", dir, name);
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        struct entry *e = realloc(set->e, cap * sizeof *e);
        if (!e)
            return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", path);
        set->e = e;
        set->cap = cap;
    }
    struct entry *e = &set->e[set->n];
    *e = (struct entry){.name = NULL};
    int rc = dcps_key_read(path, false, e->key, err, errlen);
    if (rc != 0)
        return rc;
    const char *same = dcps_keyset_find(set, e->key);
    if (same)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: holds the same key as %s; give each key one file, whose name lists "
                        "all the ranks it may speak for",
                        path, same);
    if (!(e->name = strdup(name)))
        return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", path);
    set->n++; /* from here on the set owns e: destroy frees it on failure */
    return parse_ranks(e, path, workers, err, errlen);
}

dcps_keyset_t *dcps_keyset_load(const char *dir, int workers, int *rc, char *err, size_t errlen)
{
    dcps_keyset_t *set = calloc(1, sizeof *set);
    if (!set) {
        *rc = dcps_say(err, errlen, DCPS_E_NOMEM, "%s: out of memory", dir);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        *rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot open the directory: %s", dir,
                       strerror(errno));
        goto fail;
    }
    *rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                *rc = dcps_say(err, errlen, DCPS_E_IO, "%s: cannot read the directory: %s", dir,
                               strerror(errno));
            break;
        }
        if (is_pub(de->d_name) && (*rc = add(set, dir, de->d_name, workers, err, errlen)) != 0)
            break;
    }
    closedir(d);
    if (*rc == 0 && set->n == 0)
        *rc = dcps_say(err, errlen, DCPS_E_DATA,
                       "%s: no *.pub file, so no worker could connect: put each worker's public "
                       "key there as NAME@RANKS.pub (dcps-server --keygen writes one)",
                       dir);
    if (*rc == 0)
        return set;
fail:
    dcps_keyset_destroy(&set);
    return NULL;
}

size_t dcps_keyset_count(const dcps_keyset_t *set)
{
    return set->n;
}

const char *dcps_keyset_find(const dcps_keyset_t *set, const uint8_t *key)
{
    for (size_t i = 0; i < set->n; i++)
        if (memcmp(set->e[i].key, key, DCPS_KEY_BYTES) == 0)
            return set->e[i].name;
    return NULL;
}

const uint8_t *dcps_keyset_key(const dcps_keyset_t *set, size_t i)
{
    return set->e[i].key;
}

int dcps_keyset_admits(const dcps_keyset_t *set, const uint8_t *key, uint32_t rank)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct entry *e = &set->e[i];
        if (memcmp(e->key, key, DCPS_KEY_BYTES) != 0)
            continue;
        for (size_t j = 0; j < e->n_ranks; j++)
            if (rank >= e->ranks[j].lo && rank <= e->ranks[j].hi)
                return 1;
        return 0;
    }
    return -1;
}

void dcps_keyset_destroy(dcps_keyset_t **setp)
{
    dcps_keyset_t *set = *setp;
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++) {
        free(set->e[i].name);
        free(set->e[i].ranks);
    }
    free(set->e);
    free(set);
    *setp = NULL;
}
