/*
 * Parameter offloading (ferry_exec_opts.offload_params): the layers'
 * weights on the host, loaded into a device ring ahead of use in forward
 * and backward, each layer's gradients sent to the host when its backward
 * ends, AdamW's state on the host (stream or cpu).
 *  - GPT-2 and Llama trained several steps with clipping that bites, under
 *    every preset policy, both optimizer modes and two prefetch depths,
 *    give losses, parameters, moments and the next gradients bit-identical
 *    to everything on the device, and so do the gradients of a second
 *    batch's backward added to them without zeroing (micro-batches: the
 *    host's gradients come back into the ring for the backward to add to);
 *  - the device arena's measured peak equals the plan's, which holds only
 *    the rings of the stacked weights and gradients;
 *  - with the embeddings, head and final norm streamed too
 *    (offload_embeddings: one device edge region, loaded before the
 *    prologue and the epilogue), GPT-2 (tied head), Llama (its own head)
 *    and Llama with a tied head give the same bits, under every preset
 *    policy and both optimizer modes; the plan lists the region, sized
 *    for the larger stage, and its peak is the measured one, smaller by
 *    exactly the unstacked copies and gradients less the region;
 *  - bad combinations are refused before anything is allocated.
 */
#include "ferry/model.h"
#include "ferry/policy.h"
#include "test_util.h"

#include <string.h>

#define STEPS 3

enum { B = 2, T = 16 };

struct result {
	float loss[STEPS];
	float *params, *mom, *var, *grads, *summed;
};

static void batch(const struct ferry_model_config *cfg, int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 13 + s * 7 + i / 5) % cfg->vocab;
		tg[i] = (in[i] * 5 + 3) % cfg->vocab;
	}
}

static void train(const char *name, const struct ferry_model_config *cfg, const struct ferry_exec_opts *o,
		  struct result *r)
{
	/* grad_clip 0.05: the clipping scale is below 1 on every step */
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f };
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m;
	int32_t in[B * T], tg[B * T];
	size_t n = ferry_model_config_num_params(cfg);
	float norm;

	CHECK(ferry_model_plan(cfg, B, T, o, &plan) == FERRY_OK, "%s plan: %s", name, ferry_last_error());
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "open");
	CHECK(ferry_model_create(be, cfg, B, T, o, &m) == FERRY_OK, "%s create: %s", name, ferry_last_error());
	CHECK(ferry_model_init_random(m, 5) == FERRY_OK, "init");
	r->params = TALLOC(float, n);
	r->mom = TALLOC(float, n);
	r->var = TALLOC(float, n);
	r->grads = TALLOC(float, n);
	r->summed = TALLOC(float, n);
	for (int s = 1; s <= STEPS; s++) {
		batch(cfg, in, tg, s);
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &r->loss[s - 1], &norm) == FERRY_OK,
		      "%s step %d: %s", name, s, ferry_last_error());
		CHECK(norm > opt.grad_clip, "%s step %d: clipping bites (norm %g)", name, s, norm);
	}
	/* the gradients of one more batch, through the separate calls */
	batch(cfg, in, tg, STEPS + 1);
	CHECK(ferry_model_forward(m, in, tg, B, T, NULL) == FERRY_OK && ferry_model_zero_grad(m) == FERRY_OK &&
		      ferry_model_backward(m) == FERRY_OK, "%s: backward: %s", name, ferry_last_error());
	CHECK(ferry_model_get_params(m, r->params) == FERRY_OK && ferry_model_get_opt_state(m, r->mom, r->var) ==
		      FERRY_OK && ferry_model_get_grads(m, r->grads) == FERRY_OK, "read back");
	batch(cfg, in, tg, STEPS + 2);
	CHECK(ferry_model_forward(m, in, tg, B, T, NULL) == FERRY_OK && ferry_model_backward(m) == FERRY_OK &&
		      ferry_model_get_grads(m, r->summed) == FERRY_OK, "%s: a second backward: %s", name, ferry_last_error());
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "%s: measured peak %zu == plan %zu", name,
	      ferry_backend_mem_peak(be), plan.mem.peak_bytes);
	ferry_model_free(m);
	ferry_backend_close(be);
}

