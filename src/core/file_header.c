/*
 * The one reader of llm.c-style file headers (see core/file_header.h):
 * model checkpoints and training state (src/ckpt/checkpoint.c), token
 * shards (src/data/shard_loader.c) and llm.c tokenizers (src/tokenizer/tokenizer.c)
 * all open their files here.
 *
 * Opening: stat() the path and refuse anything but a regular file, so a
 * device is never opened at all; then open it O_NONBLOCK (opening a FIFO for
 * reading blocks until a writer appears, unless non-blocking) and fstat() the
 * descriptor, which refuses a FIFO or device swapped in after the stat.  A
 * regular file ignores O_NONBLOCK, which is cleared anyway so the caller gets
 * an ordinary descriptor.
 */
#include "core/file_header.h"
#include "core/error.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "file headers are little-endian int32 read without swapping");

ssize_t ferry_file_read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);

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

/* "3", "1 or 2", "1, 2 or 3", then " (note)" if the format has one. */
static void accepted_versions(const struct ferry_file_format *fmt, char *buf,
			      size_t len)
{
	size_t at = 0;
	int i;

	buf[0] = '\0';
	for (i = 0; i < fmt->n_versions && at < len; i++) {
		const char *sep = i == 0 ? "" :
				  i == fmt->n_versions - 1 ? " or " : ", ";
		int w = snprintf(buf + at, len - at, "%s%d", sep,
				 fmt->versions[i]);

		if (w < 0)
			return;
		at += (size_t)w;
	}
	if (fmt->version_note && at < len)
		snprintf(buf + at, len - at, " (%s)", fmt->version_note);
}

static ferry_status check_version(const char *path,
				  const struct ferry_file_format *fmt,
				  int32_t version)
{
	const char *name = NULL;
	char need[128];
	int i;

	for (i = 0; i < fmt->n_versions; i++)
		if (version == fmt->versions[i])
			return FERRY_OK;
	for (i = 0; i < fmt->n_named; i++)
		if (version == fmt->named[i].version)
			name = fmt->named[i].name;
	accepted_versions(fmt, need, sizeof(need));
	if (name)
		return ferry_error(FERRY_ERR_FORMAT,
				   "%s: version %d (%s) not supported, need %s",
				   path, version, name, need);
	return ferry_error(FERRY_ERR_FORMAT,
			   "%s: version %d not supported, need %s", path,
			   version, need);
}

const char *ferry_file_kind(unsigned mode)
{
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return S_ISREG(mode) ? "a regular file" : "of an unknown kind";
}

/* Opens path read-only if, and only if, it is a regular file. */
static ferry_status open_regular(const char *path, int *out, int64_t *size)
{
	struct stat sb;
	int fd, flags;

	if (stat(path, &sb) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)", path,
				   ferry_file_kind(sb.st_mode));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(errno));
	if (fstat(fd, &sb) != 0) {
		int e = errno;

		close(fd);
		return ferry_error(FERRY_ERR_IO, "%s: cannot stat: %s", path,
				   strerror(e));
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return ferry_error(FERRY_ERR_IO, "%s: not a regular file (%s)", path,
				   ferry_file_kind(sb.st_mode));
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
		int e = errno;

		close(fd);
		return ferry_error(FERRY_ERR_IO, "%s: cannot open: %s", path,
				   strerror(e));
	}
	*out = fd;
	*size = (int64_t)sb.st_size;
	return FERRY_OK;
}

ferry_status ferry_file_header_open(const char *path,
				    const struct ferry_file_format *fmt,
				    int32_t hdr[FERRY_FILE_HEADER_INTS],
				    int *fd, int64_t *size)
{
	const size_t want = (size_t)FERRY_FILE_HEADER_BYTES;
	ferry_status st;
	int64_t len = 0;
	ssize_t got;
	int f = -1;

	assert(fmt && fmt->n_versions >= 1 && hdr && fd && size);
	*fd = -1;
	if (!path)
		return ferry_error(FERRY_ERR_INVALID, "%s file path is NULL",
				   fmt->header);
	st = open_regular(path, &f, &len);
	if (st)
		return st;
	if (len < FERRY_FILE_HEADER_BYTES) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: file is %lld bytes, too short for the %lld-byte %s header",
				 path, (long long)len,
				 (long long)FERRY_FILE_HEADER_BYTES, fmt->header);
		goto fail;
	}
	got = ferry_file_read_full(f, hdr, want);
	if (got != (ssize_t)want) {
		st = ferry_error(FERRY_ERR_IO, "%s: error reading header: %s",
				 path, got < 0 ? strerror(errno) : "short read");
		goto fail;
	}
	if (hdr[0] != fmt->magic) {
		st = ferry_error(FERRY_ERR_FORMAT,
				 "%s: bad magic %d, expected %d (%s)", path,
				 hdr[0], fmt->magic, fmt->kind);
		goto fail;
	}
	st = check_version(path, fmt, hdr[1]);
	if (st)
		goto fail;
	*fd = f;
	*size = len;
	return FERRY_OK;
fail:
	close(f);
	return st;
}
