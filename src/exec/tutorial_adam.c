/*
 * The third network of JAX's host-offloading tutorial ("Optimizer state
 * offloading"): L layers of x = gelu(x @ w) on the declared-layer engine,
 * loss = mean((output - input)^2) + l2 * sum(w^2), gradients clipped by
 * their global norm, then Adam (optax.adam: no weight decay).
 *
 * A step is two programs.  "gradient": the input into the stack (the stack
 * reads the input argument in place when it can: see read_in_place), forward,
 * the squared error and its gradient, backward, the L2 term and its
 * gradient (dw += 2 l2 w), the squared norm of dw, and the three sums to
 * the host.  The host then computes the clipping scale, and "update" runs
 * Adam with it: in place on the device, or -- the optimizer state offloaded
 * -- over the moments in host memory, slice by slice through a two-slot
 * device ring so one slice's copies overlap the next one's update.
 */
#include "ferry/tutorial.h"
#include "backend/run_op.h"
#include "core/error.h"
#include "exec/tutorial_stack.h"
#include "models/tutorial_nets.h"
#include "exec/engine.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { SUM_ERROR, SUM_L2, SUM_GRAD, N_SUMS };

struct ferry_tutorial_adam {
	ferry_backend_t be;
	struct ferry_tutorial_adam_config cfg;
	enum ferry_dtype act;
	size_t nw, chunk;                /* floats of w; of one optimizer slice */
	struct ferry_sched_resources res;
	struct ferry_sched_runtime rt;
	int compute, h2d, d2h;
	int staged[2], updated[2], slot_free[2];
	struct ferry_program grad, update;
	ferry_buffer_t w, wcopy, mom, ring, dw, input, sums;
	float *host_mom;                 /* m then v, when streamed */
	double *host_sums;
	struct ferry_tutorial_stack stack;
	struct ferry_layer_exec *layers;
	void *base;                      /* the weights the kernels read */
	float *grad_base;
	size_t stride;                   /* floats per layer */
	int step;
};

size_t ferry_tutorial_adam_weight_floats(const struct ferry_tutorial_adam_config *cfg)
{
	return (size_t)cfg->layers * cfg->channels * cfg->channels;
}

/* Floats of one slice of the streamed update: a layer, or a part of one
 * no larger than 8 Mi floats (32 MiB) so the device ring stays small. */
static size_t slice_floats(const struct ferry_tutorial_adam_config *cfg)
{
	const size_t layer = (size_t)cfg->channels * cfg->channels, max = (size_t)1 << 23;
	const size_t pieces = (layer + max - 1) / max; /* equal slices of a layer */

	return (layer + pieces - 1) / pieces;
}

static ferry_status check(const struct ferry_tutorial_adam_config *cfg, const struct ferry_exec_opts *o)
{
	if (cfg->layers < 1 || cfg->rows < 1 || cfg->channels < 1 || cfg->layers > 4096 || cfg->rows > (1 << 20) ||
	    cfg->channels > (1 << 16))
		return ferry_error(FERRY_ERR_INVALID, "tutorial Adam network: layers %d, rows %d, channels %d must be "
				   "positive and at most 4096, %d and %d", cfg->layers, cfg->rows, cfg->channels,
				   1 << 20, 1 << 16);
	if (!(cfg->lr > 0) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1) ||
	    !(cfg->eps > 0) || !(cfg->l2 >= 0) || !(cfg->clip >= 0))
		return ferry_error(FERRY_ERR_INVALID, "tutorial Adam network: lr %g, betas %g %g, eps %g, l2 %g, "
				   "clip %g out of range", cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->l2,
				   cfg->clip);
	if (o && (o->offload_params || (o->optimizer != FERRY_OPTIM_DEVICE && o->optimizer != FERRY_OPTIM_STREAM)))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "tutorial Adam network: the optimizer state lives on the "
				   "device or is streamed (the tutorial's example); parameter offloading and the "
				   "host-thread optimizer are the declared models'");
	return FERRY_OK;
}

static struct ferry_dims dims_of(const struct ferry_tutorial_adam_config *cfg)
{
	struct ferry_dims d = { { 0 } };

