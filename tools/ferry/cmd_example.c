/*
 * ferry example: the three examples of JAX's host-offloading tutorial.  The
 * first two here, the third in example_adam.c.  The first
 * example
 * ("JAX Memories and Host Offloading", activation offloading): 10 layers of
 * x @ w1 @ w2, input 256 x 256, w1 10 x 256 x 1024, w2 10 x 1024 x 256, all
 * 0.001, gradients of sum(output) with respect to w1 and w2 -- once keeping
 * everything on the device, once offloading "x".  Prints ferry's memory
 * analysis beside the figures the tutorial reports for JAX; docs/tutorial.md
 * explains every difference.
 */
#include "cli_args.h"
#include "commands.h"
#include "example.h"
#include "plan_print.h"
#include "ferry/tutorial.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "example";
#define MB (1024.0 * 1024.0)

struct jax_figures {
	double temp, argument, total; /* MB, as the tutorial prints them */
};

struct run {
	struct ferry_plan plan;
	size_t measured_peak;
	float *dw1, *dw2;
	double loss;
};

static int run_policy(const struct ferry_tutorial_config *cfg, const char *policy, bool offload_params,
		      struct run *r)
{
	struct ferry_exec_opts o = { .policy = policy, .prefetch_depth = 0, .offload_params = offload_params };
	size_t nw = ferry_tutorial_weight_floats(cfg), nx = (size_t)cfg->rows * cfg->channels;
	float *w = malloc(nw * sizeof(float)), *x = malloc(nx * sizeof(float));
	ferry_backend_t be = NULL;
	ferry_tutorial_t t = NULL;
	int rc = -1;

	r->dw1 = malloc(nw * sizeof(float));
	r->dw2 = malloc(nw * sizeof(float));
	if (!w || !x || !r->dw1 || !r->dw2) {
		fprintf(stderr, "ferry example: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < nw; i++)
		w[i] = 0.001f;
	for (size_t i = 0; i < nx; i++)
		x[i] = 0.001f;
	if (ferry_tutorial_plan(cfg, &o, &r->plan) || ferry_backend_open("cpu", NULL, &be) ||
	    ferry_tutorial_create(be, cfg, &o, &t) || ferry_tutorial_set(t, w, w, x) ||
	    ferry_tutorial_grad(t, &r->loss) || ferry_tutorial_get_grads(t, r->dw1, r->dw2)) {
		ferry_cli_fail(CMD);
		goto out;
	}
	r->measured_peak = ferry_backend_mem_peak(be);
	rc = 0;
out:
	ferry_tutorial_free(t);
	ferry_backend_close(be);
	free(w);
	free(x);
	return rc;
}

static void print_side_by_side(const char *title, const struct jax_figures *jax, const struct run *r)
{
	const struct ferry_memory_analysis *m = &r->plan.mem;
	char lives[64];

	printf("%s (policy %s)\n", title, r->plan.policy);
	printf("  %-22s %12s %12s\n", "", "JAX", "ferry");
	printf("  %-22s %9.2f MB %9.2f MB\n", "temp", jax->temp, m->temp_bytes / MB);
	printf("  %-22s %9.2f MB %9.2f MB\n", "argument", jax->argument, m->argument_bytes / MB);
	printf("  %-22s %12s %9.2f MB\n", "output", "(20.00 MB)", m->output_bytes / MB);
	printf("  %-22s %9.2f MB %9.2f MB\n", "total", jax->total, m->total_bytes / MB);
	printf("  %-22s %12s %9.2f MB  (measured: %.2f MB)\n", "peak", "-", m->peak_bytes / MB,
	       r->measured_peak / MB);
	printf("  %-22s %12s %9.2f MB\n", "host (offloaded)", "-", m->host_total_bytes / MB);
	if (r->plan.param_ring_slots)
		printf("    %-14s w1, w2 and dw1, dw2 on the host; a %d-layer weight ring and a 2-layer gradient "
		       "ring on the device\n", "parameters", r->plan.param_ring_slots);
	for (int i = 0; i < r->plan.n_tensors; i++)
		printf("    %-14s %9.2f MB per layer, %-8s -> %s\n", r->plan.tensors[i].name,
		       r->plan.tensors[i].layer_bytes / MB, ferry_placement_name(r->plan.tensors[i].placement),
		       plan_tensor_lives(&r->plan, i, lives, sizeof(lives)));
	printf("\n");
}

/* jnp.allclose(a, b, rtol, atol) */
static bool allclose(const float *a, const float *b, size_t n, double rtol, double atol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i])))
			return false;
	return true;
}

/* The third example's steps run at EXAMPLE_DIM x EXAMPLE_DIM unless --dim. */
#define EXAMPLE_DIM 512
#define STR_(x) #x
#define STR(x) STR_(x)

