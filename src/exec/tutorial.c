/*
 * The JAX tutorial's network on ferry's engine: prologue = copy the input
 * into the stack's input slot; the declared layer (two matrix products);
 * epilogue = sum of the output, whose gradient is all ones.
 */
#include "ferry/tutorial.h"
#include "backend/run_op.h"
#include "core/error.h"
#include "exec/tutorial_stack.h"
#include "models/tutorial_nets.h"
#include "exec/engine.h"

#include <stdio.h>
#include <string.h>

/* the declaration's parameters (models/tutorial_nets.h) */
enum { W1 = FERRY_TUTORIAL_W1, W2 = FERRY_TUTORIAL_W2, N_PARAMS = FERRY_TUTORIAL_PARAMS };

struct ferry_tutorial {
	ferry_backend_t be;
	ferry_stream_t s;            /* the schedule's compute stream */
	struct ferry_sched_resources res;
	struct ferry_sched_runtime rt;
	struct ferry_program grad;   /* forward, loss, backward: built once */
	struct ferry_tutorial_config cfg;
	size_t wfloats;
	enum ferry_dtype act;
	ferry_buffer_t w, wcopy, grads, input, loss;
	struct ferry_tutorial_stack stack;
	void *base[N_PARAMS];        /* what the kernels read: w or its copy */
	float *master[N_PARAMS], *grad_base[N_PARAMS];
	size_t stride[N_PARAMS];
	struct ferry_layer_exec *layers;
	double *host_loss;
	/* --offload-params: w1, w2 and their gradients on the host, a weight
	 * ring and a gradient ring on the device */
	bool offload;
	float *host_w, *host_grads;
	ferry_buffer_t wring, gring;
	struct ferry_weight_rings rings;
};

/* --offload-params: slots of the weight ring, and floats per slot (one
 * layer of w1 and of w2). */
static int ring_slots(const struct ferry_tutorial_config *cfg, const struct ferry_exec_opts *o)
{
	int depth = o && o->param_prefetch ? o->param_prefetch : 1;

	return depth + 1 < cfg->layers ? depth + 1 : cfg->layers;
}

static size_t slot_floats(const struct ferry_tutorial_config *cfg)
{
	return 2 * (size_t)4 * cfg->channels * cfg->channels;
}

static bool offloads_params(const struct ferry_exec_opts *o)
{
	return o && o->offload_params;
}

size_t ferry_tutorial_weight_floats(const struct ferry_tutorial_config *cfg)
{
	return (size_t)cfg->layers * 4 * cfg->channels * cfg->channels;
}

static ferry_status check(const struct ferry_tutorial_config *cfg)
{
	if (cfg->layers < 1 || cfg->rows < 1 || cfg->channels < 1 || cfg->layers > 4096 ||
	    cfg->rows > (1 << 20) || cfg->channels > (1 << 16))
		return ferry_error(FERRY_ERR_INVALID, "tutorial network: layers %d, rows %d, channels %d "
				   "must be positive and at most 4096, %d and %d", cfg->layers, cfg->rows,
				   cfg->channels, 1 << 20, 1 << 16);
	return FERRY_OK;
}

/* The tutorial's x is [rows, C]: a batch of one sequence of `rows`. */
static struct ferry_dims dims_of(const struct ferry_tutorial_config *cfg)
{
	struct ferry_dims d = { { 0 } };

	d.v[FERRY_DIM_B] = 1;
	d.v[FERRY_DIM_T] = cfg->rows;
	d.v[FERRY_DIM_C] = cfg->channels;
	d.v[FERRY_DIM_FFN] = 4 * (int64_t)cfg->channels;
	d.v[FERRY_DIM_NH] = 1;
	d.v[FERRY_DIM_L] = cfg->layers;
	return d;
}

static ferry_status stack_plan(const struct ferry_tutorial_config *cfg,
			       const struct ferry_exec_opts *opts, struct ferry_stack_plan *sp)
{
	struct ferry_dims d = dims_of(cfg);

	return ferry_stack_plan_make(&ferry_tutorial_layer_decl, &d, opts, sp);
}

