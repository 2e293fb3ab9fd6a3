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
 *
 * Packed documents: with positions, row (b, t) turns by positions[b, t], its
 * position in its document.  Rows of one t no longer share an angle, so each
 * thread takes whole rows (b, t) and builds that row's cos/sin (the same
 * float angle as a row at t = positions[b, t] without them: a document
 * packed anywhere turns as it would alone, bit for bit).
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

/* The rotation of one row's NH heads (o: channel i0 of head 0) by cs, sn. */
static inline void rope_heads(float *out, const float *inp, size_t o, int NH, int HS, int ni, const float *cs,
			      const float *sn, int dir)
{
	const int half = HS / 2;

	for (int h = 0; h < NH; h++, o += (size_t)HS) {
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

/* rope_apply with positions: a cos/sin row per (b, t). */
static void rope_apply_pos(float *out, const float *inp, const int32_t *pos, int B, int T, int NH, int HS,
			   const struct ferry_rope_freq *rf, int dir)
{
	const int half = HS / 2;
	const size_t C = (size_t)NH * HS;
	const long N = (long)B * T;

	for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
		const int ni = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
		float inv[ROPE_CHUNK];
		rope_inv_freq(inv, i0, ni, HS, rf);

#pragma omp parallel for schedule(static)
		for (long n = 0; n < N; n++) {
			float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
			rope_row(cs, sn, inv, ni, pos[n]);
			rope_heads(out, inp, (size_t)n * C + (size_t)i0, NH, HS, ni, cs, sn, dir);
		}
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
				rope_heads(out, inp, ((size_t)b * T + t) * C + (size_t)i0, NH, HS, ni, cs, sn, dir);
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

void ferry_cpu_rope_forward_pos(float *out, const float *inp, const int32_t *positions, int B, int T, int NH,
				int HS, const struct ferry_rope_freq *rf)
{
	if (positions)
		rope_apply_pos(out, inp, positions, B, T, NH, HS, rf, 1);
	else
		rope_apply(out, inp, B, T, NH, HS, rf, 1);
}

void ferry_cpu_rope_backward_pos(float *dinp, const float *dout, const int32_t *positions, int B, int T, int NH,
				 int HS, const struct ferry_rope_freq *rf)
{
	if (!dinp)
		return;
	if (positions)
		rope_apply_pos(dinp, dout, positions, B, T, NH, HS, rf, -1);
	else
		rope_apply(dinp, dout, B, T, NH, HS, rf, -1);
}
