/*
 * exp and tanh as straight-line float arithmetic, so loops that call them
 * vectorise (libm's expf/tanhf are calls the compiler cannot widen) and give
 * the same bits on every machine.
 *
 * exp(x) = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2) / 2; e^r by
 * its Taylor series to degree 7 (truncation error < r^8 / 8! ~ 5e-9, below
 * half an ulp); 2^n built in the exponent bits.  ln 2 is split in a high
 * part exact in float and a low part so r keeps its precision.  Inputs are
 * clamped to [-87, 88], where e^x is a normal float; NaN gives NaN.
 */
#ifndef FERRY_OPS_CPU_FASTMATH_H
#define FERRY_OPS_CPU_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float fast_expf(float x)
{
	const float log2e = 1.44269504088896341f;
	const float ln2_hi = 0.693359375f;         /* exact in float */
	const float ln2_lo = -2.12194440e-4f;      /* ln 2 - ln2_hi */
	float n, r, p, scale;
	int32_t bits;

	x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
	n = floorf(x * log2e + 0.5f);
	r = x - n * ln2_hi - n * ln2_lo;
	p = 1.0f / 5040.0f;
	p = p * r + 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	/* a NaN input stays NaN (in p); converting it to int would be undefined */
	bits = ((int32_t)(n == n ? n : 0.0f) + 127) << 23;
	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* tanh(u) = 1 - 2 / (e^(2u) + 1): exact at both ends; near 0 its error is
 * absolute (~1e-7), which is what 1 + tanh in GELU needs. */
static inline float fast_tanhf(float u)
{
	return 1.0f - 2.0f / (fast_expf(2.0f * u) + 1.0f);
}

#endif
