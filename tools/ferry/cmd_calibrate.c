/* ferry calibrate: measures what the cost model needs on this machine, at
 * the model's shapes, and caches it. */
#include "calib_cache.h"
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "ferry/platform.h"

#include <stdio.h>
#include <string.h>

static const char *const CMD = "calibrate";

static void usage(void)
{
	printf("usage: ferry calibrate [model, batch and memory flags of ferry train] [--repeats N]\n"
	       "                       [--quick]\n"
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
	       "them.  The traced steps use --policy (default nothing_saveable: the least\n"
	       "memory, and its recomputation runs every forward op twice).  --quick: one\n"
	       "traced step.\n"
	       "\n%s", model_flags_help);
}

static int parse(int argc, char **argv, struct ferry_train_opts *o, int *repeats)
{
	bool shape_given = false;

	model_flags_default(o);
	o->exec.policy = "nothing_saveable";
	*repeats = 3;
	for (int i = 1; i < argc; i++) {
		int r = model_flag(CMD, argc, argv, i, o, &shape_given);

		if (r < 0)
			return 2;
		if (r > 0) {
			i += r - 1;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage();
			return 0;
		} else if (!strcmp(argv[i], "--quick")) {
			*repeats = 1;
		} else if (!strcmp(argv[i], "--repeats")) {
			if (arg_int(CMD, argc, argv, i++, repeats))
				return 2;
			if (*repeats < 1 || *repeats > 100)
				return cli_usage_error(CMD, "--repeats must be 1..100");
		} else {
			return cli_usage_error(CMD, "unexpected argument '%s'", argv[i]);
		}
	}
	return -1;
}

int cmd_calibrate(int argc, char **argv)
{
	struct ferry_train_opts o;
	struct ferry_model_config cfg;
	ferry_calibration_t old = NULL, c = NULL;
	ferry_backend_t be;
	char path[4200] = "";
	int repeats, rc = parse(argc, argv, &o, &repeats);

	if (rc >= 0)
		return rc;
	ferry_set_threads(o.threads);
	if (model_flags_backend(CMD, &o, stdout) || model_flags_config(CMD, &o, &cfg))
		return 1;
	if (ferry_backend_open(o.backend, &(struct ferry_backend_opts){ .device_mem = o.device_mem,
									.threads = o.threads }, &be) != FERRY_OK)
		return cli_fail(CMD);
	if (calib_cache_load(be, &old, path, sizeof(path)) != FERRY_OK && path[0])
		printf("starting a new calibration: %s\n", ferry_last_error());
	if (ferry_calibrate(be, &cfg, o.B, o.T, &o.exec, repeats, old, &c) != FERRY_OK ||
	    ferry_calibration_save(c, path) != FERRY_OK) {
		ferry_calibration_free(old);
		ferry_calibration_free(c);
		ferry_backend_close(be);
		return cli_fail(CMD);
	}
	printf("calibrated %s: %d layers, %d channels, batch %d x %d on %s\n", cfg.arch, cfg.layers, cfg.channels,
	       o.B, o.T, ferry_backend_description(be));
	calib_print(stdout, c, "  ");
	printf("saved to %s\n", path);
	ferry_calibration_free(old);
	ferry_calibration_free(c);
	ferry_backend_close(be);
	return 0;
}
