/* dcps — [security] curve = true, the key files (common/keys.h) and the ranks
 * their names give (NAME@RANKS.pub), dcps-server --keygen, and the keys each
 * side needs; real shards that admit only the workers whose public keys are in
 * worker_keys_dir are tests/daemon/test_security.c. Exits 77 when libzmq has no
 * CURVE. */
#include <check.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "common/keys.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "tests/security_keys.h"

#define KEY_A "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7" /* RFC 26's example public key */
#define KEY_B "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID" /* and its example client key */

/* Writes text to h_dir()/name with the given mode; returns the path. */
static const char *put(const char *name, const char *text, mode_t mode)
{
    const char *p = h_write(name, text);
    ck_assert_int_eq(chmod(p, mode), 0);
    return p;
}

/* --- key files --------------------------------------------------------------------- */

START_TEST(a_key_file_holds_one_z85_key_and_at_most_a_newline)
{
    uint8_t key[DCPS_KEY_BYTES], want[DCPS_KEY_BYTES];
    const char *err;
    ck_assert_ptr_nonnull(zmq_z85_decode(want, KEY_A));
    ck_assert_int_eq(read_key(put("nl.pub", KEY_A "\n", 0644), false, key, &err), 0);
    ck_assert_mem_eq(key, want, sizeof key);
    memset(key, 0, sizeof key);
    ck_assert_int_eq(read_key(put("bare.pub", KEY_A, 0644), false, key, &err), 0);
    ck_assert_mem_eq(key, want, sizeof key);
    char text[DCPS_KEY_Z85 + 1];
    dcps_key_text(key, text);
    ck_assert_str_eq(text, KEY_A);
}
END_TEST

START_TEST(a_key_of_the_wrong_length_is_refused_naming_the_file)
{
    uint8_t key[DCPS_KEY_BYTES];
    const char *err, *p = put("short.pub", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf\n", 0644);
    char want[700];
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    snprintf(want, sizeof want, "%s: is 39 characters; a Z85 key has 40", p);
    ck_assert_str_eq(err, want);
    p = put("empty.pub", "\n", 0644);
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    snprintf(want, sizeof want, "%s: is empty; a key file holds one Z85 key of 40 characters", p);
    ck_assert_str_eq(err, want);
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    p = put("big.pub", big, 0644);
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "more than 128 bytes"), "%s", err);
}
END_TEST

START_TEST(a_key_with_a_character_outside_z85_is_refused)
{
    uint8_t key[DCPS_KEY_BYTES];
    const char *err, *p = put("tilde.pub", "rq:rM~}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n", 0644);
    char want[700];
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    snprintf(want, sizeof want, "%s: '~' is not a Z85 character", p);
    ck_assert_str_eq(err, want);
    p = put("ctrl.pub", "rq:rM\001}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", 0644);
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "byte 0x01 is not a Z85 character"), "%s", err);
    /* Z85 digits all, but "#####" is worth more than 2^32. */
    p = put("big5.pub", "#####>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", 0644);
    ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "worth more than 32 bits"), "%s", err);
}
END_TEST

START_TEST(anything_after_the_key_but_one_newline_is_refused)
{
    static const char *const tails[] = {" # worker 3\n", "\n\n", "\r\n", KEY_A "\n"};
    uint8_t key[DCPS_KEY_BYTES];
    const char *err;
    char text[128], want[700];
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        snprintf(text, sizeof text, "%s%s", KEY_A, tails[i]);
        const char *p = put("tail.pub", text, 0644);
        ck_assert_int_eq(read_key(p, false, key, &err), DCPS_E_DATA);
        snprintf(want, sizeof want,
                 "%s: trailing data after the 40-character key (%zu bytes); only a newline may "
                 "follow it",
                 p, strlen(tails[i]) - 1);
        ck_assert_str_eq(err, want);
    }
}
END_TEST

START_TEST(a_secret_key_that_group_or_others_may_read_is_refused)
{
    uint8_t key[DCPS_KEY_BYTES];
    const char *err;
    char want[700];
    static const mode_t open_modes[] = {0640, 0604, 0660, 0644, 0610};
    for (size_t i = 0; i < sizeof open_modes / sizeof open_modes[0]; i++) {
        const char *p = put("secret", KEY_A "\n", open_modes[i]);
        ck_assert_int_eq(read_key(p, true, key, &err), DCPS_E_IO);
        snprintf(want, sizeof want,
                 "%s: permissions %04o are too open for a secret key: group and others must have "
                 "no access (chmod 600 %s)",
                 p, (unsigned)open_modes[i], p);
        ck_assert_str_eq(err, want);
        ck_assert_int_eq(read_key(p, false, key, &err), 0); /* a public key may be read by all */
    }
    ck_assert_int_eq(read_key(put("secret", KEY_A "\n", 0600), true, key, &err), 0);
    ck_assert_int_eq(read_key(put("secret", KEY_A "\n", 0400), true, key, &err), 0);
    ck_assert_int_eq(read_key("/nonexistent/secret", true, key, &err), DCPS_E_IO);
    ck_assert_str_eq(err, "/nonexistent/secret: cannot open: No such file or directory");
}
END_TEST

