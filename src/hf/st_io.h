/*
 * Internal to libferry: the whole-file reads and atomic writes of the
 * safetensors reader and writer, which the other JSON files' readers and
 * writers (hf_config.c, bpe_train.c) use too, and what those files share.
 */
#ifndef FERRY_HF_ST_IO_H
#define FERRY_HF_ST_IO_H

#include "ferry/ferry.h"
#include "ferry/safetensors.h"

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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_BIG_ENDIAN 1
#else
#define ST_BIG_ENDIAN 0
#endif

/* Little-endian 64-bit words in and out of a header. */
uint64_t ferry_st_load_le64(const unsigned char *p);
void ferry_st_store_le64(unsigned char *p, uint64_t v);
/* "dir/name" (ferry_malloc; NULL when out of memory). */
char *ferry_st_path_join(const char *dir, const char *name);
/* FERRY_ERR_NOMEM naming path. */
ferry_status ferry_st_nomem(const char *path);
/* "[2, 3]" into buf. */
const char *ferry_st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim);
/* A regular file opened for reading, and its size; errors name path. */
ferry_status ferry_st_open_regular(const char *path, int *fd_out, uint64_t *size);
/* n bytes at off into buf (pread until done); `what` names them in errors. */
ferry_status ferry_st_read_full(int fd, const char *path, void *buf, size_t n, uint64_t off,
				const char *what);

/* Whether dtype is one of ferry_st_dtype's; a float's bits and back. */
int ferry_st_dtype_valid(enum ferry_st_dtype dtype);
uint32_t ferry_st_f32_bits(float f);
float ferry_st_bits_f32(uint32_t u);

#endif
