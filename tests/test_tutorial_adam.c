/*
 * The tutorial's third network (ferry/tutorial.h: gelu(x @ w) layers, mean
 * squared error + L2, clipping by global norm, Adam), on the CPU backend:
 *  - every step's loss against a float64 reference forward pass, its
 *    gradients against central finite differences of that reference, its
 *    norm against the gradients, and its Adam update against a float64
 *    Adam applied to ferry's own gradients (with clipping that bites, and
 *    without);
 *  - the optimizer state streamed through the device ring gives weights and
 *    moments bit-identical to keeping it on the device, under activation
 *    policies that keep, recompute and offload, and for a layer larger
 *    than one ring slice;
 *  - the planned device peak is the arena's measured one;
 *  - bad configurations and a step whose gradients are not finite are
 *    refused, the latter with nothing updated.
 */
#include "ferry/tutorial.h"
#include "ref_ops.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

#define STEPS 3

static const struct ferry_tutorial_adam_config small = { .layers = 3, .rows = 6, .channels = 8, .l2 = 0.001f,
							 .clip = 1.0f, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
							 .eps = 1e-8f };

/* The loss in float64: x = gelu(x @ w^T) per layer, mean((out - in)^2) +
 * l2 sum(w^2). */
static double ref_loss(const struct ferry_tutorial_adam_config *c, const double *w, const double *in)
{
	const int N = c->rows, C = c->channels;
	double *x = TALLOC(double, (size_t)N * C), *y = TALLOC(double, (size_t)N * C), loss = 0, l2 = 0;

	memcpy(x, in, sizeof(double) * N * C);
	for (int l = 0; l < c->layers; l++) {
		ref_matmul_forward(y, x, w + (size_t)l * C * C, NULL, N, C, C);
		ref_gelu_forward(x, y, (long)N * C);
	}
	for (long i = 0; i < (long)N * C; i++)
		loss += (x[i] - in[i]) * (x[i] - in[i]);
	for (long i = 0; i < (long)c->layers * C * C; i++)
		l2 += w[i] * w[i];
	free(x);
	free(y);
	return loss / ((double)N * C) + c->l2 * l2;
}

static void widen(double *d, const float *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		d[i] = f[i];
}

/* ferry's loss and gradients at weights w against the reference's. */
static void check_gradients(const struct ferry_tutorial_adam_config *c, const float *w, const float *x,
			    double loss, double norm, const float *dw, int step)
{
	size_t nw = ferry_tutorial_adam_weight_floats(c), nx = (size_t)c->rows * c->channels;
	double *wd = TALLOC(double, nw), *xd = TALLOC(double, nx), gmax = 0, err = 0, sum = 0;
	double ref = (widen(wd, w, nw), widen(xd, x, nx), ref_loss(c, wd, xd));

	CHECK(fabs(loss - ref) <= 1e-5 * fabs(ref), "step %d: loss %.9g, reference %.9g", step, loss, ref);
	for (size_t i = 0; i < nw; i++) {
		const double h = 1e-5, keep = wd[i];
		double up, down;

		wd[i] = keep + h;
		up = ref_loss(c, wd, xd);
		wd[i] = keep - h;
		down = ref_loss(c, wd, xd);
		wd[i] = keep;
		gmax = fmax(gmax, fabs((up - down) / (2 * h)));
		err = fmax(err, fabs((up - down) / (2 * h) - dw[i]));
		sum += (double)dw[i] * dw[i];
	}
	CHECK(gmax > 0 && err <= 1e-4 * gmax, "step %d: gradient error %.3g of max %.3g", step, err, gmax);
	CHECK(fabs(norm - sqrt(sum)) <= 1e-9 * sqrt(sum), "step %d: norm %.9g, sum of dw^2 gives %.9g", step, norm,
	      sqrt(sum));
	free(wd);
	free(xd);
}

/* The update ferry made from (w0, m0, v0) with its gradients dw against a
 * float64 Adam with the same clipping. */
