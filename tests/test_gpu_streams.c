/*
 * The CUDA backend's streams, events and host memory, tested directly:
 * - each kind of host memory (pinned, registered, pageable; the fallbacks
 *   forced with FERRY_CUDA_HOST_MEMORY) carries data to the device and
 *   back, at aligned and odd offsets and sizes, and `ferry info`'s
 *   description names the kind;
 * - an event orders a copy on one stream after work on another;
 * - a copy overlaps a kernel: both together take clearly less wall time
 *   than one after the other (pinned memory).
 * Exits 77 (skipped) without a GPU.
 */
#include "backend/run_op.h"
#include "gpu_util.h"
#include "ops/op.h"

#include <time.h>

#define MIB ((size_t)1 << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ferry_backend_t open_gpu(size_t arena)
{
	ferry_backend_t be = NULL;

	if (ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = arena }, &be) != FERRY_OK) {
		fprintf(stderr, "open cuda: %s\n", ferry_last_error());
		exit(1);
	}
	return be;
}

static void *host(ferry_backend_t be, size_t n)
{
	void *p = NULL;

	CHECK(ferry_host_alloc(be, n, &p) == FERRY_OK, "host alloc %zu: %s", n, ferry_last_error());
	return p;
}

/* Host -> device on stream a, an event, device -> host on stream b after
 * waiting for it; the bytes come back the same. */
static void round_trip(ferry_backend_t be, unsigned char *src, unsigned char *dst, char *dev, size_t size)
{
	ferry_stream_t a, b;
	ferry_event_t ev;

	CHECK(ferry_stream_create(be, "h2d", &a) == FERRY_OK && ferry_stream_create(be, "d2h", &b) == FERRY_OK &&
		      ferry_event_create(be, &ev) == FERRY_OK,
	      "streams: %s", ferry_last_error());
	for (size_t i = 0; i < size; i++) {
		src[i] = (unsigned char)(i * 131 + (i >> 11));
		dst[i] = 0;
	}
	CHECK(ferry_memcpy_async(a, dev, src, size, FERRY_COPY_H2D) == FERRY_OK &&
		      ferry_event_record(ev, a) == FERRY_OK && ferry_stream_wait_event(b, ev) == FERRY_OK &&
		      ferry_memcpy_async(b, dst, dev, size, FERRY_COPY_D2H) == FERRY_OK &&
		      ferry_stream_synchronize(b) == FERRY_OK,
	      "round trip: %s", ferry_last_error());
	CHECK(!memcmp(src, dst, size), "round trip of %zu bytes: the same bytes back", size);
	ferry_event_free(ev);
	ferry_stream_free(a);
	ferry_stream_free(b);
}

static void test_host_kind(const char *kind)
{
	const size_t big = 64 * MIB;
	ferry_backend_t be;
	ferry_buffer_t buf;
	unsigned char *src, *dst;

	setenv("FERRY_CUDA_HOST_MEMORY", kind, 1);
	be = open_gpu(256 * MIB);
	src = host(be, big + 64);
	dst = host(be, big + 64);
	CHECK(strstr(ferry_backend_description(be), kind) != NULL, "%s: the description says so: %s", kind,
	      ferry_backend_description(be));
	CHECK(ferry_buffer_alloc(be, big + 64, &buf) == FERRY_OK, "device buffer");
	round_trip(be, src, dst, ferry_buffer_ptr(buf), big);
	round_trip(be, src + 3, dst + 5, (char *)ferry_buffer_ptr(buf) + 7, 12345); /* odd everything */
	round_trip(be, src, dst, ferry_buffer_ptr(buf), 1);
	printf("  host memory %-10s round trips of 64 MiB, 12345 B at odd offsets, 1 B: %s\n", kind,
	       test_exit_code() ? "FAILED" : "ok");
	ferry_buffer_free(buf);
	ferry_host_free(be, src);
	ferry_host_free(be, dst);
	ferry_backend_close(be);
	unsetenv("FERRY_CUDA_HOST_MEMORY");
}

