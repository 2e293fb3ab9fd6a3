/* ferry calibrate: measures what the cost model needs on this machine, at
 * the model's shapes, and caches it. */
#include "calib_cache.h"
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "tier_flags.h"
#include "train_ranks.h"
#include "ferry/platform.h"

#include <stdio.h>
#include <string.h>

static const char *const CMD = "calibrate";

static void usage(void)
{
	printf("usage: ferry calibrate [model, batch and memory flags of ferry train] [--repeats N]\n"
	       "                       [--quick] [--predict-trace FILE]\n"
	       "\n"
	       "Measures on the active backend, at the model's shapes: every op of a training\n"
	       "step (a warm-up step, then --repeats traced steps, default 3: each op's\n"
	       "fastest timed slice at its shape), copies to and from the device at the sizes\n"
	       "of the model's layer activations (each direction alone and both at once),\n"
	       "device zeroing and copies, the CPU AdamW, and the fastest of several untraced\n"
	       "steps (how much slower ops run inside whole steps than at their fastest).\n"
	       "The results go to the cache of this machine ($XDG_CACHE_HOME/ferry or\n"
	       "~/.cache/ferry, named by a fingerprint of CPU, cores, memory, backend, device,\n"
	       "threads and ferry's version), merged with what it already held; `ferry info`\n"
	       "shows them, and `ferry bench` and `--policy auto` predict step times from\n"
	       "them (auto measures what the cache lacks itself, as --quick does).  The\n"
	       "traced steps use --policy (default nothing_saveable: the least memory, and\n"
	       "its recomputation runs every forward op twice).  --quick: one traced step.\n"
	       "Each part is printed as it starts.  How much calls of one op vary, and the\n"
	       "share of the CPUs' time other processes took meanwhile, say whether the\n"
	       "machine was busy (above 25%%: calibrate again when it is quiet).\n"
	       "\n"
	       "Host tiers (docs/tiers.md): on a machine with CPU-less (CXL) NUMA nodes, each\n"
	       "node's speed against local DRAM, in the same run: copies to and from the\n"
	       "device at those sizes, and the CPU AdamW, on memory bound to the node and to\n"
	       "DRAM (not with --host-tier off, nor on a --topology file's simulated nodes).\n"
	       "With --nvme-dir DIR, the NVMe tier's write and read rates in DIR through its\n"
	       "own file I/O (at most 256 MiB, the file gone from DIR as soon as it is open).\n"
	       "Figures not measured keep an earlier calibration's, else the documented\n"
	       "defaults; `ferry info` says which.\n"
	       "\n"
	       "Under mpirun (mpirun -np N ferry calibrate ..., as ferry train runs on N\n"
	       "ranks; --threads then defaults to the cores shared by the ranks), every rank\n"
	       "measures its steps beside the others', then the collectives the step runs\n"
	       "over N ranks (all-reduce, reduce-scatter, all-gather) at its sizes, every\n"
	       "rank at once; rank 0 saves them, kept per engine and number of ranks: a\n"
	       "calibration of one process does not price N ranks' collectives (--policy\n"
	       "auto on N ranks measures them when the cache lacks them).\n"
	       "\n"
	       "Last it prints the step the cost model predicts for these flags (on N\n"
	       "ranks, with the time the compute stream waits for the collectives);\n"
	       "--predict-trace FILE also writes that simulated step (rank 0's) as\n"
	       "`ferry train --trace` writes a traced one, to compare the two task by task\n"
	       "(docs/cost_model.md).\n"
	       "\n");
	ferry_cli_model_flags_help(stdout);
}

/* calibrate's own flags (the usage's text says them) */
struct calibrate_args {
	int repeats;
	const char *timeline; /* --predict-trace */
};

static const struct cli_flag calibrate_flags[] = {
	{ .name = "--repeats", .value = "N", .type = CLI_INT, .at = offsetof(struct calibrate_args, repeats),
	  .min = 1, .max = 100, .range = "--repeats must be 1..100", .usage = true },
	{ .name = "--quick", .type = CLI_ONE, .at = offsetof(struct calibrate_args, repeats) },
	{ .name = "--predict-trace", .value = "FILE", .type = CLI_STRING,
	  .at = offsetof(struct calibrate_args, timeline) },
	{ NULL },
};

static int parse(int argc, char **argv, struct ferry_train_opts *o, struct calibrate_args *a)
{
	const struct cli_group groups[] = { ferry_cli_model_flags_group(o, NULL), ferry_cli_tier_flags_group(),
					    { calibrate_flags, a, NULL, NULL }, { NULL } };
	int rc;

	ferry_cli_model_flags_default(o);
	o->exec.policy = "nothing_saveable";
	a->repeats = 3;
	a->timeline = NULL;
	rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups, .arg = ferry_cli_unexpected }, argc, argv);
	if (rc == CLI_HELP)
		usage();
	return rc == CLI_HELP ? 0 : rc ? rc : -1;
}

