/* dcps — a shard's checkpoints.
 *
 * This module owns the checkpoint files of a shard in `[server] checkpoint_dir`:
 * their format, writing one atomically, choosing the one to restore and
 * refusing the ones that do not fit, and pruning old ones. It does not decide
 * when to write (server/daemon.c, through the router: every checkpoint_every
 * seconds and on SIGTERM), and it knows the shard's and the consistency
 * model's state only through their calls: dcps_shard_stats for the header,
 * dcps_shard_spans for the floats, dcps_shard_save and dcps_consistency_save
 * for the rest (and their loads).
 *
 * A file is named shard-<index>-<seq>-v<version>.ckpt (seq zero padded to 10
 * digits, version to 12): seq is one more than the highest seq of any
 * checkpoint of that shard in the directory, so the newest is the highest seq
 * even after a restore from an older one repeats versions. It holds, all
 * integers little-endian (the format is the host's memory, and dcps builds only
 * on little-endian hosts):
 *
 *   header, 128 bytes: "DCPSCKPT", format 3, header size, job id, n_params,
 *       range lo and hi, shard index, workers, the update rule (enum
 *       dcps_optimizer, never dcasgd), mode, pull, flags (1 initialised, 2
 *       adaptive, 4 delay compensation), version, seq, creation time (Unix
 *       seconds), floats, payload length, and a CRC-32C of the header before it;
 *   payload: the shard's one float allocation (w, the rule's state arrays and
 *       the adaptive mean square, DC-ASGD
 *       backups or delta mirrors, sync sum, sync mirror, diff; shard.c's
 *       layout), every rank's session record (server/session.h: the session,
 *       its last push's seq, and flags 1 pushed, 2 applied), the push and
 *       pull counters, the staleness histogram, then the consistency model's round, contributions,
 *       max_ahead and every rank's clock and contributed flag, then (format 3) the
 *       parameter groups: a word count w and w words of dcps_groups_save (0: none),
 *       the model's buffers (a word count, dcps_buffers_save), and every rank's
 *       record of its latest push in parts and of a cut push it carries (a word
 *       count, dcps_shard_parts_save; server/parts.h), each of the last two
 *       absent from a file written before it was kept;
 *   trailer: a CRC-32C (Castagnoli) of header and payload.
 *
 * Format 2 is format 3 written before the rules were apart from delay
 * compensation: its kind dcasgd reads as sgd with delay compensation (adaptive
 * as its flag 2 says), and its flag 2 means nothing for the other kinds. Its
 * floats are laid out as format 3's for the same job, so it restores exactly.
 * Format 1, written before sessions, held one word per rank instead of the
 * session record (the highest applied seq): it is still read, with every rank
 * left without a session (each says HELLO again), and logged as such.
 *
 * What is not in a file: membership and liveness (joined, left, dead, done,
 * last heard), waiting pulls and barriers, the delta mirrors' tags (no worker's
 * tag is trusted after a restore: see dcps_shard_restored) and the router's
 * byte counts.
 *
 * Functions return 0 (restore: 0 or 1) or a negative DCPS_E_… code with a
 * sentence in err that names the file or directory and what is wrong. They
 * block on the file system: the daemon calls them on its loop thread, which
 * serves nothing meanwhile. */
#ifndef DCPS_CHECKPOINT_H
#define DCPS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "server/consistency.h"
#include "server/shard.h"

#define DCPS_CHECKPOINT_FORMAT 3 /* 3: every rule; formats 1 and 2 are read too */

/* Creates dir if it is missing (its parent must exist), and checks that it is
 * a directory this process can create files in, by creating and removing a
 * probe file. Returns 0, or DCPS_E_IO with the reason. */
int dcps_checkpoint_prepare(const char *dir, char *err, size_t errlen);

/* The size of one checkpoint file of s. A shard's checkpoint_dir needs room for
 * `keep` of them (2 with keep = 1): see dcps_checkpoint_save. */
uint64_t dcps_checkpoint_bytes(const dcps_shard_t *s);

/* Writes shard s and the consistency model cons (of the job cfg) as a new
 * checkpoint in dir: a temporary file in dir, written, fsync'd and renamed, then
 * dir fsync'd. It first removes temporary files a crash left and, with keep ≥ 2,
 * all but the newest keep − 1 checkpoints of this shard, so that the directory
 * never needs room for more than `keep` files; with keep = 1 the old one is
 * removed only once the new one is in place (room for 2). A checkpoint of
 * version `hold` (nonzero: the newest one every shard of a sync job holds,
 * server/rounds.h) is never removed: room for one more. The new file's path goes to
 * path (if not NULL). Returns 0; DCPS_E_IO if the checkpoint could not be
 * written (nothing of it stays in dir, unless only the directory's fsync
 * failed), DCPS_E_NOMEM, or DCPS_E_INVAL if a path is too long. Pruning
 * failures are logged, not returned. s and cons are not changed. */
int dcps_checkpoint_save(const char *dir, const dcps_config_t *cfg, const dcps_shard_t *s,
                         const dcps_consistency_t *cons, int keep, uint64_t hold, char *path,
                         size_t pathlen, char *err, size_t errlen);

/* Restores the newest usable checkpoint of shard s->index in dir into s, as
 * dcps_shard_new left it (never initialised), and into cons (initialised for
 * cfg's workers): the state, version and counters of s, then
 * dcps_shard_restored(s); every rank's session and last push (none from a
 * format 1 file); cons's round, contributions, max_ahead and every
 * rank's clock and contributed flag. Checkpoints are tried newest first; each
 * refused one (not a checkpoint, other format, truncated, checksum mismatch,
 * other job id, shard, parameter count or range, workers, rule, mode, pull
 * or delay compensation) is logged with a warning naming the file and the reason, and
 * the next older one is tried. An unsized shard ([model] params = auto: s has
 * n_params 0) is sized by each file's n_params, which must fit the job
 * (dcps_config_check_size) and DCPS_PARAMS_AUTO_MAX, and is unsized again when
 * the file is refused: with no usable file it stays unsized.
 * Returns 1 with the file's path in path (if not NULL); 0 if dir holds no
 * checkpoint of this shard (s and cons unchanged); DCPS_E_DATA if it holds some
 * and none is usable (err names the newest and why; s and cons are as before);
 * DCPS_E_IO if dir cannot be read, DCPS_E_NOMEM, or DCPS_E_STATE if s was
 * initialised already. */
int dcps_checkpoint_restore(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                            dcps_consistency_t *cons, char *path, size_t pathlen, char *err,
                            size_t errlen);

/* dcps_checkpoint_restore among the checkpoints of `version` only (a sync job's
 * shards restoring the newest round they all hold: server/rounds.h). Returns 0
 * also when dir holds checkpoints but none of that version. */
int dcps_checkpoint_restore_version(const char *dir, const dcps_config_t *cfg, dcps_shard_t *s,
                                    dcps_consistency_t *cons, uint64_t version, char *path,
                                    size_t pathlen, char *err, size_t errlen);

/* How many checkpoints of shard `index` dir holds, and the version of the
 * newest (0 if none), without reading them. Returns 0, or DCPS_E_IO if dir
 * cannot be read (a missing dir holds none), DCPS_E_NOMEM. */
int dcps_checkpoint_newest(const char *dir, int index, size_t *count, uint64_t *version,
                           char *err, size_t errlen);

/* CRC-32C (Castagnoli, reflected, as iSCSI and ext4 use it) of n bytes, chained:
 * crc32c(crc32c(0, a), b) is the CRC of a followed by b. */
uint32_t dcps_checkpoint_crc32c(uint32_t crc, const void *data, size_t n);

#endif
