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

/* O_DIRECT if the file system takes it, else through the page cache. */
static ferry_status open_file(struct ferry_nvme_file *f, const char *dir)
{
	int tmp;

	snprintf(f->path, sizeof(f->path), "%s/ferry-tier-%ld-XXXXXX", dir, (long)getpid());
	tmp = mkstemp(f->path);
	if (tmp < 0)
		return ferry_error(FERRY_ERR_IO, "NVMe tier: cannot create a file in %s: %s", dir, strerror(errno));
	f->fd = open(f->path, O_RDWR | O_DIRECT | O_CLOEXEC);
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
	bool want_ring = !(env && !strcmp(env, "pread"));
	int why = 0;
	ferry_status st;

	*out = NULL;
	if (!f)
		return ferry_error(FERRY_ERR_NOMEM, "NVMe tier: out of host memory");
	f->fd = -1;
	for (int i = 0; i < 2; i++)
		if (!(f->lane[i].stage = ferry_aligned_alloc(FERRY_NVME_ALIGN, (size_t)NVME_DEPTH * NVME_CHUNK))) {
			ferry_nvme_file_close(f);
			return ferry_error(FERRY_ERR_NOMEM, "NVMe tier: out of host memory for staging buffers");
		}
	if ((st = open_file(f, dir))) {
		f->path[0] = '\0';
		ferry_nvme_file_close(f);
		return st;
	}
	f->uring = want_ring && lane_ring(&f->lane[0], &why) && lane_ring(&f->lane[1], &why);
	if (f->uring)
		snprintf(f->mode, sizeof(f->mode), "io_uring%s, %s, %d x %u KiB in flight",
			 f->lane[0].fixed && f->lane[1].fixed ? " (registered buffers)" : "",
			 f->direct ? "O_DIRECT" : "page cache (O_DIRECT refused)", NVME_DEPTH, NVME_CHUNK >> 10);
	else
		snprintf(f->mode, sizeof(f->mode), "pread/pwrite (io_uring: %s), %s",
			 want_ring ? strerror(why) : "FERRY_NVME_IO=pread",
			 f->direct ? "O_DIRECT" : "page cache (O_DIRECT refused)");
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

/* Through the staging buffer, a chunk at a time. */
static ferry_status plain_transfer(struct ferry_nvme_file *f, int lane, uint64_t off, char *user, size_t n)
{
	char *stage = f->lane[lane].stage;
	size_t padded = round_up(n, FERRY_NVME_ALIGN);

	for (size_t pos = 0; pos < padded;) {
		size_t len = padded - pos < NVME_CHUNK ? padded - pos : NVME_CHUNK;
		size_t data = n - pos < len ? n - pos : len;
		ssize_t r;

		if (lane == LANE_WRITE)
			memcpy(stage, user + pos, data);
		r = lane == LANE_WRITE ? pwrite(f->fd, stage, len, (off_t)(off + pos))
				       : pread(f->fd, stage, len, (off_t)(off + pos));
		if (r != (ssize_t)len)
			return ferry_error(FERRY_ERR_IO, "NVMe tier: %s %s at %llu: %s", lane == LANE_WRITE ? "write" : "read",
					   f->path, (unsigned long long)(off + pos), r < 0 ? strerror(errno) : "short transfer");
		if (lane == LANE_READ)
			memcpy(user + pos, stage, data);
		pos += len;
	}
	return FERRY_OK;
}

#ifdef FERRY_HAVE_URING
/* Queues chunk [pos, pos + len) of the transfer in staging slot s. */
static void uring_queue(struct ferry_nvme_file *f, int lane, int s, uint64_t off, size_t len)
{
	struct nvme_lane *l = &f->lane[lane];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring); /* the ring has 2 x depth entries */
	char *buf = l->stage + (size_t)s * NVME_CHUNK;

	if (lane == LANE_WRITE && l->fixed)
		io_uring_prep_write_fixed(sqe, f->fd, buf, (unsigned)len, off, s);
	else if (lane == LANE_WRITE)
		io_uring_prep_write(sqe, f->fd, buf, (unsigned)len, off);
	else if (l->fixed)
		io_uring_prep_read_fixed(sqe, f->fd, buf, (unsigned)len, off, s);
	else
		io_uring_prep_read(sqe, f->fd, buf, (unsigned)len, off);
	io_uring_sqe_set_data64(sqe, (uint64_t)s);
}

/* NVME_DEPTH chunks in flight; a slot is refilled as its chunk completes. */
static ferry_status uring_transfer(struct ferry_nvme_file *f, int lane, uint64_t off, char *user, size_t n)
{
	struct nvme_lane *l = &f->lane[lane];
	size_t padded = round_up(n, FERRY_NVME_ALIGN), next = 0, pos[NVME_DEPTH], len[NVME_DEPTH];
	int free_slots[NVME_DEPTH], n_free = NVME_DEPTH, inflight = 0, err = 0;

	for (int i = 0; i < NVME_DEPTH; i++)
		free_slots[i] = i;
	while (next < padded || inflight) {
		struct io_uring_cqe *cqe;
		int r;

		while (!err && n_free && next < padded) {
			int s = free_slots[--n_free];

			pos[s] = next;
			len[s] = padded - next < NVME_CHUNK ? padded - next : NVME_CHUNK;
			if (lane == LANE_WRITE)
				memcpy(l->stage + (size_t)s * NVME_CHUNK, user + next, n - next < len[s] ? n - next : len[s]);
			uring_queue(f, lane, s, off + next, len[s]);
			next += len[s];
			inflight++;
		}
		if (err && !inflight)
			break;
		r = io_uring_submit_and_wait(&l->ring, 1);
		if (r < 0 && r != -EINTR) {
			err = -r;
			break; /* nothing can complete any more */
		}
		while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
			int s = (int)io_uring_cqe_get_data64(cqe);

			if (cqe->res != (int)len[s] && !err)
				err = cqe->res < 0 ? -cqe->res : EIO;
			else if (lane == LANE_READ && !err)
				memcpy(user + pos[s], l->stage + (size_t)s * NVME_CHUNK,
				       n - pos[s] < len[s] ? n - pos[s] : len[s]);
			io_uring_cqe_seen(&l->ring, cqe);
			free_slots[n_free++] = s;
			inflight--;
		}
		if (err)
			next = padded;
	}
	if (err)
		return ferry_error(FERRY_ERR_IO, "NVMe tier: %s %s at %llu: %s", lane == LANE_WRITE ? "write" : "read",
				   f->path, (unsigned long long)off, strerror(err));
	return FERRY_OK;
}
#endif

static ferry_status transfer(struct ferry_nvme_file *f, int lane, uint64_t off, char *user, size_t n)
{
	if (off % FERRY_NVME_ALIGN || off + round_up(n, FERRY_NVME_ALIGN) > f->size)
		return ferry_error(FERRY_ERR_INVALID, "NVMe tier: %zu bytes at %llu: outside the file's %llu bytes "
				   "or unaligned", n, (unsigned long long)off, (unsigned long long)f->size);
#ifdef FERRY_HAVE_URING
	if (f->uring)
		return uring_transfer(f, lane, off, user, n);
#endif
	return plain_transfer(f, lane, off, user, n);
}

ferry_status ferry_nvme_write(struct ferry_nvme_file *f, uint64_t offset, const void *src, size_t n)
{
	return transfer(f, LANE_WRITE, offset, (char *)src, n);
}

ferry_status ferry_nvme_read(struct ferry_nvme_file *f, uint64_t offset, void *dst, size_t n)
{
	return transfer(f, LANE_READ, offset, dst, n);
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
	ferry_free(f);
}
