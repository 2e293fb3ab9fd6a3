/* Training end to end on the CPU backend: a tiny model learns a repeated
 * sequence; save + resume equals an unbroken run, bit for bit, with the
 * saved run's options (batch, sequence, schedule, data, seed) taken from
 * its state unless given, and given ones that differ reported as
 * overrides; version-1 states resume; a step past INT_MAX is refused; a
 * diverged run stops at its first non-finite loss and saves nothing; saves
 * over the training or validation shards are refused; bad configurations
 * and a too-small device arena fail cleanly; every host allocation failure
 * while setting up fails cleanly. */
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/train.h"
#include "scratch_util.h"
#include "test_util.h"

#include <ftw.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

static bool exists_path(const char *p)
{
	struct stat sb;

	return stat(p, &sb) == 0;
}

static struct ferry_train_opts tiny_opts(void)
{
	struct ferry_train_opts o;

	ferry_train_opts_default(&o);
	o.model = (struct ferry_model_config){ .max_seq = 16, .vocab = 13, .padded_vocab = 16,
					      .layers = 2, .heads = 2, .channels = 16 };
	o.data = path_in("repeat.bin");
	o.B = 4;
	o.T = 12;
	o.threads = 2;
	return o;
}

/* A period-5 pattern is learnable from context: the loss must go to ~0. */
static void test_overfit(void)
{
	struct ferry_train_opts o = tiny_opts();
	struct ferry_step_metrics m = { 0 };
	ferry_trainer_t tr;
	float first = 0;

	o.steps = 300;
	o.lr = 1e-2f;
	o.warmup = 10;
	o.adamw.weight_decay = 0.0f;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	for (int s = 0; s < o.steps; s++) {
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step: %s", ferry_last_error());
		if (s == 0)
			first = m.loss;
	}
	printf("overfit: loss %.4f -> %.5f after %d steps\n", first, m.loss, o.steps);
	CHECK(first > 2.0f, "starts near log(13): %f", first);
	CHECK(m.loss < 0.05f, "learns the repeated sequence: final loss %f", m.loss);
	CHECK(m.step == o.steps && m.device_peak_bytes > 0, "metrics filled");
	ferry_trainer_free(tr);
}

static float *params_after(ferry_trainer_t tr, size_t *n)
{
	ferry_model_t m = ferry_trainer_model(tr);
	float *p;

	*n = ferry_model_num_params(m);
	p = TALLOC(float, *n);
	CHECK(ferry_model_get_params(m, p) == FERRY_OK, "get params");
	return p;
}

