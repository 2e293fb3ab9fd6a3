/* Training knobs (issue 25 item 13):
 *  - the learning-rate schedules (cosine, linear, constant, WSD; the floor
 *    from final_lr_frac or min_lr) at chosen steps against their formulas;
 *  - gradient accumulation: N micro-batches of B rows against one batch of
 *    N*B rows, the same rows, on GPT-2 and Llama: the gradient (the
 *    accumulated sum times 1/N) and the parameters after each step agree
 *    within 1e-6 of their largest magnitude.  Not bit for bit: a weight's
 *    gradient is a sum over the batch's rows that the matrix products
 *    block differently for B rows than for N*B (fp32 addition does not
 *    associate), so the bits differ in the last places;
 *  - a resume carries the schedule, its floor, WSD's decay share and the
 *    micro-batches a step: a resumed run equals an unbroken one bit for
 *    bit, and given values that differ are reported as overrides. */
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/train.h"
#include "scratch_util.h"
#include "test_util.h"
#include "ckpt/commit.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- schedules ---------------------------------------------------------------- */

struct lr_case {
	int kind, steps, warmup;
	float lr, final_frac, min_lr, decay_frac;
	int s;          /* 0-based step */
	double want;    /* the formula's value */
};

static void test_schedules(void)
{
	const double pi = M_PI;
	const struct lr_case cases[] = {
		/* warmup: lr (s+1)/warmup, whatever the curve */
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 0, 1e-4 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 4, 5e-4 },
		{ FERRY_LR_LINEAR, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 9, 1e-3 },
		/* cosine: F + (lr - F)(1 + cos(pi p))/2, p = (s - 10)/89 */
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 10, 1e-3 },
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 40, 1e-4 + 9e-4 * 0.5 * (1 + cos(pi * 30 / 89)) },
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 99, 1e-4 },
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 2e-5f, 0.2f, 99, 2e-5 }, /* min_lr is the floor */
		{ FERRY_LR_COSINE, 100, 10, 1e-3f, 0.1f, 2e-5f, 0.2f, 60,
		  2e-5 + 9.8e-4 * 0.5 * (1 + cos(pi * 50 / 89)) },
		/* linear: lr - (lr - F) p, p = (s - 1)/100 */
		{ FERRY_LR_LINEAR, 102, 1, 1e-3f, 0.0f, 0, 0.2f, 51, 5e-4 },
		{ FERRY_LR_LINEAR, 102, 1, 1e-3f, 0.0f, 0, 0.2f, 101, 0 },
		{ FERRY_LR_LINEAR, 102, 1, 1e-3f, 0.5f, 0, 0.2f, 26, 1e-3 - 5e-4 * 0.25 },
		/* constant */
		{ FERRY_LR_CONSTANT, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 99, 1e-3 },
		{ FERRY_LR_CONSTANT, 100, 0, 1e-3f, 0.1f, 0, 0.2f, 0, 1e-3 },
		/* WSD, 100 steps, decay 0.2: lr to step 79, then (s - 79)/20 of the way down */
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 79, 1e-3 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 80, 1e-3 - 9e-4 * 1 / 20 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 89, 1e-3 - 9e-4 * 10 / 20 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 0, 0.2f, 99, 1e-4 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 1e-5f, 0.5f, 49, 1e-3 },
		{ FERRY_LR_WSD, 100, 10, 1e-3f, 0.1f, 1e-5f, 0.5f, 74, 1e-3 - 9.9e-4 * 25 / 50 },
		/* a decay longer than what follows the warmup starts after it */
		{ FERRY_LR_WSD, 10, 8, 1e-3f, 0.0f, 0, 1.0f, 8, 5e-4 },
		{ FERRY_LR_WSD, 10, 8, 1e-3f, 0.0f, 0, 1.0f, 9, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct lr_case *c = &cases[i];
		struct ferry_train_opts o;
		double got;

		ferry_train_opts_default(&o);
		o.lr_schedule = c->kind;
		o.steps = c->steps;
		o.warmup = c->warmup;
		o.lr = c->lr;
		o.final_lr_frac = c->final_frac;
		o.min_lr = c->min_lr;
		o.decay_frac = c->decay_frac;
		got = ferry_train_lr(&o, c->s);
		CHECK(fabs(got - c->want) <= 1e-6 * c->lr, "case %zu (kind %d, step %d): lr %.9g, formula %.9g", i,
		      c->kind, c->s, got, c->want);
	}
	/* the default curve is ferry_lr_schedule's, bit for bit */
	for (int s = 0; s < 300; s++) {
		struct ferry_train_opts o;

		ferry_train_opts_default(&o);
		o.steps = 300;
		o.warmup = 20;
		o.lr = 3e-3f;
		CHECK(ferry_train_lr(&o, s) == ferry_lr_schedule(s, 300, 20, 3e-3f, 0.1f), "cosine step %d", s);
	}
}

