/*
 * Tiny header-only test helpers: a CHECK macro that records failures, a
 * deterministic RNG, normalised error measures and a central finite
 * difference driver.  Each tests/test_*.c is its own program, so the static
 * failure counter below is per test.
 *
 *   CHECK(cond, "fmt", ...)   prints file:line and the message if cond is
 *                             false and counts a failure; execution goes on.
 *   return test_exit_code();  0 if every CHECK passed, 1 otherwise.
 */
#ifndef FERRY_TESTS_TEST_UTIL_H
#define FERRY_TESTS_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_ = 0;
static int test_checks_ = 0;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		test_checks_++;                                                \
		if (!(cond)) {                                                 \
			test_failures_++;                                      \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

static inline int test_failed(void)
{
	return test_failures_;
}

static inline int test_exit_code(void)
{
	if (test_failures_)
		fprintf(stderr, "FAILED: %d of %d checks\n", test_failures_,
			test_checks_);
	else
		printf("all %d checks passed\n", test_checks_);
	return test_failures_ ? 1 : 0;
}

/* Allocation that aborts the test on failure (tests only). */
static inline void *test_alloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}
#define TALLOC(type, count) ((type *)test_alloc(sizeof(type) * (size_t)(count)))

/* ---- deterministic RNG (xorshift64*) ---------------------------------- */

typedef struct {
	uint64_t s;
} Rng;

static inline Rng rng_new(uint64_t seed)
{
	Rng r = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
	if (!r.s)
		r.s = 1;
	return r;
}

static inline uint64_t rng_u64(Rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545F4914F6CDD1Dull;
}

/* Uniform in the open interval (0, 1): never 0, never 1. */
static inline double rng_unit(Rng *r)
{
	return ((double)(rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Uniform in (lo, hi), never exactly 0 (re-drawn if it rounds to 0). */
static inline float rng_uniform(Rng *r, float lo, float hi)
{
	float x;
	do
		x = (float)(lo + (hi - lo) * rng_unit(r));
	while (x == 0.0f);
	return x;
}

/* Standard normal (Box-Muller), never exactly 0. */
static inline float rng_normal(Rng *r)
{
	float x;
	do {
		double u1 = rng_unit(r), u2 = rng_unit(r);
		x = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
	} while (x == 0.0f);
	return x;
}

/* Integer in [0, n). */
static inline int rng_int(Rng *r, int n)
{
	return (int)(rng_u64(r) % (uint64_t)n);
}

static inline void fill_uniform(Rng *r, float *x, long n, float lo, float hi)
{
	for (long i = 0; i < n; i++)
		x[i] = rng_uniform(r, lo, hi);
}

static inline void fill_normal(Rng *r, float *x, long n, float std)
{
	for (long i = 0; i < n; i++)
		x[i] = std * rng_normal(r);
}

/* ---- conversions and error measures ----------------------------------- */

static inline void to_double(double *d, const float *f, long n)
{
	for (long i = 0; i < n; i++)
		d[i] = (double)f[i];
}

static inline double max_abs_d(const double *b, long n)
{
	double m = 0.0;
	for (long i = 0; i < n; i++)
		m = fmax(m, fabs(b[i]));
	return m;
}

static inline double max_abs_f(const float *b, long n)
{
	double m = 0.0;
	for (long i = 0; i < n; i++)
		m = fmax(m, fabs((double)b[i]));
	return m;
}

/* Normalised error max|a - b| / max(1e-6, max|b|): a is the value under
 * test, b the reference.  NaN in a gives +inf (so it always fails). */
static inline double nerr_fd(const float *a, const double *b, long n)
{
	double e = 0.0;
	for (long i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d != d)
			return INFINITY;
		e = fmax(e, d);
	}
	return e / fmax(1e-6, max_abs_d(b, n));
}

static inline double nerr_ff(const float *a, const float *b, long n)
{
	double e = 0.0;
	for (long i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);
		if (d != d)
			return INFINITY;
		e = fmax(e, d);
	}
	return e / fmax(1e-6, max_abs_f(b, n));
}

static inline double nerr_dd(const double *a, const double *b, long n)
{
	double e = 0.0;
	for (long i = 0; i < n; i++) {
		double d = fabs(a[i] - b[i]);
		if (d != d)
			return INFINITY;
		e = fmax(e, d);
	}
	return e / fmax(1e-6, max_abs_d(b, n));
}

/* Normalised error of a against s * b (e.g. s = 2 for "twice the
 * gradient"). */
static inline double nerr_scaled_ff(const float *a, const float *b, double s,
				    long n)
{
	double e = 0.0, m = 0.0;
	for (long i = 0; i < n; i++) {
		double ref = s * (double)b[i];
		double d = fabs((double)a[i] - ref);
		if (d != d)
			return INFINITY;
		e = fmax(e, d);
		m = fmax(m, fabs(ref));
	}
	return e / fmax(1e-6, m);
}

/* ---- finite differences ------------------------------------------------ */

/* Scalar function of some float64 state captured in ctx. */
typedef double (*LossFn)(void *ctx);

/* grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h for each of the n entries of
 * x, which f must read through ctx.  x is restored afterwards. */
static inline void fd_grad(double *grad, double *x, long n, LossFn f, void *ctx,
			   double h)
{
	for (long i = 0; i < n; i++) {
		const double x0 = x[i];
		x[i] = x0 + h;
		const double lp = f(ctx);
		x[i] = x0 - h;
		const double lm = f(ctx);
		x[i] = x0;
		grad[i] = (lp - lm) / (2.0 * h);
	}
}

#endif
