/* ferry plan: the memory a configuration needs, before step 1. */
#include "auto_flags.h"
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "tier_flags.h"
#include "plan_print.h"
#include "plan_ranks.h"
#include "ferry/tutorial.h"
#include "ferry/backend.h"
#include "ferry/cost.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const CMD = "plan";

static void usage(void)
{
	printf("usage: ferry plan [--model gpt2|llama|tutorial] [model, batch and policy flags of ferry train]\n"
	       "                  [--rows N] [--json [FILE]] [--device-mem SIZE] [--schedule]\n"
	       "                  [--ranks N [--ranks-per-node R]] [--target NAME|FILE]\n"
	       "                  [--packed [--doc-tokens N]]\n"
	       "\n"
	       "Prints the device memory a training step needs, in the terms of JAX's\n"
	       "memory_analysis (argument, output, alias, temp, total, peak), the host memory\n"
	       "by purpose, and for every named activation of a layer its bytes and where it\n"
	       "lives under the policy.  --json writes one JSON object (to FILE, or stdout).\n"
	       "With --device-mem, says whether the plan fits and which presets would.\n"
	       "--policy auto: chooses per activation name keep, offload or recompute for the\n"
	       "least predicted step time that fits --device-mem, from this machine's\n"
	       "calibration (ferry calibrate; where its cache lacks the model's shapes, it\n"
	       "measures them first as ferry calibrate --quick would), says why, and plans\n"
	       "that; with --json the object is {\"auto\": the choice, \"plan\": the plan}.\n"
	       "--schedule: also every task of one training step as it is prepared before\n"
	       "step 1 (stream, layer, op or copy, tensor), with the step's one host\n"
	       "synchronisation.\n"
	       "--packed: the plan of a step on version-3 data (packed documents, as ferry\n"
	       "train plans for it): a [B, T] int32 'positions' tensor beside the tokens.\n"
	       "--doc-tokens N (with --packed): the documents' length the cost model prices\n"
	       "(--policy auto, --prefetch-depth auto): attention scores the pairs within\n"
	       "each document, not a row's whole triangle (default: whole rows).\n"
	       "--ranks N: the plan of each of N data-parallel ranks (mpirun -np N ferry train,\n"
	       "with --zero's split over N): its device peak and its host bytes as allocated,\n"
	       "and each machine's host bytes with R ranks on a machine (--ranks-per-node,\n"
	       "default N); --device-mem then applies to every rank (docs/distributed.md).\n"
	       "On the CUDA backend the host bytes count MPI's staging buffer when the plan\n"
	       "expects MPI (FERRY_COMM_ENGINE=mpi, or NCCL not built in), of\n"
	       "FERRY_COMM_STAGE_BYTES (8M by default).\n"
	       "--target NAME|FILE: plans for another machine from this one: its backend\n"
	       "(activation type), its device memory as --device-mem, and for --policy auto its\n"
	       "calibration; NAME h100 or h200 (committed measurements, docs/cost_model.md), or\n"
	       "a calibration file `ferry calibrate` saved there (then give --device-mem).\n"
	       "--model tutorial: the network of JAX's host-offloading tutorial (--layers,\n"
	       "--rows, --channels; default 10, 256, 256), as a gradient computation.\n"
	       "\n");
	ferry_cli_model_flags_help(stdout);
}

static int print_schedule(const struct ferry_model_config *cfg, const struct ferry_train_opts *o)
{
	struct ferry_schedule_info s;

	if (ferry_model_schedule(cfg, o->B, o->T, &o->exec, &s) != FERRY_OK)
		return ferry_cli_fail(CMD);
	plan_print_schedule(stdout, &s);
	ferry_schedule_info_free(&s);
	return 0;
}

/* What ferry plan was asked for. */
struct plan_args {
	struct ferry_train_opts o;
	const char *json_path;
	bool shape_given, json, schedule, tutorial;
	int rows;
	struct plan_ranks ranks; /* --ranks: 0 when not given */
	const char *target;      /* --target: the machine planned for (NULL: this one) */
	struct ferry_target t;   /* its backend and device memory */
	bool backend_given;      /* --backend named, not auto */
};

/* --json [FILE]: a JSON object, to FILE or stdout */
static int json_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct plan_args *a = dst;

	(void)f, (void)cmd;
	a->json = true;
	if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
		a->json_path = argv[i + 1];
		return 2;
	}
	return 1;
}

