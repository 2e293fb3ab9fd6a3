/*
 * The fused CPU AdamW (optim/cpu_adamw.c): every path this CPU runs
 * (portable C, AVX2, AVX-512), at every thread count, gives bit for bit the
 * results of the loop ferry_cpu_adamw_update held before it (copied below as
 * the oracle) and of ferry_cpu_adamw_update itself, over a table of cases:
 * odd lengths (vector tails), misaligned arrays, grad scale, weight decay on
 * and off, step 1 and large steps, zero gradients, huge and subnormal
 * values.  The bf16 copy equals ferry_st_f32_to_bf16 (an independent
 * round-to-nearest-even) of the updated parameter.  Then first touch, the
 * partition, argument errors and FERRY_CPU_ADAMW_ISA.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "optim/cpu_adamw.h"
#include "ferry/safetensors.h"
#include "ops/cpu/kernels.h"
#include "test_util.h"

/* The oracle: ferry_cpu_adamw_update's loop before the fused kernel, one
 * thread (the operations are elementwise, so the split never mattered). */
static void ref_adamw(float *restrict param, float *restrict m, float *restrict v, const float *restrict grad,
		      long n, float lr, float beta1, float beta2, float eps, float wd, float grad_scale, int t)
{
	const float inv_bc1 = (float)(1.0 / (1.0 - pow(beta1, t)));
	const float inv_bc2 = (float)(1.0 / (1.0 - pow(beta2, t)));

	for (long i = 0; i < n; i++) {
		const float g = grad[i] * grad_scale;
		const float mi = beta1 * m[i] + (1.0f - beta1) * g;
		const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
		m[i] = mi;
		v[i] = vi;
		const float upd = (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
		param[i] -= lr * (upd + wd * param[i]);
	}
}

enum inputs {
	IN_NORMAL,    /* training-like magnitudes */
	IN_ZERO_GRAD, /* grad all +0 and -0 */
	IN_HUGE,      /* up to FLT_MAX: v and the update overflow to inf */
	IN_TINY,      /* subnormals and near-subnormals: underflow */
	IN_MIXED,     /* each element from one of the above, zeros too */
	IN_BITS,      /* param: random bit patterns and specials; grad, m, v = 0 */
};

struct adamw_case {
	const char *name;
	enum inputs in;
	long n;
	int off;   /* arrays start this many floats past a 64-byte boundary */
	float lr, beta1, beta2, eps, wd, gs;
	int t0, steps; /* steps t0, t0 + 1, ... */
};

static const struct adamw_case cases[] = {
	{ "normal", IN_NORMAL, 100003, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 3 },
	{ "grad scale, no decay", IN_NORMAL, 4097, 1, 6e-4f, 0.9f, 0.999f, 1e-6f, 0.0f, 0.37f, 1, 3 },
	{ "large step", IN_NORMAL, 1023, 3, 2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 100000, 2 },
	{ "step near INT_MAX", IN_NORMAL, 77, 2, 1e-3f, 0.8f, 0.9f, 1e-8f, 0.01f, 1.0f, 2147483640, 2 },
	{ "zero grad", IN_ZERO_GRAD, 33, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 2 },
	{ "zero grad, no decay", IN_ZERO_GRAD, 4099, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.25f, 7, 2 },
	{ "huge", IN_HUGE, 1017, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 2 },
	{ "huge, grad scale 1e-30", IN_HUGE, 529, 2, 1.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1e-30f, 3, 2 },
	{ "tiny", IN_TINY, 1031, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 2 },
	{ "tiny, eps 1e-38", IN_TINY, 517, 3, 1e-3f, 0.9f, 0.95f, 1e-38f, 0.0f, 3.0f, 2, 2 },
	{ "mixed", IN_MIXED, 300001, 2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.9f, 5, 2 },
	{ "bf16 rounding (lr 0)", IN_BITS, 100003, 1, 0.0f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 1 },
};

struct state {
	float *p, *m, *v, *g;
	uint16_t *bf;
	long n;
	void *raw[4];
};

/* Floats starting off floats past a 64-byte boundary (*raw to free). */
static float *alloc_off(long n, int off, void **raw)
{
	*raw = aligned_alloc(64, (sizeof(float) * (size_t)(n + off) + 63) / 64 * 64 + 64);
	if (!*raw) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return (float *)*raw + off;
}

static void state_alloc(struct state *s, long n, int off)
{
	s->n = n;
	s->p = alloc_off(n, off, &s->raw[0]);
	s->m = alloc_off(n, off, &s->raw[1]);
	s->v = alloc_off(n, off, &s->raw[2]);
	s->g = alloc_off(n, off, &s->raw[3]);
	s->bf = TALLOC(uint16_t, n);
}

static void state_free(struct state *s)
{
	for (int k = 0; k < 4; k++)
		free(s->raw[k]);
	free(s->bf);
}

static void state_copy(struct state *d, const struct state *s)
{
	memcpy(d->p, s->p, sizeof(float) * (size_t)s->n);
	memcpy(d->m, s->m, sizeof(float) * (size_t)s->n);
	memcpy(d->v, s->v, sizeof(float) * (size_t)s->n);
	memcpy(d->g, s->g, sizeof(float) * (size_t)s->n);
	memset(d->bf, 0xa5, sizeof(uint16_t) * (size_t)s->n);
}

static float bits_to_f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Magnitude 10^e, e uniform in [lo, hi], random sign. */
static float log_uniform(Rng *r, double lo, double hi)
{
	const float x = (float)pow(10.0, lo + (hi - lo) * rng_unit(r));

	return rng_u64(r) & 1 ? -x : x;
}

static void fill_element(Rng *r, enum inputs in, float *p, float *m, float *v, float *g)
{
	if (in == IN_MIXED)
		in = (enum inputs)rng_int(r, 4);
	switch (in) {
	case IN_NORMAL:
	case IN_MIXED:
		*p = 0.5f * rng_normal(r), *g = 0.01f * rng_normal(r);
		*m = 1e-3f * rng_normal(r), *v = rng_uniform(r, 0.0f, 1e-4f);
		break;
	case IN_ZERO_GRAD:
		*p = rng_normal(r), *g = rng_u64(r) & 1 ? 0.0f : -0.0f;
		*m = rng_int(r, 3) ? 1e-3f * rng_normal(r) : 0.0f, *v = rng_int(r, 3) ? rng_uniform(r, 0.0f, 1e-4f) : 0.0f;
		break;
	case IN_HUGE:
		*p = log_uniform(r, 30, 38.5), *g = log_uniform(r, 15, 38.5);
		*m = log_uniform(r, 20, 38.5), *v = fabsf(log_uniform(r, 30, 38.5));
		break;
	case IN_TINY:
		*p = log_uniform(r, -45, -30), *g = log_uniform(r, -45, -15);
		*m = log_uniform(r, -45, -30), *v = fabsf(log_uniform(r, -45, -30));
		break;
	case IN_BITS: {
		static const uint32_t special[] = {
			0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7e8000u, 0x7f800000u, 0xff800000u,
			0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u,
			0x3f807fffu, 0x3f808001u, 0x00000000u, 0x80000000u, 0x7fc00000u, 0xffc00001u,
			0x7f800001u, 0xff812345u, 0x007fffffu, 0x0000ffffu,
		};
		const int k = rng_int(r, 2 * (int)(sizeof(special) / sizeof(special[0])));

		*p = bits_to_f(k < (int)(sizeof(special) / sizeof(special[0])) ? special[k] : (uint32_t)rng_u64(r));
		*g = 0.0f, *m = 0.0f, *v = 0.0f;
		break;
	}
	}
}

static void fill_state(struct state *s, enum inputs in, uint64_t seed)
{
	Rng r = rng_new(seed);

	for (long i = 0; i < s->n; i++)
		fill_element(&r, in, &s->p[i], &s->m[i], &s->v[i], &s->g[i]);
}

/* Index of the first element whose bits differ, -1 if none. */
static long first_diff(const void *a, const void *b, long n, size_t size)
{
	const unsigned char *x = a, *y = b;

	for (long i = 0; i < n; i++)
		if (memcmp(x + (size_t)i * size, y + (size_t)i * size, size))
			return i;
	return -1;
}

static uint32_t f_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* got (param, m, v and, when want_bf16, its bf16 copy) equals ref bit for bit. */
static void check_same(const struct state *got, const struct state *ref, int want_bf16, const char *what)
{
	const char *names[3] = { "param", "m", "v" };
	const float *g[3] = { got->p, got->m, got->v }, *r[3] = { ref->p, ref->m, ref->v };

	for (int k = 0; k < 3; k++) {
		const long i = first_diff(g[k], r[k], got->n, sizeof(float));

		CHECK(i < 0, "%s: %s[%ld] = %a (0x%08x), the oracle's %a (0x%08x)", what, names[k], i,
		      i < 0 ? 0.0 : g[k][i], i < 0 ? 0u : f_bits(g[k][i]), i < 0 ? 0.0 : r[k][i],
		      i < 0 ? 0u : f_bits(r[k][i]));
	}
	if (!want_bf16)
		return;
	for (long i = 0; i < got->n; i++) {
		const uint16_t want = ferry_st_f32_to_bf16(ref->p[i]);

		if (got->bf[i] != want) {
			CHECK(0, "%s: bf16[%ld] = 0x%04x, round to nearest even of 0x%08x is 0x%04x", what, i, got->bf[i],
			      f_bits(ref->p[i]), want);
			break;
		}
	}
}

static struct ferry_cpu_adamw_args args_for(const struct adamw_case *c, struct state *s, int t, int bf16,
					    int threads, enum ferry_cpu_isa isa)
{
	return (struct ferry_cpu_adamw_args){
		.param = s->p, .m = s->m, .v = s->v, .grad = s->g, .param_bf16 = bf16 ? s->bf : NULL,
		.n = s->n, .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
		.weight_decay = c->wd, .grad_scale = c->gs, .step = t, .threads = threads, .isa = isa,
	};
}

/* Runs the case's steps on one path and thread count, checks against ref. */
static void run_path(const struct adamw_case *c, const struct state *init, const struct state *ref,
		     struct state *work, enum ferry_cpu_isa isa, int threads, int bf16)
{
	char what[160];
	ferry_status st = FERRY_OK;

	state_copy(work, init);
	for (int k = 0; k < c->steps && !st; k++) {
		struct ferry_cpu_adamw_args a = args_for(c, work, c->t0 + k, bf16, threads, isa);

		st = ferry_cpu_adamw_step(&a);
	}
	snprintf(what, sizeof(what), "%s, n %ld, %s, %d threads%s", c->name, c->n, ferry_cpu_isa_name(isa), threads,
		 bf16 ? ", bf16 copy" : "");
	CHECK(st == FERRY_OK, "%s: %s", what, ferry_last_error());
	check_same(work, ref, bf16, what);
}

static void test_case(const struct adamw_case *c, uint64_t seed)
{
	struct state init, ref, work;
	static const int threads[] = { 1, 2, 3, 0 };

	state_alloc(&init, c->n, c->off);
	state_alloc(&ref, c->n, c->off);
	state_alloc(&work, c->n, (c->off + 1) % 4);
	fill_state(&init, c->in, seed);
	state_copy(&ref, &init);
	for (int k = 0; k < c->steps; k++)
		ref_adamw(ref.p, ref.m, ref.v, ref.g, c->n, c->lr, c->beta1, c->beta2, c->eps, c->wd, c->gs, c->t0 + k);

	/* the kernel the CPU backend calls */
	state_copy(&work, &init);
	for (int k = 0; k < c->steps; k++)
		ferry_cpu_adamw_update(work.p, work.m, work.v, work.g, c->n, c->lr, c->beta1, c->beta2, c->eps, c->wd,
				       c->gs, c->t0 + k);
	check_same(&work, &ref, 0, "ferry_cpu_adamw_update");

	for (int isa = FERRY_CPU_ISA_SCALAR; isa <= FERRY_CPU_ISA_AVX512; isa++) {
		if (!ferry_cpu_isa_available((enum ferry_cpu_isa)isa))
			continue;
		for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++)
			for (int bf16 = 0; bf16 < 2; bf16++)
				run_path(c, &init, &ref, &work, (enum ferry_cpu_isa)isa, threads[k], bf16);
	}
	state_free(&init);
	state_free(&ref);
	state_free(&work);
}

