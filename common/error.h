/* dcps — error codes.
 *
 * Every fallible dcps function returns 0 or one negative DCPS_E… code from the
 * table below; dcps_strerror() gives the sentence for a code. The table is the
 * single place where codes and their messages live: the wire protocol sends the
 * positive value of a code in ERROR replies, so codes never change meaning. */
#ifndef DCPS_ERROR_H
#define DCPS_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values are stable: append, never renumber. */
#define DCPS_ERRORS(X)                                                              \
    X(OK, 0, "success")                                                             \
    X(NOMEM, -1, "out of memory")                                                   \
    X(INVAL, -2, "invalid argument")                                                \
    X(IO, -3, "input/output error")                                                 \
    X(CONFIG, -4, "invalid job file or option")                                     \
    X(ZMQ, -5, "ZeroMQ error")                                                      \
    X(TIMEOUT, -6, "no reply before the timeout")                                   \
    X(CUDA, -7, "CUDA or cuBLAS error")                                             \
    X(NOGPU, -8, "no usable GPU")                                                   \
    X(DATA, -9, "malformed data file")                                              \
    X(HEADER, -10, "truncated or unparsable message header")                        \
    X(MSGTYPE, -11, "unknown or unexpected message type")                           \
    X(FRAMECOUNT, -12, "payload frame count does not match the header")             \
    X(FRAMELEN, -13, "payload frame length does not match the header")              \
    X(RANGE, -14, "index outside the shard's range")                                \
    X(ORDER, -15, "indices not strictly ascending")                                 \
    X(NONFINITE, -16, "NaN or Inf value")                                           \
    X(JOBID, -17, "wrong job id")                                                   \
    X(PROTOVER, -18, "unsupported protocol version")                                \
    X(SIZE, -19, "parameter count or shard range differs from the job")             \
    X(RANK, -20, "worker rank outside the job")                                     \
    X(NOTREADY, -21, "shard parameters not initialised yet")                        \
    X(REMOTE, -22, "the peer answered with an error")                               \
    X(CLOSED, -23, "connection closed")                                             \
    X(STATE, -24, "request not valid in the current state")                         \
    X(VERSION, -25, "parameter version from the future")                            \
    X(LIVE, -26, "rank already connected from elsewhere")                          \
    X(AUTH, -27, "refused by the peer's authentication (CURVE)")                   \
    X(SESSION, -28, "request outside the rank's session")                          \
    X(FIELD, -29, "a header field contradicts the message or the shard")            \
    X(ENCODING, -30, "value not allowed by the frame's encoding")

enum {
#define DCPS_ERR_ENUM(name, value, msg) DCPS_E_##name = (value),
    DCPS_ERRORS(DCPS_ERR_ENUM)
#undef DCPS_ERR_ENUM
};
#define DCPS_OK DCPS_E_OK

/* The message for a code; "unknown error" for a value outside the table. The
 * string is static. Accepts positive wire values too (their negation). */
const char *dcps_strerror(int code);

/* The short name of a code ("FRAMELEN"), for logs and metrics; static. */
const char *dcps_errname(int code);

/* 1 if code is one of the table's values, else 0. */
int dcps_error_known(int code);

#ifdef __cplusplus
}
#endif
#endif