/* The public key of a secret key file, from libzmq itself. */
static void public_of(const char *secret_path, char *pub)
{
    uint8_t secret[DCPS_KEY_BYTES];
    char sz[DCPS_KEY_Z85 + 1];
    const char *err;
    ck_assert_msg(read_key(secret_path, true, secret, &err) == 0, "%s", err);
    dcps_key_text(secret, sz);
    ck_assert_int_eq(zmq_curve_public(pub, sz), 0);
}

START_TEST(keygen_writes_a_pair_and_refuses_to_overwrite)
{
    char path[512], pub[DCPS_KEY_Z85 + 1], out[600], stdout_text[128];
    struct stat st;
    snprintf(path, sizeof path, "%s/k", h_dir());
    const char *argv[] = {"--keygen", path, NULL};
    mode_t old = umask(022);
    int status = h_wait(h_spawn("dcps-server", "keygen", argv), 10000);
    umask(old);
    ck_assert_msg(status == 0, "keygen: %s", h_slurp(h_path("keygen", "err")));
    public_of(path, pub);
    snprintf(stdout_text, sizeof stdout_text, "%s\n", pub);
    ck_assert_str_eq(h_slurp(h_path("keygen", "out")), stdout_text); /* stdout: the public key */
    snprintf(out, sizeof out, "%s.pub", path);
    ck_assert_str_eq(h_slurp(out), stdout_text); /* PATH.pub: the same, a key file */
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(stat(out, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0644);

    /* Again: refused, exit status 1, the files as they were. */
    status = h_wait(h_spawn("dcps-server", "keygen2", argv), 10000);
    ck_assert_int_eq(status, 1);
    ck_assert_msg(strstr(h_slurp(h_path("keygen2", "err")), "exists already; not replaced"), "%s",
                  h_slurp(h_path("keygen2", "err")));
    ck_assert_str_eq(h_slurp(h_path("keygen2", "out")), "");
    char again[DCPS_KEY_Z85 + 1];
    public_of(path, again);
    ck_assert_str_eq(again, pub);

    /* Only the .pub is in the way: refused, and no secret key is left behind. */
    snprintf(path, sizeof path, "%s/k2", h_dir());
    h_write("k2.pub", "x\n");
    status = h_wait(h_spawn("dcps-server", "keygen3", argv), 10000);
    ck_assert_int_eq(status, 1);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(out, sizeof out, "%s.pub", path);
    ck_assert_str_eq(h_slurp(out), "x\n");
}
END_TEST

/* A directory h_dir()/name holding the given files (name, text). */
static const char *key_dir(const char *name, const char *const *files, size_t n)
{
    static char dir[512];
    char file[600];
    snprintf(dir, sizeof dir, "%s/%s", h_dir(), name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    for (size_t i = 0; i < n; i += 2) {
        snprintf(file, sizeof file, "%s/%s", name, files[i]);
        h_write(file, files[i + 1]);
    }
    return dir;
}

START_TEST(worker_keys_dir_admits_its_pub_files_and_refuses_a_bad_one)
{
    char err[1024], want[1200];
    int rc = 0;
    uint8_t a[DCPS_KEY_BYTES], b[DCPS_KEY_BYTES], other[DCPS_KEY_BYTES] = {0};
    zmq_z85_decode(a, KEY_A);
    zmq_z85_decode(b, KEY_B);
    const char *const good[] = {"w0@0.pub", KEY_A "\n",
                                "w1@1,3.pub", KEY_B "\n",
                                "README", "not a key",
                                ".w9.pub", "not a key either"};
    const char *dir = key_dir("good", good, 8);
    dcps_keyset_t *set = dcps_keyset_load(dir, 4, &rc, err, sizeof err);
    ck_assert_msg(set != NULL, "%s", err);
    ck_assert_uint_eq(dcps_keyset_count(set), 2);
    ck_assert_str_eq(dcps_keyset_find(set, a), "w0@0.pub");
    ck_assert_ptr_null(dcps_keyset_find(set, other));
    ck_assert_int_eq(dcps_keyset_admits(set, a, 0), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 1), 0);
    ck_assert_int_eq(dcps_keyset_admits(set, b, 1), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, b, 2), 0);
    ck_assert_int_eq(dcps_keyset_admits(set, b, 3), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, other, 0), -1);
    dcps_keyset_destroy(&set);
    ck_assert_ptr_null(set);

    const char *const bad[] = {"w0@0.pub", KEY_A "\n", "w1@1.pub", "Yne@$w-vo<fVvi]a<NY6T1ed\n"};
    dir = key_dir("bad", bad, 4);
    ck_assert_ptr_null(dcps_keyset_load(dir, 4, &rc, err, sizeof err));
    ck_assert_int_eq(rc, DCPS_E_DATA);
    snprintf(want, sizeof want, "%s/w1@1.pub: is 24 characters; a Z85 key has 40", dir);
    ck_assert_str_eq(err, want);

    const char *const none[] = {"README", "keys go here"};
    dir = key_dir("empty", none, 2);
    ck_assert_ptr_null(dcps_keyset_load(dir, 4, &rc, err, sizeof err));
    ck_assert_int_eq(rc, DCPS_E_DATA);
    snprintf(want, sizeof want, "%s: no *.pub file, so no worker could connect", dir);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);

    ck_assert_ptr_null(dcps_keyset_load("/nonexistent/keys", 4, &rc, err, sizeof err));
    ck_assert_int_eq(rc, DCPS_E_IO);
    ck_assert_str_eq(err,
                     "/nonexistent/keys: cannot open the directory: No such file or directory");
}
END_TEST