	d.v[FERRY_DIM_B] = 1;
	d.v[FERRY_DIM_T] = cfg->rows;
	d.v[FERRY_DIM_C] = cfg->channels;
	d.v[FERRY_DIM_NH] = 1;
	d.v[FERRY_DIM_L] = cfg->layers;
	return d;
}

static bool streamed(const struct ferry_exec_opts *o)
{
	return o && o->optimizer == FERRY_OPTIM_STREAM;
}

/* The input argument is slot 0 of the stack's x when x is kept on the
 * device and the activations are fp32 (no cast): nothing writes slot 0
 * during a step (layers write their outputs from slot 1), so the input is
 * not held twice.  An offloaded x's slot 0 is a ring slot, reused by later
 * layers: then the input is copied in. */
static void read_in_place(struct ferry_stack_plan *sp, enum ferry_dtype act)
{
	sp->input_in_place = act == FERRY_F32 && !sp->input_offloaded;
}

/* The device buffers, in the order ferry_tutorial_adam_create allocates
 * them. */
static void plan_buffers(const struct ferry_tutorial_adam_config *cfg, const struct ferry_exec_opts *o,
			 enum ferry_dtype act, struct ferry_plan *plan)
{
	size_t wb = ferry_tutorial_adam_weight_floats(cfg) * sizeof(float);

	ferry_plan_add_buffer(plan, "w", FERRY_BUF_DONATED, FERRY_TK_WEIGHT, wb);
	if (act != FERRY_F32)
		ferry_plan_add_buffer(plan, "w (compute copy)", FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
				      ferry_tutorial_adam_weight_floats(cfg) * ferry_dtype_size(act));
	if (streamed(o)) {
		ferry_plan_add_buffer(plan, "adam mu, nu: ring", FERRY_BUF_TEMP, FERRY_TK_OPT_STATE,
				      2 * 2 * slice_floats(cfg) * sizeof(float));
		plan->mem.host_kind_bytes[FERRY_TK_OPT_STATE] = 2 * wb;
	} else {
		ferry_plan_add_buffer(plan, "adam mu, nu", FERRY_BUF_DONATED, FERRY_TK_OPT_STATE, 2 * wb);
	}
	ferry_plan_add_buffer(plan, "dw", FERRY_BUF_TEMP, FERRY_TK_GRAD, wb);
	ferry_plan_add_buffer(plan, "input", FERRY_BUF_ARGUMENT, FERRY_TK_BATCH,
			      (size_t)cfg->rows * cfg->channels * sizeof(float));
	ferry_plan_add_buffer(plan, "loss terms, gradient norm", FERRY_BUF_TEMP, FERRY_TK_WORKSPACE,
			      N_SUMS * sizeof(double));
}

ferry_status ferry_tutorial_adam_plan(const struct ferry_tutorial_adam_config *cfg,
				      const struct ferry_exec_opts *opts, struct ferry_plan *plan)
{
	struct ferry_dims d = dims_of(cfg);
	struct ferry_stack_plan sp;
	enum ferry_dtype act = opts ? opts->act_dtype : FERRY_F32;
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if ((st = check(cfg, opts)) || (st = ferry_stack_plan_make(&ferry_tutorial_adam_layer_decl, &d, opts, &sp)))
		return st;
	read_in_place(&sp, act);
	snprintf(plan->model, sizeof(plan->model), "tutorial_adam");
	snprintf(plan->policy, sizeof(plan->policy), "%s",
		 opts && opts->policy ? opts->policy : "everything_saveable");
	plan->B = 1;
	plan->T = cfg->rows;
	plan_buffers(cfg, opts, act, plan);
	ferry_stack_plan_describe(&sp, &ferry_tutorial_adam_layer_decl, &d, plan);
	if ((st = ferry_tutorial_stack_storage(&ferry_tutorial_adam_layer_decl, &sp, plan, NULL, NULL)))
		return st;
	plan->mem.host_kind_bytes[FERRY_TK_ACTIVATION] = ferry_tutorial_stack_host_bytes(&sp);
	plan->mem.host_activation_bytes = plan->mem.host_kind_bytes[FERRY_TK_ACTIVATION];
	return ferry_plan_finish(plan);
}

