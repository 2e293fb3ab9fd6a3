/*
 * The prepared schedule of a training step, on GPT-2 and Llama under
 * several policies:
 *  - its shape: one host synchronisation; every layer op once per layer
 *    forward; a device-to-host copy per offloaded tensor per layer and a
 *    host-to-device copy for every layer not left resident; a "gradients
 *    complete" marker per layer; every task labelled;
 *  - replaying it (step_submit + step_finish) gives parameters, moments and
 *    losses bit-identical to the step taken call by call (forward,
 *    zero_grad, backward, update), with exactly one host synchronisation
 *    per step, counted by the backend.
 */
#include "ferry/model.h"
#include "test_util.h"

#include <string.h>

#define STEPS 3

struct scase {
	const char *name;
	struct ferry_model_config cfg;
	int B, T;
	const char *policy;
};

static int count(const struct ferry_schedule_info *s, const char *kind, const char *stream, int layer)
{
	int n = 0;

	for (int i = 0; i < s->n_tasks; i++)
		n += !strcmp(s->tasks[i].kind, kind) && (!stream || !strcmp(s->tasks[i].stream, stream)) &&
		     (layer < -1 || s->tasks[i].layer == layer);
	return n;
}

static void check_shape(const struct scase *c)
{
	struct ferry_exec_opts o = { .policy = c->policy };
	struct ferry_schedule_info s;
	struct ferry_plan p;
	int offloaded = 0, layer_ops = 0;

	CHECK(ferry_model_plan(&c->cfg, c->B, c->T, &o, &p) == FERRY_OK, "%s: plan: %s", c->name, ferry_last_error());
	CHECK(ferry_model_schedule(&c->cfg, c->B, c->T, &o, &s) == FERRY_OK, "%s: schedule: %s", c->name,
	      ferry_last_error());
	if (test_failed())
		return;
	for (int t = 0; t < p.n_tensors; t++)
		offloaded += p.tensors[t].stored && p.tensors[t].placement == FERRY_PLACE_OFFLOAD;
	for (int i = 0; i < s.n_tasks; i++)
		layer_ops += s.tasks[i].layer == 0 && !strcmp(s.tasks[i].program, "forward") &&
			     !strncmp(s.tasks[i].kind, "op ", 3);
	CHECK(s.host_syncs == 1 && s.sync_after > 0 && s.sync_after < s.n_tasks, "%s: one synchronisation",
	      c->name);
	CHECK(layer_ops == p.n_ops, "%s: layer 0 runs %d ops forward, the layer has %d", c->name, layer_ops, p.n_ops);
	CHECK(count(&s, "copy", "d2h", -2) == offloaded * p.L, "%s: %d copies out for %d offloaded x %d layers",
	      c->name, count(&s, "copy", "d2h", -2), offloaded, p.L);
	CHECK(count(&s, "copy", "h2d", -2) == offloaded * (p.L > p.ring_slots ? p.L - p.ring_slots : 0),
	      "%s: %d prefetches for %d offloaded x %d non-resident layers", c->name, count(&s, "copy", "h2d", -2),
	      offloaded, p.L - p.ring_slots);
	for (int l = 0; l < p.L; l++)
		CHECK(count(&s, "grads done", "compute", l) == 1, "%s: layer %d's gradients-complete marker", c->name, l);
	CHECK(count(&s, "op recompute", NULL, -2) == 0, "kinds are op names");
	for (int i = 0; i < s.n_tasks; i++)
		CHECK(s.tasks[i].what[0] && s.tasks[i].stream[0], "%s: task %d (%s) is labelled", c->name, i,
		      s.tasks[i].kind);
	printf("%s, %s: %d tasks, %d events, %d offloaded, sync after task %d\n", c->name, c->policy, s.n_tasks,
	       s.n_events, offloaded, s.sync_after);
	ferry_schedule_info_free(&s);
}

/* STEPS training steps, by the prepared step or call by call; the final
 * parameters and moments, and the losses. */
