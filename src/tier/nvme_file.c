/*
 * The NVMe tier's file: O_DIRECT where allowed, io_uring with registered
 * staging buffers and NVME_DEPTH chunk requests in flight, pread/pwrite
 * otherwise.  User memory is copied through the staging buffers, which
 * are aligned as O_DIRECT needs and registered once with the ring.
 */
#include "tier/nvme_file.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef FERRY_HAVE_URING
#include <liburing.h>
#endif

#define NVME_DEPTH 8
#define NVME_CHUNK (1u << 20)

enum { LANE_WRITE, LANE_READ };

struct nvme_lane {
#ifdef FERRY_HAVE_URING
	struct io_uring ring;
#endif
	bool ring_ok, fixed;  /* a ring; its staging buffers registered */
	char *stage;          /* NVME_DEPTH x NVME_CHUNK, aligned */
};

struct ferry_nvme_file {
	int fd;
	bool direct, uring;
	uint64_t size;
	char path[600];
	char mode[160];
	struct nvme_lane lane[2];
	pthread_mutex_t lock;     /* guards failed and error: streams' threads keep them */
	int failed;               /* 0, or the status of the first failure kept */
	char error[256];          /* its message */
};

static size_t round_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

const char *ferry_nvme_file_path(const struct ferry_nvme_file *f) { return f->path; }
const char *ferry_nvme_file_mode(const struct ferry_nvme_file *f) { return f->mode; }
bool ferry_nvme_file_direct(const struct ferry_nvme_file *f) { return f->direct; }
bool ferry_nvme_file_uring(const struct ferry_nvme_file *f) { return f->uring; }

/* A ring for lane l, its staging buffers registered; false: not here. */
static bool lane_ring(struct nvme_lane *l, int *why)
{
#ifdef FERRY_HAVE_URING
	struct iovec iov[NVME_DEPTH];
	int r = io_uring_queue_init(NVME_DEPTH * 2, &l->ring, 0);

	if (r < 0) {
		*why = -r;
		return false;
	}
	for (int i = 0; i < NVME_DEPTH; i++)
		iov[i] = (struct iovec){ l->stage + (size_t)i * NVME_CHUNK, NVME_CHUNK };
	/* registering can fail on a low RLIMIT_MEMLOCK: plain buffers then */
	l->fixed = io_uring_register_buffers(&l->ring, iov, NVME_DEPTH) == 0;
	l->ring_ok = true;
	return true;
#else
	(void)l;
	*why = ENOSYS;
	return false;
#endif
}

/* O_DIRECT if the file system takes it (and nodirect does not say
 * otherwise), else through the page cache. */
static ferry_status open_file(struct ferry_nvme_file *f, const char *dir, bool nodirect)
{
	int tmp;

	snprintf(f->path, sizeof(f->path), "%s/ferry-tier-%ld-XXXXXX", dir, (long)getpid());
	tmp = mkstemp(f->path);
	if (tmp < 0)
		return ferry_error(FERRY_ERR_IO, "NVMe tier: cannot create a file in %s: %s", dir, strerror(errno));
	f->fd = nodirect ? -1 : open(f->path, O_RDWR | O_DIRECT | O_CLOEXEC);
	f->direct = f->fd >= 0;
	if (f->fd < 0)
		f->fd = open(f->path, O_RDWR | O_CLOEXEC);
	close(tmp);
	if (f->fd < 0) {
		int e = errno;

		unlink(f->path);
		return ferry_error(FERRY_ERR_IO, "NVMe tier: %s: %s", f->path, strerror(e));
	}
	return FERRY_OK;
}

