/* ferry: the command-line trainer. */
#include "cli_args.h"
#include "commands.h"
#include "ferry/ferry.h"
#include "ferry/platform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
		"ferry " FERRY_VERSION_STRING " - train GPT-2 and Llama models, offloading to host memory\n"
		"\n"
		"usage: ferry <command> [flags]\n"
		"\n"
		"commands:\n"
		"  train   train a model (default: a small GPT-2 on the demo corpus)\n"
		"  eval    mean loss of a checkpoint over the first batches of a data set\n"
		"  sample  generate text from a checkpoint, from a prompt\n"
		"  plan    the device and host memory a configuration needs, per activation\n"
		"  example the JAX host-offloading tutorial's network, with and without offloading\n"
		"  bench   policies side by side on one model: step time, memory, compute idle\n"
		"  calibrate measure this machine for the cost model (ferry bench, --policy auto)\n"
		"  data    turn text files into token shards (llm.c format)\n"
		"  tokenizer train a byte-level BPE tokenizer.json on text files\n"
		"  info    backends, devices, BLAS kernels, threads, calibrations\n"
		"\n"
		"Run 'ferry <command> --help' for a command's flags.  Flags take their value\n"
		"as the next argument or after '=': --steps 100 or --steps=100.\n");
}

/* Output lost to a full disk or a closed pipe is a failure, not exit 0
 * (a command that failed has said why already: ferry train stops on it). */
static int finish(int rc)
{
	int err;

	errno = 0;
	err = fflush(stdout) ? errno : 0;
	if ((err || ferror(stdout)) && !rc) {
		fprintf(stderr, "ferry: writing standard output: %s\n", strerror(err ? err : EIO));
		return 1;
	}
	return rc;
}

static const struct {
	const char *name;
	int (*run)(int, char **);
} commands[] = {
	{ "train", cmd_train }, { "eval", cmd_eval }, { "sample", cmd_sample }, { "data", cmd_data },
	{ "info", cmd_info }, { "plan", cmd_plan }, { "example", cmd_example }, { "bench", cmd_bench },
	{ "calibrate", cmd_calibrate }, { "tokenizer", cmd_tokenizer },
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

/* "unknown command 'trian'; did you mean train?", then the usage. */
static int unknown_command(const char *typed)
{
	struct cli_flag known[N_COMMANDS + 1];
	const struct cli_group groups[] = { { .flags = known }, { NULL } };
	char hint[160];

	memset(known, 0, sizeof(known));
	for (size_t i = 0; i < N_COMMANDS; i++)
		known[i].name = commands[i].name;
	ferry_cli_suggest(groups, typed, hint, sizeof(hint));
	fprintf(stderr, "ferry: unknown command '%s'%s\n\n", typed, hint);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	/* Before anything calls BLAS: make sure its fast kernels are in use. */
	ferry_blas_relaunch_if_slow(argv);

	if (argc < 2) {
		usage(stdout);
		return finish(0);
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return finish(0);
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("ferry %s\n", FERRY_VERSION_STRING);
		return finish(0);
	}
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return finish(commands[i].run(argc - 1, argv + 1));
	return unknown_command(argv[1]);
}