/* ---- gradient accumulation ------------------------------------------------------ */

static struct ferry_model_config gpt2_cfg(void)
{
	return (struct ferry_model_config){ .max_seq = 16, .vocab = 29, .padded_vocab = 32, .layers = 2,
					    .heads = 2, .channels = 16 };
}

static struct ferry_model_config llama_cfg(void)
{
	return (struct ferry_model_config){ .arch = "llama", .max_seq = 16, .vocab = 29, .layers = 2,
					    .heads = 4, .kv_heads = 2, .channels = 32, .ffn = 48,
					    .rope_theta = 10000.0f, .norm_eps = 1e-5f };
}

static struct ferry_train_opts accum_opts(struct ferry_model_config cfg, int B, int N)
{
	struct ferry_train_opts o;

	ferry_train_opts_default(&o);
	o.model = cfg;
	o.data = path_in("text.bin");
	o.shuffle = false;
	o.B = B;
	o.grad_accum = N;
	o.T = 12;
	o.steps = 3;
	o.warmup = 1;
	o.lr = 1e-3f;
	o.threads = 2;
	return o;
}

/* max |a - b| / max |b|. */
static double norm_err(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;

	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? d / m : d;
}

/* One trainer with batch N*B, one with N micro-batches of B: step by step,
 * the same loss, gradient and parameters within 1e-6. */
static void test_accum(const char *name, struct ferry_model_config cfg, int B, int N)
{
	struct ferry_train_opts big = accum_opts(cfg, N * B, 1), acc = accum_opts(cfg, B, N);
	ferry_trainer_t a = NULL, b = NULL;
	size_t n;
	float *pa, *pb, *ga, *gb;
	double worst_g = 0, worst_p = 0;
	size_t same = 0;

	CHECK(ferry_trainer_create(&big, &a) == FERRY_OK, "%s big: %s", name, ferry_last_error());
	CHECK(ferry_trainer_create(&acc, &b) == FERRY_OK, "%s accumulated: %s", name, ferry_last_error());
	if (!a || !b)
		goto out;
	n = ferry_model_num_params(ferry_trainer_model(a));
	pa = malloc(n * 4), pb = malloc(n * 4), ga = malloc(n * 4), gb = malloc(n * 4);
	for (int s = 0; s < big.steps; s++) {
		struct ferry_step_metrics ma, mb;

		CHECK(ferry_trainer_step(a, &ma) == FERRY_OK && ferry_trainer_step(b, &mb) == FERRY_OK, "%s step %d: %s",
		      name, s + 1, ferry_last_error());
		CHECK(fabsf(ma.loss - mb.loss) <= 1e-6f * ma.loss && fabsf(ma.grad_norm - mb.grad_norm) <= 1e-6f * ma.grad_norm &&
		      ma.lr == mb.lr, "%s step %d: loss %.9g / %.9g, norm %.9g / %.9g", name, s + 1, (double)ma.loss,
		      (double)mb.loss, (double)ma.grad_norm, (double)mb.grad_norm);
		CHECK(ferry_model_get_grads(ferry_trainer_model(a), ga) == FERRY_OK &&
		      ferry_model_get_grads(ferry_trainer_model(b), gb) == FERRY_OK &&
		      ferry_model_get_params(ferry_trainer_model(a), pa) == FERRY_OK &&
		      ferry_model_get_params(ferry_trainer_model(b), pb) == FERRY_OK, "%s: read back", name);
		for (size_t i = 0; i < n; i++)
			gb[i] /= (float)N; /* the buffer holds the sum of N micro-batches' gradients */
		worst_g = fmax(worst_g, norm_err(gb, ga, n));
		worst_p = fmax(worst_p, norm_err(pb, pa, n));
		if (s == 0)
			for (size_t i = 0; i < n; i++)
				same += ga[i] == gb[i];
	}
	printf("%s, %d x %d rows: gradients within %.2e, parameters within %.2e; step 1: %zu of %zu gradients "
	       "bit-identical\n", name, N, B, worst_g, worst_p, same, n);
	CHECK(worst_g <= 1e-6, "%s: gradients differ by %g", name, worst_g);
	CHECK(worst_p <= 1e-6, "%s: parameters differ by %g", name, worst_p);
	free(pa), free(pb), free(ga), free(gb);
out:
	ferry_trainer_free(a);
	ferry_trainer_free(b);
}

