/*
 * Internal: reading a corpus file as plain bytes, whatever it is stored
 * as: plain, gzip (.gz, through zlib) or Zstandard (.zst, libzstd), by the
 * name's ending.  Concatenated gzip members and zstd frames are read on.
 */
#ifndef FERRY_DATA_TEXT_READER_H
#define FERRY_DATA_TEXT_READER_H

#include "ferry/ferry.h"

#include <stdbool.h>
#include <stddef.h>

struct ferry_text_reader;

ferry_status ferry_text_reader_open(const char *path,
				    struct ferry_text_reader **out)
	FERRY_MUST_CHECK;
/* Up to n bytes into buf; *got 0 at the end. */
ferry_status ferry_text_reader_read(struct ferry_text_reader *r, void *buf,
				    size_t n, size_t *got) FERRY_MUST_CHECK;
void ferry_text_reader_close(struct ferry_text_reader *r);

/* The name without .gz or .zst ends in suffix (".jsonl"). */
int ferry_text_name_is(const char *path, const char *suffix);

/* One JSON Lines record (line[0..n), line `lineno` of path; unended: the
 * file ends in it with no newline): *rec the parsed record (the caller
 * json_decref()s it) and *text, *len its string field `field`; *rec NULL
 * for a blank line, which is no record.  A UTF-8 BOM before line 1 is
 * skipped. */
struct json_t;
ferry_status ferry_jsonl_text(const char *path, long lineno, bool unended, const char *line,
			      size_t n, const char *field, struct json_t **rec,
			      const char **text, size_t *len) FERRY_MUST_CHECK;

#endif
