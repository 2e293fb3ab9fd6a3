/*
 * A declared model on a backend: the executor.
 *
 * Everything it touches comes from the tensor table (src/plan/): it
 * allocates the table's buffers, then runs the declaration's prologue, the
 * layer stack (offload/engine.c, which places activations by policy) and
 * the epilogue forward, and backward in reverse, and AdamW over the
 * parameter tensors.  Nothing here knows which model it runs.
 *
 * Stage tensors bound to the stack (the prologue's output, the epilogue's
 * input) are the engine's storage; their gradients too, and the engine
 * alternates its gradient buffers, so those addresses are asked for when
 * used, not cached.
 */
#include "ferry/model.h"
#include "backend/backend_impl.h"
#include "core/error.h"
#include "offload/engine.h"
#include "plan/tensor_table.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct ferry_model {
	ferry_backend_t be;
	ferry_stream_t compute;
	struct ferry_tensor_table tt;
	struct ferry_table_alloc mem;
	const struct ferry_model_decl *md;
	struct ferry_model_config cfg;
	int B, T;                     /* largest batch */
	int cur_B, cur_T;             /* of the last forward */
	bool have_targets;
	enum ferry_dtype act;
	size_t asz;                   /* bytes per activation element */
	float scalars[FERRY_OP_SCALAR_COUNT];
	void *wptr[FERRY_MODEL_MAX_PARAMS];   /* what kernels read: params or their copy */
	float *gptr[FERRY_MODEL_MAX_PARAMS];  /* fp32 gradients */
	size_t stride[FERRY_MODEL_MAX_PARAMS];
	struct ferry_layer_exec *layers;
	float *host_losses;           /* [B*T] */
	double *host_sumsq;
};

/* The prologue or the epilogue: a declaration, its roles, table indices. */
struct stage {
	const struct ferry_layer_decl *d;
	const struct ferry_stage_tensor *roles;
	const int *index, *grad_index;
};

static struct stage prologue_of(const struct ferry_model *m)
{
	return (struct stage){ m->md->prologue, m->md->prologue_roles, m->tt.ix.prologue,
			       m->tt.ix.prologue_grad };
}

static struct stage epilogue_of(const struct ferry_model *m)
{
	return (struct stage){ m->md->epilogue, m->md->epilogue_roles, m->tt.ix.epilogue,
			       m->tt.ix.epilogue_grad };
}

static void *entry(const struct ferry_model *m, int i)
{
	return ferry_tensor_ptr(&m->tt, &m->mem, i);
}

static void *buffer(const struct ferry_model *m, int b)
{
	return ferry_buffer_ptr(m->mem.dev[b]);
}

const struct ferry_model_config *ferry_model_config(ferry_model_t m) { return &m->cfg; }
size_t ferry_model_num_params(ferry_model_t m) { return m->tt.n_params; }
int ferry_model_max_seq_len(ferry_model_t m) { return m->T; }

void ferry_model_free(ferry_model_t m)
{
	if (!m)
		return;
	ferry_stream_free(m->compute); /* waits for its work first */
	ferry_layer_exec_free(m->layers);
	ferry_tensor_table_free(&m->mem);
	ferry_tensor_table_release(&m->tt);
	ferry_host_free(m->be, m->host_losses);
	ferry_host_free(m->be, m->host_sumsq);
	ferry_free(m);
}

ferry_status ferry_model_plan(const struct ferry_model_config *cfg, int B, int T,
			      const struct ferry_exec_opts *opts, struct ferry_plan *plan)
{
	struct ferry_tensor_table tt;
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if ((st = ferry_tensor_table_build(cfg, B, T, opts, &tt)))
		return st;
	st = ferry_tensor_table_plan(&tt, plan);
	ferry_tensor_table_release(&tt);
	return st;
}

/* Kernel and gradient addresses of every parameter; a tied one reads the
 * tensor it is tied to. */
static void bind_params(struct ferry_model *m)
{
	for (int p = 0; p < m->md->n_params; p++) {
		const struct ferry_param_decl *pd = &m->md->params[p];
		int q = ferry_param_present(m->md, &m->cfg, p) ? p : pd->tied_to;
		struct ferry_param_info pi;

		m->gptr[p] = entry(m, m->tt.ix.grad[q]);
		m->wptr[p] = m->tt.ix.copy[q] >= 0 ? entry(m, m->tt.ix.copy[q]) : entry(m, m->tt.ix.param[q]);
		m->stride[p] = ferry_model_param_info(&m->cfg, q, &pi) == FERRY_OK && pi.layers ? pi.layer_numel : 0;
	}
}