/* Every length 0..80 (every tail, every head), each path, bf16 on. */
static void test_lengths(void)
{
	for (long n = 0; n <= 80; n++) {
		const struct adamw_case c = { "length", IN_MIXED, n, (int)(n % 5), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
					      0.7f, 3, 2 };

		test_case(&c, 1000 + (uint64_t)n);
	}
}

/* The comparison can fail: one bit flipped in one element is seen. */
static void test_compare_fails(void)
{
	float a[37], b[37];
	Rng r = rng_new(5);

	fill_normal(&r, a, 37, 1.0f);
	memcpy(b, a, sizeof(a));
	CHECK(first_diff(a, b, 37, sizeof(float)) == -1, "equal arrays compare equal");
	b[29] = bits_to_f(f_bits(b[29]) ^ 1u);
	CHECK(first_diff(a, b, 37, sizeof(float)) == 29, "a 1-ulp change is found");
}

static void test_partition(void)
{
	int parts;
	long chunk = ferry_cpu_adamw_chunk(100003, 3, &parts);

	/* the "normal" case really runs on three threads */
	CHECK(parts == 3 && chunk == 33792, "100003 over 3 threads: %d chunks of %ld", parts, chunk);
	chunk = ferry_cpu_adamw_chunk(1L << 27, 2, &parts);
	CHECK(parts == 2 && chunk == 1L << 26, "2^27 over 2: %d of %ld", parts, chunk);
	chunk = ferry_cpu_adamw_chunk(50000, 8, &parts);
	CHECK(parts == 2 && chunk == 32768, "small arrays take fewer threads: %d of %ld", parts, chunk);
	chunk = ferry_cpu_adamw_chunk(0, 4, &parts);
	CHECK(parts == 0, "n 0: %d chunks", parts);
	chunk = ferry_cpu_adamw_chunk(1000001, 7, &parts);
	CHECK(chunk % 1024 == 0 && parts * chunk >= 1000001 && (parts - 1) * chunk < 1000001 && parts <= 7,
	      "page multiples covering n: %d of %ld", parts, chunk);
}

