/* The backend interface on the CPU backend: the arena's accounting, stream
 * order, events across streams, real concurrency, and clean failures. */
#include "ferry/backend.h"
#include "memory/arena.h"
#include "test_util.h"

#include <string.h>

static void test_arena(void)
{
	struct ferry_arena a;
	size_t o1, o2, o3, o4;

	CHECK(ferry_arena_init(&a, 4096, 256, 16) == FERRY_OK, "init");
	CHECK(ferry_arena_alloc(&a, 1000, &o1) == FERRY_OK && o1 == 0, "first at 0");
	CHECK(a.live == 1024 && a.peak == 1024, "live %zu peak %zu", a.live, a.peak);
	CHECK(ferry_arena_alloc(&a, 256, &o2) == FERRY_OK && o2 == 1024, "second at %zu", o2);
	CHECK(ferry_arena_alloc(&a, 2816, &o3) == FERRY_OK && o3 == 1280, "third at %zu", o3);
	CHECK(a.live == 4096, "full");
	CHECK(ferry_arena_alloc(&a, 1, &o4) == FERRY_ERR_DEVICE_MEM, "over capacity refused");
	ferry_arena_free(&a, o2, 256);
	CHECK(a.live == 3840 && a.peak == 4096, "free keeps peak");
	ferry_arena_free(&a, o1, 1000);
	/* the two freed neighbours coalesce into one 1280-byte hole */
	CHECK(ferry_arena_largest_free(&a) == 1280, "coalesced %zu", ferry_arena_largest_free(&a));
	CHECK(ferry_arena_alloc(&a, 1200, &o4) == FERRY_OK && o4 == 0, "reuses the hole");
	ferry_arena_free(&a, o4, 1200);
	ferry_arena_free(&a, o3, 2816);
	CHECK(a.live == 0 && a.n_free == 1 && ferry_arena_largest_free(&a) == 4096, "all free again");
	ferry_arena_release(&a);
}

static void test_buffers(void)
{
	struct ferry_backend_opts o = { .device_mem = 1 << 20, .threads = 1 };
	ferry_backend_t be;
	ferry_buffer_t a, b, c;

	CHECK(ferry_backend_open("cpu", &o, &be) == FERRY_OK, "open: %s", ferry_last_error());
	CHECK(ferry_backend_mem_capacity(be) == 1 << 20, "capacity");
	CHECK(ferry_buffer_alloc(be, 300000, &a) == FERRY_OK, "a");
	CHECK(ferry_buffer_alloc(be, 500000, &b) == FERRY_OK, "b");
	CHECK(((uintptr_t)ferry_buffer_ptr(b) & 255) == 0, "aligned");
	CHECK(ferry_buffer_alloc(be, 400000, &c) == FERRY_ERR_DEVICE_MEM && c == NULL, "too big");
	CHECK(strstr(ferry_last_error(), "400128") != NULL, "message names the size: %s", ferry_last_error());
	memset(ferry_buffer_ptr(a), 1, 300000); /* the memory is really there */
	ferry_buffer_free(a);
	CHECK(ferry_backend_mem_live(be) == 500224, "live %zu", ferry_backend_mem_live(be));
	CHECK(ferry_backend_mem_peak(be) == 300032 + 500224, "peak %zu", ferry_backend_mem_peak(be));
	ferry_backend_mem_reset_peak(be);
	CHECK(ferry_backend_mem_peak(be) == 500224, "peak reset");
	ferry_buffer_free(b);
	ferry_backend_close(be);
	CHECK(ferry_backend_open("nosuch", NULL, &be) == FERRY_ERR_INVALID && be == NULL, "unknown backend");
	CHECK(strstr(ferry_last_error(), "nosuch") != NULL, "names it");
}

/* Many copies on one stream run in order: the last one wins. */
static void test_stream_order(ferry_backend_t be)
{
	ferry_stream_t s;
	int vals[64], dst = -1;

	for (int i = 0; i < 64; i++)
		vals[i] = i;
	CHECK(ferry_stream_create(be, "order", &s) == FERRY_OK, "stream");
	for (int rep = 0; rep < 40; rep++) /* more than one queue's worth */
		for (int i = 0; i < 64; i++)
			CHECK(ferry_memcpy_async(s, &dst, &vals[i], sizeof(int), FERRY_COPY_H2D) == FERRY_OK, "copy");
	CHECK(ferry_stream_synchronize(s) == FERRY_OK, "sync");
	CHECK(dst == 63, "in order: %d", dst);
	ferry_stream_free(s);
}

