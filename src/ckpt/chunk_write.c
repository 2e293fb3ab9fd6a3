/* Checkpoint files from chunks of memory (ckpt/chunk_write.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include "ckpt/chunk_write.h"
#include "ckpt/commit.h"
#include "core/bulk_write.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* fsync of the directory holding path, so a rename survives a power loss;
 * best effort (some file systems refuse to fsync directories). */
static void sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = NULL;
	int fd;

	if (slash && slash != path) {
		dir = ferry_malloc((size_t)(slash - path) + 1);
		if (!dir)
			return;
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = 0;
	}
	fd = open(dir ? dir : slash ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	ferry_free(dir);
}

/* Bytes hashed at a time while the writer thread writes the ones before. */
#define HASH_PIECE ((size_t)16 << 20)

/* Appends c, folding it into *h (NULL: no checksum) piece by piece, so the
 * hashing overlaps the disk's writing instead of preceding it. */
static ferry_status write_all(struct ferry_bulk_file *b, const char *name, const struct chunk *c, uint64_t *h)
{
	const char *p = c->data;
	size_t left = c->bytes;
	ferry_status st = FERRY_OK;

	if (c->bytes && ferry_ckpt_fault()) /* a write that fails, as on a full disk */
		return ferry_error(FERRY_ERR_IO, "%s: error writing %s: %s", name, c->what, strerror(errno));
	while (left && !st) {
		size_t n = left < HASH_PIECE ? left : HASH_PIECE;

		if (h)
			*h = ferry_ckpt_fnv_words(*h, p, n);
		st = ferry_bulk_append(b, p, n);
		p += n;
		left -= n;
	}
	return st;
}

/* The checksum into the written file at int32 slot `at` of its header
 * (put64's layout), past O_DIRECT (a few bytes, not whole blocks). */
static ferry_status patch_checksum(int fd, const char *name, int at, uint64_t h)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_DIRECT))
		fcntl(fd, F_SETFL, fl & ~O_DIRECT);
	if (pwrite(fd, &h, sizeof(h), (off_t)at * 4) != (ssize_t)sizeof(h))
		return ferry_error(FERRY_ERR_IO, "%s: error writing its checksum: %s", name, strerror(errno));
	return FERRY_OK;
}

ferry_status ferry_ckpt_write_chunks(const char *file, const struct chunk *chunks, int n_chunks, int checksum_at)
{
	char sb[FERRY_CKPT_SHORT];
	const char *name = ferry_ckpt_short(file, sb);
	ferry_status st = FERRY_OK;
	int fd = -1;

	for (int tries = 0; fd < 0; tries++) {
		fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
		if (fd < 0 && errno == EEXIST && tries == 0 && unlink(file) == 0)
			continue;
		if (fd < 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot create: %s", name, strerror(errno));
	}
	struct ferry_bulk_file *b = NULL;
	uint64_t h = FERRY_FNV_INIT;

	st = ferry_bulk_begin(fd, name, &b);
	for (int i = 0; i < n_chunks && !st; i++)
		st = write_all(b, name, &chunks[i], checksum_at >= 0 ? &h : NULL);
	if (b) {
		ferry_status end = ferry_bulk_end(b);

		st = st ? st : end;
	}
	if (!st && checksum_at >= 0)
		st = patch_checksum(fd, name, checksum_at, h);
	/* the data must be on disk before a rename makes it visible */
	if (!st && (ferry_ckpt_fault() || fsync(fd) != 0))
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", name, strerror(errno));
	if (close(fd) != 0 && !st)
		st = ferry_error(FERRY_ERR_IO, "%s: close failed: %s", name, strerror(errno));
	if (st)
		unlink(file);
	return st;
}

/* The single-file writers' destination: absent or a regular file. */
static ferry_status check_replaceable(const char *path)
{
	char sb[FERRY_CKPT_SHORT];
	struct stat s;

	if (lstat(path, &s) != 0 || S_ISREG(s.st_mode) || S_ISDIR(s.st_mode))
		return FERRY_OK; /* a directory: the rename fails and says so */
	return ferry_error(FERRY_ERR_INVALID, "%s is %s, not a regular file: refusing to replace it",
			   ferry_ckpt_short(path, sb), S_ISLNK(s.st_mode) ? "a symbolic link" : "a device, FIFO or socket");
}

ferry_status ferry_ckpt_write_atomic(const char *path, const struct chunk *chunks, int n_chunks, int checksum_at)
{
	char sb[FERRY_CKPT_SHORT];
	size_t len = strlen(path);
	ferry_status st;
	char *tmp;

	st = check_replaceable(path);
	if (st)
		return st;
	tmp = ferry_malloc(len + 32);
	if (!tmp)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of memory for the temporary name",
				   ferry_ckpt_short(path, sb));
	snprintf(tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
	st = ferry_ckpt_write_chunks(tmp, chunks, n_chunks, checksum_at);
	if (!st && rename(tmp, path) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: cannot rename the temporary over it: %s",
				 ferry_ckpt_short(path, sb), strerror(errno));
		unlink(tmp);
	}
	if (!st)
		sync_dir(path); /* make the rename itself durable */
	ferry_free(tmp);
	return st;
}

