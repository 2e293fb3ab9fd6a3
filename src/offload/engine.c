/*
 * The layer-stack engine.  See engine.h for what it does; here is how.
 *
 * Forward, layer l, op o: if o writes an offloaded tensor t into ring slot
 * s = l % R and that slot held layer l-R's copy, the compute stream first
 * waits for that copy's event (d2h_done[t][s]); after o, an event on the
 * compute stream orders the device-to-host copy of t after its producer.
 *
 * Backward: the last R layers' tensors are still in their slots and are
 * read in place, after their copy-out (a recomputation may rewrite them).  Any other layer j's offloaded tensors are copied back
 * into ring slot j % R on the host-to-device stream, after the slot's forward copy-out
 * (d2h_done) and after the backward of the layer that used the slot before
 * (bwd_done[s]), then prefetch_ready[s] is recorded.  Before layer l's
 * backward the compute stream waits for prefetch_ready[l % R]; after it, the
 * prefetch for layer l - depth - 1 is issued.  With R >= depth + 1 the
 * slot's previous user (layer j + R >= l) has always been submitted.
 */
#include "offload/engine.h"
#include "backend/backend_impl.h"
#include "core/error.h"

#include <string.h>

struct ferry_layer_exec {
	ferry_backend_t be;
	const struct ferry_layer_decl *decl;
	struct ferry_dims dims;
	int B, T, L;         /* the largest batch, the stack's layers */
	float scalars[FERRY_OP_SCALAR_COUNT];
	struct ferry_weight_table weights;
	struct ferry_stack_plan sp;
	struct ferry_stack_storage mem;
	char *grad[FERRY_LAYER_MAX_TENSORS];
	char *io_grad[2];    /* alternating layer input/output gradients */
	int io_cur;          /* io_grad[io_cur] is the current output gradient */

	/* offloading: copy streams, events */
	ferry_stream_t d2h, h2d;
	ferry_event_t produced;
	ferry_event_t *d2h_done;   /* [n_tensors * ring] */
	ferry_event_t *bwd_done;   /* [ring] */
	ferry_event_t *prefetch_ready; /* [ring] */
};

static bool offloads(const struct ferry_layer_exec *ex)
{
	return ex->sp.offloaded != 0;
}

/* Device address of tensor t as layer l sees it. */
static char *act_ptr(const struct ferry_layer_exec *ex, int t, int l)
{
	const struct ferry_stack_plan *sp = &ex->sp;
	int slot = 0;

	if (t == ex->decl->output) { /* the next layer's input */
		t = ex->decl->input;
		l++;
	}
	switch (sp->kind[t]) {
	case FERRY_SLOT_PER_LAYER: slot = l; break;
	case FERRY_SLOT_RING: slot = l % sp->ring; break;
	case FERRY_SLOT_INPUT:
		slot = !sp->input_offloaded ? l : l == sp->L ? sp->ring : l % sp->ring;
		break;
	case FERRY_SLOT_SHARED:
	case FERRY_SLOT_NONE:
		break;
	}
	return (char *)ex->mem.act[t] + (size_t)slot * sp->slot_bytes[t];
}

static char *host_ptr(const struct ferry_layer_exec *ex, int t, int l)
{
	return (char *)ex->mem.host[t] + (size_t)l * ex->sp.host_bytes[t];
}

static ferry_event_t *d2h_event(struct ferry_layer_exec *ex, int t, int l)
{
	return &ex->d2h_done[t * ex->sp.ring + l % ex->sp.ring];
}

void ferry_layer_exec_free(struct ferry_layer_exec *ex)
{
	if (!ex)
		return;
	/* the streams drain before they go, so no copy still uses the memory */
	ferry_stream_free(ex->h2d);
	ferry_stream_free(ex->d2h);
	if (ex->d2h_done)
		for (int i = 0; i < ex->sp.n_tensors * ex->sp.ring; i++)
			ferry_event_free(ex->d2h_done[i]);
	for (int s = 0; ex->bwd_done && s < ex->sp.ring; s++)
		ferry_event_free(ex->bwd_done[s]);
	for (int s = 0; ex->prefetch_ready && s < ex->sp.ring; s++)
		ferry_event_free(ex->prefetch_ready[s]);
	ferry_free(ex->d2h_done);
	ferry_free(ex->bwd_done);
	ferry_free(ex->prefetch_ready);
	ferry_event_free(ex->produced);
	ferry_free(ex);
}

