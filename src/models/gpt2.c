/*
 * GPT-2 on a backend: prologue (token + position embedding), the declared
 * layer stacked L times (offload/engine.c), epilogue (final layernorm, LM
 * head tied to the token embedding, softmax cross-entropy), and AdamW.
 *
 * Device memory: parameters, gradients and AdamW moments are one fp32
 * buffer each, in llm.c's parameter order, so checkpoints copy straight in
 * and out.  When the backend computes in bf16, a bf16 copy of the
 * parameters is what the kernels read; AdamW updates both.
 */
#include "ferry/model.h"
#include "backend/backend_impl.h"
#include "core/error.h"
#include "models/gpt2_internal.h"
#include "offload/engine.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct ferry_gpt2 {
	ferry_backend_t be;
	ferry_stream_t compute;
	struct ferry_gpt2_config cfg;
	int B, T;                     /* largest batch */
	int cur_B, cur_T;             /* of the last forward */
	bool have_targets;
	size_t n_params;
	size_t sizes[FERRY_GPT2_NUM_PARAMS];
	size_t layer_stride[FERRY_GPT2_NUM_PARAMS];
	float *param_ptr[FERRY_GPT2_NUM_PARAMS], *grad_ptr[FERRY_GPT2_NUM_PARAMS];
	void *wptr[FERRY_GPT2_NUM_PARAMS];  /* what kernels read: params or their copy */
	enum ferry_dtype act;
	size_t asz;                         /* bytes per activation element */
	ferry_buffer_t params, grads, mom, var, wcopy;
	ferry_buffer_t tokens, targets, lnf, lnf_mean, lnf_rstd, logits, losses, dlnf, sumsq;
	struct ferry_layer_exec *layers;
	float *host_losses;           /* [B*T] */
	double *host_sumsq;
};

static float *fptr(ferry_buffer_t b) { return ferry_buffer_ptr(b); }
static void *vptr(ferry_buffer_t b) { return ferry_buffer_ptr(b); }

const struct ferry_gpt2_config *ferry_gpt2_config(ferry_gpt2_t m) { return &m->cfg; }
size_t ferry_gpt2_num_params(ferry_gpt2_t m) { return m->n_params; }
int ferry_gpt2_max_seq_len(ferry_gpt2_t m) { return m->T; }

void ferry_gpt2_free(ferry_gpt2_t m)
{
	if (!m)
		return;
	ferry_stream_free(m->compute); /* waits for its work first */
	ferry_layer_exec_free(m->layers);
	ferry_buffer_t *bufs[] = { &m->params, &m->grads, &m->mom, &m->var, &m->wcopy, &m->tokens,
				   &m->targets, &m->lnf, &m->lnf_mean, &m->lnf_rstd, &m->logits,
				   &m->losses, &m->dlnf, &m->sumsq };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		ferry_buffer_free(*bufs[i]);
	ferry_host_free(m->be, m->host_losses);
	ferry_host_free(m->be, m->host_sumsq);
	ferry_free(m);
}

static ferry_status check_shape(const struct ferry_gpt2_config *cfg, int B, int T)
{
	ferry_status st = ferry_gpt2_config_check(cfg);

	if (st)
		return st;
	if (B < 1 || T < 1)
		return ferry_error(FERRY_ERR_INVALID, "batch size %d and sequence length %d must be positive", B, T);
	/* kernels index rows with int, and N * Vp logits must fit in memory sizes */
	if ((int64_t)B * T > INT32_MAX / 4 ||
	    (double)B * T * cfg->padded_vocab * sizeof(float) > (double)SIZE_MAX / 4)
		return ferry_error(FERRY_ERR_INVALID, "batch %d x %d is too large", B, T);
	if (T > cfg->max_seq)
		return ferry_error(FERRY_ERR_INVALID,
				   "sequence length %d is longer than the model's maximum %d", T, cfg->max_seq);
	return FERRY_OK;
}

