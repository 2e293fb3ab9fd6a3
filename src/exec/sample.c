/* Text generation: repeated forward passes over a sliding window (no KV
 * cache: sampling is for showing progress, not for serving). */
#include "ferry/train.h"
#include "core/error.h"

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

ferry_status ferry_model_sample(ferry_model_t m, int32_t *tokens, int *len, int cap, int n,
			       uint64_t *rng)
{
	const struct ferry_model_config *cfg = ferry_model_config(m);
	float *probs;
	ferry_status st = FERRY_OK;

	if (*len < 1 || *len + n > cap)
		return ferry_error(FERRY_ERR_INVALID, "sample: need a prompt and room for %d tokens", n);
	probs = ferry_malloc((size_t)cfg->vocab * sizeof(float));
	if (!probs)
		return ferry_error(FERRY_ERR_NOMEM, "sample: out of host memory");
	for (int i = 0; i < n; i++) {
		int T = *len < ferry_model_max_seq_len(m) ? *len : ferry_model_max_seq_len(m);
		double u, acc = 0;
		int next = cfg->vocab - 1;

		st = ferry_model_forward(m, tokens + *len - T, NULL, 1, T, NULL);
		if (!st)
			st = ferry_model_probs(m, T - 1, probs);
		if (st)
			break;
		/* draw against the row's own sum: bf16 probabilities do not add up
		 * to exactly 1, and the remainder must not land on the last token */
		double total = 0;

		for (int v = 0; v < cfg->vocab; v++)
			total += probs[v];
		u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
		for (int v = 0; v < cfg->vocab; v++) {
			acc += probs[v];
			if (u < acc) {
				next = v;
				break;
			}
		}
		tokens[(*len)++] = next;
	}
	ferry_free(probs);
	return st;
}
