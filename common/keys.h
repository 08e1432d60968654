/* dcps — CURVE keys and the files that hold them.
 *
 * With [security] curve = true, ZeroMQ's CURVE mechanism (RFC 26) encrypts and
 * authenticates every connection between a worker and a shard. A key is 32
 * bytes; in a file and in the job file it is written in Z85 (RFC 32): 40
 * characters. A key file holds exactly one key, optionally followed by a
 * newline, and nothing else; a secret key's file must not be accessible by
 * group or others, as ssh requires of its private keys.
 *
 * This module owns the reading, checking and writing of key files and of the
 * directory of the workers' public keys (a key set). It does not own sockets:
 * the shard's ZAP handler (server/auth.h) and the client (worker/client.c) set
 * the keys on theirs. Errors are a code and a sentence that names the file. */
#ifndef DCPS_KEYS_H
#define DCPS_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DCPS_KEY_BYTES 32
#define DCPS_KEY_Z85 40 /* characters of a key in Z85, without a NUL */

/* 1 if this libzmq was built with CURVE (zmq_has("curve")), else 0. */
int dcps_keys_available(void);

/* Checks that text[0, len) is one Z85 key and, if key is not NULL, decodes it
 * there. Returns 0, or DCPS_E_DATA with what is wrong in why ("is 39
 * characters; a Z85 key has 40", "'~' is not a Z85 character"), key unchanged. */
int dcps_key_parse(const char *text, size_t len, uint8_t *key, char *why, size_t n);

/* Writes key as Z85 into text (DCPS_KEY_Z85 + 1 bytes, NUL-terminated). */
void dcps_key_text(const uint8_t *key, char *text);

/* Reads the key file `path` into key (DCPS_KEY_BYTES). With secret, a file that
 * group or others may access is refused. Returns 0; DCPS_E_IO if the file
 * cannot be read or is too open; DCPS_E_DATA if it is not one key. The sentence
 * in err starts with path; key is unchanged on failure. */
int dcps_key_read(const char *path, bool secret, uint8_t *key, char *err, size_t errlen);

/* The public key of a secret key (zmq_curve_public). Returns 0, or DCPS_E_ZMQ
 * if this libzmq has no CURVE. */
int dcps_key_public(const uint8_t *secret, uint8_t *pub);

/* Makes a new key pair: the secret key into `path` (created with mode 0600) and
 * the public key into path.pub (0644), each one key and a newline, and the
 * public key's Z85 text into pub (DCPS_KEY_Z85 + 1 bytes). Refuses to replace
 * an existing file. Returns 0, or a code with a sentence naming the file in
 * err; then neither file was created. */
int dcps_key_generate(const char *path, char *pub, char *err, size_t errlen);

/* The public keys of the workers a shard admits: the *.pub files of a
 * directory, each a key file (names starting with '.' are skipped), and the
 * ranks each key may speak for, which its file's name says:
 *
 *   NAME@RANKS.pub   RANKS is `all`, or ranks and ranges of ranks separated by
 *                    commas: gpu-node-3@0-3.pub, trainer@0,2,5-7.pub, ops@all.pub
 *
 * NAME is anything before the last '@' (not empty). A .pub file whose name does
 * not say its ranks is refused, with the name it should have. */
typedef struct dcps_keyset dcps_keyset_t;

/* Reads every *.pub file of dir, for a job of `workers` workers (0: any number;
 * otherwise a rank of workers or more in a name is refused). Returns the set, or
 * NULL with a code in *rc and a sentence in err naming the directory or the bad
 * file: not a key file, a name without ranks or with a bad list of them, a key
 * held by two files; a directory without any *.pub file is refused too (nobody
 * could connect). */
dcps_keyset_t *dcps_keyset_load(const char *dir, int workers, int *rc, char *err,
                                size_t errlen);

/* The number of keys in set. */
size_t dcps_keyset_count(const dcps_keyset_t *set);

/* The name of the file (in the directory) that holds key, or NULL if set does
 * not hold it. The name is set's, valid until set is destroyed. */
const char *dcps_keyset_find(const dcps_keyset_t *set, const uint8_t *key);

/* The key at position i (0 <= i < count), in no particular order; set's. */
const uint8_t *dcps_keyset_key(const dcps_keyset_t *set, size_t i);

/* Whether key may speak for rank: 1 if its file's name lists rank, 0 if it does
 * not, −1 if set does not hold key. */
int dcps_keyset_admits(const dcps_keyset_t *set, const uint8_t *key, uint32_t rank);

/* Frees *set and sets it to NULL; nothing if NULL. */
void dcps_keyset_destroy(dcps_keyset_t **set);

#endif
