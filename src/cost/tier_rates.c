/*
 * How fast each host tier is, for the cost model (cost/calibration.h): a
 * node with CPUs is local DRAM (speed 1); a CPU-less node (CXL) runs at
 * its own calibrated factors, else the slowest node's calibrated ones
 * (a node id the calibration did not see: a --topology file's), else the
 * documented defaults; a tier over several nodes has each node serve its
 * share of every transfer at once (page-striped), so it takes as long as
 * its slowest share, never less than DRAM; the NVMe tier at its file
 * rates (calibrated, else the defaults).
 */
#include "cost/calibration.h"
#include "ferry/tier.h"

#include <string.h>

static double or_default(double v, double d)
{
	return v > 0 ? v : d;
}

/* A CPU-less node's speed (adamw: the CPU AdamW's, else copies'): its
 * own measurement, else the slowest node's, else the default; *measured
 * is cleared when it is the default. */
static double cxl_speed(const struct ferry_calibration *c, int node, bool adamw, bool *measured)
{
	double v = 0;

	for (int i = 0; c && i < c->n_cxl && v <= 0; i++)
		if (c->cxl[i].node == node)
			v = adamw ? c->cxl[i].adamw : c->cxl[i].copy;
	if (v <= 0 && c)
		v = adamw ? c->cxl_adamw_factor : c->cxl_copy_factor;
	if (v > 0)
		return v;
	*measured = false;
	return adamw ? FERRY_TIER_CXL_ADAMW : FERRY_TIER_CXL_COPY;
}

/* Speed of tier t's nodes together, a node with CPUs at 1, one without at
 * its CXL speed: 1 / the longest of (node's share / node's speed), at
 * most 1. */
static double striped(const struct ferry_calibration *c, const struct ferry_topology *topo,
		      const struct ferry_tier *t, bool adamw, bool *measured)
{
	double wsum = 0, longest = 0;

	for (int i = 0; i < t->n; i++)
		wsum += t->weight[i] ? t->weight[i] : 1;
	for (int i = 0; i < t->n; i++) {
		const struct ferry_numa_node *nd = ferry_topology_node(topo, t->node[i]);
		double speed = nd && nd->cpus == 0 ? cxl_speed(c, t->node[i], adamw, measured) : 1;
		double share = (t->weight[i] ? t->weight[i] : 1) / wsum;

		if (share / speed > longest)
			longest = share / speed;
	}
	return longest > 1 ? 1 / longest : 1;
}

void ferry_calib_tier_rate(const struct ferry_calibration *c, const struct ferry_topology *topo,
			   const struct ferry_tier *t, struct ferry_tier_rate *out)
{
	memset(out, 0, sizeof(*out));
	out->copy = out->adamw = 1;
	out->read_Bps = or_default(c ? c->nvme_read_Bps : 0, FERRY_TIER_NVME_READ_BPS);
	out->write_Bps = or_default(c ? c->nvme_write_Bps : 0, FERRY_TIER_NVME_WRITE_BPS);
	if (!t || !topo || t->type == FERRY_TIER_AUTO || t->type == FERRY_TIER_DRAM)
		return;
	if (t->type == FERRY_TIER_NVME) {
		out->measured = c && c->nvme_read_Bps > 0 && c->nvme_write_Bps > 0;
		return;
	}
	/* measured: every CPU-less node of the tier at a measured speed (a
	 * tier of nodes with CPUs only is DRAM: nothing to measure) */
	out->measured = true;
	out->copy = striped(c, topo, t, false, &out->measured);
	out->adamw = striped(c, topo, t, true, &out->measured);
}
