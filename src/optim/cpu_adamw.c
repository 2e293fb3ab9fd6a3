/*
 * Fused AdamW over fp32 state in host memory (see optim/cpu_adamw.h for the
 * formula and the contract).
 *
 * Layout of the work: ferry_cpu_adamw_chunk cuts [0, n) into at most one
 * chunk per thread, page multiples, and each OpenMP thread runs one range
 * kernel over its chunk; the range kernel is picked once per call: AVX-512F
 * (16 lanes), AVX2 (8 lanes) or portable C.  The vector kernels are compiled
 * with target attributes, so this file builds for any x86-64 baseline, and
 * are chosen with __builtin_cpu_supports (which also checks that the OS
 * saves the wide registers).  A vector kernel first runs the portable code
 * up to a 64-byte boundary of param (so its full-width accesses stay within
 * cache lines), then whole vectors, then the portable code for the tail.
 *
 * Bit-identical on every path: each lane performs the IEEE operations of
 * the portable loop (multiply, add, subtract, divide, square root: all
 * correctly rounded) in the same order; nothing is fused.  ISO C11 (the
 * project's -std=c11) makes gcc keep a * b + c as two roundings
 * (-ffp-contract=off); clang contracts within an expression by default, so
 * the pragma below turns that off.  In GNU mode gcc would contract (also
 * intrinsics, which it expands to vector arithmetic), hence the optimize
 * pragma there.  No -ffast-math, no reciprocal approximations.
 *
 * bf16 copy: round to nearest, ties to even, on the bits (u + 0x7fff +
 * lsb) >> 16; too large rounds to infinity; NaN stays NaN, made quiet
 * ((u >> 16) | 0x40), as ferry_st_f32_to_bf16.  Not VCVTNEPS2BF16
 * (AVX512_BF16), which flushes subnormal inputs to zero.
 *
 * Speed: the pass is memory bound (bench/bench_cpu_adamw.c: about as fast as
 * a loop that moves the same 28 bytes per parameter with no arithmetic).
 * Tried and left out, for no gain on the machine measured (2 cores of an
 * AMD Zen 5): non-temporal stores for the bf16 copy (saving the read of its
 * lines; measured slower), software prefetch ahead of the four streams.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "optim/cpu_adamw.h"
#include "core/error.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ADAMW_X86 1
#include <immintrin.h>
#else
#define ADAMW_X86 0
#endif

#define PAGE_ELEMS 1024L  /* a chunk is a multiple of this: 4 KiB of fp32 */
#define MIN_CHUNK 32768L  /* smaller chunks cost more in fork/join than they save */

struct adamw_job;
typedef void (*adamw_range_fn_ptr)(const struct adamw_job *j, long lo, long hi);

/* One call's pointers and per-call constants. */
struct adamw_job {
	float *param, *m, *v;
	const float *grad;
	const float *src; /* init only: param's initial values, or NULL */
	uint16_t *pbf;
	float *save[3];      /* undo copies of param, m, v, or NULL */
	adamw_range_fn_ptr inner; /* with save: the path that updates a block */
	float lr, b1, b2, omb1, omb2, eps, wd, gs, ibc1, ibc2;
};

typedef adamw_range_fn_ptr adamw_range_fn;

/* Both results computed, then one picked: no branch, so compilers
 * vectorise the portable loop with the copy too. */