/* 12 steps straight == 5 steps, save, resume in a new trainer, 7 steps. */
static void test_resume(void)
{
	struct ferry_train_opts o = tiny_opts();
	struct ferry_step_metrics m;
	ferry_trainer_t tr;
	float *straight, *resumed;
	size_t n1, n2;

	o.data = path_in("long_*.bin"); /* two shards: the position matters */
	o.steps = 12;
	o.warmup = 3;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	for (int s = 0; s < 12; s++)
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step");
	straight = params_after(tr, &n1);
	ferry_trainer_free(tr);

	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create");
	for (int s = 0; s < 5; s++)
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step");
	CHECK(ferry_trainer_save(tr, path_in("mid.bin")) == FERRY_OK, "save: %s", ferry_last_error());
	ferry_trainer_free(tr);

	o.resume = path_in("mid.bin");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "resume: %s", ferry_last_error());
	CHECK(ferry_trainer_step_count(tr) == 5, "resumed at step %d", ferry_trainer_step_count(tr));
	while (ferry_trainer_step_count(tr) < 12)
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step");
	resumed = params_after(tr, &n2);
	CHECK(n1 == n2 && memcmp(straight, resumed, n1 * sizeof(float)) == 0,
	      "resumed parameters equal the unbroken run's bit for bit (max diff %g)",
	      nerr_ff(resumed, straight, (long)n1));
	ferry_trainer_free(tr);

	/* a model and a state from different saves (a save interrupted between
	 * the two files) are refused, not mixed */
	{
		struct ferry_model_config cfg;
		struct ferry_model_config full = o.model;
		size_t n = ferry_model_config_complete(&full) == FERRY_OK ? ferry_model_config_num_params(&full) : 0;
		float *p = TALLOC(float, n);

		float keep;

		CHECK(ferry_checkpoint_read(path_in("mid.bin"), &cfg, p, n) == FERRY_OK, "read");
		keep = p[0];
		p[0] += 1.0f;
		CHECK(ferry_checkpoint_write(path_in("mid.bin"), &cfg, p) == FERRY_OK, "rewrite the model alone");
		CHECK(ferry_trainer_create(&o, &tr) == FERRY_ERR_FORMAT && tr == NULL, "mixed saves refused");
		CHECK(strstr(ferry_last_error(), "different saves") != NULL, "says why: %s", ferry_last_error());
		p[0] = keep;
		CHECK(ferry_checkpoint_write(path_in("mid.bin"), &cfg, p) == FERRY_OK, "restore the model");
		free(p);
	}
	/* other data given explicitly is an override, read from its start */
	o.data = path_in("long_0.bin");
	o.given = FERRY_GIVEN_DATA;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "data override: %s", ferry_last_error());
	if (tr) {
		char why[512];

		CHECK(ferry_trainer_resume_overrides(tr, why, sizeof(why)) == 1 && strstr(why, "long_0.bin' (saved '") &&
		      strstr(why, "long_*.bin'; read from its start)"), "says so: %s", why);
		CHECK(!strcmp(ferry_trainer_opts(tr)->data, o.data), "trains on it");
		ferry_trainer_free(tr);
	}
	/* the saved run's data, not given, that changed under its position is refused */
	o.given = 0;
	o.data = NULL;
	{
		uint16_t tok[200] = { 0 };

		write_shard(path_in("long_2.bin"), tok, 200);
		CHECK(ferry_trainer_create(&o, &tr) == FERRY_ERR_INVALID && tr == NULL, "changed data refused");
		CHECK(strstr(ferry_last_error(), "the data changed") != NULL, "says why: %s", ferry_last_error());
		unlink(path_in("long_2.bin"));
	}
	o.data = path_in("long_*.bin");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "the matching pair resumes: %s", ferry_last_error());
	ferry_trainer_free(tr);

	/* a resume whose .state is missing is refused, naming the file */
	unlink(path_in("mid.bin.state"));
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_ERR_IO && tr == NULL, "missing state refused");
	CHECK(strstr(ferry_last_error(), "mid.bin.state") != NULL, "names it: %s", ferry_last_error());
	free(straight);
	free(resumed);
}

/* A run saved at step 5 of 12 (B 4, T 12, warmup 3, two shards, batches
 * shuffled or in order) and the unbroken run's parameters. */
static float *saved_run(const char *name, bool shuffle)
{
	struct ferry_train_opts o = tiny_opts();
	struct ferry_step_metrics m;
	ferry_trainer_t tr;
	float *straight;
	size_t n;

	o.shuffle = shuffle;
	o.data = path_in("long_*.bin");
	o.steps = 12;
	o.warmup = 3;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	for (int s = 0; s < 12; s++) {
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step");
		if (s == 4)
			CHECK(ferry_trainer_save(tr, path_in(name)) == FERRY_OK, "save: %s", ferry_last_error());
	}
	straight = params_after(tr, &n);
	ferry_trainer_free(tr);
	return straight;
}

/* Resumes name with o and runs to step 12; the parameters must be the
 * unbroken run's. */
static void resume_equals(struct ferry_train_opts *o, const char *name, const float *straight, const char *what)
{
	struct ferry_step_metrics m;
	ferry_trainer_t tr = NULL;
	float *resumed;
	size_t n;

	o->resume = path_in(name);
	CHECK(ferry_trainer_create(o, &tr) == FERRY_OK, "%s: resume: %s", what, ferry_last_error());
	if (!tr)
		return;
	CHECK(ferry_trainer_step_count(tr) == 5, "%s: resumed at step %d", what, ferry_trainer_step_count(tr));
	while (ferry_trainer_step_count(tr) < 12)
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step: %s", ferry_last_error());
	resumed = params_after(tr, &n);
	CHECK(memcmp(straight, resumed, n * sizeof(float)) == 0, "%s: resumed parameters equal the unbroken run's", what);
	free(resumed);
	ferry_trainer_free(tr);
}

/* A resume continues the saved run: whatever the caller passes without
 * marking it given is the saved run's. */
