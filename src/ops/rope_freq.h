/*
 * The rotary embedding's frequencies, one formula for the CPU kernel and
 * the CUDA kernel (this header is C and CUDA: the device rounds each step
 * as the host does, so both backends turn by the same float angles).
 *
 * A rope op's call carries the model's rotary constants in scalar[0..5]
 * (FERRY_ROPE_N_SCALARS): the base theta, the scaling type, and the
 * scaling's factor, low_freq_factor, high_freq_factor and
 * original_max_position_embeddings.  A call that sets only scalar[0] is
 * plain RoPE (type 0).
 *
 * Each pair i < HS/2 of a head turns by t * inv_freq_i, inv_freq_i as
 * transformers computes it in float32 (modeling_rope_utils.py):
 *
 *   default  inv = 1 / theta^(float(2i) / HS)  (the power rounded to float)
 *   linear   inv / factor                       (positions divided by factor)
 *   llama3   by the wavelength w = 2 pi / inv of the pair:
 *              w < orig / high_freq_factor  inv            (high frequencies)
 *              w > orig / low_freq_factor   inv / factor   (low frequencies)
 *              otherwise, s = (orig / w - low) / (high - low),
 *                       (1 - s) * inv / factor + s * inv   (between)
 *
 * Roundings follow torch's float32 tensor arithmetic: a Python number
 * divided by a tensor is the tensor's reciprocal times the number
 * (Tensor.__rtruediv__), Python numbers meet a float32 tensor as float32,
 * the two wavelength bounds are Python doubles compared as float32.
 */
#ifndef FERRY_OPS_ROPE_FREQ_H
#define FERRY_OPS_ROPE_FREQ_H

#include <math.h>

#ifdef __CUDACC__
#define FERRY_RF_FN static inline __host__ __device__
#else
#define FERRY_RF_FN static inline
#endif

enum ferry_rope_type {
	FERRY_ROPE_DEFAULT = 0,
	FERRY_ROPE_LINEAR = 1,
	FERRY_ROPE_LLAMA3 = 2,
};

#define FERRY_ROPE_N_SCALARS 6

struct ferry_rope_freq {
	float theta;
	int type; /* enum ferry_rope_type */
	float factor, low_freq_factor, high_freq_factor;
	float original_max_pos;
};

/* The constants of a call's scalar[0..FERRY_ROPE_N_SCALARS). */
FERRY_RF_FN struct ferry_rope_freq ferry_rope_freq_of(const float *scalar)
{
	struct ferry_rope_freq r;

	r.theta = scalar[0];
	r.type = (int)scalar[1];
	r.factor = scalar[2];
	r.low_freq_factor = scalar[3];
	r.high_freq_factor = scalar[4];
	r.original_max_pos = scalar[5];
	return r;
}

/* Correctly rounded float steps on both sides (the CUDA build uses fast
 * math, so its plain operators would not be). */
FERRY_RF_FN float ferry_rf_div(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fdiv_rn(a, b);
#else
	return a / b;
#endif
}

FERRY_RF_FN float ferry_rf_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b;
#endif
}

FERRY_RF_FN float ferry_rf_add(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

/* transformers' _compute_llama3_parameters for one frequency. */
FERRY_RF_FN float ferry_rope_llama3(const struct ferry_rope_freq *r, float inv)
{
	const float low_wl = (float)((double)r->original_max_pos / (double)r->low_freq_factor);
	const float high_wl = (float)((double)r->original_max_pos / (double)r->high_freq_factor);
	const float two_pi = (float)(2.0 * 3.14159265358979323846);
	const float wl = ferry_rf_mul(ferry_rf_div(1.0f, inv), two_pi);

	if (wl > low_wl)
		return ferry_rf_div(inv, r->factor);
	if (wl < high_wl)
		return inv;
	const float span = (float)((double)r->high_freq_factor - (double)r->low_freq_factor);
	const float ratio = ferry_rf_mul(ferry_rf_div(1.0f, wl), r->original_max_pos);
	const float s = ferry_rf_div(ferry_rf_add(ratio, -r->low_freq_factor), span);
	const float lo = ferry_rf_div(ferry_rf_mul(ferry_rf_add(1.0f, -s), inv), r->factor);
	return ferry_rf_add(lo, ferry_rf_mul(s, inv));
}

/* inv_freq of pair i of a head of HS channels. */
FERRY_RF_FN float ferry_rope_inv_freq(const struct ferry_rope_freq *r, int i, int HS)
{
	const float e = ferry_rf_div((float)(2 * i), (float)HS);
	const float p = (float)pow((double)r->theta, (double)e);
	const float inv = ferry_rf_div(1.0f, p);

	if (r->type == FERRY_ROPE_LINEAR)
		return ferry_rf_div(inv, r->factor);
	if (r->type == FERRY_ROPE_LLAMA3)
		return ferry_rope_llama3(r, inv);
	return inv;
}

#undef FERRY_RF_FN
#endif
