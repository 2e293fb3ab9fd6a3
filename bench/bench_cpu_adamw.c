/*
 * Times the fused CPU AdamW (optim/cpu_adamw.c) against a plain scalar
 * loop, today's kernel (the loop ferry_cpu_adamw_update held before the
 * fused kernel, copied here) and the memory bandwidth a STREAM triad
 * reaches in the same run over the same total bytes.
 *
 *   bench_cpu_adamw [--params N[K|M|G]]... [--rounds R] [--threads T]
 *
 * Defaults: 16M and 128M parameters, 7 rounds, all OpenMP threads.  Each
 * round times every variant once, in turn, so a burst of other work on the
 * machine hits all of them; the figures are medians over the rounds.
 *
 * Bytes: AdamW moves 28 bytes per parameter (param, grad, m, v read; param,
 * m, v written in place), 30 with the bf16 copy.  The triad a = b + s c runs
 * over three arrays holding as many bytes as param, grad, m and v together;
 * with non-temporal stores it moves 12 bytes per element, with plain stores
 * 16 (the written line is read first, write-allocate).  The bound is the
 * faster of the two in bytes moved per second; "/triad" is a variant's
 * bytes per second over it.
 */
#include "optim/cpu_adamw.h"
#include "ops/cpu/kernels.h"
#include "bench_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__clang__)
#define NO_VECTORIZE_FN
#define NO_VECTORIZE_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#else
#define NO_VECTORIZE_FN __attribute__((optimize("no-tree-vectorize")))
#define NO_VECTORIZE_LOOP
#endif

struct hyper {
	float lr, beta1, beta2, eps, wd, gs;
	int t;
};

static const struct hyper H = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, 10 };

/* ---- the plain scalar loop (the compiler may not vectorise it) ---------- */

NO_VECTORIZE_FN static void scalar_range(float *param, float *m, float *v, const float *grad, long lo, long hi,
					 float ibc1, float ibc2)
{
	NO_VECTORIZE_LOOP
	for (long i = lo; i < hi; i++) {
		const float g = grad[i] * H.gs;
		m[i] = H.beta1 * m[i] + (1.0f - H.beta1) * g;
		v[i] = H.beta2 * v[i] + (1.0f - H.beta2) * g * g;
		param[i] -= H.lr * ((m[i] * ibc1) / (sqrtf(v[i] * ibc2) + H.eps) + H.wd * param[i]);
	}
}

static void scalar_loop(float *param, float *m, float *v, const float *grad, long n, int threads)
{
	const float ibc1 = (float)(1.0 / (1.0 - pow(H.beta1, H.t)));
	const float ibc2 = (float)(1.0 / (1.0 - pow(H.beta2, H.t)));

#pragma omp parallel num_threads(threads)
	{
		const long nt = omp_get_num_threads(), id = omp_get_thread_num();
		const long per = (n + nt - 1) / nt, lo = id * per < n ? id * per : n, hi = lo + per < n ? lo + per : n;

		scalar_range(param, m, v, grad, lo, hi, ibc1, ibc2);
	}
}

/* ---- today's kernel: ferry_cpu_adamw_update before the fused kernel ---- */

static void today_range(float *restrict param, float *restrict m, float *restrict v, const float *restrict grad,
			long lo, long hi, float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
			float inv_bc1, float inv_bc2)
{
	for (long i = lo; i < hi; i++) {
		const float g = grad[i] * grad_scale;
		const float mi = beta1 * m[i] + (1.0f - beta1) * g;
		const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
		m[i] = mi;
		v[i] = vi;
		const float upd = (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
		param[i] -= lr * (upd + wd * param[i]);
	}
}

static void today_kernel(float *param, float *m, float *v, const float *grad, long n, float lr, float beta1,
			 float beta2, float eps, float weight_decay, float grad_scale, int t)
{
	const float inv_bc1 = (float)(1.0 / (1.0 - pow(beta1, t)));
	const float inv_bc2 = (float)(1.0 / (1.0 - pow(beta2, t)));
#pragma omp parallel
	{
		const long nt = omp_get_num_threads(), id = omp_get_thread_num();
		long per = (n + nt - 1) / nt;
		per = (per + 15) & ~15L;
		const long lo = id * per < n ? id * per : n;
		const long hi = lo + per < n ? lo + per : n;
		today_range(param, m, v, grad, lo, hi, lr, beta1, beta2, eps, weight_decay, grad_scale, inv_bc1,
			    inv_bc2);
	}
}

/* ---- STREAM triad ------------------------------------------------------ */

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void triad_nt_avx512(float *a, const float *b, const float *c, long lo,
								long hi, float s)
{
	const __m512 vs = _mm512_set1_ps(s);

	for (long i = lo; i < hi; i += 16) /* 64-byte aligned, hi - lo a multiple of 16 */
		_mm512_stream_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(vs, _mm512_load_ps(c + i))));
}

