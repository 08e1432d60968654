/* dcps — who speaks for a worker rank: its session, and its last push.
 *
 * A worker picks a random nonzero 64-bit session when it opens (worker/client.c)
 * and names it in its HELLO and in every later request. A shard binds each rank
 * to one session at HELLO; the router (server/router.c) refuses any other
 * request for the rank that names another session (DCPS_E_SESSION) before it
 * reads anything else of it, so a socket that never said HELLO cannot push,
 * pull, heartbeat or say BYE for a live rank.
 *
 * Within a session the pushes carry strictly increasing sequence numbers (any
 * start, 0 included). A rank's record keeps its session's last push: its seq and
 * whether it was applied or dropped as STALE (sync mode). That is all a shard
 * needs to answer a retry exactly as it answered the first attempt, and to
 * refuse a seq from the past; a new session starts with no last push. It also
 * says whether this process has answered a pull of the session: only then is
 * the delta tag the session names one this process gave it (server/shard.h).
 *
 * This module is the record and its rules, nothing else. The records have one
 * owner, the shard (server/shard.h), one per rank: a push and its record change
 * in the same call, so no path applies a push without recording it or records
 * one it refused, and a checkpoint saves the records with the parameters they
 * describe (server/checkpoint.h), so a restored shard answers a retry exactly
 * as the stopped process would have. The router reads a record
 * (dcps_shard_session), binds one at HELLO (dcps_shard_open_session) and
 * decides what to answer; what it keeps of a rank is only where to answer a
 * request that waits, which belongs to no session record and is never saved. */
#ifndef DCPS_SESSION_H
#define DCPS_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t id;   /* the session bound at HELLO; 0: none */
    uint64_t seq;  /* its last push's sequence number, if pushed */
    bool pushed;   /* a push of this session was seen: seq and applied hold */
    bool applied;  /* that push was applied (false: dropped as STALE) */
    bool pulled;   /* this process answered a pull of this session: the delta tag the
                      session names is one this process gave it. Not saved: a restored
                      shard vouches for no tag (docs/protocol.md, sections 10 and 11) */
} dcps_session_t;

/* What a push's seq is to a rank's session. */
enum dcps_seq_verdict {
    DCPS_SEQ_NEW = 0,   /* after the last push (or the first one): a new push */
    DCPS_SEQ_APPLIED,   /* the last push again, which was applied: acknowledge DUPLICATE */
    DCPS_SEQ_DROPPED,   /* the last push again, which was dropped: answer STALE again */
    DCPS_SEQ_BELOW,     /* before the last push: refused, nothing applied */
};

/* Characters of a session's short form in logs and error texts: the first 8 of
 * its 16 hex digits, and a NUL. */
#define DCPS_SESSION_SHORT 9

/* Binds s to session id (nonzero) with no push seen yet and no pull answered. */
void dcps_session_open(dcps_session_t *s, uint64_t id);

/* The verdict on a push of s's session with sequence number seq. */
enum dcps_seq_verdict dcps_session_seq(const dcps_session_t *s, uint64_t seq);

/* Records a push of s's session: applied (or added to a sync round), or dropped.
 * A seq below the last push's (a missing part of a push in parts, sent again:
 * server/parts.h) leaves the record as it is. */
void dcps_session_pushed(dcps_session_t *s, uint64_t seq, bool applied);

/* A record in a checkpoint: its session, its last push's seq, and flags
 * (DCPS_SESSION_PUSHED, DCPS_SESSION_APPLIED), as 64-bit words. */
#define DCPS_SESSION_WORDS 3
#define DCPS_SESSION_PUSHED 1u  /* a push of the session was seen */
#define DCPS_SESSION_APPLIED 2u /* and it was applied */

void dcps_session_save(const dcps_session_t *s, uint64_t words[DCPS_SESSION_WORDS]);
/* Loads a record saved by dcps_session_save, with no pull answered. */
void dcps_session_load(dcps_session_t *s, const uint64_t words[DCPS_SESSION_WORDS]);

/* Writes id's short form ("3f2a9c01") to out (DCPS_SESSION_SHORT bytes);
 * "none" for 0. Returns out. */
const char *dcps_session_short(uint64_t id, char *out);

#endif