/* Event order across streams: a waits for b's copy before its own. */
static void test_cross_stream_order(ferry_backend_t be)
{
	ferry_stream_t a = NULL, b = NULL;
	ferry_event_t eb = NULL, ea = NULL;
	static char src[1 << 20], mid[1 << 20], dst[1 << 20];

	memset(src, 7, sizeof(src));
	CHECK(ferry_stream_create(be, "a", &a) == FERRY_OK && ferry_stream_create(be, "b", &b) == FERRY_OK, "streams");
	CHECK(ferry_event_create(be, &eb) == FERRY_OK && ferry_event_create(be, &ea) == FERRY_OK, "events");
	CHECK(!ferry_event_done(eb), "never recorded is not done");
	CHECK(ferry_stream_wait_event(a, eb) == FERRY_OK, "waiting for a never-recorded event is a no-op");

	CHECK(ferry_event_record(eb, b) == FERRY_OK, "first record");
	CHECK(ferry_stream_synchronize(b) == FERRY_OK, "sync b");
	CHECK(ferry_event_done(eb), "done after sync");
	/* Re-recorded after the copy: a's wait refers to this newer record. */
	CHECK(ferry_memcpy_async(b, mid, src, sizeof(src), FERRY_COPY_D2D) == FERRY_OK, "copy b");
	CHECK(ferry_event_record(eb, b) == FERRY_OK, "record eb");
	CHECK(ferry_stream_wait_event(a, eb) == FERRY_OK, "a waits");
	CHECK(ferry_memcpy_async(a, dst, mid, sizeof(mid), FERRY_COPY_D2H) == FERRY_OK, "copy a");
	CHECK(ferry_event_record(ea, a) == FERRY_OK, "record ea");
	CHECK(ferry_event_synchronize(ea) == FERRY_OK, "sync ea");
	CHECK(dst[0] == 7 && dst[sizeof(dst) - 1] == 7, "a saw b's copy: %d", dst[0]);

	ferry_event_free(ea);
	ferry_event_free(eb);
	ferry_stream_free(a);
	ferry_stream_free(b);
}

/* A small copy on stream b completes while a large copy on stream a is
 * still running: the streams overlap.  Timing-based, so it retries. */
static void test_overlap(ferry_backend_t be)
{
	size_t big = (size_t)256 << 20;
	ferry_buffer_t dbuf;
	ferry_stream_t a = NULL, b = NULL;
	ferry_event_t ea = NULL, eb = NULL;
	char *host = NULL, small_src[64] = { 1 }, small_dst[64];
	int overlapped = 0;

	CHECK(ferry_buffer_alloc(be, big, &dbuf) == FERRY_OK, "big buffer");
	CHECK(ferry_host_alloc(be, big, (void **)&host) == FERRY_OK, "host buffer");
	memset(host, 3, big);
	CHECK(ferry_stream_create(be, "a", &a) == FERRY_OK && ferry_stream_create(be, "b", &b) == FERRY_OK, "streams");
	CHECK(ferry_event_create(be, &ea) == FERRY_OK && ferry_event_create(be, &eb) == FERRY_OK, "events");
	for (int attempt = 0; attempt < 5 && !overlapped; attempt++) {
		for (int r = 0; r < 4; r++)
			CHECK(ferry_memcpy_async(a, ferry_buffer_ptr(dbuf), host, big, FERRY_COPY_H2D) == FERRY_OK, "big");
		CHECK(ferry_event_record(ea, a) == FERRY_OK, "record a");
		CHECK(ferry_memcpy_async(b, small_dst, small_src, sizeof(small_src), FERRY_COPY_D2H) == FERRY_OK, "small");
		CHECK(ferry_event_record(eb, b) == FERRY_OK, "record b");
		CHECK(ferry_event_synchronize(eb) == FERRY_OK, "sync b");
		overlapped = !ferry_event_done(ea);
		CHECK(ferry_event_synchronize(ea) == FERRY_OK, "sync a");
	}
	CHECK(overlapped, "stream b finished only after stream a's 1 GiB of copies");
	CHECK(small_dst[0] == 1 && ((char *)ferry_buffer_ptr(dbuf))[big - 1] == 3, "copies landed");
	ferry_event_free(ea);
	ferry_event_free(eb);
	ferry_stream_free(a);
	ferry_stream_free(b);
	ferry_host_free(be, host);
	ferry_buffer_free(dbuf);
}

/* Every allocation failure on the way to a working stream fails cleanly
 * (leaks show up under the sanitizer build). */
static void test_alloc_failures(void)
{
	int failures = 0;

	for (long k = 0; k < 100; k++) {
		ferry_backend_t be = NULL;
		ferry_stream_t s = NULL;
		ferry_event_t ev = NULL;
		ferry_buffer_t buf = NULL;
		ferry_status st;

		ferry_fault_fail_after(k);
		st = ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = 1 << 20 }, &be);
		if (!st)
			st = ferry_stream_create(be, "s", &s);
		if (!st)
			st = ferry_event_create(be, &ev);
		if (!st)
			st = ferry_buffer_alloc(be, 4096, &buf);
		ferry_fault_fail_after(-1);
		ferry_buffer_free(buf);
		ferry_event_free(ev);
		ferry_stream_free(s);
		ferry_backend_close(be);
		if (st == FERRY_OK)
			break;
		CHECK(st == FERRY_ERR_NOMEM, "failure %ld gives NOMEM, got %d", k, st);
		failures++;
	}
	CHECK(failures >= 4, "exercised %d failure points", failures);
}

int main(void)
{
	ferry_backend_t be;

	test_arena();
	test_buffers();
	CHECK(ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)1 << 30 }, &be) == FERRY_OK,
	      "open");
	test_stream_order(be);
	test_cross_stream_order(be);
	test_overlap(be);
	ferry_backend_close(be);
	test_alloc_failures();
	return test_exit_code();
}
