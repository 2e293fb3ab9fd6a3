/*
 * AdamW step and the sum of squares used for global-norm clipping.
 *
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g,        v = beta2 v + (1 - beta2) g^2
 *   mhat = m / (1 - beta1^t),           vhat = v / (1 - beta2^t)
 *   param -= lr (mhat / (sqrt(vhat) + eps) + weight_decay param)
 *
 * One streaming pass over param, m, v and grad; memory bound.  Each thread
 * runs adamw_range on its own contiguous chunk; the restrict-qualified
 * parameters let the compiler vectorise it without alias checks.  Note that
 * sqrtf only vectorises when errno is not required (-fno-math-errno); with
 * the default -fmath-errno the loop stays scalar, which is still close to
 * memory bound.  (No "omp simd" here: clang warns when a forced
 * vectorisation fails.)
 */
#include "ops/cpu/kernels.h"

#include <math.h>
#include <omp.h>

static void adamw_range(float *restrict param, float *restrict m,
			float *restrict v, const float *restrict grad, long lo,
			long hi, float lr, float beta1, float beta2, float eps,
			float wd, float grad_scale, float inv_bc1,
			float inv_bc2)
{
	for (long i = lo; i < hi; i++) {
		const float g = grad[i] * grad_scale;
		const float mi = beta1 * m[i] + (1.0f - beta1) * g;
		const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
		m[i] = mi;
		v[i] = vi;
		const float upd = (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
		param[i] -= lr * (upd + wd * param[i]);
	}
}

void ferry_cpu_adamw_update(float *param, float *m, float *v, const float *grad,
			    long n, float lr, float beta1, float beta2,
			    float eps, float weight_decay, float grad_scale,
			    int t)
{
	const float inv_bc1 = (float)(1.0 / (1.0 - pow(beta1, t)));
	const float inv_bc2 = (float)(1.0 / (1.0 - pow(beta2, t)));
#pragma omp parallel
	{
		const long nt = omp_get_num_threads(),
			   id = omp_get_thread_num();
		long per = (n + nt - 1) / nt;
		per = (per + 15) & ~15L;
		const long lo = id * per < n ? id * per : n;
		const long hi = lo + per < n ? lo + per : n;
		adamw_range(param, m, v, grad, lo, hi, lr, beta1, beta2, eps,
			    weight_decay, grad_scale, inv_bc1, inv_bc2);
	}
}
