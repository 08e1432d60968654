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
#include <stdbool.h>
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

/* What the command line asks for. */
typedef struct {
    const char *config, *metrics;
    const char *overrides[MAX_OVERRIDES];
    char compute_ms[64]; /* --compute-ms as an override, checked with the others */
    size_t n_overrides;
    long rank;
    char **command; /* after "--": the program to run as the worker; NULL: the MLP */
} options_t;

/* --set V, or with compute_ms --compute-ms MS as the override
 * worker.compute_ms=MS. Returns 0, or 2 after saying what is wrong. */
static int add_override(options_t *o, bool compute_ms, const char *arg)
{
    char *end;
    if (o->n_overrides == MAX_OVERRIDES) {
        fprintf(stderr, "dcps-worker: more than %d --set options\n", MAX_OVERRIDES);
        return 2;
    }
    if (!compute_ms) {
        o->overrides[o->n_overrides++] = arg;
        return 0;
    }
    errno = 0;
    long ms = strtol(arg, &end, 10);
    if (errno || *end || end == arg || ms < 0 || ms > 600000) {
        fprintf(stderr,
                "dcps-worker: --compute-ms: \"%s\" is not a number of "
                "milliseconds from 0 to 600000\n",
                arg);
        return 2;
    }
    snprintf(o->compute_ms, sizeof o->compute_ms, "worker.compute_ms=%ld", ms);
    o->overrides[o->n_overrides++] = o->compute_ms;
    return 0;
}

/* Reads the command line into o. Returns -1 to go on, or the exit status:
 * 0 after --help, --version or --dump-config, 2 for a bad option (said). */
static int parse_options(int argc, char **argv, options_t *o)
{
    enum { OPT_SET = 256, OPT_METRICS, OPT_DUMP, OPT_COMPUTE_MS };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},  {"rank", required_argument, NULL, 'r'},
        {"set", required_argument, NULL, OPT_SET}, {"metrics", required_argument, NULL, OPT_METRICS},
        {"dump-config", no_argument, NULL, OPT_DUMP}, {"version", no_argument, NULL, 'V'},
        {"compute-ms", required_argument, NULL, OPT_COMPUTE_MS},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    char *end;
    int c;

    *o = (options_t){.rank = -1};
    while ((c = getopt_long(argc, argv, "c:r:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'r':
            errno = 0;
            o->rank = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || o->rank < 0 || o->rank > 1000000) {
                fprintf(stderr, "dcps-worker: --rank: \"%s\" is not a rank\n", optarg);
                return 2;
            }
            break;
        case OPT_SET:
        case OPT_COMPUTE_MS:
            if (add_override(o, c == OPT_COMPUTE_MS, optarg) != 0)
                return 2;
            break;
        case OPT_METRICS:
            o->metrics = optarg;
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
    if (optind < argc && optind > 1 && strcmp(argv[optind - 1], "--") == 0)
        o->command = argv + optind;
    else if (optind < argc) {
        fprintf(stderr, "dcps-worker: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (!o->config || o->rank < 0) {
        fprintf(stderr, "dcps-worker: --config and --rank are required\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* Loads and checks the job of o into cfg, for the built-in MLP unless o has a
 * command: the file and its overrides, the role, the rank against [job]
 * workers, and the MLP's size against [model] params. Returns -1 to go on, or
 * 2 after saying what is wrong. */
static int load_job(const options_t *o, dcps_config_t *cfg)
{
    char err[1024];
    if (dcps_config_load(cfg, o->config, o->overrides, o->n_overrides, err, sizeof err) != 0 ||
        dcps_config_supported(cfg, o->config, err, sizeof err) != 0 ||
        dcps_config_check_role(cfg, o->config, DCPS_ROLE_WORKER, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-worker: %s\n", err);
        return 2;
    }
    if (o->rank >= cfg->workers) {
        fprintf(stderr, "dcps-worker: --rank %ld: %s has [job] workers = %d (ranks 0 to %d)\n",
                o->rank, o->config, cfg->workers, cfg->workers - 1);
        return 2;
    }
    if (o->command)
        return -1;
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
                o->config, cfg->n_params, mlp);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    options_t o;
    char err[1024], ident[32];

    dcps_log_init("dcps-worker");
    int status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    dcps_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        fprintf(stderr, "dcps-worker: out of memory\n");
        return 1;
    }
    if ((status = load_job(&o, cfg)) >= 0) {
        free(cfg);
        return status;
    }
    if (o.command) {
        int workers = cfg->workers;
        free(cfg);
        return run_command(o.command, o.config, o.rank, workers, o.overrides, o.n_overrides);
    }
    snprintf(ident, sizeof ident, "dcps-worker[%ld]", o.rank);
    dcps_log_init(ident);
    dcps_log_set_level(dcps_log_level_parse(cfg->log_level));

    int rc = dcps_trainer_run(cfg, (int)o.rank, o.metrics ? o.metrics : cfg->metrics, stdout, err,
                              sizeof err);
    if (rc != 0)
        DCPS_ERR("%s", err);
    free(cfg);
    return rc == 0 ? 0 : 1;
}
