/*
 * The AdamW op on the CPU (FERRY_OP_ADAMW; the CPU backend runs it here).
 *
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g,        v = beta2 v + (1 - beta2) g^2
 *   mhat = m / (1 - beta1^t),           vhat = v / (1 - beta2^t)
 *   param -= lr (mhat / (sqrt(vhat) + eps) + weight_decay param)
 *
 * One streaming pass over param, m, v and grad; memory bound.  The pass is
 * the fused kernel of cpu_adamw.c (AVX-512, AVX2 or portable C, chosen
 * at run time; threads on page-aligned chunks), which performs per element
 * exactly the operations of the loop this file used to hold,
 *
 *   g = grad[i] * grad_scale;
 *   mi = beta1 * m[i] + (1.0f - beta1) * g;
 *   vi = beta2 * v[i] + (1.0f - beta2) * g * g;
 *   upd = (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
 *   param[i] -= lr * (upd + wd * param[i]);
 *
 * in that order and unfused, so the results are bit for bit that loop's as
 * gcc compiled it (ISO C11: no contraction into FMA).  clang contracted the
 * old loop's first lines into FMAs; the fused kernel never fuses, so gcc and
 * clang builds now agree.
 */
#include "optim/cpu_adamw.h"

void ferry_cpu_adamw_update(float *param, float *m, float *v, const float *grad,
			    long n, float lr, float beta1, float beta2,
			    float eps, float weight_decay, float grad_scale,
			    int t)
{
	struct ferry_cpu_adamw_args a = {
		.param = param, .m = m, .v = v, .grad = grad, .n = n,
		.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
		.weight_decay = weight_decay, .grad_scale = grad_scale,
		.step = t, .isa = FERRY_CPU_ISA_AUTO,
	};

	/* FERRY_CPU_ADAMW_ISA, when it names a path this CPU has, is honoured
	 * here too (all paths give the same bits); when it does not, this
	 * function, which cannot report, takes the best path instead. */
	if (!ferry_cpu_adamw_isa())
		a.isa = ferry_cpu_isa_best();
	if (ferry_cpu_adamw_step(&a) != FERRY_OK)
		return; /* only for a caller's bug: NULL arrays, t < 1, n < 0 */
}
