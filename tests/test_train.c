/* Training end to end on the CPU backend: a tiny model learns a repeated
 * sequence; save + resume equals an unbroken run, bit for bit; bad
 * configurations and a too-small device arena fail cleanly; every host
 * allocation failure while setting up fails cleanly. */
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/train.h"
#include "test_util.h"

#include <ftw.h>
#include <unistd.h>

static char dir[256];

static void write_shard(const char *path, const uint16_t *tok, int n)
{
	int32_t header[256] = { FERRY_SHARD_MAGIC, FERRY_SHARD_VERSION, n };
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(header, sizeof(header), 1, f) != 1 || fwrite(tok, 2, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	fclose(f);
}

static const char *path_in(const char *name)
{
	static char buf[8][512];
	static int at;
	char *p = buf[at++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
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
	/* data that changed under a saved position is refused */
	o.data = path_in("long_0.bin");
	CHECK(ferry_trainer_create(&o, &tr) == FERRY_ERR_INVALID && tr == NULL, "changed data refused");
	CHECK(strstr(ferry_last_error(), "the data changed") != NULL, "says why: %s", ferry_last_error());
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
	o = tiny_opts(); o.model.vocab = 5; /* the data has tokens up to 12 */
	o.model.padded_vocab = 8;
	{
		ferry_trainer_t tr;
		struct ferry_step_metrics m;

		CHECK(ferry_trainer_create(&o, &tr) == FERRY_OK, "create");
		CHECK(ferry_trainer_step(tr, &m) == FERRY_ERR_FORMAT, "token >= vocab refused");
		CHECK(strstr(ferry_last_error(), "repeat.bin") != NULL, "names the file: %s", ferry_last_error());
		ferry_trainer_free(tr);
	}
	o = tiny_opts(); o.device_mem = 64 << 10; /* 64 KiB: the model needs more */
	expect_refused(&o, FERRY_ERR_DEVICE_MEM, "needs 293376 bytes of device memory, the device has 65536; presets that fit: none");
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
	test_bad_configs();
	test_alloc_failures();
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return test_exit_code();
}
