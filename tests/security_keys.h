/* dcps tests — what both security suites share (tests/test_security.c, the key
 * files; tests/daemon/test_security.c, real shards): reading a key file as the
 * programs do, with the sentence that says why it was refused. Static inline,
 * as tests/check_run.h, so that a suite needs no extra source to link. */
#ifndef DCPS_TEST_SECURITY_KEYS_H
#define DCPS_TEST_SECURITY_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/keys.h"

/* Reads the key file p and returns what dcps_key_read says: the code, and the
 * sentence in err (static). */
static inline int read_key(const char *p, bool secret, uint8_t *key, const char **err)
{
    static char buf[1024];
    buf[0] = '\0';
    int rc = dcps_key_read(p, secret, key, buf, sizeof buf);
    *err = buf;
    return rc;
}

#endif