void ferry_tutorial_adam_free(ferry_tutorial_adam_t t)
{
	if (!t)
		return;
	ferry_sched_runtime_free(&t->rt); /* streams drain first */
	ferry_program_release(&t->grad);
	ferry_program_release(&t->update);
	ferry_sched_resources_release(&t->res);
	ferry_layer_exec_free(t->layers);
	ferry_tutorial_stack_free(&t->stack);
	ferry_buffer_free(t->sums);
	ferry_buffer_free(t->input);
	ferry_buffer_free(t->dw);
	ferry_buffer_free(t->ring);
	ferry_buffer_free(t->mom);
	ferry_buffer_free(t->wcopy);
	ferry_buffer_free(t->w);
	ferry_host_free(t->be, t->host_mom);
	ferry_host_free(t->be, t->host_sums);
	ferry_free(t);
}

static void *sum_ptr(ferry_tutorial_adam_t t, int i)
{
	return (double *)ferry_buffer_ptr(t->sums) + i;
}

/* A model op of the gradient program: call c with n values. */
static void emit(ferry_tutorial_adam_t t, struct ferry_op_call c, long n, const char *label)
{
	c.n = n;
	ferry_emit_op(&t->grad, t->compute, &c, -1, label);
}

/* The loss's gradient after the stack's forward: e = output - input,
 * d output = 2 e / n, sum(e^2) to the host's mean. */
static void emit_loss(ferry_tutorial_adam_t t, long n)
{
	struct ferry_op_call c = { .kind = FERRY_OP_SQUARED_ERROR };

	ferry_emit_zero(&t->grad, t->compute, ferry_buffer_ptr(t->sums), N_SUMS * sizeof(double), -1, "sums");
	c.in[0] = ferry_layer_exec_output(t->layers);
	c.in[1] = ferry_buffer_ptr(t->input);
	c.out[0] = ferry_layer_exec_output_grad(t->layers);
	c.scalar[0] = (float)(2.0 / (double)n);
	c.result = sum_ptr(t, SUM_ERROR);
	emit(t, c, n, "mean squared error");
}

/* After backward: l2 * sum(w^2), dw += 2 l2 w, and sum(dw^2). */
static void emit_l2_and_norm(ferry_tutorial_adam_t t)
{
	struct ferry_op_call c = { .kind = FERRY_OP_SUM_SQUARES };

	c.in[0] = ferry_buffer_ptr(t->w);
	c.result = sum_ptr(t, SUM_L2);
	emit(t, c, (long)t->nw, "l2 term");
	c = (struct ferry_op_call){ .kind = FERRY_OP_SGD };
	c.param = ferry_buffer_ptr(t->dw); /* dw - (-2 l2) w */
	c.in[0] = ferry_buffer_ptr(t->w);
	c.scalar[0] = -2.0f * t->cfg.l2;
	emit(t, c, (long)t->nw, "dw += 2 l2 w");
	c = (struct ferry_op_call){ .kind = FERRY_OP_SUM_SQUARES };
	c.in[0] = ferry_buffer_ptr(t->dw);
	c.result = sum_ptr(t, SUM_GRAD);
	emit(t, c, (long)t->nw, "gradient norm");
}

static ferry_status emit_grad(ferry_tutorial_adam_t t)
{
	const long n = (long)t->cfg.rows * t->cfg.channels;
	struct ferry_op_call c = { .kind = FERRY_OP_CAST };
	ferry_status st;

	c.out[0] = ferry_layer_exec_input(t->layers);
	c.in[0] = ferry_buffer_ptr(t->input);
	if (c.out[0] != c.in[0]) /* else the stack reads the input in place */
		emit(t, c, n, "x");
	if ((st = ferry_layer_exec_forward(t->layers, &t->grad, 1, t->cfg.rows, true)))
		return st;
	emit_loss(t, n);
	ferry_emit_zero(&t->grad, t->compute, ferry_buffer_ptr(t->dw), t->nw * sizeof(float), -1, "dw");
	if ((st = ferry_layer_exec_backward(t->layers, &t->grad, 1, t->cfg.rows, false)))
		return st;
	emit_l2_and_norm(t);
	ferry_emit_copy(&t->grad, t->compute, t->host_sums, ferry_buffer_ptr(t->sums), N_SUMS * sizeof(double),
			FERRY_COPY_D2H, -1, "loss terms, gradient norm");
	return FERRY_OK;
}