/* ---- resume ------------------------------------------------------------------------ */

static void run_steps(ferry_trainer_t tr, int upto)
{
	struct ferry_step_metrics m;

	while (ferry_trainer_step_count(tr) < upto)
		if (ferry_trainer_step(tr, &m) != FERRY_OK) {
			CHECK(0, "step: %s", ferry_last_error());
			return;
		}
}

static void test_resume_keeps_knobs(void)
{
	struct ferry_train_opts o = accum_opts(gpt2_cfg(), 2, 3), r;
	ferry_trainer_t tr = NULL;
	const struct ferry_train_opts *e;
	size_t n;
	float *p1, *p2;
	char over[512];

	o.steps = 8;
	o.lr_schedule = FERRY_LR_WSD;
	o.decay_frac = 0.5f;
	o.min_lr = 2e-4f;
	o.adamw.beta1 = 0.8f;
	o.adamw.beta2 = 0.99f;
	o.adamw.eps = 1e-6f;
	/* unbroken */
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	if (!tr)
		return;
	run_steps(tr, 8);
	n = ferry_model_num_params(ferry_trainer_model(tr));
	p1 = malloc(n * 4), p2 = malloc(n * 4);
	CHECK(ferry_model_get_params(ferry_trainer_model(tr), p1) == FERRY_OK, "params");
	ferry_trainer_free(tr);
	/* broken at step 5 */
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	run_steps(tr, 5);
	CHECK(ferry_trainer_save(tr, path_in("k.bin")) == FERRY_OK, "save: %s", ferry_last_error());
	ferry_trainer_free(tr);
	/* resumed with nothing given but the resume: every knob is the saved one */
	ferry_train_opts_default(&r);
	r.resume = path_in("k.bin");
	r.threads = 2;
	CHECK(ferry_trainer_create(&r, &tr) == FERRY_OK, "resume: %s", ferry_last_error());
	if (!tr)
		goto out;
	e = ferry_trainer_opts(tr);
	CHECK(e->lr_schedule == FERRY_LR_WSD && e->decay_frac == 0.5f && e->min_lr == 2e-4f && e->grad_accum == 3 &&
	      e->adamw.beta1 == 0.8f && e->adamw.beta2 == 0.99f && e->adamw.eps == 1e-6f && e->B == 2,
	      "the saved knobs: schedule %d, decay %g, min %g, accum %d, betas %g %g eps %g, B %d", e->lr_schedule,
	      (double)e->decay_frac, (double)e->min_lr, e->grad_accum, (double)e->adamw.beta1,
	      (double)e->adamw.beta2, (double)e->adamw.eps, e->B);
	run_steps(tr, 8);
	CHECK(ferry_model_get_params(ferry_trainer_model(tr), p2) == FERRY_OK, "params");
	CHECK(memcmp(p1, p2, n * 4) == 0, "a resumed run equals the unbroken one bit for bit");
	CHECK(ferry_trainer_resume_overrides(tr, over, sizeof(over)) == 0, "no overrides: %s", over);
	ferry_trainer_free(tr);
	/* given values that differ are overrides */
	r.lr_schedule = FERRY_LR_LINEAR;
	r.grad_accum = 2;
	r.decay_frac = 0.25f;
	r.min_lr = 1e-4f;
	r.given = FERRY_GIVEN_LR_SCHEDULE | FERRY_GIVEN_GRAD_ACCUM | FERRY_GIVEN_DECAY_FRAC | FERRY_GIVEN_MIN_LR;
	CHECK(ferry_trainer_create(&r, &tr) == FERRY_OK, "resume with overrides: %s", ferry_last_error());
	if (tr) {
		CHECK(ferry_trainer_resume_overrides(tr, over, sizeof(over)) == 4 &&
		      strstr(over, "lr schedule linear (saved wsd)") && strstr(over, "grad accum 2 (saved 3)") &&
		      strstr(over, "decay fraction 0.25 (saved 0.5)") && strstr(over, "min lr 0.0001 (saved 0.0002)"),
		      "overrides: %s", over);
		ferry_trainer_free(tr);
	}
out:
	free(p1), free(p2);
}