ferry_status ferry_nvme_file_create(const char *dir, struct ferry_nvme_file **out)
{
	struct ferry_nvme_file *f = ferry_calloc(1, sizeof(*f));
	const char *env = getenv("FERRY_NVME_IO");
	bool want_ring = !(env && strstr(env, "pread")), nodirect = env && strstr(env, "nodirect");
	int why = 0;
	ferry_status st;

	*out = NULL;
	if (!f)
		return ferry_error(FERRY_ERR_NOMEM, "NVMe tier: out of host memory");
	f->fd = -1;
	pthread_mutex_init(&f->lock, NULL);
	for (int i = 0; i < 2; i++)
		if (!(f->lane[i].stage = ferry_aligned_alloc(FERRY_NVME_ALIGN, (size_t)NVME_DEPTH * NVME_CHUNK))) {
			ferry_nvme_file_close(f);
			return ferry_error(FERRY_ERR_NOMEM, "NVMe tier: out of host memory for staging buffers");
		}
	if ((st = open_file(f, dir, nodirect))) {
		f->path[0] = '\0';
		ferry_nvme_file_close(f);
		return st;
	}
	f->uring = want_ring && lane_ring(&f->lane[0], &why) && lane_ring(&f->lane[1], &why);
	if (f->uring)
		snprintf(f->mode, sizeof(f->mode), "io_uring%s, %s, %d x %u KiB in flight",
			 f->lane[0].fixed && f->lane[1].fixed ? " (registered buffers)" : "",
			 f->direct ? "O_DIRECT" : nodirect ? "page cache (FERRY_NVME_IO)" : "page cache (O_DIRECT refused)",
			 NVME_DEPTH, NVME_CHUNK >> 10);
	else
		snprintf(f->mode, sizeof(f->mode), "pread/pwrite (io_uring: %s), %s",
			 !want_ring ? "FERRY_NVME_IO" :
#ifdef FERRY_HAVE_URING
			 strerror(why),
#else
			 "built without liburing",
#endif
			 f->direct ? "O_DIRECT" : nodirect ? "page cache (FERRY_NVME_IO)" : "page cache (O_DIRECT refused)");
	*out = f;
	return FERRY_OK;
}