static inline uint16_t bf16_rne(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	const uint32_t quiet_nan = (u >> 16) | 0x0040u;

	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* ---- portable C ------------------------------------------------------ */

static void range_scalar(const struct adamw_job *j, long lo, long hi)
{
	float *restrict p = j->param, *restrict m = j->m, *restrict v = j->v;
	const float *restrict grad = j->grad;
	uint16_t *restrict pbf = j->pbf;
	const float b1 = j->b1, omb1 = j->omb1, b2 = j->b2, omb2 = j->omb2, gs = j->gs;
	const float lr = j->lr, wd = j->wd, eps = j->eps, ibc1 = j->ibc1, ibc2 = j->ibc2;

	for (long i = lo; i < hi; i++) {
		const float g = grad[i] * gs;
		const float mi = b1 * m[i] + omb1 * g;
		const float vi = b2 * v[i] + omb2 * g * g;
		m[i] = mi;
		v[i] = vi;
		const float upd = (mi * ibc1) / (sqrtf(vi * ibc2) + eps);
		const float pi = p[i] - lr * (upd + wd * p[i]);
		p[i] = pi;
		if (pbf)
			pbf[i] = bf16_rne(pi);
	}
}

/* Elements from lo until param + i is 64-byte aligned (at most hi - lo). */
static inline long head_to_line(const float *param, long lo, long hi)
{
	const long h = (long)((64 - ((uintptr_t)(param + lo) & 63)) & 63) / (long)sizeof(float);

	return h < hi - lo ? h : hi - lo;
}

#if ADAMW_X86
/* ---- AVX-512F: 16 lanes ---------------------------------------------- */

__attribute__((target("avx512f"))) static inline __m256i bf16_avx512(__m512 x)
{
	const __m512i u = _mm512_castps_si512(x);
	const __m512i top = _mm512_srli_epi32(u, 16);
	const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
	const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);

	r = _mm512_srli_epi32(r, 16);
	r = _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r); /* the low halves; all fit */
}

/* The whole-vector part of [lo, hi): returns where it stopped. */
__attribute__((target("avx512f"))) static inline long body_avx512(const struct adamw_job *j, long i, long hi,
								   const int with_bf16)
{
	const __m512 b1 = _mm512_set1_ps(j->b1), omb1 = _mm512_set1_ps(j->omb1);
	const __m512 b2 = _mm512_set1_ps(j->b2), omb2 = _mm512_set1_ps(j->omb2);
	const __m512 gs = _mm512_set1_ps(j->gs), lr = _mm512_set1_ps(j->lr), wd = _mm512_set1_ps(j->wd);
	const __m512 eps = _mm512_set1_ps(j->eps), ibc1 = _mm512_set1_ps(j->ibc1);
	const __m512 ibc2 = _mm512_set1_ps(j->ibc2);

	for (; i + 16 <= hi; i += 16) {
		const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(j->grad + i), gs);
		const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(j->m + i)), _mm512_mul_ps(omb1, g));
		const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(j->v + i)),
						_mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
		_mm512_storeu_ps(j->m + i, mi);
		_mm512_storeu_ps(j->v + i, vi);
		const __m512 upd = _mm512_div_ps(_mm512_mul_ps(mi, ibc1),
						 _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, ibc2)), eps));
		__m512 p = _mm512_loadu_ps(j->param + i);
		p = _mm512_sub_ps(p, _mm512_mul_ps(lr, _mm512_add_ps(upd, _mm512_mul_ps(wd, p))));
		_mm512_storeu_ps(j->param + i, p);
		if (with_bf16)
			_mm256_storeu_si256((__m256i *)(void *)(j->pbf + i), bf16_avx512(p));
	}
	return i;
}

__attribute__((target("avx512f"))) static void range_avx512(const struct adamw_job *j, long lo, long hi)
{
	long i = lo + head_to_line(j->param, lo, hi);

	range_scalar(j, lo, i);
	i = j->pbf ? body_avx512(j, i, hi, 1) : body_avx512(j, i, hi, 0);
	range_scalar(j, i, hi);
}

/* ---- AVX2: 8 lanes (no FMA: nothing here may fuse) -------------------- */

