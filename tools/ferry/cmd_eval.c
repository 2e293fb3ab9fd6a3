/* ferry eval: mean loss of a checkpoint over the first N batches. */
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/platform.h"
#include "ferry/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "eval";

static void usage(void)
{
	printf("usage: ferry eval --checkpoint PATH --data GLOB [--batch B] [--seq T] [--batches N]\n"
	       "                  [--backend NAME] [--threads N] [--device-mem SIZE]\n"
	       "\n"
	       "PATH is an llm.c model file (GPT-2) or a Hugging Face Llama directory\n"
	       "(config.json + model.safetensors or shards; fp32, bf16 or fp16), e.g.\n"
	       "  ferry eval --checkpoint llama_run --data 'data/mytext_val_*.bin' --seq 128\n"
	       "\n"
	       "Forward passes over the first N batches of the shards, in order, no\n"
	       "shuffling; prints the mean cross-entropy as the last line: 'loss <value>'.\n"
	       "Defaults: --batch 4 --seq 64 --batches 10.\n");
}

int cmd_eval(int argc, char **argv)
{
	const char *ckpt = NULL, *data = NULL, *backend = "auto";
	struct ferry_backend_opts bo = { .threads = 0 };
	int B = 4, T = 64, batches = 10, rc = 1;
	struct ferry_model_config cfg;
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	float *params = NULL, loss;
	size_t n;

	for (int i = 1; i < argc; i += 2) { /* every flag takes a value */
		const char *f = argv[i];
		int r;

		if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
			usage();
			return 0;
		} else if (!strcmp(f, "--checkpoint")) r = arg_value(CMD, argc, argv, i, &ckpt);
		else if (!strcmp(f, "--data")) r = arg_value(CMD, argc, argv, i, &data);
		else if (!strcmp(f, "--batch")) r = arg_int(CMD, argc, argv, i, &B);
		else if (!strcmp(f, "--seq")) r = arg_int(CMD, argc, argv, i, &T);
		else if (!strcmp(f, "--batches")) r = arg_int(CMD, argc, argv, i, &batches);
		else if (!strcmp(f, "--backend")) r = arg_value(CMD, argc, argv, i, &backend);
		else if (!strcmp(f, "--threads")) r = arg_threads(CMD, argc, argv, i, &bo.threads);
		else if (!strcmp(f, "--device-mem")) r = arg_size(CMD, argc, argv, i, &bo.device_mem);
		else
			return cli_usage_error(CMD, "unknown flag '%s'", f);
		if (r)
			return 2;
	}
	if (!ckpt || !data)
		return cli_usage_error(CMD, "--checkpoint and --data are required");
	ferry_set_threads(bo.threads);
	if (!strcmp(backend, "auto"))
		backend = cli_auto_backend();

	if (ferry_checkpoint_any_read_config(ckpt, &cfg) != FERRY_OK)
		return cli_fail(CMD);
	if (ferry_backend_open(backend, &bo, &be) != FERRY_OK)
		return cli_fail(CMD);
	if (ferry_model_create(be, &cfg, B, T, NULL, &m) != FERRY_OK)
		goto fail;
	n = ferry_model_num_params(m);
	params = malloc(n * sizeof(float));
	if (!params) {
		fprintf(stderr, "ferry eval: out of memory for %zu parameters\n", n);
		goto out;
	}
	if (ferry_checkpoint_any_read(ckpt, &cfg, params, n) != FERRY_OK ||
	    ferry_model_set_params(m, params) != FERRY_OK ||
	    ferry_evaluate(m, data, B, T, batches, &loss) != FERRY_OK)
		goto fail;
	printf("checkpoint %s: %s, %d layers, %d channels, vocab %d\n", ckpt, cfg.arch, cfg.layers, cfg.channels,
	       cfg.vocab);
	printf("batches %d of %d x %d tokens from %s\n", batches, B, T, data);
	printf("loss %.6f\n", loss);
	rc = 0;
	goto out;
fail:
	rc = cli_fail(CMD);
out:
	free(params);
	ferry_model_free(m);
	ferry_backend_close(be);
	return rc;
}
