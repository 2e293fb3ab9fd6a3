/*
 * Activation placement end to end, on GPT-2, on Llama and on the JAX
 * tutorial's network, for every preset policy and a few parameterised ones
 * (each model's own, naming its tensors):
 *  - losses and gradients over several training steps are bit-identical to
 *    everything_saveable's (recomputation and copies change no value);
 *  - the device arena's measured peak equals the plan's peak, before and
 *    after the steps (nothing is allocated inside a step);
 *  - offloading policies really move bytes to the host (plan) and the
 *    offload engine copes with prefetch depths from 1 to beyond L;
 *  - a host arena that cannot be allocated and a device arena too small fail
 *    cleanly.
 */
#include "ferry/model.h"
#include "ferry/policy.h"
#include "ferry/tutorial.h"
#include "plan/stack_plan.h"
#include "test_util.h"

#define STEPS 3

/* A model trained under every policy: its config, batch and the policies
 * of its own that name its tensors (after the presets). */
struct omodel {
	const char *name;
	struct ferry_model_config cfg;
	int B, T;
	const char *const *own;
	int n_own;
};

static const char *const gpt2_policies[] = {
	"save_only_these_names(query_proj, context)",
	"save_and_offload_only_these_names([mlpwi], [query_proj, key_proj, value_proj, decoder_layer_input])",
	"custom:decoder_layer_input=offload,pre_attention_norm=offload,attention_lse=device,mlp_activation=offload",
	"custom:decoder_layer_input=offload",
};

/* Llama's names: the projections after the rotary embedding (query_proj,
 * key_proj) and before it (query_unrotated, key_unrotated, read only when
 * the rotation is recomputed), the SwiGLU MLP's gate (mlpwi_0), up (mlpwi_1)
 * and product (mlpwi). */
static const char *const llama_policies[] = {
	"save_only_these_names(query_proj, key_proj, value_proj, context)",
	"save_and_offload_only_these_names([mlpwi_0, mlpwi_1], [query_proj, key_proj, value_proj, decoder_layer_input])",
	"save_and_offload_only_these_names([query_proj], [context, out_proj, mlpwi, mlpwo])",
	/* the rotary embedding and attention recomputed from offloaded inputs */
	"custom:decoder_layer_input=offload,query_unrotated=offload,key_unrotated=offload,value_proj=offload,"
	"attention_lse=device,mlpwi_0=offload,mlpwi_1=offload",
	/* every matrix product's output offloaded */
	"custom:query_proj=offload,key_proj=offload,value_proj=offload,context=offload,out_proj=offload,"
	"mlpwi_0=offload,mlpwi_1=offload,mlpwi=offload,mlpwo=offload,decoder_layer_input=offload",
	"custom:pre_self_attention_norm=offload,post_self_attention_norm=device,attention_lse=offload,"
	"query_unrotated=device,mlpwi=remat,mlpwo=offload",
	"custom:decoder_layer_input=offload",
};

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static const struct omodel gpt2 = {
	"gpt2",
	{ .max_seq = 16, .vocab = 37, .padded_vocab = 64, .layers = 5, .heads = 2, .channels = 16 },
	2, 12, gpt2_policies, COUNT(gpt2_policies),
};

/* grouped-query attention (2 query heads per key/value head), untied head */
static const struct omodel llama = {
	"llama",
	{ .arch = "llama", .max_seq = 16, .vocab = 37, .layers = 5, .heads = 4, .kv_heads = 2, .channels = 32,
	  .ffn = 48 },
	2, 12, llama_policies, COUNT(llama_policies),
};

static const char *policy_at(const struct omodel *om, int i)
{
	int np = ferry_policy_preset_count();

	return i < np ? ferry_policy_preset_name(i) : om->own[i - np];
}

static int n_policies(const struct omodel *om)
{
	return ferry_policy_preset_count() + om->n_own;
}

struct train_run {
	float loss[STEPS];
	float *grads;   /* after the last step */
	float *params;  /* after the last step */
};

static void make_tokens(const struct omodel *om, int32_t *in, int32_t *tg, int step)
{
	for (int i = 0; i < om->B * om->T; i++) {
		in[i] = (i * 7 + step * 3 + i / 5) % om->cfg.vocab;
		tg[i] = (i * 11 + step * 5 + 1) % om->cfg.vocab;
	}
}

