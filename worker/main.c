/* dcps-worker — one worker rank of a training job.
 *
 * dcps-worker --config FILE --rank R [--set section.key=value]... [--metrics F]
 * dcps-worker --config FILE --rank R [--set section.key=value]... -- COMMAND [ARG]...
 *
 * The first form trains the built-in MLP; the second checks the job and runs
 * COMMAND (a PyTorch script with dcps.torch, say) as the worker instead.
 *
 * Exit status: 0 after the `final:` line, 1 when training fails (the reason is
 * logged: a shard that refuses this worker's CURVE key, say), 2 for a bad job
 * file or option (nothing was started), a [security] key missing included; with
 * COMMAND, the command's own status, or 126/127 if it cannot be run. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "config.h"
#include "worker/trainer.h"

#define MAX_OVERRIDES 128

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dcps-worker --config FILE --rank R [options] [-- COMMAND [ARG]...]\n"
            "  -c, --config FILE        the job file (INI, see dcps.conf(5))\n"
            "  -r, --rank R             this worker's rank, 0 to [job] workers - 1 (under\n"
            "                           systemd, the instance: dcps-worker@3 is rank 3)\n"
            "      --set SECTION.KEY=V  override a key of the job file, checked as the file is;\n"
            "                           repeatable, a later --set of the same key wins\n"
            "      --metrics FILE       write one CSV row per progress line and per epoch\n"
            "                           (overrides [worker] metrics)\n"
            "      --compute-ms MS      emulate the computation: sleep MS ms a step and push a\n"
            "                           seeded synthetic gradient (= --set worker.compute_ms=MS);\n"
            "                           no data file is read: [data] train_limit examples (60000\n"
            "                           when 0) set the steps, and nothing is evaluated (nan)\n"
            "      --dump-config        print every key of the job file with its default, range\n"
            "                           and description, and exit\n"
            "  -V, --version            print the version and exit\n"
            "  -h, --help               print this summary of the options and exit\n"
            "  -- COMMAND [ARG]...      run COMMAND as this worker instead of the built-in MLP,\n"
            "                           with DCPS_JOB, DCPS_RANK, DCPS_WORKERS and DCPS_SET (the\n"
            "                           --set overrides, one a line) in its environment\n");
}

/* Runs command as worker `rank` of the job in config, in place of this
 * process (so that a service manager or srun signals the command itself). Its
 * environment says which job and rank, as dcps.torch reads them: DCPS_JOB (the
 * job file, absolute), DCPS_RANK, DCPS_WORKERS and DCPS_SET (the --set
 * overrides, one a line). Returns only on failure: 127 if there is no such
 * program, else 126, as a shell does. */