static void check_update(const struct ferry_tutorial_adam_config *c, const float *w0, const float *m0,
			 const float *v0, const float *dw, double norm, int t, const float *w, const float *m,
			 const float *v)
{
	size_t nw = ferry_tutorial_adam_weight_floats(c);
	double *p = TALLOC(double, nw), *md = TALLOC(double, nw), *vd = TALLOC(double, nw), *g = TALLOC(double, nw);
	double scale = c->clip > 0 && norm >= c->clip ? c->clip / norm : 1.0, err = 0;

	widen(p, w0, nw);
	widen(md, m0, nw);
	widen(vd, v0, nw);
	widen(g, dw, nw);
	ref_adamw_update(p, md, vd, g, (long)nw, c->lr, c->beta1, c->beta2, c->eps, 0.0, scale, t);
	for (size_t i = 0; i < nw; i++) {
		err = fmax(err, fabs(p[i] - w[i]) / (1e-6 + 1e-5 * fabs(p[i])));
		err = fmax(err, fabs(md[i] - m[i]) / (1e-9 + 1e-5 * fabs(md[i])));
		err = fmax(err, fabs(vd[i] - v[i]) / (1e-12 + 1e-5 * fabs(vd[i])));
	}
	CHECK(err <= 1, "step %d (clip scale %.4g): update off the reference by %.3g of the tolerance", t, scale,
	      err);
	free(p);
	free(md);
	free(vd);
	free(g);
}

static void init(const struct ferry_tutorial_adam_config *c, float *w, float *x, uint64_t seed)
{
	Rng r = rng_new(seed);

	fill_normal(&r, w, (long)ferry_tutorial_adam_weight_floats(c), 0.5f);
	fill_uniform(&r, x, (long)c->rows * c->channels, -1.0f, 1.0f);
}

static struct ferry_plan plan; /* of the last open_checked */

static ferry_tutorial_adam_t open_checked(const struct ferry_tutorial_adam_config *c,
					  const struct ferry_exec_opts *o, ferry_backend_t *be)
{
	ferry_tutorial_adam_t t = NULL;

	*be = NULL;
	CHECK(ferry_tutorial_adam_plan(c, o, &plan) == FERRY_OK, "plan: %s", ferry_last_error());
	CHECK(ferry_backend_open("cpu", NULL, be) == FERRY_OK, "backend");
	if (test_failed())
		return NULL;
	CHECK(ferry_tutorial_adam_create(*be, c, o, &t) == FERRY_OK, "create: %s", ferry_last_error());
	CHECK(ferry_backend_mem_peak(*be) == plan.mem.peak_bytes, "%s: measured peak %zu == planned %zu",
	      o->policy ? o->policy : "default", ferry_backend_mem_peak(*be), plan.mem.peak_bytes);
	return t;
}

/* STEPS steps, each checked against the references. */
static void test_against_reference(float clip)
{
	struct ferry_tutorial_adam_config c = small;
	size_t nw = ferry_tutorial_adam_weight_floats(&c);
	float *w = TALLOC(float, nw), *x = TALLOC(float, (size_t)c.rows * c.channels), *m = TALLOC(float, nw);
	float *v = TALLOC(float, nw), *dw = TALLOC(float, nw), *w1 = TALLOC(float, nw), *m1 = TALLOC(float, nw);
	float *v1 = TALLOC(float, nw);
	struct ferry_exec_opts o = { 0 };
	int clipped = 0;
	ferry_backend_t be;
	ferry_tutorial_adam_t t;

	c.clip = clip;
	init(&c, w, x, 5);
	if (!(t = open_checked(&c, &o, &be)))
		return;
	CHECK(ferry_tutorial_adam_set(t, w, x) == FERRY_OK, "set");
	CHECK(ferry_tutorial_adam_get(t, w, m, v, NULL) == FERRY_OK, "get");
	for (int s = 1; s <= STEPS && !test_failed(); s++) {
		double loss, norm;

		CHECK(ferry_tutorial_adam_step(t, &loss, &norm) == FERRY_OK, "step %d: %s", s, ferry_last_error());
		CHECK(ferry_tutorial_adam_get(t, w1, m1, v1, dw) == FERRY_OK, "get");
		check_gradients(&c, w, x, loss, norm, dw, s);
		check_update(&c, w, m, v, dw, norm, s, w1, m1, v1);
		clipped += clip > 0 && norm >= clip;
		memcpy(w, w1, nw * sizeof(float));
		memcpy(m, m1, nw * sizeof(float));
		memcpy(v, v1, nw * sizeof(float));
	}
	CHECK(clip == 0 || clipped == STEPS, "clip %g bites on %d of %d steps", clip, clipped, STEPS);
	ferry_tutorial_adam_free(t);
	ferry_backend_close(be);
	free(w), free(x), free(m), free(v), free(dw), free(w1), free(m1), free(v1);
}

