/*
 * Clipping order with AdamW on host threads (ferry_exec_opts.clip_order):
 * the speculative order updates each layer as soon as its gradients reach
 * the host, assuming no clipping, and undoes and redoes the step when the
 * norm says otherwise.
 *  - Clipping on every step (every early update redone), on none (every
 *    one kept), and an optimizer value changed after arming (redone): the
 *    parameters, moments and losses are bit-identical to AdamW on the
 *    device, for GPT-2 and Llama, with and without --offload-params (and
 *    --offload-embeddings) and with the gradients kept on the device
 *    (--device-grads), under several activation policies; the model
 *    counts the steps it undid;
 *  - a step whose norm is not finite fails and leaves parameters and
 *    moments exactly as they were before it, as the exact order does
 *    (with the gradients on the host or on the device);
 *  - speculation without the speculative order, or with another optimizer
 *    placement, is refused.
 */
#include "ferry/model.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define STEPS 3

enum { B = 2, T = 16 };

struct result {
	float loss[STEPS];
	float *params, *mom, *var;
	int undone;
};

struct run_opts {
	struct ferry_exec_opts exec;
	bool speculate;
	float clip;
	float armed_lr; /* the lr the early updates are armed with (0: the step's) */
};

static void batch(const struct ferry_model_config *cfg, int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 7 + s * 3 + i / 4) % cfg->vocab;
		tg[i] = (in[i] * 3 + 2) % cfg->vocab;
	}
}

static void train(const char *name, const struct ferry_model_config *cfg, const struct run_opts *ro,
		  struct result *r)
{
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, ro->clip };
	ferry_backend_t be;
	ferry_model_t m;
	int32_t in[B * T], tg[B * T];
	size_t n = ferry_model_config_num_params(cfg);

	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "open");
	CHECK(ferry_model_create(be, cfg, B, T, &ro->exec, &m) == FERRY_OK, "%s create: %s", name, ferry_last_error());
	CHECK(ferry_model_init_random(m, 3) == FERRY_OK, "init");
	for (int s = 1; s <= STEPS; s++) {
		struct ferry_adamw armed = opt;
		float norm;

		if (ro->armed_lr)
			armed.lr = ro->armed_lr;
		batch(cfg, in, tg, s);
		if (ro->speculate)
			CHECK(ferry_model_step_speculate(m, &armed, s) == FERRY_OK, "%s: arm: %s", name, ferry_last_error());
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &r->loss[s - 1], &norm) == FERRY_OK,
		      "%s step %d: %s", name, s, ferry_last_error());
		CHECK(ro->clip < 1 ? norm > ro->clip : norm < ro->clip, "%s step %d: norm %g against clip %g", name, s,
		      norm, ro->clip);
	}
	r->params = TALLOC(float, n);
	r->mom = TALLOC(float, n);
	r->var = TALLOC(float, n);
	CHECK(ferry_model_get_params(m, r->params) == FERRY_OK && ferry_model_get_opt_state(m, r->mom, r->var) ==
		      FERRY_OK, "read back");
	r->undone = ro->speculate ? ferry_model_speculation_undone(m) : 0;
	ferry_model_free(m);
	ferry_backend_close(be);
}

static void result_free(struct result *r)
{
	free(r->params);
	free(r->mom);
	free(r->var);
}

/* Speculative runs against the device's AdamW: clipping on every step
 * (0.05), on none (1e9), and the lr changed after arming. */
/* params: 0 on the device, 1 the layers' offloaded (--offload-params), 2
 * the embeddings' and the head's too (--offload-embeddings); 3 on the
 * device with their gradients kept there (--device-grads: each layer's
 * copied down through a host ring, again when the step is redone). */
static void check_model(const char *model, const struct ferry_model_config *cfg, const char *policy, int params)
{
	const float clips[3] = { 0.05f, 1e9f, 0.05f };
	size_t n = ferry_model_config_num_params(cfg) * sizeof(float);
	char name[160];

	for (int k = 0; k < 3; k++) {
		struct run_opts dev = { .exec = { .policy = policy }, .clip = clips[k] };
		struct run_opts spec = { .exec = { .policy = policy, .optimizer = FERRY_OPTIM_CPU,
						   .offload_params = params == 1 || params == 2,
						   .offload_embeddings = params == 2, .device_grads = params == 3,
						   .clip_order = FERRY_CLIP_SPECULATIVE },
					 .speculate = true, .clip = clips[k], .armed_lr = k == 2 ? 5e-3f : 0 };
		struct result a, b;
		const int want_undone = k == 1 ? 0 : STEPS;

		snprintf(name, sizeof(name), "%s %s%s, clip %g%s", model, policy,
			 params == 3 ? ", gradients on the device" : params == 2 ? ", params and embeddings offloaded"
			 : params ? ", params offloaded" : "",
			 clips[k], k == 2 ? ", armed with another lr" : "");
		train(name, cfg, &dev, &a);
		train(name, cfg, &spec, &b);
		CHECK(!memcmp(a.loss, b.loss, sizeof(a.loss)), "%s: the same losses", name);
		CHECK(!memcmp(a.params, b.params, n), "%s: the same parameters", name);
		CHECK(!memcmp(a.mom, b.mom, n) && !memcmp(a.var, b.var, n), "%s: the same moments", name);
		CHECK(b.undone == want_undone, "%s: %d steps undone, expected %d", name, b.undone, want_undone);
		printf("  %-72s bit-identical, %d of %d steps redone\n", name, b.undone, STEPS);
		result_free(&a);
		result_free(&b);
	}
}