static ferry_status create_stack(struct ferry_model *m)
{
	const struct ferry_layer_decl *d = m->md->layer;
	struct ferry_weight_table wt = { m->wptr, m->gptr, m->stride };
	struct ferry_stack_storage mem = { .grad = entry(m, m->tt.ix.stack_grad) };

	for (int t = 0; t < d->n_tensors; t++) {
		mem.act[t] = entry(m, m->tt.ix.stack_act[t]);
		mem.host[t] = entry(m, m->tt.ix.stack_host[t]);
	}
	return ferry_layer_exec_create(m->be, d, &m->tt.dims, m->scalars, &wt, &m->tt.sp, &mem, &m->layers);
}

static ferry_status zero_state(struct ferry_model *m)
{
	size_t n = m->tt.n_params * sizeof(float);
	ferry_status st = ferry_memset_zero_async(m->compute, buffer(m, m->tt.ix.mom_buffer), n);

	if (!st)
		st = ferry_memset_zero_async(m->compute, buffer(m, m->tt.ix.var_buffer), n);
	if (!st)
		st = ferry_memset_zero_async(m->compute, buffer(m, m->tt.ix.grads_buffer), n);
	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_model_create(ferry_backend_t be, const struct ferry_model_config *cfg, int B, int T,
				const struct ferry_exec_opts *opts, ferry_model_t *out)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	struct ferry_model *m;
	ferry_status st;
	size_t N = (size_t)B * T;

	*out = NULL;
	o.act_dtype = ferry_backend_caps(be).act_dtype; /* the backend decides */
	m = ferry_calloc(1, sizeof(*m));
	if (!m)
		return ferry_error(FERRY_ERR_NOMEM, "model: out of host memory");
	m->be = be;
	if ((st = ferry_tensor_table_build(cfg, B, T, &o, &m->tt)))
		goto fail;
	m->cfg = m->tt.cfg;
	m->md = m->tt.md;
	if (ferry_backend_caps(be).max_head_size && m->cfg.head_size > ferry_backend_caps(be).max_head_size) {
		st = ferry_error(FERRY_ERR_UNSUPPORTED, "head size %d is larger than the %s backend's %d",
				 m->cfg.head_size, ferry_backend_name(be), ferry_backend_caps(be).max_head_size);
		goto fail;
	}
	m->act = o.act_dtype;
	m->asz = ferry_dtype_size(m->act);
	m->B = B;
	m->T = T;
	ferry_model_scalars(&m->cfg, m->scalars);
	if ((st = ferry_stream_create(be, "compute", &m->compute)) ||
	    (st = ferry_tensor_table_alloc(&m->tt, be, &m->mem)))
		goto fail;
	bind_params(m);
	if ((st = create_stack(m)) ||
	    (st = ferry_host_alloc(be, N * sizeof(float), (void **)&m->host_losses)) ||
	    (st = ferry_host_alloc(be, sizeof(double), (void **)&m->host_sumsq)) || (st = zero_state(m)))
		goto fail;
	*out = m;
	return FERRY_OK;
fail:
	ferry_model_free(m);
	return st;
}

/* ---- parameters and optimizer state ------------------------------------------- */

/* splitmix64 -> uniform -> Box-Muller: deterministic normal samples. */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static void fill_normal(float *x, size_t n, double std, uint64_t *s)
{
	for (size_t i = 0; i < n; i += 2) {
		double r = sqrt(-2.0 * log(uniform01(s))), a = 2.0 * M_PI * uniform01(s);

		x[i] = (float)(std * r * cos(a));
		if (i + 1 < n)
			x[i + 1] = (float)(std * r * sin(a));
	}
}

/* Parameter p's initial values, drawing normals from one stream in
 * declaration order. */
