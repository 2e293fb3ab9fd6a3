/*
 * Tiles of tokens (--mlp-tile, --loss-tile) on GPT-2, on Llama
 * (grouped-query attention, its own head) and on Gemma 2 (the logits
 * soft-capped between the head and the loss, per tile):
 *  - losses and gradients of STEPS training steps agree with the untiled
 *    run's within 1e-6 of their largest magnitude (each step on the same
 *    parameters: the untiled model's, updated by AdamW), with tiles
 *    that do not divide the batch's rows, under policies that keep,
 *    recompute and offload around the tiled MLP, at the planned batch and
 *    at a smaller one (a shorter last tile);
 *  - the plan counts one tile: the logits buffer holds tile x Vp values
 *    and each hidden activation of the MLP tile x its width (worked out
 *    here from the shapes, not read from ferry), the device arena's
 *    measured peak equals the plan's, and the tiled plan is smaller;
 *  - the last tile's probabilities are the untiled ones; rows before it
 *    are refused;
 *  - bad tiles are refused by name.
 */
#include "ferry/model.h"
#include "ferry/policy.h"
#include "plan/stack_plan.h"
#include "test_util.h"

#define STEPS 3
#define ALIGN 256

struct tmodel {
	const char *name;
	struct ferry_model_config cfg;
	int B, T;
	int hidden;        /* the MLP's hidden width (GPT-2: 4C) */
	int n_hidden;      /* its hidden activations (GPT-2: mlpwi and mlp_activation) */
	const char *own;   /* a policy naming its tensors: the MLP's input offloaded */
};

static const struct tmodel gpt2 = {
	"gpt2", { .max_seq = 16, .vocab = 37, .padded_vocab = 64, .layers = 3, .heads = 2, .channels = 16 },
	2, 12, 64, 2, "save_and_offload_only_these_names([mlpwi], [pre_mlp_norm])",
};

static const struct tmodel llama = {
	"llama", { .arch = "llama", .max_seq = 16, .vocab = 37, .layers = 3, .heads = 4, .kv_heads = 2,
		   .channels = 32, .ffn = 48 },
	2, 12, 48, 3, "save_and_offload_only_these_names([mlpwi_0], [post_self_attention_norm])",
};

/* Gemma 2: its logits soft-capped between the head and the loss (a cap of
 * 0.5, so the cap bends them), a norm after the MLP, the head tied. */
static const struct tmodel gemma2 = {
	"gemma2", { .arch = "gemma2", .max_seq = 16, .vocab = 37, .layers = 3, .heads = 4, .kv_heads = 2,
		    .channels = 32, .ffn = 48, .final_softcap = 0.5f },
	2, 12, 48, 3, "save_and_offload_only_these_names([mlpwi_0], [pre_ffw_norm])",
};

/* What a tiled run is measured by: its plan, and the largest relative
 * differences from the untiled run over the steps. */
struct diff {
	struct ferry_plan plan;
	double loss, grads, probs;
};

static void make_tokens(const struct tmodel *tm, int B, int T, int32_t *in, int32_t *tg, int step)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 7 + step * 3 + i / 5) % tm->cfg.vocab;
		tg[i] = (i * 11 + step * 5 + 1) % tm->cfg.vocab;
	}
}

/* max |a - b| over max |b|. */
static double rel_err(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;

	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - (double)b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? d / m : d;
}

/* One step of both models on the same parameters (the untiled model's,
 * which then takes an AdamW step): the loss and the gradients compared. */
static bool step_both(ferry_model_t ref, ferry_model_t m, const int32_t *in, const int32_t *tg, int B, int T, int s,
		      float *buf[3], size_t n, struct diff *d)
{
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	float lr, lt, norm;
	bool ok = ferry_model_get_params(ref, buf[0]) == FERRY_OK && ferry_model_set_params(m, buf[0]) == FERRY_OK &&
		  ferry_model_forward(ref, in, tg, B, T, &lr) == FERRY_OK && ferry_model_forward(m, in, tg, B, T, &lt) == FERRY_OK &&
		  ferry_model_zero_grad(ref) == FERRY_OK && ferry_model_zero_grad(m) == FERRY_OK &&
		  ferry_model_backward(ref) == FERRY_OK && ferry_model_backward(m) == FERRY_OK &&
		  ferry_model_get_grads(ref, buf[1]) == FERRY_OK && ferry_model_get_grads(m, buf[2]) == FERRY_OK &&
		  ferry_model_update(ref, &opt, s + 1, &norm) == FERRY_OK;

	CHECK(ok, "step %d: %s", s, ferry_last_error());
	if (ok) {
		d->loss = fmax(d->loss, fabs((double)lt - lr) / fabs((double)lr));
		d->grads = fmax(d->grads, rel_err(buf[2], buf[1], n));
	}
	return ok;
}