/* Trains STEPS steps under a policy; returns the parameter count, 0 if the
 * policy is refused. */
static int model_train(const struct omodel *om, const char *policy, int depth, struct train_run *r)
{
	struct ferry_exec_opts o = { .policy = policy, .prefetch_depth = depth };
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m;
	const int BT = om->B * om->T;
	int32_t *in = TALLOC(int32_t, BT), *tg = TALLOC(int32_t, BT);
	size_t n = 0;
	float norm;

	memset(&plan, 0, sizeof(plan));
	CHECK(ferry_model_plan(&om->cfg, om->B, om->T, &o, &plan) == FERRY_OK, "%s %s: plan: %s", om->name, policy,
	      ferry_last_error());
	/* a policy that says "offload" moves activations to the host, and only
	 * such a policy does */
	CHECK((plan.mem.host_activation_bytes > 0) == (strstr(policy, "offload") != NULL),
	      "%s %s: %zu bytes of activations offloaded", om->name, policy, plan.mem.host_activation_bytes);
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "backend");
	if (ferry_model_create(be, &om->cfg, om->B, om->T, &o, &m) != FERRY_OK) {
		CHECK(0, "%s %s: create: %s", om->name, policy, ferry_last_error());
		ferry_backend_close(be);
		free(in);
		free(tg);
		return 0;
	}
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "%s %s: measured peak %zu == plan %zu after create",
	      om->name, policy, ferry_backend_mem_peak(be), plan.mem.peak_bytes);
	CHECK(ferry_model_init_random(m, 7) == FERRY_OK, "init");
	for (int s = 0; s < STEPS; s++) {
		make_tokens(om, in, tg, s);
		CHECK(ferry_model_forward(m, in, tg, om->B, om->T, &r->loss[s]) == FERRY_OK, "forward");
		CHECK(ferry_model_zero_grad(m) == FERRY_OK, "zero");
		CHECK(ferry_model_backward(m) == FERRY_OK, "backward: %s", ferry_last_error());
		if (s < STEPS - 1)
			CHECK(ferry_model_update(m, &opt, s + 1, &norm) == FERRY_OK, "update");
	}
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "%s %s: measured peak %zu == plan %zu after steps",
	      om->name, policy, ferry_backend_mem_peak(be), plan.mem.peak_bytes);
	n = ferry_model_num_params(m);
	r->grads = TALLOC(float, n);
	r->params = TALLOC(float, n);
	CHECK(ferry_model_get_grads(m, r->grads) == FERRY_OK && ferry_model_get_params(m, r->params) == FERRY_OK, "get");
	ferry_model_free(m);
	ferry_backend_close(be);
	free(in);
	free(tg);
	return (int)n;
}

static void test_policies(const struct omodel *om)
{
	struct train_run ref, r;
	int n = model_train(om, "everything_saveable", 0, &ref);
	int n_same = 0;

	if (!n)
		return;
	CHECK(ref.loss[0] != ref.loss[STEPS - 1], "%s: training changes the loss", om->name);
	for (int i = 0; i < n_policies(om); i++) {
		for (int depth = 1; depth <= 8; depth += 7) { /* 8 > L: clamped to the stack */
			const char *p = policy_at(om, i);
			int same_loss = 1;

			if (model_train(om, p, depth, &r) != n)
				continue;
			for (int s = 0; s < STEPS; s++)
				same_loss &= memcmp(&r.loss[s], &ref.loss[s], sizeof(float)) == 0;
			CHECK(same_loss, "%s %s depth %d: losses differ (%.9g vs %.9g)", om->name, p, depth,
			      r.loss[STEPS - 1], ref.loss[STEPS - 1]);
			CHECK(memcmp(r.grads, ref.grads, n * sizeof(float)) == 0,
			      "%s %s depth %d: gradients differ (nerr %.3e)", om->name, p, depth,
			      nerr_ff(r.grads, ref.grads, n));
			CHECK(memcmp(r.params, ref.params, n * sizeof(float)) == 0,
			      "%s %s depth %d: parameters differ (nerr %.3e)", om->name, p, depth,
			      nerr_ff(r.params, ref.params, n));
			n_same += same_loss && !memcmp(r.grads, ref.grads, n * sizeof(float)) &&
				  !memcmp(r.params, ref.params, n * sizeof(float));
			free(r.grads);
			free(r.params);
		}
	}
	printf("%s: %d of %d runs (%d policies x prefetch depths 1 and 8) bit-identical to everything_saveable\n",
	       om->name, n_same, 2 * n_policies(om), n_policies(om));
	free(ref.grads);
	free(ref.params);
}