static void test_resume_takes_saved(void)
{
	float *straight = saved_run("opts.bin", true);
	struct ferry_train_opts o = tiny_opts();
	ferry_trainer_t tr = NULL;
	char why[512];

	/* every option other than the saved run's, none given */
	o.B = 2;
	o.T = 6;
	o.steps = 99;
	o.warmup = 0;
	o.lr = 1.0f;
	o.final_lr_frac = 0.5f;
	o.seed = 7;
	o.adamw.weight_decay = 0.5f;
	o.adamw.grad_clip = 0.0f;
	o.adamw.beta1 = 0.5f;
	o.shuffle = false;
	o.data = NULL;
	o.resume = path_in("opts.bin");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "resume: %s", ferry_last_error());
	if (tr) {
		const struct ferry_train_opts *e = ferry_trainer_opts(tr);

		CHECK(e->B == 4 && e->T == 12 && e->steps == 12 && e->warmup == 3 && e->lr == 6e-4f &&
		      e->final_lr_frac == 0.1f && e->seed == 1337 && e->adamw.weight_decay == 0.1f &&
		      e->adamw.grad_clip == 1.0f && e->adamw.beta1 == 0.9f && e->shuffle &&
		      !strcmp(e->data, path_in("long_*.bin")),
		      "the saved run's options: B %d T %d steps %d warmup %d lr %g data %s", e->B, e->T, e->steps,
		      e->warmup, (double)e->lr, e->data);
		CHECK(ferry_trainer_resume_overrides(tr, why, sizeof(why)) == 0 && !why[0], "no overrides: %s", why);
		ferry_trainer_free(tr);
	}
	resume_equals(&o, "opts.bin", straight, "options from the state");

	/* given ones that differ are overrides, stated */
	o = tiny_opts();
	o.B = 2;
	o.steps = 20;
	o.lr = 1e-3f;
	o.seed = 1337; /* given, the same: not an override */
	o.given = FERRY_GIVEN_BATCH | FERRY_GIVEN_STEPS | FERRY_GIVEN_LR | FERRY_GIVEN_SEED;
	o.data = NULL;
	o.resume = path_in("opts.bin");
	tr = NULL;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "resume with overrides: %s", ferry_last_error());
	if (tr) {
		int k = ferry_trainer_resume_overrides(tr, why, sizeof(why));

		CHECK(k == 3 && !strcmp(why, "batch 2 (saved 4), steps 20 (saved 12), lr 0.001 (saved 0.0006)"),
		      "overrides (%d): %s", k, why);
		CHECK(ferry_trainer_opts(tr)->B == 2 && ferry_trainer_opts(tr)->T == 12, "B given, T saved");
		k = ferry_trainer_resume_overrides(tr, why, 20);
		CHECK(k == 3 && strlen(why) == 19, "a short buffer is cut, terminated: '%s'", why);
		ferry_trainer_free(tr);
	}
	free(straight);

	/* an in-order run resumes in order; another order given is an
	 * override, read from the data's start */
	straight = saved_run("order.bin", false);
	o = tiny_opts();
	o.data = NULL;
	resume_equals(&o, "order.bin", straight, "an in-order run");
	o = tiny_opts();
	o.data = NULL;
	o.given = FERRY_GIVEN_SHUFFLE;
	o.resume = path_in("order.bin");
	tr = NULL;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "resume shuffled: %s", ferry_last_error());
	if (tr) {
		int k = ferry_trainer_resume_overrides(tr, why, sizeof(why));

		CHECK(k == 1 && !strcmp(why, "shuffled batches (saved in order; read from the data's start)"),
		      "the order override (%d): %s", k, why);
		ferry_trainer_free(tr);
	}
	free(straight);
}

/* o's run of 12 steps offloaded (the layers' weights streamed, AdamW on
 * host threads), saved at step 5 as name. */