static void init_param(const struct ferry_model *m, int p, const struct ferry_param_info *pi, float *x,
		       uint64_t *s)
{
	const struct ferry_param_decl *pd = &m->md->params[p];

	switch (pd->init) {
	case FERRY_INIT_NORMAL: fill_normal(x, pi->numel, 0.02, s); break;
	case FERRY_INIT_NORMAL_RESID: fill_normal(x, pi->numel, 0.02 / sqrt(2.0 * m->cfg.layers), s); break;
	case FERRY_INIT_ONE:
		for (size_t i = 0; i < pi->numel; i++)
			x[i] = 1.0f;
		break;
	case FERRY_INIT_ZERO: memset(x, 0, pi->numel * sizeof(float)); break;
	}
	/* the padding rows of an embedding never see a token: keep them zero */
	if (pd->zero_pad_rows && pi->ndim == 2) {
		size_t first = (size_t)m->cfg.vocab * (size_t)pi->shape[1];

		memset(x + first, 0, (pi->numel - first) * sizeof(float));
	}
}

ferry_status ferry_model_init_random(ferry_model_t m, uint64_t seed)
{
	float *host;
	ferry_status st;
	uint64_t s = seed;

	st = ferry_host_alloc(m->be, m->tt.n_params * sizeof(float), (void **)&host);
	if (st)
		return st;
	for (int p = 0; p < m->md->n_params && !st; p++) {
		struct ferry_param_info pi;

		if (!(st = ferry_model_param_info(&m->cfg, p, &pi)) && pi.present)
			init_param(m, p, &pi, host + pi.offset, &s);
	}
	if (!st)
		st = ferry_model_set_params(m, host);
	ferry_host_free(m->be, host);
	return st;
}

