/* dcps — replays fuzz inputs through a harness without libFuzzer.
 *
 *   replay_NAME [FILE|DIR]...
 *
 * Built with the normal compiler around one harness (FUZZ_NAME: codec or
 * router), so that every `make check` runs every seed and every input that once
 * broke an invariant, also where clang is not installed. Each argument is a file
 * or a directory of files (not recursive; names starting with '.' and README are
 * left out). Without arguments it replays $DCPS_SRCDIR/tests/fuzz/corpus/NAME and
 * $DCPS_SRCDIR/tests/fuzz/regress/NAME (a directory that does not exist counts
 * as empty). A broken invariant aborts, naming the file on stderr first. Exit 0
 * when every input ran, 1 when an argument cannot be read. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

#ifndef FUZZ_NAME
#error "FUZZ_NAME (the harness: codec or router) must be defined"
#endif

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = ferror(f) || !buf;
    fclose(f);
    if (failed) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    /* An exact-size copy, so that AddressSanitizer (where the build has it)
     * sees a read past the input's end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every file of dir, in name order; returns the count or -1. */
static int run_dir(const char *dir, int missing_ok)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (missing_ok && errno == ENOENT)
            return 0;
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **more = realloc(names, cap * sizeof *names);
            if (!more)
                break;
            names = more;
        }
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(plen);
        struct stat st;
        if (path) {
            snprintf(path, plen, "%s/%s", dir, names[i]);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && run_file(path) == 0)
                count++;
            free(path);
        }
        free(names[i]);
    }
    free(names);
    return count;
}

static int run_arg(const char *path, int missing_ok)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (missing_ok && errno == ENOENT)
            return 0;
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode))
        return run_dir(path, missing_ok);
    return run_file(path) == 0 ? 1 : -1;
}

int main(int argc, char **argv)
{
    int total = 0, bad = 0;
    LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            int n = run_arg(argv[i], 0);
            bad |= n < 0;
            total += n > 0 ? n : 0;
        }
    } else {
        const char *src = getenv("DCPS_SRCDIR");
        const char *kinds[] = {"corpus", "regress"};
        char dir[4096];
        for (int i = 0; i < 2; i++) {
            snprintf(dir, sizeof dir, "%s/tests/fuzz/%s/%s", src ? src : ".", kinds[i], FUZZ_NAME);
            int n = run_arg(dir, i == 1);
            bad |= n < 0;
            total += n > 0 ? n : 0;
            printf("%s: %d inputs replayed through the %s harness\n", dir, n > 0 ? n : 0,
                   FUZZ_NAME);
        }
    }
    printf("%d inputs replayed, every invariant held\n", total);
    return bad ? 1 : 0;
}
