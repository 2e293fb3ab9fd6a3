/*
 * Host <-> device copy bandwidth: ferry's copies (host buffers from
 * ferry_host_alloc, device buffers from its arena, ferry_memcpy_async on
 * ferry streams) against plain cudaMemcpyAsync between cudaHostAlloc and
 * cudaMalloc memory of the same sizes, each direction alone and both at once.
 *
 *   bench_copy [--backend cpu|cuda] [--sizes 1,4,16,64,256] [--reps 20]
 *
 * Prints GB/s (1e9 bytes/s) per size and case and, on CUDA, the ratio
 * ferry/plain (the target is at least 0.9), then pageable-memory copies for
 * context.  On the CPU backend only ferry's copies run (memcpy bandwidth
 * between host memory and the arena), so that it runs without a GPU.
 */
#include "ferry/backend.h"
#include "bench_util.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FERRY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MIB ((size_t)1 << 20)
#define MAX_SIZES 32

enum { H2D = 0, D2H = 1 };

struct args {
	const char *backend;
	size_t sizes[MAX_SIZES]; /* bytes */
	int n_sizes, reps;
};

/* One way of copying, ferry's or the plain runtime's: direction d copies
 * between host[d] and dev[d] on its own stream.  The timing code runs the
 * same sequence on either, so that the two differ only in the copies. */
struct copier {
	void *host[2], *dev[2];
	void *ctx;
	void (*copy)(struct copier *c, int dir, size_t size);
	void (*mark)(struct copier *c, int dir);  /* after a direction's last copy */
	bool (*done)(struct copier *c, int dir);  /* has it reached the mark */
	void (*sync)(struct copier *c, int dir);
};

static void check(ferry_status st)
{
	if (st) {
		fprintf(stderr, "bench_copy: %s\n", ferry_last_error());
		exit(1);
	}
}

/* ---- ferry's copies ------------------------------------------------------------ */

struct ferry_side {
	ferry_backend_t be;
	ferry_stream_t s[2];
	ferry_event_t ev[2];
	ferry_buffer_t buf[2];
};

static void ferry_copy(struct copier *c, int dir, size_t size)
{
	struct ferry_side *f = c->ctx;

	if (dir == H2D)
		check(ferry_memcpy_async(f->s[dir], c->dev[dir], c->host[dir], size, FERRY_COPY_H2D));
	else
		check(ferry_memcpy_async(f->s[dir], c->host[dir], c->dev[dir], size, FERRY_COPY_D2H));
}

static void ferry_mark(struct copier *c, int dir)
{
	struct ferry_side *f = c->ctx;

	check(ferry_event_record(f->ev[dir], f->s[dir]));
}

static bool ferry_done(struct copier *c, int dir)
{
	return ferry_event_done(((struct ferry_side *)c->ctx)->ev[dir]);
}

static void ferry_sync(struct copier *c, int dir)
{
	check(ferry_stream_synchronize(((struct ferry_side *)c->ctx)->s[dir]));
}

static void ferry_side_open(struct ferry_side *f, struct copier *c, size_t max)
{
	static const char *names[2] = { "h2d", "d2h" };

	*c = (struct copier){ .ctx = f, .copy = ferry_copy, .mark = ferry_mark, .done = ferry_done,
			      .sync = ferry_sync };
	for (int d = 0; d < 2; d++) {
		check(ferry_stream_create(f->be, names[d], &f->s[d]));
		check(ferry_event_create(f->be, &f->ev[d]));
		check(ferry_buffer_alloc(f->be, max, &f->buf[d]));
		check(ferry_host_alloc(f->be, max, &c->host[d]));
		c->dev[d] = ferry_buffer_ptr(f->buf[d]);
		memset(c->host[d], d + 1, max); /* fault the pages in before timing */
	}
}

static void ferry_side_close(struct ferry_side *f, struct copier *c)
{
	for (int d = 0; d < 2; d++) {
		ferry_stream_free(f->s[d]);
		ferry_event_free(f->ev[d]);
		ferry_buffer_free(f->buf[d]);
		ferry_host_free(f->be, c->host[d]);
	}
}

