/*
 * Optimizer-state offloading (ferry_exec_opts.optimizer): `stream`, master
 * weights and AdamW moments in host memory, each slice updated in a
 * two-slot device ring; `cpu`, the same state updated on the host by the
 * fused CPU AdamW, gradients down and weights up slice by slice.
 *  - Training GPT-2 and Llama for several steps, with clipping that bites
 *    on every step and on none, under two activation policies, gives
 *    losses, parameters and moments bit-identical to the state kept on the
 *    device, in both modes, and in `cpu` with the gradients kept on the
 *    device (device_grads: read through a host ring of 2 or 3 slots); the
 *    device peak and the host bytes allocated are the plan's in each;
 *  - the plan moves 12 bytes per parameter (master, m, v) to the host and
 *    keeps on the device only the compute copy, the gradients and the ring;
 *    with the gradients on the device the host's 4 bytes a parameter of
 *    gradients become D + 1 slots of a layer's, nothing else moving;
 *  - parameters and optimizer state written are read back the same.
 */
#include "ferry/model.h"
#include "test_util.h"

#include <string.h>

#define STEPS 4

struct tcase {
	const char *name;
	struct ferry_model_config cfg;
	const char *policy;
};

enum { B = 2, T = 16 };

struct result {
	float loss[STEPS];
	float *params, *mom, *var;
};

static void batch(const struct ferry_model_config *cfg, int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 11 + s * 5 + i / 3) % cfg->vocab;
		tg[i] = (in[i] * 7 + 1) % cfg->vocab;
	}
}

/* How a run places AdamW: where, and (optimizer cpu) the gradients kept
 * on the device, read through a host ring of grads_ring + 1 slots (0: a
 * host copy of every gradient). */
struct where {
	enum ferry_optim_place optimizer;
	int grads_ring;
	const char *name;
};

/* Trains STEPS steps with clip (0.05: the clipping scale is below 1 on
 * every step; 100: never), checking that the device peak and the host
 * bytes allocated are the plan's. */
static void train(const struct tcase *c, const struct where *w, float clip, struct result *r)
{
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, clip };
	struct ferry_exec_opts o = { .policy = c->policy, .optimizer = w->optimizer, .device_grads = w->grads_ring };
	struct ferry_host_memory h;
	struct ferry_plan plan;
	ferry_backend_t be;
	ferry_model_t m;
	int32_t in[B * T], tg[B * T];
	size_t n;

	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "open");
	CHECK(ferry_model_plan(&c->cfg, B, T, &o, &plan) == FERRY_OK, "%s %s plan: %s", c->name, w->name, ferry_last_error());
	CHECK(ferry_model_create(be, &c->cfg, B, T, &o, &m) == FERRY_OK, "%s create: %s", c->name,
	      ferry_last_error());
	CHECK(ferry_model_init_random(m, 11) == FERRY_OK, "init");
	n = ferry_model_num_params(m);
	r->params = TALLOC(float, n);
	r->mom = TALLOC(float, n);
	r->var = TALLOC(float, n);
	for (int s = 1; s <= STEPS; s++) {
		float norm;

		batch(&c->cfg, in, tg, s);
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &r->loss[s - 1], &norm) == FERRY_OK,
		      "%s step %d: %s", c->name, s, ferry_last_error());
		CHECK(clip < 1 ? norm > clip : norm < clip, "%s step %d: norm %g against the clip %g", c->name, s, norm,
		      clip);
	}
	ferry_model_host_memory(m, &h);
	CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes && h.allocated_bytes == plan.mem.host_alloc_bytes,
	      "%s %s: measured device peak %zu, host %zu == planned %zu, %zu", c->name, w->name,
	      ferry_backend_mem_peak(be), h.allocated_bytes, plan.mem.peak_bytes, plan.mem.host_alloc_bytes);
	CHECK(ferry_model_get_params(m, r->params) == FERRY_OK &&
		      ferry_model_get_opt_state(m, r->mom, r->var) == FERRY_OK,
	      "read back");
	ferry_model_free(m);
	ferry_backend_close(be);
}

static void free_result(struct result *r)
{
	free(r->params);
	free(r->mom);
	free(r->var);
}