/* The last row's probabilities of both models after a forward on the
 * same batch (a tiled loss keeps only its last tile's); an earlier row
 * of a tiled loss refused. */
static void compare_probs(const struct tmodel *tm, ferry_model_t ref, ferry_model_t m, const int32_t *in, int B, int T,
			  struct diff *d)
{
	float *pr = TALLOC(float, tm->cfg.vocab), *pt = TALLOC(float, tm->cfg.vocab);

	CHECK(ferry_model_forward(ref, in, NULL, B, T, NULL) == FERRY_OK && ferry_model_forward(m, in, NULL, B, T, NULL) == FERRY_OK &&
	      ferry_model_probs(ref, B * T - 1, pr) == FERRY_OK && ferry_model_probs(m, B * T - 1, pt) == FERRY_OK,
	      "%s probabilities: %s", tm->name, ferry_last_error());
	d->probs = rel_err(pt, pr, (size_t)tm->cfg.vocab);
	if (d->plan.loss_tile && d->plan.loss_tile < B * T)
		CHECK(ferry_model_probs(m, 0, pt) != FERRY_OK && strstr(ferry_last_error(), "last tile"),
		      "%s: row 0 of a tiled loss refused", tm->name);
	free(pr);
	free(pt);
}

/* STEPS batches of B x T (at most the planned tm->B x tm->T) through an
 * untiled and a tiled model under one policy, in lock step; the tiled
 * one's measured peak against its plan. */
static bool lockstep(const struct tmodel *tm, const char *policy, int mlp, int loss, int B, int T, struct diff *d)
{
	struct ferry_exec_opts plain = { .policy = policy }, o = { .policy = policy, .mlp_tile = mlp, .loss_tile = loss };
	int32_t *in = TALLOC(int32_t, B * T), *tg = TALLOC(int32_t, B * T);
	ferry_backend_t be = NULL, be_ref = NULL;
	ferry_model_t m = NULL, ref = NULL;
	float *buf[3] = { NULL, NULL, NULL };
	bool ok = false;
	size_t n;

	memset(d, 0, sizeof(*d));
	if (ferry_model_plan(&tm->cfg, tm->B, tm->T, &o, &d->plan) != FERRY_OK ||
	    ferry_backend_open("cpu", NULL, &be) != FERRY_OK || ferry_backend_open("cpu", NULL, &be_ref) != FERRY_OK ||
	    ferry_model_create(be, &tm->cfg, tm->B, tm->T, &o, &m) != FERRY_OK ||
	    ferry_model_create(be_ref, &tm->cfg, tm->B, tm->T, &plain, &ref) != FERRY_OK) {
		CHECK(0, "%s %s mlp %d loss %d: %s", tm->name, policy, mlp, loss, ferry_last_error());
		goto out;
	}
	CHECK(ferry_backend_mem_peak(be) == d->plan.mem.peak_bytes, "%s mlp %d loss %d: measured peak %zu, plan %zu",
	      tm->name, mlp, loss, ferry_backend_mem_peak(be), d->plan.mem.peak_bytes);
	n = ferry_model_num_params(ref);
	for (int i = 0; i < 3; i++)
		buf[i] = TALLOC(float, n);
	ok = ferry_model_init_random(ref, 7) == FERRY_OK;
	for (int s = 0; s < STEPS && ok; s++) {
		make_tokens(tm, B, T, in, tg, s);
		ok = step_both(ref, m, in, tg, B, T, s, buf, n, d);
	}
	if (ok && ferry_model_get_params(ref, buf[0]) == FERRY_OK && ferry_model_set_params(m, buf[0]) == FERRY_OK)
		compare_probs(tm, ref, m, in, B, T, d);
	CHECK(ferry_backend_mem_peak(be) == d->plan.mem.peak_bytes, "%s mlp %d loss %d: peak %zu after steps, plan %zu",
	      tm->name, mlp, loss, ferry_backend_mem_peak(be), d->plan.mem.peak_bytes);
out:
	for (int i = 0; i < 3; i++)
		free(buf[i]);
	ferry_model_free(m);
	ferry_model_free(ref);
	ferry_backend_close(be);
	ferry_backend_close(be_ref);
	free(in);
	free(tg);
	return ok;
}

static double worst_seen;

static void report(const struct tmodel *tm, const char *what, const struct diff *d)
{
	CHECK(d->loss <= 1e-6 && d->grads <= 1e-6 && d->probs <= 1e-6,
	      "%s %s: losses %.2e, gradients %.2e, probabilities %.2e apart", tm->name, what, d->loss, d->grads,
	      d->probs);
	worst_seen = fmax(worst_seen, fmax(d->loss, fmax(d->grads, d->probs)));
	printf("  %-44s loss %.1e grads %.1e probs %.1e  peak %zu\n", what, d->loss, d->grads, d->probs,
	       d->plan.mem.peak_bytes);
}