__attribute__((target("avx"))) static void triad_nt_avx(float *a, const float *b, const float *c, long lo,
							 long hi, float s)
{
	const __m256 vs = _mm256_set1_ps(s);

	for (long i = lo; i < hi; i += 8)
		_mm256_stream_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i))));
}
#endif

static void triad_plain(float *restrict a, const float *restrict b, const float *restrict c, long lo, long hi,
			float s)
{
	for (long i = lo; i < hi; i++)
		a[i] = b[i] + s * c[i];
}

/* Thread id's part of n elements over t threads, a multiple of 1024. */
static void triad_part(long n, long t, long id, long *lo, long *hi)
{
	const long per = ((n + t - 1) / t + 1023) / 1024 * 1024;

	*lo = id * per < n ? id * per : n;
	*hi = *lo + per < n ? *lo + per : n;
}

/* a = b + s c over n elements (a multiple of 1024), one static chunk per
 * thread; non-temporal stores when nt and the CPU has AVX. */
static void triad(float *a, const float *b, const float *c, long n, int threads, int nt)
{
#pragma omp parallel num_threads(threads)
	{
		long lo, hi;

		triad_part(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);

#if defined(__x86_64__)
		if (nt && __builtin_cpu_supports("avx512f"))
			triad_nt_avx512(a, b, c, lo, hi, 3.0f);
		else if (nt && __builtin_cpu_supports("avx"))
			triad_nt_avx(a, b, c, lo, hi, 3.0f);
		else
#endif
			triad_plain(a, b, c, lo, hi, 3.0f);
		(void)nt;
	}
}

/* AdamW's memory traffic without its arithmetic: the same four streams
 * read and three written in place, one static chunk per thread as the fused
 * kernel's.  s is 0 (read from a volatile, so the compiler keeps the loads
 * and stores) and the values stay as they are. */
static volatile float streams_zero = 0.0f;

static void streams_range(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
			  long lo, long hi, float s)
{
	for (long i = lo; i < hi; i++) {
		const float x = s * g[i];

		p[i] += x;
		m[i] += x;
		v[i] += x;
	}
}