/* Adam over [off, off + n) of w with moments m, v; scalars patched per step. */
static void emit_adam(ferry_tutorial_adam_t t, int stream, size_t off, size_t n, float *m, float *v, int layer)
{
	struct ferry_op_call c = { .kind = FERRY_OP_ADAMW, .n = (long)n };

	c.param = (float *)ferry_buffer_ptr(t->w) + off;
	c.param_copy = t->wcopy ? (char *)ferry_buffer_ptr(t->wcopy) + off * ferry_dtype_size(t->act) : NULL;
	c.out[0] = m;
	c.out[1] = v;
	c.in[0] = (float *)ferry_buffer_ptr(t->dw) + off;
	c.scalar[4] = 0.0f; /* no decay: the tutorial's L2 term is in the loss */
	ferry_emit_op(&t->update, stream, &c, layer, "adam");
	if (!t->update.failed)
		t->update.t[t->update.n - 1].patch = FERRY_PATCH_ADAMW;
}

/* One slice of the streamed update through ring slot `slot`. */
static void emit_slice(ferry_tutorial_adam_t t, size_t off, size_t n, int slot, int layer)
{
	struct ferry_program *p = &t->update;
	float *dev = (float *)ferry_buffer_ptr(t->ring) + (size_t)slot * 2 * t->chunk;
	float *host[2] = { t->host_mom + off, t->host_mom + t->nw + off };
	static const char *const name[2] = { "adam mu", "adam nu" };

	ferry_emit_wait(p, t->h2d, t->slot_free[slot], layer);
	for (int i = 0; i < 2; i++)
		ferry_emit_copy(p, t->h2d, dev + i * t->chunk, host[i], n * sizeof(float), FERRY_COPY_H2D, layer,
				name[i]);
	ferry_emit_record(p, t->h2d, t->staged[slot], layer);
	ferry_emit_wait(p, t->compute, t->staged[slot], layer);
	emit_adam(t, t->compute, off, n, dev, dev + t->chunk, layer);
	ferry_emit_record(p, t->compute, t->updated[slot], layer);
	ferry_emit_wait(p, t->d2h, t->updated[slot], layer);
	for (int i = 0; i < 2; i++)
		ferry_emit_copy(p, t->d2h, host[i], dev + i * t->chunk, n * sizeof(float), FERRY_COPY_D2H, layer,
				name[i]);
	ferry_emit_record(p, t->d2h, t->slot_free[slot], layer);
}

static void emit_update(ferry_tutorial_adam_t t)
{
	const size_t layer = (size_t)t->cfg.channels * t->cfg.channels;
	int k = 0;

	if (!t->host_mom) {
		emit_adam(t, t->compute, 0, t->nw, ferry_buffer_ptr(t->mom), (float *)ferry_buffer_ptr(t->mom) + t->nw,
			  -1);
		return;
	}
	for (size_t off = 0; off < t->nw; off += t->chunk, k++)
		emit_slice(t, off, t->nw - off < t->chunk ? t->nw - off : t->chunk, k % 2, (int)(off / layer));
}

static void add_streams(ferry_tutorial_adam_t t)
{
	char name[40];

	t->compute = ferry_sched_stream(&t->res, "compute");
	if (!t->host_mom)
		return;
	t->h2d = ferry_sched_stream(&t->res, "h2d");
	t->d2h = ferry_sched_stream(&t->res, "d2h");
	for (int slot = 0; slot < 2; slot++) {
		snprintf(name, sizeof(name), "adam slice staged [%d]", slot);
		t->staged[slot] = ferry_sched_event(&t->res, name);
		snprintf(name, sizeof(name), "adam slice updated [%d]", slot);
		t->updated[slot] = ferry_sched_event(&t->res, name);
		snprintf(name, sizeof(name), "adam slot free [%d]", slot);
		t->slot_free[slot] = ferry_sched_event(&t->res, name);
	}
}