/* init writes m = v = 0, param from its source, the bf16 copy; no grad. */
static void test_init(void)
{
	const long n = 200001;
	struct state s, src;
	struct ferry_cpu_adamw_args a;
	long bad = 0;

	state_alloc(&s, n, 0);
	state_alloc(&src, n, 0);
	fill_state(&src, IN_MIXED, 77);
	fill_state(&s, IN_NORMAL, 78);
	a = (struct ferry_cpu_adamw_args){ .param = s.p, .m = s.m, .v = s.v, .param_bf16 = s.bf, .n = n,
					    .threads = 3 };
	CHECK(ferry_cpu_adamw_init(&a, src.p) == FERRY_OK, "init: %s", ferry_last_error());
	CHECK(first_diff(s.p, src.p, n, sizeof(float)) < 0, "param copied");
	for (long i = 0; i < n; i++)
		bad += f_bits(s.m[i]) != 0 || f_bits(s.v[i]) != 0 || s.bf[i] != ferry_st_f32_to_bf16(src.p[i]);
	CHECK(bad == 0, "m, v zero and bf16 of param: %ld wrong", bad);

	fill_state(&s, IN_BITS, 79);
	memcpy(src.p, s.p, sizeof(float) * (size_t)n);
	CHECK(ferry_cpu_adamw_init(&a, NULL) == FERRY_OK, "init in place: %s", ferry_last_error());
	CHECK(ferry_cpu_adamw_init(&a, s.p) == FERRY_OK, "init from itself: %s", ferry_last_error());
	CHECK(first_diff(s.p, src.p, n, sizeof(float)) < 0, "param kept");
	bad = 0;
	for (long i = 0; i < n; i++)
		bad += s.bf[i] != ferry_st_f32_to_bf16(src.p[i]);
	CHECK(bad == 0, "bf16 of the kept param: %ld wrong", bad);
	state_free(&s);
	state_free(&src);
}