static float *offloaded_run(struct ferry_train_opts *o, const char *name)
{
	struct ferry_step_metrics m;
	ferry_trainer_t tr;
	float *straight;
	size_t n;

	o->exec.offload_params = true;
	o->exec.optimizer = FERRY_OPTIM_CPU;
	o->data = path_in("long_*.bin");
	o->steps = 12;
	CHECK(ferry_trainer_create(o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	for (int s = 0; s < 12; s++) {
		CHECK(ferry_trainer_step(tr, &m) == FERRY_OK, "step");
		if (s == 4)
			CHECK(ferry_trainer_save(tr, path_in(name)) == FERRY_OK, "save: %s", ferry_last_error());
	}
	straight = params_after(tr, &n);
	ferry_trainer_free(tr);
	return straight;
}

/* The resumed trainer's placement: its optimizer and weights, the
 * overrides it states. */
static void check_resumed_place(const char *name, const struct ferry_train_opts *given, bool host,
				const char *over, const char *what)
{
	struct ferry_train_opts o = *given;
	ferry_trainer_t tr = NULL;
	char why[8192];

	o.resume = path_in(name);
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "%s: resume: %s", what, ferry_last_error());
	if (!tr)
		return;
	CHECK(ferry_trainer_opts(tr)->exec.offload_params == host &&
	      (ferry_trainer_opts(tr)->exec.optimizer == FERRY_OPTIM_CPU) == host,
	      "%s: the weights and AdamW %s", what, host ? "on the host" : "on the device");
	CHECK(ferry_trainer_resume_overrides(tr, why, sizeof(why)) == (over ? 1 : 0) &&
	      (!over || strstr(why, over)), "%s: overrides: %s", what, why);
	ferry_trainer_free(tr);
}

/* The state records the run's placement and a resume continues it unless
 * a placement is given (then an override); a state without one (older
 * ferry) resumes with the caller's placement, as before. */
static void test_resume_place(void)
{
	struct ferry_train_opts o = tiny_opts();
	float *straight = offloaded_run(&o, "place.bin");
	static struct ferry_train_state st;
	float *m = NULL, *v = NULL;
	size_t n = 0;

	CHECK(ferry_state_read_info(path_in("place.bin.state"), &st) == FERRY_OK &&
	      strstr(st.place, "layers.weights=host:stream(1)") && strstr(st.place, "adam=host:cpu"),
	      "the state records the placement: '%s'", st.place);
	o = tiny_opts();
	o.data = NULL;
	check_resumed_place("place.bin", &o, true, NULL, "none given");
	resume_equals(&o, "place.bin", straight, "the saved placement");
	o = tiny_opts();
	o.data = NULL;
	o.given = FERRY_GIVEN_PLACE;
	check_resumed_place("place.bin", &o, false, "placement 'layers.weights=device", "the device given");
	/* the same state without the placement, as ferry wrote it before */
	{
		struct ferry_model_config full = o.model;

		CHECK(ferry_model_config_complete(&full) == FERRY_OK, "config");
		n = ferry_model_config_num_params(&full);
	}
	m = malloc(n * sizeof(float) + 4);
	v = malloc(n * sizeof(float) + 4);
	CHECK(m && v && ferry_state_read(path_in("place.bin.state"), &st, m, v, n) == FERRY_OK, "read the state");
	st.place[0] = 0;
	CHECK(ferry_state_write(path_in("place.bin.state"), &st, m, v, n) == FERRY_OK, "rewrite: %s", ferry_last_error());
	o = tiny_opts();
	o.data = NULL;
	check_resumed_place("place.bin", &o, false, NULL, "no placement recorded");
	free(m);
	free(v);
	free(straight);
}

/* A version-1 state (schedule only) resumes, its batches in order as the
 * ferry that wrote it read them; its missing fields are the caller's.  A
 * step past INT_MAX is refused, not truncated. */
static void test_resume_old_and_big(void)
{
	float *straight = saved_run("old.bin", false);
	struct ferry_train_opts o = tiny_opts();
	struct ferry_train_state st;
	ferry_trainer_t tr = NULL;
	const char *sp = path_in("old.bin.state");
	int32_t hdr[256];
	long glob_bytes;
	FILE *f = fopen(sp, "rb");
	char *rest;
	long size;

	CHECK(f && fread(hdr, 4, 256, f) == 256, "read the header");
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	glob_bytes = (hdr[27] + 3) / 4 * 4 + (hdr[44] + 3) / 4 * 4; /* the globs and (version 6) the placement */
	rest = malloc((size_t)size);
	fseek(f, 1024 + glob_bytes, SEEK_SET);
	CHECK(rest && fread(rest, 1, (size_t)(size - 1024 - glob_bytes), f) == (size_t)(size - 1024 - glob_bytes), "read");
	fclose(f);
	hdr[1] = 1;
	memset(hdr + 21, 0, (256 - 21) * 4);
	f = fopen(sp, "wb");
	CHECK(f && fwrite(hdr, 4, 256, f) == 256 && fwrite(rest, 1, (size_t)(size - 1024 - glob_bytes), f) ==
	      (size_t)(size - 1024 - glob_bytes), "write a version-1 state");
	fclose(f);
	free(rest);
	o.data = path_in("long_*.bin"); /* not recorded: the caller's */
	o.steps = 99;                   /* recorded: the saved run's */
	o.shuffle = true;               /* a version-1 run's were in order */
	resume_equals(&o, "old.bin", straight, "a version-1 state");

	/* step 2^32: refused, not resumed at step 0 */
	{
		size_t n = 0;
		float *m, *v;
		struct ferry_model_config full = o.model;

		CHECK(ferry_model_config_complete(&full) == FERRY_OK, "config");
		n = ferry_model_config_num_params(&full);
		m = TALLOC(float, n);
		v = TALLOC(float, n);
		CHECK(ferry_state_read(sp, &st, m, v, n) == FERRY_OK, "read: %s", ferry_last_error());
		st.step = 1ll << 32;
		CHECK(ferry_state_write(sp, &st, m, v, n) == FERRY_OK, "write: %s", ferry_last_error());
		o.resume = path_in("old.bin");
		CHECK(ferry_trainer_create(&o, &tr) == FERRY_ERR_FORMAT && tr == NULL, "step 2^32 refused");
		CHECK(strstr(ferry_last_error(), "step 4294967296 of a 12-step schedule") &&
		      strstr(ferry_last_error(), "does not fit"), "says why: %s", ferry_last_error());
		free(m);
		free(v);
	}
	free(straight);
}

/* The first non-finite loss stops training; nothing is saved over the last
 * good checkpoint. */
static void test_diverge(void)
{
	struct ferry_train_opts o = tiny_opts();
	struct ferry_step_metrics m;
	ferry_trainer_t tr;
	ferry_status st = FERRY_OK;
	int s;

#ifdef __SANITIZE_ADDRESS__
	/* the sanitizer build (address,undefined) stops at the first NaN a
	 * diverged forward pass feeds fast_expf (src/ops/cpu/fastmath.h casts
	 * it to int32_t: undefined behaviour); the release build runs this */
	printf("diverge: skipped under the sanitizers (fast_expf(NaN) is undefined behaviour)\n");
	return;
#endif
	o.lr = 1e30f;
	o.adamw.weight_decay = 0;
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	CHECK(ferry_trainer_step(tr, &m) == FERRY_OK && isfinite(m.loss), "the first loss is finite");
	CHECK(ferry_trainer_save(tr, path_in("good.bin")) == FERRY_OK, "save: %s", ferry_last_error());
	for (s = 1; s < 20 && (st = ferry_trainer_step(tr, &m)) == FERRY_OK; s++)
		;
	CHECK(st == FERRY_ERR_INVALID, "stopped (%d)", st);
	printf("diverged: %s\n", ferry_last_error());
	CHECK(strstr(ferry_last_error(), "training diverged") && strstr(ferry_last_error(), "step "), "says so: %s",
	      ferry_last_error());
	CHECK(ferry_trainer_step(tr, &m) == FERRY_ERR_INVALID, "no further steps");
	CHECK(ferry_trainer_save(tr, path_in("good.bin")) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "not saved: training diverged"), "not saved: %s", ferry_last_error());
	ferry_trainer_free(tr);
	o.resume = path_in("good.bin");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK && ferry_trainer_step_count(tr) == 1,
	      "the last good checkpoint resumes: %s", ferry_last_error());
	ferry_trainer_free(tr);
}