/* Cuts a version-6 state's placement (after the 1024-byte header and the
 * glob, each region padded to 4 bytes) out of raw's *size bytes. */
static void cut_placement(int32_t *raw, long *size)
{
	const size_t at = 1024 + (((size_t)raw[27] + 3) & ~(size_t)3), n = ((size_t)raw[44] + 3) & ~(size_t)3;

	memmove((char *)raw + at, (char *)raw + at + n, (size_t)*size - at - n);
	*size -= (long)n;
}

/* A version-4 state (written before these knobs) resumes as cosine, the
 * floor from the final fraction, one micro-batch a step. */
static void test_version4_state(void)
{
	struct ferry_train_opts o = accum_opts(gpt2_cfg(), 2, 1), r;
	ferry_trainer_t tr = NULL;
	int32_t *raw;
	long size = 0;
	uint64_t h;
	FILE *f;
	const struct ferry_train_opts *e;

	o.steps = 3;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	if (!tr)
		return;
	run_steps(tr, 2);
	CHECK(ferry_trainer_save(tr, path_in("v4.bin")) == FERRY_OK, "save: %s", ferry_last_error());
	ferry_trainer_free(tr);
	/* version 4: no placement (version 6's region after the glob cut
	 * out), [40..44] zero, the checksum computed again (header, glob, m,
	 * v, with [34..35] as zero) */
	f = fopen(path_in("v4.bin.state"), "rb");
	CHECK(f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 1024, "the state file");
	if (!f)
		return;
	raw = malloc((size_t)size);
	rewind(f);
	CHECK(fread(raw, 1, (size_t)size, f) == (size_t)size, "read");
	fclose(f);
	CHECK(raw[1] == 6 && raw[40] == 0 && raw[43] == 1, "a version-6 state: %d, schedule %d, accum %d", raw[1],
	      raw[40], raw[43]);
	cut_placement(raw, &size);
	raw[1] = 4;
	memset(raw + 40, 0, 5 * 4);
	memset(raw + 34, 0, 8);
	h = ferry_ckpt_fnv_words(FERRY_FNV_INIT, raw, (size_t)size);
	memcpy(raw + 34, &h, 8);
	f = fopen(path_in("v4.bin.state"), "wb");
	CHECK(f && fwrite(raw, 1, (size_t)size, f) == (size_t)size, "write");
	if (f)
		fclose(f);
	free(raw);
	ferry_train_opts_default(&r);
	r.resume = path_in("v4.bin");
	r.threads = 2;
	CHECK(ferry_trainer_create(&r, &tr) == FERRY_OK, "version 4 resumes: %s", ferry_last_error());
	if (!tr)
		return;
	e = ferry_trainer_opts(tr);
	CHECK(e->lr_schedule == FERRY_LR_COSINE && e->min_lr == 0 && e->grad_accum == 1 && e->decay_frac == 0.2f,
	      "version 4: cosine, no floor, one micro-batch");
	ferry_trainer_free(tr);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

int main(void)
{
	uint16_t tok[3000];
	int32_t header[256] = { FERRY_SHARD_MAGIC, FERRY_SHARD_VERSION, 3000 };
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/ferry_knobs_XXXXXX", getenv("FERRY_TEST_TMP") ? getenv("FERRY_TEST_TMP") : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	srand(7);
	for (int i = 0; i < 3000; i++)
		tok[i] = (uint16_t)(rand() % 29);
	f = fopen(path_in("text.bin"), "wb");
	if (!f || fwrite(header, sizeof(header), 1, f) != 1 || fwrite(tok, 2, 3000, f) != 3000)
		return 1;
	fclose(f);

	test_schedules();
	test_accum("gpt2", gpt2_cfg(), 2, 2);
	test_accum("gpt2", gpt2_cfg(), 1, 3);
	test_accum("llama", llama_cfg(), 2, 2);
	test_accum("llama", llama_cfg(), 1, 4);
	test_resume_keeps_knobs();
	test_version4_state();
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return test_exit_code();
}