/* A parameter set to NaN: the step fails and puts every layer back (the
 * gradients kept on the device: device_grads). */
static void check_diverged(const char *model, const struct ferry_model_config *cfg, bool speculative, bool device_grads)
{
	struct ferry_exec_opts o = { .optimizer = FERRY_OPTIM_CPU, .device_grads = device_grads,
				     .clip_order = speculative ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT };
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	size_t n = ferry_model_config_num_params(cfg);
	float *p0 = TALLOC(float, n), *m0 = TALLOC(float, n), *v0 = TALLOC(float, n);
	float *p1 = TALLOC(float, n), *m1 = TALLOC(float, n), *v1 = TALLOC(float, n);
	int32_t in[B * T], tg[B * T];
	struct ferry_param_info pi;
	ferry_backend_t be;
	ferry_model_t m;
	float loss, norm;

	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK && ferry_model_create(be, cfg, B, T, &o, &m) == FERRY_OK &&
		      ferry_model_init_random(m, 3) == FERRY_OK, "create");
	batch(cfg, in, tg, 1);
	CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
		      ferry_model_step_finish(m, &opt, 1, &loss, &norm) == FERRY_OK, "a first step");
	CHECK(ferry_model_get_params(m, p0) == FERRY_OK && ferry_model_get_opt_state(m, m0, v0) == FERRY_OK, "get");
	CHECK(ferry_model_param_info(cfg, ferry_model_param_tensors(cfg) - 1, &pi) == FERRY_OK, "info");
	p0[pi.offset] = NAN; /* the final norm's gain: every gradient becomes NaN */
	CHECK(ferry_model_set_params(m, p0) == FERRY_OK, "set");
	if (speculative)
		CHECK(ferry_model_step_speculate(m, &opt, 2) == FERRY_OK, "arm");
	CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
		      ferry_model_step_finish(m, &opt, 2, &loss, &norm) == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "training diverged"),
	      "%s: a NaN norm fails the step: %s", model, ferry_last_error());
	CHECK(ferry_model_get_params(m, p1) == FERRY_OK && ferry_model_get_opt_state(m, m1, v1) == FERRY_OK, "get");
	CHECK(!memcmp(p0, p1, n * sizeof(float)) && !memcmp(m0, m1, n * sizeof(float)) &&
		      !memcmp(v0, v1, n * sizeof(float)),
	      "%s %s: the state is what it was before the step", model, speculative ? "speculative" : "exact");
	CHECK(!speculative || ferry_model_speculation_undone(m) == 1, "%s: one step undone", model);
	ferry_model_free(m);
	ferry_backend_close(be);
	free(p0), free(m0), free(v0), free(p1), free(m1), free(v1);
}

static void check_refused(const struct ferry_model_config *cfg)
{
	struct ferry_exec_opts o = { .optimizer = FERRY_OPTIM_STREAM, .clip_order = FERRY_CLIP_SPECULATIVE };
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m;

	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "needs --offload-optimizer cpu"), "speculation needs host threads");
	o.optimizer = FERRY_OPTIM_CPU;
	o.clip_order = FERRY_CLIP_EXACT;
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK && ferry_model_create(be, cfg, B, T, &o, &m) == FERRY_OK,
	      "create");
	CHECK(ferry_model_step_speculate(m, &opt, 1) == FERRY_ERR_INVALID, "not armed in the exact order");
	ferry_model_free(m);
	ferry_backend_close(be);
	o.clip_order = FERRY_CLIP_SPECULATIVE;
	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_OK &&
		      plan.mem.host_kind_bytes[FERRY_TK_OPT_STATE] > 8 * ferry_model_config_num_params(cfg),
	      "the undo copy is host memory in the plan");
}

int main(void)
{
	struct ferry_model_config gpt2 = { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 4, .heads = 2,
					   .channels = 32 };
	struct ferry_model_config llama = { .arch = "llama", .max_seq = 16, .vocab = 67, .layers = 3, .heads = 4,
					    .kv_heads = 2, .channels = 32, .ffn = 48 };

	CHECK(ferry_model_config_complete(&gpt2) == FERRY_OK && ferry_model_config_complete(&llama) == FERRY_OK,
	      "configs");
	check_refused(&gpt2);
	check_model("gpt2", &gpt2, "everything_saveable", 0);
	check_model("gpt2", &gpt2, "qkv_proj_offloaded", 1);
	check_model("gpt2", &gpt2, "nothing_saveable", 1);
	check_model("gpt2", &gpt2, "qkv_proj_offloaded", 2);
	check_model("llama", &llama, "minimal_offloaded", 0);
	check_model("llama", &llama, "everything_saveable", 1);
	check_model("llama", &llama, "nothing_saveable", 2);
	check_model("gpt2", &gpt2, "qkv_proj_offloaded", 3);
	check_model("llama", &llama, "minimal_offloaded", 3);
	for (int k = 0; k < 4; k++) {
		check_diverged("gpt2", &gpt2, k & 1, k >> 1);
		check_diverged("llama", &llama, k & 1, k >> 1);
	}
	return test_exit_code();
}