/* A save whose files would be training or validation shards is refused,
 * before step 1 when asked, at the save anyway. */
static void test_save_over_inputs(void)
{
	struct ferry_train_opts o = tiny_opts();
	ferry_trainer_t tr = NULL;
	uint16_t tok[300];
	char other[600];
	struct stat before, after;

	for (int i = 0; i < 300; i++)
		tok[i] = (uint16_t)(i % 13);
	write_shard(path_in("val.bin.state"), tok, 300);
	o.val_data = path_in("val.bin.state");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create: %s", ferry_last_error());
	if (!tr)
		return;
	CHECK(ferry_trainer_check_save_path(tr, path_in("repeat.bin")) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "repeat.bin, a training shard"), "the training shard: %s", ferry_last_error());
	snprintf(other, sizeof(other), "%s/./../%s/repeat.bin", dir, strrchr(dir, '/') + 1);
	CHECK(ferry_trainer_check_save_path(tr, other) == FERRY_ERR_INVALID, "another spelling of it");
	CHECK(ferry_trainer_check_save_path(tr, path_in("val.bin")) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "a validation shard"), "the state over a validation shard: %s",
	      ferry_last_error());
	CHECK(ferry_trainer_check_save_path(tr, path_in("fine.bin")) == FERRY_OK, "a new path: %s", ferry_last_error());
	stat(path_in("repeat.bin"), &before);
	CHECK(ferry_trainer_save(tr, path_in("repeat.bin")) == FERRY_ERR_INVALID, "save refused");
	CHECK(stat(path_in("repeat.bin"), &after) == 0 && after.st_size == before.st_size &&
	      after.st_ino == before.st_ino && !exists_path(path_in("repeat.bin.state")), "the shard is intact");
	ferry_trainer_free(tr);
}