ferry_status ferry_nvme_file_reserve(struct ferry_nvme_file *f, uint64_t size)
{
	char need[FERRY_SIZE_CHARS], has[FERRY_SIZE_CHARS];
	struct statvfs sv;
	int r;

	size = round_up(size, FERRY_NVME_ALIGN);
	if (size <= f->size)
		return FERRY_OK;
	r = posix_fallocate(f->fd, (off_t)f->size, (off_t)(size - f->size));
	if (r == EOPNOTSUPP || r == EINVAL)
		r = ftruncate(f->fd, (off_t)size) == 0 ? 0 : errno;
	if (r) {
		uint64_t avail = statvfs(f->path, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : 0;

		if (ftruncate(f->fd, (off_t)f->size) != 0) { /* give back what was taken */ }
		return ferry_error(FERRY_ERR_IO, "NVMe tier: %s: cannot reserve %s (%s; %s free there)", f->path,
				   ferry_format_size(size - f->size, need), strerror(r), ferry_format_size(avail, has));
	}
	f->size = size;
	return FERRY_OK;
}

/* One transfer: user bytes [off, off + n) of the file, moved in the
 * aligned range [a0, a1) that covers them, chunk by chunk. */
struct xfer {
	struct ferry_nvme_file *f;
	int lane;
	uint64_t off, a0, a1;
	char *user;
	size_t n;
};

static ferry_status io_error(const struct xfer *x, uint64_t at, int err)
{
	return ferry_error(FERRY_ERR_IO, "NVMe tier: %s %s at %llu: %s", x->lane == LANE_WRITE ? "write" : "read",
			   x->f->path, (unsigned long long)at, err ? strerror(err) : "short transfer");
}

/* Before writing chunk [cs, ce) from stage: a block the user bytes cover
 * only in part is read first (read-modify-write), then the user's bytes
 * are laid over it. */
static ferry_status fill(const struct xfer *x, char *stage, uint64_t cs, uint64_t ce)
{
	uint64_t from = x->off > cs ? x->off : cs, to = x->off + x->n < ce ? x->off + x->n : ce;
	uint64_t partial[2] = { cs, ce - FERRY_NVME_ALIGN };
	bool part[2] = { from > cs, to < ce };

	for (int i = 0; i < 2; i++)
		if (part[i] && !(i == 1 && part[0] && partial[1] == partial[0]) &&
		    pread(x->f->fd, stage + (partial[i] - cs), FERRY_NVME_ALIGN, (off_t)partial[i]) != FERRY_NVME_ALIGN)
			return io_error(x, partial[i], errno);
	memcpy(stage + (from - cs), x->user + (from - x->off), to - from);
	return FERRY_OK;
}

/* After reading chunk [cs, ce) into stage: the user's part of it. */
static void drain(const struct xfer *x, const char *stage, uint64_t cs, uint64_t ce)
{
	uint64_t from = x->off > cs ? x->off : cs, to = x->off + x->n < ce ? x->off + x->n : ce;

	memcpy(x->user + (from - x->off), stage + (from - cs), to - from);
}

/* Through the staging buffer, a chunk at a time. */
static ferry_status plain_transfer(const struct xfer *x)
{
	char *stage = x->f->lane[x->lane].stage;
	ferry_status st;

	for (uint64_t cs = x->a0; cs < x->a1; cs += NVME_CHUNK) {
		uint64_t ce = x->a1 - cs < NVME_CHUNK ? x->a1 : cs + NVME_CHUNK;
		ssize_t r;

		if (x->lane == LANE_WRITE && (st = fill(x, stage, cs, ce)))
			return st;
		r = x->lane == LANE_WRITE ? pwrite(x->f->fd, stage, ce - cs, (off_t)cs)
					  : pread(x->f->fd, stage, ce - cs, (off_t)cs);
		if (r != (ssize_t)(ce - cs))
			return io_error(x, cs, r < 0 ? errno : 0);
		if (x->lane == LANE_READ)
			drain(x, stage, cs, ce);
	}
	return FERRY_OK;
}

#ifdef FERRY_HAVE_URING
/* Queues chunk [cs, ce) in staging slot s. */
static void uring_queue(const struct xfer *x, int s, uint64_t cs, uint64_t ce)
{
	struct nvme_lane *l = &x->f->lane[x->lane];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring); /* the ring has 2 x depth entries */
	char *buf = l->stage + (size_t)s * NVME_CHUNK;
	unsigned len = (unsigned)(ce - cs);

	if (x->lane == LANE_WRITE && l->fixed)
		io_uring_prep_write_fixed(sqe, x->f->fd, buf, len, cs, s);
	else if (x->lane == LANE_WRITE)
		io_uring_prep_write(sqe, x->f->fd, buf, len, cs);
	else if (l->fixed)
		io_uring_prep_read_fixed(sqe, x->f->fd, buf, len, cs, s);
	else
		io_uring_prep_read(sqe, x->f->fd, buf, len, cs);
	io_uring_sqe_set_data64(sqe, (uint64_t)s);
}

/* Takes the completions there are: each frees its slot. */
static int uring_reap(const struct xfer *x, const uint64_t *at, int *free_slots, int *n_free, int *inflight,
		      int err)
{
	struct nvme_lane *l = &x->f->lane[x->lane];
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		int s = (int)io_uring_cqe_get_data64(cqe);
		uint64_t ce = x->a1 - at[s] < NVME_CHUNK ? x->a1 : at[s] + NVME_CHUNK;

		if (cqe->res != (int)(ce - at[s]) && !err)
			err = cqe->res < 0 ? -cqe->res : EIO;
		else if (x->lane == LANE_READ && !err)
			drain(x, l->stage + (size_t)s * NVME_CHUNK, at[s], ce);
		io_uring_cqe_seen(&l->ring, cqe);
		free_slots[(*n_free)++] = s;
		(*inflight)--;
	}
	return err;
}