/* plan's own flags, besides the model's (the usage's text says them) */
static const struct cli_flag plan_flags[] = {
	{ .name = "--rows", .value = "N", .type = CLI_INT, .at = offsetof(struct plan_args, rows) },
	{ .name = "--schedule", .type = CLI_TRUE, .at = offsetof(struct plan_args, schedule) },
	{ .name = "--packed", .type = CLI_TRUE, .at = offsetof(struct plan_args, o.exec.packed) },
	{ .name = "--doc-tokens", .value = "N", .type = CLI_INT, .at = offsetof(struct plan_args, o.exec.doc_tokens),
	  .min = 1, .max = 1 << 30, .range = "--doc-tokens %d: at least 1" },
	{ .name = "--ranks", .value = "N", .type = CLI_INT, .at = offsetof(struct plan_args, ranks.ranks), .min = 1,
	  .max = 1 << 16, .range = "--ranks %d: from 1 to 65536" },
	{ .name = "--ranks-per-node", .value = "R", .type = CLI_INT, .at = offsetof(struct plan_args, ranks.per_node),
	  .min = 1, .max = 1 << 16, .range = "--ranks-per-node %d: from 1 to 65536" },
	{ .name = "--json", .value = "FILE", .type = CLI_CUSTOM, .optional = true, .parse = json_flag },
	{ .name = "--target", .value = "NAME|FILE", .type = CLI_STRING, .at = offsetof(struct plan_args, target) },
	{ NULL },
};

/* --target: plan with the named machine's backend (its activation type
 * and kernels' scratch) and, unless --device-mem is given, its device
 * memory; --policy auto prices with its calibration.  -1 to go on, or the
 * exit code after a message. */
static int use_target(struct plan_args *a)
{
	ferry_calibration_t c = NULL;

	if (a->backend_given) {
		fprintf(stderr, "ferry plan: --target plans for that machine's backend; --backend %s is not also "
				"needed\n", a->o.backend);
		return 2;
	}
	if (ferry_target_load(a->target, &a->t, &c) != FERRY_OK)
		return ferry_cli_fail(CMD);
	ferry_calibration_free(c); /* auto_pricing reads it again */
	a->o.backend = a->t.backend;
	if (!a->o.device_mem && !a->t.device_mem) {
		fprintf(stderr, "ferry plan: --target %s: a calibration file says nothing of the device's memory: "
				"give --device-mem\n", a->target);
		return 2;
	}
	if (!a->o.device_mem)
		a->o.device_mem = a->t.device_mem;
	return -1;
}

/* What machine the plan is for, before the text plan: the target, or
 * this machine's backend when no GPU was found and none was named. */
static void say_target(const struct plan_args *a)
{
	char mem[FERRY_SIZE_CHARS];

	if (a->json && !a->json_path)
		return; /* the JSON says its activation type */
	if (a->target)
		printf("target: %s, %s (the %s backend), device memory %s; its figures: %s\n", a->target, a->t.device,
		       a->t.backend, ferry_format_size(a->o.device_mem, mem), a->t.about);
	else if (!a->backend_given && !strcmp(a->o.backend, "cpu") && !a->tutorial)
		printf("for: this machine's cpu backend (fp32 activations; no GPU found here): --target %s plans a "
		       "GPU's run\n", ferry_target_names());
}

/* The flags into a; -1 to go on, or the exit code (after --help, 0, or
 * after a message, 2). */
static int parse_plan_flags(int argc, char **argv, struct plan_args *a)
{
	unsigned given = 0;
	const struct cli_group groups[] = { ferry_cli_model_flags_group(&a->o, &given), ferry_cli_tier_flags_group(),
					    { plan_flags, a, NULL, NULL }, { NULL } };
	int rc;

	ferry_cli_model_flags_default(&a->o);
	rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups }, argc, argv);
	a->shape_given = given & MODEL_GIVEN_SHAPE;
	if (rc == CLI_HELP)
		usage();
	if (rc)
		return rc == CLI_HELP ? 0 : rc;
	a->tutorial = !strcmp(a->o.model.arch, "tutorial");
	if (a->o.exec.doc_tokens && !a->o.exec.packed) {
		fprintf(stderr, "ferry plan: --doc-tokens prices packed documents: give --packed too\n");
		return 2;
	}
	a->backend_given = strcmp(a->o.backend, "auto") != 0;
	if (a->target && (rc = use_target(a)) >= 0)
		return rc;
	/* a plan for cuda is made without opening it: no GPU needed here */
	if (strcmp(a->o.backend, "auto") == 0)
		a->o.backend = ferry_cli_auto_backend();
	a->o.exec.act_dtype = ferry_backend_act_dtype(a->o.backend);
	a->o.exec.backend = a->o.backend;
	return -1;
}

/* The plan of the tutorial network or of the model (then also its config
 * into *cfg); -1 to go on, or the exit code after a message. */