static void result_free(struct result *r)
{
	free(r->params);
	free(r->mom);
	free(r->var);
	free(r->grads);
	free(r->summed);
}

static void check_same(const char *name, const struct ferry_model_config *cfg, const struct result *ref,
		       const struct result *got)
{
	size_t n = ferry_model_config_num_params(cfg) * sizeof(float);

	CHECK(!memcmp(ref->loss, got->loss, sizeof(ref->loss)), "%s: the same losses", name);
	CHECK(!memcmp(ref->params, got->params, n), "%s: the same parameters", name);
	CHECK(!memcmp(ref->mom, got->mom, n) && !memcmp(ref->var, got->var, n), "%s: the same moments", name);
	CHECK(!memcmp(ref->grads, got->grads, n), "%s: the same gradients", name);
	CHECK(!memcmp(ref->summed, got->summed, n), "%s: the same sum of two batches' gradients", name);
}

/* Every preset policy x {stream, cpu} x prefetch {1, deeper than the
 * stack} against the device's AdamW with nothing offloaded (with the
 * embeddings streamed too: every preset x both modes, the prefetch depth
 * alternating; only those when !layers_too). */
static void check_model(const char *model, const struct ferry_model_config *cfg, bool layers_too)
{
	struct ferry_exec_opts dev = { 0 };
	struct result ref;
	char name[160];
	int runs = 0, edge_runs = 0;

	train(model, cfg, &dev, &ref);
	for (int i = 0; i < ferry_policy_preset_count(); i++)
		for (int mode = FERRY_OPTIM_STREAM; mode <= FERRY_OPTIM_CPU; mode++)
			for (int depth = 1; depth <= 8; depth += 7) {
				struct ferry_exec_opts o = { .policy = ferry_policy_preset_name(i),
							     .optimizer = (enum ferry_optim_place)mode,
							     .offload_params = true, .param_prefetch = depth };
				struct result got;

				o.offload_embeddings = depth == (i % 2 ? 8 : 1);
				if (!layers_too && !o.offload_embeddings)
					continue;
				snprintf(name, sizeof(name), "%s %s, optimizer %s, prefetch %d%s", model, o.policy,
					 mode == FERRY_OPTIM_STREAM ? "stream" : "cpu", depth,
					 o.offload_embeddings ? ", embeddings offloaded" : "");
				train(name, cfg, &o, &got);
				check_same(name, cfg, &ref, &got);
				result_free(&got);
				runs++;
				edge_runs += o.offload_embeddings;
			}
	printf("  %-10s %d runs with parameters offloaded (%d with the embeddings too): loss %.5f -> %.5f, "
	       "bit-identical\n", model, runs, edge_runs, ref.loss[0], ref.loss[STEPS - 1]);
	result_free(&ref);
}

/* Bytes of the named parameters' fp32 copies and gradients, each at the
 * arena's 256-byte alignment, as an edge region lays out a stage. */
static size_t stage_bytes(const struct ferry_model_config *cfg, const char *const *names)
{
	size_t bytes = 0;

	for (int k = 0; names[k]; k++)
		for (int p = 0; p < ferry_model_param_tensors(cfg); p++) {
			struct ferry_param_info pi;

			CHECK(ferry_model_param_info(cfg, p, &pi) == FERRY_OK, "param info");
			if (pi.present && !strcmp(pi.name, names[k]))
				bytes += 2 * ((pi.numel * sizeof(float) + 255) / 256 * 256);
		}
	return bytes;
}

static bool has_buffer(const struct ferry_plan *plan, const char *name, size_t *bytes)
{
	for (int i = 0; i < plan->n_buffers; i++)
		if (!strcmp(plan->buffers[i].name, name)) {
			*bytes = plan->buffers[i].bytes;
			return true;
		}
	return false;
}

