/* dcps — the wire codec: header + raw payload frames.
 *
 * A message is a protobuf-c Header followed by raw little-endian payload frames
 * (proto/dcps.proto). This module turns a dcps_msg_t into header bytes and back,
 * and checks everything a peer could get wrong before any of it is used: the
 * header parses, the protocol version and job id match, the type is known, each
 * frame matches its description, and the payload of a push is in range, strictly
 * ascending and finite. It owns no sockets (proto/frame.h sends and receives). */
#ifndef DCPS_CODEC_H
#define DCPS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DCPS_PROTOCOL 3 /* 2: sessions; 3: parts (docs/protocol.md) */
#define DCPS_PARTS_MAX 64 /* parts of one push or reply; more: FIELD */
#define DCPS_MAX_FRAMES 4      /* payload frames per message; more: FRAMECOUNT */
#define DCPS_ERROR_TEXT_MAX 256
/* The cap on a packed header, known and unknown fields together: a longer one is
 * refused with HEADER before it is parsed. "Unknown fields are ignored" holds
 * within it: dcps's own headers take at most about 400 bytes (an ERROR with the
 * longest text, or four frame descriptions), so a later version has some 3.6 kB
 * for fields of its own. Also the size of the buffers headers are packed into. */
#define DCPS_HEADER_MAX 4096

enum dcps_msg_type {
    DCPS_MSG_HELLO = 1,
    DCPS_MSG_WELCOME = 2,
    DCPS_MSG_PUSH = 3,
    DCPS_MSG_PUSH_ACK = 4,
    DCPS_MSG_PULL = 5,
    DCPS_MSG_PULL_REPLY = 6,
    DCPS_MSG_BARRIER = 7,
    DCPS_MSG_HEARTBEAT = 8,
    DCPS_MSG_BYE = 9,
    DCPS_MSG_ERROR = 10,
    DCPS_MSG_INIT = 11,
    DCPS_MSG_DONE = 12,
    DCPS_MSG_BUFFERS = 13,
    DCPS_MSG_ROUND = 14, /* between the shards of a sync job (server/rounds.h) */
    DCPS_MSG_TYPE_END
};

/* GROUP_RANGES and GROUP_OPTIONS: a parameter group table (server/groups.h),
 * after INIT's DENSE frame or as HELLO's payload. */
enum dcps_frame_kind {
    DCPS_FRAME_DENSE = 1,
    DCPS_FRAME_INDICES = 2,
    DCPS_FRAME_VALUES = 3,
    DCPS_FRAME_GROUP_RANGES = 4,
    DCPS_FRAME_GROUP_OPTIONS = 5,
    DCPS_FRAME_BUFFER_FLOATS = 6,
    DCPS_FRAME_BUFFER_INTS = 7,
    DCPS_FRAME_RANKS = 8, /* ROUND: worker ranks, uint32 */
    DCPS_FRAME_KIND_LAST = DCPS_FRAME_RANKS
};
enum dcps_dtype { DCPS_DTYPE_F32 = 1, DCPS_DTYPE_U32 = 2, DCPS_DTYPE_F64 = 3 };

/* Header flags. */
#define DCPS_FLAG_DUPLICATE 1u /* PUSH_ACK/INIT ack: already applied, not applied again */
#define DCPS_FLAG_STALE 2u     /* PUSH_ACK: its step was closed without it; dropped (sync);
                                  BARRIER reply: the others passed it without this rank */
#define DCPS_FLAG_WAITING 4u   /* HEARTBEAT with a request's seq: still waiting for others */
#define DCPS_FLAG_DELTA 8u     /* PULL: the worker holds the range tagged param_version and
                                  takes a delta (INDICES + VALUES to add) in reply */
#define DCPS_FLAG_EXACT 16u    /* PULL: send the parameters themselves, dense */
#define DCPS_FLAG_AVERAGE 32u  /* BUFFERS: the job's buffers are the ranks' mean */
#define DCPS_FLAG_LOCAL 64u    /* BUFFERS: every rank keeps its own (a declaration) */
#define DCPS_FLAG_CHECKPOINT 128u /* ROUND from shard 0: checkpoint after applying it */
#define DCPS_FLAG_RESTORE 256u    /* ROUND: a shard's checkpoints (to shard 0), or the one
                                     to restore (from shard 0): docs/protocol.md, 16 */

typedef struct {
    const void *data;
    size_t len;
} dcps_buf_t;

typedef struct {
    uint32_t kind;  /* enum dcps_frame_kind */
    uint32_t dtype; /* enum dcps_dtype, or a shorter value format (proto/quant.h) */
    uint64_t count; /* elements */
} dcps_frame_desc_t;

/* dcps_msg_t.has: the optional header fields that were on the wire
 * (dcps_codec_unpack), so that a field sent as 0 differs from one not sent. On
 * the sending side a bit makes dcps_codec_pack send its field also when it is
 * 0; a nonzero field is always sent. */