/* Parameter offloading here covers the gradient computation in fp32 (the
 * tutorial's second example); SGD in place would need the host's update. */
static ferry_status check_offload(const struct ferry_tutorial_config *cfg, const struct ferry_exec_opts *o)
{
	if (cfg->train || (o->act_dtype != FERRY_F32))
		return ferry_error(FERRY_ERR_UNSUPPORTED, "tutorial network: parameter offloading is built for the "
				   "gradient computation in fp32 (the tutorial's example), not training or %s",
				   ferry_dtype_name(o->act_dtype));
	if (o->param_prefetch < 0 || o->param_prefetch > 64)
		return ferry_error(FERRY_ERR_INVALID, "--param-prefetch %d: from 1 to 64 layers", o->param_prefetch);
	return FERRY_OK;
}

ferry_status ferry_tutorial_plan(const struct ferry_tutorial_config *cfg,
				 const struct ferry_exec_opts *opts, struct ferry_plan *plan)
{
	struct ferry_dims d = dims_of(cfg);
	struct ferry_stack_plan sp;
	size_t wbytes = ferry_tutorial_weight_floats(cfg) * sizeof(float);
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if ((st = check(cfg)) || (st = stack_plan(cfg, opts, &sp)))
		return st;
	snprintf(plan->model, sizeof(plan->model), "tutorial");
	snprintf(plan->policy, sizeof(plan->policy), "%s",
		 opts && opts->policy ? opts->policy : "everything_saveable");
	plan->B = 1;
	plan->T = cfg->rows;
	/* in the order ferry_tutorial_create allocates them */
	if (offloads_params(opts)) {
		if ((st = check_offload(cfg, opts)))
			return st;
		plan->param_ring_slots = ring_slots(cfg, opts);
		ferry_plan_add_buffer(plan, "weight ring", FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
				      (size_t)plan->param_ring_slots * slot_floats(cfg) * sizeof(float));
		ferry_plan_add_buffer(plan, "gradient ring", FERRY_BUF_TEMP, FERRY_TK_GRAD,
				      2 * slot_floats(cfg) * sizeof(float));
		plan->mem.host_kind_bytes[FERRY_TK_WEIGHT] = plan->mem.host_kind_bytes[FERRY_TK_GRAD] = 2 * wbytes;
	} else {
		ferry_plan_add_buffer(plan, "w1, w2", cfg->train ? FERRY_BUF_DONATED : FERRY_BUF_ARGUMENT,
				      FERRY_TK_WEIGHT, 2 * wbytes);
		if (opts && opts->act_dtype != FERRY_F32)
			ferry_plan_add_buffer(plan, "w1, w2 (compute copy)", FERRY_BUF_TEMP, FERRY_TK_WEIGHT_COPY,
					      2 * ferry_tutorial_weight_floats(cfg) * ferry_dtype_size(opts->act_dtype));
		ferry_plan_add_buffer(plan, "dw1, dw2", cfg->train ? FERRY_BUF_TEMP : FERRY_BUF_OUTPUT,
				      FERRY_TK_GRAD, 2 * wbytes);
	}
	ferry_plan_add_buffer(plan, "input", FERRY_BUF_ARGUMENT, FERRY_TK_BATCH,
			      (size_t)cfg->rows * cfg->channels * sizeof(float));
	ferry_plan_add_buffer(plan, "loss", FERRY_BUF_OUTPUT, FERRY_TK_LOSS, sizeof(double));
	ferry_stack_plan_describe(&sp, &ferry_tutorial_layer_decl, &d, plan);
	if ((st = ferry_tutorial_stack_storage(&ferry_tutorial_layer_decl, &sp, plan, NULL, NULL)))
		return st;
	plan->mem.host_kind_bytes[FERRY_TK_ACTIVATION] = ferry_tutorial_stack_host_bytes(&sp);
	plan->mem.host_activation_bytes = plan->mem.host_kind_bytes[FERRY_TK_ACTIVATION];
	return ferry_plan_finish(plan);
}

