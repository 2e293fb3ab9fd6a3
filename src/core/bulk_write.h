/*
 * Internal: large files written at the disk's sequential rate.
 *
 * A checkpoint is gigabytes written once and not read back soon.  Written
 * through the page cache, each byte is copied into it and the writer is
 * throttled as dirty pages pile up (about half the disk's rate measured,
 * issue 40 item 17).  Here the bytes go through two aligned buffers, each
 * written with O_DIRECT by a thread of its own while the caller fills the
 * other; a file system that refuses O_DIRECT (tmpfs) gets the same
 * buffers written plainly.  The file's size is exact at the end.
 */
#ifndef FERRY_CORE_BULK_WRITE_H
#define FERRY_CORE_BULK_WRITE_H

#include "ferry/ferry.h"
#include <stdbool.h>
#include <stddef.h>

struct ferry_bulk_file;

/* Takes fd (a new, empty file open for writing at offset 0; still the
 * caller's to fsync and close after ferry_bulk_end); name is for errors. */
ferry_status ferry_bulk_begin(int fd, const char *name, struct ferry_bulk_file **out) FERRY_MUST_CHECK;
/* Room to fill in place (converters write straight into it): at least 1
 * byte, *n of them; ferry_bulk_commit then says how many were filled. */
void *ferry_bulk_space(struct ferry_bulk_file *b, size_t *n);
ferry_status ferry_bulk_commit(struct ferry_bulk_file *b, size_t n) FERRY_MUST_CHECK;
/* Appends n bytes. */
ferry_status ferry_bulk_append(struct ferry_bulk_file *b, const void *p, size_t n) FERRY_MUST_CHECK;
/* Writes what is left, sets the file's exact size and frees b (also after
 * an error, which it returns: the first one met). */
ferry_status ferry_bulk_end(struct ferry_bulk_file *b) FERRY_MUST_CHECK;
/* Whether the file went past the page cache (false: written plainly). */
bool ferry_bulk_direct(const struct ferry_bulk_file *b);

#endif