/* Every device buffer (as plan_buffers lists them) and the host's. */
static ferry_status alloc_buffers(ferry_tutorial_adam_t t, const struct ferry_exec_opts *o)
{
	const size_t wb = t->nw * sizeof(float);
	ferry_status st;

	if ((st = ferry_buffer_alloc(t->be, wb, &t->w)) ||
	    (t->act != FERRY_F32 && (st = ferry_buffer_alloc(t->be, t->nw * ferry_dtype_size(t->act), &t->wcopy))))
		return st;
	if (streamed(o) ? (st = ferry_buffer_alloc(t->be, 2 * 2 * t->chunk * sizeof(float), &t->ring)) ||
				  (st = ferry_host_alloc(t->be, 2 * wb, (void **)&t->host_mom))
			: (st = ferry_buffer_alloc(t->be, 2 * wb, &t->mom)))
		return st;
	if ((st = ferry_buffer_alloc(t->be, wb, &t->dw)) ||
	    (st = ferry_buffer_alloc(t->be, (size_t)t->cfg.rows * t->cfg.channels * sizeof(float), &t->input)) ||
	    (st = ferry_buffer_alloc(t->be, N_SUMS * sizeof(double), &t->sums)) ||
	    (st = ferry_host_alloc(t->be, N_SUMS * sizeof(double), (void **)&t->host_sums)))
		return st;
	return FERRY_OK;
}

static ferry_status build(ferry_tutorial_adam_t t, const struct ferry_exec_opts *o)
{
	struct ferry_dims d = dims_of(&t->cfg);
	struct ferry_stack_plan sp;
	struct ferry_weight_table wt = { &t->base, &t->grad_base, &t->stride, NULL, 0, 0 };
	ferry_status st;

	t->base = t->wcopy ? ferry_buffer_ptr(t->wcopy) : ferry_buffer_ptr(t->w);
	t->grad_base = ferry_buffer_ptr(t->dw);
	t->stride = (size_t)t->cfg.channels * t->cfg.channels;

	add_streams(t);
	if ((st = ferry_stack_plan_make(&ferry_tutorial_adam_layer_decl, &d, o, &sp)))
		return st;
	read_in_place(&sp, t->act);
	if ((st = ferry_tutorial_stack_storage(&ferry_tutorial_adam_layer_decl, &sp, NULL, t->be, &t->stack)))
		return st;
	t->stack.storage.input0 = ferry_buffer_ptr(t->input); /* read when sp.input_in_place */
	if ((st = ferry_layer_exec_create(&t->res, t->compute, &ferry_tutorial_adam_layer_decl, &d, NULL, &wt, &sp, &t->stack.storage,
					  &t->layers)) ||
	    (st = emit_grad(t)))
		return st;
	emit_update(t);
	if (t->grad.failed || t->update.failed)
		return ferry_error(FERRY_ERR_NOMEM, "tutorial Adam network: out of host memory");
	return ferry_sched_runtime_create(t->be, &t->res, &t->rt);
}

ferry_status ferry_tutorial_adam_create(ferry_backend_t be, const struct ferry_tutorial_adam_config *cfg,
					const struct ferry_exec_opts *opts, ferry_tutorial_adam_t *out)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	struct ferry_tutorial_adam *t;
	ferry_status st;

	*out = NULL;
	o.act_dtype = ferry_backend_caps(be).act_dtype;
	if ((st = check(cfg, &o)))
		return st;
	if (!(t = ferry_calloc(1, sizeof(*t))))
		return ferry_error(FERRY_ERR_NOMEM, "tutorial Adam network: out of host memory");
	t->be = be;
	t->cfg = *cfg;
	t->act = o.act_dtype;
	t->nw = ferry_tutorial_adam_weight_floats(cfg);
	t->chunk = slice_floats(cfg);
	ferry_program_init(&t->grad, "gradient");
	ferry_program_init(&t->update, "update");
	if ((st = alloc_buffers(t, &o)) || (st = build(t, &o))) {
		ferry_tutorial_adam_free(t);
		return st;
	}
	*out = t;
	return FERRY_OK;
}

static ferry_status sync_all(ferry_tutorial_adam_t t)
{
	ferry_status st = FERRY_OK;

	for (int i = 0; i < t->rt.n_streams && !st; i++)
		st = ferry_stream_synchronize(t->rt.stream[i]);
	return st;
}