void ferry_tutorial_free(ferry_tutorial_t t)
{
	if (!t)
		return;
	ferry_sched_runtime_free(&t->rt); /* streams drain first */
	ferry_program_release(&t->grad);
	ferry_sched_resources_release(&t->res);
	ferry_layer_exec_free(t->layers);
	ferry_tutorial_stack_free(&t->stack);
	ferry_buffer_free(t->loss);
	ferry_buffer_free(t->input);
	ferry_buffer_free(t->grads);
	ferry_buffer_free(t->wcopy);
	ferry_buffer_free(t->w);
	ferry_buffer_free(t->wring);
	ferry_buffer_free(t->gring);
	ferry_host_free(t->be, t->host_w);
	ferry_host_free(t->be, t->host_grads);
	ferry_host_free(t->be, t->host_loss);
	ferry_free(t);
}

/* The gradient computation as a program: prologue (the input, fp32 as
 * given, cast into the stack's input), the stack forward, the loss
 * sum(output) and its gradient (all ones), the stack backward, the loss to
 * the host. */
static ferry_status emit_grad(ferry_tutorial_t t, struct ferry_program *p, int s)
{
	size_t n = (size_t)t->cfg.rows * t->cfg.channels;
	struct ferry_op_call c;
	ferry_status st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_CAST;
	c.out[0] = ferry_layer_exec_input(t->layers);
	c.in[0] = ferry_buffer_ptr(t->input);
	c.n = (long)n;
	ferry_emit_op(p, s, &c, -1, "x");
	if ((st = ferry_layer_exec_forward(t->layers, p, 1, t->cfg.rows, true)))
		return st;
	ferry_emit_zero(p, s, ferry_buffer_ptr(t->loss), sizeof(double), -1, "loss");
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_SUM;
	c.in[0] = ferry_layer_exec_output(t->layers);
	c.n = (long)n;
	c.result = ferry_buffer_ptr(t->loss);
	ferry_emit_op(p, s, &c, -1, "loss");
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_FILL;
	c.out[0] = ferry_layer_exec_output_grad(t->layers);
	c.n = (long)n;
	c.scalar[0] = 1.0f;
	ferry_emit_op(p, s, &c, -1, "d layer_output");
	if (!t->offload) /* else each layer's gradient slot is zeroed before its backward */
		ferry_emit_zero(p, s, ferry_buffer_ptr(t->grads), 2 * t->wfloats * sizeof(float), -1, "dw1, dw2");
	if ((st = ferry_layer_exec_backward(t->layers, p, 1, t->cfg.rows, false)))
		return st;
	ferry_emit_copy(p, s, t->host_loss, ferry_buffer_ptr(t->loss), sizeof(double), FERRY_COPY_D2H, -1, "loss");
	return p->failed ? ferry_error(FERRY_ERR_NOMEM, "tutorial network: out of host memory") : FERRY_OK;
}

/* w1, w2 (and their compute copy) and the gradients on the device. */
static ferry_status alloc_resident(ferry_tutorial_t t)
{
	ferry_status st;

	if ((st = ferry_buffer_alloc(t->be, 2 * t->wfloats * sizeof(float), &t->w)) ||
	    (t->act != FERRY_F32 &&
	     (st = ferry_buffer_alloc(t->be, 2 * t->wfloats * ferry_dtype_size(t->act), &t->wcopy))) ||
	    (st = ferry_buffer_alloc(t->be, 2 * t->wfloats * sizeof(float), &t->grads)))
		return st;
	for (int p = 0; p < N_PARAMS; p++) {
		t->master[p] = (float *)ferry_buffer_ptr(t->w) + p * t->wfloats;
		t->base[p] = t->wcopy ? (char *)ferry_buffer_ptr(t->wcopy) + p * t->wfloats * ferry_dtype_size(t->act)
				      : (void *)t->master[p];
		t->grad_base[p] = (float *)ferry_buffer_ptr(t->grads) + p * t->wfloats;
		t->stride[p] = t->wfloats / t->cfg.layers;
	}
	return FERRY_OK;
}

/* --offload-params: w1, w2 and their gradients on the host; on the device
 * a ring of layers of both and a two-slot gradient ring. */
