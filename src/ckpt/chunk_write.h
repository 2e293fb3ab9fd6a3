/*
 * Internal: checkpoint files written from chunks of memory, at the disk's
 * rate (core/bulk_write.h), fsynced; whole or not at all.
 */
#ifndef FERRY_CKPT_CHUNK_WRITE_H
#define FERRY_CKPT_CHUNK_WRITE_H

#include "ferry/ferry.h"
#include <stddef.h>

/* Bytes of a file, in order; what names them in errors. */
struct chunk {
	const void *data;
	size_t bytes;
	const char *what;
};

/* Creates file, writes the chunks, fsyncs and closes it; removes it on
 * failure.  An existing file of that name is refused, except once: a
 * leftover of this process (the names carry its pid) is replaced.
 * checksum_at >= 0: the FNV-1a of every chunk (ferry_ckpt_fnv_words, the
 * header's 64-bit slot there 0 while hashed) goes into that int32 slot. */
ferry_status ferry_ckpt_write_chunks(const char *file, const struct chunk *chunks, int n_chunks, int checksum_at)
	FERRY_MUST_CHECK;
/* Writes "<path>.tmp.<pid>" so, then renames it over path (a regular file
 * or nothing) and syncs the directory. */
ferry_status ferry_ckpt_write_atomic(const char *path, const struct chunk *chunks, int n_chunks, int checksum_at)
	FERRY_MUST_CHECK;

#endif