static const struct cli_flag example_flags[] = {
	{ .name = "--dim", .value = "N", .type = CLI_INT, .at = 0,
	  .help = "the third example's memory analysis is planned at the tutorial's\n"
	  "7168 x 7168; its steps run at N x N (default " STR(EXAMPLE_DIM) "; 7168 takes\n"
	  "minutes and about 12 GB of memory)",
	  .min = 1, .max = 16384, .range = "--dim %d: from 1 to 16384", .usage = true },
	{ NULL },
};

int cmd_example(int argc, char **argv)
{
	static const struct jax_figures jax_plain = { 17.25, 20.25, 57.50 };
	static const struct jax_figures jax_offload = { 6.50, 20.25, 46.75 };
	static const struct jax_figures jax_params = { 4.75, 0.25, 25.00 };
	struct ferry_tutorial_config cfg = { 10, 256, 256, false };
	struct run plain = { 0 }, offl = { 0 }, params = { 0 };
	int dim = EXAMPLE_DIM;
	const struct cli_group groups[] = { { example_flags, &dim, NULL, NULL }, { NULL } };
	size_t nw = ferry_tutorial_weight_floats(&cfg), C = (size_t)cfg.channels;
	int rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups, .arg = ferry_cli_unexpected }, argc, argv);
	if (rc == CLI_HELP) {
		printf("usage: ferry example [--dim N]\n\nRuns the three examples of JAX's host-offloading "
		       "tutorial (activation,\nparameter and optimizer-state offloading) on ferry's CPU "
		       "backend and prints\ntheir memory analysis beside JAX's reported figures (see "
		       "docs/tutorial.md).\n\n");
		ferry_cli_help(stdout, example_flags, 12);
		return 0;
	}
	if (rc)
		return rc;
	rc = 1;
	printf("JAX host-offloading tutorial, activation offloading: %d layers of x @ w1 @ w2,\n"
	       "x %dx%d, w1 %dx%dx%zu, w2 %dx%zux%d, fp32, gradients of sum(output)\n\n",
	       cfg.layers, cfg.rows, cfg.channels, cfg.layers, cfg.channels, 4 * C, cfg.layers, 4 * C,
	       cfg.channels);
	if (run_policy(&cfg, "everything_saveable", false, &plain) ||
	    run_policy(&cfg, "save_and_offload_only_these_names([], [x])", false, &offl) ||
	    run_policy(&cfg, "save_and_offload_only_these_names([], [x])", true, &params))
		goto out;
	print_side_by_side("without offloading", &jax_plain, &plain);
	print_side_by_side("offloading \"x\"", &jax_offload, &offl);
	printf("activation offloading reduces temp by %.2f MB (JAX: %.2f MB)\n",
	       (plain.plan.mem.temp_bytes - (double)offl.plan.mem.temp_bytes) / MB,
	       jax_plain.temp - jax_offload.temp);
	printf("results match within tolerance: %s\n",
	       allclose(offl.dw1, plain.dw1, nw, 1e-5, 1e-5) && allclose(offl.dw2, plain.dw2, nw, 1e-5, 1e-5)
		       ? "True" : "False");
	/* JAX's result[0][0, 0, :5] is dw1[layer 0][input 0][hidden 0..4];
	 * ferry stores w1 transposed, [hidden][input]. */
	printf("sample of results:  [");
	for (size_t j = 0; j < 5; j++)
		printf("%s%.7e", j ? " " : "", offl.dw1[j * C]);
	printf("]\n(JAX prints         [3.8312336e-07 3.8312336e-07 3.8312336e-07 3.8312336e-07 "
	       "3.8312336e-07])\n\n");
	printf("JAX host-offloading tutorial, parameter offloading: the same network and \"x\" offloaded,\n"
	       "w1 and w2 in host memory\n\n");
	print_side_by_side("offloading \"x\" and the parameters", &jax_params, &params);
	printf("parameter offloading reduces the argument by %.2f MB (JAX: %.2f MB), the total by %.2f MB "
	       "(JAX: %.2f MB)\n", (offl.plan.mem.argument_bytes - (double)params.plan.mem.argument_bytes) / MB,
	       jax_offload.argument - jax_params.argument,
	       (offl.plan.mem.total_bytes - (double)params.plan.mem.total_bytes) / MB, jax_offload.total - jax_params.total);
	printf("results match within tolerance: %s (bit for bit: %s)\n",
	       allclose(params.dw1, offl.dw1, nw, 1e-5, 1e-5) && allclose(params.dw2, offl.dw2, nw, 1e-5, 1e-5)
		       ? "True" : "False",
	       !memcmp(params.dw1, offl.dw1, nw * sizeof(float)) && !memcmp(params.dw2, offl.dw2, nw * sizeof(float))
		       ? "yes" : "no");
	printf("\n");
	rc = example_adam(dim);
out:
	free(plain.dw1);
	free(plain.dw2);
	free(offl.dw1);
	free(offl.dw2);
	free(params.dw1);
	free(params.dw2);
	return rc;
}