static const struct ferry_plan_tensor *plan_tensor(const struct ferry_plan *p, const char *name)
{
	for (int i = 0; i < p->n_tensors; i++)
		if (!strcmp(p->tensors[i].name, name))
			return &p->tensors[i];
	return NULL;
}

static size_t buffer_bytes(const struct ferry_plan *p, const char *name)
{
	for (int i = 0; i < p->n_buffers; i++)
		if (!strcmp(p->buffers[i].name, name))
			return p->buffers[i].bytes;
	return 0;
}

/* The plan says what each policy does; check the headline facts. */
static void test_gpt2_plans(void)
{
	const struct ferry_model_config *gcfg = &gpt2.cfg;
	const int GB = gpt2.B, GT = gpt2.T;
	struct ferry_plan all, none, off;
	struct ferry_exec_opts o = { .policy = "everything_saveable", .prefetch_depth = 0 };

	CHECK(ferry_model_plan(gcfg, GB, GT, &o, &all) == FERRY_OK, "plan");
	o.policy = "nothing_saveable";
	CHECK(ferry_model_plan(gcfg, GB, GT, &o, &none) == FERRY_OK, "plan");
	o.policy = "qkv_proj_offloaded";
	CHECK(ferry_model_plan(gcfg, GB, GT, &o, &off) == FERRY_OK, "plan");
	CHECK(all.n_recompute_ops == 0 && all.mem.host_total_bytes == 0, "everything_saveable keeps all");
	CHECK(none.mem.peak_bytes < all.mem.peak_bytes && none.n_recompute_ops > 0, "remat saves device memory");
	/* q, k and v: 3 tensors x L layers x B*T*C floats on the host */
	CHECK(off.mem.host_activation_bytes == (size_t)3 * gcfg->layers * GB * GT * gcfg->channels * 4,
	      "qkv offloaded: host bytes %zu", off.mem.host_activation_bytes);
	CHECK(all.mem.total_bytes == all.mem.peak_bytes, "total == peak when all is planned up front");
	/* activation gradients: the input's or output's (the other is in the
	 * last-output slot), then at most 6 widths live at once (at mlpwi's
	 * backward: post_attention_residual's, pre_mlp_norm's and the 4-wide
	 * mlpwi's, which the GELU's backward wrote over mlp_activation's) */
	CHECK(buffer_bytes(&all, "activation gradients") == 7 * (size_t)GB * GT * gcfg->channels * 4,
	      "gradient workspace %zu bytes: 7 widths", buffer_bytes(&all, "activation gradients"));
	CHECK(!strcmp(all.buffers[0].name, "params") && all.mem.alias_bytes == 3 * all.buffers[0].bytes,
	      "params, m and v are donated");
	for (int i = 0; i < off.n_tensors; i++) {
		const struct ferry_plan_tensor *t = &off.tensors[i];

		if (!strcmp(t->name, "query_proj"))
			CHECK(t->placement == FERRY_PLACE_OFFLOAD && t->stored && t->device_slots == off.ring_slots,
			      "query_proj offloaded into a ring of %d", off.ring_slots);
		if (!strcmp(t->name, "pre_attention_norm"))
			CHECK(t->recomputed && !t->stored, "pre_attention_norm recomputed");
	}
}

/* The same for Llama, whose key and value projections are narrower than
 * its queries (grouped-query attention). */