/* Refused arguments leave everything as it was. */
static void test_errors(void)
{
	const struct adamw_case c = cases[0];
	struct state s, before;
	struct ferry_cpu_adamw_args a;

	state_alloc(&s, 100, 0);
	state_alloc(&before, 100, 0);
	fill_state(&s, IN_NORMAL, 9);
	state_copy(&before, &s);
	CHECK(ferry_cpu_adamw_step(NULL) == FERRY_ERR_INVALID, "NULL args");
	a = args_for(&c, &s, 0, 1, 1, FERRY_CPU_ISA_AUTO);
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "step 0");
	a = args_for(&c, &s, 1, 1, 1, FERRY_CPU_ISA_AUTO);
	a.n = -1;
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "n -1");
	a = args_for(&c, &s, 1, 1, 1, FERRY_CPU_ISA_AUTO);
	a.grad = NULL;
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "no grad");
	a = args_for(&c, &s, 1, 1, -1, FERRY_CPU_ISA_AUTO);
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "threads -1");
	a = args_for(&c, &s, 1, 1, 1, (enum ferry_cpu_isa)9);
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "isa 9");
	a = args_for(&c, &s, 1, 1, 1, FERRY_CPU_ISA_AUTO);
	a.v = NULL;
	CHECK(ferry_cpu_adamw_init(&a, NULL) == FERRY_ERR_INVALID, "init without v");
	for (int isa = FERRY_CPU_ISA_AVX2; isa <= FERRY_CPU_ISA_AVX512; isa++) {
		if (ferry_cpu_isa_available((enum ferry_cpu_isa)isa))
			continue;
		a = args_for(&c, &s, 1, 1, 1, (enum ferry_cpu_isa)isa);
		CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_UNSUPPORTED, "%s refused on this CPU",
		      ferry_cpu_isa_name((enum ferry_cpu_isa)isa));
	}
	CHECK(first_diff(s.p, before.p, 100, 4) < 0 && first_diff(s.m, before.m, 100, 4) < 0 &&
	      first_diff(s.v, before.v, 100, 4) < 0, "nothing written on error");
	a = args_for(&c, &s, 1, 1, 1, FERRY_CPU_ISA_AUTO);
	a.n = 0;
	a.param = a.m = a.v = NULL, a.grad = NULL, a.param_bf16 = NULL;
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_OK, "n 0 with no arrays");
	state_free(&s);
	state_free(&before);
}

