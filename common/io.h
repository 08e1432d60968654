/* dcps — whole reads and writes of a file descriptor.
 *
 * read(2) and write(2) may move fewer bytes than asked (a signal, a pipe, a
 * large request); these loop until all of it is done, the end of the file, or
 * an error. Nothing else: no buffering, no opening or closing. */
#ifndef DCPS_IO_H
#define DCPS_IO_H

#include <stddef.h>
#include <sys/types.h>

/* Reads up to n bytes of fd into buf, retrying after EINTR. Returns the count
 * (less than n only at the end of the file), or -1 with errno set. */
ssize_t dcps_read_full(int fd, void *buf, size_t n);

/* Writes the n bytes of buf to fd, retrying after EINTR. Returns 0, or -1 with
 * errno set (EIO if the file took nothing). */
int dcps_write_full(int fd, const void *buf, size_t n);

#endif