static int make_plan(struct plan_args *a, struct ferry_model_config *cfg, struct ferry_plan *plan)
{
	ferry_status st;

	if (a->tutorial) {
		struct ferry_tutorial_config tc = { 10, a->rows, 256, false };

		if (a->shape_given) {
			tc.layers = a->o.model.layers;
			tc.channels = a->o.model.channels;
		}
		st = ferry_tutorial_plan(&tc, &a->o.exec, plan);
	} else {
		if (ferry_cli_model_flags_config(CMD, &a->o, cfg))
			return 1;
		if (a->ranks.ranks && plan_ranks_make(CMD, cfg, a->o.B, a->o.T, &a->o.exec, &a->ranks))
			return 1;
		st = a->ranks.ranks ? ferry_model_rank_plan(cfg, a->o.B, a->o.T, &a->o.exec, a->ranks.ranks, 0, plan)
				    : ferry_model_plan(cfg, a->o.B, a->o.T, &a->o.exec, plan);
	}
	return st ? ferry_cli_fail(CMD) : -1;
}

/* --ranks N and --ranks-per-node R, after the placements: --zero's split
 * over the N ranks.  -1 to go on, or the exit code after a message. */
static int setup_ranks(struct plan_args *a)
{
	struct plan_ranks *r = &a->ranks;

	if (r->per_node && !r->ranks) {
		fprintf(stderr, "ferry plan: --ranks-per-node needs --ranks N\n");
		return 2;
	}
	if (!r->ranks)
		return -1;
	if (a->tutorial) {
		fprintf(stderr, "ferry plan: --ranks is for gpt2 and llama models\n");
		return 2;
	}
	if (!r->per_node)
		r->per_node = r->ranks;
	r->zero = a->o.exec.zero;
	r->cpu = !strcmp(a->o.backend, "cpu");
	if (!a->o.exec.zero_ranks) /* --zero's, and what the advice may split over */
		a->o.exec.zero_ranks = r->ranks;
	return -1;
}

/* The device bytes that must fit: the plan's, or with --ranks the
 * largest rank's. */
static size_t device_need(const struct plan_args *a, const struct ferry_plan *plan)
{
	return a->ranks.ranks ? a->ranks.max_device : plan->mem.peak_bytes;
}

/* The plan as JSON, to the file or stdout; -1 to go on, or the exit code:
 * after writing to stdout, whether the plan fits. */
static int write_plan_json(const struct plan_args *a, const struct ferry_plan *plan,
			   const struct ferry_auto_result *autor)
{
	FILE *f = a->json_path ? fopen(a->json_path, "w") : stdout;

	if (!f) {
		fprintf(stderr, "ferry plan: cannot write %s\n", a->json_path);
		return 1;
	}
	if (autor || a->ranks.ranks)
		fprintf(f, "{");
	if (autor) {
		fprintf(f, "\"auto\": ");
		auto_policy_json(f, autor);
		fprintf(f, ",\n");
	}
	if (autor || a->ranks.ranks)
		fprintf(f, "\"plan\": ");
	plan_print_json(f, plan, a->o.device_mem);
	if (a->ranks.ranks) {
		fprintf(f, ",\n");
		plan_ranks_print_json(f, &a->ranks);
	}
	if (autor || a->ranks.ranks)
		fprintf(f, "}\n");
	if (a->json_path && fclose(f) != 0) {
		fprintf(stderr, "ferry plan: cannot write %s\n", a->json_path);
		return 1;
	}
	if (!a->json_path) /* the JSON says whether it fits; so does the status */
		return a->o.device_mem && device_need(a, plan) > a->o.device_mem ? 1 : 0;
	return -1;
}

/* --policy auto: the search, its report (not with --json to stdout, which
 * holds one JSON object), then the chosen spec is planned. */
static int resolve_auto(struct plan_args *a, struct ferry_model_config *cfg, struct ferry_auto_result *r)
{
	if (a->tutorial) {
		fprintf(stderr, "ferry plan: --policy auto is for gpt2 and llama models\n");
		return 2;
	}
	if (ferry_cli_model_flags_config(CMD, &a->o, cfg))
		return 1;
	if (auto_policy_resolve(CMD, a->target, &a->o, cfg, r, a->json && !a->json_path ? NULL : stdout))
		return 1;
	if (!(a->json && !a->json_path))
		printf("\n");
	return -1;
}

/* When no preset fits: the placement with offloading that keeps the most
 * on the device, if one fits (else, unless tiles would, that nothing does). */