enum dcps_field {
    DCPS_HAS_SHARD = 1u << 0,
    DCPS_HAS_PARAM_VERSION = 1u << 1,
    DCPS_HAS_N_PARAMS = 1u << 2,
    DCPS_HAS_RANGE_LO = 1u << 3,
    DCPS_HAS_RANGE_HI = 1u << 4,
    DCPS_HAS_INITIALIZED = 1u << 5,
    DCPS_HAS_ERROR_CODE = 1u << 6,
    DCPS_HAS_ERROR_TEXT = 1u << 7,
    DCPS_HAS_FLAGS = 1u << 8,
    DCPS_HAS_WORKERS = 1u << 9,
    DCPS_HAS_STEP = 1u << 10,
    DCPS_HAS_WANT = 1u << 11,
    DCPS_HAS_SESSION = 1u << 12,
    DCPS_HAS_LR = 1u << 13,
    DCPS_HAS_PART = 1u << 14, /* any of part, parts, part_lo, part_hi */
    DCPS_HAS_CHECKPOINT = 1u << 15,
    DCPS_HAS_GENERATION = 1u << 16,
};

/* A message with its header fields decoded. On the receiving side payload[]
 * borrows the received frames: valid while those frames are. */
typedef struct {
    uint32_t type;
    uint32_t has; /* enum dcps_field bits */
    uint64_t job_id;
    uint32_t rank;
    uint64_t seq;
    uint64_t session; /* HELLO: the session the worker opens; later requests: it */
    uint32_t shard;
    uint64_t param_version;
    uint64_t n_params;
    uint64_t range_lo, range_hi;
    bool initialized;
    uint32_t error_code; /* positive dcps code (−DCPS_E_…) */
    char error_text[DCPS_ERROR_TEXT_MAX];
    uint32_t flags;
    uint32_t workers;
    uint64_t step;
    uint64_t want; /* PULL with DELTA: the most entries wanted; 0: the job's pull density */
    double lr;     /* PULL_REPLY: the lr in force, [optimizer] lr · f(param_version) */
    /* Parts (docs/protocol.md, 17): with DCPS_HAS_PART in has, this PUSH or
     * PULL_REPLY is part `part` of `parts`, covering [part_lo, part_hi) (global);
     * a PULL's `parts` asks for its reply in parts. All four are sent together. */
    uint32_t part, parts;
    uint64_t part_lo, part_hi;
    uint64_t checkpoint; /* ROUND: a follower's newest checkpoint; from shard 0, the common one */
    uint64_t generation; /* ROUND: shard 0's restore decision it follows */
    int nframes;
    dcps_frame_desc_t frame[DCPS_MAX_FRAMES];
    dcps_buf_t payload[DCPS_MAX_FRAMES];
    uint32_t block[DCPS_MAX_FRAMES]; /* FrameDesc.block of frame i: INT8, TWOBIT values per
                                        scale; 0: one scale (proto/quant.h) */
    /* Receiving side, set by the receiver after unpacking (unpack clears it):
     * room for as many floats as a DENSE or VALUES frame may hold, into which
     * dcps_codec_dense, _sparse and _push decode a frame in a shorter format
     * (proto/quant.h). NULL: such a frame is refused FRAMELEN ("a dense frame
     * must hold float32 values"), as INIT's always is. */
    float *decode_to;
} dcps_msg_t;

/* The name of a message type ("PUSH"), or "unknown". */
const char *dcps_msg_type_name(uint32_t type);

/* Packs m's header (protocol DCPS_PROTOCOL, fields, frame descriptions with their
 * byte lengths) into buf. Protocol, type, job id, rank, seq, shard and
 * param_version are always sent; any other field when it is nonzero or its bit
 * is in m->has. Returns the length, or DCPS_E_INVAL if it does not fit. */
int dcps_codec_pack(const dcps_msg_t *m, uint8_t *buf, size_t cap);

/* Parses a header and attaches the received payload frames, checking: the header
 * is 1 to DCPS_HEADER_MAX bytes and parses (HEADER), protocol (PROTOVER), job id
 * unless expect_job is 0 (JOBID), known type (MSGTYPE), as many frames as
 * descriptions and at most DCPS_MAX_FRAMES (FRAMECOUNT), known kind/dtype and
 * byte length = count × size = the frame's length (FRAMELEN). Sets out->has from
 * the fields present. On failure returns the code and writes a sentence to why;
 * out is then only valid for type, rank and seq. frames holds nframes entries,
 * or none past DCPS_MAX_FRAMES when nframes is larger (the parts received:
 * refused before any frame is read). */
int dcps_codec_unpack(const void *hdr, size_t hdr_len, const dcps_buf_t *frames, size_t nframes,
                      uint64_t expect_job, dcps_msg_t *out, char *why, size_t whylen);

