/*
 * Internal: large files read at the disk's sequential rate.
 *
 * A resume reads gigabytes and then hashes or converts them; one read()
 * after another, then one pass over them, leaves the disk idle while the
 * CPU works and the CPU idle while the disk reads (0.41 of the disk's rate
 * measured, issue 40 item 17).  Here reader threads keep several 16 MiB
 * pieces in flight (the page cache's copying on more than one core, the
 * disk's queue deeper), and the caller's function runs over each piece, in
 * order, as soon as it has landed.
 */
#ifndef FERRY_CORE_BULK_READ_H
#define FERRY_CORE_BULK_READ_H

#include "ferry/ferry.h"
#include <stddef.h>
#include <stdint.h>

/* Called in order over each piece read: p its bytes, len of them, at its
 * offset from the start of the range. */
typedef void (*ferry_bulk_piece_fn)(void *ctx, const void *p, size_t len, size_t at);

/* Reads n bytes of fd at off.  dst not NULL: into dst (each, if not NULL,
 * sees them there, to hash); dst NULL: into the reader's own buffers, each
 * (required) converting them out before they are reused.  name and what
 * say it in errors; a file that ends early is FERRY_ERR_FORMAT ("did it
 * change?"), an error reading FERRY_ERR_IO. */
ferry_status ferry_bulk_read(int fd, const char *name, const char *what, void *dst, size_t n, uint64_t off,
			     ferry_bulk_piece_fn each, void *ctx) FERRY_MUST_CHECK;

#endif
