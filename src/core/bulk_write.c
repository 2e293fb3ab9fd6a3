/* Large files at the disk's sequential rate (core/bulk_write.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include "core/bulk_write.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* O_DIRECT wants buffers, offsets and lengths in whole logical blocks:
 * 4096 covers every disk's.  16 MiB a buffer: large enough that each
 * write streams, small enough to cost nothing beside a checkpoint. */
#define BULK_ALIGN ((size_t)4096)
#define BULK_BUF ((size_t)16 << 20)

struct ferry_bulk_file {
	int fd;
	char name[256];
	bool direct;
	unsigned char *buf[2];
	int cur;       /* the buffer being filled */
	size_t fill;   /* its bytes */
	off_t offset;  /* where it goes in the file */
	/* the writer thread: one buffer at a time */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int pending;   /* the buffer it writes, -1: none */
	size_t pending_len;
	off_t pending_off;
	bool stop;
	int err;       /* the first write's errno (0: none); said on the caller's thread */
};

/* len bytes of p at off, past EINTR and short writes; O_DIRECT refused
 * mid-way (EINVAL) turns it off and writes plainly.  0 or an errno. */
static int write_at(struct ferry_bulk_file *b, const unsigned char *p, size_t len, off_t off)
{
	while (len) {
		ssize_t w = pwrite(b->fd, p, len, off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EINVAL && b->direct) {
			int fl = fcntl(b->fd, F_GETFL);

			if (fl < 0 || fcntl(b->fd, F_SETFL, fl & ~O_DIRECT) != 0)
				return errno;
			b->direct = false;
			continue;
		}
		if (w <= 0)
			return w < 0 ? errno : EIO;
		p += w;
		off += w;
		len -= (size_t)w;
	}
	return 0;
}

static void *writer(void *arg)
{
	struct ferry_bulk_file *b = arg;

	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (b->pending < 0 && !b->stop)
			pthread_cond_wait(&b->cv, &b->mu);
		if (b->pending < 0)
			break;
		int i = b->pending, e = 0;
		size_t len = b->pending_len;
		off_t off = b->pending_off;
		bool failed = b->err != 0; /* after an error, nothing more is written */

		pthread_mutex_unlock(&b->mu);
		if (!failed)
			e = write_at(b, b->buf[i], len, off);
		pthread_mutex_lock(&b->mu);
		if (e && !b->err)
			b->err = e;
		b->pending = -1;
		pthread_cond_broadcast(&b->cv);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* Waits for the writer to be idle; its error, said here. */
static ferry_status wait_idle(struct ferry_bulk_file *b)
{
	int e;

	pthread_mutex_lock(&b->mu);
	while (b->pending >= 0)
		pthread_cond_wait(&b->cv, &b->mu);
	e = b->err;
	pthread_mutex_unlock(&b->mu);
	return e ? ferry_error(FERRY_ERR_IO, "%s: error writing: %s", b->name, strerror(e)) : FERRY_OK;
}

/* Hands the filled buffer (len bytes, whole blocks when direct) to the writer. */
static ferry_status hand_over(struct ferry_bulk_file *b, size_t len)
{
	ferry_status st = wait_idle(b);

	if (st)
		return st;
	pthread_mutex_lock(&b->mu);
	b->pending = b->cur;
	b->pending_len = len;
	b->pending_off = b->offset;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	b->offset += (off_t)len;
	b->cur ^= 1;
	b->fill = 0;
	return FERRY_OK;
}

static void bulk_free(struct ferry_bulk_file *b)
{
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
	ferry_free(b->buf[0]);
	ferry_free(b->buf[1]);
	ferry_free(b);
}

ferry_status ferry_bulk_begin(int fd, const char *name, struct ferry_bulk_file **out)
{
	struct ferry_bulk_file *b = ferry_calloc(1, sizeof(*b));
	int fl;

	*out = NULL;
	if (!b)
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory", name);
	b->fd = fd;
	b->pending = -1;
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->buf[0] = ferry_aligned_alloc(BULK_ALIGN, BULK_BUF);
	b->buf[1] = ferry_aligned_alloc(BULK_ALIGN, BULK_BUF);
	if (!b->buf[0] || !b->buf[1]) {
		ferry_free(b->buf[0]);
		ferry_free(b->buf[1]);
		ferry_free(b);
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory for the write buffers", name);
	}
	/* past the page cache where the file system allows it */
	fl = fcntl(fd, F_GETFL);
	b->direct = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	if (pthread_create(&b->thread, NULL, writer, b) != 0) {
		bulk_free(b);
		return ferry_error(FERRY_ERR_IO, "%s: cannot start the writer thread", name);
	}
	*out = b;
	return FERRY_OK;
}

bool ferry_bulk_direct(const struct ferry_bulk_file *b)
{
	return b->direct;
}

void *ferry_bulk_space(struct ferry_bulk_file *b, size_t *n)
{
	*n = BULK_BUF - b->fill;
	return b->buf[b->cur] + b->fill;
}

ferry_status ferry_bulk_commit(struct ferry_bulk_file *b, size_t n)
{
	b->fill += n;
	return b->fill == BULK_BUF ? hand_over(b, BULK_BUF) : FERRY_OK;
}

ferry_status ferry_bulk_append(struct ferry_bulk_file *b, const void *p, size_t n)
{
	const unsigned char *s = p;
	ferry_status st = FERRY_OK;

	while (n && !st) {
		size_t room, m;
		void *d = ferry_bulk_space(b, &room);

		m = n < room ? n : room;
		memcpy(d, s, m);
		s += m;
		n -= m;
		st = ferry_bulk_commit(b, m);
	}
	return st;
}

ferry_status ferry_bulk_end(struct ferry_bulk_file *b)
{
	off_t size = b->offset + (off_t)b->fill;
	ferry_status st = wait_idle(b); /* (then b->direct is the writer's last word) */

	if (!st && b->fill) {
		/* the last blocks whole (zeros past the end), then the exact size */
		size_t len = b->direct ? (b->fill + BULK_ALIGN - 1) / BULK_ALIGN * BULK_ALIGN : b->fill;

		memset(b->buf[b->cur] + b->fill, 0, len - b->fill);
		st = hand_over(b, len);
	}
	ferry_status w = wait_idle(b);

	st = st ? st : w;
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	pthread_join(b->thread, NULL);
	if (!st && ftruncate(b->fd, size) != 0)
		st = ferry_error(FERRY_ERR_IO, "%s: cannot set its size: %s", b->name, strerror(errno));
	bulk_free(b);
	return st;
}