static ferry_status create_offload(struct ferry_layer_exec *ex)
{
	const struct ferry_stack_plan *sp = &ex->sp;
	ferry_status st;
	int n_ev = sp->n_tensors * sp->ring;

	for (int t = 0; t < sp->n_tensors; t++)
		if ((sp->offloaded & (1u << t)) && !ex->mem.host[t])
			return ferry_error(FERRY_ERR_INVALID, "offload engine: no host storage for '%s'",
					   ex->decl->tensors[t].name);
	if ((st = ferry_stream_create(ex->be, "d2h", &ex->d2h)) ||
	    (st = ferry_stream_create(ex->be, "h2d", &ex->h2d)) ||
	    (st = ferry_event_create(ex->be, &ex->produced)))
		return st;
	ex->d2h_done = ferry_calloc((size_t)n_ev, sizeof(ferry_event_t));
	ex->bwd_done = ferry_calloc((size_t)sp->ring, sizeof(ferry_event_t));
	ex->prefetch_ready = ferry_calloc((size_t)sp->ring, sizeof(ferry_event_t));
	if (!ex->d2h_done || !ex->bwd_done || !ex->prefetch_ready)
		return ferry_error(FERRY_ERR_NOMEM, "offload engine: out of host memory");
	for (int t = 0; t < sp->n_tensors; t++)
		for (int s = 0; s < sp->ring && (sp->offloaded & (1u << t)); s++)
			if ((st = ferry_event_create(ex->be, &ex->d2h_done[t * sp->ring + s])))
				return st;
	for (int s = 0; s < sp->ring; s++)
		if ((st = ferry_event_create(ex->be, &ex->bwd_done[s])) ||
		    (st = ferry_event_create(ex->be, &ex->prefetch_ready[s])))
			return st;
	return FERRY_OK;
}

ferry_status ferry_layer_exec_create(ferry_backend_t be, const struct ferry_layer_decl *decl,
				     const struct ferry_dims *dims, const float *scalars,
				     const struct ferry_weight_table *weights,
				     const struct ferry_stack_plan *plan,
				     const struct ferry_stack_storage *storage,
				     struct ferry_layer_exec **out)
{
	struct ferry_layer_exec *ex;
	ferry_status st = FERRY_OK;
	char *g;

	*out = NULL;
	ex = ferry_calloc(1, sizeof(*ex));
	if (!ex)
		return ferry_error(FERRY_ERR_NOMEM, "layer executor: out of host memory");
	ex->be = be;
	ex->decl = decl;
	ex->dims = *dims;
	ex->B = (int)dims->v[FERRY_DIM_B];
	ex->T = (int)dims->v[FERRY_DIM_T];
	ex->L = (int)dims->v[FERRY_DIM_L];
	if (scalars)
		memcpy(ex->scalars, scalars, sizeof(ex->scalars));
	ex->weights = *weights;
	ex->sp = *plan;

	ex->mem = *storage;
	for (int t = 0; t < decl->n_tensors && !st; t++)
		if (plan->kind[t] != FERRY_SLOT_NONE && !ex->mem.act[t])
			st = ferry_error(FERRY_ERR_INVALID, "layer executor: no storage for '%s'",
					 decl->tensors[t].name);
	if (!st && offloads(ex))
		st = create_offload(ex);
	if (st) {
		ferry_layer_exec_free(ex);
		return st;
	}
	g = ex->mem.grad;
	for (int t = 0; t < decl->n_tensors; t++) {
		if (!(plan->has_grad & (1u << t)) || t == decl->output)
			continue;
		if (t == decl->input) {
			ex->io_grad[0] = g;
			ex->io_grad[1] = g + plan->slot_bytes[t];
			g += 2 * plan->slot_bytes[t];
		} else {
			ex->grad[t] = g;
			g += plan->slot_bytes[t];
		}
	}
	*out = ex;
	return FERRY_OK;
}

void *ferry_layer_exec_input(struct ferry_layer_exec *ex)
{
	return act_ptr(ex, ex->decl->input, 0);
}

void *ferry_layer_exec_output(struct ferry_layer_exec *ex)
{
	return act_ptr(ex, ex->decl->input, ex->L);
}

void *ferry_layer_exec_output_grad(struct ferry_layer_exec *ex)
{
	return ex->io_grad[ex->io_cur];
}

const void *ferry_layer_exec_input_grad(struct ferry_layer_exec *ex)
{
	return ex->io_grad[ex->io_cur]; /* backward leaves io_cur on it */
}

/* Element offset of parameter w of layer l, for a call whose view of the
 * weight slot has `view` elements. */
static size_t weight_offset(const struct ferry_layer_exec *ex, struct ferry_weight_ref w, int l,
			    size_t view)
{
	return (size_t)l * ex->weights.layer_stride[w.param] + (size_t)w.block * view;
}