/* NVME_DEPTH chunks in flight; a slot is refilled as its chunk completes. */
static ferry_status uring_transfer(const struct xfer *x)
{
	struct nvme_lane *l = &x->f->lane[x->lane];
	uint64_t next = x->a0, at[NVME_DEPTH];
	int free_slots[NVME_DEPTH], n_free = NVME_DEPTH, inflight = 0, err = 0;
	ferry_status st = FERRY_OK;

	for (int i = 0; i < NVME_DEPTH; i++)
		free_slots[i] = i;
	while ((!err && next < x->a1) || inflight) {
		int r;

		while (!err && n_free && next < x->a1) {
			int s = free_slots[--n_free];
			uint64_t ce = x->a1 - next < NVME_CHUNK ? x->a1 : next + NVME_CHUNK;

			if (x->lane == LANE_WRITE && (st = fill(x, l->stage + (size_t)s * NVME_CHUNK, next, ce))) {
				err = EIO;
				break;
			}
			at[s] = next;
			uring_queue(x, s, next, ce);
			next = ce;
			inflight++;
		}
		r = inflight ? io_uring_submit_and_wait(&l->ring, 1) : 0;
		if (r < 0 && r != -EINTR) {
			err = -r;
			break; /* nothing can complete any more */
		}
		err = uring_reap(x, at, free_slots, &n_free, &inflight, err);
	}
	if (st)
		return st;
	return err ? io_error(x, x->a0, err) : FERRY_OK;
}
#endif

static ferry_status transfer(struct ferry_nvme_file *f, int lane, uint64_t off, char *user, size_t n)
{
	struct xfer x = { f, lane, off, off / FERRY_NVME_ALIGN * FERRY_NVME_ALIGN,
			  round_up(off + n, FERRY_NVME_ALIGN), user, n };

	if (n == 0)
		return FERRY_OK;
	if (off + n > f->size || off + n < off)
		return ferry_error(FERRY_ERR_INVALID, "NVMe tier: %zu bytes at %llu: past the file's %llu bytes",
				   n, (unsigned long long)off, (unsigned long long)f->size);
#ifdef FERRY_HAVE_URING
	if (f->uring)
		return uring_transfer(&x);
#endif
	return plain_transfer(&x);
}

ferry_status ferry_nvme_write(struct ferry_nvme_file *f, uint64_t offset, const void *src, size_t n)
{
	return transfer(f, LANE_WRITE, offset, (char *)src, n);
}

ferry_status ferry_nvme_read(struct ferry_nvme_file *f, uint64_t offset, void *dst, size_t n)
{
	return transfer(f, LANE_READ, offset, dst, n);
}

void ferry_nvme_file_keep(struct ferry_nvme_file *f, ferry_status st)
{
	if (!st)
		return;
	pthread_mutex_lock(&f->lock);
	if (!f->failed) {
		f->failed = st;
		snprintf(f->error, sizeof(f->error), "%s", ferry_last_error());
	}
	pthread_mutex_unlock(&f->lock);
}

ferry_status ferry_nvme_file_status(struct ferry_nvme_file *f)
{
	ferry_status st = FERRY_OK;

	if (!f)
		return FERRY_OK;
	pthread_mutex_lock(&f->lock);
	if (f->failed)
		st = ferry_error(f->failed, "%s", f->error);
	pthread_mutex_unlock(&f->lock);
	return st;
}

void ferry_nvme_file_close(struct ferry_nvme_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < 2; i++) {
#ifdef FERRY_HAVE_URING
		if (f->lane[i].ring_ok)
			io_uring_queue_exit(&f->lane[i].ring);
#endif
		ferry_free(f->lane[i].stage);
	}
	if (f->fd >= 0)
		close(f->fd);
	if (f->path[0])
		unlink(f->path);
	pthread_mutex_destroy(&f->lock);
	ferry_free(f);
}
