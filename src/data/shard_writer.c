/*
 * Writing one split of a corpus as token shards (shard_writer.h): each
 * shard is written as "<name>.tmp.<pid>" with a placeholder header, the
 * token count filled in and the file fsynced at close; only
 * ferry_shard_writer_commit renames them into place.
 */
#include "data/shard_writer.h"
#include "ferry/data.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "shard files are written little-endian without swapping");

#define SHARD_HEADER_INTS 256

static ferry_status shard_name(const struct ferry_shard_writer *w, int index,
			       char *out, size_t size, const char *suffix)
{
	int n = snprintf(out, size, "%s_%s_%06d.bin%s", w->prefix, w->split,
			 index, suffix);

	if (n < 0 || (size_t)n >= size)
		return ferry_error(FERRY_ERR_INVALID,
				   "output prefix '%s' is too long", w->prefix);
	return FERRY_OK;
}

/* The temporary shard `index` is written to, until the commit. */
static ferry_status tmp_name(const struct ferry_shard_writer *w, int index, char *out, size_t size)
{
	char suffix[32];

	snprintf(suffix, sizeof(suffix), ".tmp.%ld", (long)getpid());
	return shard_name(w, index, out, size, suffix);
}

static ferry_status writer_open(struct ferry_shard_writer *w)
{
	int32_t hdr[SHARD_HEADER_INTS] = { 0 };
	ferry_status st;

	st = shard_name(w, w->index, w->path, sizeof(w->path), "");
	if (!st)
		st = tmp_name(w, w->index, w->tmp, sizeof(w->tmp));
	if (st)
		return st;
	w->f = fopen(w->tmp, "wb");
	if (!w->f)
		return ferry_error(FERRY_ERR_IO, "%s: cannot create: %s", w->tmp,
				   strerror(errno));
	/* Placeholder header; the token count is filled in at close. */
	if (fwrite(hdr, sizeof(hdr), 1, w->f) != 1) {
		st = ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				 strerror(errno));
		fclose(w->f);
		w->f = NULL;
		remove(w->tmp);
		return st;
	}
	w->in_shard = 0;
	return FERRY_OK;
}

/* Version 1's uint16 tokens are narrowed in place, front to back. */
static ferry_status writer_flush(struct ferry_shard_writer *w)
{
	if (w->stop && w->stop(w->stop_ctx))
		return ferry_error(FERRY_ERR_INVALID, "stopped before %s was complete", w->path);
	if (w->width == 2)
		for (int i = 0; i < w->n_buf; i++) {
			uint16_t v = (uint16_t)w->buf[i];

			memcpy((char *)w->buf + 2 * i, &v, sizeof(v));
		}
	if (w->n_buf &&
	    fwrite(w->buf, (size_t)w->width, (size_t)w->n_buf, w->f) !=
		    (size_t)w->n_buf)
		return ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				   strerror(errno));
	w->n_buf = 0;
	return FERRY_OK;
}

/* Drops the open shard's tmp file (after an error). */
static void writer_abort(struct ferry_shard_writer *w)
{
	if (!w->f)
		return;
	fclose(w->f);
	w->f = NULL;
	remove(w->tmp);
}

/* Completes the open shard: header, flush, fsync, close; it stays a
 * temporary until writer_commit. */
ferry_status ferry_shard_writer_close(struct ferry_shard_writer *w)
{
	int32_t hdr[SHARD_HEADER_INTS] = { 0 };
	ferry_status st;
	int rc;

	if (!w->f)
		return FERRY_OK;
	st = writer_flush(w);
	if (st)
		goto fail;
	if (w->flags && w->in_shard &&
	    fwrite(w->flag, 1, (size_t)w->in_shard, w->f) != (size_t)w->in_shard) {
		st = ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
		goto fail;
	}
	hdr[0] = FERRY_SHARD_MAGIC;
	hdr[1] = w->flags ? FERRY_SHARD_VERSION_DOCS
		 : w->width == 4 ? FERRY_SHARD_VERSION_U32 : FERRY_SHARD_VERSION;
	hdr[2] = (int32_t)w->in_shard;
	if (fseek(w->f, 0, SEEK_SET) != 0 ||
	    fwrite(hdr, sizeof(hdr), 1, w->f) != 1 || fflush(w->f) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: write failed: %s", w->tmp,
				 strerror(errno));
		goto fail;
	}
	if (fsync(fileno(w->f)) != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: fsync failed: %s", w->tmp,
				 strerror(errno));
		goto fail;
	}
	rc = fclose(w->f);
	w->f = NULL;
	if (rc != 0) {
		st = ferry_error(FERRY_ERR_IO, "%s: close failed: %s", w->tmp,
				 strerror(errno));
		remove(w->tmp);
		return st;
	}
	w->index++;
	return FERRY_OK;
fail:
	writer_abort(w);
	return st;
}

ferry_status ferry_shard_writer_put(struct ferry_shard_writer *w, uint32_t tok)
{
	ferry_status st;

	if (!w->f) {
		st = writer_open(w);
		if (st)
			return st;
	}
	w->buf[w->n_buf++] = tok;
	w->in_shard++;
	w->total++;
	if (w->n_buf == FERRY_SHARD_WRITE_BUF) {
		st = writer_flush(w);
		if (st)
			return st;
	}
	if (w->in_shard == w->shard_tokens && !w->flags)
		return ferry_shard_writer_close(w);
	return FERRY_OK;
}