/* Loads a directory holding one key file `name` (KEY_A) for a job of `workers`;
 * returns the code, the sentence in err (after the directory's path). */
static int load_one(const char *name, int workers, dcps_keyset_t **set, const char **err)
{
    static int dirs;
    static char buf[1024];
    char dname[32];
    int rc;
    snprintf(dname, sizeof dname, "one%d", dirs++);
    const char *const files[] = {name, KEY_A "\n"};
    const char *dir = key_dir(dname, files, 2);
    *set = dcps_keyset_load(dir, workers, &rc, buf, sizeof buf);
    *err = strncmp(buf, dir, strlen(dir)) == 0 ? buf + strlen(dir) : buf;
    return rc;
}

START_TEST(key_file_names_say_which_ranks_a_key_may_speak_for)
{
    dcps_keyset_t *set;
    const char *err;
    uint8_t a[DCPS_KEY_BYTES];
    zmq_z85_decode(a, KEY_A);

    ck_assert_int_eq(load_one("gpu-node-3.pub", 4, &set, &err), DCPS_E_DATA);
    ck_assert_str_eq(err, "/gpu-node-3.pub: the name does not say which ranks this key may "
                          "speak for: rename it gpu-node-3@RANKS.pub, for example "
                          "gpu-node-3@0-3.pub (ranks 0 to 3), gpu-node-3@0,2,5.pub or "
                          "gpu-node-3@all.pub (any rank)");
    static const char *const lists[] = {"", "1-", "a", "1,,2", "-1", "1-2-3", " 1", "1,",
                                        "4294967296", "ALL", "0x1"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        char name[64], want[256];
        snprintf(name, sizeof name, "w@%s.pub", lists[i]);
        ck_assert_int_eq(load_one(name, 0, &set, &err), DCPS_E_DATA);
        snprintf(want, sizeof want,
                 "/%s: '%s' is not a list of ranks: after the last '@' comes all, or ranks and "
                 "ranges of ranks separated by commas, such as 0-3,5",
                 name, lists[i]);
        ck_assert_str_eq(err, want);
    }
    ck_assert_int_eq(load_one("w@5-3.pub", 0, &set, &err), DCPS_E_DATA);
    ck_assert_str_eq(err, "/w@5-3.pub: the range 5-3 of its ranks runs backwards (write 3-5)");
    ck_assert_int_eq(load_one("w@1,4.pub", 4, &set, &err), DCPS_E_DATA);
    ck_assert_str_eq(err, "/w@1,4.pub: rank 4 is outside the job, whose 4 workers are ranks 0 "
                          "to 3");
    ck_assert_int_eq(load_one("w@0-7.pub", 4, &set, &err), DCPS_E_DATA);
    ck_assert_ptr_nonnull(strstr(err, "rank 7 is outside the job"));

    /* Good names: the last '@' starts the ranks; ranges include both ends. */
    ck_assert_int_eq(load_one("me@host@0-1,5.pub", 8, &set, &err), 0);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 0), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 1), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 2), 0);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 5), 1);
    dcps_keyset_destroy(&set);
    ck_assert_int_eq(load_one("ops@all.pub", 4, &set, &err), 0);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 3), 1);
    ck_assert_int_eq(dcps_keyset_admits(set, a, 1000), 1);
    dcps_keyset_destroy(&set);
    ck_assert_int_eq(load_one("w@4000000.pub", 0, &set, &err), 0); /* no job to check against */
    dcps_keyset_destroy(&set);

    /* One key, one file. */
    char err2[1024], want[1200];
    int rc;
    const char *const twice[] = {"x@0.pub", KEY_A "\n", "y@1.pub", KEY_A "\n"};
    const char *dir = key_dir("twice", twice, 4);
    ck_assert_ptr_null(dcps_keyset_load(dir, 4, &rc, err2, sizeof err2));
    ck_assert_int_eq(rc, DCPS_E_DATA);
    ck_assert_msg(strstr(err2, "holds the same key as ") &&
                      strstr(err2, "; give each key one file, whose name lists all the ranks it "
                                   "may speak for"),
                  "%s", err2);
    snprintf(want, sizeof want, "%s/", dir);
    ck_assert_msg(strncmp(err2, want, strlen(want)) == 0, "%s", err2);
}
END_TEST