static void check_same(const struct tcase *c)
{
	static const struct where dev = { FERRY_OPTIM_DEVICE, 0, "on the device" }, modes[] = {
		{ FERRY_OPTIM_STREAM, 0, "streamed" },
		{ FERRY_OPTIM_CPU, 0, "on host threads" },
		{ FERRY_OPTIM_CPU, 1, "on host threads, gradients on the device" },
		{ FERRY_OPTIM_CPU, 2, "on host threads, gradients on the device (3 slots)" },
	};
	static const float clips[2] = { 0.05f, 100.0f };
	struct result ref, host;
	size_t n = ferry_model_config_num_params(&c->cfg);

	for (int k = 0; k < 2; k++) {
		train(c, &dev, clips[k], &ref);
		for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
			const char *how = modes[i].name;

			train(c, &modes[i], clips[k], &host);
			CHECK(!memcmp(ref.loss, host.loss, sizeof(ref.loss)), "%s %s: the same losses", c->name, how);
			CHECK(!memcmp(ref.params, host.params, n * sizeof(float)), "%s %s: the same parameters", c->name,
			      how);
			CHECK(!memcmp(ref.mom, host.mom, n * sizeof(float)) && !memcmp(ref.var, host.var, n * sizeof(float)),
			      "%s %s: the same moments", c->name, how);
			printf("  %-28s %d steps, clip %g, loss %.5f -> %.5f, bit-identical with AdamW %s\n", c->name,
			       STEPS, clips[k], host.loss[0], host.loss[STEPS - 1], how);
			free_result(&host);
		}
		free_result(&ref);
	}
}

/* Floats in a layer's slice of every stacked parameter, each rounded up
 * to 64 (a slot of the host gradient ring). */
static size_t layer_slot_floats(const struct ferry_model_config *cfg)
{
	size_t n = 0;

	for (int q = 0; q < ferry_model_param_tensors(cfg); q++) {
		struct ferry_param_info pi;

		if (ferry_model_param_info(cfg, q, &pi) == FERRY_OK && pi.present && pi.layers)
			n += (pi.layer_numel + 63) / 64 * 64;
	}
	return n;
}

/* The gradients kept on the device: the host copy of every gradient (4
 * bytes a parameter) becomes D + 1 slots of a layer's; nothing else
 * moves. */
static void check_plan_device_grads(const struct tcase *c, const struct ferry_plan *cpu)
{
	struct ferry_exec_opts o = { .policy = c->policy, .optimizer = FERRY_OPTIM_CPU };
	const size_t n = ferry_model_config_num_params(&c->cfg), slot = layer_slot_floats(&c->cfg) * sizeof(float);
	struct ferry_plan p;

	for (o.device_grads = 1; o.device_grads <= 3; o.device_grads += 2) {
		CHECK(ferry_model_plan(&c->cfg, B, T, &o, &p) == FERRY_OK, "device grads plan: %s", ferry_last_error());
		CHECK(p.mem.host_kind_bytes[FERRY_TK_GRAD] == (size_t)(o.device_grads + 1) * slot &&
			      p.mem.host_total_bytes == cpu->mem.host_total_bytes - 4 * n + (size_t)(o.device_grads + 1) * slot &&
			      p.mem.peak_bytes == cpu->mem.peak_bytes && strstr(p.place, ",adam.grads=device:stream("),
		      "%s, gradients on the device (D %d): host gradients %zu bytes (%d slots of %zu), total %zu (host copy: "
		      "%zu), peak %zu (%zu), place %s", c->name, o.device_grads, p.mem.host_kind_bytes[FERRY_TK_GRAD],
		      o.device_grads + 1, slot, p.mem.host_total_bytes, cpu->mem.host_total_bytes, p.mem.peak_bytes,
		      cpu->mem.peak_bytes, p.place);
	}
}

/* 12 bytes per parameter leave the device for the host; the device keeps
 * a compute copy (4 bytes per parameter on the CPU backend) and the ring. */