static int run_command(char **command, const char *config, long rank, int workers,
                       const char *const *overrides, size_t n_overrides)
{
    char path[PATH_MAX], num[32];
    if (!realpath(config, path)) {
        fprintf(stderr, "dcps-worker: %s: %s\n", config, strerror(errno));
        return 2;
    }
    size_t len = 1;
    for (size_t i = 0; i < n_overrides; i++)
        len += strlen(overrides[i]) + 1;
    char *set = malloc(len), *at = set;
    if (!set) {
        fprintf(stderr, "dcps-worker: out of memory\n");
        return 1;
    }
    *at = '\0';
    for (size_t i = 0; i < n_overrides; i++)
        at += sprintf(at, "%s\n", overrides[i]);
    snprintf(num, sizeof num, "%ld", rank);
    setenv("DCPS_JOB", path, 1);
    setenv("DCPS_RANK", num, 1);
    snprintf(num, sizeof num, "%d", workers);
    setenv("DCPS_WORKERS", num, 1);
    setenv("DCPS_SET", set, 1);
    free(set);
    fflush(stdout);
    execvp(command[0], command);
    int e = errno;
    fprintf(stderr, "dcps-worker: cannot run %s: %s\n", command[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}

int main(int argc, char **argv)
{
    enum { OPT_SET = 256, OPT_METRICS, OPT_DUMP, OPT_COMPUTE_MS };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},  {"rank", required_argument, NULL, 'r'},
        {"set", required_argument, NULL, OPT_SET}, {"metrics", required_argument, NULL, OPT_METRICS},
        {"dump-config", no_argument, NULL, OPT_DUMP}, {"version", no_argument, NULL, 'V'},
        {"compute-ms", required_argument, NULL, OPT_COMPUTE_MS},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *config = NULL, *metrics = NULL;
    const char *overrides[MAX_OVERRIDES];
    char compute_ms[64]; /* --compute-ms as an override, checked with the others */
    size_t n_overrides = 0;
    long rank = -1;
    char *end, err[1024], ident[32];
    int c;

    dcps_log_init("dcps-worker");
    while ((c = getopt_long(argc, argv, "c:r:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'r':
            errno = 0;
            rank = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || rank < 0 || rank > 1000000) {
                fprintf(stderr, "dcps-worker: --rank: \"%s\" is not a rank\n", optarg);
                return 2;
            }
            break;
        case OPT_SET:
        case OPT_COMPUTE_MS:
            if (n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, "dcps-worker: more than %d --set options\n", MAX_OVERRIDES);
                return 2;
            }
            if (c == OPT_COMPUTE_MS) {
                errno = 0;
                long ms = strtol(optarg, &end, 10);
                if (errno || *end || end == optarg || ms < 0 || ms > 600000) {
                    fprintf(stderr,
                            "dcps-worker: --compute-ms: \"%s\" is not a number of "
                            "milliseconds from 0 to 600000\n",
                            optarg);
                    return 2;
                }
                snprintf(compute_ms, sizeof compute_ms, "worker.compute_ms=%ld", ms);
                overrides[n_overrides++] = compute_ms;
            } else {
                overrides[n_overrides++] = optarg;
            }
            break;
        case OPT_METRICS:
            metrics = optarg;
            break;
        case OPT_DUMP:
            dcps_config_dump(stdout);
            return 0;
        case 'V':
            printf("dcps-worker %s\n", PACKAGE_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    /* "-- COMMAND [ARG]...": the rest is the worker's program. */
    char **command = NULL;
    if (optind < argc && optind > 1 && strcmp(argv[optind - 1], "--") == 0)
        command = argv + optind;
    else if (optind < argc) {
        fprintf(stderr, "dcps-worker: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (!config || rank < 0) {
        fprintf(stderr, "dcps-worker: --config and --rank are required\n");
        usage(stderr);
        return 2;
    }

    dcps_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        fprintf(stderr, "dcps-worker: out of memory\n");
        return 1;
    }
    if (dcps_config_load(cfg, config, overrides, n_overrides, err, sizeof err) != 0 ||
        dcps_config_supported(cfg, config, err, sizeof err) != 0 ||
        dcps_config_check_role(cfg, config, DCPS_ROLE_WORKER, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-worker: %s\n", err);
        free(cfg);
        return 2;
    }
    if (rank >= cfg->workers) {
        fprintf(stderr, "dcps-worker: --rank %ld: %s has [job] workers = %d (ranks 0 to %d)\n",
                rank, config, cfg->workers, cfg->workers - 1);
        free(cfg);
        return 2;
    }
    if (command) {
        int workers = cfg->workers;
        free(cfg);
        return run_command(command, config, rank, workers, overrides, n_overrides);
    }
    /* This program's model is the MLP of [model] layers; with params = auto the
     * shards learn its size from rank 0. Only emulated compute (no model) takes
     * another size. */
    uint64_t mlp = dcps_config_layers_params(cfg);
    if (cfg->params == DCPS_PARAMS_AUTO)
        cfg->n_params = mlp;
    if (cfg->n_params != mlp && cfg->compute_ms == 0) {
        fprintf(stderr,
                "dcps-worker: %s: [model] params = %" PRIu64 ", but the MLP of [model] layers "
                "has %" PRIu64 " parameters: use params = layers or auto, or --compute-ms to "
                "emulate a model of that size\n",
                config, cfg->n_params, mlp);
        free(cfg);
        return 2;
    }
    snprintf(ident, sizeof ident, "dcps-worker[%ld]", rank);
    dcps_log_init(ident);
    dcps_log_set_level(dcps_log_level_parse(cfg->log_level));

    int rc = dcps_trainer_run(cfg, (int)rank, metrics ? metrics : cfg->metrics, stdout, err,
                              sizeof err);
    if (rc != 0)
        DCPS_ERR("%s", err);
    free(cfg);
    return rc == 0 ? 0 : 1;
}