static void test_llama_plans(void)
{
	const struct ferry_model_config *c = &llama.cfg;
	const size_t L = (size_t)c->layers, BT = (size_t)llama.B * llama.T, HS = (size_t)c->channels / c->heads;
	const size_t QD = (size_t)c->heads * HS, KVD = (size_t)c->kv_heads * HS;
	struct ferry_plan all, none, off, rot;
	struct ferry_exec_opts o = { .policy = "everything_saveable" };
	const struct ferry_plan_tensor *t;

	CHECK(ferry_model_plan(c, llama.B, llama.T, &o, &all) == FERRY_OK, "llama plan: %s", ferry_last_error());
	o.policy = "nothing_saveable";
	CHECK(ferry_model_plan(c, llama.B, llama.T, &o, &none) == FERRY_OK, "llama plan");
	o.policy = "qkv_proj_offloaded";
	CHECK(ferry_model_plan(c, llama.B, llama.T, &o, &off) == FERRY_OK, "llama plan");
	CHECK(all.n_recompute_ops == 0 && all.mem.host_total_bytes == 0, "llama: everything_saveable keeps all");
	CHECK(none.mem.peak_bytes < all.mem.peak_bytes && none.n_recompute_ops > 0, "llama: remat saves memory");
	/* q (QD wide), k and v (KVD wide) of every layer on the host */
	CHECK(off.mem.host_activation_bytes == L * BT * (QD + 2 * KVD) * 4, "llama qkv offloaded: host bytes %zu, "
	      "expected %zu", off.mem.host_activation_bytes, L * BT * (QD + 2 * KVD) * 4);
	t = plan_tensor(&off, "key_proj");
	CHECK(t && t->placement == FERRY_PLACE_OFFLOAD && t->stored && t->layer_bytes == BT * KVD * 4 &&
	      t->host_bytes == L * BT * KVD * 4, "llama: key_proj offloaded, %zu bytes per layer",
	      t ? t->layer_bytes : 0);
	/* the unrotated projections: not read by any backward while the rotated
	 * ones are kept, read by the rotation's recomputation otherwise */
	t = plan_tensor(&all, "query_unrotated");
	CHECK(t && !t->needed && !t->stored, "llama: query_unrotated not kept beside query_proj");
	o.policy = "custom:query_unrotated=offload,key_unrotated=offload,value_proj=device";
	CHECK(ferry_model_plan(c, llama.B, llama.T, &o, &rot) == FERRY_OK, "llama plan: %s", ferry_last_error());
	t = plan_tensor(&rot, "query_unrotated");
	CHECK(t && t->needed && t->stored && t->placement == FERRY_PLACE_OFFLOAD && t->host_bytes == L * BT * QD * 4,
	      "llama: query_unrotated offloaded for the rotation's recomputation");
	t = plan_tensor(&rot, "query_proj");
	CHECK(t && t->recomputed && !t->stored, "llama: query_proj recomputed from query_unrotated");
	o.policy = "save_only_these_names(mlp_activation)"; /* GPT-2's name */
	CHECK(ferry_model_plan(c, llama.B, llama.T, &o, &rot) == FERRY_ERR_INVALID &&
	      strstr(ferry_last_error(), "mlpwi_0"), "llama: a GPT-2 name refused, listing Llama's: %s",
	      ferry_last_error());
}

/* ---- the tutorial network ------------------------------------------------- */

static const struct ferry_tutorial_config tcfg = { .layers = 4, .rows = 8, .channels = 8, .train = true };