/* With the embeddings streamed: the edge region replaces the unstacked
 * copy and gradients, as large as the larger stage's parameters (named
 * here), and the device peak falls by exactly the difference. */
static void check_edge_plan(const char *model, const struct ferry_model_config *cfg, const char *const *prologue,
			    const char *const *epilogue)
{
	struct ferry_exec_opts off = { .optimizer = FERRY_OPTIM_CPU, .offload_params = true }, edge = off;
	struct ferry_plan a, b;
	size_t pro = stage_bytes(cfg, prologue), epi = stage_bytes(cfg, epilogue), unstacked = 0, bytes = 0;

	for (int p = 0; p < ferry_model_param_tensors(cfg); p++) {
		struct ferry_param_info pi;

		CHECK(ferry_model_param_info(cfg, p, &pi) == FERRY_OK, "param info");
		unstacked += pi.present && !pi.layers ? pi.numel : 0;
	}
	edge.offload_embeddings = true;
	CHECK(ferry_model_plan(cfg, B, T, &off, &a) == FERRY_OK && ferry_model_plan(cfg, B, T, &edge, &b) == FERRY_OK,
	      "%s: plans: %s", model, ferry_last_error());
	CHECK(a.edge_bytes == 0 && b.edge_bytes == (pro > epi ? pro : epi), "%s: the edge region %zu bytes, the "
	      "larger of the prologue's %zu and the epilogue's %zu", model, b.edge_bytes, pro, epi);
	CHECK(has_buffer(&b, "edge region (embeddings, head)", &bytes) && bytes == b.edge_bytes,
	      "%s: the plan lists the edge region", model);
	CHECK(has_buffer(&a, "unstacked grads", &bytes) && !has_buffer(&b, "unstacked grads", &bytes) &&
		      !has_buffer(&b, "unstacked params (compute copy)", &bytes), "%s: no unstacked device copy", model);
	CHECK(b.edge_saved_bytes == (int64_t)(2 * ((unstacked * sizeof(float) + 255) / 256 * 256)) - (int64_t)b.edge_bytes &&
		      (int64_t)a.mem.peak_bytes - (int64_t)b.mem.peak_bytes == b.edge_saved_bytes,
	      "%s: the peak falls by what the region saves (%zu -> %zu, %lld)", model, a.mem.peak_bytes,
	      b.mem.peak_bytes, (long long)b.edge_saved_bytes);
	CHECK(!memcmp(a.mem.host_kind_bytes, b.mem.host_kind_bytes, sizeof(a.mem.host_kind_bytes)),
	      "%s: the host held them already", model);
	printf("  %-10s edge region %zu bytes (prologue %zu, epilogue %zu), peak %zu -> %zu\n", model, b.edge_bytes,
	       pro, epi, a.mem.peak_bytes, b.mem.peak_bytes);
}

