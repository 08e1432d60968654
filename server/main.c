/* dcps-server — the daemon for one shard.
 *
 * dcps-server --config FILE --shard S [--set section.key=value]... [--endpoint-file F]
 *             [--leader ENDPOINT]
 * dcps-server --keygen PATH
 *
 * Reads the job file, binds shard S's endpoint with a ROUTER socket, and serves
 * it on a libuv loop until SIGTERM or SIGINT, after which it logs a summary and
 * exits 0. Under systemd it sends READY=1 once bound. A bad job file or option
 * stops it before it binds anything, with exit status 2; a [server] metrics_port
 * that cannot be bound (in use, say) with exit status 1, before the ZeroMQ bind.
 *
 * With [security] curve = true the socket is a CURVE server with the secret key
 * of server_secret_key_file, and admits only the workers whose public keys are
 * in worker_keys_dir, each for the ranks its file's name gives (server/auth.h).
 * A key file or directory it cannot use
 * stops it before it binds anything, with status 1. --keygen writes a new key
 * pair (common/keys.h) and prints its public key.
 *
 * With [server] checkpoint_dir (server/checkpoint.h): a directory it cannot
 * create or write stops it before it binds, with status 1; once bound, before
 * READY=1, it restores the newest usable checkpoint of its shard, and stops
 * with status 1 if the directory holds checkpoints of the shard but none is
 * usable (starting fresh would prune them later). It writes a checkpoint every
 * checkpoint_every seconds if the version moved, and a last one on SIGTERM or
 * SIGINT before it stops; if that last one fails it exits 1.
 *
 * With [model] params = auto the shard starts unsized and learns the model's
 * size from rank 0's HELLO (server/router.c), or from the checkpoint it
 * restores; until then its log, STATUS= line and /metrics say that it waits
 * for rank 0.
 *
 * SIGHUP reads the job file again (server/daemon.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/keys.h"
#include "common/log.h"
#include "config.h"
#include "server/daemon.h"

#define MAX_OVERRIDES 128

typedef struct {
    dcps_daemon_options_t d;
    const char *keygen; /* --keygen PATH: make a key pair instead of serving */
    const char *overrides[MAX_OVERRIDES];
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dcps-server --config FILE --shard S [options]\n"
            "       dcps-server --keygen PATH\n"
            "  -c, --config FILE        the job file (INI, see dcps.conf(5)); the shards and\n"
            "                           workers of one job read the same file\n"
            "  -s, --shard S            the shard index: the position, from 0, of this shard's\n"
            "                           endpoint in [servers] shards (under systemd, the\n"
            "                           instance: dcps-server@0 serves shard 0)\n"
            "      --set SECTION.KEY=V  override a key of the job file, checked as the file is;\n"
            "                           repeatable, a later --set of the same key wins\n"
            "      --endpoint-file F    once serving, write the endpoint actually bound to F\n"
            "                           (useful with port '*'), through a temporary file and a\n"
            "                           rename\n"
            "      --leader ENDPOINT    where shard 0 listens, for the other shards of a sync\n"
            "                           job (they agree each round with it): when [servers]\n"
            "                           shards names it with port '*' (default: its entry)\n"
            "      --dump-config        print every key of the job file with its default, range\n"
            "                           and description, as a valid job file, and exit\n"
            "      --keygen PATH        write a new CURVE key pair and exit: the secret key to\n"
            "                           PATH (mode 0600), the public key to PATH.pub (0644) and\n"
            "                           standard output; an existing file is never replaced\n"
            "                           (exit 1, nothing written)\n"
            "  -V, --version            print the version and exit\n"
            "  -h, --help               print this summary of the options and exit\n");
}

/* The options together: --keygen alone, else --config and --shard. Returns 0,
 * or 2 after printing why. */
static int check_args(const options_t *o)
{
    if (o->keygen && (o->d.config || o->d.shard >= 0 || o->d.n_overrides || o->d.endpoint_file ||
                      o->d.leader)) {
        fprintf(stderr, "dcps-server: --keygen takes no other option\n");
        return 2;
    }
    if (!o->keygen && (!o->d.config || o->d.shard < 0)) {
        fprintf(stderr, "dcps-server: --config and --shard are required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Returns 0, or 2 after printing why; -1 for a normal early exit (help). */
static int parse_args(int argc, char **argv, options_t *o)
{
    enum { OPT_SET = 256, OPT_ENDPOINT_FILE, OPT_LEADER, OPT_DUMP, OPT_KEYGEN };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"shard", required_argument, NULL, 's'},
        {"set", required_argument, NULL, OPT_SET},
        {"endpoint-file", required_argument, NULL, OPT_ENDPOINT_FILE},
        {"leader", required_argument, NULL, OPT_LEADER},
        {"dump-config", no_argument, NULL, OPT_DUMP},
        {"keygen", required_argument, NULL, OPT_KEYGEN},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    char *end;

    memset(o, 0, sizeof *o);
    o->d.shard = -1;
    o->d.overrides = o->overrides;
    while ((c = getopt_long(argc, argv, "c:s:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->d.config = optarg;
            break;
        case 's':
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v >= DCPS_MAX_SHARDS) {
                fprintf(stderr, "dcps-server: --shard: \"%s\" is not a shard index (0 to %d)\n",
                        optarg, DCPS_MAX_SHARDS - 1);
                return 2;
            }
            o->d.shard = (int)v;
            break;
        case OPT_SET:
            if (o->d.n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, "dcps-server: more than %d --set options\n", MAX_OVERRIDES);
                return 2;
            }
            o->overrides[o->d.n_overrides++] = optarg;
            break;
        case OPT_ENDPOINT_FILE:
            o->d.endpoint_file = optarg;
            break;
        case OPT_LEADER:
            o->d.leader = optarg;
            break;
        case OPT_DUMP:
            dcps_config_dump(stdout);
            return -1;
        case OPT_KEYGEN:
            o->keygen = optarg;
            break;
        case 'V':
            printf("dcps-server %s\n", PACKAGE_VERSION);
            return -1;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dcps-server: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    return check_args(o);
}

/* --keygen PATH: a new key pair in PATH and PATH.pub; the public key on stdout.
 * Returns the exit status. */
static int keygen(const char *path)
{
    char pub[DCPS_KEY_Z85 + 1], err[2 * DCPS_PATH_MAX];
    if (dcps_key_generate(path, pub, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-server: --keygen: %s\n", err);
        return 1;
    }
    printf("%s\n", pub);
    fprintf(stderr, "dcps-server: secret key in %s (mode 0600), public key in %s.pub\n", path,
            path);
    return 0;
}

int main(int argc, char **argv)
{
    options_t opt;
    int status;

    dcps_log_init("dcps-server");
    if ((status = parse_args(argc, argv, &opt)) != 0)
        return status < 0 ? 0 : status;
    if (opt.keygen)
        return keygen(opt.keygen);
    dcps_daemon_t *d = dcps_daemon_new(&opt.d, &status);
    if (!d)
        return status;
    status = dcps_daemon_run(d);
    dcps_daemon_destroy(&d);
    return status;
}