static void streams(float *p, float *m, float *v, const float *g, long n, int threads)
{
	const float s = streams_zero;

#pragma omp parallel num_threads(threads)
	{
		long lo, hi;

		triad_part(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
		streams_range(p, m, v, g, lo, hi, s);
	}
}

/* ---- the variants ------------------------------------------------------ */

enum kind { K_TRIAD_NT, K_TRIAD, K_STREAMS, K_SCALAR, K_TODAY, K_UPDATE, K_NEW };

struct variant {
	char name[64];
	enum kind kind;
	int threads;
	enum ferry_cpu_isa isa;
	int bf16;
	int save;         /* with the speculative order's undo copy */
	double bytes_per; /* bytes moved per element */
	double t[64];     /* seconds, per round */
	double med;
};

struct buffers {
	long n, nt; /* parameters; triad elements per array */
	float *p, *g, *m, *v, *ta, *tb, *tc;
	float *save[3]; /* undo copies of p, m, v */
	uint16_t *bf;
};

static void die(const char *what)
{
	fprintf(stderr, "bench: %s: %s\n", what, ferry_last_error());
	exit(1);
}

static void run_variant(const struct variant *x, struct buffers *b)
{
	struct ferry_cpu_adamw_args a = {
		.param = b->p, .m = b->m, .v = b->v, .grad = b->g, .param_bf16 = x->bf16 ? b->bf : NULL, .n = b->n,
		.lr = H.lr, .beta1 = H.beta1, .beta2 = H.beta2, .eps = H.eps, .weight_decay = H.wd,
		.grad_scale = H.gs, .step = H.t, .threads = x->threads, .isa = x->isa,
		.save_param = x->save ? b->save[0] : NULL, .save_m = x->save ? b->save[1] : NULL,
		.save_v = x->save ? b->save[2] : NULL,
	};

	switch (x->kind) {
	case K_TRIAD_NT:
	case K_TRIAD:
		triad(b->ta, b->tb, b->tc, b->nt, x->threads, x->kind == K_TRIAD_NT);
		break;
	case K_STREAMS:
		streams(b->p, b->m, b->v, b->g, b->n, x->threads);
		break;
	case K_SCALAR:
		scalar_loop(b->p, b->m, b->v, b->g, b->n, x->threads);
		break;
	case K_TODAY:
		today_kernel(b->p, b->m, b->v, b->g, b->n, H.lr, H.beta1, H.beta2, H.eps, H.wd, H.gs, H.t);
		break;
	case K_UPDATE:
		ferry_cpu_adamw_update(b->p, b->m, b->v, b->g, b->n, H.lr, H.beta1, H.beta2, H.eps, H.wd, H.gs, H.t);
		break;
	case K_NEW:
		if (ferry_cpu_adamw_step(&a))
			die("step");
		break;
	}
}

static int add(struct variant *vs, int k, const char *name, enum kind kind, int threads, enum ferry_cpu_isa isa,
	       int bf16, double bytes_per)
{
	vs[k] = (struct variant){ .kind = kind, .threads = threads, .isa = isa, .bf16 = bf16, .bytes_per = bytes_per };
	snprintf(vs[k].name, sizeof(vs[k].name), "%s", name);
	return k + 1;
}

static int make_variants(struct variant *vs, int threads)
{
	char name[64];
	int k = 0;

	k = add(vs, k, "triad, non-temporal stores", K_TRIAD_NT, threads, 0, 0, 12);
	k = add(vs, k, "triad, plain stores", K_TRIAD, threads, 0, 0, 16);
	k = add(vs, k, "AdamW's streams, no arithmetic", K_STREAMS, threads, 0, 0, 28);
	k = add(vs, k, "scalar loop, 1 thread", K_SCALAR, 1, 0, 0, 28);
	snprintf(name, sizeof(name), "scalar loop, %d threads", threads);
	k = add(vs, k, name, K_SCALAR, threads, 0, 0, 28);
	k = add(vs, k, "today's kernel (old loop)", K_TODAY, threads, 0, 0, 28);
	k = add(vs, k, "ferry_cpu_adamw_update (now)", K_UPDATE, threads, 0, 0, 28);
	for (int isa = FERRY_CPU_ISA_SCALAR; isa <= FERRY_CPU_ISA_AVX512; isa++) {
		if (!ferry_cpu_isa_available((enum ferry_cpu_isa)isa))
			continue;
		for (int bf16 = 0; bf16 < 2; bf16++) {
			snprintf(name, sizeof(name), "new, %s%s", ferry_cpu_isa_name((enum ferry_cpu_isa)isa),
				 bf16 ? " + bf16 copy" : "");
			k = add(vs, k, name, K_NEW, threads, (enum ferry_cpu_isa)isa, bf16, bf16 ? 30 : 28);
		}
	}
	snprintf(name, sizeof(name), "new, %s, 1 thread", ferry_cpu_isa_name(ferry_cpu_isa_best()));
	k = add(vs, k, name, K_NEW, 1, ferry_cpu_isa_best(), 0, 28);
	/* the speculative clipping order: 12 more bytes written per parameter
	 * (the copies' reads hit the cache the update then reads) */
	snprintf(name, sizeof(name), "new, %s + undo copy", ferry_cpu_isa_name(ferry_cpu_isa_best()));
	k = add(vs, k, name, K_NEW, threads, ferry_cpu_isa_best(), 0, 40);
	vs[k - 1].save = 1;
	return k;
}

static void *big_alloc(size_t bytes)
{
	void *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);

	if (!p) {
		fprintf(stderr, "bench: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return p;
}

/* Allocates and first-touches with each kernel's partition (pages stay
 * untouched until then), then fills with training-like values. */
static void buffers_init(struct buffers *b, long n, int threads)
{
	struct ferry_cpu_adamw_args a;

	b->n = n;
	b->nt = (4 * n / 3 + 1023) / 1024 * 1024; /* 3 arrays ~ 16 bytes x n */
	b->p = big_alloc(sizeof(float) * (size_t)n);
	b->g = big_alloc(sizeof(float) * (size_t)n);
	b->m = big_alloc(sizeof(float) * (size_t)n);
	b->v = big_alloc(sizeof(float) * (size_t)n);
	b->bf = big_alloc(sizeof(uint16_t) * (size_t)n);
	for (int i = 0; i < 3; i++)
		b->save[i] = big_alloc(sizeof(float) * (size_t)n);
	b->ta = big_alloc(sizeof(float) * (size_t)b->nt);
	b->tb = big_alloc(sizeof(float) * (size_t)b->nt);
	b->tc = big_alloc(sizeof(float) * (size_t)b->nt);
	a = (struct ferry_cpu_adamw_args){ .param = b->p, .m = b->m, .v = b->v, .param_bf16 = b->bf, .n = n,
					    .threads = threads };
	if (ferry_cpu_adamw_init(&a, NULL))
		die("init");
#pragma omp parallel for schedule(static) num_threads(threads)
	for (long i = 0; i < n; i++) {
		const uint32_t h = (uint32_t)i * 2654435761u;

		b->p[i] = ((float)(h >> 8) / 16777216.0f - 0.5f) * 0.1f;
		b->g[i] = ((float)((h >> 4) & 0xffff) / 65536.0f - 0.5f) * 0.01f;
		b->m[i] = b->g[i] * 0.1f;
		b->v[i] = b->g[i] * b->g[i];
	}
#pragma omp parallel num_threads(threads)
	{
		long lo, hi;

		triad_part(b->nt, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
		for (long i = lo; i < hi; i++) /* first touch, as the triad runs */
			b->ta[i] = 0.0f, b->tb[i] = 1.0f, b->tc[i] = 2.0f;
	}
}

static void buffers_free(struct buffers *b)
{
	free(b->p), free(b->g), free(b->m), free(b->v), free(b->bf);
	for (int i = 0; i < 3; i++)
		free(b->save[i]);
	free(b->ta), free(b->tb), free(b->tc);
}

static void print_results(struct variant *vs, int nv, const struct buffers *b)
{
	const double bound = fmax(vs[0].bytes_per * b->nt / vs[0].med, vs[1].bytes_per * b->nt / vs[1].med);
	const double s1 = vs[3].med, sn = vs[4].med, today = vs[5].med, flow = vs[2].med;

	printf("  %-32s %8s %9s %7s %7s %9s %9s %8s %8s\n", "variant", "ms", "Mparam/s", "GB/s", "/triad", "x scalar1",
	       "x scalarN", "x today", "/streams");
	for (int k = 0; k < nv; k++) {
		const struct variant *x = &vs[k];
		const double elems = x->kind <= K_TRIAD ? (double)b->nt : (double)b->n;
		const double gbs = x->bytes_per * elems / x->med / 1e9;

		if (x->kind == K_STREAMS) {
			printf("  %-32s %8.2f %9.0f %7.1f %7.2f  (the bound for AdamW's access pattern)\n", x->name,
			       x->med * 1e3, b->n / x->med / 1e6, gbs, gbs * 1e9 / bound);
			continue;
		}
		if (x->kind <= K_TRIAD) {
			printf("  %-32s %8.2f %9s %7.1f %7.2f  (%2.0f bytes/element)\n", x->name, x->med * 1e3, "", gbs,
			       gbs * 1e9 / bound, x->bytes_per);
			continue;
		}
		printf("  %-32s %8.2f %9.0f %7.1f %7.2f %9.2f %9.2f %8.2f %8.2f\n", x->name, x->med * 1e3,
		       b->n / x->med / 1e6, gbs, gbs * 1e9 / bound, s1 / x->med, sn / x->med, today / x->med,
		       flow / x->med);
	}
	printf("  bound (faster triad): %.1f GB/s\n", bound / 1e9);
}

static void bench_size(long n, int rounds, int threads)
{
	struct variant vs[24];
	struct buffers b;
	const int nv = make_variants(vs, threads);

	buffers_init(&b, n, threads);
	for (int k = 0; k < nv; k++) /* warm up: code, page tables */
		run_variant(&vs[k], &b);
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < nv; k++) {
			double t = now_s();

			run_variant(&vs[k], &b);
			vs[k].t[r] = now_s() - t;
		}
	for (int k = 0; k < nv; k++)
		vs[k].med = median(vs[k].t, rounds);
	printf("%ld parameters (%.0f MiB of fp32 state), %d threads, median of %d rounds\n", n,
	       16.0 * n / 1048576.0, threads, rounds);
	print_results(vs, nv, &b);
	fflush(stdout);
	buffers_free(&b);
}

static long parse_count(const char *s)
{
	char *end;
	double x = strtod(s, &end);

	if (*end == 'K' || *end == 'k')
		x *= 1024, end++;
	else if (*end == 'M' || *end == 'm')
		x *= 1048576, end++;
	else if (*end == 'G' || *end == 'g')
		x *= 1073741824, end++;
	return *end || x < 1 || x > 1e11 ? -1 : (long)x;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_cpu_adamw [--params N[K|M|G]]... [--rounds R] [--threads T]\n"
		   "\n"
		   "Times one AdamW step over N fp32 parameters (default 16M and 128M) for a\n"
		   "plain scalar loop, today's kernel, ferry_cpu_adamw_update and the fused kernel\n"
		   "on each path this CPU runs, against a STREAM triad over the same bytes.\n"
		   "  --params N    parameter count, K/M/G = 2^10/2^20/2^30; repeat for more\n"
		   "  --rounds R    rounds, each timing every variant once (default 7, 1..64)\n"
		   "  --threads T   OpenMP threads (default: omp_get_max_threads())\n");
}

int main(int argc, char **argv)
{
	long sizes[16];
	int n_sizes = 0, rounds = 7, threads = omp_get_max_threads();

	for (int i = 1; i < argc; i += 2) {
		const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!val) {
			usage(stderr);
			return 2;
		}
		if (!strcmp(flag, "--params") && n_sizes < 16 && (sizes[n_sizes] = parse_count(val)) > 0)
			n_sizes++;
		else if (!strcmp(flag, "--rounds") && (rounds = atoi(val)) >= 1 && rounds <= 64)
			;
		else if (!strcmp(flag, "--threads") && (threads = atoi(val)) >= 1)
			;
		else {
			fprintf(stderr, "bench: bad flag or value: %s %s\n", flag, val);
			return 2;
		}
	}
	if (!n_sizes) {
		sizes[n_sizes++] = 16L << 20;
		sizes[n_sizes++] = 128L << 20;
	}
	omp_set_num_threads(threads);
	printf("cpu adamw: paths %s%s%s, auto %s; 28 bytes/param (30 with the bf16 copy)\n", "scalar",
	       ferry_cpu_isa_available(FERRY_CPU_ISA_AVX2) ? ", avx2" : "",
	       ferry_cpu_isa_available(FERRY_CPU_ISA_AVX512) ? ", avx512" : "", ferry_cpu_adamw_isa());
	for (int k = 0; k < n_sizes; k++)
		bench_size(sizes[k], rounds, threads);
	return 0;
}
