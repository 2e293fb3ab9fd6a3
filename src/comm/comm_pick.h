/*
 * Which engine runs a device backend's collectives (comm_pick.c): NCCL
 * when built in and every rank on a machine has a GPU of its own, else
 * MPI through pinned host staging (sched/comm_stage.c).
 * FERRY_COMM_ENGINE=nccl|mpi|auto chooses; auto by default.
 */
#ifndef FERRY_COMM_PICK_H
#define FERRY_COMM_PICK_H

#include "ferry/comm.h"

/* FERRY_COMM_ENGINE understood (unset, auto, mpi or nccl) and what it
 * names built in: FERRY_ERR_INVALID or FERRY_ERR_UNSUPPORTED, by name. */
ferry_status ferry_comm_engine_check(void) FERRY_MUST_CHECK;

/* For c's ranks on a backend whose memory the host cannot address:
 * *nccl whether NCCL runs them, and why in words into why (n bytes).
 * FERRY_ERR_INVALID: FERRY_COMM_ENGINE not understood;
 * FERRY_ERR_UNSUPPORTED: nccl asked for but not built in. */
ferry_status ferry_comm_pick(ferry_comm_t c, bool *nccl, char *why, size_t n) FERRY_MUST_CHECK;

/* What a plan made before the run assumes: NCCL when it is built in and
 * FERRY_COMM_ENGINE is not mpi (each rank a GPU of its own). */
bool ferry_comm_pick_planned_nccl(void);

/* GPUs this process sees (NCCL builds; 0 elsewhere). */
int ferry_comm_nccl_devices(void);

#endif
