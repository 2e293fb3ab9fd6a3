/*
 * safetensors dtypes: names, sizes, and the conversions between fp32 and
 * bf16 / fp16 that reading and writing do (round to nearest even).
 */
#include "ferry/safetensors.h"
#include "hf/st_io.h"

#include <string.h>

/* ---- dtypes and conversions ------------------------------------------------ */

const char *ferry_st_dtype_name(enum ferry_st_dtype dtype)
{
	switch (dtype) {
	case FERRY_ST_F32: return "F32";
	case FERRY_ST_BF16: return "BF16";
	case FERRY_ST_F16: return "F16";
	}
	return "?";
}

size_t ferry_st_dtype_size(enum ferry_st_dtype dtype)
{
	switch (dtype) {
	case FERRY_ST_F32: return 4;
	case FERRY_ST_BF16: return 2;
	case FERRY_ST_F16: return 2;
	}
	return 0;
}

int ferry_st_dtype_valid(enum ferry_st_dtype dtype)
{
	return ferry_st_dtype_size(dtype) != 0;
}

uint32_t ferry_st_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

float ferry_st_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

float ferry_st_bf16_to_f32(uint16_t h)
{
	return ferry_st_bits_f32((uint32_t)h << 16);
}

uint16_t ferry_st_f32_to_bf16(float f)
{
	uint32_t u = ferry_st_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Round to nearest, ties to even; overflow carries into inf. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float ferry_st_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f) /* inf, NaN (payload kept) */
		return ferry_st_bits_f32(sign | 0x7f800000u | (mant << 13));
	if (exp != 0)
		return ferry_st_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
	if (mant == 0)
		return ferry_st_bits_f32(sign);
	/* Subnormal: mant * 2^-24; normalise. */
	exp = 113;
	while (!(mant & 0x400u)) {
		mant <<= 1;
		exp--;
	}
	return ferry_st_bits_f32(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t ferry_st_f32_to_f16(float f)
{
	uint32_t u = ferry_st_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	uint32_t h, rem, m, shift, half;

	if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf) */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* normal: >= 2^-14 */
		h = (a >> 13) - (112u << 10);
		rem = a & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++; /* a carry into the exponent is right */
		return (uint16_t)(sign | h);
	}
	if (a <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
		return sign;
	/* Subnormal result: value = m * 2^(e - 150), in units of 2^-24. */
	m = (a & 0x7fffffu) | 0x800000u;
	shift = 126u - (a >> 23);
	h = m >> shift;
	rem = m & ((1u << shift) - 1u);
	half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (h & 1u)))
		h++;
	return (uint16_t)(sign | h);
}
