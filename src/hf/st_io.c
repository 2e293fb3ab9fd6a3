/*
 * The file helpers of safetensors' reader and writer and of the other JSON
 * files' (config.json, tokenizer.json): little-endian words, paths, whole
 * reads of regular files.
 */
#include "ferry/safetensors.h"
#include "hf/st_io.h"
#include "core/error.h"
#include "core/file_header.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t ferry_st_load_le64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void ferry_st_store_le64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* "a/b" (dir "" or NULL gives "b"); NULL when out of memory. */
char *ferry_st_path_join(const char *dir, const char *name)
{
	size_t nd = dir ? strlen(dir) : 0, nn = strlen(name);
	char *p = ferry_malloc(nd + nn + 2);

	if (!p)
		return NULL;
	if (nd) {
		memcpy(p, dir, nd);
		if (dir[nd - 1] != '/')
			p[nd++] = '/';
	}
	memcpy(p + nd, name, nn + 1);
	return p;
}

/* "[64, 32]" into buf. */
const char *ferry_st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim)
{
	size_t at = 0;
	int i;

	at += (size_t)snprintf(buf, size, "[");
	for (i = 0; i < ndim && at < size; i++)
		at += (size_t)snprintf(buf + at, size - at, "%s%lld",
				       i ? ", " : "", (long long)shape[i]);
	if (at < size)
		snprintf(buf + at, size - at, "]");
	return buf;
}

/* Stats path, refuses anything but a regular file, then opens it without
 * blocking (so a FIFO swapped in after the stat cannot hang us either). */
ferry_status ferry_st_open_regular(const char *path, int *fd_out, uint64_t *size)
{
	struct stat sb;
	int fd;

	if (stat(path, &sb) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)",
				   path, ferry_file_kind(sb.st_mode));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)",
				   path, ferry_file_kind(sb.st_mode));
	}
	*fd_out = fd;
	*size = (uint64_t)sb.st_size;
	return FERRY_OK;
}

/* Reads exactly n bytes at off.  The file's length was checked, so an end
 * of file means it shrank under us. */
ferry_status ferry_st_read_full(int fd, const char *path, void *buf, size_t n, uint64_t off,
			      const char *what)
{
	char *p = buf;

	while (n > 0) {
		size_t want = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
		ssize_t r = pread(fd, p, want, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return ferry_error(FERRY_ERR_IO,
					   "%s: error reading %s: %s", path,
					   what, strerror(errno));
		}
		if (r == 0)
			return ferry_error(FERRY_ERR_IO,
					   "%s: unexpected end of file reading %s (did the file change?)",
					   path, what);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return FERRY_OK;
}

ferry_status ferry_st_read_small_file(const char *path, uint64_t max,
				      char **out, size_t *len)
{
	ferry_status st;
	uint64_t size = 0;
	char *buf;
	int fd = -1;

	st = ferry_st_open_regular(path, &fd, &size);
	if (st)
		return st;
	if (size > max) {
		close(fd);
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: %llu bytes, more than the %llu a JSON file of this kind may have",
				   path, (unsigned long long)size,
				   (unsigned long long)max);
	}
	buf = ferry_malloc((size_t)size + 1);
	if (!buf) {
		close(fd);
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for %llu bytes",
				   path, (unsigned long long)size);
	}
	st = ferry_st_read_full(fd, path, buf, (size_t)size, 0, "the file");
	close(fd);
	if (st) {
		ferry_free(buf);
		return st;
	}
	buf[size] = '\0';
	*out = buf;
	*len = (size_t)size;
	return FERRY_OK;
}

ferry_status ferry_st_nomem(const char *path)
{
	return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory", path);
}
