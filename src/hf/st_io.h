/*
 * Internal to libferry: the whole-file reads and atomic writes that
 * safetensors.c implements and the other JSON files' readers and writers
 * (hf_config.c, bpe_train.c) use too.
 */
#ifndef FERRY_HF_ST_IO_H
#define FERRY_HF_ST_IO_H

#include "ferry/ferry.h"

#include <stddef.h>
#include <stdint.h>

/* Writes a file's contents to fd; tmp names it in errors. */
typedef ferry_status (*ferry_st_emit_fn)(int fd, const char *tmp, void *ctx);

/* Writes path through "path.tmp.<pid>": emit writes the contents, then
 * fsync, rename over path, fsync of the directory.  On failure the
 * temporary is removed and path is untouched. */
ferry_status ferry_st_atomic_write(const char *path, ferry_st_emit_fn emit, void *ctx);

/* All n bytes of buf to fd (tmp names it in errors). */
ferry_status ferry_st_write_all(int fd, const char *tmp, const void *buf, size_t n);

/* A regular file of at most max bytes into *out (NUL-terminated, *len
 * bytes; free with ferry_free). */
ferry_status ferry_st_read_small_file(const char *path, uint64_t max, char **out, size_t *len);

#endif
