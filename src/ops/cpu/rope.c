/*
 * Rotary position embedding (RoPE), Hugging Face "rotate_half" convention,
 * on [B, T, NH, HS] rows (C = NH * HS channels per (b, t); HS even).
 *
 * Channel i < HS/2 of a head is paired with channel i + HS/2 and the pair is
 * rotated by the angle t * inv_freq_i, inv_freq_i = theta^(-2i / HS):
 *
 *   out[i]        = x[i] cos - x[i + HS/2] sin
 *   out[i + HS/2] = x[i + HS/2] cos + x[i] sin
 *
 * (HF: q * cos + rotate_half(q) * sin, cos/sin of cat(freqs, freqs),
 * rotate_half(x) = cat(-x2, x1).)  The op is linear and the rotation
 * orthogonal, so the backward is the inverse rotation (angle -a):
 *
 *   dinp[i]        += dout[i] cos + dout[i + HS/2] sin
 *   dinp[i + HS/2] += dout[i + HS/2] cos - dout[i] sin
 *
 * Angles, as HF computes them (LlamaRotaryEmbedding), in float32: inv_freq =
 * 1 / theta^(float(2i) / HS) (the power rounded to float, then a float
 * division), scaled as the model's rope_scaling says (linear, llama3:
 * ops/rope_freq.h), freqs = float(t) * inv_freq rounded to
 * float, cos and sin of that float angle.  We reproduce these roundings
 * (the power and the cosine and sine are evaluated in double and rounded
 * once, so they agree with HF's float results to the last bit or so) rather
 * than compute exact angles in double: the float32 angle of a large
 * position is off by up to half an ulp of t * inv_freq (6e-5 rad at t = 2000,
 * 5e-4 at t = 8000), and pretrained Llama weights were trained with HF's (or
 * Meta's identical float32) angles, so matching them matters more than
 * exactness.
 *
 * Cost: cos and sin are needed for T x HS/2 (t, i) pairs, shared by every
 * batch row and head.  They are computed once per call: the power once per
 * i, up front; then each thread takes whole positions t (parallel over t)
 * and builds that position's cos/sin row in a small stack table, which it
 * applies to all B x NH heads at t.  No allocation, and each output is
 * written by one thread, so results do not depend on the thread count.  Pairs
 * are processed ROPE_CHUNK at a time so any HS works with fixed-size tables.
 */
#include "ops/cpu/kernels.h"
#include "ops/rope_freq.h"

#include <math.h>
#include <stddef.h>

#define ROPE_CHUNK 128 /* pairs per pass: HS <= 256 in one pass */

/* inv_freq[j] for pairs i0 .. i0 + ni - 1, as HF's float32 computation
 * (ops/rope_freq.h, shared with the CUDA kernel). */
static void rope_inv_freq(float *inv, int i0, int ni, int HS, const struct ferry_rope_freq *rf)
{
	for (int j = 0; j < ni; j++)
		inv[j] = ferry_rope_inv_freq(rf, i0 + j, HS);
}

/* cos/sin at position t for the pairs of inv (float32 angle, as HF). */
static void rope_row(float *cs, float *sn, const float *inv, int ni, int t)
{
	for (int j = 0; j < ni; j++) {
		const float a = (float)t * inv[j];
		cs[j] = (float)cos((double)a);
		sn[j] = (float)sin((double)a);
	}
}

/* dir = +1: forward rotation, out = R x (writes).  dir = -1: backward, out
 * += R^T x (accumulates). */
static void rope_apply(float *out, const float *inp, int B, int T, int NH,
		       int HS, const struct ferry_rope_freq *rf, int dir)
{
	const int half = HS / 2;
	const size_t C = (size_t)NH * HS;

	for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
		const int ni = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
		float inv[ROPE_CHUNK];
		rope_inv_freq(inv, i0, ni, HS, rf);

#pragma omp parallel for schedule(static)
		for (int t = 0; t < T; t++) {
			float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
			rope_row(cs, sn, inv, ni, t);
			for (int b = 0; b < B; b++)
				for (int h = 0; h < NH; h++) {
					const size_t o = ((size_t)b * T + t) * C +
							 (size_t)h * HS + i0;
					const float *restrict x1 = inp + o;
					const float *restrict x2 = x1 + half;
					float *restrict y1 = out + o;
					float *restrict y2 = y1 + half;
					if (dir > 0) {
#pragma omp simd
						for (int j = 0; j < ni; j++) {
							y1[j] = x1[j] * cs[j] - x2[j] * sn[j];
							y2[j] = x2[j] * cs[j] + x1[j] * sn[j];
						}
					} else {
#pragma omp simd
						for (int j = 0; j < ni; j++) {
							y1[j] += x1[j] * cs[j] + x2[j] * sn[j];
							y2[j] += x2[j] * cs[j] - x1[j] * sn[j];
						}
					}
				}
		}
	}
}

void ferry_cpu_rope_forward(float *out, const float *inp, int B, int T, int NH,
			    int HS, const struct ferry_rope_freq *rf)
{
	rope_apply(out, inp, B, T, NH, HS, rf, 1);
}

void ferry_cpu_rope_backward(float *dinp, const float *dout, int B, int T,
			     int NH, int HS, const struct ferry_rope_freq *rf)
{
	if (!dinp)
		return;
	rope_apply(dinp, dout, B, T, NH, HS, rf, -1);
}
