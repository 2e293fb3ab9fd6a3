/* ferry eval: mean loss of a checkpoint over the first N batches. */
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/platform.h"
#include "ferry/train.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const CMD = "eval";

static void usage(void)
{
	printf("usage: ferry eval --checkpoint PATH --data GLOB [--batch B] [--seq T] [--batches N]\n"
	       "                  [--truncate] [--backend NAME] [--threads N] [--device-mem SIZE]\n"
	       "\n"
	       "PATH is an llm.c model file (GPT-2) or a Hugging Face Llama directory\n"
	       "(config.json + model.safetensors or shards; fp32, bf16 or fp16), e.g.\n"
	       "  ferry eval --checkpoint llama_run --data 'data/mytext_val_*.bin' --seq 128\n"
	       "\n"
	       "Forward passes over the first N batches of the shards, in order, no\n"
	       "shuffling; prints the mean cross-entropy as the last line: 'loss <value>'.\n"
	       "Defaults: the batch and sequence length the checkpoint was trained at (its\n"
	       "training state says), else --batch 4 --seq 64; --batches 10.\n"
	       "\n"
	       "Version-3 data (documents, docs/data.md): every document is read once,\n"
	       "packed into rows of --seq tokens (no --batches); the loss is the mean over\n"
	       "the counted targets, and 'targets N' says how many.  A document longer\n"
	       "than --seq is refused unless --truncate cuts it to its first --seq tokens.\n");
}

/* What eval was asked for. */
struct eval_args {
	const char *ckpt, *data, *backend;
	struct ferry_backend_opts bo;
	int B, T, batches;
	bool truncate;
};

/* eval's flags (its usage names them) */
#define AT(field) offsetof(struct eval_args, field)
static const struct cli_flag eval_flags[] = {
	{ .name = "--checkpoint", .value = "PATH", .type = CLI_STRING, .at = AT(ckpt) },
	{ .name = "--data", .value = "GLOB", .type = CLI_STRING, .at = AT(data) },
	{ .name = "--batch", .value = "B", .type = CLI_INT, .at = AT(B) },
	{ .name = "--seq", .value = "T", .type = CLI_INT, .at = AT(T) },
	{ .name = "--batches", .value = "N", .type = CLI_INT, .at = AT(batches) },
	{ .name = "--truncate", .type = CLI_TRUE, .at = AT(truncate) },
	{ .name = "--backend", .value = "NAME", .type = CLI_STRING, .at = AT(backend) },
	{ .name = "--threads", .value = "N", .type = CLI_THREADS, .at = AT(bo.threads) },
	{ .name = "--device-mem", .value = "SIZE", .type = CLI_SIZE, .at = AT(bo.device_mem) },
	{ NULL },
};
#undef AT

/* --batch and --seq not given (-1): the ones the checkpoint was trained at,
 * when its training state is there, else 4 and 64.  Says which. */
static const char *default_shape(struct eval_args *a)
{
	static struct ferry_train_state st;
	char sp[4096];
	bool b = a->B < 0, t = a->T < 0;
	bool saved = (b || t) &&
		     ferry_checkpoint_state_path(a->ckpt, ferry_checkpoint_is_hf(a->ckpt), sp, sizeof(sp)) == FERRY_OK &&
		     access(sp, F_OK) == 0 && ferry_state_read_info(sp, &st) == FERRY_OK && st.B > 0 && st.T > 0;

	if (b)
		a->B = saved ? st.B : 4;
	if (t)
		a->T = saved ? st.T : 64;
	if (!saved)
		return "";
	return b && t ? " (the batch and sequence it was trained at)" : b ? " (the batch it was trained at)"
								       : " (the sequence it was trained at)";
}

int cmd_eval(int argc, char **argv)
{
	struct eval_args a = { .backend = "auto", .bo = { .threads = 0 }, .B = -1, .T = -1, .batches = 10 };
	const struct cli_group groups[] = { { eval_flags, &a, NULL, NULL }, { NULL } };
	int rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups }, argc, argv);
	struct ferry_model_config cfg;
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	float *params = NULL, loss;
	const char *shape;
	int64_t targets = 0;
	bool docs;
	size_t n;

	if (rc == CLI_HELP)
		usage();
	if (rc)
		return rc == CLI_HELP ? 0 : rc;
	if (!a.ckpt || !a.data)
		return ferry_cli_usage_error(CMD, "--checkpoint and --data are required");
	if (!a.B || a.B < -1 || !a.T || a.T < -1) /* -1: not given */
		return ferry_cli_usage_error(CMD, "--batch and --seq must be positive");
	shape = default_shape(&a);
	ferry_set_threads(a.bo.threads);
	if (!strcmp(a.backend, "auto"))
		a.backend = ferry_cli_auto_backend();

	if (ferry_checkpoint_any_read_config(a.ckpt, &cfg) != FERRY_OK)
		return ferry_cli_fail(CMD);
	if (ferry_backend_open(a.backend, &a.bo, &be) != FERRY_OK)
		return ferry_cli_fail(CMD);
	docs = ferry_data_is_packed(a.data); /* documents: a model that takes their positions */
	if (ferry_model_create(be, &cfg, a.B, a.T, &(struct ferry_exec_opts){ .packed = docs }, &m) != FERRY_OK)
		goto fail;
	n = ferry_model_num_params(m);
	params = malloc(n * sizeof(float));
	if (!params) {
		fprintf(stderr, "ferry eval: out of memory for %zu parameters\n", n);
		rc = 1;
		goto out;
	}
	if (ferry_checkpoint_any_read(a.ckpt, &cfg, params, n) != FERRY_OK ||
	    ferry_model_set_params(m, params) != FERRY_OK ||
	    (docs ? ferry_evaluate_docs(m, a.data, a.B, a.T, a.truncate, &loss, &targets)
		  : ferry_evaluate(m, a.data, a.B, a.T, a.batches, &loss)) != FERRY_OK)
		goto fail;
	printf("checkpoint %s: %s, %d layers, %d channels, vocab %d\n", a.ckpt, cfg.arch, cfg.layers, cfg.channels,
	       cfg.vocab);
	if (docs) {
		printf("documents of %s, each once, in rows of %d tokens (%d a batch)%s\n", a.data, a.T, a.B, shape);
		printf("targets %lld\n", (long long)targets);
	} else {
		printf("batches %d of %d x %d tokens%s from %s\n", a.batches, a.B, a.T, shape, a.data);
	}
	printf("loss %.6f\n", loss);
	rc = 0;
	goto out;
fail:
	rc = ferry_cli_fail(CMD);
out:
	free(params);
	ferry_model_free(m);
	ferry_backend_close(be);
	return rc;
}
