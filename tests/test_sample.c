/*
 * Sampling follows the model from the first token: over many seeds, the
 * first sampled token's frequencies match the model's next-token
 * probabilities (total variation distance), for small seeds too (a raw
 * xorshift from a small seed made every first token 0).  Temperature and
 * top-k reshape those probabilities as softmax(logits / temperature) over
 * the k most probable tokens: the frequencies follow the reshaped
 * distribution, temperature 0 and top-k 1 always take the most probable
 * token, and bad values are refused.
 */
#include "ferry/model.h"
#include "ferry/train.h"
#include "test_util.h"

#include <math.h>

#define DRAWS 4000
#define V 13

/* A model whose next-token distribution is far from uniform, and that
 * distribution after the prompt. */
static ferry_model_t skewed_model(ferry_backend_t be, const char *arch, const int32_t *prompt, float *probs)
{
	struct ferry_model_config cfg = { .max_seq = 8, .vocab = V, .layers = 1, .heads = 2, .channels = 8 };
	ferry_model_t m = NULL;
	size_t n;
	float *p;
	Rng r = rng_new(3);

	snprintf(cfg.arch, sizeof(cfg.arch), "%s", arch);
	CHECK(ferry_model_create(be, &cfg, 1, 8, NULL, &m) == FERRY_OK, "%s: create: %s", arch, ferry_last_error());
	if (!m)
		return NULL;
	CHECK(ferry_model_init_random(m, 5) == FERRY_OK, "init");
	n = ferry_model_num_params(m);
	p = TALLOC(float, n);
	CHECK(ferry_model_get_params(m, p) == FERRY_OK, "get");
	for (size_t i = 0; i < n; i++)
		p[i] += 0.5f * rng_normal(&r);
	CHECK(ferry_model_set_params(m, p) == FERRY_OK, "set");
	free(p);
	CHECK(ferry_model_forward(m, prompt, NULL, 1, 1, NULL) == FERRY_OK, "forward");
	CHECK(ferry_model_probs(m, 0, probs) == FERRY_OK, "probs");
	return m;
}

/* Counts of the first token drawn after the prompt over seeds 1..DRAWS. */
static void first_tokens(ferry_model_t m, int32_t prompt, const struct ferry_sample_opts *o, int *counts)
{
	for (int v = 0; v < V; v++)
		counts[v] = 0;
	for (uint64_t seed = 1; seed <= DRAWS; seed++) {
		uint64_t rng = seed;
		int32_t seq[2] = { prompt, -1 };
		int len = 1;

		if (ferry_model_sample(m, seq, &len, 2, 1, o, &rng) != FERRY_OK || len != 2 || seq[1] < 0 ||
		    seq[1] >= V) {
			CHECK(0, "sample: %s", ferry_last_error());
			return;
		}
		counts[seq[1]]++;
	}
}

static double distance(const int *counts, const double *want)
{
	double tvd = 0;

	for (int v = 0; v < V; v++)
		tvd += 0.5 * fabs((double)counts[v] / DRAWS - want[v]);
	return tvd;
}

/* want = probs^(1/t) over the k most probable, normalised. */
static void reshaped(const float *probs, double t, int k, double *want)
{
	double sum = 0;

	for (int v = 0; v < V; v++) {
		int above = 0;

		for (int u = 0; u < V; u++)
			above += probs[u] > probs[v] || (probs[u] == probs[v] && u < v);
		want[v] = k && above >= k ? 0 : pow(probs[v], 1.0 / t);
		sum += want[v];
	}
	for (int v = 0; v < V; v++)
		want[v] /= sum;
}

static void check_arch(ferry_backend_t be, const char *arch)
{
	static const struct { float t; int k; } shapes[] = { { 1, 0 }, { 0.5f, 0 }, { 2, 0 }, { 1, 3 }, { 0.7f, 5 } };
	const int32_t prompt = 3;
	float probs[V];
	int counts[V], best = 0;
	double want[V];
	ferry_model_t m = skewed_model(be, arch, &prompt, probs);

	if (!m)
		return;
	for (int v = 1; v < V; v++)
		if (probs[v] > probs[best])
			best = v;
	/* opts NULL is temperature 1 over every token: the model itself */
	first_tokens(m, prompt, NULL, counts);
	reshaped(probs, 1, 0, want);
	printf("%s: first token over %d seeds: total variation distance %.4f from the model "
	       "(token 0: %d draws, p %.4f)\n", arch, DRAWS, distance(counts, want), counts[0], probs[0]);
	/* sampling noise is about sqrt(V / DRAWS) / 2 = 0.03 */
	CHECK(distance(counts, want) < 0.06, "%s: first sampled tokens do not follow the model (distance %.3f)",
	      arch, distance(counts, want));
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct ferry_sample_opts o = { shapes[i].t, shapes[i].k };

		first_tokens(m, prompt, &o, counts);
		reshaped(probs, o.temperature, o.top_k, want);
		printf("%s: temperature %.1f, top-k %d: distance %.4f\n", arch, o.temperature, o.top_k,
		       distance(counts, want));
		CHECK(distance(counts, want) < 0.06, "%s: temperature %.1f top-k %d: distance %.3f", arch,
		      o.temperature, o.top_k, distance(counts, want));
		for (int v = 0; v < V; v++)
			CHECK(want[v] > 0 || counts[v] == 0, "%s: top-k %d drew token %d, outside the top %d", arch,
			      o.top_k, v, o.top_k);
	}
	for (int greedy = 0; greedy < 2; greedy++) {
		struct ferry_sample_opts o = { greedy ? 0.0f : 1.0f, greedy ? 0 : 1 };

		first_tokens(m, prompt, &o, counts);
		CHECK(counts[best] == DRAWS, "%s: %s takes the most probable token %d every time (%d of %d)", arch,
		      greedy ? "temperature 0" : "top-k 1", best, counts[best], DRAWS);
	}
	{
		int32_t seq[2] = { prompt, -1 };
		int len = 1;
		uint64_t rng = 1;
		struct ferry_sample_opts bad[] = { { -1, 0 }, { NAN, 0 }, { INFINITY, 0 }, { 1, -2 } };

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			CHECK(ferry_model_sample(m, seq, &len, 2, 1, &bad[i], &rng) == FERRY_ERR_INVALID && len == 1,
			      "%s: temperature %g top-k %d refused", arch, bad[i].temperature, bad[i].top_k);
	}
	ferry_model_free(m);
}

int main(void)
{
	ferry_backend_t be = NULL;

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)16 << 20 }, &be) != FERRY_OK) {
		fprintf(stderr, "cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	check_arch(be, "gpt2");
	check_arch(be, "llama");
	ferry_backend_close(be);
	return test_exit_code();
}