__attribute__((target("avx2"))) static inline __m128i bf16_avx2(__m256 x)
{
	const __m256i u = _mm256_castps_si256(x);
	const __m256i top = _mm256_srli_epi32(u, 16);
	const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
	const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));

	r = _mm256_srli_epi32(r, 16);
	r = _mm256_blendv_epi8(r, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
	/* every lane <= 0xffff: the unsigned saturating pack is a plain narrowing */
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

__attribute__((target("avx2"))) static inline long body_avx2(const struct adamw_job *j, long i, long hi,
							       const int with_bf16)
{
	const __m256 b1 = _mm256_set1_ps(j->b1), omb1 = _mm256_set1_ps(j->omb1);
	const __m256 b2 = _mm256_set1_ps(j->b2), omb2 = _mm256_set1_ps(j->omb2);
	const __m256 gs = _mm256_set1_ps(j->gs), lr = _mm256_set1_ps(j->lr), wd = _mm256_set1_ps(j->wd);
	const __m256 eps = _mm256_set1_ps(j->eps), ibc1 = _mm256_set1_ps(j->ibc1);
	const __m256 ibc2 = _mm256_set1_ps(j->ibc2);

	for (; i + 8 <= hi; i += 8) {
		const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(j->grad + i), gs);
		const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(j->m + i)), _mm256_mul_ps(omb1, g));
		const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(j->v + i)),
						_mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
		_mm256_storeu_ps(j->m + i, mi);
		_mm256_storeu_ps(j->v + i, vi);
		const __m256 upd = _mm256_div_ps(_mm256_mul_ps(mi, ibc1),
						 _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, ibc2)), eps));
		__m256 p = _mm256_loadu_ps(j->param + i);
		p = _mm256_sub_ps(p, _mm256_mul_ps(lr, _mm256_add_ps(upd, _mm256_mul_ps(wd, p))));
		_mm256_storeu_ps(j->param + i, p);
		if (with_bf16)
			_mm_storeu_si128((__m128i *)(void *)(j->pbf + i), bf16_avx2(p));
	}
	return i;
}

__attribute__((target("avx2"))) static void range_avx2(const struct adamw_job *j, long lo, long hi)
{
	long i = lo + head_to_line(j->param, lo, hi);

	range_scalar(j, lo, i);
	i = j->pbf ? body_avx2(j, i, hi, 1) : body_avx2(j, i, hi, 0);
	range_scalar(j, i, hi);
}
#endif /* ADAMW_X86 */

/* ---- an undo copy ------------------------------------------------------ */

#define SAVE_BLOCK 4096L /* 16 KiB per array: the block is still in cache when it is updated */

/* Copies each block's param, m and v before the path updates it. */
static void range_saving(const struct adamw_job *j, long lo, long hi)
{
	for (long b = lo; b < hi; b += SAVE_BLOCK) {
		const long e = b + SAVE_BLOCK < hi ? b + SAVE_BLOCK : hi;
		const size_t bytes = (size_t)(e - b) * sizeof(float);

		memcpy(j->save[0] + b, j->param + b, bytes);
		memcpy(j->save[1] + b, j->m + b, bytes);
		memcpy(j->save[2] + b, j->v + b, bytes);
		j->inner(j, b, e);
	}
}

static void range_restore(const struct adamw_job *j, long lo, long hi)
{
	const size_t bytes = (size_t)(hi - lo) * sizeof(float);

	memcpy(j->param + lo, j->save[0] + lo, bytes);
	memcpy(j->m + lo, j->save[1] + lo, bytes);
	memcpy(j->v + lo, j->save[2] + lo, bytes);
	if (j->pbf)
		for (long i = lo; i < hi; i++)
			j->pbf[i] = bf16_rne(j->param[i]);
}

/* ---- choosing a path ------------------------------------------------- */

const char *ferry_cpu_isa_name(enum ferry_cpu_isa isa)
{
	switch (isa) {
	case FERRY_CPU_ISA_AUTO: return "auto";
	case FERRY_CPU_ISA_SCALAR: return "scalar";
	case FERRY_CPU_ISA_AVX2: return "avx2";
	case FERRY_CPU_ISA_AVX512: return "avx512";
	}
	return NULL;
}

bool ferry_cpu_isa_available(enum ferry_cpu_isa isa)
{
	switch (isa) {
	case FERRY_CPU_ISA_AUTO:
	case FERRY_CPU_ISA_SCALAR:
		return true;
#if ADAMW_X86
	case FERRY_CPU_ISA_AVX2:
		return __builtin_cpu_supports("avx2");
	case FERRY_CPU_ISA_AVX512:
		return __builtin_cpu_supports("avx512f");
#else
	case FERRY_CPU_ISA_AVX2:
	case FERRY_CPU_ISA_AVX512:
		return false;
#endif
	}
	return false;
}

