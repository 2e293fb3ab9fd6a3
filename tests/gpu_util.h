/*
 * Helpers for the GPU tests: skip (exit 77) without a GPU, bf16 on the
 * host, and moving arrays to and from a backend's device memory.
 */
#ifndef FERRY_TESTS_GPU_UTIL_H
#define FERRY_TESTS_GPU_UTIL_H

#include "backend/backend_impl.h"
#include "test_util.h"

#define SKIP 77

/* Exits 77 (skipped) when the CUDA backend is not compiled in or no GPU is
 * usable -- or 1 (failed) when FERRY_REQUIRE_GPU is set, as bench/gpu.sh
 * does, so a GPU run cannot pass by skipping everything. */
static inline void gpu_or_skip(void)
{
	if (ferry_backend_probe("cuda") != FERRY_OK) {
		const char *req = getenv("FERRY_REQUIRE_GPU");

		printf("%s: %s\n", req && *req ? "failed, a GPU is required" : "skipped", ferry_last_error());
		exit(req && *req ? 1 : SKIP);
	}
}

/* fp32 -> bf16, round to nearest even (NaN kept a NaN). */
static inline uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* A device buffer holding n values of type t, filled from fp32 host data
 * (NULL: zeros). */
static inline void *dev_put(ferry_backend_t be, ferry_stream_t s, enum ferry_dtype t, const float *src,
			    long n, ferry_buffer_t *keep)
{
	size_t es = ferry_dtype_size(t), bytes = (size_t)n * es;
	void *host = test_alloc(bytes ? bytes : 1);

	if (ferry_buffer_alloc(be, bytes ? bytes : 1, keep) != FERRY_OK) {
		fprintf(stderr, "device alloc: %s\n", ferry_last_error());
		exit(1);
	}
	for (long i = 0; src && i < n; i++) {
		if (t == FERRY_BF16) {
			uint16_t h = to_bf16(src[i]);

			memcpy((char *)host + 2 * i, &h, 2);
		} else {
			memcpy((char *)host + 4 * i, &src[i], 4);
		}
	}
	if (ferry_memcpy_async(s, ferry_buffer_ptr(*keep), host, bytes, FERRY_COPY_H2D) ||
	    ferry_stream_synchronize(s)) {
		fprintf(stderr, "upload: %s\n", ferry_last_error());
		exit(1);
	}
	free(host);
	return ferry_buffer_ptr(*keep);
}

/* Reads n values of type t back as fp32. */
static inline void dev_get(ferry_stream_t s, enum ferry_dtype t, const void *dev, float *dst, long n)
{
	size_t es = ferry_dtype_size(t);
	void *host = test_alloc((size_t)n * es + 1);

	if (ferry_memcpy_async(s, host, dev, (size_t)n * es, FERRY_COPY_D2H) || ferry_stream_synchronize(s)) {
		fprintf(stderr, "download: %s\n", ferry_last_error());
		exit(1);
	}
	for (long i = 0; i < n; i++) {
		if (t == FERRY_BF16) {
			uint16_t h;

			memcpy(&h, (char *)host + 2 * i, 2);
			dst[i] = from_bf16(h);
		} else {
			memcpy(&dst[i], (char *)host + 4 * i, 4);
		}
	}
	free(host);
}

#endif
