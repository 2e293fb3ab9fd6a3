/* Internal: runs one op call with the CPU kernels (on a stream's thread). */
#ifndef FERRY_BACKEND_CPU_OPS_H
#define FERRY_BACKEND_CPU_OPS_H

#include "ops/op.h"

void ferry_cpu_run_op(const struct ferry_op_call *c);

#endif