static void tutorial_train(const char *policy, double *loss, float *w1, float *w2)
{
	struct ferry_exec_opts o = { .policy = policy, .prefetch_depth = 1 };
	size_t nw = ferry_tutorial_weight_floats(&tcfg);
	float *a = TALLOC(float, nw), *b = TALLOC(float, nw), x[8 * 8];
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_tutorial_t t;
	Rng rng = rng_new(3);

	fill_uniform(&rng, a, (long)nw, -0.3f, 0.3f);
	fill_uniform(&rng, b, (long)nw, -0.3f, 0.3f);
	fill_uniform(&rng, x, 64, -1.0f, 1.0f);
	CHECK(ferry_tutorial_plan(&tcfg, &o, &plan) == FERRY_OK, "plan %s: %s", policy, ferry_last_error());
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "backend");
	CHECK(ferry_tutorial_create(be, &tcfg, &o, &t) == FERRY_OK, "create %s: %s", policy, ferry_last_error());
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "tutorial %s: peak %zu == plan %zu", policy,
	      ferry_backend_mem_peak(be), plan.mem.peak_bytes);
	CHECK(ferry_tutorial_set(t, a, b, x) == FERRY_OK, "set");
	for (int s = 0; s < STEPS; s++) {
		CHECK(ferry_tutorial_grad(t, &loss[s]) == FERRY_OK, "grad %s", ferry_last_error());
		CHECK(ferry_tutorial_sgd(t, 0.01f) == FERRY_OK, "sgd");
	}
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "tutorial %s: peak unchanged by steps", policy);
	CHECK(ferry_tutorial_get_weights(t, w1, w2) == FERRY_OK, "weights");
	ferry_tutorial_free(t);
	ferry_backend_close(be);
	free(a);
	free(b);
}

/* Every preset (names the tutorial lacks are ignored, as in MaxText) and
 * the tutorial's own policies. */
static void test_tutorial_policies(void)
{
	static const char *const own[] = {
		"save_only_these_names(y)", "save_and_offload_only_these_names([], [x])",
		"save_and_offload_only_these_names([y], [x])", "custom:x=offload,y=offload",
	};
	const char *pols[64];
	size_t n_pols = 0;

	for (int i = 0; i < ferry_policy_preset_count(); i++)
		pols[n_pols++] = ferry_policy_preset_name(i);
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		pols[n_pols++] = own[i];
	size_t nw = ferry_tutorial_weight_floats(&tcfg);
	double ref_loss[STEPS], loss[STEPS];
	float *rw1 = TALLOC(float, nw), *rw2 = TALLOC(float, nw), *w1 = TALLOC(float, nw),
	      *w2 = TALLOC(float, nw);

	tutorial_train("everything_saveable", ref_loss, rw1, rw2);
	CHECK(ref_loss[0] != ref_loss[STEPS - 1], "training changes the loss");
	for (size_t i = 0; i < n_pols; i++) {
		tutorial_train(pols[i], loss, w1, w2);
		CHECK(memcmp(loss, ref_loss, sizeof(loss)) == 0, "tutorial %s: losses differ", pols[i]);
		CHECK(memcmp(w1, rw1, nw * sizeof(float)) == 0 && memcmp(w2, rw2, nw * sizeof(float)) == 0,
		      "tutorial %s: weights differ", pols[i]);
	}
	free(rw1);
	free(rw2);
	free(w1);
	free(w2);
}

/* The gradient of sum(x @ w1^T @ w2^T) checked against a direct computation
 * for a one-layer network: the engine computes the right thing, not just
 * the same thing under every policy. */
static void test_tutorial_gradient(void)
{
	struct ferry_tutorial_config c = { .layers = 1, .rows = 3, .channels = 2, .train = false };
	struct ferry_exec_opts o = { .policy = "save_and_offload_only_these_names([], [x])" };
	float w1[8 * 2], w2[2 * 8], x[3 * 2], dw1[16], dw2[16];
	double loss, want = 0, dw2_00 = 0;
	ferry_backend_t be;
	ferry_tutorial_t t;
	Rng rng = rng_new(11);

	fill_uniform(&rng, w1, 16, -1, 1);
	fill_uniform(&rng, w2, 16, -1, 1);
	fill_uniform(&rng, x, 6, -1, 1);
	for (int r = 0; r < 3; r++)
		for (int h = 0; h < 8; h++) {
			double y = x[r * 2] * w1[h * 2] + x[r * 2 + 1] * w1[h * 2 + 1];

			for (int o2 = 0; o2 < 2; o2++)
				want += y * w2[o2 * 8 + h];
			if (h == 0)
				dw2_00 += y; /* d loss / d w2[0][0] = sum over rows of y[r][0] */
		}
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "backend");
	CHECK(ferry_tutorial_create(be, &c, &o, &t) == FERRY_OK, "create");
	CHECK(ferry_tutorial_set(t, w1, w2, x) == FERRY_OK, "set");
	CHECK(ferry_tutorial_grad(t, &loss) == FERRY_OK, "grad");
	CHECK(ferry_tutorial_get_grads(t, dw1, dw2) == FERRY_OK, "grads");
	CHECK(fabs(loss - want) < 1e-5 * (1 + fabs(want)), "loss %f want %f", loss, want);
	CHECK(fabs(dw2[0] - dw2_00) < 1e-5 * (1 + fabs(dw2_00)), "dw2[0][0] %f want %f", dw2[0], dw2_00);
	ferry_tutorial_free(t);
	ferry_backend_close(be);
}