/* The batch's dimensions: the created ones with B and T replaced. */
static struct ferry_dims batch_dims(const struct ferry_layer_exec *ex, int B, int T)
{
	struct ferry_dims d = ex->dims;

	d.v[FERRY_DIM_B] = B;
	d.v[FERRY_DIM_T] = T;
	return d;
}

/* The forward call of op o in layer l. */
static void make_call(const struct ferry_layer_exec *ex, int o, int l, int B, int T,
		      struct ferry_op_call *c)
{
	const struct ferry_op_decl *op = &ex->decl->ops[o];
	const struct ferry_op_info *info = ferry_op_info(op->kind);
	struct ferry_dims d = batch_dims(ex, B, T);
	size_t asz = ferry_dtype_size(ex->sp.act_dtype);

	ferry_op_call_shape(ex->decl, o, &d, ex->scalars, c);
	for (int i = 0; i < info->n_out; i++)
		c->out[i] = act_ptr(ex, op->out[i], l);
	for (int i = 0; i < info->n_in; i++)
		c->in[i] = act_ptr(ex, op->in[i], l);
	for (int i = 0; i < info->n_w; i++)
		if (op->w[i].param >= 0)
			c->w[i] = (const char *)ex->weights.base[op->w[i].param] +
				  weight_offset(ex, op->w[i], l, ferry_op_weight_view(c, i)) * asz;
}

/* The tensor and layer an output of layer l is stored as, if it is
 * offloaded: the layer output is the next layer's input. */
static bool offloaded_as(const struct ferry_layer_exec *ex, int t, int l, int *tt, int *ll)
{
	*tt = t;
	*ll = l;
	if (t == ex->decl->output) {
		*tt = ex->decl->input;
		*ll = l + 1;
		if (*ll == ex->L) /* the stack output stays for the epilogue */
			return false;
	}
	return ex->sp.offloaded & (1u << *tt);
}

static ferry_status copy_out(struct ferry_layer_exec *ex, ferry_stream_t s, int t, int l, size_t bytes)
{
	ferry_status st;

	if ((st = ferry_event_record(ex->produced, s)) ||
	    (st = ferry_stream_wait_event(ex->d2h, ex->produced)) ||
	    (st = ferry_memcpy_async(ex->d2h, host_ptr(ex, t, l), act_ptr(ex, t, l), bytes,
				     FERRY_COPY_D2H)))
		return st;
	return ferry_event_record(*d2h_event(ex, t, l), ex->d2h);
}

static size_t tensor_bytes(const struct ferry_layer_exec *ex, int t, int B, int T)
{
	struct ferry_dims d = batch_dims(ex, B, T);

	return ferry_layer_tensor_numel(ex->decl, t, &d) * ex->sp.elem[t];
}

ferry_status ferry_layer_exec_forward(struct ferry_layer_exec *ex, ferry_stream_t s, int B, int T,
				      bool for_backward)
{
	const struct ferry_layer_decl *decl = ex->decl;
	bool offload = for_backward && offloads(ex);
	struct ferry_op_call c;
	ferry_status st;

	if (B < 1 || T < 1 || (int64_t)B * T > (int64_t)ex->B * ex->T || T > ex->T)
		return ferry_error(FERRY_ERR_INVALID, "batch %dx%d exceeds the executor's %dx%d",
				   B, T, ex->B, ex->T);
	if (offload && ex->sp.input_offloaded &&
	    (st = copy_out(ex, s, decl->input, 0, tensor_bytes(ex, decl->input, B, T))))
		return st;
	for (int l = 0; l < ex->L; l++) {
		for (int o = 0; o < decl->n_ops; o++) {
			const struct ferry_op_info *info = ferry_op_info(decl->ops[o].kind);
			int t, tl;

			make_call(ex, o, l, B, T, &c);
			/* a ring slot is rewritten only after its last copy-out */
			for (int i = 0; offload && i < info->n_out; i++)
				if (offloaded_as(ex, decl->ops[o].out[i], l, &t, &tl) && tl >= ex->sp.ring &&
				    (st = ferry_stream_wait_event(s, *d2h_event(ex, t, tl))))
					return st;
			if ((st = ferry_stream_run_op(s, &c)))
				return st;
			for (int i = 0; offload && i < info->n_out; i++)
				if (offloaded_as(ex, decl->ops[o].out[i], l, &t, &tl) &&
				    (st = copy_out(ex, s, t, tl, tensor_bytes(ex, t, B, T))))
					return st;
		}
	}
	return FERRY_OK;
}

/* The last R layers' tensors are still in their ring slots after the
 * forward pass: the backward reads them where they are. */
static bool resident(const struct ferry_layer_exec *ex, int j)
{
	return j >= ex->L - ex->sp.ring;
}