/* The device keeps the rings, not the layers' weights and gradients. */
static void check_plan(const char *model, const struct ferry_model_config *cfg)
{
	struct ferry_exec_opts cpu = { .optimizer = FERRY_OPTIM_CPU }, off = cpu;
	struct ferry_plan a, b;
	size_t n = ferry_model_config_num_params(cfg), stacked = 0, unstacked = 0;

	for (int p = 0; p < ferry_model_param_tensors(cfg); p++) {
		struct ferry_param_info pi;

		CHECK(ferry_model_param_info(cfg, p, &pi) == FERRY_OK, "param info");
		if (pi.present && pi.layers)
			stacked += pi.layer_numel;
		else if (pi.present)
			unstacked += pi.numel;
	}
	off.offload_params = true;
	CHECK(ferry_model_plan(cfg, B, T, &cpu, &a) == FERRY_OK && ferry_model_plan(cfg, B, T, &off, &b) == FERRY_OK,
	      "plans");
	CHECK(b.param_ring_slots == 2 && a.param_ring_slots == 0, "%s: two weight slots at depth 1", model);
	/* fp32 on the CPU: two slots of one layer (each parameter rounded up to
	 * 64 elements) plus the unstacked parameters, weights and gradients */
	CHECK(b.mem.device_kind_bytes[FERRY_TK_WEIGHT_COPY] >= 4 * (2 * stacked + unstacked) &&
		      b.mem.device_kind_bytes[FERRY_TK_WEIGHT_COPY] < 4 * (2 * stacked + unstacked) + 4096,
	      "%s: device weights %zu bytes for %zu + 2 x %zu parameters", model,
	      b.mem.device_kind_bytes[FERRY_TK_WEIGHT_COPY], unstacked, stacked);
	CHECK(b.mem.host_kind_bytes[FERRY_TK_WEIGHT] == 4 * n && b.mem.host_kind_bytes[FERRY_TK_GRAD] == 4 * n &&
		      b.mem.host_kind_bytes[FERRY_TK_OPT_STATE] == 8 * n, "%s: the host holds all of it", model);
	CHECK(b.mem.peak_bytes < a.mem.peak_bytes, "%s: the device needs less (%zu < %zu)", model, b.mem.peak_bytes,
	      a.mem.peak_bytes);
	printf("  %-10s device weights %zu -> %zu bytes, peak %zu -> %zu\n", model,
	       a.mem.device_kind_bytes[FERRY_TK_WEIGHT_COPY], b.mem.device_kind_bytes[FERRY_TK_WEIGHT_COPY],
	       a.mem.peak_bytes, b.mem.peak_bytes);
}

static void check_refused(const struct ferry_model_config *cfg)
{
	struct ferry_exec_opts o = { .offload_params = true };
	struct ferry_plan plan;

	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "--offload-optimizer stream or cpu"),
	      "the device optimizer without its master weights is refused: %s", ferry_last_error());
	o.optimizer = FERRY_OPTIM_CPU;
	o.param_prefetch = 65;
	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_ERR_INVALID, "prefetch 65 refused");
	o.offload_params = false;
	o.param_prefetch = 2;
	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_ERR_INVALID, "--param-prefetch alone refused");
	o.param_prefetch = 0;
	o.offload_embeddings = true;
	CHECK(ferry_model_plan(cfg, B, T, &o, &plan) == FERRY_ERR_INVALID &&
		      strstr(ferry_last_error(), "it needs --offload-params"),
	      "--offload-embeddings alone refused: %s", ferry_last_error());
}

int main(void)
{
	struct ferry_model_config gpt2 = { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 4, .heads = 2,
					   .channels = 32 };
	struct ferry_model_config llama = { .arch = "llama", .max_seq = 16, .vocab = 67, .layers = 3, .heads = 4,
					    .kv_heads = 2, .channels = 32, .ffn = 48 };

	struct ferry_model_config tied = llama;
	static const char *const gpt2_pro[] = { "wte", "wpe", NULL }, *const gpt2_epi[] = { "lnfw", "lnfb", "wte", NULL };
	static const char *const llama_pro[] = { "embed_tokens", NULL }, *const llama_epi[] = { "norm", "lm_head", NULL };
	static const char *const tied_epi[] = { "norm", "embed_tokens", NULL };

	tied.tie_embeddings = 1;
	CHECK(ferry_model_config_complete(&gpt2) == FERRY_OK && ferry_model_config_complete(&llama) == FERRY_OK &&
		      ferry_model_config_complete(&tied) == FERRY_OK, "configs");
	check_refused(&gpt2);
	check_plan("gpt2", &gpt2);
	check_plan("llama", &llama);
	check_edge_plan("gpt2", &gpt2, gpt2_pro, gpt2_epi);
	check_edge_plan("llama", &llama, llama_pro, llama_epi);
	check_edge_plan("llama tied", &tied, llama_pro, tied_epi);
	check_model("gpt2", &gpt2, true);
	check_model("llama", &llama, true);
	check_model("llama tied", &tied, false);
	return test_exit_code();
}