struct state {
	float *w, *m, *v;
};

static void run(const struct ferry_tutorial_adam_config *c, const char *policy, enum ferry_optim_place where,
		struct state *out)
{
	size_t nw = ferry_tutorial_adam_weight_floats(c);
	float *x = TALLOC(float, (size_t)c->rows * c->channels);
	struct ferry_exec_opts o = { .policy = policy, .optimizer = where };
	ferry_backend_t be;
	ferry_tutorial_adam_t t;

	out->w = TALLOC(float, nw);
	out->m = TALLOC(float, nw);
	out->v = TALLOC(float, nw);
	init(c, out->w, x, 9);
	if ((t = open_checked(c, &o, &be))) {
		CHECK(ferry_tutorial_adam_set(t, out->w, x) == FERRY_OK, "set");
		for (int s = 1; s <= STEPS; s++)
			CHECK(ferry_tutorial_adam_step(t, NULL, NULL) == FERRY_OK, "%s step %d: %s", policy, s,
			      ferry_last_error());
		CHECK(ferry_tutorial_adam_get(t, out->w, out->m, out->v, NULL) == FERRY_OK, "get");
		CHECK(ferry_backend_mem_peak(be) == plan.mem.peak_bytes, "%s: peak %zu after the steps, planned %zu",
		      policy, ferry_backend_mem_peak(be), plan.mem.peak_bytes);
	}
	ferry_tutorial_adam_free(t);
	ferry_backend_close(be);
	free(x);
}

static void free_state(struct state *s)
{
	free(s->w), free(s->m), free(s->v);
}

/* Streamed and device-resident optimizer state agree bit for bit. */
static void test_stream_matches_device(const struct ferry_tutorial_adam_config *c, const char *policy)
{
	size_t nw = ferry_tutorial_adam_weight_floats(c);
	struct state dev, str;

	run(c, policy, FERRY_OPTIM_DEVICE, &dev);
	run(c, policy, FERRY_OPTIM_STREAM, &str);
	CHECK(!memcmp(dev.w, str.w, nw * sizeof(float)) && !memcmp(dev.m, str.m, nw * sizeof(float)) &&
		      !memcmp(dev.v, str.v, nw * sizeof(float)),
	      "%d x %d, %s: streamed state differs from the device's", c->rows, c->channels, policy);
	free_state(&dev);
	free_state(&str);
}