static ferry_status stack_plan(const struct ferry_gpt2_config *cfg, int B, int T,
			       const struct ferry_exec_opts *opts, struct ferry_stack_plan *sp)
{
	struct ferry_layer_dims dims = { B, T, cfg->channels, cfg->heads, cfg->layers };

	return ferry_stack_plan_make(&ferry_gpt2_layer, &dims, opts, sp);
}

ferry_status ferry_gpt2_plan(const struct ferry_gpt2_config *cfg, int B, int T,
			     const struct ferry_exec_opts *opts, struct ferry_plan *plan)
{
	struct ferry_layer_dims dims = { B, T, cfg->channels, cfg->heads, cfg->layers };
	struct ferry_stack_plan sp;
	size_t n_params, sizes[FERRY_GPT2_NUM_PARAMS], N = (size_t)B * T, f = sizeof(float);
	enum ferry_dtype act = opts ? opts->act_dtype : FERRY_F32;
	size_t a = ferry_dtype_size(act);
	ferry_status st;

	memset(plan, 0, sizeof(*plan));
	if ((st = check_shape(cfg, B, T)) || (st = stack_plan(cfg, B, T, opts, &sp)))
		return st;
	n_params = ferry_gpt2_param_sizes(cfg, sizes);
	snprintf(plan->model, sizeof(plan->model), "gpt2");
	snprintf(plan->policy, sizeof(plan->policy), "%s",
		 opts && opts->policy ? opts->policy : "everything_saveable");
	plan->B = B;
	plan->T = T;
	/* in the order ferry_gpt2_create allocates them */
	ferry_plan_add_buffer(plan, "params", FERRY_BUF_DONATED, n_params * f);
	ferry_plan_add_buffer(plan, "grads", FERRY_BUF_TEMP, n_params * f);
	ferry_plan_add_buffer(plan, "adamw m", FERRY_BUF_DONATED, n_params * f);
	ferry_plan_add_buffer(plan, "adamw v", FERRY_BUF_DONATED, n_params * f);
	if (act != FERRY_F32) /* derived from params, kept across steps */
		ferry_plan_add_buffer(plan, "params (compute copy)", FERRY_BUF_TEMP, n_params * a);
	ferry_plan_add_buffer(plan, "tokens", FERRY_BUF_ARGUMENT, N * sizeof(int32_t));
	ferry_plan_add_buffer(plan, "targets", FERRY_BUF_ARGUMENT, N * sizeof(int32_t));
	ferry_plan_add_buffer(plan, "final norm", FERRY_BUF_TEMP, N * cfg->channels * a);
	ferry_plan_add_buffer(plan, "final norm mean", FERRY_BUF_TEMP, N * f);
	ferry_plan_add_buffer(plan, "final norm rstd", FERRY_BUF_TEMP, N * f);
	ferry_plan_add_buffer(plan, "logits", FERRY_BUF_TEMP, N * (size_t)cfg->padded_vocab * a);
	ferry_plan_add_buffer(plan, "losses", FERRY_BUF_OUTPUT, N * f);
	ferry_plan_add_buffer(plan, "final norm grad", FERRY_BUF_TEMP, N * cfg->channels * a);
	ferry_plan_add_buffer(plan, "grad norm", FERRY_BUF_TEMP, sizeof(double));
	ferry_stack_plan_describe(&sp, &ferry_gpt2_layer, &dims, plan);
	return ferry_plan_finish(plan);
}

ferry_status ferry_gpt2_create(ferry_backend_t be, const struct ferry_gpt2_config *cfg, int B,
			       int T, ferry_gpt2_t *out)
{
	return ferry_gpt2_create_ex(be, cfg, B, T, NULL, out);
}