static size_t aligned(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static size_t buffer_bytes(const struct ferry_plan *p, const char *name)
{
	for (int i = 0; i < p->n_buffers; i++)
		if (!strcmp(p->buffers[i].name, name))
			return p->buffers[i].bytes;
	return 0;
}

/* The plan of one tile, worked out from the shapes. */
static void check_plan(const struct tmodel *tm, const struct ferry_plan *p, const struct ferry_plan *untiled, int mlp,
		       int loss)
{
	int vp = tm->cfg.padded_vocab ? tm->cfg.padded_vocab : tm->cfg.vocab, tiled = 0;

	CHECK(p->mlp_tile == mlp && p->loss_tile == loss, "%s: plan's tiles %d, %d, asked %d, %d", tm->name,
	      p->mlp_tile, p->loss_tile, mlp, loss);
	CHECK(buffer_bytes(p, "logits") == aligned((size_t)(loss ? loss : tm->B * tm->T) * vp * sizeof(float)),
	      "%s loss tile %d: logits buffer %zu bytes", tm->name, loss, buffer_bytes(p, "logits"));
	for (int i = 0; i < p->n_tensors; i++) {
		const struct ferry_plan_tensor *pt = &p->tensors[i];

		if (pt->layer_bytes != (size_t)tm->B * tm->T * tm->hidden * sizeof(float))
			continue;
		tiled += pt->tiled;
		if (mlp)
			CHECK(pt->tiled && pt->device_bytes == aligned((size_t)mlp * tm->hidden * sizeof(float)) &&
			      !pt->host_bytes, "%s: %s holds %zu bytes for a tile of %d", tm->name, pt->name,
			      pt->device_bytes, mlp);
	}
	CHECK(tiled == (mlp ? tm->n_hidden : 0), "%s: %d hidden activations tiled", tm->name, tiled);
	/* an MLP tile of every row only costs: its gradients' lives are the run's */
	if (mlp < tm->B * tm->T)
		CHECK(p->mem.peak_bytes < untiled->mem.peak_bytes, "%s mlp %d loss %d: tiled peak %zu below untiled %zu",
		      tm->name, mlp, loss, p->mem.peak_bytes, untiled->mem.peak_bytes);
}

static const char *const policies[] = {
	"everything_saveable",
	"nothing_saveable",
	"custom:decoder_layer_input=offload,mlpwo=offload",
	NULL, /* the model's own */
};

static void test_model(const struct tmodel *tm)
{
	/* 24 rows: tiles of 5 and 7 leave a last tile of 4 and 3 */
	static const int tiles[][2] = { { 5, 0 }, { 0, 7 }, { 5, 7 }, { 1, 24 }, { 24, 1 } };
	const int n = tm->B * tm->T;
	char what[96];
	struct diff d;

	printf("%s, %d rows a batch, tiled against untiled (relative to the largest magnitude):\n", tm->name, n);
	for (size_t pi = 0; pi < sizeof(policies) / sizeof(*policies); pi++) {
		const char *policy = policies[pi] ? policies[pi] : tm->own;
		struct ferry_exec_opts plain = { .policy = policy };
		struct ferry_plan untiled;

		CHECK(ferry_model_plan(&tm->cfg, tm->B, tm->T, &plain, &untiled) == FERRY_OK, "%s", ferry_last_error());
		for (size_t k = 0; k < sizeof(tiles) / sizeof(*tiles); k++) {
			if (!lockstep(tm, policy, tiles[k][0], tiles[k][1], tm->B, tm->T, &d))
				continue;
			snprintf(what, sizeof(what), "%.24s mlp %d loss %d", policy, tiles[k][0], tiles[k][1]);
			report(tm, what, &d);
			check_plan(tm, &d.plan, &untiled, tiles[k][0], tiles[k][1]);
		}
	}
	/* a batch smaller than planned: 1 x 11 rows, tiles of 5 and 7 */
	if (lockstep(tm, "everything_saveable", 5, 7, 1, 11, &d))
		report(tm, "1 x 11 rows, mlp 5 loss 7", &d);
}

/* auto: tiles of about C tokens (the model's width), the rows split
 * evenly: ceil(n / C) tiles. */
static void test_auto(const struct tmodel *tm)
{
	struct ferry_exec_opts o = { .mlp_tile = FERRY_TILE_AUTO, .loss_tile = FERRY_TILE_AUTO };
	struct ferry_plan p;
	const int n = tm->B * tm->T, c = tm->cfg.channels, k = (n + c - 1) / c;

	CHECK(ferry_model_plan(&tm->cfg, tm->B, tm->T, &o, &p) == FERRY_OK, "%s auto: %s", tm->name, ferry_last_error());
	CHECK(p.mlp_tile == (n + k - 1) / k && p.loss_tile == (n + k - 1) / k, "%s auto: tiles %d and %d, expected %d",
	      tm->name, p.mlp_tile, p.loss_tile, (n + k - 1) / k);
	CHECK(strstr(p.place, "activations.mlp_tile=") && strstr(p.place, "activations.loss_tile="),
	      "%s auto: the placement names the tiles chosen: %s", tm->name, p.place);
}

static void test_refused(void)
{
	struct ferry_exec_opts o = { .mlp_tile = -5 };
	struct ferry_plan p;

	CHECK(ferry_model_plan(&gpt2.cfg, 2, 12, &o, &p) != FERRY_OK && strstr(ferry_last_error(), "tiles of -5"),
	      "a negative tile refused: %s", ferry_last_error());
	o = (struct ferry_exec_opts){ .place = "activations.loss_tile=many" };
	CHECK(ferry_model_plan(&gpt2.cfg, 2, 12, &o, &p) != FERRY_OK && strstr(ferry_last_error(), "loss_tile=many"),
	      "a bad tile in --place refused: %s", ferry_last_error());
	o = (struct ferry_exec_opts){ .place = "activations.mlp_tile=9,activations.loss_tile=auto" };
	CHECK(ferry_model_plan(&gpt2.cfg, 2, 12, &o, &p) == FERRY_OK && p.mlp_tile == 9 && p.loss_tile > 0,
	      "--place tiles: %s", ferry_last_error());
}

/* A layer whose backward reads the MLP's output (a norm after it, as
 * Gemma 2 has): recomputing that output recomputes the whole run, tile by
 * tile; kept, it does not. */
static void test_refill(void)
{
	enum { X, H, A, O, N, NR, Y, NT };
	static const struct ferry_layer_decl d = {
		.model = "post-norm", .n_tensors = NT,
		.tensors = {
			[X] = { "decoder_layer_input", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			[H] = { "mlpwi", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_FFN } } },
			[A] = { "mlp_activation", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_FFN } } },
			[O] = { "mlpwo", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			[N] = { "post_mlp_norm", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
			[NR] = { "post_mlp_norm_rstd", { .d = { FERRY_DIM_B, FERRY_DIM_T } } },
			[Y] = { "decoder_layer_output", { .d = { FERRY_DIM_B, FERRY_DIM_T, FERRY_DIM_C } } },
		},
		.n_ops = 5,
		.ops = {
			{ FERRY_OP_MATMUL, { H, -1, -1 }, { X, -1, -1 }, { { 0, 0 }, { -1, 0 } } },
			{ FERRY_OP_GELU, { A, -1, -1 }, { H, -1, -1 }, { { -1, 0 }, { -1, 0 } } },
			{ FERRY_OP_MATMUL, { O, -1, -1 }, { A, -1, -1 }, { { 1, 0 }, { -1, 0 } } },
			{ FERRY_OP_RMSNORM, { N, NR, -1 }, { O, -1, -1 }, { { 2, 0 }, { -1, 0 } } },
			{ FERRY_OP_RESIDUAL, { Y, -1, -1 }, { X, N, -1 }, { { -1, 0 }, { -1, 0 } } },
		},
		.input = X, .output = Y,
	};
	struct ferry_dims dims = { .v = { [FERRY_DIM_B] = 2, [FERRY_DIM_T] = 12, [FERRY_DIM_C] = 16,
					  [FERRY_DIM_FFN] = 64, [FERRY_DIM_L] = 3 } };
	struct ferry_exec_opts o = { .policy = "nothing_saveable", .mlp_tile = 5 };
	struct ferry_stack_plan sp;

	CHECK(ferry_stack_plan_make(&d, &dims, &o, &sp) == FERRY_OK, "refill: %s", ferry_last_error());
	CHECK(sp.tile_rows == 5 && sp.tiles.first == 0 && sp.tiles.last == 2 && sp.tile_refill &&
	      sp.recompute_ops == 1u << 3 /* the norm, for its statistics */ && sp.slot_bytes[H] == aligned(5 * 64 * sizeof(float)),
	      "the MLP's output recomputed: the whole run again (refill %d, recompute ops %#x)", sp.tile_refill,
	      sp.recompute_ops);
	o.policy = "save_only_these_names(mlpwo)";
	CHECK(ferry_stack_plan_make(&d, &dims, &o, &sp) == FERRY_OK && !sp.tile_refill && (sp.stored & (1u << O)),
	      "the MLP's output kept: no refill");
}

int main(void)
{
	test_model(&gpt2);
	test_model(&llama);
	test_model(&gemma2);
	test_auto(&gpt2);
	test_auto(&llama);
	test_auto(&gemma2);
	test_refused();
	test_refill();
	printf("largest difference from the untiled runs: %.2e\n", worst_seen);
	return test_exit_code();
}
