/*
 * Internal: the one reader of llm.c-style file headers.
 *
 * llm.c's files (model checkpoints, token shards, tokenizers) and ferry's
 * training state start with the same 1 KiB header: 256 little-endian int32,
 * [0] a magic number naming the kind of file, [1] a version, the rest the
 * kind's own fields.  ferry_file_header_open() opens such a file, reads the
 * header and checks magic and version; the caller reads its own fields from
 * the header and checks the file's exact length against the size it reports.
 *
 * Errors name the file and the problem, in one wording for all kinds:
 *   "<path>: cannot open: <strerror>"                          FERRY_ERR_IO
 *   "<path>: not a regular file"                              FERRY_ERR_IO
 *   "<path>: file is 100 bytes, too short for the 1024-byte model header"
 *                                                             FERRY_ERR_FORMAT
 *   "<path>: bad magic 1, expected 20240326 (llm.c model checkpoint)"
 *                                                             FERRY_ERR_FORMAT
 *   "<path>: version 5 (bf16) not supported, need 3 (fp32)"  FERRY_ERR_FORMAT
 */
#ifndef FERRY_CORE_FILE_HEADER_H
#define FERRY_CORE_FILE_HEADER_H

#include "ferry/ferry.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FERRY_FILE_HEADER_INTS 256
#define FERRY_FILE_HEADER_BYTES ((int64_t)FERRY_FILE_HEADER_INTS * 4)

/* A version the format knows by name but the reader refuses (llm.c's bf16
 * checkpoints), so the error says what the file is. */
struct ferry_file_version_name {
	int32_t version;
	const char *name; /* "bf16" -> "version 5 (bf16) not supported" */
};

/* One kind of file.  The accepted versions are listed once, here, and the
 * version error is built from the list ("need 1 or 2"). */
struct ferry_file_format {
	const char *kind;    /* "llm.c model checkpoint": named by the magic error */
	const char *header;  /* "model": "too short for the 1024-byte model header" */
	int32_t magic;
	const int32_t *versions; /* accepted versions, n_versions >= 1 of them */
	int n_versions;
	const char *version_note; /* "fp32" -> "need 3 (fp32)"; may be NULL */
	const struct ferry_file_version_name *named; /* may be NULL */
	int n_named;
};

/* "a FIFO", "a directory", "a character device", ...: what a file that is
 * not a regular one is, for the refusal "<path>: not a regular file (a
 * FIFO)". */
const char *ferry_file_kind(unsigned mode);

/*
 * Opens path for reading and reads and checks its header.
 *
 * Only regular files are opened: a FIFO, directory or device is refused
 * before anything could block on it (it is opened non-blocking, and the type
 * checked again on the open descriptor, so one swapped in after the first
 * check is refused too).
 *
 * On success *fd is the open descriptor, positioned at the first byte after
 * the header, owned by the caller (close it); *size is the file's length in
 * bytes (>= FERRY_FILE_HEADER_BYTES) for the caller's exact-length check;
 * hdr holds the header.  On failure *fd is -1 and the message is set.
 */
ferry_status ferry_file_header_open(const char *path,
				    const struct ferry_file_format *fmt,
				    int32_t hdr[FERRY_FILE_HEADER_INTS],
				    int *fd, int64_t *size) FERRY_MUST_CHECK;

/* Reads n bytes from fd's current position, retrying short reads and EINTR.
 * Returns the bytes read: n, fewer at end of file, or -1 with errno set on a
 * read error.  Sets no message: callers word their own. */
ssize_t ferry_file_read_full(int fd, void *buf, size_t n);

#endif