static void check_plan(const struct tcase *c)
{
	struct ferry_exec_opts o = { .policy = c->policy }, s = o;
	struct ferry_plan pd, ps, pc;
	size_t n = ferry_model_config_num_params(&c->cfg);

	s.optimizer = FERRY_OPTIM_STREAM;
	CHECK(ferry_model_plan(&c->cfg, B, T, &o, &pd) == FERRY_OK && ferry_model_plan(&c->cfg, B, T, &s, &ps) ==
		      FERRY_OK, "plans");
	CHECK(ps.mem.host_kind_bytes[FERRY_TK_OPT_STATE] == 8 * n && ps.mem.host_kind_bytes[FERRY_TK_WEIGHT] == 4 * n,
	      "%s: master weights and moments on the host (%zu + %zu bytes for %zu parameters)", c->name,
	      ps.mem.host_kind_bytes[FERRY_TK_WEIGHT], ps.mem.host_kind_bytes[FERRY_TK_OPT_STATE], n);
	CHECK(pd.mem.host_kind_bytes[FERRY_TK_OPT_STATE] == 0, "%s: none there by default", c->name);
	s.optimizer = FERRY_OPTIM_CPU;
	CHECK(ferry_model_plan(&c->cfg, B, T, &s, &pc) == FERRY_OK, "cpu plan");
	CHECK(pc.mem.host_kind_bytes[FERRY_TK_OPT_STATE] == 8 * n && pc.mem.host_kind_bytes[FERRY_TK_GRAD] == 4 * n &&
		      pc.mem.peak_bytes < ps.mem.peak_bytes,
	      "%s, AdamW on host threads: state and a gradient copy on the host, no ring on the device", c->name);
	CHECK(ps.mem.peak_bytes < pd.mem.peak_bytes, "%s: the device needs less (%zu < %zu)", c->name,
	      ps.mem.peak_bytes, pd.mem.peak_bytes);
	check_plan_device_grads(c, &pc);
	printf("  %-28s device %zu -> %zu bytes, host +%zu\n", c->name, pd.mem.peak_bytes, ps.mem.peak_bytes,
	       ps.mem.host_kind_bytes[FERRY_TK_OPT_STATE] + ps.mem.host_kind_bytes[FERRY_TK_WEIGHT]);
}

/* What is written is read back, with the state on the host. */
static void check_round_trip(const struct tcase *c)
{
	struct ferry_exec_opts o = { .policy = c->policy, .optimizer = FERRY_OPTIM_STREAM };
	ferry_backend_t be;
	ferry_model_t m;
	size_t n = ferry_model_config_num_params(&c->cfg);
	float *a = TALLOC(float, n), *b = TALLOC(float, n), *x = TALLOC(float, n), *y = TALLOC(float, n);

	for (size_t i = 0; i < n; i++) {
		a[i] = (float)i * 1e-3f;
		b[i] = 1.0f / (float)(i + 1);
	}
	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK &&
		      ferry_model_create(be, &c->cfg, B, T, &o, &m) == FERRY_OK, "create");
	CHECK(ferry_model_set_params(m, a) == FERRY_OK && ferry_model_get_params(m, x) == FERRY_OK &&
		      !memcmp(a, x, n * sizeof(float)), "%s: parameters round-trip", c->name);
	CHECK(ferry_model_set_opt_state(m, b, a) == FERRY_OK && ferry_model_get_opt_state(m, x, y) == FERRY_OK &&
		      !memcmp(b, x, n * sizeof(float)) && !memcmp(a, y, n * sizeof(float)),
	      "%s: optimizer state round-trips", c->name);
	ferry_model_free(m);
	ferry_backend_close(be);
	free(a);
	free(b);
	free(x);
	free(y);
}

int main(void)
{
	const struct tcase cases[] = {
		{ "gpt2 everything_saveable",
		  { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 3, .heads = 2, .channels = 32 },
		  "everything_saveable" },
		{ "gpt2 qkv_proj_offloaded",
		  { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 3, .heads = 2, .channels = 32 },
		  "qkv_proj_offloaded" },
		{ "llama minimal_offloaded",
		  { .arch = "llama", .max_seq = 16, .vocab = 67, .layers = 2, .heads = 4, .kv_heads = 2,
		    .channels = 32, .ffn = 48 },
		  "minimal_offloaded" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tcase c = cases[i];

		CHECK(ferry_model_config_complete(&c.cfg) == FERRY_OK, "%s config: %s", c.name, ferry_last_error());
		check_same(&c);
		check_plan(&c);
		check_round_trip(&c);
	}
	return test_exit_code();
}
