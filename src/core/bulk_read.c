/* Large files at the disk's sequential rate (core/bulk_read.h). */
#include "core/bulk_read.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* Pieces of 16 MiB, two readers (one read in flight while another's page
 * copy runs), four buffers of the reader's own when it has no destination. */
#define PIECE ((size_t)16 << 20)
#define READERS 2
#define SLOTS 4

struct job {
	int fd;
	unsigned char *dst;  /* NULL: the slots */
	unsigned char *slot[SLOTS];
	size_t n, pieces;
	uint64_t off;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t claimed;      /* pieces a reader has taken */
	size_t consumed;     /* pieces the caller is done with */
	unsigned char *done; /* per piece: landed */
	int err;             /* a read's errno (0: none) */
	bool short_file, stop;
};

static unsigned char *piece_at(struct job *j, size_t k)
{
	return j->dst ? j->dst + k * PIECE : j->slot[k % SLOTS];
}

static size_t piece_len(const struct job *j, size_t k)
{
	return j->n - k * PIECE < PIECE ? j->n - k * PIECE : PIECE;
}

/* 0, an errno, or -1 when the file ended first. */
static int read_piece(struct job *j, size_t k)
{
	unsigned char *p = piece_at(j, k);
	size_t left = piece_len(j, k);
	uint64_t at = j->off + k * PIECE;

	while (left) {
		ssize_t r = pread(j->fd, p, left, (off_t)at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno;
		if (r == 0)
			return -1;
		p += r;
		at += (uint64_t)r;
		left -= (size_t)r;
	}
	return 0;
}

static void *reader(void *arg)
{
	struct job *j = arg;

	pthread_mutex_lock(&j->mu);
	for (;;) {
		/* a slot is free once the caller is done with the piece SLOTS before */
		while (!j->stop && !j->err && !j->short_file && j->claimed < j->pieces && !j->dst &&
		       j->claimed >= j->consumed + SLOTS)
			pthread_cond_wait(&j->cv, &j->mu);
		if (j->stop || j->err || j->short_file || j->claimed >= j->pieces)
			break;
		size_t k = j->claimed++;

		pthread_mutex_unlock(&j->mu);
		int e = read_piece(j, k);

		pthread_mutex_lock(&j->mu);
		if (e > 0 && !j->err)
			j->err = e;
		else if (e < 0)
			j->short_file = true;
		else
			j->done[k] = 1;
		pthread_cond_broadcast(&j->cv);
	}
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

ferry_status ferry_bulk_read(int fd, const char *name, const char *what, void *dst, size_t n, uint64_t off,
			     ferry_bulk_piece_fn each, void *ctx)
{
	struct job j = { .fd = fd, .dst = dst, .n = n, .off = off };
	pthread_t th[READERS];
	int started = 0, err;
	bool short_file;

	if (!n)
		return FERRY_OK;
	j.pieces = (n + PIECE - 1) / PIECE;
	j.done = ferry_calloc(j.pieces, 1);
	for (int i = 0; !dst && i < SLOTS; i++)
		j.slot[i] = ferry_malloc(PIECE);
	if (!j.done || (!dst && (!j.slot[0] || !j.slot[1] || !j.slot[2] || !j.slot[3]))) {
		for (int i = 0; i < SLOTS; i++)
			ferry_free(j.slot[i]);
		ferry_free(j.done);
		return ferry_error(FERRY_ERR_NOMEM, "%s: out of host memory reading %s", name, what);
	}
	(void)posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_SEQUENTIAL);
	pthread_mutex_init(&j.mu, NULL);
	pthread_cond_init(&j.cv, NULL);
	for (int i = 0; i < READERS && (size_t)i < j.pieces; i++)
		started += pthread_create(&th[started], NULL, reader, &j) == 0;
	for (size_t k = 0; started && k < j.pieces; k++) {
		pthread_mutex_lock(&j.mu);
		while (!j.done[k] && !j.err && !j.short_file)
			pthread_cond_wait(&j.cv, &j.mu);
		bool ok = j.done[k];

		pthread_mutex_unlock(&j.mu);
		if (!ok)
			break;
		if (each)
			each(ctx, piece_at(&j, k), piece_len(&j, k), k * PIECE);
		pthread_mutex_lock(&j.mu);
		j.consumed = k + 1;
		pthread_cond_broadcast(&j.cv);
		pthread_mutex_unlock(&j.mu);
	}
	pthread_mutex_lock(&j.mu);
	j.stop = true;
	pthread_cond_broadcast(&j.cv);
	pthread_mutex_unlock(&j.mu);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	err = j.err;
	short_file = j.short_file;
	pthread_mutex_destroy(&j.mu);
	pthread_cond_destroy(&j.cv);
	for (int i = 0; i < SLOTS; i++)
		ferry_free(j.slot[i]);
	ferry_free(j.done);
	if (!started)
		return ferry_error(FERRY_ERR_IO, "%s: cannot start a thread to read %s", name, what);
	if (err)
		return ferry_error(FERRY_ERR_IO, "%s: error reading %s: %s", name, what, strerror(err));
	if (short_file)
		return ferry_error(FERRY_ERR_FORMAT, "%s: unexpected end of file reading %s (did the file change?)", name,
				   what);
	return FERRY_OK;
}