/* FERRY_CPU_ADAMW_ISA steers AUTO; a name this CPU cannot run is refused. */
static void test_env(void)
{
	const struct adamw_case c = { "env", IN_NORMAL, 1000, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 1 };
	const char *best = ferry_cpu_isa_name(ferry_cpu_isa_best());
	struct state s, ref;
	struct ferry_cpu_adamw_args a;

	state_alloc(&s, c.n, 0);
	state_alloc(&ref, c.n, 0);
	fill_state(&ref, IN_NORMAL, 11);
	state_copy(&s, &ref);
	ref_adamw(ref.p, ref.m, ref.v, ref.g, c.n, c.lr, c.beta1, c.beta2, c.eps, c.wd, c.gs, 1);

	CHECK(ferry_cpu_adamw_isa() && !strcmp(ferry_cpu_adamw_isa(), best), "auto is the best path, %s", best);
	setenv("FERRY_CPU_ADAMW_ISA", "scalar", 1);
	CHECK(ferry_cpu_adamw_isa() && !strcmp(ferry_cpu_adamw_isa(), "scalar"), "forced to scalar");
	setenv("FERRY_CPU_ADAMW_ISA", "avx9", 1);
	CHECK(ferry_cpu_adamw_isa() == NULL, "an unknown path is no path");
	a = args_for(&c, &s, 1, 0, 2, FERRY_CPU_ISA_AUTO);
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_UNSUPPORTED && strstr(ferry_last_error(), "avx9"),
	      "refused, naming it: %s", ferry_last_error());
	a.isa = FERRY_CPU_ISA_SCALAR; /* an explicit path does not read the variable */
	CHECK(ferry_cpu_adamw_step(&a) == FERRY_OK, "explicit path: %s", ferry_last_error());
	check_same(&s, &ref, 0, "explicit path under a bad FERRY_CPU_ADAMW_ISA");
	fill_state(&s, IN_NORMAL, 11);
	ferry_cpu_adamw_update(s.p, s.m, s.v, s.g, c.n, c.lr, c.beta1, c.beta2, c.eps, c.wd, c.gs, 1);
	check_same(&s, &ref, 0, "ferry_cpu_adamw_update under a bad FERRY_CPU_ADAMW_ISA");
	for (int isa = FERRY_CPU_ISA_AVX2; isa <= FERRY_CPU_ISA_AVX512; isa++) {
		if (ferry_cpu_isa_available((enum ferry_cpu_isa)isa))
			continue;
		setenv("FERRY_CPU_ADAMW_ISA", ferry_cpu_isa_name((enum ferry_cpu_isa)isa), 1);
		CHECK(ferry_cpu_adamw_isa() == NULL, "%s, which this CPU lacks, is no path",
		      ferry_cpu_isa_name((enum ferry_cpu_isa)isa));
	}
	unsetenv("FERRY_CPU_ADAMW_ISA");
	state_free(&s);
	state_free(&ref);
}

