/*
 * Host<->device copy times for a calibration: per size, each direction
 * alone on its own stream, then both directions at once (where one copy
 * engine serves both, or both contend for memory bandwidth, that is
 * slower).  Times are wall time over a batch of copies after a warm-up one.
 * Successive copies go to and from successive places of a window larger
 * than the CPU's caches, as a step's copies do (each layer's tensor, each
 * slice of the optimizer's state, is a buffer of its own): copies of one
 * buffer over and over would run from the cache, up to 4x faster than a
 * step's on the CPU backend.
 */
#include "cost/calibration.h"
#include "core/clock.h"
#include "core/error.h"

#include <string.h>
#include <time.h>

struct copy_rig {
	ferry_backend_t be;
	ferry_stream_t d2h, h2d;
	ferry_buffer_t dev;
	char *host;
	size_t window, off; /* bytes of each direction's window; the next copy's place in it */
};

/* Larger than the last-level cache of the CPUs ferry runs on. */
#define COLD_WINDOW ((size_t)128 << 20)

/* Where the next copy of b bytes goes in each window. */
static size_t next_place(struct copy_rig *r, size_t b)
{
	size_t at;

	if (r->off + b > r->window)
		r->off = 0;
	at = r->off;
	r->off += (b + 4095) & ~(size_t)4095;
	return at;
}

/* k copies of b bytes in each direction asked for, at once; seconds per copy. */
static ferry_status timed(struct copy_rig *r, size_t b, int k, bool out, bool in, double *s)
{
	char *dev = ferry_buffer_ptr(r->dev);
	double t0 = ferry_now_s();
	ferry_status st = FERRY_OK;

	for (int i = 0; i < k && !st; i++) {
		size_t at = next_place(r, b);

		if (out)
			st = ferry_memcpy_async(r->d2h, r->host + at, dev + at, b, FERRY_COPY_D2H);
		if (!st && in)
			st = ferry_memcpy_async(r->h2d, dev + r->window + at, r->host + r->window + at, b,
						FERRY_COPY_H2D);
	}
	if (!st)
		st = ferry_stream_synchronize(r->d2h);
	if (!st)
		st = ferry_stream_synchronize(r->h2d);
	*s = (ferry_now_s() - t0) / k;
	return st;
}

/* The best of `repeats` measurements of each kind (other work on the
 * machine only ever adds time). */
static ferry_status measure_size(struct copy_rig *r, size_t b, int repeats, struct ferry_calib_copy *out)
{
	/* about 32 MiB per measurement, 3 to 64 copies */
	size_t k = ((size_t)32 << 20) / (b ? b : 1);
	int n = (int)(k < 3 ? 3 : k > 64 ? 64 : k);
	double warm, s[3];
	ferry_status st = timed(r, b, 1, true, true, &warm);

	out->bytes = b;
	out->d2h_s = out->h2d_s = out->d2h_both_s = 0;
	for (int i = 0; i < repeats && i < 5 && !st; i++) {
		if ((st = timed(r, b, n, true, false, &s[0])) || (st = timed(r, b, n, false, true, &s[1])) ||
		    (st = timed(r, b, n, true, true, &s[2])))
			break;
		out->d2h_s = i && out->d2h_s < s[0] ? out->d2h_s : s[0];
		out->h2d_s = i && out->h2d_s < s[1] ? out->h2d_s : s[1];
		out->d2h_both_s = i && out->d2h_both_s < s[2] ? out->d2h_both_s : s[2];
	}
	out->h2d_both_s = out->d2h_both_s;
	return st;
}

static size_t window_of(const size_t *sizes, int n)
{
	size_t max = 0;

	for (int i = 0; i < n; i++)
		if (sizes[i] > max)
			max = sizes[i];
	return !max ? 0 : 2 * max > COLD_WINDOW ? 2 * max : COLD_WINDOW;
}

/* The window, within what the device arena has free (--device-mem may
 * leave less than 2 x 128 MiB): then the copies go through what fits, at
 * least the largest size, and may come partly from the caches. */
static size_t fit_window(ferry_backend_t be, size_t window, const size_t *sizes, int n)
{
	const size_t slack = (size_t)1 << 20, cap = ferry_backend_mem_capacity(be), live = ferry_backend_mem_live(be);
	size_t room = cap > live + slack ? (cap - live - slack) / 2 / 4096 * 4096 : 0, max = 0;

	for (int i = 0; i < n; i++)
		max = sizes[i] > max ? sizes[i] : max;
	return window <= room ? window : room > max ? room : max;
}

size_t ferry_calib_copy_host_bytes(const size_t *sizes, int n)
{
	return 2 * window_of(sizes, n);
}

ferry_status ferry_calib_time_copies(ferry_backend_t be, char *host, const size_t *sizes, int n, int repeats,
				     struct ferry_calib_copy *out)
{
	struct copy_rig r = { .be = be, .host = host };
	ferry_status st;

	r.window = window_of(sizes, n);
	if (!r.window)
		return FERRY_OK;
	r.window = fit_window(be, r.window, sizes, n);
	st = ferry_stream_create(be, "calibrate d2h", &r.d2h);
	if (!st)
		st = ferry_stream_create(be, "calibrate h2d", &r.h2d);
	if (!st)
		st = ferry_buffer_alloc(be, 2 * r.window, &r.dev);
	if (!st)
		st = ferry_memset_zero_async(r.h2d, ferry_buffer_ptr(r.dev), 2 * r.window);
	if (!st)
		st = ferry_stream_synchronize(r.h2d);
	for (int i = 0; i < n && !st; i++)
		st = measure_size(&r, sizes[i], repeats, &out[i]);
	ferry_buffer_free(r.dev);
	if (r.h2d)
		ferry_stream_free(r.h2d);
	if (r.d2h)
		ferry_stream_free(r.d2h);
	return st;
}

ferry_status ferry_calib_measure_copies(ferry_backend_t be, const size_t *sizes, int n, int repeats,
					struct ferry_calibration *c)
{
	size_t bytes = ferry_calib_copy_host_bytes(sizes, n);
	struct ferry_calib_copy *cp;
	char *host = NULL;
	ferry_status st;

	if (!bytes)
		return FERRY_OK;
	if (!(cp = ferry_calloc((size_t)n, sizeof(*cp))))
		return ferry_error(FERRY_ERR_NOMEM, "calibrate: out of host memory");
	st = ferry_host_alloc(be, bytes, (void **)&host);
	if (!st) /* touched once, so no copy pays for the first touch of a page */
		memset(host, 1, bytes);
	if (!st)
		st = ferry_calib_time_copies(be, host, sizes, n, repeats, cp);
	for (int i = 0; i < n && !st; i++)
		ferry_calib_add_copy(c, &cp[i]);
	if (host)
		ferry_host_free(be, host);
	ferry_free(cp);
	return st;
}