/* Copies layer j's offloaded tensors back into ring slot j % R. */
static ferry_status prefetch(struct ferry_layer_exec *ex, int j, int B, int T)
{
	int slot = j % ex->sp.ring;
	ferry_status st;

	if (resident(ex, j))
		return FERRY_OK;
	if ((st = ferry_stream_wait_event(ex->h2d, ex->bwd_done[slot])))
		return st;
	for (int t = 0; t < ex->sp.n_tensors; t++) {
		if (!(ex->sp.offloaded & (1u << t)))
			continue;
		if ((st = ferry_stream_wait_event(ex->h2d, *d2h_event(ex, t, j))) ||
		    (st = ferry_memcpy_async(ex->h2d, act_ptr(ex, t, j), host_ptr(ex, t, j),
					     tensor_bytes(ex, t, B, T), FERRY_COPY_H2D)))
			return st;
	}
	return ferry_event_record(ex->prefetch_ready[slot], ex->h2d);
}

static char *grad_of(struct ferry_layer_exec *ex, int t, int io_out)
{
	const struct ferry_layer_decl *decl = ex->decl;

	if (!(ex->sp.has_grad & (1u << t)))
		return NULL;
	if (t == decl->output)
		return ex->io_grad[io_out];
	if (t == decl->input)
		return ex->io_grad[!io_out];
	return ex->grad[t];
}

static ferry_status backward_layer(struct ferry_layer_exec *ex, ferry_stream_t s, int l, int B, int T)
{
	const struct ferry_layer_decl *decl = ex->decl;
	int io_out = ex->io_cur;
	struct ferry_op_call c;
	ferry_status st;

	/* every activation gradient but the incoming one starts from zero */
	for (int t = 0; t < decl->n_tensors; t++) {
		char *g = grad_of(ex, t, io_out);

		if (g && t != decl->output &&
		    (st = ferry_memset_zero_async(s, g, tensor_bytes(ex, t, B, T))))
			return st;
	}
	/* what the policy dropped, recomputed from what it kept */
	for (int o = 0; o < decl->n_ops; o++) {
		if (!(ex->sp.recompute_ops & (1u << o)))
			continue;
		make_call(ex, o, l, B, T, &c);
		if ((st = ferry_stream_run_op(s, &c)))
			return st;
	}
	for (int o = decl->n_ops - 1; o >= 0; o--) {
		const struct ferry_op_decl *op = &decl->ops[o];
		const struct ferry_op_info *info = ferry_op_info(op->kind);

		make_call(ex, o, l, B, T, &c);
		c.backward = true;
		for (int i = 0; i < info->n_out; i++)
			c.dout[i] = grad_of(ex, op->out[i], io_out);
		for (int i = 0; i < info->n_in; i++)
			c.din[i] = grad_of(ex, op->in[i], io_out);
		for (int i = 0; i < info->n_w; i++)
			if (op->w[i].param >= 0)
				c.dw[i] = ex->weights.grad_base[op->w[i].param] +
					  weight_offset(ex, op->w[i], l, ferry_op_weight_view(&c, i));
		if ((st = ferry_stream_run_op(s, &c)))
			return st;
	}
	ex->io_cur = !io_out; /* this layer's input gradient feeds layer l-1 */
	return FERRY_OK;
}

ferry_status ferry_layer_exec_backward(struct ferry_layer_exec *ex, ferry_stream_t s, int B, int T)
{
	int L = ex->L, depth = ex->sp.depth;
	bool offload = offloads(ex);
	ferry_status st;

	for (int j = L - 1; offload && j >= 0 && j >= L - 1 - depth; j--)
		if ((st = prefetch(ex, j, B, T)))
			return st;
	for (int l = L - 1; l >= 0; l--) {
		int slot = l % ex->sp.ring;

		if (offload && !resident(ex, l) && (st = ferry_stream_wait_event(s, ex->prefetch_ready[slot])))
			return st;
		/* a resident layer's slots may still be being copied out, and a
		 * recomputation rewrites (the same values into) kept tensors */
		for (int t = 0; offload && resident(ex, l) && t < ex->sp.n_tensors; t++)
			if ((ex->sp.offloaded & (1u << t)) &&
			    (st = ferry_stream_wait_event(s, *d2h_event(ex, t, l))))
				return st;
		if ((st = backward_layer(ex, s, l, B, T)))
			return st;
		if (offload && ((st = ferry_event_record(ex->bwd_done[slot], s)) ||
				(l - depth - 1 >= 0 && (st = prefetch(ex, l - depth - 1, B, T)))))
			return st;
	}
	return FERRY_OK;
}