/* ---- plain CUDA runtime copies (the reference) --------------------------------- */

#ifdef FERRY_HAVE_CUDA
struct cuda_side {
	cudaStream_t s[2];
	void *pinned[2], *pageable[2];
};

static void check_cuda(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "bench_copy: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

static void cuda_copy(struct copier *c, int dir, size_t size)
{
	struct cuda_side *r = c->ctx;

	if (dir == H2D)
		check_cuda(cudaMemcpyAsync(c->dev[dir], c->host[dir], size, cudaMemcpyHostToDevice, r->s[dir]),
			   "cudaMemcpyAsync");
	else
		check_cuda(cudaMemcpyAsync(c->host[dir], c->dev[dir], size, cudaMemcpyDeviceToHost, r->s[dir]),
			   "cudaMemcpyAsync");
}

static void cuda_mark(struct copier *c, int dir)
{
	(void)c; /* the stream itself is polled */
	(void)dir;
}

static bool cuda_done(struct copier *c, int dir)
{
	cudaError_t e = cudaStreamQuery(((struct cuda_side *)c->ctx)->s[dir]);

	if (e == cudaErrorNotReady)
		return false;
	check_cuda(e, "cudaStreamQuery");
	return true;
}

static void cuda_sync(struct copier *c, int dir)
{
	check_cuda(cudaStreamSynchronize(((struct cuda_side *)c->ctx)->s[dir]), "cudaStreamSynchronize");
}

/* Two copiers on the same streams and device memory: pinned host memory
 * (the reference) and malloc'd pageable memory (for context). */
static void cuda_side_open(struct cuda_side *r, struct copier *pinned, struct copier *pageable, size_t max)
{
	*pinned = (struct copier){ .ctx = r, .copy = cuda_copy, .mark = cuda_mark, .done = cuda_done,
				   .sync = cuda_sync };
	*pageable = *pinned;
	for (int d = 0; d < 2; d++) {
		check_cuda(cudaStreamCreateWithFlags(&r->s[d], cudaStreamNonBlocking), "cudaStreamCreate");
		check_cuda(cudaMalloc(&pinned->dev[d], max), "cudaMalloc");
		check_cuda(cudaHostAlloc(&r->pinned[d], max, cudaHostAllocDefault), "cudaHostAlloc");
		r->pageable[d] = malloc(max);
		if (!r->pageable[d]) {
			fprintf(stderr, "bench_copy: out of host memory\n");
			exit(1);
		}
		memset(r->pinned[d], d + 1, max);
		memset(r->pageable[d], d + 1, max);
		pinned->host[d] = r->pinned[d];
		pageable->host[d] = r->pageable[d];
		pageable->dev[d] = pinned->dev[d];
	}
}

static void cuda_side_close(struct cuda_side *r, struct copier *c)
{
	for (int d = 0; d < 2; d++) {
		cudaStreamSynchronize(r->s[d]);
		cudaStreamDestroy(r->s[d]);
		cudaFree(c->dev[d]);
		cudaFreeHost(r->pinned[d]);
		free(r->pageable[d]);
	}
}
#endif

/* ---- timing ----------------------------------------------------------------------- */

/* GB/s of reps copies of size bytes in the directions of mask (1: H2D,
 * 2: D2H, 3: both at once, submitted alternately to their two streams),
 * after a warm-up copy in each.  A direction alone is timed to its stream's
 * synchronisation; with both, each is timed to when its own stream drained
 * (polled, since one may finish well before the other), and gbps[2] is all
 * the bytes over the time until both had. */
static void time_case(struct copier *c, size_t size, int reps, int mask, double gbps[3])
{
	double t0, end[2] = { 0, 0 };
	int left = mask;

	for (int d = 0; d < 2; d++)
		if (mask & (1 << d))
			c->copy(c, d, size);
	for (int d = 0; d < 2; d++)
		if (mask & (1 << d))
			c->sync(c, d);
	t0 = now_s();
	for (int r = 0; r < reps; r++)
		for (int d = 0; d < 2; d++)
			if (mask & (1 << d))
				c->copy(c, d, size);
	if (mask == 3) {
		c->mark(c, H2D);
		c->mark(c, D2H);
		while (left) {
			for (int d = 0; d < 2; d++)
				if ((left & (1 << d)) && c->done(c, d)) {
					end[d] = now_s();
					left &= ~(1 << d);
				}
			if (left)
				sched_yield();
		}
	}
	for (int d = 0; d < 2; d++)
		if (mask & (1 << d)) {
			c->sync(c, d); /* and reports any error of the copies */
			if (end[d] == 0)
				end[d] = now_s();
			gbps[d] = (double)size * reps / (end[d] - t0) / 1e9;
		}
	if (mask == 3)
		gbps[2] = 2.0 * size * reps / ((end[0] > end[1] ? end[0] : end[1]) - t0) / 1e9;
}

#define TRIALS 5 /* timed runs of each case (the median is reported) */

/* plain < 0: no reference measured. */
static void print_row(size_t size, const char *name, double ferry, double plain, const char *note)
{
	char f[32] = "-", p[32] = "-", r[32] = "-";

	if (ferry >= 0)
		snprintf(f, sizeof(f), "%.2f", ferry);
	if (plain >= 0)
		snprintf(p, sizeof(p), "%.2f", plain);
	if (ferry >= 0 && plain > 0)
		snprintf(r, sizeof(r), "%.3f", ferry / plain);
	printf("%8zu  %-11s %11s %11s %7s%s%s\n", size / MIB, name, f, p, r, note ? "  " : "", note ? note : "");
}

/* All rows of one size; returns the lowest ratio ferry/plain (1e9 if there
 * is no reference).  ref and pageable are NULL without one. */
static double run_size(struct copier *fc, struct copier *ref, struct copier *pageable, size_t size,
		       int reps)
{
	static const char *names[3][3] = {
		{ "h2d" }, { "d2h" }, { "both:h2d", "both:d2h", "both:total" },
	};
	static const int rows[3][3] = { { H2D }, { D2H }, { H2D, D2H, 2 } };
	double worst = 1e9;

	for (int k = 0; k < 3; k++) {
		double f[3] = { 0 }, p[3] = { 0 }, ft[3][TRIALS] = { { 0 } }, pt[3][TRIALS] = { { 0 } };
		int n = k == 2 ? 3 : 1;

		/* trials alternate ferry and the reference, so that a slow moment
		 * of a shared machine lands on both; the median of each is kept */
		for (int t = 0; t < TRIALS; t++) {
			time_case(fc, size, reps, k + 1, f);
			if (ref)
				time_case(ref, size, reps, k + 1, p);
			for (int j = 0; j < 3; j++) {
				ft[j][t] = f[j];
				pt[j][t] = p[j];
			}
		}
		for (int j = 0; j < 3; j++) {
			f[j] = median(ft[j], TRIALS);
			p[j] = median(pt[j], TRIALS);
		}
		for (int i = 0; i < n; i++) {
			int j = rows[k][i];

			print_row(size, names[k][i], f[j], ref ? p[j] : -1, NULL);
			if (ref && p[j] > 0 && f[j] / p[j] < worst)
				worst = f[j] / p[j];
		}
	}
	for (int d = 0; pageable && d < 2; d++) {
		double p[3] = { 0 };

		time_case(pageable, size, reps, 1 << d, p);
		print_row(size, names[d][0], -1, p[d], "pageable (reference)");
	}
	return worst;
}

/* ---- command line ----------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_copy [--backend cpu|cuda] [--sizes MiB,MiB,...] [--reps N]\n"
		   "\n"
		   "Host <-> device copy bandwidth of ferry's copies (ferry_host_alloc host\n"
		   "buffers, arena device buffers, ferry_memcpy_async on ferry streams), each\n"
		   "direction alone and both at once, after a warm-up copy.  On CUDA the same\n"
		   "copies with plain cudaHostAlloc/cudaMalloc/cudaMemcpyAsync run beside them\n"
		   "and the ratio ferry/plain is printed (target: at least 0.9), then pageable\n"
		   "(malloc) copies for context.  GB/s are 1e9 bytes/s.  Defaults: cuda if it\n"
		   "can open here, else cpu; sizes 1,4,16,64,256 MiB; 20 copies per case.\n");
}

/* "1,4,16" in MiB into a->sizes; false if malformed. */
static bool parse_sizes(const char *s, struct args *a)
{
	a->n_sizes = 0;
	while (*s) {
		char *end;
		long v;

		errno = 0;
		v = strtol(s, &end, 10);
		if (end == s || errno || v < 1 || v > (1L << 20) || a->n_sizes == MAX_SIZES ||
		    (*end && *end != ','))
			return false;
		a->sizes[a->n_sizes++] = (size_t)v * MIB;
		s = *end ? end + 1 : end;
	}
	return a->n_sizes > 0;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct args *a)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
	for (int i = 1; i < argc; i += 2) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (strcmp(argv[i], "--backend") && strcmp(argv[i], "--sizes") && strcmp(argv[i], "--reps")) {
			fprintf(stderr, "bench_copy: unknown flag %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
		if (!v) {
			fprintf(stderr, "bench_copy: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--backend")) {
			a->backend = v;
		} else if (!strcmp(argv[i], "--sizes")) {
			if (!parse_sizes(v, a)) {
				fprintf(stderr, "bench_copy: --sizes wants a comma list of MiB, not '%s'\n", v);
				return 2;
			}
		} else {
			a->reps = (int)strtol(v, &end, 10);
			if (*end || a->reps < 1) {
				fprintf(stderr, "bench_copy: --reps wants a positive count, not '%s'\n", v);
				return 2;
			}
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct args a = { .sizes = { 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB }, .n_sizes = 5, .reps = 20 };
	struct ferry_side fs = { 0 };
	struct copier fc, *ref = NULL, *pageable = NULL;
	size_t max = 0;
	double worst = 1e9;
	int rc = parse_args(argc, argv, &a);

	if (rc >= 0)
		return rc;
	if (!a.backend)
		a.backend = ferry_backend_probe("cuda") == FERRY_OK ? "cuda" : "cpu";
	for (int i = 0; i < a.n_sizes; i++)
		max = a.sizes[i] > max ? a.sizes[i] : max;
	/* both directions' device buffers, plus room for the arena's own use;
	 * on CUDA this also leaves the rest of the GPU to the reference */
	check(ferry_backend_open(a.backend, &(struct ferry_backend_opts){ .device_mem = 2 * max + 64 * MIB },
				 &fs.be));
	printf("backend: %s\n", ferry_backend_description(fs.be));
	ferry_side_open(&fs, &fc, max);
#ifdef FERRY_HAVE_CUDA
	struct cuda_side cs;
	struct copier cref, cpage;

	if (!strcmp(ferry_backend_name(fs.be), "cuda")) {
		cuda_side_open(&cs, &cref, &cpage, max);
		ref = &cref;
		pageable = &cpage;
	}
#endif
	printf("%d copies per case, median of %d trials, GB/s = 1e9 bytes/s%s\n", a.reps, TRIALS,
	       ref ? ", plain = cudaMemcpyAsync on cudaHostAlloc/cudaMalloc memory" : ", no reference on this backend");
	printf("%8s  %-11s %11s %11s %7s\n", "size_MiB", "case", "ferry_GBps", "plain_GBps", "ratio");
	for (int i = 0; i < a.n_sizes; i++) {
		double w = run_size(&fc, ref, pageable, a.sizes[i], a.reps);

		worst = w < worst ? w : worst;
	}
	if (ref)
		printf("lowest ratio ferry/plain: %.3f (target: at least 0.9)\n", worst);
#ifdef FERRY_HAVE_CUDA
	if (ref)
		cuda_side_close(&cs, &cref);
#endif
	ferry_side_close(&fs, &fc);
	ferry_backend_close(fs.be);
	return 0;
}