START_TEST(each_side_needs_its_own_keys_when_curve_is_on)
{
    dcps_config_t cfg;
    char err[512];
    const char *on[] = {"security.curve=true"};
    ck_assert_int_eq(dcps_config_load(&cfg, NULL, on, 1, err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_supported(&cfg, "job.ini", err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_check_role(&cfg, "job.ini", DCPS_ROLE_SERVER, err, sizeof err),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(err,
                     "job.ini: [security] curve = true needs [security] server_secret_key_file "
                     "(the shards' secret key file), which is not set");
    ck_assert_int_eq(dcps_config_check_role(&cfg, NULL, DCPS_ROLE_WORKER, err, sizeof err),
                     DCPS_E_CONFIG);
    ck_assert_str_eq(err, "[security] curve = true needs [security] server_public_key (the shards' "
                          "public key), which is not set");
    snprintf(cfg.server_secret_key_file, sizeof cfg.server_secret_key_file, "/etc/dcps/keys/s");
    snprintf(cfg.server_public_key, sizeof cfg.server_public_key, "%s", KEY_A);
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_SERVER, err, sizeof err),
                     DCPS_E_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "needs [security] worker_keys_dir"));
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_WORKER, err, sizeof err),
                     DCPS_E_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "needs [security] worker_secret_key_file"));
    snprintf(cfg.worker_keys_dir, sizeof cfg.worker_keys_dir, "/etc/dcps/keys/workers");
    snprintf(cfg.worker_secret_key_file, sizeof cfg.worker_secret_key_file, "/etc/dcps/keys/w");
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_SERVER, err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_WORKER, err, sizeof err), 0);
    dcps_config_defaults(&cfg); /* curve = false needs nothing */
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_SERVER, err, sizeof err), 0);
    ck_assert_int_eq(dcps_config_check_role(&cfg, "j", DCPS_ROLE_WORKER, err, sizeof err), 0);
}
END_TEST

int main(void)
{
    if (!dcps_keys_available()) {
        printf("SKIP: this libzmq has no CURVE\n");
        return 77;
    }
    Suite *s = suite_create("security");
    TCase *files = tcase_create("key files");
    tcase_add_test(files, a_key_file_holds_one_z85_key_and_at_most_a_newline);
    tcase_add_test(files, a_key_of_the_wrong_length_is_refused_naming_the_file);
    tcase_add_test(files, a_key_with_a_character_outside_z85_is_refused);
    tcase_add_test(files, anything_after_the_key_but_one_newline_is_refused);
    tcase_add_test(files, a_secret_key_that_group_or_others_may_read_is_refused);
    tcase_add_test(files, keygen_writes_a_pair_and_refuses_to_overwrite);
    tcase_add_test(files, worker_keys_dir_admits_its_pub_files_and_refuses_a_bad_one);
    tcase_add_test(files, key_file_names_say_which_ranks_a_key_may_speak_for);
    tcase_add_test(files, each_side_needs_its_own_keys_when_curve_is_on);
    suite_add_tcase(s, files);
    return dcps_test_run(s);
}
