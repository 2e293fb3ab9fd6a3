/* ferry plan: the memory a configuration needs, before step 1. */
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "plan_print.h"
#include "ferry/tutorial.h"
#include "ferry/backend.h"

#include <stdio.h>
#include <string.h>

static const char *const CMD = "plan";

static void usage(void)
{
	printf("usage: ferry plan [--model gpt2|llama|tutorial] [model, batch and policy flags of ferry train]\n"
	       "                  [--rows N] [--json [FILE]] [--device-mem SIZE] [--schedule]\n"
	       "\n"
	       "Prints the device memory a training step needs, in the terms of JAX's\n"
	       "memory_analysis (argument, output, alias, temp, total, peak), the host memory\n"
	       "by purpose, and for every named activation of a layer its bytes and where it\n"
	       "lives under the policy.  --json writes one JSON object (to FILE, or stdout).\n"
	       "With --device-mem, says whether the plan fits and which presets would.\n"
	       "--schedule: also every task of one training step as it is prepared before\n"
	       "step 1 (stream, layer, op or copy, tensor), with the step's one host\n"
	       "synchronisation.\n"
	       "--model tutorial: the network of JAX's host-offloading tutorial (--layers,\n"
	       "--rows, --channels; default 10, 256, 256), as a gradient computation.\n"
	       "\n%s", model_flags_help);
}

static int print_schedule(const struct ferry_model_config *cfg, const struct ferry_train_opts *o)
{
	struct ferry_schedule_info s;

	if (ferry_model_schedule(cfg, o->B, o->T, &o->exec, &s) != FERRY_OK)
		return cli_fail(CMD);
	plan_print_schedule(stdout, &s);
	ferry_schedule_info_free(&s);
	return 0;
}

int cmd_plan(int argc, char **argv)
{
	struct ferry_train_opts o;
	struct ferry_model_config cfg;
	struct ferry_plan plan;
	const char *json_path = NULL;
	bool shape_given = false, json = false, schedule = false, tutorial;
	int rows = 256, rc = 0;
	ferry_status st;

	model_flags_default(&o);
	for (int i = 1; i < argc; i++) {
		int r = model_flag(CMD, argc, argv, i, &o, &shape_given);

		if (r < 0)
			return 2;
		if (r > 0) {
			i += r - 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage();
			return 0;
		} else if (!strcmp(argv[i], "--rows")) {
			if (arg_int(CMD, argc, argv, i++, &rows))
				return 2;
		} else if (!strcmp(argv[i], "--schedule")) {
			schedule = true;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
			if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
				json_path = argv[++i];
		} else {
			return cli_usage_error(CMD, "unknown flag '%s'", argv[i]);
		}
	}
	tutorial = !strcmp(o.model.arch, "tutorial");
	/* a plan for cuda is made without opening it: no GPU needed here */
	if (strcmp(o.backend, "auto") == 0)
		o.backend = ferry_backend_probe("cuda") == FERRY_OK ? "cuda" : "cpu";
	o.exec.act_dtype = ferry_backend_act_dtype(o.backend);

	if (tutorial) {
		struct ferry_tutorial_config tc = { 10, rows, 256, false };

		if (shape_given) {
			tc.layers = o.model.layers;
			tc.channels = o.model.channels;
		}
		st = ferry_tutorial_plan(&tc, &o.exec, &plan);
	} else {
		if (model_flags_config(CMD, &o, &cfg))
			return 1;
		st = ferry_model_plan(&cfg, o.B, o.T, &o.exec, &plan);
	}
	if (st)
		return cli_fail(CMD);

	if (json) {
		FILE *f = json_path ? fopen(json_path, "w") : stdout;

		if (!f) {
			fprintf(stderr, "ferry plan: cannot write %s\n", json_path);
			return 1;
		}
		plan_print_json(f, &plan, o.device_mem);
		if (json_path && fclose(f) != 0) {
			fprintf(stderr, "ferry plan: cannot write %s\n", json_path);
			return 1;
		}
		if (!json_path) /* the JSON says whether it fits; so does the status */
			return o.device_mem && plan.mem.peak_bytes > o.device_mem ? 1 : 0;
	} else {
		plan_print_text(stdout, &plan);
	}
	if (schedule && !tutorial && !json && print_schedule(&cfg, &o))
		return 1;
	if (o.device_mem) {
		char fits[1024] = "";
		int n = tutorial ? 0 : ferry_model_fitting_presets(&cfg, o.B, o.T, &o.exec, o.device_mem,
								 fits, sizeof(fits));

		if (plan.mem.peak_bytes <= o.device_mem) {
			printf("\nfits: needs %zu of %zu bytes of device memory\n", plan.mem.peak_bytes, o.device_mem);
		} else {
			printf("\ndoes not fit: needs %zu bytes of device memory, the device has %zu\n",
			       plan.mem.peak_bytes, o.device_mem);
			if (!tutorial)
				printf("presets that fit: %s\n", n ? fits : "none");
			rc = 1;
		}
	}
	return rc;
}