static ferry_status copy_sync(ferry_model_t m, void *dst, const void *src, size_t n, enum ferry_copy_kind kind)
{
	ferry_status st = ferry_memcpy_async(m->compute, dst, src, n, kind);

	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_model_set_params(ferry_model_t m, const float *params)
{
	void *dev = buffer(m, m->tt.ix.params_buffer);
	ferry_status st = ferry_memcpy_async(m->compute, dev, params, m->tt.n_params * sizeof(float),
					     FERRY_COPY_H2D);
	struct ferry_op_call c = { .kind = FERRY_OP_CAST };

	if (!st && m->tt.ix.copy_buffer >= 0) { /* the copy the kernels read */
		c.out[0] = buffer(m, m->tt.ix.copy_buffer);
		c.in[0] = dev;
		c.n = (long)m->tt.n_params;
		st = ferry_stream_run_op(m->compute, &c);
	}
	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_model_get_params(ferry_model_t m, float *params)
{
	return copy_sync(m, params, buffer(m, m->tt.ix.params_buffer), m->tt.n_params * sizeof(float),
			 FERRY_COPY_D2H);
}

ferry_status ferry_model_get_grads(ferry_model_t m, float *grads)
{
	return copy_sync(m, grads, buffer(m, m->tt.ix.grads_buffer), m->tt.n_params * sizeof(float),
			 FERRY_COPY_D2H);
}

ferry_status ferry_model_set_opt_state(ferry_model_t m, const float *mom, const float *var)
{
	size_t n = m->tt.n_params * sizeof(float);
	ferry_status st = copy_sync(m, buffer(m, m->tt.ix.mom_buffer), mom, n, FERRY_COPY_H2D);

	return st ? st : copy_sync(m, buffer(m, m->tt.ix.var_buffer), var, n, FERRY_COPY_H2D);
}

ferry_status ferry_model_get_opt_state(ferry_model_t m, float *mom, float *var)
{
	size_t n = m->tt.n_params * sizeof(float);
	ferry_status st = copy_sync(m, mom, buffer(m, m->tt.ix.mom_buffer), n, FERRY_COPY_D2H);

	return st ? st : copy_sync(m, var, buffer(m, m->tt.ix.var_buffer), n, FERRY_COPY_D2H);
}

/* ---- prologue and epilogue ------------------------------------------------------ */

/* The address of stage tensor t. */
static void *stage_ptr(const struct ferry_model *m, const struct stage *s, int t)
{
	switch (s->roles[t].role) {
	case FERRY_ROLE_STACK_INPUT: return ferry_layer_exec_input(m->layers);
	case FERRY_ROLE_STACK_OUTPUT: return ferry_layer_exec_output(m->layers);
	case FERRY_ROLE_ALIAS: return stage_ptr(m, s, s->roles[t].alias_of);
	default: return entry(m, s->index[t]);
	}
}

/* The address of stage tensor t's gradient (NULL: it has none). */
static void *stage_grad(const struct ferry_model *m, const struct stage *s, int t)
{
	if (!(ferry_layer_differentiable(s->d) & (1u << t)))
		return NULL;
	switch (s->roles[t].role) {
	case FERRY_ROLE_STACK_INPUT: return (void *)ferry_layer_exec_input_grad(m->layers);
	case FERRY_ROLE_STACK_OUTPUT: return ferry_layer_exec_output_grad(m->layers);
	case FERRY_ROLE_ACT:
		return s->roles[t].grad_in_place ? stage_ptr(m, s, t) : entry(m, s->grad_index[t]);
	default: return NULL;
	}
}

/* Op o's forward call in a stage (stage parameters are not per layer). */
static void stage_call(const struct ferry_model *m, const struct stage *s, int o, int B, int T,
		       struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &s->d->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	struct ferry_dims d = ferry_model_dims(&m->cfg, B, T);

	ferry_op_call_shape(s->d, o, &d, m->scalars, c);
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = stage_ptr(m, s, op->out[i]);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = stage_ptr(m, s, op->in[i]);
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0)
			c->w[i] = (char *)m->wptr[op->w[i].param] +
				  (size_t)op->w[i].block * ferry_op_weight_view(c, i) * m->asz;
	if (op->kind == FERRY_OP_ENCODER || op->kind == FERRY_OP_SOFTMAX_XENT)
		c->tokens = stage_ptr(m, s, op->tokens);
}

static ferry_status stage_forward(ferry_model_t m, const struct stage *s, int B, int T)
{
	struct ferry_op_call c;
	ferry_status st;

	for (int o = 0; o < s->d->n_ops; o++) {
		stage_call(m, s, o, B, T, &c);
		if ((st = ferry_stream_run_op(m->compute, &c)))
			return st;
	}
	return FERRY_OK;
}

/* Gradients accumulate, so each starts at zero, except the stage output's
 * (it arrives from outside) and those written in place. */
static ferry_status stage_zero_grads(ferry_model_t m, const struct stage *s, int B, int T)
{
	struct ferry_dims d = ferry_model_dims(&m->cfg, B, T);
	ferry_status st;

	for (int t = 0; t < s->d->n_tensors; t++) {
		void *g = stage_grad(m, s, t);

		if (!g || t == s->d->output || s->roles[t].grad_in_place)
			continue;
		if ((st = ferry_memset_zero_async(m->compute, g, ferry_layer_tensor_numel(s->d, t, &d) * m->asz)))
			return st;
	}
	return FERRY_OK;
}

static ferry_status stage_backward(ferry_model_t m, const struct stage *s, int B, int T)
{
	struct ferry_op_call c;
	ferry_status st;

	if ((st = stage_zero_grads(m, s, B, T)))
		return st;
	for (int o = s->d->n_ops - 1; o >= 0; o--) {
		const struct ferry_op_decl *op = &s->d->ops[o];
		const struct ferry_op_info *info = ferry_op_info(op->kind);

		stage_call(m, s, o, B, T, &c);
		c.backward = true;
		for (int i = 0; i < info->n_out; i++)
			c.dout[i] = stage_grad(m, s, op->out[i]);
		for (int i = 0; i < info->n_in; i++)
			c.din[i] = stage_grad(m, s, op->in[i]);
		for (int i = 0; i < info->n_w; i++)
			if (op->w[i].param >= 0)
				c.dw[i] = m->gptr[op->w[i].param] + (size_t)op->w[i].block * ferry_op_weight_view(&c, i);
		if (op->kind == FERRY_OP_SOFTMAX_XENT)
			c.scalar[0] = 1.0f / (float)((size_t)B * T); /* the loss is the mean over B*T */
		if ((st = ferry_stream_run_op(m->compute, &c)))
			return st;
	}
	return FERRY_OK;
}

/* Stage tensor index of a role (tokens, targets, losses), or -1. */
static int role_tensor(const struct stage *s, enum ferry_tensor_role role)
{
	for (int t = 0; t < s->d->n_tensors; t++)
		if (s->roles[t].role == role)
			return t;
	return -1;
}

/* ---- a training step ------------------------------------------------------------ */

static ferry_status check_tokens(const ferry_model_t m, const int32_t *tok, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
			return ferry_error(FERRY_ERR_INVALID, "%s token %d at position %zu is outside the vocabulary (%d)",
					   what, tok[i], i, m->cfg.vocab);
	return FERRY_OK;
}

/* Copies the batch to the device: inputs, and targets (zeros without:
 * any valid target will do when the loss is not read). */
static ferry_status upload_batch(ferry_model_t m, const int32_t *inputs, const int32_t *targets, size_t N)
{
	struct stage pro = prologue_of(m), epi = epilogue_of(m);
	void *tok = stage_ptr(m, &pro, role_tensor(&pro, FERRY_ROLE_TOKENS));
	void *tgt = stage_ptr(m, &epi, role_tensor(&epi, FERRY_ROLE_TARGETS));
	ferry_status st = ferry_memcpy_async(m->compute, tok, inputs, N * sizeof(int32_t), FERRY_COPY_H2D);

	if (st)
		return st;
	if (targets)
		return ferry_memcpy_async(m->compute, tgt, targets, N * sizeof(int32_t), FERRY_COPY_H2D);
	return ferry_memset_zero_async(m->compute, tgt, N * sizeof(int32_t));
}

static ferry_status forward(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B, int T,
			    float *loss, bool for_backward)
{
	struct stage pro = prologue_of(m), epi = epilogue_of(m);
	size_t N = (size_t)B * T;
	ferry_status st;

	if (B < 1 || T < 1 || T > m->T || N > (size_t)m->B * m->T)
		return ferry_error(FERRY_ERR_INVALID, "batch %dx%d does not fit the model's %dx%d "
				   "(max sequence %d)", B, T, m->B, m->T, m->cfg.max_seq);
	st = check_tokens(m, inputs, N, "input");
	if (!st && targets)
		st = check_tokens(m, targets, N, "target");
	if (st)
		return st;
	m->cur_B = B;
	m->cur_T = T;
	m->have_targets = targets != NULL;
	if ((st = upload_batch(m, inputs, targets, N)) || (st = stage_forward(m, &pro, B, T)) ||
	    (st = ferry_layer_exec_forward(m->layers, m->compute, B, T, for_backward)) ||
	    (st = stage_forward(m, &epi, B, T)))
		return st;
	if (!targets)
		return ferry_stream_synchronize(m->compute);
	st = copy_sync(m, m->host_losses, stage_ptr(m, &epi, role_tensor(&epi, FERRY_ROLE_LOSSES)),
		       N * sizeof(float), FERRY_COPY_D2H);
	if (st)
		return st;
	if (loss) {
		double sum = 0;

		for (size_t i = 0; i < N; i++)
			sum += m->host_losses[i];
		*loss = (float)(sum / (double)N);
	}
	return FERRY_OK;
}

ferry_status ferry_model_forward(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B,
				 int T, float *loss)
{
	return forward(m, inputs, targets, B, T, loss, targets != NULL);
}

ferry_status ferry_model_loss(ferry_model_t m, const int32_t *inputs, const int32_t *targets, int B, int T,
			      float *loss)
{
	ferry_status st;

	if (!targets)
		return ferry_error(FERRY_ERR_INVALID, "a loss needs targets");
	st = forward(m, inputs, targets, B, T, loss, false);
	m->have_targets = false; /* nothing was kept for a backward pass */
	return st;
}

ferry_status ferry_model_probs(ferry_model_t m, int row, float *probs)
{
	struct stage epi = epilogue_of(m);
	size_t V = (size_t)m->cfg.vocab;
	int t = -1;
	ferry_status st;

	if (row < 0 || row >= m->cur_B * m->cur_T)
		return ferry_error(FERRY_ERR_INVALID, "row %d outside the last batch", row);
	for (int o = 0; o < epi.d->n_ops; o++)
		if (epi.d->ops[o].kind == FERRY_OP_SOFTMAX_XENT)
			t = epi.d->ops[o].out[1];
	st = copy_sync(m, probs, (char *)stage_ptr(m, &epi, t) + (size_t)row * m->cfg.padded_vocab * m->asz,
		       V * m->asz, FERRY_COPY_D2H);
	/* bf16 probabilities widen in place, from the end so nothing is
	 * overwritten before it is read: a bf16 is the top half of an fp32 */
	for (size_t i = V; !st && m->act == FERRY_BF16 && i-- > 0;) {
		uint16_t h;
		uint32_t bits;

		memcpy(&h, (char *)probs + 2 * i, 2);
		bits = (uint32_t)h << 16;
		memcpy(&probs[i], &bits, 4);
	}
	return st;
}

ferry_status ferry_model_zero_grad(ferry_model_t m)
{
	ferry_status st = ferry_memset_zero_async(m->compute, buffer(m, m->tt.ix.grads_buffer),
						  m->tt.n_params * sizeof(float));

	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_model_backward(ferry_model_t m)
{
	struct stage pro = prologue_of(m), epi = epilogue_of(m);
	int B = m->cur_B, T = m->cur_T;
	ferry_status st;

	if (!m->have_targets)
		return ferry_error(FERRY_ERR_INVALID,
				   "backward needs a forward pass with targets (one backward per forward)");
	/* the epilogue's backward may overwrite what it saved (the softmax
	 * turns probabilities into their gradient in place) */
	m->have_targets = false;
	if ((st = stage_backward(m, &epi, B, T)) ||
	    (st = ferry_layer_exec_backward(m->layers, m->compute, B, T)) || (st = stage_backward(m, &pro, B, T)))
		return st;
	return ferry_stream_synchronize(m->compute);
}

/* The global gradient norm: one reduction over the gradient buffer. */
static ferry_status grad_norm(ferry_model_t m, double *norm)
{
	void *sumsq = entry(m, m->tt.ix.grad_norm);
	struct ferry_op_call c = { .kind = FERRY_OP_SUM_SQUARES };
	ferry_status st;

	if ((st = ferry_memset_zero_async(m->compute, sumsq, sizeof(double))))
		return st;
	c.in[0] = buffer(m, m->tt.ix.grads_buffer);
	c.n = (long)m->tt.n_params;
	c.result = sumsq;
	if ((st = ferry_stream_run_op(m->compute, &c)) ||
	    (st = copy_sync(m, m->host_sumsq, sumsq, sizeof(double), FERRY_COPY_D2H)))
		return st;
	*norm = sqrt(*m->host_sumsq);
	return FERRY_OK;
}

ferry_status ferry_model_update(ferry_model_t m, const struct ferry_adamw *opt, int t, float *gnorm)
{
	const struct ferry_table_index *ix = &m->tt.ix;
	struct ferry_op_call c;
	ferry_status st;
	double norm;
	float scale = 1.0f;

	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	if ((st = grad_norm(m, &norm)))
		return st;
	if (gnorm)
		*gnorm = (float)norm;
	if (!isfinite(norm))
		return ferry_error(FERRY_ERR_INVALID, "gradient norm is %f: training diverged", norm);
	if (opt->grad_clip > 0 && norm > opt->grad_clip)
		scale = (float)(opt->grad_clip / norm);
	for (int p = 0; p < m->md->n_params; p++) {
		struct ferry_param_info pi;

		if (ix->param[p] < 0 || (st = ferry_model_param_info(&m->cfg, p, &pi)))
			continue;
		memset(&c, 0, sizeof(c));
		c.kind = FERRY_OP_ADAMW;
		c.param = entry(m, ix->param[p]);
		c.param_copy = entry(m, ix->copy[p]);
		c.out[0] = entry(m, ix->mom[p]);
		c.out[1] = entry(m, ix->var[p]);
		c.in[0] = entry(m, ix->grad[p]);
		c.n = (long)pi.numel;
		c.scalar[0] = opt->lr;
		c.scalar[1] = opt->beta1;
		c.scalar[2] = opt->beta2;
		c.scalar[3] = opt->eps;
		c.scalar[4] = m->md->params[p].decay ? opt->weight_decay : 0.0f;
		c.scalar[5] = scale;
		c.step = t;
		if ((st = ferry_stream_run_op(m->compute, &c)))
			return st;
	}
	return st ? st : ferry_stream_synchronize(m->compute);
}

/* FLOPs of a stage's matrix products and attention, forward and backward. */
static double stage_flops(const struct ferry_model *m, const struct ferry_layer_decl *d, int B, int T)
{
	struct ferry_dims dims = ferry_model_dims(&m->cfg, B, T);
	struct ferry_op_call c;
	double f = 0;

	for (int o = 0; o < d->n_ops; o++) {
		if (!ferry_op_info(d->ops[o].kind)->is_dot && d->ops[o].kind != FERRY_OP_ATTENTION)
			continue;
		ferry_op_call_shape(d, o, &dims, m->scalars, &c);
		f += ferry_op_flops(&c);
		c.backward = true;
		f += ferry_op_flops(&c);
	}
	return f;
}

double ferry_model_step_flops(ferry_model_t m, int B, int T)
{
	return stage_flops(m, m->md->prologue, B, T) + m->cfg.layers * stage_flops(m, m->md->layer, B, T) +
	       stage_flops(m, m->md->epilogue, B, T);
}
