/*
 * ferry example, third part: the tutorial's optimizer-state offloading
 * example ("JAX Memories and Host Offloading"): 4 layers of gelu(x @ w),
 * 7168 x 7168 input and weights of ones, loss mean((out - x)^2) + 0.001
 * sum(w^2), clip_by_global_norm(1.0), Adam with lr 0.1.  The memory
 * analysis is planned at the tutorial's size; the steps run at --dim
 * (default 512: the full size takes minutes on a CPU), the optimizer state
 * on the device and streamed, checked bit for bit against each other and
 * the arena's measured peak against the plan.  docs/tutorial.md explains
 * every difference from JAX's figures.
 */
#include "cli_args.h"
#include "example.h"
#include "plan_print.h"
#include "ferry/tutorial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "example";
#define GB (1024.0 * 1024.0 * 1024.0)
#define STEPS 3

struct jax_figures {
	double temp, argument, total; /* GB (2^30 bytes), as the tutorial prints them */
};

static struct ferry_tutorial_adam_config tutorial_config(int dim)
{
	return (struct ferry_tutorial_adam_config){ .layers = 4, .rows = dim, .channels = dim, .l2 = 0.001f,
						    .clip = 1.0f, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
						    .eps = 1e-8f };
}

/* One line: JAX's figure (< 0: none) beside ferry's bytes, in GB. */
static void print_row(const char *what, double jax, size_t bytes)
{
	if (jax < 0)
		printf("  %-22s %12s %9.2f GB\n", what, "-", bytes / GB);
	else
		printf("  %-22s %9.2f GB %9.2f GB\n", what, jax, bytes / GB);
}

static void print_plan(const char *title, const struct jax_figures *jax, const struct ferry_plan *p)
{
	const struct ferry_memory_analysis *m = &p->mem;
	char lives[64];

	printf("%s (policy %s)\n", title, p->policy);
	printf("  %-22s %12s %12s\n", "", "JAX", "ferry");
	print_row("temp", jax ? jax->temp : -1, m->temp_bytes);
	print_row("argument", jax ? jax->argument : -1, m->argument_bytes);
	print_row("total", jax ? jax->total : -1, m->total_bytes);
	print_row("host", -1, m->host_total_bytes);
	for (int i = 0; i < p->n_buffers; i++)
		printf("    %-28s %-8s %9.3f GB\n", p->buffers[i].name, ferry_buffer_kind_name(p->buffers[i].kind),
		       p->buffers[i].bytes / GB);
	for (int i = 0; i < p->n_tensors; i++)
		printf("    %-14s %9.3f GB per layer, %-8s -> %s\n", p->tensors[i].name, p->tensors[i].layer_bytes / GB,
		       ferry_placement_name(p->tensors[i].placement), plan_tensor_lives(p, i, lives, sizeof(lives)));
	printf("\n");
}

struct adam_run {
	float *w, *m, *v;
	double loss[STEPS];
	size_t planned, measured;
};

static int run_steps(const struct ferry_tutorial_adam_config *c, const struct ferry_exec_opts *o,
		     struct adam_run *r)
{
	size_t nw = ferry_tutorial_adam_weight_floats(c), nx = (size_t)c->rows * c->channels;
	float *x = malloc(nx * sizeof(float));
	struct ferry_plan plan;
	ferry_backend_t be = NULL;
	ferry_tutorial_adam_t t = NULL;
	int rc = -1;

