/* Tests for common/config: every key's default, every way a job file or a
 * --set override can be wrong (each message pinned exactly: file, line, section,
 * key, reason), the checks between keys, and that write and dump give job files
 * that load back. */
#include "common/config.h"
#include "common/error.h"
#include "common/keys.h"
#include "tests/check_run.h"
#include "tests/scratch.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dcps_scratch_t scratch; /* this test's directory (tests/scratch.h) */
static const char *dir;        /* its path */
static char path[512];         /* dir/job.ini, the file every test writes */
static char err[1024];
static dcps_config_t cfg;

static void put(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Loads text as the job file (NULL: no file) with n overrides. */
static int load(const char *text, size_t n, const char *const *ov)
{
    if (text)
        put(path, text);
    return dcps_config_load(&cfg, text ? path : NULL, ov, n, err, sizeof err);
}

/* The load fails with exactly "<path><suffix>". */
static void expect_file_error(const char *text, const char *suffix)
{
    char want[1024];
    snprintf(want, sizeof want, "%s%s", path, suffix);
    ck_assert_int_eq(load(text, 0, NULL), DCPS_E_CONFIG);
    ck_assert_str_eq(err, want);
}

/* Defaults plus one override fail with exactly msg. */
static void expect_set_error(const char *override, const char *msg)
{
    const char *ov[] = {"job.workers=3", override};
    ck_assert_int_eq(load(NULL, 2, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, msg);
}

static void expect_ok(const char *text)
{
    int rc = load(text, 0, NULL);
    ck_assert_msg(rc == 0, "load failed: %s", err);
}

START_TEST(defaults_are_the_documented_values)
{
    dcps_config_defaults(&cfg);
    ck_assert_str_eq(cfg.job_name, "dcps");
    ck_assert_uint_eq(cfg.job_id, 0);
    ck_assert_int_eq(cfg.workers, 2);
    ck_assert_int_eq(cfg.mode, DCPS_MODE_ASYNC);
    ck_assert_int_eq(cfg.staleness, 4);
    ck_assert_uint_eq(cfg.seed, 42);
    ck_assert_str_eq(cfg.log_level, "info");
    ck_assert_int_eq(cfg.n_shards, 2);
    ck_assert_str_eq(cfg.shards[0], "tcp://127.0.0.1:17001");
    ck_assert_str_eq(cfg.shards[1], "tcp://127.0.0.1:17002");
    ck_assert_int_eq(cfg.n_layers, 4);
    ck_assert_int_eq(cfg.layers[0], 784);
    ck_assert_int_eq(cfg.layers[1], 256);
    ck_assert_int_eq(cfg.layers[2], 128);
    ck_assert_int_eq(cfg.layers[3], 10);
    ck_assert_uint_eq(cfg.n_params, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    ck_assert_str_eq(cfg.train_images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    ck_assert_str_eq(cfg.train_labels, "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
    ck_assert_str_eq(cfg.test_images, "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
    ck_assert_str_eq(cfg.test_labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    ck_assert_int_eq(cfg.batch_size, 64);
    ck_assert_int_eq(cfg.epochs, 3);
    ck_assert_int_eq(cfg.train_limit, 0);
    ck_assert_int_eq(cfg.opt_kind, DCPS_OPT_SGD);
    ck_assert_double_eq(cfg.lr, 0.05);
    ck_assert_double_eq(cfg.momentum, 0.9);
    ck_assert_double_eq(cfg.dc_lambda, 0.04);
    ck_assert(!cfg.dc_adaptive);
    ck_assert_double_eq(cfg.dc_ms_decay, 0.95);
    ck_assert_double_eq(cfg.dc_epsilon, 1e-7);
    ck_assert_int_eq(cfg.push, DCPS_PUSH_DENSE);
    ck_assert_int_eq(cfg.pull, DCPS_PULL_DENSE);
    ck_assert_double_eq(cfg.density, 0.01);
    ck_assert_double_eq(cfg.pull_density, 0);
    ck_assert_double_eq(dcps_config_pull_density(&cfg), 0.01); /* 0: density */
    ck_assert_int_eq(cfg.density_warmup_epochs, 0);
    ck_assert(cfg.error_feedback);
    ck_assert_double_eq(cfg.momentum_correction, 0);
    ck_assert_double_eq(cfg.clip_norm, 0);
    ck_assert_int_eq(cfg.warmup_steps, 0);
    ck_assert_int_eq(cfg.correction_every, 0);
    ck_assert(!cfg.pipeline);
    ck_assert_double_eq(cfg.local_lr, 0);
    ck_assert_int_eq(cfg.device, DCPS_DEVICE_AUTO);
    ck_assert_int_eq(cfg.log_every, 100);
    ck_assert_str_eq(cfg.metrics, "");
    ck_assert_int_eq(cfg.timeout_ms, 10000);
    ck_assert_int_eq(cfg.retries, 5);
    ck_assert_str_eq(cfg.checkpoint_dir, "");
    ck_assert_int_eq(cfg.checkpoint_every, 60);
    ck_assert_int_eq(cfg.checkpoint_keep, 3);
    ck_assert_int_eq(cfg.metrics_port, 0);
    ck_assert_int_eq(cfg.heartbeat_ms, 1000);
    ck_assert_int_eq(cfg.dead_after_ms, 10000);
    ck_assert(!cfg.curve);
    ck_assert_str_eq(cfg.server_secret_key_file, "");
    ck_assert_str_eq(cfg.server_public_key, "");
    ck_assert_str_eq(cfg.worker_keys_dir, "");
    ck_assert_str_eq(cfg.worker_secret_key_file, "");
}
END_TEST

START_TEST(job_id_is_fnv1a_of_the_name_unless_given)
{
    const char *other[] = {"job.name=other"};
    const char *given[] = {"job.id=7"};
    ck_assert_int_eq(load(NULL, 0, NULL), 0);
    ck_assert_uint_eq(cfg.job_id, 0x733c096726255429u); /* FNV-1a 64 of "dcps" */
    ck_assert_int_eq(load(NULL, 1, other), 0);
    ck_assert_uint_eq(cfg.job_id, 0x0a24ad61c2562a55u);
    ck_assert_int_eq(load(NULL, 1, given), 0);
    ck_assert_uint_eq(cfg.job_id, 7);
}
END_TEST

START_TEST(comments_blank_lines_and_inline_comments_are_ignored)
{
    expect_ok("; top\n# hash comment\n\n[job]\nworkers = 8 ; eight\n  ; indented comment\n"
              "[optimizer]\nkind = momentum\nlr: 0.5\n");
    ck_assert_int_eq(cfg.workers, 8);
    ck_assert_int_eq(cfg.opt_kind, DCPS_OPT_MOMENTUM);
    ck_assert_double_eq(cfg.lr, 0.5);
    ck_assert_int_eq(cfg.epochs, 3); /* untouched keys keep their defaults */
}
END_TEST

START_TEST(missing_file_names_the_path_and_the_reason)
{
    char missing[160], want[256];
    snprintf(missing, sizeof missing, "%s/nope.ini", dir);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
    ck_assert_int_eq(dcps_config_load(&cfg, missing, NULL, 0, err, sizeof err), DCPS_E_CONFIG);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(unknown_key_names_line_section_and_key)
{
    expect_file_error("[job]\nname = x\n\ncolour = red\n", ":4: [job] colour: unknown key");
}
END_TEST

START_TEST(unknown_section_is_refused_at_its_first_key)
{
    expect_file_error("[job]\nworkers = 2\n[jobs]\nworkers = 3\n",
                      ":4: [jobs] workers: unknown section; did you mean [job] workers?");
}
END_TEST

START_TEST(key_before_any_section_is_refused)
{
    expect_file_error("; c\nworkers = 2\n", ":2: workers: key outside any [section]");
}
END_TEST

START_TEST(key_given_twice_names_both_lines)
{
    expect_file_error("[job]\nworkers = 2\n; c\nworkers = 3\n",
                      ":4: [job] workers: key given twice (first on line 2)");
}
END_TEST

START_TEST(key_given_twice_in_split_sections_is_refused)
{
    expect_file_error("[job]\nworkers = 2\n[data]\nepochs = 1\n[job]\nworkers = 3\n",
                      ":6: [job] workers: key given twice (first on line 2)");
}
END_TEST

START_TEST(line_without_equals_is_a_syntax_error)
{
    expect_file_error("[job]\nworkers = 2\nmode async\n", ":3: syntax error");
}
END_TEST

/* A key a typo away from a known one is named: in its section first, then the
 * same name in another section, then a section a typo away; nothing when
 * nothing is near. */
START_TEST(unknown_key_suggests_the_closest_key)
{
    expect_file_error("[data]\nepoch = 2\n", ":2: [data] epoch: unknown key; did you mean [data] epochs?");
    expect_file_error("[optimizer]\nlearning_rat = 1\n", ":2: [optimizer] learning_rat: unknown key");
    expect_file_error("[optimizer]\nwarmup_step = 1\n",
                      ":2: [optimizer] warmup_step: unknown key; did you mean [optimizer] warmup_steps?");
    expect_file_error("[job]\nepochs = 2\n", ":2: [job] epochs: unknown key; did you mean [data] epochs?");
    expect_file_error("[servr]\nmetrics_port = 1\n",
                      ":2: [servr] metrics_port: unknown section; did you mean [server] metrics_port?");
    expect_file_error("[workr]\ncolour = 1\n", ":2: [workr] colour: unknown section; did you mean [worker]?");
    expect_file_error("[colours]\nred = 1\n", ":2: [colours] red: unknown section");
}
END_TEST

START_TEST(unclosed_section_is_a_syntax_error)
{
    expect_file_error("[job]\nworkers = 2\n[data\n", ":3: syntax error");
}
END_TEST

START_TEST(earliest_error_in_the_file_is_reported)
{
    expect_file_error("[job]\nbogus\ncolour = 1\n", ":2: syntax error");
    expect_file_error("[job]\ncolour = 1\nbogus\n", ":2: [job] colour: unknown key");
}
END_TEST

START_TEST(line_numbers_count_comments_blank_lines_and_continuations)
{
    static const char head[] = "; job\n\n[job]\nworkers = 2 ; two\n# hash\n\n[servers]\n"
                               "shards = tcp://a:1,\n    tcp://b:2,\n\n    tcp://c:3\n[optimizer]\n";
    char text[512];
    snprintf(text, sizeof text, "%slr = 7\nmomentum = 1\n", head);
    expect_file_error(text, ":14: [optimizer] momentum: value 1 is outside [0, 1)");
    snprintf(text, sizeof text, "%slr = 7\n\nmomentum\n", head);
    expect_file_error(text, ":15: syntax error");
    snprintf(text, sizeof text, "%slr = 7\n", head);
    expect_ok(text);
    ck_assert_int_eq(cfg.n_shards, 3);
    ck_assert_str_eq(cfg.shards[2], "tcp://c:3");
}
END_TEST

START_TEST(line_too_long_is_refused)
{
    char text[400] = "[job]\nworkers = 2\n;";
    memset(text + strlen(text), 'x', 250);
    strcat(text, "\nworkers = 3\n");
    expect_file_error(text, ":3: line too long (more than 199 characters)");
}
END_TEST

START_TEST(line_of_199_characters_is_the_longest_accepted)
{
    /* "train_images = " is 15 characters: 184 are left for the value. */
    char text[400] = "[data]\ntrain_images = /", value[200] = "/";
    memset(text + strlen(text), 'a', 183);
    memset(value + 1, 'a', 183);
    expect_ok(text); /* at the end of the file, without a newline */
    ck_assert_str_eq(cfg.train_images, value);
    strcat(text, "\n[job]\nworkers = 9\n");
    expect_ok(text);
    ck_assert_str_eq(cfg.train_images, value);
    ck_assert_int_eq(cfg.workers, 9);
    char *a = strchr(text, '/') + 1;
    memmove(a + 1, a, strlen(a) + 1); /* one more character in the value */
    expect_file_error(text, ":2: line too long (more than 199 characters)");
}
END_TEST

START_TEST(string_that_would_not_fit_a_line_is_refused)
{
    char arg[300] = "data.train_images=/";
    memset(arg + strlen(arg), 'a', 184);
    /* The message names the option by its first 80 characters. */
    char msg[400];
    snprintf(msg, sizeof msg, "--set \"%.80s…\": [data] train_images: is 185 characters, more "
             "than 184", arg);
    expect_set_error(arg, msg);
}
END_TEST

START_TEST(string_that_would_not_read_back_is_refused)
{
    expect_set_error("worker.metrics=a ;b",
                     "--set \"worker.metrics=a ;b\": [worker] metrics: contains a ';' that would start a comment");
    expect_set_error("worker.metrics=;b",
                     "--set \"worker.metrics=;b\": [worker] metrics: contains a ';' that would start a comment");
    expect_set_error("worker.metrics=a\tb",
                     "--set \"worker.metrics=a?b\": [worker] metrics: contains a control character");
    expect_set_error("job.name= ", "--set \"job.name= \": [job] name: must not be empty");
    const char *ok[] = {"worker.metrics=a;b"}; /* no space before ';': not a comment */
    ck_assert_int_eq(load(NULL, 1, ok), 0);
    ck_assert_str_eq(cfg.metrics, "a;b");
}
END_TEST

START_TEST(bad_integer_is_refused)
{
    expect_file_error("[job]\nworkers = two\n", ":2: [job] workers: \"two\" is not an integer");
}
END_TEST

START_TEST(trailing_junk_after_a_number_is_refused)
{
    expect_file_error("[job]\nworkers = 3x\n", ":2: [job] workers: \"3x\" is not an integer");
    expect_file_error("[optimizer]\nlr = 0.1abc\n",
                      ":2: [optimizer] lr: \"0.1abc\" is not a number");
    expect_file_error("[job]\nseed = 12 3\n",
                      ":2: [job] seed: \"12 3\" is not a non-negative integer");
}
END_TEST

START_TEST(empty_number_is_refused)
{
    expect_file_error("[data]\nepochs =\n", ":2: [data] epochs: \"\" is not an integer");
    expect_file_error("[optimizer]\nlr =\n", ":2: [optimizer] lr: \"\" is not a number");
}
END_TEST

START_TEST(integer_below_its_range_is_refused)
{
    expect_file_error("[job]\nworkers = 0\n", ":2: [job] workers: value 0 is outside [1, 1024]");
    expect_file_error("[worker]\ntimeout_ms = 9\n",
                      ":2: [worker] timeout_ms: value 9 is outside [10, 3600000]");
    expect_file_error("[server]\ncheckpoint_keep = 0\n",
                      ":2: [server] checkpoint_keep: value 0 is outside [1, 1000]");
}
END_TEST

START_TEST(integer_above_its_range_is_refused)
{
    expect_file_error("[job]\nworkers = 1025\n",
                      ":2: [job] workers: value 1025 is outside [1, 1024]");
    expect_file_error("[server]\nmetrics_port = 65536\n",
                      ":2: [server] metrics_port: value 65536 is outside [0, 65535]");
    expect_file_error("[server]\ncheckpoint_keep = 1001\n",
                      ":2: [server] checkpoint_keep: value 1001 is outside [1, 1000]");
}
END_TEST

START_TEST(integer_beyond_long_is_out_of_range)
{
    expect_file_error("[job]\nworkers = 99999999999999999999\n",
                      ":2: [job] workers: value 99999999999999999999 is outside [1, 1024]");
    expect_file_error("[job]\nworkers = -99999999999999999999\n",
                      ":2: [job] workers: value -99999999999999999999 is outside [1, 1024]");
}
END_TEST

START_TEST(uint64_refuses_negative_and_overflow)
{
    expect_file_error("[job]\nseed = -1\n", ":2: [job] seed: \"-1\" is not a non-negative integer");
    expect_file_error("[job]\nid = 18446744073709551616\n",
                      ":2: [job] id: value 18446744073709551616 is outside [0, 18446744073709551615]");
    expect_ok("[job]\nseed = 18446744073709551615\n");
    ck_assert_uint_eq(cfg.seed, UINT64_MAX);
}
END_TEST

START_TEST(exclusive_lower_bound_refuses_the_bound)
{
    expect_file_error("[compression]\ndensity = 0\n",
                      ":2: [compression] density: value 0 is outside (0, 1]");
    expect_file_error("[optimizer]\nlr = 0\n", ":2: [optimizer] lr: value 0 is outside (0, 10]");
    expect_file_error("[optimizer]\nlr = -0.5\n",
                      ":2: [optimizer] lr: value -0.5 is outside (0, 10]");
    expect_file_error("[optimizer]\nlr = 10.5\n",
                      ":2: [optimizer] lr: value 10.5 is outside (0, 10]");
    expect_ok("[optimizer]\nlr = 10\n[compression]\ndensity = 1\n");
    ck_assert_double_eq(cfg.lr, 10);
    ck_assert_double_eq(cfg.density, 1);
}
END_TEST

START_TEST(exclusive_upper_bound_refuses_the_bound)
{
    expect_file_error("[optimizer]\nmomentum = 1\n",
                      ":2: [optimizer] momentum: value 1 is outside [0, 1)");
    expect_file_error("[optimizer]\ndc_ms_decay = 1.0\n",
                      ":2: [optimizer] dc_ms_decay: value 1.0 is outside [0, 1)");
    expect_ok("[optimizer]\nmomentum = 0\ndc_ms_decay = 0.999\n");
    ck_assert_double_eq(cfg.momentum, 0);
}
END_TEST

START_TEST(nan_and_infinity_are_refused)
{
    expect_file_error("[optimizer]\nlr = nan\n",
                      ":2: [optimizer] lr: \"nan\" is not a finite number");
    expect_file_error("[optimizer]\ndc_lambda = inf\n",
                      ":2: [optimizer] dc_lambda: \"inf\" is not a finite number");
    expect_file_error("[optimizer]\ndc_lambda = 1e999\n",
                      ":2: [optimizer] dc_lambda: value 1e999 cannot be represented as a double");
}
END_TEST

START_TEST(bad_enum_lists_the_choices)
{
    expect_file_error("[job]\nmode = fast\n",
                      ":2: [job] mode: \"fast\" is not one of async, sync, ssp");
    expect_file_error("[compression]\npush = gtopk\n",
                      ":2: [compression] push: \"gtopk\" is not one of dense, topk, twobit");
}
END_TEST

START_TEST(bad_bool_lists_the_spellings)
{
    expect_file_error("[compression]\npipeline = maybe\n",
                      ":2: [compression] pipeline: \"maybe\" is not a boolean (true/false, yes/no, on/off, 1/0)");
}
END_TEST

START_TEST(bad_log_level_lists_the_levels)
{
    expect_file_error("[job]\nlog_level = loud\n",
                      ":2: [job] log_level: \"loud\" is not one of err, warning, notice, info, debug");
}
END_TEST

START_TEST(enums_bools_and_levels_accept_every_spelling)
{
    expect_ok("[job]\nmode = SSP\nlog_level = DEBUG\n[optimizer]\nkind = dcasgd\ndc_adaptive = YES\n"
              "[compression]\npush = topk\npull = delta\nerror_feedback = 0\npipeline = on\n"
              "[worker]\ndevice = gpu\n[security]\ncurve = off\n");
    ck_assert_int_eq(cfg.mode, DCPS_MODE_SSP);
    ck_assert_str_eq(cfg.log_level, "debug");
    ck_assert_int_eq(cfg.opt_kind, DCPS_OPT_DCASGD);
    ck_assert(cfg.dc_adaptive);
    ck_assert_int_eq(cfg.push, DCPS_PUSH_TOPK);
    ck_assert_int_eq(cfg.pull, DCPS_PULL_DELTA);
    ck_assert(!cfg.error_feedback);
    ck_assert(cfg.pipeline);
    ck_assert_int_eq(cfg.device, DCPS_DEVICE_GPU);
    const char *spell[] = {"true", "False", "yes", "NO", "on", "Off", "1", "0"};
    for (int i = 0; i < 8; i++) {
        char arg[64];
        const char *ov[] = {arg};
        snprintf(arg, sizeof arg, "compression.pipeline=%s", spell[i]);
        ck_assert_int_eq(load(NULL, 1, ov), 0);
        ck_assert_int_eq(cfg.pipeline, i % 2 == 0);
    }
}
END_TEST

START_TEST(shards_are_trimmed_and_counted)
{
    expect_ok("[servers]\nshards = tcp://a:1 ,  ipc:///tmp/s1,inproc://s2\n");
    ck_assert_int_eq(cfg.n_shards, 3);
    ck_assert_str_eq(cfg.shards[0], "tcp://a:1");
    ck_assert_str_eq(cfg.shards[1], "ipc:///tmp/s1");
    ck_assert_str_eq(cfg.shards[2], "inproc://s2");
}
END_TEST

START_TEST(shard_list_with_an_empty_entry_is_refused)
{
    expect_file_error("[job]\n[servers]\nshards = tcp://a:1,,tcp://b:2\n",
                      ":3: [servers] shards: entry 2 is empty");
    expect_file_error("[servers]\nshards = tcp://a:1,\n", ":2: [servers] shards: entry 2 is empty");
    expect_file_error("[servers]\nshards =\n", ":2: [servers] shards: entry 1 is empty");
}
END_TEST

START_TEST(shard_with_a_bad_scheme_or_a_space_is_refused)
{
    expect_file_error("[servers]\nshards = tcp://a:1,udp://b:2\n",
                      ":2: [servers] shards: endpoint 2 \"udp://b:2\" does not start with tcp://, ipc:// or inproc://");
    expect_file_error("[servers]\nshards = tcp://a b:1\n",
                      ":2: [servers] shards: endpoint 1 \"tcp://a b:1\" contains a space");
    expect_file_error("[servers]\nshards = tcp://\n",
                      ":2: [servers] shards: endpoint 1 \"tcp://\" has no address");
}
END_TEST

/* n entries "inproc://sNN", ten to a line, continued on indented lines. */
static void shard_lines(char *text, size_t size, int n)
{
    size_t used = (size_t)snprintf(text, size, "[job]\nworkers = 4\n[servers]\nshards = ");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, size - used, "inproc://s%02d%s%s", i, i + 1 < n ? "," : "",
                                 i % 10 == 9 && i + 1 < n ? "\n    " : "");
    snprintf(text + used, size - used, "\n[data]\nepochs = 7\n");
}

START_TEST(shard_list_continues_on_indented_lines)
{
    char text[2048];
    shard_lines(text, sizeof text, DCPS_MAX_SHARDS);
    expect_ok(text);
    ck_assert_int_eq(cfg.n_shards, DCPS_MAX_SHARDS);
    ck_assert_str_eq(cfg.shards[0], "inproc://s00");
    ck_assert_str_eq(cfg.shards[10], "inproc://s10");
    ck_assert_str_eq(cfg.shards[63], "inproc://s63");
    ck_assert_int_eq(cfg.epochs, 7);
}
END_TEST

START_TEST(too_many_shards_are_refused_at_the_key)
{
    char text[2048];
    shard_lines(text, sizeof text, DCPS_MAX_SHARDS + 1);
    expect_file_error(text, ":4: [servers] shards: more than 64 entries");
}
END_TEST

START_TEST(scalar_value_cannot_continue_on_an_indented_line)
{
    expect_file_error("[job]\nname = a\n  b\n",
                      ":3: [job] name: indented line continues this value; only lists may span lines");
    expect_file_error("[job]\nname = a\n  workers = 3\n",
                      ":3: [job] name: indented line continues this value; only lists may span lines");
}
END_TEST

START_TEST(indented_first_key_of_a_section_is_a_key)
{
    expect_ok("[job]\n  workers = 7\n[data]\n\tepochs = 2\n");
    ck_assert_int_eq(cfg.workers, 7);
    ck_assert_int_eq(cfg.epochs, 2);
}
END_TEST

START_TEST(layers_give_the_parameter_count)
{
    expect_ok("[model]\nlayers = 10, 20 ,5\n");
    ck_assert_int_eq(cfg.n_layers, 3);
    ck_assert_int_eq(cfg.layers[1], 20);
    ck_assert_uint_eq(cfg.n_params, 10 * 20 + 20 + 20 * 5 + 5);
}
END_TEST

START_TEST(layers_with_one_entry_are_refused)
{
    expect_file_error("[model]\nlayers = 784\n",
                      ":2: [model] layers: needs at least 2 sizes (input and output), got 1");
}
END_TEST

START_TEST(layer_of_size_zero_or_too_big_is_refused)
{
    expect_file_error("[model]\nlayers = 784,0,10\n",
                      ":2: [model] layers: size 2 \"0\" is not an integer in [1, 65536]");
    expect_file_error("[model]\nlayers = 784,65537\n",
                      ":2: [model] layers: size 2 \"65537\" is not an integer in [1, 65536]");
    expect_file_error("[model]\nlayers = 784,x\n",
                      ":2: [model] layers: size 2 \"x\" is not an integer in [1, 65536]");
    expect_file_error("[model]\nlayers = 784,,10\n", ":2: [model] layers: entry 2 is empty");
}
END_TEST

START_TEST(too_many_layers_are_refused)
{
    expect_file_error("[model]\nlayers = 9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9\n",
                      ":2: [model] layers: more than 16 entries");
    expect_ok("[model]\nlayers = 9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9\n");
    ck_assert_int_eq(cfg.n_layers, 16);
}
END_TEST

START_TEST(model_with_2_to_the_32_parameters_is_refused)
{
    expect_file_error("[model]\nlayers = 65536,65536\n",
                      ":2: [model] layers: the model has 4295032832 parameters, more than 4294967295 "
                      "(indices are 32-bit on the wire)");
    expect_ok("[model]\nlayers = 65535,65535\n"); /* 4294901760: just fits */
    ck_assert_uint_eq(cfg.n_params, 4294901760u);
}
END_TEST

START_TEST(more_shards_than_parameter_blocks_are_refused)
{
    /* 110 parameters are 2 blocks of 64: the first of 3 shards would own none. */
    expect_file_error("[servers]\nshards = inproc://a,inproc://b,inproc://c\n[model]\nlayers = 10,10\n",
                      ": [model] layers give 110 parameters, too few for the 3 [servers] shards: "
                      "shard 0 would own none");
    expect_ok("[servers]\nshards = inproc://a,inproc://b\n[model]\nlayers = 10,10\n");
}
END_TEST

/* [model] params: layers (the default: n from the layers, as before the key
 * existed), auto (n unknown, 0, until a program learns it) or n itself. */
START_TEST(params_is_layers_auto_or_a_count)
{
    expect_ok("[model]\nlayers = 10,10\n");
    ck_assert_uint_eq(cfg.params, DCPS_PARAMS_LAYERS);
    ck_assert_uint_eq(cfg.n_params, 110);
    expect_ok("[model]\nlayers = 10,10\nparams = layers\n");
    ck_assert_uint_eq(cfg.n_params, 110);
    expect_ok("[model]\nlayers = 10,10\nparams = auto\n");
    ck_assert_uint_eq(cfg.params, DCPS_PARAMS_AUTO);
    ck_assert_uint_eq(cfg.n_params, 0);
    ck_assert_uint_eq(dcps_config_layers_params(&cfg), 110); /* what dcps-worker's MLP has */
    expect_ok("[model]\nlayers = 10,10\nparams = 4294967295\n");
    ck_assert_uint_eq(cfg.n_params, 4294967295u);
    const char *ov[] = {"model.params=AUTO"};
    ck_assert_int_eq(load(NULL, 1, ov), 0);
    ck_assert_uint_eq(cfg.n_params, 0);
    /* The last word wins, in either direction. */
    const char *back[] = {"model.params=auto", "model.params=1000"};
    ck_assert_int_eq(load(NULL, 2, back), 0);
    ck_assert_uint_eq(cfg.n_params, 1000);
}
END_TEST

START_TEST(bad_params_are_named_in_the_error)
{
    static const char *const bad[] = {"0", "-1", "4294967296", "12k", "automatic", "", "1e6"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128], want[256];
        snprintf(text, sizeof text, "[model]\nparams = %s\n", bad[i]);
        snprintf(want, sizeof want,
                 ":2: [model] params: \"%s\" is not layers, auto or a parameter count in "
                 "[1, 4294967295]",
                 bad[i]);
        expect_file_error(text, want);
    }
    expect_set_error("model.params=none",
                     "--set \"model.params=none\": [model] params: \"none\" is not layers, auto or a parameter count "
                     "in [1, 4294967295]");
}
END_TEST

/* An explicit count is checked against the shards as layers are; auto is
 * checked once n is known (dcps_config_check_size, by the shard). */
START_TEST(params_too_few_for_the_shards_are_refused_when_known)
{
    expect_file_error("[servers]\nshards = inproc://a,inproc://b,inproc://c\n[model]\n"
                      "params = 128\n",
                      ": [model] params = 128 gives 128 parameters, too few for the 3 [servers] "
                      "shards: shard 0 would own none");
    expect_ok("[servers]\nshards = inproc://a,inproc://b,inproc://c\n[model]\nparams = 129\n");
    expect_ok("[servers]\nshards = inproc://a,inproc://b,inproc://c\n[model]\nlayers = 10,10\n"
              "params = auto\n");
    char why[256];
    ck_assert_int_eq(dcps_config_check_size(&cfg, 110, why, sizeof why), DCPS_E_SIZE);
    ck_assert_str_eq(why, "110 parameters, too few for the 3 [servers] shards: shard 0 would own "
                          "none");
    ck_assert_int_eq(dcps_config_check_size(&cfg, 0, why, sizeof why), DCPS_E_SIZE);
    ck_assert_str_eq(why, "0 parameters, outside [1, 4294967295] (indices are 32-bit on the wire)");
    ck_assert_int_eq(dcps_config_check_size(&cfg, 129, why, sizeof why), 0);
    ck_assert_int_eq(dcps_config_check_size(&cfg, 1ull << 32, why, sizeof why), DCPS_E_SIZE);
}
END_TEST

/* The key reads back as written, and cannot change on SIGHUP. */
START_TEST(params_writes_back_and_is_not_reloaded)
{
    static const char *const values[] = {"layers", "auto", "123456"};
    for (size_t i = 0; i < 3; i++) {
        char set[64], written[256];
        snprintf(set, sizeof set, "model.params=%s", values[i]);
        const char *ov[] = {set};
        ck_assert_int_eq(load(NULL, 1, ov), 0);
        dcps_config_t want = cfg;
        snprintf(written, sizeof written, "%s/params.ini", dir);
        FILE *f = fopen(written, "w");
        ck_assert_ptr_nonnull(f);
        dcps_config_write(&want, f);
        fclose(f);
        ck_assert_int_eq(dcps_config_load(&cfg, written, NULL, 0, err, sizeof err), 0);
        ck_assert_uint_eq(cfg.params, want.params);
        ck_assert_uint_eq(cfg.n_params, want.n_params);
        unlink(written);
    }
    dcps_config_t run, next;
    char changes[256], refused[256];
    const char *a[] = {"model.params=auto"}, *b[] = {"model.params=layers"};
    ck_assert_int_eq(dcps_config_load(&run, NULL, a, 1, err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_load(&next, NULL, b, 1, err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused,
                                        sizeof refused),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(refused, "[model] params auto -> layers");
}
END_TEST

START_TEST(dead_after_must_exceed_heartbeat)
{
    expect_file_error("[server]\nheartbeat_ms = 1000\ndead_after_ms = 1000\n",
                      ": [server] dead_after_ms (1000) must be greater than [server] heartbeat_ms (1000)");
    expect_ok("[server]\nheartbeat_ms = 1000\ndead_after_ms = 1001\n");
}
END_TEST

/* Every setting runs; only curve = true needs a libzmq built with CURVE. */
START_TEST(curve_is_refused_only_by_a_libzmq_without_it)
{
    const char *ov[] = {"security.curve=true"};
    char e[512];
    ck_assert_int_eq(dcps_config_load(&cfg, NULL, ov, 1, e, sizeof e), 0);
    if (dcps_keys_available()) {
        ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    } else {
        ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), DCPS_E_CONFIG);
        ck_assert_str_eq(e, "job.ini: [security] curve = true, but this libzmq was built without "
                            "CURVE (zmq_has(\"curve\") is false): install one built with "
                            "libsodium, or set curve = false");
    }
    dcps_config_defaults(&cfg);
    ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    snprintf(cfg.checkpoint_dir, sizeof cfg.checkpoint_dir, "/var/lib/dcps"); /* checkpoints run */
    ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    cfg.opt_kind = DCPS_OPT_DCASGD; /* every update rule runs */
    ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    cfg.metrics_port = 9100; /* and the metrics endpoint */
    ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    for (int mode = DCPS_MODE_ASYNC; mode <= DCPS_MODE_SSP; mode++) { /* and every mode */
        cfg.mode = mode;
        ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    }
}
END_TEST

START_TEST(compressed_push_and_pull_and_the_pipeline_are_supported)
{
    const char *ov[] = {"compression.push=topk",
                        "compression.pull=delta",
                        "compression.pipeline=true",
                        "compression.density_warmup_epochs=4",
                        "compression.momentum_correction=0.9",
                        "compression.clip_norm=5",
                        "compression.local_lr=0.01"};
    char e[512];
    int rc = dcps_config_load(&cfg, NULL, ov, sizeof ov / sizeof ov[0], e, sizeof e);
    ck_assert_msg(rc == 0, "load failed: %s", e);
    ck_assert_int_eq(cfg.push, DCPS_PUSH_TOPK);
    ck_assert_int_eq(cfg.pull, DCPS_PULL_DELTA);
    ck_assert(cfg.pipeline);
    ck_assert_int_eq(cfg.density_warmup_epochs, 4);
    ck_assert_double_eq(cfg.momentum_correction, 0.9);
    ck_assert_double_eq(cfg.clip_norm, 5);
    ck_assert_double_eq(cfg.local_lr, 0.01);
    rc = dcps_config_supported(&cfg, "job.ini", e, sizeof e);
    ck_assert_msg(rc == 0, "refused: %s", e);
    for (size_t i = 0; i < 3; i++) { /* each one alone */
        ck_assert_int_eq(dcps_config_load(&cfg, NULL, ov + i, 1, e, sizeof e), 0);
        ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", e, sizeof e), 0);
    }
}
END_TEST

START_TEST(density_outside_0_to_1_is_refused)
{
    expect_set_error("compression.density=0",
                     "--set \"compression.density=0\": [compression] density: value 0 is outside (0, 1]");
    expect_set_error("compression.density=1.5",
                     "--set \"compression.density=1.5\": [compression] density: value 1.5 is outside (0, 1]");
    expect_set_error("compression.density=-0.01",
                     "--set \"compression.density=-0.01\": [compression] density: value -0.01 is outside (0, 1]");
}
END_TEST

START_TEST(density_warmup_falls_from_a_quarter_to_the_density)
{
    /* E = 4, density 0.001: 25%, 6.3%, 1.6%, 0.40%, then 0.1% (DGC's schedule). */
    const double want[] = {0.25, 0.0628717, 0.0158114, 0.00397635, 0.001, 0.001};
    for (int e = 1; e <= 6; e++)
        ck_assert_double_eq_tol(dcps_config_density_at(0.001, 4, e), want[e - 1], 1e-6);
    ck_assert_double_eq(dcps_config_density_at(0.001, 4, 0), 0.25); /* below 1 counts as 1 */
    ck_assert_double_eq(dcps_config_density_at(0.001, 0, 1), 0.001); /* off */
    ck_assert_double_eq(dcps_config_density_at(0.5, 4, 1), 0.5);     /* above 25%: as is */
}
END_TEST

START_TEST(dgc_and_pipeline_keys_outside_their_range_are_refused)
{
    expect_set_error("compression.density_warmup_epochs=-1", "--set \"compression.density_warmup_epochs=-1\": [compression] "
                     "density_warmup_epochs: value -1 is outside [0, 1000]");
    expect_set_error("compression.density_warmup_epochs=1001", "--set \"compression.density_warmup_epochs=1001\": [compression] "
                     "density_warmup_epochs: value 1001 is outside [0, 1000]");
    expect_set_error("compression.momentum_correction=1",
                     "--set \"compression.momentum_correction=1\": [compression] momentum_correction: value 1 is outside [0, 1)");
    expect_set_error("compression.momentum_correction=-0.1",
                     "--set \"compression.momentum_correction=-0.1\": [compression] momentum_correction: value -0.1 is outside [0, 1)");
    expect_set_error("compression.clip_norm=-1",
                     "--set \"compression.clip_norm=-1\": [compression] clip_norm: value -1 is outside [0, 1000000]");
    expect_set_error("compression.local_lr=-0.01",
                     "--set \"compression.local_lr=-0.01\": [compression] local_lr: value -0.01 is outside [0, 10]");
    expect_set_error("compression.local_lr=11",
                     "--set \"compression.local_lr=11\": [compression] local_lr: value 11 is outside [0, 10]");
    expect_set_error("compression.pull_density=1.5",
                     "--set \"compression.pull_density=1.5\": [compression] pull_density: value 1.5 is outside [0, 1]");
    const char *ok[] = {"compression.density_warmup_epochs=1000",
                        "compression.momentum_correction=0.999", "compression.clip_norm=0",
                        "compression.local_lr=10"};
    ck_assert_int_eq(load(NULL, 4, ok), 0);
    ck_assert_int_eq(cfg.density_warmup_epochs, 1000);
    ck_assert_double_eq(cfg.momentum_correction, 0.999);
    ck_assert_double_eq(cfg.local_lr, 10);
}
END_TEST

START_TEST(momentum_correction_needs_error_feedback)
{
    expect_file_error("[compression]\nmomentum_correction = 0.9\nerror_feedback = false\n",
                      ": [compression] momentum_correction (0.9) needs [compression] "
                      "error_feedback = true: momentum correction accumulates into the residual");
    const char *ov[] = {"compression.error_feedback=false", "compression.momentum_correction=0.5"};
    ck_assert_int_eq(load(NULL, 2, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, "--set: [compression] momentum_correction (0.5) needs [compression] "
                          "error_feedback = true: momentum correction accumulates into the "
                          "residual");
    expect_ok("[compression]\nmomentum_correction = 0.9\nerror_feedback = true\n");
    expect_ok("[compression]\nmomentum_correction = 0\nerror_feedback = false\n");
}
END_TEST

/* A checkpoint holds the records of pushes in parts (docs/protocol.md 17): parts
 * go with checkpoints in every mode. (Until 2026-11-27 a sync job with
 * checkpoints was refused more than 1.) */
START_TEST(parts_in_a_sync_job_with_checkpoints_are_taken)
{
    expect_ok("[job]\nmode = sync\n[server]\ncheckpoint_dir = /tmp/ck\n"
              "[compression]\nparts = 4\n");
    expect_ok("[job]\nmode = sync\n[server]\ncheckpoint_dir = /tmp/ck\n"
              "[compression]\nparts = 1\n");
    expect_ok("[job]\nmode = sync\n[server]\ncheckpoint_dir = /tmp/ck\n");
    expect_ok("[job]\nmode = sync\n[compression]\nparts = 4\n");
    expect_ok("[job]\nmode = async\n[server]\ncheckpoint_dir = /tmp/ck\n"
              "[compression]\nparts = 4\n");
}
END_TEST

/* --- [optimizer]: the rules of torch.optim (issue 27) ---------------------------------- */

START_TEST(optimizer_defaults_are_torch_optims)
{
    dcps_config_defaults(&cfg);
    ck_assert(!cfg.nesterov);
    ck_assert_double_eq(cfg.beta1, 0.9);
    ck_assert_double_eq(cfg.beta2, 0.999);
    ck_assert(isnan(cfg.eps));          /* auto */
    ck_assert(isnan(cfg.weight_decay)); /* auto */
    ck_assert(!cfg.lazy);
    ck_assert_int_eq(cfg.delay, DCPS_DELAY_NONE);
    /* auto: torch.optim's defaults for the rule */
    const struct {
        int kind;
        double eps, wd;
    } want[] = {{DCPS_OPT_SGD, 1e-8, 0},      {DCPS_OPT_MOMENTUM, 1e-8, 0},
                {DCPS_OPT_ADAM, 1e-8, 0},     {DCPS_OPT_ADAMW, 1e-8, 0.01},
                {DCPS_OPT_ADAGRAD, 1e-10, 0}, {DCPS_OPT_DCASGD, 1e-8, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cfg.opt_kind = want[i].kind;
        ck_assert_double_eq(dcps_config_eps(&cfg), want[i].eps);
        ck_assert_double_eq(dcps_config_weight_decay(&cfg), want[i].wd);
    }
    /* given: as given, for every rule */
    expect_ok("[optimizer]\nkind = adamw\neps = 1e-6\nweight_decay = 0\n");
    ck_assert_double_eq(dcps_config_eps(&cfg), 1e-6);
    ck_assert_double_eq(dcps_config_weight_decay(&cfg), 0);
    expect_ok("[optimizer]\nkind = adagrad\neps = AUTO\nweight_decay = auto\n");
    ck_assert_double_eq(dcps_config_eps(&cfg), 1e-10);
    ck_assert_double_eq(dcps_config_weight_decay(&cfg), 0);
}
END_TEST

START_TEST(optimizer_keys_outside_their_range_are_refused)
{
    expect_set_error("optimizer.eps=0",
                     "--set \"optimizer.eps=0\": [optimizer] eps: value 0 is outside (0, 1] (or auto)");
    expect_set_error("optimizer.eps=-1e-8",
                     "--set \"optimizer.eps=-1e-8\": [optimizer] eps: value -1e-8 is outside (0, 1] (or auto)");
    expect_set_error("optimizer.eps=2",
                     "--set \"optimizer.eps=2\": [optimizer] eps: value 2 is outside (0, 1] (or auto)");
    expect_set_error("optimizer.eps=tiny",
                     "--set \"optimizer.eps=tiny\": [optimizer] eps: \"tiny\" is not a number (or auto)");
    expect_set_error("optimizer.eps=nan",
                     "--set \"optimizer.eps=nan\": [optimizer] eps: \"nan\" is not a finite number (or auto)");
    expect_set_error("optimizer.weight_decay=-0.01",
                     "--set \"optimizer.weight_decay=-0.01\": [optimizer] weight_decay: value "
                     "-0.01 is outside [0, 1] (or auto)");
    expect_set_error("optimizer.weight_decay=1.5",
                     "--set \"optimizer.weight_decay=1.5\": [optimizer] weight_decay: value 1.5 "
                     "is outside [0, 1] (or auto)");
    expect_set_error("optimizer.beta1=1",
                     "--set \"optimizer.beta1=1\": [optimizer] beta1: value 1 is outside [0, 1)");
    expect_set_error("optimizer.beta2=-0.5",
                     "--set \"optimizer.beta2=-0.5\": [optimizer] beta2: value -0.5 is outside "
                     "[0, 1)");
    expect_set_error("optimizer.lazy=sometimes",
                     "--set \"optimizer.lazy=sometimes\": [optimizer] lazy: \"sometimes\" is not a "
                     "boolean (true/false, yes/no, on/off, 1/0)");
    expect_set_error("optimizer.nesterov=2",
                     "--set \"optimizer.nesterov=2\": [optimizer] nesterov: \"2\" is not a boolean "
                     "(true/false, yes/no, on/off, 1/0)");
    expect_set_error("optimizer.delay_compensation=yes",
                     "--set \"optimizer.delay_compensation=yes\": [optimizer] delay_compensation: "
                     "\"yes\" is not one of none, constant, adaptive");
    expect_file_error("[optimizer]\nkind = adam\nbeta2 = 0.999\neps = 0\n",
                      ":4: [optimizer] eps: value 0 is outside (0, 1] (or auto)");
    /* the bounds themselves, where they are in the range */
    const char *ok[] = {"optimizer.kind=adam", "optimizer.eps=1", "optimizer.weight_decay=1",
                        "optimizer.beta1=0", "optimizer.beta2=0.999999"};
    ck_assert_int_eq(load(NULL, 5, ok), 0);
    ck_assert_double_eq(cfg.eps, 1);
    ck_assert_double_eq(cfg.weight_decay, 1);
    ck_assert_double_eq(cfg.beta1, 0);
}
END_TEST

START_TEST(unknown_optimizer_kind_lists_the_valid_ones)
{
    expect_file_error("[optimizer]\nkind = lamb\n",
                      ":2: [optimizer] kind: \"lamb\" is not one of sgd, momentum, dcasgd, adam, "
                      "adamw, adagrad");
    expect_set_error("optimizer.kind=SparseAdam",
                     "--set \"optimizer.kind=SparseAdam\": [optimizer] kind: \"SparseAdam\" is "
                     "not one of sgd, momentum, dcasgd, adam, adamw, adagrad");
    const char *kinds[] = {"sgd", "momentum", "dcasgd", "adam", "adamw", "adagrad"};
    for (int i = 0; i < 6; i++) {
        char arg[64];
        const char *ov[] = {arg};
        snprintf(arg, sizeof arg, "optimizer.kind=%s", kinds[i]);
        ck_assert_int_eq(load(NULL, 1, ov), 0);
        ck_assert_str_eq(dcps_config_optimizer_name(cfg.opt_kind), kinds[i]);
    }
}
END_TEST

START_TEST(nesterov_needs_momentum_and_names_the_keys)
{
    expect_file_error("[optimizer]\nkind = sgd\nnesterov = true\n",
                      ": [optimizer] nesterov = true needs kind = momentum with momentum > 0 "
                      "(kind is sgd, momentum 0.9)");
    expect_file_error("[optimizer]\nkind = adam\nnesterov = true\n",
                      ": [optimizer] nesterov = true needs kind = momentum with momentum > 0 "
                      "(kind is adam, momentum 0.9)");
    const char *ov[] = {"optimizer.kind=momentum", "optimizer.momentum=0",
                        "optimizer.nesterov=yes"};
    ck_assert_int_eq(load(NULL, 3, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, "--set: [optimizer] nesterov = true needs kind = momentum with "
                          "momentum > 0 (kind is momentum, momentum 0)");
    expect_ok("[optimizer]\nkind = momentum\nmomentum = 0.5\nnesterov = true\n");
    ck_assert(cfg.nesterov);
}
END_TEST

START_TEST(adamw_lr_times_weight_decay_must_be_below_1)
{
    expect_file_error("[optimizer]\nkind = adamw\nlr = 2\nweight_decay = 0.5\n",
                      ": [optimizer] lr (2) times weight_decay (0.5) must be below 1: adamw "
                      "multiplies every parameter by 1 - lr * weight_decay each update");
    /* auto: 0.01, so lr 10 gives 0.1 and passes; weight decay 0.1 at lr 10 does not */
    expect_ok("[optimizer]\nkind = adamw\nlr = 10\n");
    expect_file_error("[optimizer]\nkind = adamw\nlr = 10\nweight_decay = 0.1\n",
                      ": [optimizer] lr (10) times weight_decay (0.1) must be below 1: adamw "
                      "multiplies every parameter by 1 - lr * weight_decay each update");
    expect_ok("[optimizer]\nkind = adamw\nlr = 1.25\nweight_decay = 0.75\n"); /* 0.9375 */
    /* L2 weight decay (the other rules) multiplies nothing: no such limit */
    expect_ok("[optimizer]\nkind = adam\nlr = 2\nweight_decay = 0.5\n");
}
END_TEST

START_TEST(dc_adaptive_contradicting_delay_compensation_is_refused)
{
    expect_file_error("[optimizer]\ndelay_compensation = constant\ndc_adaptive = true\n",
                      ": [optimizer] dc_adaptive = true contradicts delay_compensation = constant: "
                      "give delay_compensation = adaptive, or drop dc_adaptive");
    expect_file_error(
        "[optimizer]\nkind = dcasgd\ndelay_compensation = constant\ndc_adaptive = true\n",
        ": [optimizer] dc_adaptive = true contradicts delay_compensation = constant: give "
        "delay_compensation = adaptive, or drop dc_adaptive");
    /* kind = dcasgd is sgd with delay compensation: dc_adaptive picks which,
     * unless delay_compensation says it; they may agree. */
    const struct {
        const char *text;
        int rule, delay;
    } ok[] = {
        {"[optimizer]\nkind = dcasgd\n", DCPS_OPT_SGD, DCPS_DELAY_CONSTANT},
        {"[optimizer]\nkind = dcasgd\ndc_adaptive = true\n", DCPS_OPT_SGD, DCPS_DELAY_ADAPTIVE},
        {"[optimizer]\nkind = dcasgd\ndelay_compensation = adaptive\n", DCPS_OPT_SGD,
         DCPS_DELAY_ADAPTIVE},
        {"[optimizer]\ndelay_compensation = adaptive\ndc_adaptive = true\n", DCPS_OPT_SGD,
         DCPS_DELAY_ADAPTIVE},
        {"[optimizer]\nkind = adam\ndelay_compensation = constant\n", DCPS_OPT_ADAM,
         DCPS_DELAY_CONSTANT},
        {"[optimizer]\nkind = momentum\n", DCPS_OPT_MOMENTUM, DCPS_DELAY_NONE},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        expect_ok(ok[i].text);
        ck_assert_int_eq(dcps_config_rule(&cfg), ok[i].rule);
        ck_assert_int_eq(dcps_config_delay(&cfg), ok[i].delay);
    }
    ck_assert_str_eq(dcps_config_delay_name(DCPS_DELAY_ADAPTIVE), "adaptive");
}
END_TEST

START_TEST(optimizer_keys_write_and_load_back)
{
    const char *sets[][7] = {
        {"optimizer.kind=adamw", "optimizer.beta1=0.8", "optimizer.beta2=0.99",
         "optimizer.eps=1e-6", "optimizer.weight_decay=0.1", "optimizer.lazy=true",
         "optimizer.delay_compensation=adaptive"},
        {"optimizer.kind=momentum", "optimizer.nesterov=true", "optimizer.eps=auto",
         "optimizer.weight_decay=auto", "optimizer.momentum=0.5", "optimizer.lr=0.3",
         "optimizer.delay_compensation=constant"},
    };
    for (int i = 0; i < 2; i++) {
        dcps_config_t want;
        char written[160];
        ck_assert_int_eq(dcps_config_load(&want, NULL, sets[i], 7, err, sizeof err), 0);
        snprintf(written, sizeof written, "%s/written.ini", dir);
        FILE *f = fopen(written, "w");
        ck_assert_ptr_nonnull(f);
        dcps_config_write(&want, f);
        fclose(f);
        int rc = dcps_config_load(&cfg, written, NULL, 0, err, sizeof err);
        ck_assert_msg(rc == 0, "reload failed: %s", err);
        ck_assert_mem_eq(&cfg, &want, sizeof cfg);
        unlink(written);
    }
    ck_assert(cfg.nesterov);
    ck_assert(isnan(cfg.eps));
    ck_assert_int_eq(cfg.delay, DCPS_DELAY_CONSTANT);
}
END_TEST

START_TEST(server_public_key_must_be_empty_or_40_z85_characters)
{
    expect_file_error("[security]\nserver_public_key = abc\n",
                      ":2: [security] server_public_key: is 3 characters; a Z85 key has 40");
    expect_file_error("[security]\nserver_public_key = 0123456789abcdefghij0123456789abcdefghi~\n",
                      ":2: [security] server_public_key: '~' is not a Z85 character");
    /* Z85 digits all, but the first five are worth more than 2^32. */
    expect_file_error("[security]\nserver_public_key = #####>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n",
                      ":2: [security] server_public_key: is not a Z85 key: a group of 5 "
                      "characters is worth more than 32 bits");
    expect_ok("[security]\nserver_public_key = rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n");
    ck_assert_str_eq(cfg.server_public_key, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
}
END_TEST

START_TEST(job_name_must_not_be_empty)
{
    expect_file_error("[job]\nname =\n", ":2: [job] name: must not be empty");
}
END_TEST

START_TEST(override_beats_the_file_and_the_last_override_wins)
{
    const char *ov[] = {"job.workers=5", " optimizer.lr = 0.25 ", "job.workers=6"};
    put(path, "[job]\nworkers = 3\n[optimizer]\nlr = 0.5\n");
    ck_assert_int_eq(dcps_config_load(&cfg, path, ov, 2, err, sizeof err), 0);
    ck_assert_int_eq(cfg.workers, 5);
    ck_assert_double_eq(cfg.lr, 0.25);
    ck_assert_int_eq(dcps_config_load(&cfg, path, ov, 3, err, sizeof err), 0);
    ck_assert_int_eq(cfg.workers, 6);
}
END_TEST

START_TEST(override_that_is_not_section_key_value_is_refused)
{
    expect_set_error("jobworkers", "--set \"jobworkers\": not section.key=value");
    expect_set_error("job.workers", "--set \"job.workers\": not section.key=value");
    expect_set_error("jobworkers=3", "--set \"jobworkers=3\": not section.key=value");
    expect_set_error(".workers=3", "--set \".workers=3\": not section.key=value");
    expect_set_error("job.=3", "--set \"job.=3\": not section.key=value");
}
END_TEST

START_TEST(override_of_an_unknown_key_is_refused)
{
    expect_set_error("job.colour=red", "--set \"job.colour=red\": [job] colour: unknown key");
    expect_set_error("jobs.workers=3",
                     "--set \"jobs.workers=3\": [jobs] workers: unknown section; did you mean "
                     "job.workers?");
    expect_set_error("data.epoch=3",
                     "--set \"data.epoch=3\": [data] epoch: unknown key; did you mean data.epochs?");
}
END_TEST

START_TEST(override_with_a_bad_value_names_its_position)
{
    expect_set_error("optimizer.lr=11", "--set \"optimizer.lr=11\": [optimizer] lr: value 11 is outside (0, 10]");
    expect_set_error("job.mode=fast",
                     "--set \"job.mode=fast\": [job] mode: \"fast\" is not one of async, sync, ssp");
}
END_TEST

START_TEST(override_is_checked_against_other_keys)
{
    const char *ov[] = {"server.heartbeat_ms=20000"};
    ck_assert_int_eq(load(NULL, 1, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, "--set: [server] dead_after_ms (10000) must be greater than "
                          "[server] heartbeat_ms (20000)");
}
END_TEST

START_TEST(load_failure_without_an_error_buffer_is_still_reported)
{
    const char *ov[] = {"job.workers=0"};
    ck_assert_int_eq(dcps_config_load(&cfg, NULL, ov, 1, NULL, 0), DCPS_E_CONFIG);
    char tiny[8];
    ck_assert_int_eq(dcps_config_load(&cfg, NULL, ov, 1, tiny, sizeof tiny), DCPS_E_CONFIG);
    ck_assert_str_eq(tiny, "--set \"");
}
END_TEST

/* Every line of the file at p is short enough for libinih. */
static void assert_lines_fit(const char *p)
{
    char line[1024];
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        ck_assert_uint_le(strlen(line), 200); /* 199 characters and the newline */
    fclose(f);
}

START_TEST(written_config_loads_back_the_same)
{
    char shards[64 * 80 + 32] = "servers.shards=";
    for (int i = 0; i < DCPS_MAX_SHARDS; i++)
        sprintf(shards + strlen(shards), "%stcp://worker-node-with-a-long-name-%02d.example.org:%d",
                i ? "," : "", i, 17000 + i);
    const char *ov[] = {shards, "job.name=round trip", "job.mode=ssp", "job.seed=18446744073709551615",
                        "job.log_level=warning", "model.layers=100,60,7", "data.train_limit=1000",
                        "optimizer.kind=dcasgd", "optimizer.lr=0.1", "optimizer.dc_epsilon=1e-7",
                        "optimizer.dc_lambda=0.3333333333333333", "optimizer.dc_adaptive=yes",
                        "compression.push=topk", "compression.density=0.001",
                        "compression.error_feedback=off", "compression.density_warmup_epochs=4",
                        "compression.clip_norm=2.5", "compression.local_lr=0.001",
                        "worker.metrics=/tmp/m;1.csv", "server.checkpoint_dir=/var/lib/dcps",
                        "security.server_public_key=rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"};
    dcps_config_t want;
    char written[160];
    int rc = dcps_config_load(&want, NULL, ov, sizeof ov / sizeof ov[0], err, sizeof err);
    ck_assert_msg(rc == 0, "load failed: %s", err);
    snprintf(written, sizeof written, "%s/written.ini", dir);
    FILE *f = fopen(written, "w");
    ck_assert_ptr_nonnull(f);
    dcps_config_write(&want, f);
    fclose(f);
    assert_lines_fit(written);
    rc = dcps_config_load(&cfg, written, NULL, 0, err, sizeof err);
    ck_assert_msg(rc == 0, "reload failed: %s", err);
    ck_assert_int_eq(cfg.n_shards, 64);
    ck_assert_str_eq(cfg.shards[63], want.shards[63]);
    ck_assert_str_eq(cfg.job_name, "round trip");
    ck_assert_uint_eq(cfg.job_id, want.job_id);
    ck_assert_double_eq(cfg.dc_lambda, 0.3333333333333333);
    ck_assert_str_eq(cfg.log_level, "warning");
    ck_assert_mem_eq(&cfg, &want, sizeof cfg);
    unlink(written);
}
END_TEST

START_TEST(dump_loads_back_as_the_defaults)
{
    char dumped[160];
    dcps_config_t want;
    snprintf(dumped, sizeof dumped, "%s/dump.ini", dir);
    FILE *f = fopen(dumped, "w");
    ck_assert_ptr_nonnull(f);
    dcps_config_dump(f);
    fclose(f);
    assert_lines_fit(dumped);
    ck_assert_int_eq(dcps_config_load(&want, NULL, NULL, 0, err, sizeof err), 0);
    int rc = dcps_config_load(&cfg, dumped, NULL, 0, err, sizeof err);
    ck_assert_msg(rc == 0, "dump does not load: %s", err);
    ck_assert_mem_eq(&cfg, &want, sizeof cfg);
    unlink(dumped);
}
END_TEST

START_TEST(dump_documents_each_key_with_its_range)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dcps_config_dump(f);
    fclose(f);
    ck_assert_ptr_nonnull(
        strstr(text, "\n[optimizer]\n; server update rule, as torch.optim defines it (dcasgd: "
                     "sgd with delay_compensation) (sgd, momentum, dcasgd, adam, adamw, "
                     "adagrad)\nkind = sgd\n"));
    ck_assert_ptr_nonnull(strstr(text, "; learning rate ((0, 10]; reloaded on SIGHUP)\nlr = 0.05\n"));
    ck_assert_ptr_nonnull(strstr(text, "; number of worker processes ([1, 1024])\nworkers = 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "\ndc_epsilon = 1e-7\n"));
    ck_assert_ptr_nonnull(strstr(text, "; topk: DGC momentum correction with this momentum factor; "
                                       "0: off ([0, 1))\nmomentum_correction = 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nshards = tcp://127.0.0.1:17001,tcp://127.0.0.1:17002\n"));
    int keys = 0, docs = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        keys += strstr(line, " =") != NULL && line[0] != ';';
        docs += line[0] == ';' && line[strlen(line) - 1] == ')';
    }
    ck_assert_int_eq(keys, 72);
    ck_assert_int_eq(docs, 72);
    free(text);
}
END_TEST

static void load_with(dcps_config_t *c, const char *const *ov, size_t n)
{
    char why[512];
    int rc = dcps_config_load(c, NULL, ov, n, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
}

START_TEST(reload_takes_reloadable_keys_and_names_them)
{
    dcps_config_t run, next;
    char changes[512], refused[512];
    const char *ov[] = {"optimizer.lr=0.02", "job.log_level=debug", "server.checkpoint_every=5",
                        "security.worker_keys_dir=/etc/dcps/keys/workers"};
    load_with(&run, NULL, 0);
    load_with(&next, ov, 4);
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused), 0);
    ck_assert_str_eq(changes, "[job] log_level info -> debug; [optimizer] lr 0.05 -> 0.02; "
                              "[server] checkpoint_every 60 -> 5; [security] worker_keys_dir "
                              "(empty) -> /etc/dcps/keys/workers");
    ck_assert_str_eq(run.worker_keys_dir, "/etc/dcps/keys/workers");
    ck_assert_double_eq(run.lr, 0.02);
    ck_assert_str_eq(run.log_level, "debug");
    ck_assert_int_eq(run.checkpoint_every, 5);
    /* Nothing changed: nothing to say. */
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused), 0);
    ck_assert_str_eq(changes, "");
}
END_TEST

START_TEST(reload_with_a_fixed_key_changed_keeps_everything)
{
    dcps_config_t run, next, before;
    char changes[512], refused[512];
    const char *ov[] = {"optimizer.lr=0.02", "model.layers=784,64,10", "job.workers=3"};
    load_with(&run, NULL, 0);
    load_with(&next, ov, 3);
    before = run;
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(refused, "[job] workers 2 -> 3; [model] layers 784,256,128,10 -> 784,64,10");
    ck_assert_mem_eq(&run, &before, sizeof run); /* lr too: all or nothing */
    /* Of [security], only worker_keys_dir may change: the shard's own key and
     * CURVE itself are in its socket since it bound. */
    const char *sec[] = {"security.curve=true", "security.server_secret_key_file=/k",
                         "security.worker_keys_dir=/w"};
    load_with(&next, sec, 3);
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(refused, "[security] curve false -> true; [security] server_secret_key_file "
                              "(empty) -> /k");
    ck_assert_mem_eq(&run, &before, sizeof run);
}
END_TEST

START_TEST(enum_names_match_the_job_file_spelling)
{
    ck_assert_str_eq(dcps_config_mode_name(DCPS_MODE_ASYNC), "async");
    ck_assert_str_eq(dcps_config_mode_name(DCPS_MODE_SSP), "ssp");
    ck_assert_str_eq(dcps_config_optimizer_name(DCPS_OPT_DCASGD), "dcasgd");
    ck_assert_str_eq(dcps_config_optimizer_name(DCPS_OPT_MOMENTUM), "momentum");
    ck_assert_str_eq(dcps_config_push_name(DCPS_PUSH_TOPK), "topk");
    ck_assert_str_eq(dcps_config_pull_name(DCPS_PULL_DELTA), "delta");
    ck_assert_str_eq(dcps_config_mode_name(3), "unknown");
    ck_assert_str_eq(dcps_config_pull_name(-1), "unknown");
}
END_TEST

/* --- [optimizer] schedule (common/schedule.h) ------------------------------------- */

START_TEST(schedule_defaults_to_constant_without_warmup)
{
    dcps_config_defaults(&cfg);
    ck_assert_int_eq(cfg.sched.kind, DCPS_SCHED_CONSTANT);
    ck_assert_int_eq(cfg.sched.warmup_steps, 0);
    ck_assert_int_eq(cfg.sched.total_steps, 0);
    ck_assert_int_eq(cfg.sched.step_every, 1000);
    ck_assert_double_eq(cfg.sched.step_gamma, 0.1);
    ck_assert_double_eq(cfg.sched.min_lr, 0);
    expect_ok("[optimizer]\nschedule = Inverse_Sqrt\n");
    ck_assert_int_eq(cfg.sched.kind, DCPS_SCHED_INVERSE_SQRT);
}
END_TEST

/* Each bad value of each schedule key, named with its key and the value. */
START_TEST(schedule_keys_outside_their_range_are_refused)
{
    expect_file_error("[optimizer]\nschedule = exponential\n",
                      ":2: [optimizer] schedule: \"exponential\" is not one of constant, step, "
                      "cosine, linear, inverse_sqrt");
    expect_file_error("[optimizer]\nwarmup_steps = -1\n",
                      ":2: [optimizer] warmup_steps: value -1 is outside [0, 1000000000]");
    expect_file_error("[optimizer]\nwarmup_steps = 1000000001\n",
                      ":2: [optimizer] warmup_steps: value 1000000001 is outside [0, 1000000000]");
    expect_file_error("[optimizer]\nwarmup_steps = 1.5\n",
                      ":2: [optimizer] warmup_steps: \"1.5\" is not an integer");
    expect_file_error("[optimizer]\ntotal_steps = -10\n",
                      ":2: [optimizer] total_steps: value -10 is outside [0, 1000000000]");
    expect_file_error("[optimizer]\ntotal_steps = many\n",
                      ":2: [optimizer] total_steps: \"many\" is not an integer");
    expect_file_error("[optimizer]\nstep_every = 0\n",
                      ":2: [optimizer] step_every: value 0 is outside [1, 1000000000]");
    expect_file_error("[optimizer]\nstep_gamma = 0\n",
                      ":2: [optimizer] step_gamma: value 0 is outside (0, 1]");
    expect_file_error("[optimizer]\nstep_gamma = 1.01\n",
                      ":2: [optimizer] step_gamma: value 1.01 is outside (0, 1]");
    expect_file_error("[optimizer]\nstep_gamma = nan\n",
                      ":2: [optimizer] step_gamma: \"nan\" is not a finite number");
    expect_file_error("[optimizer]\nmin_lr = -0.001\n",
                      ":2: [optimizer] min_lr: value -0.001 is outside [0, 10]");
    expect_file_error("[optimizer]\nmin_lr = 11\n",
                      ":2: [optimizer] min_lr: value 11 is outside [0, 10]");
    expect_set_error("optimizer.step_every=-3", "--set \"optimizer.step_every=-3\": [optimizer] "
                                                "step_every: value -3 is outside [1, 1000000000]");
    expect_ok("[optimizer]\nschedule = step\nstep_every = 1\nstep_gamma = 1\n");
    ck_assert_double_eq(cfg.sched.step_gamma, 1);
}
END_TEST

START_TEST(cosine_and_linear_need_total_steps_beyond_warmup)
{
    expect_file_error("[optimizer]\nschedule = cosine\n",
                      ": [optimizer] schedule = cosine needs [optimizer] total_steps (0) greater "
                      "than [optimizer] warmup_steps (0): the lr falls to min_lr between them");
    expect_file_error("[optimizer]\nschedule = linear\nwarmup_steps = 100\ntotal_steps = 100\n",
                      ": [optimizer] schedule = linear needs [optimizer] total_steps (100) "
                      "greater than [optimizer] warmup_steps (100): the lr falls to min_lr "
                      "between them");
    const char *ov[] = {"optimizer.schedule=cosine", "optimizer.warmup_steps=50",
                        "optimizer.total_steps=20"};
    ck_assert_int_eq(load(NULL, 3, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, "--set: [optimizer] schedule = cosine needs [optimizer] total_steps "
                          "(20) greater than [optimizer] warmup_steps (50): the lr falls to "
                          "min_lr between them");
    expect_ok("[optimizer]\nschedule = linear\nwarmup_steps = 100\ntotal_steps = 101\n");
    /* The other schedules do not read total_steps. */
    expect_ok("[optimizer]\nschedule = inverse_sqrt\nwarmup_steps = 100\n");
    expect_ok("[optimizer]\nschedule = step\nwarmup_steps = 100\n");
}
END_TEST

START_TEST(min_lr_above_lr_is_refused)
{
    expect_file_error("[optimizer]\nlr = 0.01\nmin_lr = 0.02\n",
                      ": [optimizer] min_lr (0.02) must be at most [optimizer] lr (0.01): the "
                      "schedule falls from lr to min_lr");
    const char *ov[] = {"optimizer.min_lr=0.1"}; /* lr: 0.05 */
    ck_assert_int_eq(load(NULL, 1, ov), DCPS_E_CONFIG);
    ck_assert_str_eq(err, "--set: [optimizer] min_lr (0.1) must be at most [optimizer] lr "
                          "(0.05): the schedule falls from lr to min_lr");
    expect_ok("[optimizer]\nlr = 0.02\nmin_lr = 0.02\nschedule = cosine\ntotal_steps = 10\n");
    ck_assert_double_eq(cfg.sched.min_lr, 0.02);
}
END_TEST

/* [compression] warmup_steps (dense pushes) and [optimizer] warmup_steps (the
 * lr's ramp) are two keys of two fields. */
START_TEST(optimizer_and_compression_warmup_steps_are_different_keys)
{
    expect_ok("[optimizer]\nwarmup_steps = 7\n[compression]\nwarmup_steps = 3\n");
    ck_assert_int_eq(cfg.sched.warmup_steps, 7);
    ck_assert_int_eq(cfg.warmup_steps, 3);
    expect_file_error("[optimizer]\nwarmup_steps = 7\nwarmup_steps = 8\n",
                      ":3: [optimizer] warmup_steps: key given twice (first on line 2)");
}
END_TEST

START_TEST(schedule_keys_write_back_and_are_not_reloaded)
{
    dcps_config_t run, next;
    char changes[512], refused[512], *text = NULL;
    size_t len = 0;
    expect_ok("[optimizer]\nlr = 0.1\nschedule = cosine\nwarmup_steps = 5\ntotal_steps = 50\n"
              "min_lr = 0.001\nstep_every = 7\nstep_gamma = 0.5\n");
    run = cfg;
    FILE *f = open_memstream(&text, &len);
    dcps_config_write(&run, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "\n[optimizer]\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nschedule = cosine\nwarmup_steps = 5\ntotal_steps = 50\n"
                                       "step_every = 7\nstep_gamma = 0.5\nmin_lr = 0.001\n"));
    expect_ok(text);
    ck_assert_mem_eq(&cfg.sched, &run.sched, sizeof run.sched);
    free(text);
    /* lr reloads, and with it the schedule's base; the schedule's own keys do not. */
    next = run;
    next.lr = 0.2;
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused), 0);
    ck_assert_str_eq(changes, "[optimizer] lr 0.1 -> 0.2");
    next.sched.total_steps = 60;
    ck_assert_int_eq(dcps_config_reload(&run, &next, changes, sizeof changes, refused, sizeof refused),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(refused, "[optimizer] total_steps 50 -> 60");
    ck_assert_int_eq(run.sched.total_steps, 50);
}
END_TEST

/* Each test writes its files in a directory of its own, made in its process. */
static void setup(void)
{
    ck_assert_msg(dcps_scratch_new(&scratch) == 0, "mkdtemp: %s", strerror(errno));
    dir = scratch.path;
    ck_assert_msg(snprintf(path, sizeof path, "%s/job.ini", dir) < (int)sizeof path,
                  "TMPDIR is too long: %s", dir);
}

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, defaults_are_the_documented_values);
    tcase_add_test(tc, job_id_is_fnv1a_of_the_name_unless_given);
    tcase_add_test(tc, comments_blank_lines_and_inline_comments_are_ignored);
    tcase_add_test(tc, missing_file_names_the_path_and_the_reason);
    tcase_add_test(tc, unknown_key_names_line_section_and_key);
    tcase_add_test(tc, unknown_key_suggests_the_closest_key);
    tcase_add_test(tc, unknown_section_is_refused_at_its_first_key);
    tcase_add_test(tc, key_before_any_section_is_refused);
    tcase_add_test(tc, key_given_twice_names_both_lines);
    tcase_add_test(tc, key_given_twice_in_split_sections_is_refused);
    tcase_add_test(tc, line_without_equals_is_a_syntax_error);
    tcase_add_test(tc, unclosed_section_is_a_syntax_error);
    tcase_add_test(tc, earliest_error_in_the_file_is_reported);
    tcase_add_test(tc, line_numbers_count_comments_blank_lines_and_continuations);
    tcase_add_test(tc, line_too_long_is_refused);
    tcase_add_test(tc, line_of_199_characters_is_the_longest_accepted);
    tcase_add_test(tc, string_that_would_not_fit_a_line_is_refused);
    tcase_add_test(tc, string_that_would_not_read_back_is_refused);
    tcase_add_test(tc, bad_integer_is_refused);
    tcase_add_test(tc, trailing_junk_after_a_number_is_refused);
    tcase_add_test(tc, empty_number_is_refused);
    tcase_add_test(tc, integer_below_its_range_is_refused);
    tcase_add_test(tc, integer_above_its_range_is_refused);
    tcase_add_test(tc, integer_beyond_long_is_out_of_range);
    tcase_add_test(tc, uint64_refuses_negative_and_overflow);
    tcase_add_test(tc, exclusive_lower_bound_refuses_the_bound);
    tcase_add_test(tc, exclusive_upper_bound_refuses_the_bound);
    tcase_add_test(tc, nan_and_infinity_are_refused);
    tcase_add_test(tc, bad_enum_lists_the_choices);
    tcase_add_test(tc, bad_bool_lists_the_spellings);
    tcase_add_test(tc, bad_log_level_lists_the_levels);
    tcase_add_test(tc, enums_bools_and_levels_accept_every_spelling);
    tcase_add_test(tc, shards_are_trimmed_and_counted);
    tcase_add_test(tc, shard_list_with_an_empty_entry_is_refused);
    tcase_add_test(tc, shard_with_a_bad_scheme_or_a_space_is_refused);
    tcase_add_test(tc, shard_list_continues_on_indented_lines);
    tcase_add_test(tc, too_many_shards_are_refused_at_the_key);
    tcase_add_test(tc, scalar_value_cannot_continue_on_an_indented_line);
    tcase_add_test(tc, indented_first_key_of_a_section_is_a_key);
    tcase_add_test(tc, layers_give_the_parameter_count);
    tcase_add_test(tc, layers_with_one_entry_are_refused);
    tcase_add_test(tc, layer_of_size_zero_or_too_big_is_refused);
    tcase_add_test(tc, too_many_layers_are_refused);
    tcase_add_test(tc, model_with_2_to_the_32_parameters_is_refused);
    tcase_add_test(tc, more_shards_than_parameter_blocks_are_refused);
    tcase_add_test(tc, params_is_layers_auto_or_a_count);
    tcase_add_test(tc, bad_params_are_named_in_the_error);
    tcase_add_test(tc, params_too_few_for_the_shards_are_refused_when_known);
    tcase_add_test(tc, params_writes_back_and_is_not_reloaded);
    tcase_add_test(tc, dead_after_must_exceed_heartbeat);
    tcase_add_test(tc, curve_is_refused_only_by_a_libzmq_without_it);
    tcase_add_test(tc, compressed_push_and_pull_and_the_pipeline_are_supported);
    tcase_add_test(tc, density_outside_0_to_1_is_refused);
    tcase_add_test(tc, density_warmup_falls_from_a_quarter_to_the_density);
    tcase_add_test(tc, dgc_and_pipeline_keys_outside_their_range_are_refused);
    tcase_add_test(tc, momentum_correction_needs_error_feedback);
    tcase_add_test(tc, parts_in_a_sync_job_with_checkpoints_are_taken);
    tcase_add_test(tc, optimizer_defaults_are_torch_optims);
    tcase_add_test(tc, optimizer_keys_outside_their_range_are_refused);
    tcase_add_test(tc, unknown_optimizer_kind_lists_the_valid_ones);
    tcase_add_test(tc, nesterov_needs_momentum_and_names_the_keys);
    tcase_add_test(tc, adamw_lr_times_weight_decay_must_be_below_1);
    tcase_add_test(tc, dc_adaptive_contradicting_delay_compensation_is_refused);
    tcase_add_test(tc, optimizer_keys_write_and_load_back);
    tcase_add_test(tc, server_public_key_must_be_empty_or_40_z85_characters);
    tcase_add_test(tc, job_name_must_not_be_empty);
    tcase_add_test(tc, override_beats_the_file_and_the_last_override_wins);
    tcase_add_test(tc, override_that_is_not_section_key_value_is_refused);
    tcase_add_test(tc, override_of_an_unknown_key_is_refused);
    tcase_add_test(tc, override_with_a_bad_value_names_its_position);
    tcase_add_test(tc, override_is_checked_against_other_keys);
    tcase_add_test(tc, load_failure_without_an_error_buffer_is_still_reported);
    tcase_add_test(tc, written_config_loads_back_the_same);
    tcase_add_test(tc, dump_loads_back_as_the_defaults);
    tcase_add_test(tc, dump_documents_each_key_with_its_range);
    tcase_add_test(tc, enum_names_match_the_job_file_spelling);
    tcase_add_test(tc, reload_takes_reloadable_keys_and_names_them);
    tcase_add_test(tc, reload_with_a_fixed_key_changed_keeps_everything);
    tcase_add_test(tc, schedule_defaults_to_constant_without_warmup);
    tcase_add_test(tc, schedule_keys_outside_their_range_are_refused);
    tcase_add_test(tc, cosine_and_linear_need_total_steps_beyond_warmup);
    tcase_add_test(tc, min_lr_above_lr_is_refused);
    tcase_add_test(tc, optimizer_and_compression_warmup_steps_are_different_keys);
    tcase_add_test(tc, schedule_keys_write_back_and_are_not_reloaded);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