enum ferry_cpu_isa ferry_cpu_isa_best(void)
{
	if (ferry_cpu_isa_available(FERRY_CPU_ISA_AVX512))
		return FERRY_CPU_ISA_AVX512;
	if (ferry_cpu_isa_available(FERRY_CPU_ISA_AVX2))
		return FERRY_CPU_ISA_AVX2;
	return FERRY_CPU_ISA_SCALAR;
}

/* AUTO resolved through FERRY_CPU_ADAMW_ISA: FERRY_OK and *isa, or
 * FERRY_ERR_UNSUPPORTED with *env the variable's value (not recorded as an
 * error here: ferry_cpu_adamw_update cannot report one). */
static ferry_status resolve_auto(enum ferry_cpu_isa *isa, const char **env)
{
	const char *s = getenv("FERRY_CPU_ADAMW_ISA");

	*env = s;
	if (!s || !*s) {
		*isa = ferry_cpu_isa_best();
		return FERRY_OK;
	}
	for (int k = FERRY_CPU_ISA_SCALAR; k <= FERRY_CPU_ISA_AVX512; k++) {
		if (!strcmp(s, ferry_cpu_isa_name((enum ferry_cpu_isa)k))) {
			*isa = (enum ferry_cpu_isa)k;
			return ferry_cpu_isa_available(*isa) ? FERRY_OK : FERRY_ERR_UNSUPPORTED;
		}
	}
	return FERRY_ERR_UNSUPPORTED;
}

const char *ferry_cpu_adamw_isa(void)
{
	enum ferry_cpu_isa isa;
	const char *env;

	return resolve_auto(&isa, &env) ? NULL : ferry_cpu_isa_name(isa);
}

static adamw_range_fn range_for(enum ferry_cpu_isa isa)
{
#if ADAMW_X86
	if (isa == FERRY_CPU_ISA_AVX512)
		return range_avx512;
	if (isa == FERRY_CPU_ISA_AVX2)
		return range_avx2;
#endif
	(void)isa;
	return range_scalar;
}

/* ---- the partition and the parallel loop ------------------------------ */

long ferry_cpu_adamw_chunk(long n, int threads, int *parts)
{
	const long t = threads > 0 ? threads : 1;
	long chunk = (n + t - 1) / t;

	chunk = (chunk + PAGE_ELEMS - 1) / PAGE_ELEMS * PAGE_ELEMS;
	if (chunk < MIN_CHUNK)
		chunk = MIN_CHUNK;
	*parts = n > 0 ? (int)((n + chunk - 1) / chunk) : 0;
	return chunk;
}

/* Runs fn(j, lo, hi) over the chunks, chunk c on thread c (or, if OpenMP
 * grants fewer threads, thread c mod granted). */
static void run_chunks(adamw_range_fn fn, const struct adamw_job *j, long n, int threads)
{
	int parts;
	const long chunk = ferry_cpu_adamw_chunk(n, threads, &parts);

	if (parts <= 1) {
		if (n > 0)
			fn(j, 0, n);
		return;
	}
#pragma omp parallel num_threads(parts)
	{
		const int nt = omp_get_num_threads();

		for (int c = omp_get_thread_num(); c < parts; c += nt) {
			const long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;

			fn(j, lo, hi);
		}
	}
}

static ferry_status check_args(const struct ferry_cpu_adamw_args *a, const char *fn)
{
	if (!a)
		return ferry_error(FERRY_ERR_INVALID, "%s: no arguments", fn);
	if (a->n < 0 || a->threads < 0)
		return ferry_error(FERRY_ERR_INVALID, "%s: n = %ld, threads = %d", fn, a->n, a->threads);
	if (a->n > 0 && (!a->param || !a->m || !a->v))
		return ferry_error(FERRY_ERR_INVALID, "%s: param, m and v are required", fn);
	if (!ferry_cpu_isa_name(a->isa))
		return ferry_error(FERRY_ERR_INVALID, "%s: unknown isa %d", fn, (int)a->isa);
	return FERRY_OK;
}

