/*
 * The gradient check the op tests share (test_ops_grad.c,
 * test_llama_ops_grad.c).  A case holds an op's differentiable inputs in
 * fp32 (what the kernels see) and in float64 (what the reference loss
 * reads), the kernel's backward, and the float64 reference loss
 * L = sum(ref_forward(x) * R) for a random R.  check_grads compares the
 * backward called with dout = R against central finite differences of L for
 * every element of every input, then checks the backward's contract:
 * twice into one buffer gives twice the gradient (it accumulates), and a
 * NULL gradient is skipped without disturbing the others.
 * Header-only (static functions): each tests/test_*.c is its own program.
 */
#ifndef FERRY_TESTS_GRAD_CHECK_H
#define FERRY_TESTS_GRAD_CHECK_H

#include "test_util.h"
#include "ops/rope_freq.h"

#define GRAD_MAXA 4              /* differentiable inputs of an op */
#define GRAD_CONTRACT_TOL 1e-6   /* accumulate and NULL: fp32 against fp32 */
#define GRAD_FD_STEP 1e-6

/* Whether check_grads checks that each gradient has a nonzero entry (a
 * case that reaches none of an input's elements checks nothing). */
enum grad_nonzero {
	GRAD_NONZERO_REQUIRED, /* checked */
	GRAD_NONZERO_WAIVED,   /* checked and passed: the gradient may be 0
				  (attention at T = 1: dq = dk = 0) */
	GRAD_NONZERO_OFF,      /* not checked */
};

typedef struct GradCase GradCase;
struct GradCase {
	int nargs; /* differentiable inputs */
	const char *argname[GRAD_MAXA];
	float *x[GRAD_MAXA];   /* fp32 inputs seen by the kernels */
	double *xd[GRAD_MAXA]; /* the same values in float64, for the loss */
	long n[GRAD_MAXA];
	/* kernel backward with dout = R; grads[a] may be NULL */
	void (*backward)(GradCase *c, float **grads);
	/* float64 reference loss sum(ref_forward(xd) * Rd) */
	double (*loss)(void *c);
	double grad_tol;       /* normalised error bound of each gradient */
	enum grad_nonzero nonzero;

	/* op data (whatever the op needs; case_free frees the pointers) */
	int B, T, C, NH, NKV, HS, N, OC;
	int window;                     /* attention's sliding window (0: none) */
	float eps;
	struct ferry_rope_freq rf;      /* rope: theta and scaling */
	long nout;
	int32_t *tokens;
	double *freqs;                  /* rope: [T, HS/2] */
	float *R;
	double *Rd;
	double *outd;                   /* scratch for the reference forward */
	float *out, *mean, *rstd, *lse; /* saved fp32 forward results */
};

static inline double dot_d(const double *a, const double *b, long n)
{
	double s = 0.0;
	for (long i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static inline float *arg_new(GradCase *c, const char *name, long n)
{
	const int a = c->nargs++;
	c->argname[a] = name;
	c->n[a] = n;
	c->x[a] = TALLOC(float, n);
	c->xd[a] = TALLOC(double, n);
	return c->x[a];
}

/* Call after the fp32 inputs are filled. */
static inline void args_sync(GradCase *c)
{
	for (int a = 0; a < c->nargs; a++)
		to_double(c->xd[a], c->x[a], c->n[a]);
}

/* The output and a random R in [-1, 1) of nout elements. */
static inline void out_new(GradCase *c, Rng *rng, long nout)
{
	c->nout = nout;
	c->R = TALLOC(float, nout);
	c->Rd = TALLOC(double, nout);
	c->outd = TALLOC(double, nout);
	c->out = TALLOC(float, nout);
	fill_uniform(rng, c->R, nout, -1.0f, 1.0f);
	to_double(c->Rd, c->R, nout);
}

static inline void case_free(GradCase *c)
{
	for (int a = 0; a < c->nargs; a++) {
		free(c->x[a]);
		free(c->xd[a]);
	}
	free(c->tokens);
	free(c->freqs);
	free(c->R);
	free(c->Rd);
	free(c->outd);
	free(c->out);
	free(c->mean);
	free(c->rstd);
	free(c->lse);
}

/* The kernel's gradients against finite differences; returns the worst
 * normalised error. */
static inline double check_fd(GradCase *c, const char *label, float **g)
{
	double worst = 0.0;

	c->backward(c, g);
	for (int a = 0; a < c->nargs; a++) {
		double *num = TALLOC(double, c->n[a]);
		fd_grad(num, c->xd[a], c->n[a], c->loss, c, GRAD_FD_STEP);
		const double e = nerr_fd(g[a], num, c->n[a]);
		CHECK(e < c->grad_tol, "%s: d%s error %.3g (max|grad| %.3g)",
		      label, c->argname[a], e, max_abs_d(num, c->n[a]));
		if (c->nonzero != GRAD_NONZERO_OFF)
			CHECK(c->nonzero == GRAD_NONZERO_WAIVED ||
				      max_abs_d(num, c->n[a]) > 0.0,
			      "%s: d%s is all zero", label, c->argname[a]);
		if (e > worst)
			worst = e;
		free(num);
	}
	return worst;
}

/* Twice into the same buffers gives twice the gradient once (g1). */
static inline void check_accumulates(GradCase *c, const char *label,
				     float **g1, float **g2)
{
	c->backward(c, g2);
	c->backward(c, g2);
	for (int a = 0; a < c->nargs; a++) {
		const double e = nerr_scaled_ff(g2[a], g1[a], 2.0, c->n[a]);
		CHECK(e < GRAD_CONTRACT_TOL, "%s: d%s twice != 2x once (%.3g)",
		      label, c->argname[a], e);
	}
}

/* Each gradient in turn not wanted (NULL): the others as g1; then all NULL
 * must not crash. */
static inline void check_null_grads(GradCase *c, const char *label,
				    float **g1, float **g3)
{
	for (int skip = 0; skip < c->nargs; skip++) {
		float *g[GRAD_MAXA] = {0};
		for (int a = 0; a < c->nargs; a++) {
			memset(g3[a], 0, sizeof(float) * (size_t)c->n[a]);
			g[a] = a == skip ? NULL : g3[a];
		}
		c->backward(c, g);
		for (int a = 0; a < c->nargs; a++) {
			if (a == skip)
				continue;
			const double e = nerr_ff(g3[a], g1[a], c->n[a]);
			CHECK(e < GRAD_CONTRACT_TOL,
			      "%s: d%s wrong when d%s is NULL (%.3g)", label,
			      c->argname[a], c->argname[skip], e);
		}
	}
	{
		float *none[GRAD_MAXA] = {0};
		c->backward(c, none);
	}
}

/* Gradient, accumulate and NULL checks; returns the worst gradient error. */
static inline double check_grads(GradCase *c, const char *label)
{
	float *g1[GRAD_MAXA] = {0}, *g2[GRAD_MAXA] = {0}, *g3[GRAD_MAXA] = {0};
	double worst;
	for (int a = 0; a < c->nargs; a++) {
		g1[a] = TALLOC(float, c->n[a]);
		g2[a] = TALLOC(float, c->n[a]);
		g3[a] = TALLOC(float, c->n[a]);
	}
	worst = check_fd(c, label, g1);
	check_accumulates(c, label, g1, g2);
	check_null_grads(c, label, g1, g3);
	for (int a = 0; a < c->nargs; a++) {
		free(g1[a]);
		free(g2[a]);
		free(g3[a]);
	}
	return worst;
}

#endif
