/*
 * Sampling follows the model from the first token: over many seeds, the
 * first sampled token's frequencies match the model's next-token
 * probabilities (total variation distance), for small seeds too (a raw
 * xorshift from a small seed made every first token 0).
 */
#include "ferry/model.h"
#include "ferry/train.h"
#include "test_util.h"

#include <math.h>

#define DRAWS 4000

static void check_first_token(ferry_backend_t be, const char *arch)
{
	struct ferry_model_config cfg = { .max_seq = 8, .vocab = 13, .layers = 1, .heads = 2, .channels = 8 };
	ferry_model_t m = NULL;
	int32_t prompt[1] = { 3 }, seq[2];
	float probs[13];
	int counts[13] = { 0 }, len;
	double tvd = 0;

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	CHECK(ferry_model_create(be, &cfg, 1, 8, NULL, &m) == FERRY_OK, "%s: create: %s", arch, ferry_last_error());
	if (!m)
		return;
	/* a model whose next-token distribution is far from uniform */
	CHECK(ferry_model_init_random(m, 5) == FERRY_OK, "init");
	{
		size_t n = ferry_model_num_params(m);
		float *p = TALLOC(float, n);
		Rng r = rng_new(3);

		CHECK(ferry_model_get_params(m, p) == FERRY_OK, "get");
		for (size_t i = 0; i < n; i++)
			p[i] += 0.5f * rng_normal(&r);
		CHECK(ferry_model_set_params(m, p) == FERRY_OK, "set");
		free(p);
	}
	CHECK(ferry_model_forward(m, prompt, NULL, 1, 1, NULL) == FERRY_OK, "forward");
	CHECK(ferry_model_probs(m, 0, probs) == FERRY_OK, "probs");
	for (uint64_t seed = 1; seed <= DRAWS; seed++) {
		uint64_t rng = seed;

		seq[0] = prompt[0];
		len = 1;
		if (ferry_model_sample(m, seq, &len, 2, 1, &rng) != FERRY_OK || seq[1] < 0 || seq[1] >= 13) {
			CHECK(0, "%s: sample: %s", arch, ferry_last_error());
			break;
		}
		counts[seq[1]]++;
	}
	for (int v = 0; v < 13; v++)
		tvd += 0.5 * fabs((double)counts[v] / DRAWS - probs[v]);
	printf("%s: first token over %d seeds: total variation distance %.4f from the model "
	       "(token 0: %d draws, p %.4f)\n", arch, DRAWS, tvd, counts[0], probs[0]);
	/* sampling noise is about sqrt(V / DRAWS) / 2 = 0.03 */
	CHECK(tvd < 0.06, "%s: first sampled tokens do not follow the model (distance %.3f)", arch, tvd);
	ferry_model_free(m);
}

int main(void)
{
	ferry_backend_t be = NULL;

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)16 << 20 }, &be) != FERRY_OK) {
		fprintf(stderr, "cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	check_first_token(be, "gpt2");
	check_first_token(be, "llama");
	ferry_backend_close(be);
	return test_exit_code();
}
