/* ferry_evaluate_docs: the loss of version-3 data, every document once. */
#include "ferry/train.h"
#include "ferry/data.h"
#include "core/error.h"

#include <math.h>
#include <stdint.h>

ferry_status ferry_evaluate_docs(ferry_model_t m, const char *data_glob, int B, int T, bool truncate,
				 float *loss, int64_t *count)
{
	const struct ferry_loader_opts lo = { .truncate = truncate, .once = true };
	ferry_loader_t loader = NULL;
	int32_t *buf = NULL;
	size_t N = 0;
	double sum = 0;
	int64_t n = 0, batches;
	ferry_status st;

	if (B < 1 || T < 1 || __builtin_mul_overflow((size_t)B, (size_t)T, &N) || N > SIZE_MAX / 3 / sizeof(int32_t))
		return ferry_error(FERRY_ERR_INVALID, "batch %d x %d: sizes must be positive and fit memory", B, T);
	if (!ferry_model_packed(m))
		return ferry_error(FERRY_ERR_INVALID, "evaluate: documents need a model made for packed batches "
				   "(ferry_exec_opts.packed)");
	if ((st = ferry_loader_open_opts(data_glob, B, T, ferry_model_config(m)->vocab, &lo, &loader)))
		return st;
	if (!ferry_loader_packed(loader)) {
		st = ferry_error(FERRY_ERR_INVALID, "evaluate: %s is not version-3 data (documents)", data_glob);
		goto out;
	}
	if (!(buf = ferry_malloc(3 * N * sizeof(int32_t)))) {
		st = ferry_error(FERRY_ERR_NOMEM, "evaluate: out of host memory");
		goto out;
	}
	batches = (ferry_loader_rows(loader) + B - 1) / B; /* the last one filled up with padding */
	for (int64_t i = 0; i < batches && !st; i++) {
		float l;

		st = ferry_loader_next_packed(loader, buf, buf + N, buf + 2 * N);
		if (!st)
			st = ferry_model_set_positions(m, buf + 2 * N);
		if (!st)
			st = ferry_model_loss(m, buf, buf + N, B, T, &l);
		if (st)
			break;
		sum += ferry_model_loss_sum(m);
		for (size_t j = 0; j < N; j++)
			n += buf[N + j] >= 0;
	}
	if (!st && !isfinite(sum))
		st = ferry_error(FERRY_ERR_INVALID, "evaluate: the loss is %s: the model's values overflow",
				 isnan(sum) ? "not a number" : "infinite");
	if (!st) {
		*loss = n ? (float)(sum / (double)n) : 0.0f;
		*count = n;
	}
out:
	ferry_free(buf);
	ferry_loader_free(loader);
	return st;
}