static void test_bad_host_kind(void)
{
	ferry_backend_t be = NULL;

	setenv("FERRY_CUDA_HOST_MEMORY", "bogus", 1);
	CHECK(ferry_backend_open("cuda", &(struct ferry_backend_opts){ .device_mem = MIB }, &be) == FERRY_ERR_INVALID,
	      "FERRY_CUDA_HOST_MEMORY=bogus is refused");
	CHECK(strstr(ferry_last_error(), "FERRY_CUDA_HOST_MEMORY") != NULL, "and named: %s", ferry_last_error());
	unsetenv("FERRY_CUDA_HOST_MEMORY");
}

/* n x n x n bf16 matrix products on s (about 2 n^3 FLOP each): a kernel
 * that keeps the GPU busy for a while. */
static void busy(ferry_stream_t s, void *a, void *b, void *c, int n, int times)
{
	struct ferry_op_call call = { .kind = FERRY_OP_MATMUL, .B = 1, .T = n, .C = n, .OC = n };

	call.in[0] = a;
	call.w[0] = b;
	call.out[0] = c;
	for (int i = 0; i < times; i++)
		CHECK(ferry_stream_run_op(s, &call) == FERRY_OK, "matmul: %s", ferry_last_error());
}

/* Work on the compute stream, then a fill; the copy stream waits for the
 * event recorded after the fill: it must see the filled values. */
static void test_event_orders(void)
{
	const int n = 4096;
	const long fill_n = 16L << 20; /* bf16 values */
	ferry_backend_t be = open_gpu(512 * MIB);
	ferry_buffer_t m[3], out;
	ferry_stream_t comp, copy;
	ferry_event_t ev;
	uint16_t *back = host(be, (size_t)fill_n * 2);

	for (int i = 0; i < 3; i++)
		CHECK(ferry_buffer_alloc(be, (size_t)n * n * 2, &m[i]) == FERRY_OK, "matrix");
	CHECK(ferry_buffer_alloc(be, (size_t)fill_n * 2, &out) == FERRY_OK, "out");
	CHECK(ferry_stream_create(be, "compute", &comp) == FERRY_OK && ferry_stream_create(be, "d2h", &copy) ==
		      FERRY_OK && ferry_event_create(be, &ev) == FERRY_OK, "streams");
	CHECK(!ferry_event_done(ev), "an event never recorded is not done");
	for (int i = 0; i < 3; i++)
		CHECK(ferry_memset_zero_async(comp, ferry_buffer_ptr(m[i]), (size_t)n * n * 2) == FERRY_OK, "zero");
	CHECK(ferry_memset_zero_async(comp, ferry_buffer_ptr(out), (size_t)fill_n * 2) == FERRY_OK &&
		      ferry_stream_synchronize(comp) == FERRY_OK, "zero");
	busy(comp, ferry_buffer_ptr(m[0]), ferry_buffer_ptr(m[1]), ferry_buffer_ptr(m[2]), n, 20);
	struct ferry_op_call fill = { .kind = FERRY_OP_FILL, .n = fill_n, .scalar = { 7.0f } };
	fill.out[0] = ferry_buffer_ptr(out);
	CHECK(ferry_stream_run_op(comp, &fill) == FERRY_OK && ferry_event_record(ev, comp) == FERRY_OK &&
		      ferry_stream_wait_event(copy, ev) == FERRY_OK &&
		      ferry_memcpy_async(copy, back, ferry_buffer_ptr(out), (size_t)fill_n * 2, FERRY_COPY_D2H) ==
			      FERRY_OK && ferry_stream_synchronize(copy) == FERRY_OK,
	      "fill, event, copy: %s", ferry_last_error());
	long wrong = 0;
	for (long i = 0; i < fill_n; i++)
		wrong += back[i] != to_bf16(7.0f);
	CHECK(wrong == 0, "the copy after the event sees the fill: %ld of %ld values wrong", wrong, fill_n);
	CHECK(ferry_event_done(ev), "the event is done once the copy that waited for it is");
	printf("  event orders a copy after 20 matrix products and a fill on another stream: %s\n",
	       wrong ? "FAILED" : "ok");
	for (int i = 0; i < 3; i++)
		ferry_buffer_free(m[i]);
	ferry_buffer_free(out);
	ferry_event_free(ev);
	ferry_stream_free(comp);
	ferry_stream_free(copy);
	ferry_host_free(be, back);
	ferry_backend_close(be);
}

