/* dcps — a rank's session and last push; see session.h. */
#include "server/session.h"

#include <inttypes.h>
#include <stdio.h>

void dcps_session_open(dcps_session_t *s, uint64_t id)
{
    *s = (dcps_session_t){.id = id};
}

enum dcps_seq_verdict dcps_session_seq(const dcps_session_t *s, uint64_t seq)
{
    if (!s->pushed || seq > s->seq)
        return DCPS_SEQ_NEW;
    if (seq < s->seq)
        return DCPS_SEQ_BELOW;
    return s->applied ? DCPS_SEQ_APPLIED : DCPS_SEQ_DROPPED;
}

void dcps_session_pushed(dcps_session_t *s, uint64_t seq, bool applied)
{
    if (s->pushed && seq < s->seq)
        return; /* a part that came after a later one (server/parts.h) */
    s->pushed = true;
    s->applied = applied;
    s->seq = seq;
}

void dcps_session_save(const dcps_session_t *s, uint64_t words[DCPS_SESSION_WORDS])
{
    words[0] = s->id;
    words[1] = s->seq;
    words[2] = (s->pushed ? DCPS_SESSION_PUSHED : 0) | (s->applied ? DCPS_SESSION_APPLIED : 0);
}

void dcps_session_load(dcps_session_t *s, const uint64_t words[DCPS_SESSION_WORDS])
{
    *s = (dcps_session_t){.id = words[0],
                          .pushed = (words[2] & DCPS_SESSION_PUSHED) != 0,
                          .applied = (words[2] & DCPS_SESSION_APPLIED) != 0,
                          .seq = words[1]};
}

const char *dcps_session_short(uint64_t id, char *out)
{
    if (id == 0)
        snprintf(out, DCPS_SESSION_SHORT, "none");
    else
        snprintf(out, DCPS_SESSION_SHORT, "%08" PRIx64, id >> 32);
    return out;
}