static void print_offloaded_fit(const struct plan_args *a, const struct ferry_model_config *cfg, bool tiled)
{
	char place[FERRY_PLACE_CHARS], size[FERRY_SIZE_CHARS];
	size_t peak = ferry_model_fitting_placement(cfg, a->o.B, a->o.T, &a->o.exec, a->o.device_mem, place,
						    sizeof(place));

	if (peak)
		printf("moving state, the largest plan that fits (%s): --place '%s'\n", ferry_format_size(peak, size),
		       place);
	else if (!tiled)
		printf("nothing fits, however placed: use a smaller batch or model\n");
}

/* With --device-mem: whether the plan fits, and if not, which presets
 * would.  The exit code: 1 when it does not fit. */
static int report_fit(const struct plan_args *a, const struct ferry_model_config *cfg,
		      const struct ferry_plan *plan)
{
	const struct ferry_train_opts *o = &a->o;
	char fits[1024] = "", need[FERRY_SIZE_CHARS], have[FERRY_SIZE_CHARS];
	size_t tiled;
	int n;

	if (!o->device_mem)
		return 0;
	n = a->tutorial ? 0 : ferry_model_fitting_presets(cfg, o->B, o->T, &o->exec, o->device_mem, fits,
							   sizeof(fits));
	if (device_need(a, plan) <= o->device_mem) {
		printf("\nfits: needs %s of the %s of device memory (%zu of %zu bytes)%s\n",
		       ferry_format_size(device_need(a, plan), need), ferry_format_size(o->device_mem, have),
		       device_need(a, plan), o->device_mem, a->ranks.ranks ? ", on every rank" : "");
		return 0;
	}
	printf("\ndoes not fit: needs %s of device memory, the device has %s (%zu and %zu bytes)\n",
	       ferry_format_size(device_need(a, plan), need), ferry_format_size(o->device_mem, have),
	       device_need(a, plan), o->device_mem);
	if (a->tutorial)
		return 1;
	printf("presets that fit: %s\n", n ? fits : "none");
	tiled = ferry_model_fitting_tiles(cfg, o->B, o->T, &o->exec, o->device_mem, fits, sizeof(fits));
	if (!n)
		print_offloaded_fit(a, cfg, tiled);
	if (tiled)
		printf("tiles of tokens that fit: %s\n", fits);
	return 1;
}

int cmd_plan(int argc, char **argv)
{
	struct plan_args a = { .rows = 256 };
	struct ferry_model_config cfg;
	struct ferry_plan plan;
	static struct ferry_auto_result autor;
	int rc;

	autor.n = -1;
	rc = parse_plan_flags(argc, argv, &a);
	if (rc < 0 && ferry_cli_model_flags_places(CMD, &a.o))
		rc = 2;
	if (rc < 0)
		rc = setup_ranks(&a);
	if (rc < 0 && a.o.exec.zero && !a.o.exec.zero_ranks) /* a plan has no ranks */
		fprintf(stderr, "ferry plan: note: --zero %d splits over a run's ranks; --ranks N plans each of N\n",
			a.o.exec.zero);
	if (rc < 0 && ferry_cli_tier_flags_setup(CMD, &a.o))
		rc = 1;
	if (rc < 0)
		say_target(&a);
	if (rc < 0 && is_auto_policy(a.o.exec.policy))
		rc = resolve_auto(&a, &cfg, &autor);
	if (rc < 0 && !a.tutorial && a.o.exec.prefetch_depth == FERRY_PREFETCH_AUTO)
		rc = ferry_cli_model_flags_config(CMD, &a.o, &cfg) ||
		     prefetch_auto_resolve(CMD, a.target, &a.o, &cfg, a.json && !a.json_path ? NULL : stdout) ? 1 : -1;
	if (rc < 0)
		rc = make_plan(&a, &cfg, &plan);
	if (rc >= 0) {
		ferry_cli_tier_flags_release(&a.o);
		plan_ranks_free(&a.ranks);
		return rc;
	}
	if (a.json) {
		/* the JSON has no tier table, but a tier too small still refuses */
		rc = ferry_cli_tier_flags_check(CMD, &a.o, &plan) ? 1 : write_plan_json(&a, &plan, autor.n >= 0 ? &autor : NULL);
	} else {
		plan_print_text(stdout, &plan);
		if (a.ranks.ranks)
			plan_ranks_print_text(stdout, &a.ranks);
		/* host tiers: bytes by tier and kind; a tier too small refuses */
		rc = ferry_cli_tier_flags_print_plan(stdout, CMD, &a.o, &plan) ? 1 : -1;
	}
	if (rc < 0 && a.schedule && !a.tutorial && !a.json && print_schedule(&cfg, &a.o))
		rc = 1;
	if (rc < 0)
		rc = report_fit(&a, &cfg, &plan);
	ferry_cli_tier_flags_release(&a.o);
	plan_ranks_free(&a.ranks);
	return rc;
}
