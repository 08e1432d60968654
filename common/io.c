/* dcps — whole reads and writes of a file descriptor; see io.h. */
#include "common/io.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* One call moves at most 1 GiB: Linux moves at most 0x7ffff000 bytes a call. */
#define CHUNK ((size_t)1 << 30)

ssize_t dcps_read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got < CHUNK ? n - got : CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int dcps_write_full(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n < CHUNK ? n : CHUNK);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