ferry_status ferry_gpt2_create_ex(ferry_backend_t be, const struct ferry_gpt2_config *cfg, int B,
				  int T, const struct ferry_exec_opts *opts, ferry_gpt2_t *out)
{
	struct ferry_exec_opts o = opts ? *opts : (struct ferry_exec_opts){ 0 };
	struct ferry_stack_plan sp;
	struct ferry_gpt2 *m;
	ferry_status st;
	size_t N, C, Vp;

	*out = NULL;
	o.act_dtype = ferry_backend_caps(be).act_dtype; /* the backend decides */
	if ((st = check_shape(cfg, B, T)) || (st = stack_plan(cfg, B, T, &o, &sp)))
		return st;
	if (ferry_backend_caps(be).max_head_size &&
	    cfg->channels / cfg->heads > ferry_backend_caps(be).max_head_size)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "head size %d (channels %d / heads %d) is larger than "
				   "the %s backend's %d", cfg->channels / cfg->heads, cfg->channels, cfg->heads,
				   ferry_backend_name(be), ferry_backend_caps(be).max_head_size);
	m = ferry_calloc(1, sizeof(*m));
	if (!m)
		return ferry_error(FERRY_ERR_NOMEM, "gpt2: out of host memory");
	m->be = be;
	m->cfg = *cfg;
	m->act = o.act_dtype;
	m->asz = ferry_dtype_size(m->act);
	m->B = B;
	m->T = T;
	N = (size_t)B * T;
	C = (size_t)cfg->channels;
	Vp = (size_t)cfg->padded_vocab;
	m->n_params = ferry_gpt2_param_sizes(cfg, m->sizes);

	st = ferry_stream_create(be, "compute", &m->compute);
	if (st)
		goto fail;
#define ALLOC(buf, bytes) do { st = ferry_buffer_alloc(be, (bytes), &m->buf); if (st) goto fail; } while (0)
	/* the order and sizes ferry_gpt2_plan lists */
	ALLOC(params, m->n_params * sizeof(float));
	ALLOC(grads, m->n_params * sizeof(float));
	ALLOC(mom, m->n_params * sizeof(float));
	ALLOC(var, m->n_params * sizeof(float));
	if (m->act != FERRY_F32)
		ALLOC(wcopy, m->n_params * m->asz);
	ALLOC(tokens, N * sizeof(int32_t));
	ALLOC(targets, N * sizeof(int32_t));
	ALLOC(lnf, N * C * m->asz);
	ALLOC(lnf_mean, N * sizeof(float));
	ALLOC(lnf_rstd, N * sizeof(float));
	ALLOC(logits, N * Vp * m->asz);
	ALLOC(losses, N * sizeof(float));
	ALLOC(dlnf, N * C * m->asz);
	ALLOC(sumsq, sizeof(double));
#undef ALLOC
	{
		size_t off = 0;

		for (int p = 0; p < FERRY_GPT2_NUM_PARAMS; p++) {
			bool per_layer = p >= FERRY_GPT2_LN1W && p <= FERRY_GPT2_FCPROJB;

			m->param_ptr[p] = fptr(m->params) + off;
			m->grad_ptr[p] = fptr(m->grads) + off;
			m->wptr[p] = m->wcopy ? (char *)vptr(m->wcopy) + off * m->asz : (void *)m->param_ptr[p];
			m->layer_stride[p] = per_layer ? m->sizes[p] / (size_t)cfg->layers : 0;
			off += m->sizes[p];
		}
	}
	{
		struct ferry_layer_dims dims = { B, T, cfg->channels, cfg->heads, cfg->layers };
		struct ferry_weight_table wt = { m->wptr, m->grad_ptr, m->layer_stride };

		st = ferry_layer_exec_create(be, &ferry_gpt2_layer, &dims, &wt, &sp, &m->layers);
		if (st)
			goto fail;
	}
	st = ferry_host_alloc(be, N * sizeof(float), (void **)&m->host_losses);
	if (st)
		goto fail;
	st = ferry_host_alloc(be, sizeof(double), (void **)&m->host_sumsq);
	if (st)
		goto fail;
	st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->mom), m->n_params * sizeof(float));
	if (!st)
		st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->var), m->n_params * sizeof(float));
	if (!st)
		st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->grads), m->n_params * sizeof(float));
	if (!st)
		st = ferry_stream_synchronize(m->compute);
	if (st)
		goto fail;
	*out = m;
	return FERRY_OK;