static void expect_refused(struct ferry_train_opts *o, ferry_status want, const char *needle)
{
	ferry_trainer_t tr = NULL;
	ferry_status st = ferry_trainer_create(o, &tr);

	CHECK(st == want && tr == NULL, "want %d got %d (%s)", want, st, ferry_last_error());
	CHECK(strstr(ferry_last_error(), needle) != NULL, "message '%s' lacks '%s'", ferry_last_error(), needle);
	ferry_trainer_free(tr);
}

static void test_bad_configs(void)
{
	struct ferry_train_opts o;

	o = tiny_opts(); o.model.heads = 3;
	expect_refused(&o, FERRY_ERR_INVALID, "divisible");
	o = tiny_opts(); o.T = 17;
	expect_refused(&o, FERRY_ERR_INVALID, "maximum 16");
	o = tiny_opts(); o.B = 0;
	expect_refused(&o, FERRY_ERR_INVALID, "positive");
	o = tiny_opts(); o.B = 1 << 30; /* B * T past what the kernels index */
	expect_refused(&o, FERRY_ERR_INVALID, "too large");
	o = tiny_opts(); o.model.layers = -1;
	expect_refused(&o, FERRY_ERR_INVALID, "layers");
	o = tiny_opts(); o.model.vocab = 5; /* the data has tokens up to 12: refused before step 1 */
	o.model.padded_vocab = 8;
	expect_refused(&o, FERRY_ERR_INVALID, "repeat.bin holds token id 12, past the model's vocabulary of 5: a model "
		       "for this data needs --vocab 13 or more");
	o = tiny_opts(); o.device_mem = 64 << 10; /* 64 KiB: the model needs more */
	expect_refused(&o, FERRY_ERR_DEVICE_MEM, "needs 250.5 KiB of device memory (256512 bytes), the device has 64.0 KiB; presets that "
		       "fit: none");
	o = tiny_opts(); o.data = path_in("nothing_*.bin");
	expect_refused(&o, FERRY_ERR_IO, "nothing_");
	o = tiny_opts(); o.checkpoint = path_in("repeat.bin"); /* a shard is no checkpoint */
	expect_refused(&o, FERRY_ERR_FORMAT, "magic");
}

static void test_alloc_failures(void)
{
	struct ferry_train_opts o = tiny_opts();
	int failed = 0;

	for (long k = 0; k < 10000; k++) {
		ferry_trainer_t tr = NULL;
		ferry_status st;

		ferry_fault_fail_after(k);
		st = ferry_trainer_create(&o, &tr);
		ferry_fault_fail_after(-1);
		ferry_trainer_free(tr);
		if (st == FERRY_OK)
			break;
		CHECK(st == FERRY_ERR_NOMEM, "allocation %ld: got %d (%s)", k, st, ferry_last_error());
		failed++;
	}
	printf("setup survives each of its %d host allocations failing\n", failed);
	CHECK(failed > 10, "exercised %d failure points", failed);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

int main(void)
{
	uint16_t tok[2000];

	snprintf(dir, sizeof(dir), "%s/ferry_train_XXXXXX", getenv("FERRY_TEST_TMP") ? getenv("FERRY_TEST_TMP") : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	for (int i = 0; i < 2000; i++)
		tok[i] = (uint16_t)((i % 5) * 3 % 13); /* 0 3 6 9 12 0 3 ... */
	write_shard(path_in("repeat.bin"), tok, 2000);
	for (int i = 0; i < 2000; i++)
		tok[i] = (uint16_t)((i * 7 + i / 3) % 13);
	write_shard(path_in("long_0.bin"), tok, 150);
	write_shard(path_in("long_1.bin"), tok + 150, 120);

	test_overfit();
	test_resume();
	test_resume_takes_saved();
	test_resume_place();
	test_resume_old_and_big();
	test_diverge();
	test_save_over_inputs();
	test_bad_configs();
	test_alloc_failures();
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return test_exit_code();
}