static void test_refusals(void)
{
	struct ferry_tutorial_adam_config c = small, bad = small;
	struct ferry_exec_opts cpu = { .optimizer = FERRY_OPTIM_CPU }, params = { .offload_params = true };
	size_t nw = ferry_tutorial_adam_weight_floats(&c), nx = (size_t)c.rows * c.channels;
	float *w = TALLOC(float, nw), *x = TALLOC(float, nx), *after = TALLOC(float, nw);
	ferry_backend_t be;
	ferry_tutorial_adam_t t;

	bad.channels = 0;
	CHECK(ferry_tutorial_adam_plan(&bad, NULL, &plan) == FERRY_ERR_INVALID, "channels 0");
	bad = small;
	bad.beta2 = 1.0f;
	CHECK(ferry_tutorial_adam_plan(&bad, NULL, &plan) == FERRY_ERR_INVALID, "beta2 1");
	CHECK(ferry_tutorial_adam_plan(&c, &cpu, &plan) == FERRY_ERR_UNSUPPORTED, "optimizer cpu");
	CHECK(ferry_tutorial_adam_plan(&c, &params, &plan) == FERRY_ERR_UNSUPPORTED, "parameter offloading");
	CHECK(strstr(ferry_last_error(), "tutorial Adam network") != NULL, "message: %s", ferry_last_error());
	/* an infinite input: the gradients are not finite, nothing changes */
	init(&c, w, x, 3);
	x[4] = INFINITY;
	if (!(t = open_checked(&c, &(struct ferry_exec_opts){ .optimizer = FERRY_OPTIM_STREAM }, &be)))
		return;
	CHECK(ferry_tutorial_adam_set(t, w, x) == FERRY_OK, "set");
	CHECK(ferry_tutorial_adam_step(t, NULL, NULL) == FERRY_ERR_INVALID, "a non-finite norm is refused");
	CHECK(ferry_tutorial_adam_get(t, after, NULL, NULL, NULL) == FERRY_OK, "get");
	CHECK(!memcmp(w, after, nw * sizeof(float)), "weights untouched by the refused step");
	ferry_tutorial_adam_free(t);
	ferry_backend_close(be);
	free(w), free(x), free(after);
}

static size_t buffer_bytes(const char *name)
{
	for (int i = 0; i < plan.n_buffers; i++)
		if (!strcmp(plan.buffers[i].name, name))
			return plan.buffers[i].bytes;
	return 0;
}

/* The gradient workspace is one of the two alternating layer input/output
 * gradients alone (the other is the last output's slot, dead by then):
 * y's gradient is written over the output's by the GELU.  x kept on
 * the device: the input argument is its slot 0, so its own storage is the
 * L layer outputs; x offloaded: its ring and the last output, the input
 * copied in. */
static void test_plan(void)
{
	struct ferry_tutorial_adam_config c = small;
	struct ferry_exec_opts off = { .policy = "save_and_offload_only_these_names([], [x])" };
	size_t width;

	c.rows = 64; /* a width of 2 KiB, a multiple of the 256-byte alignment */
	width = (size_t)c.rows * c.channels * sizeof(float);
	CHECK(ferry_tutorial_adam_plan(&c, NULL, &plan) == FERRY_OK, "plan: %s", ferry_last_error());
	/* one gradient buffer: the other is the last output's slot */
	CHECK(buffer_bytes("activation gradients") == width, "gradient workspace %zu bytes, 1 x %zu",
	      buffer_bytes("activation gradients"), width);
	CHECK(buffer_bytes("input") == width && buffer_bytes("act:x") == (size_t)c.layers * width,
	      "x kept: input %zu, x's slots %zu bytes", buffer_bytes("input"), buffer_bytes("act:x"));
	CHECK(plan.tensors[0].device_slots == c.layers, "x kept: %d slots of its own", plan.tensors[0].device_slots);
	CHECK(ferry_tutorial_adam_plan(&c, &off, &plan) == FERRY_OK, "plan: %s", ferry_last_error());
	CHECK(buffer_bytes("input") == width && buffer_bytes("act:x") == (size_t)(plan.ring_slots + 1) * width,
	      "x offloaded: input %zu, x's slots %zu bytes", buffer_bytes("input"), buffer_bytes("act:x"));
}

int main(void)
{
	/* a layer of 2900 x 2900 floats is more than one 8 Mi-float ring slice */
	struct ferry_tutorial_adam_config wide = small;
	static const char *const policies[] = { "everything_saveable", "nothing_saveable",
						"save_and_offload_only_these_names([], [x])",
						"save_and_offload_only_these_names([], [x, y])" };

	test_against_reference(0.05f); /* clipping bites on every step */
	test_against_reference(0.0f);  /* no clipping */
	for (int i = 0; i < 4; i++)
		test_stream_matches_device(&small, policies[i]);
	wide.layers = 2;
	wide.rows = 4;
	wide.channels = 2900;
	test_stream_matches_device(&wide, "nothing_saveable");
	test_refusals();
	test_plan();
	return test_exit_code();
}