static int threads_of(const struct ferry_cpu_adamw_args *a)
{
	return a->threads > 0 ? a->threads : omp_get_max_threads();
}

ferry_status ferry_cpu_adamw_step(const struct ferry_cpu_adamw_args *a)
{
	enum ferry_cpu_isa isa;
	const char *env = NULL;
	ferry_status st = check_args(a, "cpu adamw");

	if (st)
		return st;
	if (a->step < 1 || (a->n > 0 && !a->grad))
		return ferry_error(FERRY_ERR_INVALID, "cpu adamw: step %d (>= 1), grad %s", a->step,
				   a->grad ? "given" : "missing");
	isa = a->isa;
	if (isa == FERRY_CPU_ISA_AUTO && resolve_auto(&isa, &env))
		return ferry_error(FERRY_ERR_UNSUPPORTED,
				   "FERRY_CPU_ADAMW_ISA=%s: not a path this CPU runs (scalar, avx2, avx512; best here: %s)",
				   env, ferry_cpu_isa_name(ferry_cpu_isa_best()));
	if (!ferry_cpu_isa_available(isa))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "cpu adamw: this CPU lacks %s (best here: %s)",
				   ferry_cpu_isa_name(isa), ferry_cpu_isa_name(ferry_cpu_isa_best()));

	if ((a->save_param || a->save_m || a->save_v) && a->n > 0 && (!a->save_param || !a->save_m || !a->save_v))
		return ferry_error(FERRY_ERR_INVALID, "cpu adamw: an undo copy needs all three arrays");
	const struct adamw_job j = {
		.param = a->param, .m = a->m, .v = a->v, .grad = a->grad, .pbf = a->param_bf16,
		.save = { a->save_param, a->save_m, a->save_v }, .inner = range_for(isa),
		.lr = a->lr, .b1 = a->beta1, .b2 = a->beta2,
		.omb1 = 1.0f - a->beta1, .omb2 = 1.0f - a->beta2,
		.eps = a->eps, .wd = a->weight_decay, .gs = a->grad_scale,
		.ibc1 = (float)(1.0 / (1.0 - pow(a->beta1, a->step))),
		.ibc2 = (float)(1.0 / (1.0 - pow(a->beta2, a->step))),
	};
	run_chunks(a->save_param ? range_saving : range_for(isa), &j, a->n, threads_of(a));
	return FERRY_OK;
}

ferry_status ferry_cpu_adamw_restore(const struct ferry_cpu_adamw_args *a)
{
	ferry_status st = check_args(a, "cpu adamw restore");

	if (st)
		return st;
	if (a->n > 0 && (!a->save_param || !a->save_m || !a->save_v))
		return ferry_error(FERRY_ERR_INVALID, "cpu adamw restore: no undo copy");
	const struct adamw_job j = {
		.param = a->param, .m = a->m, .v = a->v, .pbf = a->param_bf16,
		.save = { a->save_param, a->save_m, a->save_v },
	};
	run_chunks(range_restore, &j, a->n, threads_of(a));
	return FERRY_OK;
}

/* ---- first touch -------------------------------------------------------- */

static void range_init(const struct adamw_job *j, long lo, long hi)
{
	const size_t bytes = (size_t)(hi - lo) * sizeof(float);

	memset(j->m + lo, 0, bytes);
	memset(j->v + lo, 0, bytes);
	if (j->src)
		memcpy(j->param + lo, j->src + lo, bytes);
	if (j->pbf)
		for (long i = lo; i < hi; i++)
			j->pbf[i] = bf16_rne(j->param[i]);
}

ferry_status ferry_cpu_adamw_init(const struct ferry_cpu_adamw_args *a, const float *param_src)
{
	ferry_status st = check_args(a, "cpu adamw init");

	if (st)
		return st;
	const struct adamw_job j = {
		.param = a->param, .m = a->m, .v = a->v, .pbf = a->param_bf16,
		.src = param_src != a->param ? param_src : NULL,
	};
	run_chunks(range_init, &j, a->n, threads_of(a));
	return FERRY_OK;
}