/* Failures: host arena, device arena, bad policies. */
static void test_failures(void)
{
	struct ferry_exec_opts o = { .policy = "qkv_proj_offloaded", .prefetch_depth = 0 };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m = NULL;
	int nomem = 0, pool_fallbacks = 0;

	for (long k = 0; k < 2000; k++) {
		struct ferry_host_memory h = { 0 };
		ferry_status st;

		CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "backend");
		ferry_fault_fail_after(k);
		st = ferry_model_create(be, &gpt2.cfg, gpt2.B, gpt2.T, &o, &m);
		ferry_fault_fail_after(-1);
		if (m)
			ferry_model_host_memory(m, &h);
		ferry_model_free(m);
		m = NULL;
		CHECK(ferry_backend_mem_live(be) == 0, "allocation %ld: device memory returned", k);
		ferry_backend_close(be);
		/* the pinned pool failing is not an error: its buffers become
		 * pageable, and the model says so */
		if (st == FERRY_OK && h.pin_failed) {
			pool_fallbacks++;
			continue;
		}
		if (st == FERRY_OK)
			break;
		CHECK(st == FERRY_ERR_NOMEM, "allocation %ld fails as NOMEM: %d %s", k, st, ferry_last_error());
		nomem++;
	}
	CHECK(nomem > 20, "every host allocation of an offloading model can fail cleanly (%d)", nomem);
	CHECK(pool_fallbacks == 1, "the pinned pool's failure falls back to pageable memory, and shows (%d)",
	      pool_fallbacks);

	CHECK(ferry_model_plan(&gpt2.cfg, gpt2.B, gpt2.T, &o, &plan) == FERRY_OK, "plan");
	CHECK(ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = plan.mem.peak_bytes - 256 },
				 &be) == FERRY_OK, "small backend");
	CHECK(ferry_model_create(be, &gpt2.cfg, gpt2.B, gpt2.T, &o, &m) == FERRY_ERR_DEVICE_MEM && m == NULL,
	      "one unit short of the plan is refused");
	CHECK(ferry_backend_mem_live(be) == 0, "nothing left allocated");
	ferry_backend_close(be);
	CHECK(ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = plan.mem.peak_bytes }, &be) == FERRY_OK,
	      "exact backend");
	CHECK(ferry_model_create(be, &gpt2.cfg, gpt2.B, gpt2.T, &o, &m) == FERRY_OK, "exactly the plan fits");
	ferry_model_free(m);
	ferry_backend_close(be);

	o.policy = "save_only_these_names(nonsense)";
	CHECK(ferry_model_plan(&gpt2.cfg, gpt2.B, gpt2.T, &o, &plan) == FERRY_ERR_INVALID, "unknown name refused");
	CHECK(strstr(ferry_last_error(), "query_proj") != NULL, "lists the model's names: %s", ferry_last_error());
	o.policy = "custom:decoder_layer_input=remat";
	CHECK(ferry_model_plan(&gpt2.cfg, gpt2.B, gpt2.T, &o, &plan) == FERRY_ERR_INVALID, "input remat refused");
	o.policy = "everything_saveable";
	o.prefetch_depth = -1;
	CHECK(ferry_model_plan(&gpt2.cfg, gpt2.B, gpt2.T, &o, &plan) == FERRY_ERR_INVALID, "bad depth refused");
}

/* Layers of matmul (M) and gelu (G) over [B, T, C] tensors 0..n-1, tensor 0
 * the input, the last the output. */