static ferry_status alloc_offloaded(ferry_tutorial_t t, const struct ferry_exec_opts *o)
{
	const size_t layer = t->wfloats / t->cfg.layers, S = slot_floats(&t->cfg);
	struct ferry_weight_rings *r = &t->rings;
	ferry_status st;

	*r = (struct ferry_weight_rings){ .ring = ring_slots(&t->cfg, o), .grad_ring = t->cfg.layers < 2 ? 1 : 2,
					  .slot_numel = S, .elem = sizeof(float), .n = N_PARAMS };
	if ((st = ferry_buffer_alloc(t->be, (size_t)r->ring * S * sizeof(float), &t->wring)) ||
	    (st = ferry_buffer_alloc(t->be, 2 * S * sizeof(float), &t->gring)) ||
	    (st = ferry_host_alloc(t->be, 2 * t->wfloats * sizeof(float), (void **)&t->host_w)) ||
	    (st = ferry_host_alloc(t->be, 2 * t->wfloats * sizeof(float), (void **)&t->host_grads)))
		return st;
	r->grad_slot0 = ferry_buffer_ptr(t->gring);
	for (int p = 0; p < N_PARAMS; p++) {
		struct ferry_weight_stream *w = &r->s[p];

		t->master[p] = t->host_w + p * t->wfloats;
		t->base[p] = (float *)ferry_buffer_ptr(t->wring) + p * layer;
		t->grad_base[p] = (float *)ferry_buffer_ptr(t->gring) + p * layer;
		t->stride[p] = layer;
		*w = (struct ferry_weight_stream){ p == W1 ? "w1" : "w2", t->master[p], t->host_grads + p * t->wfloats,
						   t->base[p], t->grad_base[p], layer, 0, false, 0 };
	}
	return FERRY_OK;
}

ferry_status ferry_tutorial_create(ferry_backend_t be, const struct ferry_tutorial_config *cfg,
				   const struct ferry_exec_opts *opts, ferry_tutorial_t *out)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	struct ferry_dims d = dims_of(cfg);
	struct ferry_stack_plan sp;
	struct ferry_tutorial *t;
	ferry_status st;

	*out = NULL;
	o.act_dtype = ferry_backend_caps(be).act_dtype;
	if ((st = check(cfg)) || (st = stack_plan(cfg, &o, &sp)))
		return st;
	t = ferry_calloc(1, sizeof(*t));
	if (!t)
		return ferry_error(FERRY_ERR_NOMEM, "tutorial network: out of host memory");
	t->be = be;
	t->cfg = *cfg;
	t->wfloats = ferry_tutorial_weight_floats(cfg);
	t->act = o.act_dtype;
	ferry_program_init(&t->grad, "gradient");
	t->offload = offloads_params(&o);
	if (t->offload ? (st = check_offload(cfg, &o)) || (st = alloc_offloaded(t, &o)) : (st = alloc_resident(t)))
		goto fail;
	if ((st = ferry_buffer_alloc(be, (size_t)cfg->rows * cfg->channels * sizeof(float), &t->input)) ||
	    (st = ferry_buffer_alloc(be, sizeof(double), &t->loss)) ||
	    (st = ferry_host_alloc(be, sizeof(double), (void **)&t->host_loss)))
		goto fail;
	{
		struct ferry_weight_table wt = { t->base, t->grad_base, t->stride, t->offload ? &t->rings : NULL, 0, 0 };

		int compute = ferry_sched_stream(&t->res, "compute");

		if ((st = ferry_tutorial_stack_storage(&ferry_tutorial_layer_decl, &sp, NULL, be, &t->stack)) ||
		    (st = ferry_layer_exec_create(&t->res, compute, &ferry_tutorial_layer_decl, &d, NULL, &wt, &sp,
						  &t->stack.storage, &t->layers)) ||
		    (st = emit_grad(t, &t->grad, compute)) ||
		    (st = ferry_sched_runtime_create(be, &t->res, &t->rt)))
			goto fail;
		t->s = t->rt.stream[compute];
	}
	*out = t;
	return FERRY_OK;