/* A dense payload: exactly one DENSE float32 frame of `count` finite values
 * (or, with m->decode_to, a shorter format decoded there with every check of
 * dcps_quant_decode: then *values is m->decode_to). Sets *values to the
 * frame's data (borrowed). A wrong shape is FRAMECOUNT with
 * a sentence saying what was received and what was expected. */
int dcps_codec_dense(const dcps_msg_t *m, uint64_t count, const float **values, char *why,
                     size_t whylen);

/* dcps_codec_dense that also copies the values into dst (count floats) in the
 * pass that checks them: one read of the payload, not two. On
 * DCPS_E_NONFINITE dst holds the values, bad ones included; on any other error
 * it is unchanged. */
int dcps_codec_dense_to(const dcps_msg_t *m, uint64_t count, float *dst, char *why,
                        size_t whylen);

/* A sparse payload: INDICES (uint32) then VALUES (float32, or a shorter format
 * decoded into m->decode_to as dcps_codec_dense does) with equal counts, at
 * most hi − lo entries, indices strictly ascending in [lo, hi), values finite.
 * Sets idx, values (borrowed) and k. */
int dcps_codec_sparse(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                      const float **values, size_t *k, char *why, size_t whylen);

/* A parameter group table carried from frame `first` on: none when the
 * message has exactly `first` frames (*n_ranges and *n_groups 0), else a
 * GROUP_RANGES frame of uint32 (end, group) pairs then a GROUP_OPTIONS frame
 * of float64 (lr_factor, weight_decay) pairs, and nothing after (else
 * FRAMECOUNT; other dtypes or odd counts: FRAMELEN). The table's contents are
 * the server's to check (server/groups.h). Sets the borrowed arrays and their
 * pair counts. */
/* The payload of a BUFFERS request: no frames (it only asks: *publish false),
 * or a BUFFER_FLOATS frame then a BUFFER_INTS frame, either of 0 elements
 * (else FRAMECOUNT), float32 and float64 (else FRAMELEN). Sets the borrowed
 * frames (which may be misaligned: read them with memcpy) and their counts. */
int dcps_codec_buffers(const dcps_msg_t *m, const void **floats, size_t *n_floats,
                       const void **ints, size_t *n_ints, bool *publish, char *why,
                       size_t whylen);

int dcps_codec_groups(const dcps_msg_t *m, int first, const uint32_t **ranges, size_t *n_ranges,
                      const double **opts, size_t *n_groups, char *why, size_t whylen);

/* A PUSH's payload, whichever of its two shapes it has: one DENSE frame of
 * `count` = hi − lo finite values (*idx set to NULL, *k to count), or INDICES
 * then VALUES as dcps_codec_sparse checks them (k may be 0). Any other shape is
 * FRAMECOUNT, and the sentence says what was received and what is expected. */
int dcps_codec_push(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                    const float **values, size_t *k, char *why, size_t whylen);

/* dcps_codec_push without the pass over a dense payload's values (a sparse
 * payload's are checked): a shard's update reads them anyway and refuses a
 * non-finite result, which every non-finite gradient value makes in every
 * update rule. Before the caller acts on such a push in any other way (an
 * error, a duplicate, a dropped push, any change of state) it calls
 * dcps_codec_dense, so that a non-finite payload gets that code and sentence
 * first, as with dcps_codec_push. */
int dcps_codec_push_unchecked(const dcps_msg_t *m, uint64_t lo, uint64_t hi,
                              const uint32_t **idx, const float **values, size_t *k, char *why,
                              size_t whylen);

/* What a shard knows to check a request's header fields against. */
typedef struct {
    uint32_t shard;    /* the shard's index */
    uint64_t n_params; /* the model's size; 0: not known yet ([model] params = auto) */
    uint64_t lo, hi;   /* the shard's range, when n_params is known */
} dcps_field_ctx_t;

/* Checks the header fields of a request (HELLO, PUSH, PULL, BARRIER, HEARTBEAT,
 * BYE, INIT, DONE) that the type check and the handlers do not, by the table in
 * codec.c: a field present with a value that contradicts the shard (shard,
 * range_lo, range_hi, n_params) or that has no meaning for the type (a reply's
 * field, a flag bit the type does not define, want without DELTA, step or
 * param_version where the type has none) is FIELD; payload frames on a type that
 * carries none are FRAMECOUNT. Other types pass (the router refuses them).
 * Returns 0, or the code with a sentence in why; m is not changed. */
int dcps_codec_check_fields(const dcps_msg_t *m, const dcps_field_ctx_t *ctx, char *why,
                            size_t whylen);

/* Fills a reply header from a request: job id, rank, seq and shard are copied,
 * everything else is cleared. */
void dcps_msg_reply(dcps_msg_t *reply, const dcps_msg_t *req, uint32_t type);

#endif