fail:
	ferry_gpt2_free(m);
	return st;
}

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

ferry_status ferry_gpt2_init_random(ferry_gpt2_t m, uint64_t seed)
{
	float *host, *p;
	ferry_status st;
	uint64_t s = seed;
	double resid_std = 0.02 / sqrt(2.0 * m->cfg.layers);

	st = ferry_host_alloc(m->be, m->n_params * sizeof(float), (void **)&host);
	if (st)
		return st;
	p = host;
	for (int k = 0; k < FERRY_GPT2_NUM_PARAMS; k++) {
		size_t n = m->sizes[k];

		switch (k) {
		case FERRY_GPT2_WTE: case FERRY_GPT2_WPE: case FERRY_GPT2_QKVW: case FERRY_GPT2_FCW:
			fill_normal(p, n, 0.02, &s);
			break;
		case FERRY_GPT2_ATTPROJW: case FERRY_GPT2_FCPROJW:
			fill_normal(p, n, resid_std, &s);
			break;
		case FERRY_GPT2_LN1W: case FERRY_GPT2_LN2W: case FERRY_GPT2_LNFW:
			for (size_t i = 0; i < n; i++)
				p[i] = 1.0f;
			break;
		default:
			memset(p, 0, n * sizeof(float));
		}
		p += n;
	}
	/* the padding rows of the embedding never see a token: keep them zero */
	memset(host + (size_t)m->cfg.vocab * m->cfg.channels, 0,
	       (size_t)(m->cfg.padded_vocab - m->cfg.vocab) * m->cfg.channels * sizeof(float));
	st = ferry_gpt2_set_params(m, host);
	ferry_host_free(m->be, host);
	return st;
}