fail:
	ferry_tutorial_free(t);
	return st;
}

/* The compute copy of n fp32 values, when there is one. */
static ferry_status cast(ferry_tutorial_t t, ferry_buffer_t dst, ferry_buffer_t src, size_t n)
{
	struct ferry_op_call c = { .kind = FERRY_OP_CAST };

	if (!dst)
		return FERRY_OK;
	c.out[0] = ferry_buffer_ptr(dst);
	c.in[0] = ferry_buffer_ptr(src);
	c.n = (long)n;
	return ferry_stream_run_op(t->s, &c);
}

static ferry_status sync_copy(ferry_tutorial_t t, void *dst, const void *src, size_t n,
			      enum ferry_copy_kind kind)
{
	ferry_status st = ferry_memcpy_async(t->s, dst, src, n, kind);

	return st ? st : ferry_stream_synchronize(t->s);
}

ferry_status ferry_tutorial_set(ferry_tutorial_t t, const float *w1, const float *w2, const float *x)
{
	size_t wb = t->wfloats * sizeof(float);
	ferry_status st;

	if (t->offload) { /* host memory */
		memcpy(t->master[W1], w1, wb);
		memcpy(t->master[W2], w2, wb);
	} else if ((st = sync_copy(t, t->master[W1], w1, wb, FERRY_COPY_H2D)) ||
		   (st = sync_copy(t, t->master[W2], w2, wb, FERRY_COPY_H2D)) ||
		   (st = cast(t, t->wcopy, t->w, 2 * t->wfloats))) {
		return st;
	}
	return sync_copy(t, ferry_buffer_ptr(t->input), x,
			 (size_t)t->cfg.rows * t->cfg.channels * sizeof(float), FERRY_COPY_H2D);
}

ferry_status ferry_tutorial_get_grads(ferry_tutorial_t t, float *dw1, float *dw2)
{
	size_t wb = t->wfloats * sizeof(float);
	ferry_status st;

	if (t->offload) { /* on the host once every stream has drained (ferry_tutorial_grad) */
		memcpy(dw1, t->host_grads, wb);
		memcpy(dw2, t->host_grads + t->wfloats, wb);
		return FERRY_OK;
	}
	st = sync_copy(t, dw1, t->grad_base[W1], wb, FERRY_COPY_D2H);
	return st ? st : sync_copy(t, dw2, t->grad_base[W2], wb, FERRY_COPY_D2H);
}

ferry_status ferry_tutorial_get_weights(ferry_tutorial_t t, float *w1, float *w2)
{
	size_t wb = t->wfloats * sizeof(float);
	ferry_status st;

	if (t->offload) {
		memcpy(w1, t->master[W1], wb);
		memcpy(w2, t->master[W2], wb);
		return FERRY_OK;
	}
	st = sync_copy(t, w1, t->master[W1], wb, FERRY_COPY_D2H);
	return st ? st : sync_copy(t, w2, t->master[W2], wb, FERRY_COPY_D2H);
}

ferry_status ferry_tutorial_grad(ferry_tutorial_t t, double *loss)
{
	ferry_status st = ferry_program_submit(&t->grad, &t->rt, NULL);

	for (int i = 0; i < t->rt.n_streams && !st; i++) /* the gradients' copies too */
		st = ferry_stream_synchronize(t->rt.stream[i]);
	if (!st && loss)
		*loss = *t->host_loss;
	return st;
}

ferry_status ferry_tutorial_sgd(ferry_tutorial_t t, float lr)
{
	struct ferry_op_call c;
	ferry_status st;

	if (t->offload)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "tutorial network: SGD with the parameters offloaded");
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_SGD;
	c.param = ferry_buffer_ptr(t->w);
	c.param_copy = t->wcopy ? ferry_buffer_ptr(t->wcopy) : NULL;
	c.in[0] = ferry_buffer_ptr(t->grads);
	c.n = (long)(2 * t->wfloats);
	c.scalar[0] = lr;
	st = ferry_stream_run_op(t->s, &c);
	return st ? st : ferry_stream_synchronize(t->s);
}