/* Seconds for the kernels alone, the copies alone and both at once. */
static void time_overlap(ferry_backend_t be, ferry_stream_t comp, ferry_stream_t copy, void *mats[3], void *dev,
			 void *hst, size_t bytes, double t[3])
{
	const int n = 8192, kernels = 8, copies = 4;

	for (int mode = -1; mode < 3; mode++) { /* -1 warms up */
		const int m = mode < 0 ? 2 : mode;
		double t0 = now_s();

		if (m != 1)
			busy(comp, mats[0], mats[1], mats[2], n, kernels);
		for (int i = 0; m != 0 && i < copies; i++)
			CHECK(ferry_memcpy_async(copy, hst, dev, bytes, FERRY_COPY_D2H) == FERRY_OK, "copy");
		CHECK(ferry_stream_synchronize(comp) == FERRY_OK && ferry_stream_synchronize(copy) == FERRY_OK,
		      "sync: %s", ferry_last_error());
		if (mode >= 0)
			t[mode] = now_s() - t0;
	}
	(void)be;
}

static void test_copy_overlaps_kernel(void)
{
	const size_t bytes = 256 * MIB, mat = (size_t)8192 * 8192 * 2;
	ferry_backend_t be = open_gpu(bytes + 3 * mat + MIB);
	ferry_buffer_t m[3], dev;
	ferry_stream_t comp, copy;
	void *mats[3], *hst = host(be, bytes);
	double t[3];

	for (int i = 0; i < 3; i++) {
		CHECK(ferry_buffer_alloc(be, mat, &m[i]) == FERRY_OK, "matrix");
		mats[i] = ferry_buffer_ptr(m[i]);
	}
	CHECK(ferry_buffer_alloc(be, bytes, &dev) == FERRY_OK, "buffer");
	CHECK(ferry_stream_create(be, "compute", &comp) == FERRY_OK && ferry_stream_create(be, "d2h", &copy) ==
		      FERRY_OK, "streams");
	for (int i = 0; i < 3; i++)
		CHECK(ferry_memset_zero_async(comp, mats[i], mat) == FERRY_OK, "zero");
	CHECK(ferry_memset_zero_async(comp, ferry_buffer_ptr(dev), bytes) == FERRY_OK, "zero");
	time_overlap(be, comp, copy, mats, ferry_buffer_ptr(dev), hst, bytes, t);
	printf("  overlap: kernels alone %.1f ms, copies alone %.1f ms, both %.1f ms (serial would be %.1f)\n",
	       t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, (t[0] + t[1]) * 1e3);
	/* both at once within 10% of the longer one alone, and clearly less
	 * than one after the other */
	CHECK(t[2] < 1.1 * (t[0] > t[1] ? t[0] : t[1]) && t[2] < 0.85 * (t[0] + t[1]),
	      "a copy overlaps kernels: %.1f ms together vs %.1f + %.1f ms", t[2] * 1e3, t[0] * 1e3, t[1] * 1e3);
	for (int i = 0; i < 3; i++)
		ferry_buffer_free(m[i]);
	ferry_buffer_free(dev);
	ferry_stream_free(comp);
	ferry_stream_free(copy);
	ferry_host_free(be, hst);
	ferry_backend_close(be);
}

int main(void)
{
	gpu_or_skip();
	test_host_kind("pinned");
	test_host_kind("registered");
	test_host_kind("pageable");
	test_bad_host_kind();
	test_event_orders();
	test_copy_overlaps_kernel();
	return test_exit_code();
}