static ferry_status copy_sync(ferry_gpt2_t m, void *dst, const void *src, size_t n,
			      enum ferry_copy_kind kind)
{
	ferry_status st = ferry_memcpy_async(m->compute, dst, src, n, kind);

	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_gpt2_set_params(ferry_gpt2_t m, const float *params)
{
	ferry_status st = ferry_memcpy_async(m->compute, ferry_buffer_ptr(m->params), params,
					     m->n_params * sizeof(float), FERRY_COPY_H2D);
	struct ferry_op_call c = { .kind = FERRY_OP_CAST };

	if (!st && m->wcopy) { /* the copy the kernels read */
		c.out[0] = vptr(m->wcopy);
		c.in[0] = vptr(m->params);
		c.n = (long)m->n_params;
		st = ferry_stream_run_op(m->compute, &c);
	}
	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_gpt2_get_params(ferry_gpt2_t m, float *params)
{
	return copy_sync(m, params, ferry_buffer_ptr(m->params), m->n_params * sizeof(float), FERRY_COPY_D2H);
}

ferry_status ferry_gpt2_get_grads(ferry_gpt2_t m, float *grads)
{
	return copy_sync(m, grads, ferry_buffer_ptr(m->grads), m->n_params * sizeof(float), FERRY_COPY_D2H);
}

ferry_status ferry_gpt2_set_opt_state(ferry_gpt2_t m, const float *mom, const float *var)
{
	ferry_status st = copy_sync(m, ferry_buffer_ptr(m->mom), mom, m->n_params * sizeof(float),
				    FERRY_COPY_H2D);

	return st ? st : copy_sync(m, ferry_buffer_ptr(m->var), var, m->n_params * sizeof(float), FERRY_COPY_H2D);
}

ferry_status ferry_gpt2_get_opt_state(ferry_gpt2_t m, float *mom, float *var)
{
	ferry_status st = copy_sync(m, mom, ferry_buffer_ptr(m->mom), m->n_params * sizeof(float),
				    FERRY_COPY_D2H);

	return st ? st : copy_sync(m, var, ferry_buffer_ptr(m->var), m->n_params * sizeof(float), FERRY_COPY_D2H);
}

static ferry_status check_tokens(const ferry_gpt2_t m, const int32_t *tok, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
			return ferry_error(FERRY_ERR_INVALID, "%s token %d at position %zu is outside the vocabulary (%d)",
					   what, tok[i], i, m->cfg.vocab);
	return FERRY_OK;
}

static ferry_status run(ferry_gpt2_t m, const struct ferry_op_call *c)
{
	return ferry_stream_run_op(m->compute, c);
}

static ferry_status forward(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets, int B,
			    int T, float *loss, bool for_backward);

ferry_status ferry_gpt2_forward(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets,
				int B, int T, float *loss)
{
	return forward(m, inputs, targets, B, T, loss, targets != NULL);
}

ferry_status ferry_gpt2_loss(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets, int B,
			     int T, float *loss)
{
	ferry_status st;

	if (!targets)
		return ferry_error(FERRY_ERR_INVALID, "a loss needs targets");
	st = forward(m, inputs, targets, B, T, loss, false);
	m->have_targets = false; /* nothing was kept for a backward pass */
	return st;
}

static ferry_status forward(ferry_gpt2_t m, const int32_t *inputs, const int32_t *targets, int B,
			    int T, float *loss, bool for_backward)
{
	size_t N = (size_t)B * T;
	struct ferry_op_call c;
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

	st = ferry_memcpy_async(m->compute, ferry_buffer_ptr(m->tokens), inputs, N * sizeof(int32_t),
				FERRY_COPY_H2D);
	if (st)
		return st;
	if (targets)
		st = ferry_memcpy_async(m->compute, ferry_buffer_ptr(m->targets), targets,
					N * sizeof(int32_t), FERRY_COPY_H2D);
	else /* sampling: any valid target will do, the loss is not read */
		st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->targets), N * sizeof(int32_t));
	if (st)
		return st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_ENCODER;
	c.B = B; c.T = T; c.C = m->cfg.channels;
	c.out[0] = ferry_layer_exec_input(m->layers);
	c.tokens = ferry_buffer_ptr(m->tokens);
	c.w[0] = m->wptr[FERRY_GPT2_WTE];
	c.w[1] = m->wptr[FERRY_GPT2_WPE];
	if ((st = run(m, &c)))
		return st;

	if ((st = ferry_layer_exec_forward(m->layers, m->compute, B, T, for_backward)))
		return st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_LAYERNORM;
	c.B = B; c.T = T; c.C = m->cfg.channels;
	c.out[0] = vptr(m->lnf); c.out[1] = vptr(m->lnf_mean); c.out[2] = vptr(m->lnf_rstd);
	c.in[0] = ferry_layer_exec_output(m->layers);
	c.w[0] = m->wptr[FERRY_GPT2_LNFW];
	c.w[1] = m->wptr[FERRY_GPT2_LNFB];
	if ((st = run(m, &c)))
		return st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_MATMUL; /* LM head, tied to wte, no bias */
	c.B = B; c.T = T; c.C = m->cfg.channels; c.OC = m->cfg.padded_vocab;
	c.out[0] = vptr(m->logits);
	c.in[0] = vptr(m->lnf);
	c.w[0] = m->wptr[FERRY_GPT2_WTE];
	if ((st = run(m, &c)))
		return st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_SOFTMAX_XENT;
	c.B = B; c.T = T; c.V = m->cfg.vocab; c.Vp = m->cfg.padded_vocab;
	c.out[0] = vptr(m->losses);
	c.out[1] = vptr(m->logits); /* probabilities in place of the logits */
	c.in[0] = vptr(m->logits);
	c.tokens = ferry_buffer_ptr(m->targets);
	if ((st = run(m, &c)))
		return st;