	r->w = malloc(nw * sizeof(float));
	r->m = malloc(nw * sizeof(float));
	r->v = malloc(nw * sizeof(float));
	if (!x || !r->w || !r->m || !r->v) {
		fprintf(stderr, "ferry example: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < nw; i++) /* jnp.ones */
		r->w[i] = 1.0f;
	for (size_t i = 0; i < nx; i++)
		x[i] = 1.0f;
	if (ferry_tutorial_adam_plan(c, o, &plan) || ferry_backend_open("cpu", NULL, &be) ||
	    ferry_tutorial_adam_create(be, c, o, &t) || ferry_tutorial_adam_set(t, r->w, x))
		goto fail;
	for (int s = 0; s < STEPS; s++)
		if (ferry_tutorial_adam_step(t, &r->loss[s], NULL))
			goto fail;
	if (ferry_tutorial_adam_get(t, r->w, r->m, r->v, NULL))
		goto fail;
	r->planned = plan.mem.peak_bytes;
	r->measured = ferry_backend_mem_peak(be);
	rc = 0;
	goto out;
fail:
	ferry_cli_fail(CMD);
out:
	ferry_tutorial_adam_free(t);
	ferry_backend_close(be);
	free(x);
	return rc;
}

static void free_run(struct adam_run *r)
{
	free(r->w);
	free(r->m);
	free(r->v);
}

/* Device-resident and streamed optimizer state, STEPS steps each. */
static int run_both(int dim)
{
	struct ferry_tutorial_adam_config c = tutorial_config(dim);
	struct ferry_exec_opts dev = { .optimizer = FERRY_OPTIM_DEVICE }, str = { .optimizer = FERRY_OPTIM_STREAM };
	struct adam_run a = { 0 }, b = { 0 };
	size_t bytes = ferry_tutorial_adam_weight_floats(&c) * sizeof(float);
	int rc = 1;

	printf("%d steps at %d x %d (--dim), weights and input of ones:\n", STEPS, dim, dim);
	if (run_steps(&c, &dev, &a) || run_steps(&c, &str, &b))
		goto out;
	for (int s = 0; s < STEPS; s++)
		printf("  step %d loss: %.6e (state on the device)  %.6e (state streamed)\n", s + 1, a.loss[s],
		       b.loss[s]);
	printf("  device peak, planned = measured: %s and %s\n",
	       a.planned == a.measured ? "yes" : "NO", b.planned == b.measured ? "yes" : "NO");
	printf("  weights and moments after %d steps bit for bit the same: %s\n", STEPS,
	       !memcmp(a.w, b.w, bytes) && !memcmp(a.m, b.m, bytes) && !memcmp(a.v, b.v, bytes) ? "yes" : "no");
	rc = 0;
out:
	free_run(&a);
	free_run(&b);
	return rc;
}

int example_adam(int dim)
{
	static const struct jax_figures jax_plain = { 2.11, 2.49, 4.59 };
	static const struct jax_figures jax_offload = { 1.91, 0.96, 2.87 };
	struct ferry_tutorial_adam_config c = tutorial_config(7168);
	struct ferry_exec_opts keep = { .optimizer = FERRY_OPTIM_DEVICE };
	struct ferry_exec_opts str = { .optimizer = FERRY_OPTIM_STREAM };
	/* ferry's leanest here: x offloaded one layer ahead, y recomputed */
	struct ferry_exec_opts lean = { .optimizer = FERRY_OPTIM_STREAM, .prefetch_depth = 1,
					.policy = "save_and_offload_only_these_names([], [x])" };
	/* and without offloading: y recomputed from the kept x */
	struct ferry_exec_opts lean_dev = { .optimizer = FERRY_OPTIM_DEVICE, .policy = "nothing_saveable" };
	struct ferry_plan p_keep, p_str, p_lean, p_lean_dev;

	printf("JAX host-offloading tutorial, optimizer state offloading: 4 layers of gelu(x @ w),\n"
	       "x 7168x7168, w 4x7168x7168, fp32, loss mean((out - x)^2) + 0.001 sum(w^2),\n"
	       "clip_by_global_norm(1.0), Adam (lr 0.1)\n\n");
	if (ferry_tutorial_adam_plan(&c, &keep, &p_keep) || ferry_tutorial_adam_plan(&c, &str, &p_str) ||
	    ferry_tutorial_adam_plan(&c, &lean, &p_lean) || ferry_tutorial_adam_plan(&c, &lean_dev, &p_lean_dev)) {
		ferry_cli_fail(CMD);
		return 1;
	}
	print_plan("without offloading", &jax_plain, &p_keep);
	print_plan("optimizer state offloaded (--offload-optimizer stream)", &jax_offload, &p_str);
	print_plan("optimizer state and x offloaded (prefetch depth 1), y recomputed (ferry only)", NULL, &p_lean);
	printf("without offloading, y recomputed (policy %s, ferry only): total %.2f GB\n", p_lean_dev.policy,
	       p_lean_dev.mem.total_bytes / GB);
	printf("optimizer-state offloading reduces the total by %.2f GB (JAX: %.2f GB)\n\n",
	       (p_keep.mem.total_bytes - (double)p_str.mem.total_bytes) / GB, jax_plain.total - jax_offload.total);
	return run_both(dim);
}
