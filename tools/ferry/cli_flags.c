/*
 * The flags of every command, in one place: main() checks argv against
 * them before a command parses it (see cli_normalize in cli_args.h).  A
 * flag a command's parser takes must be listed here too, else it is refused
 * as unknown; tests/cli/flags.sh checks every flag each --help names.
 */
#include "cli_args.h"

#include <string.h>

/* model_flags.c: shape, batch, policy, device (train and plan) */
static const struct cli_flag model_list[] = {
	{ "--model", CLI_VALUE }, { "--layers", CLI_VALUE }, { "--channels", CLI_VALUE },
	{ "--heads", CLI_VALUE }, { "--vocab", CLI_VALUE }, { "--max-seq", CLI_VALUE },
	{ "--kv-heads", CLI_VALUE }, { "--ffn", CLI_VALUE }, { "--rope-theta", CLI_VALUE },
	{ "--tied-head", CLI_SWITCH }, { "--checkpoint", CLI_VALUE }, { "--resume", CLI_VALUE },
	{ "--batch", CLI_VALUE }, { "--seq", CLI_VALUE }, { "--policy", CLI_VALUE },
	{ "--prefetch-depth", CLI_VALUE }, { "--backend", CLI_VALUE }, { "--device-mem", CLI_VALUE },
	{ "--threads", CLI_VALUE }, { "--offload-optimizer", CLI_VALUE }, { "--offload-params", CLI_SWITCH },
	{ "--offload-embeddings", CLI_SWITCH }, { "--param-prefetch", CLI_VALUE }, { "--clip-order", CLI_VALUE },
	{ "--pinned-limit", CLI_VALUE }, { "--place", CLI_VALUE },
	{ "--host-tier", CLI_VALUE }, { "--topology", CLI_VALUE }, { "--nvme-dir", CLI_VALUE }, { NULL, CLI_SWITCH },
};

/* cmd_train.c */
static const struct cli_flag train_list[] = {
	{ "--data", CLI_VALUE }, { "--val-data", CLI_VALUE }, { "--val-every", CLI_VALUE },
	{ "--val-batches", CLI_VALUE }, { "--steps", CLI_VALUE }, { "--lr", CLI_VALUE },
	{ "--warmup", CLI_VALUE }, { "--final-lr-frac", CLI_VALUE }, { "--weight-decay", CLI_VALUE },
	{ "--grad-clip", CLI_VALUE }, { "--seed", CLI_VALUE }, { "--save", CLI_VALUE },
	{ "--save-every", CLI_VALUE }, { "--json", CLI_VALUE }, { "--sample", CLI_VALUE },
	{ "--sample-temperature", CLI_VALUE }, { "--shuffle", CLI_VALUE },
	{ "--tokenizer", CLI_VALUE }, { "--peak-flops", CLI_VALUE }, { "--trace", CLI_VALUE },
	{ NULL, CLI_SWITCH },
};

/* cmd_plan.c, besides the model flags */
static const struct cli_flag plan_list[] = {
	{ "--rows", CLI_VALUE }, { "--schedule", CLI_SWITCH }, { "--json", CLI_OPTIONAL_VALUE },
	{ NULL, CLI_SWITCH },
};

/* cmd_bench.c, besides the model flags */
static const struct cli_flag bench_list[] = {
	{ "--steps", CLI_VALUE }, { "--json", CLI_VALUE }, { NULL, CLI_SWITCH },
};

/* cmd_calibrate.c, besides the model flags */
static const struct cli_flag calibrate_list[] = {
	{ "--repeats", CLI_VALUE }, { "--quick", CLI_SWITCH }, { NULL, CLI_SWITCH },
};

/* cmd_eval.c */
static const struct cli_flag eval_list[] = {
	{ "--checkpoint", CLI_VALUE }, { "--data", CLI_VALUE }, { "--batch", CLI_VALUE },
	{ "--seq", CLI_VALUE }, { "--batches", CLI_VALUE }, { "--backend", CLI_VALUE },
	{ "--threads", CLI_VALUE }, { "--device-mem", CLI_VALUE }, { NULL, CLI_SWITCH },
};

/* cmd_sample.c */
static const struct cli_flag sample_list[] = {
	{ "--checkpoint", CLI_VALUE }, { "--prompt", CLI_VALUE }, { "--prompt-tokens", CLI_VALUE },
	{ "--tokens", CLI_VALUE }, { "--temperature", CLI_VALUE }, { "--top-k", CLI_VALUE },
	{ "--seed", CLI_VALUE }, { "--context", CLI_VALUE }, { "--tokenizer", CLI_VALUE },
	{ "--backend", CLI_VALUE }, { "--threads", CLI_VALUE }, { "--device-mem", CLI_VALUE },
	{ NULL, CLI_SWITCH },
};

/* cmd_example.c */
static const struct cli_flag example_list[] = { { "--dim", CLI_VALUE }, { NULL, CLI_SWITCH } };

/* cmd_data.c */
static const struct cli_flag data_list[] = {
	{ "--out", CLI_VALUE }, { "--doc-sep", CLI_VALUE }, { "--val-fraction", CLI_VALUE },
	{ "--shard-tokens", CLI_VALUE }, { "--tokenizer", CLI_VALUE }, { "--text-field", CLI_VALUE },
	{ "--threads", CLI_VALUE }, { NULL, CLI_SWITCH },
};

static const struct cli_flag *const train_lists[] = { model_list, train_list, NULL };
static const struct cli_flag *const plan_lists[] = { model_list, plan_list, NULL };
static const struct cli_flag *const bench_lists[] = { model_list, bench_list, NULL };
static const struct cli_flag *const calibrate_lists[] = { model_list, calibrate_list, NULL };
static const struct cli_flag *const eval_lists[] = { eval_list, NULL };
static const struct cli_flag *const sample_lists[] = { sample_list, NULL };
static const struct cli_flag *const data_lists[] = { data_list, NULL };
static const struct cli_flag *const example_lists[] = { example_list, NULL };
static const struct cli_flag *const no_lists[] = { NULL };

static const struct cli_spec specs[] = {
	{ "train", train_lists, false }, { "plan", plan_lists, false },
	{ "eval", eval_lists, false },   { "sample", sample_lists, false },
	{ "data", data_lists, true },    { "info", no_lists, false },
	{ "example", example_lists, false },  { "bench", bench_lists, true },
	{ "calibrate", calibrate_lists, false },
};

const struct cli_spec *cli_spec_find(const char *cmd)
{
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		if (!strcmp(specs[i].cmd, cmd))
			return &specs[i];
	return NULL;
}