static ferry_status copy_sync(ferry_tutorial_adam_t t, void *dst, const void *src, size_t n,
			      enum ferry_copy_kind kind)
{
	ferry_stream_t s = t->rt.stream[t->compute];
	ferry_status st = ferry_memcpy_async(s, dst, src, n, kind);

	return st ? st : ferry_stream_synchronize(s);
}

ferry_status ferry_tutorial_adam_set(ferry_tutorial_adam_t t, const float *w, const float *x)
{
	const size_t wb = t->nw * sizeof(float);
	ferry_stream_t s = t->rt.stream[t->compute];
	ferry_status st;

	if ((st = sync_all(t)) || (st = copy_sync(t, ferry_buffer_ptr(t->w), w, wb, FERRY_COPY_H2D)) ||
	    (st = copy_sync(t, ferry_buffer_ptr(t->input), x, (size_t)t->cfg.rows * t->cfg.channels * sizeof(float),
			    FERRY_COPY_H2D)))
		return st;
	if (t->wcopy) {
		struct ferry_op_call c = { .kind = FERRY_OP_CAST, .n = (long)t->nw };

		c.out[0] = ferry_buffer_ptr(t->wcopy);
		c.in[0] = ferry_buffer_ptr(t->w);
		if ((st = ferry_stream_run_op(s, &c)))
			return st;
	}
	/* optax.adam's init: both moments zero */
	if (t->host_mom)
		memset(t->host_mom, 0, 2 * wb);
	else if ((st = ferry_memset_zero_async(s, ferry_buffer_ptr(t->mom), 2 * wb)))
		return st;
	t->step = 0;
	return ferry_stream_synchronize(s);
}

/* optax.clip_by_global_norm: scale by clip / norm once norm reaches clip. */
static float clip_scale(const struct ferry_tutorial_adam_config *cfg, double norm)
{
	return cfg->clip > 0 && norm >= cfg->clip ? (float)(cfg->clip / norm) : 1.0f;
}

ferry_status ferry_tutorial_adam_step(ferry_tutorial_adam_t t, double *loss, double *grad_norm)
{
	const double n = (double)t->cfg.rows * t->cfg.channels;
	struct ferry_step_values v = { t->cfg.lr, t->cfg.beta1, t->cfg.beta2, t->cfg.eps, 0.0f, 1.0f, t->step + 1 };
	double norm;
	ferry_status st;

	if ((st = ferry_program_submit(&t->grad, &t->rt, NULL)) || (st = sync_all(t)))
		return st;
	norm = sqrt(t->host_sums[SUM_GRAD]);
	if (!isfinite(norm))
		return ferry_error(FERRY_ERR_INVALID, "tutorial Adam network: the gradient norm is not finite");
	v.grad_scale = clip_scale(&t->cfg, norm);
	if ((st = ferry_program_submit(&t->update, &t->rt, &v)) || (st = sync_all(t)))
		return st;
	t->step++;
	if (loss)
		*loss = t->host_sums[SUM_ERROR] / n + t->cfg.l2 * t->host_sums[SUM_L2];
	if (grad_norm)
		*grad_norm = norm;
	return FERRY_OK;
}

ferry_status ferry_tutorial_adam_get(ferry_tutorial_adam_t t, float *w, float *mu, float *nu, float *dw)
{
	const size_t wb = t->nw * sizeof(float);
	ferry_status st = sync_all(t);
	const float *m = t->host_mom ? t->host_mom : ferry_buffer_ptr(t->mom);

	if (!st && w)
		st = copy_sync(t, w, ferry_buffer_ptr(t->w), wb, FERRY_COPY_D2H);
	if (!st && dw)
		st = copy_sync(t, dw, ferry_buffer_ptr(t->dw), wb, FERRY_COPY_D2H);
	if (t->host_mom) {
		if (!st && mu)
			memcpy(mu, m, wb);
		if (!st && nu)
			memcpy(nu, m + t->nw, wb);
		return st;
	}
	if (!st && mu)
		st = copy_sync(t, mu, m, wb, FERRY_COPY_D2H);
	if (!st && nu)
		st = copy_sync(t, nu, m + t->nw, wb, FERRY_COPY_D2H);
	return st;
}
