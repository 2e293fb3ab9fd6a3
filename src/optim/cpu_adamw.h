/*
 * Internal: a fused AdamW step for optimizer state held in host memory.
 *
 * One pass reads param, grad, m and v and writes param, m and v (fp32: 16
 * bytes read and 12 written per parameter), and optionally a bf16 copy of
 * the updated parameter (round to nearest even), the device's compute copy.
 * The arithmetic is ferry_cpu_adamw_update's, operation for operation:
 *
 *   g    = grad * grad_scale
 *   m    = beta1 m + (1 - beta1) g
 *   v    = beta2 v + ((1 - beta2) g) g
 *   upd  = (m * inv_bc1) / (sqrt(v * inv_bc2) + eps)
 *   param = param - lr (upd + weight_decay param)
 *
 * with inv_bc1 = (float)(1 / (1 - beta1^t)) and inv_bc2 likewise, computed in
 * double.  Each path (portable C, AVX2, AVX-512) performs these IEEE
 * operations in this order on every element, never fused (no FMA), so every
 * path gives the same bits, whatever the thread count.
 *
 * Threads: a static partition of [0, n) into one contiguous chunk per
 * thread, each a multiple of 1024 elements (a 4 KiB page of fp32), so thread
 * i touches the same memory every step.  ferry_cpu_adamw_init writes the
 * state with that same partition: called on freshly allocated (untouched)
 * memory, it places each page on the NUMA node of the thread that will
 * update it (first touch; pin the threads, OMP_PROC_BIND=true, for the
 * placement to hold).
 */
#ifndef FERRY_OPTIM_CPU_ADAMW_H
#define FERRY_OPTIM_CPU_ADAMW_H

#include "ferry/ferry.h"

#include <stdbool.h>
#include <stdint.h>

/* The vectorised paths; a path is chosen at run time from what the CPU
 * supports.  FERRY_CPU_ISA_SCALAR is portable C (the compiler may still
 * vectorise it for the build's baseline). */
enum ferry_cpu_isa {
	FERRY_CPU_ISA_AUTO = 0, /* FERRY_CPU_ADAMW_ISA if set, else the best */
	FERRY_CPU_ISA_SCALAR,
	FERRY_CPU_ISA_AVX2,
	FERRY_CPU_ISA_AVX512, /* AVX-512F */
};

struct ferry_cpu_adamw_args {
	float *param;          /* [n] fp32 master weights, updated in place */
	float *m, *v;          /* [n] first and second moments, updated in place */
	const float *grad;     /* [n] the gradient, read only */
	uint16_t *param_bf16;  /* [n] or NULL: bf16 bits of the updated param */
	float *save_param, *save_m, *save_v; /* [n] each, or all NULL: the values
				before the step, copied there block by block just
				before the block is updated (an undo copy) */
	long n;                /* elements; 0 does nothing */
	float lr, beta1, beta2, eps, weight_decay;
	float grad_scale;      /* grad is multiplied by it first (clipping); 1 = none */
	int step;              /* t >= 1, for the bias correction */
	int threads;           /* OpenMP threads; 0 = omp_get_max_threads() */
	enum ferry_cpu_isa isa; /* FERRY_CPU_ISA_AUTO (0) or a path to force */
};

/* One AdamW step over the n elements.  The five arrays must not overlap.
 * FERRY_ERR_INVALID: NULL args, n < 0, step < 1, a NULL array with n > 0,
 * threads < 0, an unknown isa.  FERRY_ERR_UNSUPPORTED: the isa asked for
 * (in args, or by FERRY_CPU_ADAMW_ISA=scalar|avx2|avx512 when args->isa is
 * AUTO) is not available on this CPU, or the variable names no path.
 * Nothing is written on error. */
FERRY_MUST_CHECK ferry_status ferry_cpu_adamw_step(const struct ferry_cpu_adamw_args *a);

/* Undoes a step that saved its inputs: param, m, v = the saved values
 * (and param_bf16, when not NULL, = their bf16 bits).  Uses param, m, v,
 * param_bf16, the save arrays, n and threads of a. */
FERRY_MUST_CHECK ferry_status ferry_cpu_adamw_restore(const struct ferry_cpu_adamw_args *a);

/* First touch: m = v = 0, param = param_src (when param_src is not NULL
 * and not param itself; it may not otherwise overlap), param_bf16 (when
 * not NULL) = bf16 of param, each thread writing the chunk it updates in
 * ferry_cpu_adamw_step with the same n and threads.  grad is not touched;
 * the optimiser fields and isa are ignored.  FERRY_ERR_INVALID as for the
 * step (step is not checked). */
FERRY_MUST_CHECK ferry_status ferry_cpu_adamw_init(const struct ferry_cpu_adamw_args *a,
						   const float *param_src);

/* The path FERRY_CPU_ISA_AUTO takes now: "avx512", "avx2" or "scalar";
 * NULL when FERRY_CPU_ADAMW_ISA names a path this CPU lacks or no path
 * (the step then fails with FERRY_ERR_UNSUPPORTED). */
const char *ferry_cpu_adamw_isa(void);

/* "auto", "scalar", "avx2", "avx512"; NULL for a value outside the enum. */
const char *ferry_cpu_isa_name(enum ferry_cpu_isa isa);

/* Whether this CPU (and its OS) runs the path; AUTO and SCALAR always. */
bool ferry_cpu_isa_available(enum ferry_cpu_isa isa);

/* The best path this CPU runs (never AUTO). */
enum ferry_cpu_isa ferry_cpu_isa_best(void);

/* The partition the step and init use: n elements over `threads` threads
 * (>= 1) is *parts chunks of the returned length (the last may be shorter),
 * a multiple of 1024 elements and at least 32768 unless n is smaller, so
 * small arrays run on fewer threads.  *parts <= threads; 0 when n == 0. */
long ferry_cpu_adamw_chunk(long n, int threads, int *parts);

/* The AdamW op on the CPU (FERRY_OP_ADAMW, adamw_op.c): n values, step t
 * >= 1 (bias correction), gradient multiplied by grad_scale first
 * (global-norm clipping), decoupled weight decay; the fused step above on
 * the best path.  Here, not in ops/cpu/kernels.h: the kernels do not call
 * the optimizer; the CPU backend, above both, dispatches the op to it. */
void ferry_cpu_adamw_update(float *param, float *m, float *v, const float *grad,
			    long n, float lr, float beta1, float beta2,
			    float eps, float weight_decay, float grad_scale,
			    int t);

#endif