/* CPU-less nodes of the tiers' topology that were not measured, and why. */
static void print_tier_notes(const struct ferry_train_opts *o, ferry_calibration_t c)
{
	const struct ferry_topology *t = o->exec.host_tiers ? ferry_host_tiers_topology(o->exec.host_tiers) : NULL;
	struct ferry_calib_summary s;

	ferry_calibration_summary(c, &s);
	if (s.nvme_error[0])
		fprintf(stderr, "ferry calibrate: warning: the NVMe tier was not measured (%s); the other figures "
			"are saved, the NVMe tier's are the earlier ones or the defaults\n", s.nvme_error);
	for (int i = 0; t && i < t->n; i++) {
		bool seen = false;

		if (t->node[i].cpus || !t->node[i].capacity)
			continue;
		for (int j = 0; j < s.n_cxl_nodes; j++)
			seen |= s.cxl_node[j].node == t->node[i].id;
		if (t->simulated)
			printf("host tiers: node %d of %s is simulated (--topology): not measured\n", t->node[i].id,
			       t->source);
		else if (!seen)
			printf("host tiers: CPU-less node %d not measured (too little free memory for the "
			       "measurement)\n", t->node[i].id);
	}
}

/* The step the calibration's flags give, predicted (on several ranks
 * with its collectives priced): what ferry train then measures; its
 * simulated timeline into `timeline` (rank 0's; NULL: none).  1 where
 * the timeline asked for could not be written. */
static int print_step(const struct ferry_train_opts *o, const struct ferry_model_config *cfg, ferry_calibration_t c,
		      const char *timeline)
{
	struct ferry_exec_opts e = o->exec;
	struct ferry_prediction p;
	int ranks = o->comm ? ferry_comm_size(o->comm) : 1;

	e.comm = o->comm;
	if (o->comm && ferry_comm_rank(o->comm) > 0)
		timeline = NULL;
	if (ferry_model_predict_timeline(cfg, o->B, o->T, &e, c, timeline, &p) != FERRY_OK) {
		if (timeline)
			return ferry_cli_fail(CMD);
		printf("no prediction: %s\n", ferry_last_error());
		return 0;
	}
	printf("predicted step (--policy %s, %d rank%s of %d rows): %.1f ms", o->exec.policy, ranks, ranks > 1 ? "s" : "",
	       o->B, p.step_s * 1e3);
	if (ranks > 1)
		printf(", of which the compute stream waits %.1f ms for the collectives (%.1f ms of them on the comm "
		       "stream)", p.exposed_comm_s * 1e3, p.comm_s * 1e3);
	printf("\n");
	if (timeline)
		printf("the simulated step written to %s\n", timeline);
	return 0;
}

static int calibrate(struct ferry_train_opts *o, const struct calibrate_args *a)
{
	struct ferry_model_config cfg;
	ferry_calibration_t c = NULL;
	ferry_backend_t be;
	char path[4200] = "";
	int rc;

	ferry_set_threads(o->threads);
	if (ferry_cli_model_flags_backend(CMD, o, stdout) || ferry_cli_model_flags_config(CMD, o, &cfg))
		return 1;
	if (ferry_cli_model_flags_places(CMD, o) || ferry_cli_tier_flags_setup(CMD, o))
		return 1;
	if (ferry_backend_open(o->backend, &(struct ferry_backend_opts){ .device_mem = o->device_mem,
									 .threads = o->threads }, &be) != FERRY_OK) {
		ferry_cli_tier_flags_release(o);
		return ferry_cli_fail(CMD);
	}
	rc = calib_cache_calibrate(CMD, be, &cfg, o, a->repeats, &(struct calib_log){ stdout, "" }, path, sizeof(path),
				   &c);
	if (!rc) {
		printf("calibrated %s: %d layers, %d channels, batch %d x %d on %s\n", cfg.arch, cfg.layers,
		       cfg.channels, o->B, o->T, ferry_backend_description(be));
		print_tier_notes(o, c);
		calib_print(stdout, c, "  ");
		rc = print_step(o, &cfg, c, a->timeline);
		printf("saved to %s\n", path);
	}
	ferry_calibration_free(c);
	ferry_backend_close(be);
	ferry_cli_tier_flags_release(o);
	return rc;
}

int cmd_calibrate(int argc, char **argv)
{
	struct ferry_train_opts o;
	struct ranks r;
	struct calibrate_args a;
	int rc;

	if (ranks_open(CMD, &r)) /* mpirun: the collectives over its ranks too */
		return 1;
	if ((rc = parse(argc, argv, &o, &a)) < 0) {
		if (r.size > 1) {
			o.comm = r.comm;
			o.threads = ranks_threads(&r, o.threads);
		}
		/* every rank saw the same failure, or one alone (then the job ends) */
		rc = calibrate(&o, &a);
		if (r.size > 1)
			rc = ranks_agree_rc(CMD, &r, rc);
	}
	ranks_close(&r);
	return rc;
}