ferry_status ferry_shard_writer_put_flagged(struct ferry_shard_writer *w, uint32_t tok,
					    uint8_t flags)
{
	long at = w->f ? w->in_shard : 0;

	if (at == w->flag_cap) {
		long cap = w->flag_cap ? 2 * w->flag_cap : 65536;
		uint8_t *p = realloc(w->flag, (size_t)cap);

		if (!p)
			return ferry_error(FERRY_ERR_NOMEM, "out of memory for a shard's token flags");
		w->flag = p;
		w->flag_cap = cap;
	}
	w->flag[at] = flags;
	return ferry_shard_writer_put(w, tok);
}

/* Removes this run's temporaries: the open shard's and the completed ones. */
void ferry_shard_writer_discard(struct ferry_shard_writer *w)
{
	char tmp[PATH_MAX];

	writer_abort(w);
	for (int i = 0; i < w->index; i++)
		if (!tmp_name(w, i, tmp, sizeof(tmp)))
			remove(tmp);
	w->index = 0;
}

/* Renames the completed shards into place, from the first; a failure
 * stops there (the caller discards the rest). */
ferry_status ferry_shard_writer_commit(struct ferry_shard_writer *w, int *done)
{
	char tmp[PATH_MAX], path[PATH_MAX];

	for (*done = 0; *done < w->index; (*done)++) {
		if (tmp_name(w, *done, tmp, sizeof(tmp)) ||
		    shard_name(w, *done, path, sizeof(path), ""))
			return FERRY_ERR_INVALID;
		if (rename(tmp, path) != 0)
			return ferry_error(FERRY_ERR_IO, "%s: cannot rename to %s: %s",
					   tmp, path, strerror(errno));
	}
	return FERRY_OK;
}

/* Removes "<prefix>_<split>_N.bin" for N = from, from+1, ... while they exist:
 * leftovers of an earlier, longer run would otherwise join this run's glob. */
void ferry_shard_writer_remove_stale(const struct ferry_shard_writer *w, int from)
{
	char path[PATH_MAX];
	int i;

	for (i = from; i < INT_MAX; i++) {
		if (shard_name(w, i, path, sizeof(path), ""))
			return;
		if (remove(path) != 0)
			return;
	}
}


/* The writer's PID when name is "<base>_<split>_NNNNNN.bin.tmp.PID", else 0. */
static long tmp_owner(const char *name, const char *base, const char *split)
{
	size_t lb = strlen(base), ls = strlen(split);
	const char *p = name;
	char *end;
	long pid;
	int i;

	if (strncmp(p, base, lb) || p[lb] != '_' || strncmp(p + lb + 1, split, ls) || p[lb + 1 + ls] != '_')
		return 0;
	p += lb + ls + 2;
	for (i = 0; i < 6; i++)
		if (p[i] < '0' || p[i] > '9')
			return 0;
	p += 6;
	if (strncmp(p, ".bin.tmp.", 9) || p[9] < '1' || p[9] > '9')
		return 0;
	errno = 0;
	pid = strtol(p + 9, &end, 10);
	return errno || *end || pid <= 0 ? 0 : pid;
}

/* When process pid started, in seconds since the epoch, from Linux's
 * /proc; -1 when unknown.  *zombie: it has exited, and its parent has not
 * yet waited for it (kill(pid, 0) still finds it). */
static long long proc_start(long pid, bool *zombie)
{
	char name[64], buf[1024], *p;
	unsigned long long ticks = 0;
	long long btime = -1;
	size_t n;
	FILE *f;

	snprintf(name, sizeof(name), "/proc/%ld/stat", pid);
	f = fopen(name, "r");
	n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* past the command's name, which may hold anything */
	if (!p || strlen(p) < 3)
		return -1;
	*zombie = p[2] == 'Z' || p[2] == 'X';
	/* its 22nd field: the start, in clock ticks after boot */
	if (sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
		   &ticks) != 1)
		return -1;
	f = fopen("/proc/stat", "r");
	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "btime %lld", &btime) == 1)
			break;
	if (f)
		fclose(f);
	return btime < 0 ? -1 : btime + (long long)(ticks / (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* Whether the process that wrote temporary path may still be writing it:
 * pid alive, not a zombie, and not a later process given the same pid
 * (started after the file was last written; a minute's slack for a
 * network file system's clock). */
static bool writer_alive(long pid, const char *path)
{
	bool zombie = false;
	long long start;
	struct stat sb;

	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return false;
	start = proc_start(pid, &zombie);
	if (zombie)
		return false;
	return start < 0 || stat(path, &sb) != 0 || start <= (long long)sb.st_mtime + 60;
}

void ferry_shard_writer_remove_dead(const struct ferry_shard_writer *w)
{
	char dir[PATH_MAX], path[PATH_MAX];
	const char *slash = strrchr(w->prefix, '/'), *base = slash ? slash + 1 : w->prefix;
	struct dirent *de;
	DIR *d;

	if (!slash)
		strcpy(dir, ".");
	else if ((size_t)snprintf(dir, sizeof(dir), "%.*s", slash == w->prefix ? 1 : (int)(slash - w->prefix),
				  w->prefix) >= sizeof(dir))
		return;
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		long pid = tmp_owner(de->d_name, base, w->split);

		if (!pid || pid == (long)getpid() || pid != (long)(pid_t)pid)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
			continue;
		if (!writer_alive(pid, path)) /* else its run may still commit */
			remove(path);
	}
	closedir(d);
}
