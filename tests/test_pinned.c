/*
 * Pinned host memory with a budget (ferry_exec_opts.pinned_limit): the
 * host buffers that copies use come from one pool sized before step 1,
 * offloaded activations first; past the limit the rest are pageable.
 *  - the pool never exceeds the limit; with a limit that holds only the
 *    offloaded activations, they are pinned and everything after pageable;
 *  - AdamW's moments on host threads and the undo copies are never
 *    pinned (no copy touches them), even without a limit;
 *  - the model reports what the plan says, and training under a tight
 *    limit gives the same bits as without one.
 */
#include "ferry/model.h"
#include "test_util.h"

#include <string.h>

enum { B = 2, T = 16, STEPS = 2 };

static struct ferry_model_config gpt2 = { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 3,
						.heads = 2, .channels = 32 };

static void train(const struct ferry_exec_opts *o, float *params, struct ferry_host_memory *h)
{
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	int32_t in[B * T], tg[B * T];
	ferry_backend_t be;
	ferry_model_t m;
	float loss, norm;

	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 5 + 1) % gpt2.vocab;
		tg[i] = (i * 3 + 2) % gpt2.vocab;
	}
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK && ferry_model_create(be, &gpt2, B, T, o, &m) == FERRY_OK &&
		      ferry_model_init_random(m, 9) == FERRY_OK, "create: %s", ferry_last_error());
	for (int s = 1; s <= STEPS; s++)
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &loss, &norm) == FERRY_OK, "step %d", s);
	CHECK(ferry_model_get_params(m, params) == FERRY_OK, "params");
	ferry_model_host_memory(m, h);
	ferry_model_free(m);
	ferry_backend_close(be);
}

static size_t stacked_numel(void)
{
	size_t n = 0;

	for (int p = 0; p < ferry_model_param_tensors(&gpt2); p++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(&gpt2, p, &pi) == FERRY_OK && pi.present && pi.layers)
			n += pi.numel;
	}
	return n;
}

int main(void)
{
	struct ferry_exec_opts all = { .policy = "qkv_proj_offloaded", .optimizer = FERRY_OPTIM_STREAM };
	struct ferry_exec_opts tight = all, cpu = { .optimizer = FERRY_OPTIM_CPU, .clip_order = FERRY_CLIP_SPECULATIVE };
	struct ferry_plan pa, pt, pc;
	struct ferry_host_memory ha, ht;
	size_t n = ferry_model_config_num_params(&gpt2);
	float *a, *b;

	CHECK(ferry_model_config_complete(&gpt2) == FERRY_OK, "config");
	n = ferry_model_config_num_params(&gpt2);
	a = TALLOC(float, n);
	b = TALLOC(float, n);
	CHECK(ferry_model_plan(&gpt2, B, T, &all, &pa) == FERRY_OK, "plan");
	CHECK(pa.mem.host_pageable_bytes == 0 && pa.mem.host_pinned_bytes >= pa.mem.host_total_bytes,
	      "no limit: every host buffer of a streamed optimizer is pinned (%zu of %zu)", pa.mem.host_pinned_bytes,
	      pa.mem.host_total_bytes);
	/* room for the offloaded activations only (rounded to pages) */
	tight.pinned_limit = (pa.mem.host_activation_bytes + 4095) / 4096 * 4096;
	CHECK(ferry_model_plan(&gpt2, B, T, &tight, &pt) == FERRY_OK, "tight plan");
	CHECK(pt.mem.host_pinned_bytes == tight.pinned_limit && pt.mem.pinned_limit == tight.pinned_limit,
	      "the activations are pinned first (%zu bytes of %zu)", pt.mem.host_pinned_bytes, tight.pinned_limit);
	CHECK(pt.mem.host_pageable_bytes == pt.mem.host_total_bytes - pt.mem.host_activation_bytes,
	      "the rest is pageable (%zu)", pt.mem.host_pageable_bytes);
	CHECK(ferry_model_plan(&gpt2, B, T, &cpu, &pc) == FERRY_OK, "cpu plan");
	/* m and v (8 bytes per parameter) and the undo copies (12 per stacked
	 * one) pageable; master weights and gradients (copied) pinned */
	CHECK(pc.mem.host_pageable_bytes == 8 * n + 12 * stacked_numel() &&
		      pc.mem.host_pinned_bytes == 2 * ((4 * n + 4095) / 4096 * 4096),
	      "host threads' moments and undo copies are pageable (%zu), the copied buffers pinned (%zu)",
	      pc.mem.host_pageable_bytes, pc.mem.host_pinned_bytes);

	train(&all, a, &ha);
	train(&tight, b, &ht);
	CHECK(!memcmp(a, b, n * sizeof(float)), "the same parameters under a tight limit");
	CHECK(!ha.over_limit && !ha.pin_failed && ha.pinned_bytes == pa.mem.host_pinned_bytes,
	      "no limit: the model pinned what the plan said (%zu)", ha.pinned_bytes);
	CHECK(ht.over_limit && ht.pinned_bytes == pt.mem.host_pinned_bytes &&
		      ht.pageable_bytes == pt.mem.host_pageable_bytes && ht.limit == tight.pinned_limit,
	      "tight: over the limit, as planned (%zu pinned, %zu pageable)", ht.pinned_bytes, ht.pageable_bytes);
	printf("  pinned %zu / pageable %zu bytes without a limit; %zu / %zu under a %zu-byte limit\n",
	       ha.pinned_bytes, ha.pageable_bytes, ht.pinned_bytes, ht.pageable_bytes, ht.limit);
	free(a);
	free(b);
	return test_exit_code();
}
