/* Text generation: repeated forward passes over a sliding window (no KV
 * cache: sampling is for showing progress, not for serving). */
#include "ferry/train.h"
#include "core/error.h"

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x2545F4914F6CDD1Dull;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
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
		u = (double)(xorshift64(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
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