#define BTC_T(nm) { .name = nm, .shape = { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } }
#define OP(k, o, a, b, p) { .kind = k, .out = { o, -1, -1 }, .in = { a, b, -1 }, .w = { { p, 0 }, { -1, 0 } } }
#define M(o, i) OP(FERRY_OP_MATMUL, o, i, -1, 0)
#define G(o, i) OP(FERRY_OP_GELU, o, i, -1, -1)
#define R(o, a, b) OP(FERRY_OP_RESIDUAL, o, a, b, -1)

static void plan_layer(const struct ferry_layer_decl *d, struct ferry_stack_plan *sp, size_t *width)
{
	struct ferry_dims dims = { { 0 } };

	dims.v[FERRY_DIM_B] = 2;
	dims.v[FERRY_DIM_T] = 8;
	dims.v[FERRY_DIM_C] = 16; /* a width of 1 KiB */
	dims.v[FERRY_DIM_L] = 3;
	*width = 2 * 8 * 16 * sizeof(float);
	CHECK(ferry_stack_plan_make(d, &dims, NULL, sp) == FERRY_OK, "%s: %s", d->model, ferry_last_error());
}

/* A GELU's input gradient takes its output's bytes (assigned by the GELU's
 * backward) only when the GELU alone reads it and it is not the layer
 * input; chains of GELUs share one buffer; a GELU making the layer output
 * writes into the output's gradient slot. */
static void test_in_place_grads(void)
{
	static const struct ferry_layer_decl chain = {
		.model = "chain", .n_tensors = 5,
		.tensors = { BTC_T("x"), BTC_T("y"), BTC_T("z1"), BTC_T("z2"), BTC_T("out") },
		.n_ops = 4, .ops = { M(1, 0), G(2, 1), G(3, 2), M(4, 3) }, .input = 0, .output = 4 };
	static const struct ferry_layer_decl twice = {
		.model = "twice", .n_tensors = 4, .tensors = { BTC_T("x"), BTC_T("y"), BTC_T("z"), BTC_T("out") },
		.n_ops = 3, .ops = { M(1, 0), G(2, 1), R(3, 2, 1) }, .input = 0, .output = 3 };
	static const struct ferry_layer_decl of_input = {
		.model = "of_input", .n_tensors = 3, .tensors = { BTC_T("x"), BTC_T("z"), BTC_T("out") },
		.n_ops = 2, .ops = { G(1, 0), M(2, 1) }, .input = 0, .output = 2 };
	static const struct ferry_layer_decl last = {
		.model = "last", .n_tensors = 3, .tensors = { BTC_T("x"), BTC_T("y"), BTC_T("out") },
		.n_ops = 2, .ops = { M(1, 0), G(2, 1) }, .input = 0, .output = 2 };
	struct ferry_stack_plan sp;
	size_t w;

	plan_layer(&chain, &sp, &w);
	CHECK(sp.grad_alias[1] == 3 && sp.grad_alias[2] == 3 && sp.grad_alias[3] == -1 &&
	      sp.grad_assign_ops == 0x6 && sp.grad_zero_op[1] == -1 && sp.grad_zero_op[2] == -1 &&
	      sp.grad_bytes == 2 * w, "chain: y and z1 in z2's bytes (%zu bytes)", sp.grad_bytes);
	plan_layer(&twice, &sp, &w);
	CHECK(sp.grad_alias[1] == -1 && sp.grad_assign_ops == 0 && sp.grad_bytes == 3 * w,
	      "y read twice: its own bytes (%zu)", sp.grad_bytes);
	plan_layer(&of_input, &sp, &w);
	CHECK(sp.grad_alias[0] == -1 && sp.grad_assign_ops == 0 && sp.grad_bytes == 2 * w,
	      "the layer input: its own slot (%zu)", sp.grad_bytes);
	plan_layer(&last, &sp, &w);
	CHECK(sp.grad_alias[1] == 2 && sp.grad_assign_ops == 0x2 && sp.grad_bytes == w && sp.io_grad_in_last_output,
	      "into the output's slot (%zu)", sp.grad_bytes);
}

int main(void)
{
	test_in_place_grads();
	test_gpt2_plans();
	test_llama_plans();
	test_policies(&gpt2);
	test_policies(&llama);
	test_tutorial_gradient();
	test_tutorial_policies();
	test_failures();
	return test_exit_code();
}