	if (!targets)
		return ferry_stream_synchronize(m->compute);
	st = copy_sync(m, m->host_losses, ferry_buffer_ptr(m->losses), N * sizeof(float), FERRY_COPY_D2H);
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

ferry_status ferry_gpt2_probs(ferry_gpt2_t m, int row, float *probs)
{
	if (row < 0 || row >= m->cur_B * m->cur_T)
		return ferry_error(FERRY_ERR_INVALID, "row %d outside the last batch", row);
	size_t V = (size_t)m->cfg.vocab;
	ferry_status st = copy_sync(m, probs, (char *)vptr(m->logits) + (size_t)row * m->cfg.padded_vocab * m->asz,
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

ferry_status ferry_gpt2_zero_grad(ferry_gpt2_t m)
{
	ferry_status st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->grads),
						  m->n_params * sizeof(float));

	return st ? st : ferry_stream_synchronize(m->compute);
}

ferry_status ferry_gpt2_backward(ferry_gpt2_t m)
{
	int B = m->cur_B, T = m->cur_T;
	size_t N = (size_t)B * T, C = (size_t)m->cfg.channels;
	void *dres = ferry_layer_exec_output_grad(m->layers);
	struct ferry_op_call c;
	ferry_status st;

	if (!m->have_targets)
		return ferry_error(FERRY_ERR_INVALID,
				   "backward needs a forward pass with targets (one backward per forward)");
	/* the softmax backward overwrites the probabilities with d(logits) */
	m->have_targets = false;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_SOFTMAX_XENT;
	c.backward = true;
	c.B = B; c.T = T; c.V = m->cfg.vocab; c.Vp = m->cfg.padded_vocab;
	c.out[1] = vptr(m->logits);
	c.din[0] = vptr(m->logits); /* d logits in place of the probabilities */
	c.tokens = ferry_buffer_ptr(m->targets);
	c.scalar[0] = 1.0f / (float)N; /* the loss is the mean over B*T */
	if ((st = run(m, &c)))
		return st;

	if ((st = ferry_memset_zero_async(m->compute, vptr(m->dlnf), N * C * m->asz)))
		return st;
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_MATMUL;
	c.backward = true;
	c.B = B; c.T = T; c.C = (int)C; c.OC = m->cfg.padded_vocab;
	c.dout[0] = vptr(m->logits);
	c.in[0] = vptr(m->lnf);
	c.w[0] = m->wptr[FERRY_GPT2_WTE];
	c.din[0] = vptr(m->dlnf);
	c.dw[0] = m->grad_ptr[FERRY_GPT2_WTE];
	if ((st = run(m, &c)))
		return st;

	if ((st = ferry_memset_zero_async(m->compute, dres, N * C * m->asz)))
		return st;
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_LAYERNORM;
	c.backward = true;
	c.B = B; c.T = T; c.C = (int)C;
	c.out[1] = vptr(m->lnf_mean); c.out[2] = vptr(m->lnf_rstd);
	c.in[0] = ferry_layer_exec_output(m->layers);
	c.w[0] = m->wptr[FERRY_GPT2_LNFW];
	c.dout[0] = vptr(m->dlnf);
	c.din[0] = dres;
	c.dw[0] = m->grad_ptr[FERRY_GPT2_LNFW];
	c.dw[1] = m->grad_ptr[FERRY_GPT2_LNFB];
	if ((st = run(m, &c)))
		return st;

	if ((st = ferry_layer_exec_backward(m->layers, m->compute, B, T)))
		return st;

	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_ENCODER;
	c.backward = true;
	c.B = B; c.T = T; c.C = (int)C;
	c.dout[0] = ferry_layer_exec_input_grad(m->layers);
	c.tokens = ferry_buffer_ptr(m->tokens);
	c.dw[0] = m->grad_ptr[FERRY_GPT2_WTE];
	c.dw[1] = m->grad_ptr[FERRY_GPT2_WPE];
	if ((st = run(m, &c)))
		return st;
	return ferry_stream_synchronize(m->compute);
}

/* nanoGPT's rule: decay matrices and embeddings, not biases or gains. */
static bool decays(int p)
{
	return p == FERRY_GPT2_WTE || p == FERRY_GPT2_WPE || p == FERRY_GPT2_QKVW ||
	       p == FERRY_GPT2_ATTPROJW || p == FERRY_GPT2_FCW || p == FERRY_GPT2_FCPROJW;
}

ferry_status ferry_gpt2_update(ferry_gpt2_t m, const struct ferry_adamw *opt, int t, float *grad_norm)
{
	struct ferry_op_call c;
	ferry_status st;
	double norm;
	float scale = 1.0f;

	if (t < 1)
		return ferry_error(FERRY_ERR_INVALID, "optimizer step %d must be >= 1", t);
	if ((st = ferry_memset_zero_async(m->compute, ferry_buffer_ptr(m->sumsq), sizeof(double))))
		return st;
	memset(&c, 0, sizeof(c));
	c.kind = FERRY_OP_SUM_SQUARES;
	c.in[0] = fptr(m->grads);
	c.n = (long)m->n_params;
	c.result = ferry_buffer_ptr(m->sumsq);
	if ((st = run(m, &c)))
		return st;
	if ((st = copy_sync(m, m->host_sumsq, ferry_buffer_ptr(m->sumsq), sizeof(double), FERRY_COPY_D2H)))
		return st;
	norm = sqrt(*m->host_sumsq);
	if (grad_norm)
		*grad_norm = (float)norm;
	if (!isfinite(norm))
		return ferry_error(FERRY_ERR_INVALID, "gradient norm is %f: training diverged", norm);
	if (opt->grad_clip > 0 && norm > opt->grad_clip)
		scale = (float)(opt->grad_clip / norm);

	for (int p = 0; p < FERRY_GPT2_NUM_PARAMS; p++) {
		size_t off = (size_t)(m->param_ptr[p] - fptr(m->params));

		memset(&c, 0, sizeof(c));
		c.kind = FERRY_OP_ADAMW;
		c.param = m->param_ptr[p];
		c.param_copy = m->wcopy ? m->wptr[p] : NULL;
		c.out[0] = fptr(m->mom) + off;
		c.out[1] = fptr(m->var) + off;
		c.in[0] = m->grad_ptr[p];
		c.n = (long)m->sizes[p];
		c.scalar[0] = opt->lr;
		c.scalar[1] = opt->beta1;
		c.scalar[2] = opt->beta2;
		c.scalar[3] = opt->eps;
		c.scalar[4] = decays(p) ? opt->weight_decay : 0.0f;
		c.scalar[5] = scale;
		c.step = t;
		if ((st = run(m, &c)))
			return st;
	}
	return ferry_stream_synchronize(m->compute);
}

double ferry_gpt2_step_flops(ferry_gpt2_t m, int B, int T)
{
	/* Matrix products dominate: 2 FLOPs per multiply-add forward, twice that
	 * backward, over the layer weights and the LM head; plus attention's
	 * causal score and value products (T(T+1)/2 pairs per head). */
	double N = (double)B * T, C = m->cfg.channels, L = m->cfg.layers;
	double layer_mm = 12.0 * C * C;              /* qkv 3, proj 1, fc 4, fcproj 4 */
	double head = C * m->cfg.padded_vocab;
	double attn = 4.0 * ((double)B * T * (T + 1) / 2.0) * C; /* fwd q.k + p.v, all heads */

	return 6.0 * N * (L * layer_mm + head) + 3.0 * L * attn;
}