/* The speculative order's undo copy: a step that saves gives the same
 * bits as one that does not, the copies hold the values before it, and a
 * restore brings back those values (and their bf16 bits) exactly; on
 * every path, across save blocks and thread chunks. */
static void test_undo_copy(void)
{
	const struct adamw_case *c = &cases[10]; /* mixed: specials too, 300001 elements */
	struct state init, ref, work;
	float *save[3];

	state_alloc(&init, c->n, c->off);
	state_alloc(&ref, c->n, c->off);
	state_alloc(&work, c->n, c->off);
	for (int k = 0; k < 3; k++)
		save[k] = TALLOC(float, c->n);
	fill_state(&init, c->in, 99);
	for (int isa = FERRY_CPU_ISA_SCALAR; isa <= FERRY_CPU_ISA_AVX512; isa++) {
		if (!ferry_cpu_isa_available((enum ferry_cpu_isa)isa))
			continue;
		for (int threads = 1; threads <= 3; threads += 2) {
			struct ferry_cpu_adamw_args a;

			state_copy(&ref, &init);
			a = args_for(c, &ref, c->t0, 1, threads, (enum ferry_cpu_isa)isa);
			CHECK(ferry_cpu_adamw_step(&a) == FERRY_OK, "plain step");
			state_copy(&work, &init);
			a = args_for(c, &work, c->t0, 1, threads, (enum ferry_cpu_isa)isa);
			a.save_param = save[0], a.save_m = save[1], a.save_v = save[2];
			CHECK(ferry_cpu_adamw_step(&a) == FERRY_OK, "saving step: %s", ferry_last_error());
			check_same(&work, &ref, 1, "a step with an undo copy");
			CHECK(!memcmp(save[0], init.p, sizeof(float) * (size_t)c->n) &&
				      !memcmp(save[1], init.m, sizeof(float) * (size_t)c->n) &&
				      !memcmp(save[2], init.v, sizeof(float) * (size_t)c->n),
			      "%s, %d threads: the undo copy holds the values before the step",
			      ferry_cpu_isa_name((enum ferry_cpu_isa)isa), threads);
			CHECK(ferry_cpu_adamw_restore(&a) == FERRY_OK, "restore");
			check_same(&work, &init, 1, "restored");
		}
	}
	{
		struct ferry_cpu_adamw_args a = args_for(c, &work, 1, 0, 1, FERRY_CPU_ISA_AUTO);

		a.save_param = save[0];
		CHECK(ferry_cpu_adamw_step(&a) == FERRY_ERR_INVALID, "an undo copy needs all three arrays");
		CHECK(ferry_cpu_adamw_restore(&a) == FERRY_ERR_INVALID, "a restore without the copies is refused");
	}
	for (int k = 0; k < 3; k++)
		free(save[k]);
	state_free(&init);
	state_free(&ref);
	state_free(&work);
}

int main(void)
{
	unsetenv("FERRY_CPU_ADAMW_ISA");
	printf("paths:");
	for (int isa = FERRY_CPU_ISA_SCALAR; isa <= FERRY_CPU_ISA_AVX512; isa++)
		printf(" %s%s", ferry_cpu_isa_name((enum ferry_cpu_isa)isa),
		       ferry_cpu_isa_available((enum ferry_cpu_isa)isa) ? "" : " (not on this CPU)");
	printf("; auto: %s\n", ferry_cpu_adamw_isa());

	test_compare_fails();
	test_partition();
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		test_case(&cases[k], 42 + k);
	test_lengths();
	test_init();
	test_errors();
	test_env();
	test_undo_copy();
	return test_exit_code();
}