static void train(ferry_backend_t be, const struct scase *c, bool prepared, float *params, float *mom, float *var,
		  float *loss, long *syncs_per_step)
{
	struct ferry_exec_opts o = { .policy = c->policy };
	struct ferry_adamw opt = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f }; /* a clip that bites */
	int N = c->B * c->T;
	int32_t *in = TALLOC(int32_t, N), *tg = TALLOC(int32_t, N);
	Rng rng = rng_new(7);
	ferry_model_t m = NULL;

	CHECK(ferry_model_create(be, &c->cfg, c->B, c->T, &o, &m) == FERRY_OK, "%s: create: %s", c->name,
	      ferry_last_error());
	if (!m)
		goto out;
	CHECK(ferry_model_init_random(m, 11) == FERRY_OK, "init");
	for (int step = 1; step <= STEPS; step++) {
		long before;

		for (int i = 0; i < N; i++) {
			in[i] = rng_int(&rng, c->cfg.vocab);
			tg[i] = rng_int(&rng, c->cfg.vocab);
		}
		before = ferry_backend_host_syncs(be);
		if (prepared) {
			CHECK(ferry_model_step_submit(m, in, tg, c->B, c->T) == FERRY_OK, "submit: %s", ferry_last_error());
			CHECK(ferry_model_step_finish(m, &opt, step, &loss[step - 1], NULL) == FERRY_OK, "finish: %s",
			      ferry_last_error());
			*syncs_per_step = ferry_backend_host_syncs(be) - before;
		} else {
			CHECK(ferry_model_forward(m, in, tg, c->B, c->T, &loss[step - 1]) == FERRY_OK, "forward");
			CHECK(ferry_model_zero_grad(m) == FERRY_OK, "zero_grad");
			CHECK(ferry_model_backward(m) == FERRY_OK, "backward");
			CHECK(ferry_model_update(m, &opt, step, NULL) == FERRY_OK, "update");
		}
	}
	CHECK(ferry_model_get_params(m, params) == FERRY_OK, "params");
	CHECK(ferry_model_get_opt_state(m, mom, var) == FERRY_OK, "moments");
out:
	ferry_model_free(m);
	free(in);
	free(tg);
}

static void check_replay(ferry_backend_t be, const struct scase *c)
{
	struct ferry_model_config full = c->cfg;
	size_t n;
	long syncs = -1;

	CHECK(ferry_model_config_complete(&full) == FERRY_OK, "config");
	n = ferry_model_config_num_params(&full);
	float *p1 = TALLOC(float, n), *m1 = TALLOC(float, n), *v1 = TALLOC(float, n);
	float *p2 = TALLOC(float, n), *m2 = TALLOC(float, n), *v2 = TALLOC(float, n);
	float l1[STEPS], l2[STEPS];

	train(be, c, false, p1, m1, v1, l1, &syncs);
	train(be, c, true, p2, m2, v2, l2, &syncs);
	CHECK(!memcmp(p1, p2, n * sizeof(float)) && !memcmp(m1, m2, n * sizeof(float)) &&
	      !memcmp(v1, v2, n * sizeof(float)) && !memcmp(l1, l2, sizeof(l1)),
	      "%s, %s: the prepared step equals the step call by call, bit for bit", c->name, c->policy);
	CHECK(syncs == 1, "%s: %ld host synchronisations in a step", c->name, syncs);
	printf("%s, %s: replay equals calls over %d steps (loss %.6f), %ld host sync per step\n", c->name,
	       c->policy, STEPS, l2[STEPS - 1], syncs);
	free(p1), free(m1), free(v1), free(p2), free(m2), free(v2);
}

int main(void)
{
	const struct ferry_model_config gpt2 = { .arch = "gpt2", .max_seq = 16, .vocab = 29, .layers = 5,
						 .heads = 2, .channels = 16 };
	const struct ferry_model_config llama = { .arch = "llama", .max_seq = 16, .vocab = 31, .layers = 5,
						  .heads = 4, .kv_heads = 2, .channels = 16, .ffn = 24 };
	const struct scase cases[] = {
		{ "gpt2", gpt2, 2, 8, "everything_saveable" },
		{ "gpt2", gpt2, 2, 8, "qkv_proj_offloaded" },
		{ "gpt2", gpt2, 2, 8, "nothing_saveable" },
		{ "gpt2", gpt2, 2, 8, "custom:decoder_layer_input=offload,mlpwi=offload" },
		{ "llama", llama, 2, 8, "everything_saveable" },
		{ "llama", llama, 2, 8, "minimal_offloaded" },
		{ "llama", llama, 2, 8, "custom:query_proj=offload,mlpwi_0=offload,mlpwi_1=offload,decoder_layer_input=offload" },
	};
	ferry_backend_t be = NULL;

	if (ferry_backend_open("cpu", &(struct ferry_backend_opts){ .device_mem = (size_t)64 << 20 }, &be) != FERRY_OK) {
		fprintf(stderr, "cpu backend: %s\n", ferry_last_error());
		return 1;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		check_shape(&cases[i]);
		check_replay(be, &cases[i]);
	}
	ferry_backend_close(be);
	return test_exit_code();
}
