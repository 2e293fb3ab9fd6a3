/* Text generation: repeated forward passes over a sliding window (no KV
 * cache: sampling is for showing progress, not for serving). */
#include "ferry/model.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: every output is a strong mix of the state, so small seeds
 * (1337, 1, 2, ...) give well-spread first draws.  (A raw xorshift from a
 * small seed starts near 0, and the first token drawn was always token 0.) */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* A token that may be drawn and its weight. */
struct cand {
	double w;
	float p;
	int v;
};

/* More probable first; among equals, the lower id. */
static int by_prob(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->p != y->p)
		return x->p < y->p ? 1 : -1;
	return (x->v > y->v) - (x->v < y->v);
}

static int most_probable(const float *probs, int V)
{
	int best = 0;

	for (int v = 1; v < V; v++)
		if (probs[v] > probs[best])
			best = v;
	return best;
}

/* One token from next-token probabilities: the top_k most probable (all
 * when 0), each weighted by p^(1/temperature) (softmax(logits/temperature)),
 * drawn against the weights' own sum (bf16 probabilities do not add up to
 * exactly 1, and the remainder must not land on the last token). */
static int draw(const float *probs, int V, const struct ferry_sample_opts *o, struct cand *c, uint64_t *rng)
{
	int n = V, last = -1;
	double pmax = 0, total = 0, u, acc = 0;

	if (o->temperature == 0 || o->top_k == 1)
		return most_probable(probs, V);
	for (int v = 0; v < V; v++) {
		c[v] = (struct cand){ 0, probs[v], v };
		if (probs[v] > pmax)
			pmax = probs[v];
	}
	if (o->top_k > 0 && o->top_k < V) {
		qsort(c, (size_t)V, sizeof(*c), by_prob);
		n = o->top_k;
	}
	if (!(pmax > 0))
		return most_probable(probs, V);
	for (int i = 0; i < n; i++) {
		double p = c[i].p > 0 ? c[i].p : 0;

		/* temperature 1 keeps the probabilities as they are, bit for bit */
		c[i].w = o->temperature == 1.0f ? p : p > 0 ? exp(log(p / pmax) / o->temperature) : 0;
		total += c[i].w;
	}
	u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
	for (int i = 0; i < n; i++) {
		if (c[i].w <= 0)
			continue;
		last = c[i].v;
		acc += c[i].w;
		if (u < acc)
			return c[i].v;
	}
	return last >= 0 ? last : V - 1;
}

ferry_status ferry_model_sample(ferry_model_t m, int32_t *tokens, int *len, int cap, int n,
			       const struct ferry_sample_opts *opts, uint64_t *rng)
{
	static const struct ferry_sample_opts plain = { .temperature = 1.0f, .top_k = 0 };
	const struct ferry_model_config *cfg = ferry_model_config(m);
	const struct ferry_sample_opts *o = opts ? opts : &plain;
	struct cand *c;
	float *probs;
	ferry_status st = FERRY_OK;

	if (*len < 1 || n < 0 || *len + n > cap)
		return ferry_error(FERRY_ERR_INVALID, "sample: need a prompt and room for %d tokens", n);
	if (!(o->temperature >= 0) || !isfinite(o->temperature) || o->top_k < 0)
		return ferry_error(FERRY_ERR_INVALID, "sample: temperature %g and top-k %d: need temperature >= 0 "
				   "and top-k >= 0", (double)o->temperature, o->top_k);
	probs = ferry_malloc((size_t)cfg->vocab * sizeof(float));
	c = ferry_malloc((size_t)cfg->vocab * sizeof(*c));
	if (!probs || !c) {
		ferry_free(probs);
		ferry_free(c);
		return ferry_error(FERRY_ERR_NOMEM, "sample: out of host memory");
	}
	for (int i = 0; i < n; i++) {
		int T = *len < ferry_model_max_seq_len(m) ? *len : ferry_model_max_seq_len(m);

		st = ferry_model_forward(m, tokens + *len - T, NULL, 1, T, NULL);
		if (!st)
			st = ferry_model_probs(m, T - 1, probs);
		if (st)
			break;
		tokens[(*len)++] = draw(probs, cfg->vocab, o, c, rng);
	}
	ferry_free(c);
	ferry_free(probs);
	return st;
}
