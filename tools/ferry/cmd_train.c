/* ferry train: the training loop as a command. */
#include "cli_args.h"
#include "cli_clock.h"
#include "commands.h"
#include "model_flags.h"
#include "tier_flags.h"
#include "demo_data.h"
#include "generate.h"
#include "interrupt.h"
#include "train_report.h"
#include "train_ranks.h"
#include "train_cli.h"
#include "train_agree.h"
#include "out_paths.h"
#include "ferry/checkpoint.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/platform.h"
#include "ferry/place.h"
#include "ferry/policy.h"
#include "auto_flags.h"
#include "calib_cache.h"
#include "ferry/train.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stddef.h>
#include <signal.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const CMD = "train";


const char *const train_lr_kinds[] = { "cosine", "linear", "constant", "wsd", NULL };
static const char *const save_dtypes[] = { "auto", "f32", "bf16", NULL }; /* enum ferry_save_dtype */

/* A flag's value, one of names, into an int: its index; else an error
 * saying which (what). */
static int parse_one_of(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst,
			const char *const *names, const char *what)
{
	const char *v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	for (int k = 0; names[k]; k++)
		if (!strcmp(v, names[k])) {
			*(int *)CLI_AT(f, dst) = k;
			return 2;
		}
	ferry_cli_error(cmd, "%s %s: %s", f->name, v, what);
	return -1;
}

/* --lr-schedule NAME into an int (enum ferry_lr_kind). */
static int parse_lr_schedule(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	return parse_one_of(f, cmd, argc, argv, i, dst, train_lr_kinds, "one of cosine, linear, constant, wsd");
}

/* --save-dtype NAME into an int (enum ferry_save_dtype). */
static int parse_save_dtype(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	return parse_one_of(f, cmd, argc, argv, i, dst, save_dtypes,
			    "one of f32, bf16 (or auto: as the checkpoint the run starts from)");
}

/* train's own flags; each FERRY_GIVEN_* bit is an option a resume takes
 * from the saved run unless given (the model flags set --batch's and
 * --seq's). */
#define AT(field) offsetof(struct train_cli, field)
static const struct cli_flag train_flags[] = {
	{ .name = "--data", .value = "GLOB", .type = CLI_STRING, .at = AT(o.data),
	  .help = "training shards (llm.c format)", .section = "data:",
	  .given = FERRY_GIVEN_DATA },
	{ .name = "--val-data", .value = "GLOB", .type = CLI_STRING, .at = AT(o.val_data),
	  .help = "validation shards" },
	{ .name = "--val-every", .value = "N", .type = CLI_INT, .at = AT(val_every),
	  .help = "validate every N steps (default: a tenth of --steps, at\n"
	  "least 1; 0: at the end only), and at the end" },
	{ .name = "--val-batches", .value = "N", .type = CLI_INT, .at = AT(val_batches),
	  .help = "batches per validation (default 8)" },
	{ .name = "--shuffle", .value = "on|off", .type = CLI_ON_OFF, .at = AT(o.shuffle),
	  .help = "training batches in a shuffled order drawn from --seed,\n"
	  "as llm.c does (default on; a resume keeps the saved\n"
	  "run's), or shard after shard in order; validation\n"
	  "always reads in order from the start", .given = FERRY_GIVEN_SHUFFLE },
	{ .name = "--truncate", .type = CLI_TRUE, .at = AT(o.truncate),
	  .help = "version-3 data (documents): cut a document longer than\n"
	  "--seq to its first --seq tokens (default: refuse it,\n"
	  "naming its shard and number)" },
	{ .name = "--steps", .value = "N", .type = CLI_INT, .at = AT(o.steps),
	  .help = "total optimizer steps (default 2200)", .section = "optimisation:",
	  .given = FERRY_GIVEN_STEPS },
	{ .name = "--lr", .value = "X", .type = CLI_FLOAT, .at = AT(o.lr),
	  .help = "peak learning rate (default 3e-3)", .given = FERRY_GIVEN_LR },
	{ .name = "--warmup", .value = "N", .type = CLI_INT, .at = AT(o.warmup),
	  .help = "linear warmup steps (default 50; a warning when one\n"
	  "given exceeds --steps)", .given = FERRY_GIVEN_WARMUP },
	{ .name = "--lr-schedule", .value = "KIND", .type = CLI_CUSTOM, .at = AT(o.lr_schedule),
	  .help = "after the warmup: cosine (default) or linear from --lr\n"
	  "down to the floor at the last step; constant; wsd\n"
	  "(warmup-stable-decay: --lr, then a straight line down\n"
	  "to the floor over the last --decay-frac of the steps)",
	  .parse = parse_lr_schedule, .given = FERRY_GIVEN_LR_SCHEDULE },
	{ .name = "--final-lr-frac", .value = "F", .type = CLI_FLOAT, .at = AT(o.final_lr_frac),
	  .help = "the floor is lr*F (default 0.1)",
	  .given = FERRY_GIVEN_FINAL_LR },
	{ .name = "--min-lr", .value = "X", .type = CLI_FLOAT, .at = AT(o.min_lr),
	  .help = "... or X, an absolute learning rate below --lr\n"
	  "(exclusive with --final-lr-frac)", .given = FERRY_GIVEN_MIN_LR },
	{ .name = "--decay-frac", .value = "F", .type = CLI_FLOAT, .at = AT(o.decay_frac),
	  .help = "wsd: the share of the steps that decay (default 0.2)",
	  .given = FERRY_GIVEN_DECAY_FRAC },
	{ .name = "--grad-accum", .value = "N", .type = CLI_INT, .at = AT(o.grad_accum),
	  .help = "N micro-batches of --batch B rows per optimizer step\n"
	  "(default 1): the gradient of the mean over N*B*T\n"
	  "tokens, as one batch of N*B rows (the same rows) would\n"
	  "give, with the memory of B rows", .min = 1, .max = 1 << 20,
	  .range = "--grad-accum %d: 1 or more", .usage = true, .given = FERRY_GIVEN_GRAD_ACCUM },
	{ .name = "--beta1", .value = "X", .type = CLI_FLOAT, .at = AT(o.adamw.beta1),
	  .help = "AdamW's first-moment decay (default 0.9)", .given = FERRY_GIVEN_ADAMW },
	{ .name = "--beta2", .value = "X", .type = CLI_FLOAT, .at = AT(o.adamw.beta2),
	  .help = "... second-moment decay (default 0.95)", .given = FERRY_GIVEN_ADAMW },
	{ .name = "--eps", .value = "X", .type = CLI_FLOAT, .at = AT(o.adamw.eps),
	  .help = "... and epsilon (default 1e-8)", .given = FERRY_GIVEN_ADAMW },
	{ .name = "--weight-decay", .value = "X", .type = CLI_FLOAT, .at = AT(o.adamw.weight_decay),
	  .help = "AdamW decoupled weight decay (default 0.1), of the\n"
	  "matrices and embeddings only, not biases or norm gains\n"
	  "(each parameter's decay flag in its model's declaration)",
	  .given = FERRY_GIVEN_WEIGHT_DECAY },
	{ .name = "--grad-clip", .value = "X", .type = CLI_FLOAT, .at = AT(o.adamw.grad_clip),
	  .help = "clip the global gradient norm (default 1.0; 0 = off)",
	  .given = FERRY_GIVEN_GRAD_CLIP },
	{ .name = "--seed", .value = "S", .type = CLI_U64, .at = AT(o.seed),
	  .help = "initialisation, batch order and sampling seed\n(default 1337)",
	  .given = FERRY_GIVEN_SEED },
	{ .name = "--save", .value = "PATH", .type = CLI_STRING, .at = AT(save),
	  .help = "write the model and its training state at the end: GPT-2\n"
	  "as an llm.c FILE + FILE.state, Llama as a Hugging Face\n"
	  "directory (config.json, model.safetensors, and\n"
	  "ferry_state.bin; from a --checkpoint or --resume directory\n"
	  "also its tokenizer files and BOS/EOS ids); {step} in PATH\n"
	  "becomes the step number", .section = "output:" },
	{ .name = "--save-every", .value = "N", .type = CLI_INT, .at = AT(save_every),
	  .help = "... and every N steps" },
	{ .name = "--save-dtype", .value = "T", .type = CLI_CUSTOM, .at = AT(o.save_dtype),
	  .help = "a Hugging Face directory's weights: f32, or bf16 (rounded\n"
	  "to nearest even; a resume continues from them); default:\n"
	  "bf16 where the --checkpoint or --resume directory is,\n"
	  "else f32", .parse = parse_save_dtype },
	{ .name = "--log-every", .value = "N", .type = CLI_INT, .at = AT(log_every),
	  .help = "a step's line every N steps (default 1), and the first,\n"
	  "the last and those with a validation; --json gets all",
	  .min = 1, .max = 1 << 30, .range = "--log-every %d: 1 or more", .usage = true },
	{ .name = "--json", .value = "FILE", .type = CLI_STRING, .at = AT(json),
	  .help = "one JSON record per step, written through before the next\n"
	  "step; FILE may be a FIFO or /dev/stdout, not a file the\n"
	  "run reads; a write that fails (a full disk) stops the\n"
	  "run, saving to --save" },
	{ .name = "--sample", .value = "N", .type = CLI_INT, .at = AT(sample),
	  .help = "tokens to generate at the end (default 256; 0 = none)" },
	{ .name = "--sample-temperature", .value = "T", .type = CLI_FLOAT, .at = AT(sample_temperature),
	  .help = "... drawn at temperature T (default 0.8: a little\n"
	  "sharper than the model; 1 = as the model says; see\n"
	  "ferry sample)" },
	{ .name = "--tokenizer", .value = "PATH", .type = CLI_STRING, .at = AT(tokenizer),
	  .help = "a tokenizer.json (or a directory with one), or llm.c's\n"
	  "tokenizer file: the data's, for printing samples of BPE\n"
	  "models; every save carries it (a directory's tokenizer.json,\n"
	  "an llm.c FILE's FILE.tokenizer); default: the one the\n"
	  "--checkpoint or --resume carries" },
	{ .name = "--peak-flops", .value = "X", .type = CLI_RATE, .at = AT(peak_flops),
	  .help = "the device's peak FLOP/s (e.g. 989e12 or 989T), for the\n"
	  "model FLOP utilisation (MFU) on each line; default on\n"
	  "the CPU: a 1024^3 sgemm measured at the start; on a\n"
	  "GPU: none, no MFU shown" },
	{ .name = "--trace", .value = "FILE", .type = CLI_STRING, .at = AT(trace),
	  .help = "write this run's second step (its first if it has one)\n"
	  "as Chrome trace JSON: Perfetto (ui.perfetto.dev) shows\n"
	  "every op and copy on its stream's track (on N ranks:\n"
	  "a file per rank, FILE with .rankK before its extension)" },
	{ .name = "--comm-timeout", .value = "S", .type = CLI_FLOAT, .at = AT(comm_timeout),
	  .help = "on N ranks: a collective that waits S seconds (default\n"
	  "600; 0 = never) ends the job, naming the ranks that did\n"
	  "not arrive (a rank that hangs alive; a dead one ends it\n"
	  "at once).  Time waiting, not working: rank 0 writing a\n"
	  "save makes the others wait", .section = "many processes:" },
	{ NULL },
};
#undef AT

static void usage(void)
{
	printf("usage: ferry train [flags]\n"
	       "\n"
	       "With no flags, trains a small GPT-2 on the demo corpus (Debian's fortunes,\n"
	       "shuffled and tokenized into " FERRY_DEMO_PREFIX "_*.bin on first use) for about two\n"
	       "minutes on 2 cores and prints a sample.\n"
	       "\n");
	ferry_cli_help(stdout, train_flags, MODEL_FLAGS_HELP_COL);
	printf("\n"
	       "Ctrl-C (SIGINT) or SIGTERM: the step under way finishes, the run is saved to\n"
	       "--save if given, and ferry exits with 128 + the signal (130 for Ctrl-C); a\n"
	       "second Ctrl-C quits at once.\n"
	       "\n"
	       "Many processes (data parallel): mpirun -np N ferry train ... runs N ranks (srun\n"
	       "with PMI too), each on its own GPU (its rank on the machine modulo the GPUs)\n"
	       "or the CPU backend (the cores shared unless --threads); --batch is each rank's\n"
	       "rows: the ranks read together the batch one process reads with --batch N*B and\n"
	       "average their gradients, so the run trains as that process would.  Rank 0\n"
	       "prints, writes --json and saves (the same files; a save resumes on any number\n"
	       "of ranks); --trace F gives each rank its own file, F with .rankK inserted.\n"
	       "At the end rank 0 prints each rank's measured device peak and host bytes,\n"
	       "and writes them as a last --json record {\"rank_memory\": [...]}: the figures\n"
	       "ferry plan --ranks N plans.  --device-mem is checked against the rank's plan\n"
	       "(with --zero 1, its share).  On a GPU the gradients are averaged by NCCL when\n"
	       "each rank has a GPU of its own, else by MPI through pinned host staging (two\n"
	       "ranks on one GPU); FERRY_COMM_ENGINE=nccl|mpi|auto chooses, and the start\n"
	       "says which and why (docs/distributed.md); FERRY_COMM_STAGE_BYTES sizes the\n"
	       "staging buffer (8M by default; bytes, or with K, M or G).\n");
	ferry_cli_model_flags_help(stdout);
	printf("\n"
	       "a Llama, from random weights, then from its checkpoint directory:\n"
	       "  ferry train --model llama --layers 4 --channels 128 --heads 4 --kv-heads 2 --steps 400 \\\n"
	       "              --save llama_run\n"
	       "  ferry train --checkpoint llama_run --steps 200 --lr 3e-4 --save llama_tuned\n");
}

static int check_values(struct train_cli *c)
{
	if (c->o.checkpoint && c->o.resume)
		return ferry_cli_usage_error(CMD, "--checkpoint and --resume are exclusive");
	if (c->save_every < 0 || c->val_every < -1 || c->val_batches < 1 || c->sample < 0 || c->o.warmup < 0)
		return ferry_cli_usage_error(CMD, "counts must not be negative");
	if (c->sample > 1000000)
		return ferry_cli_usage_error(CMD, "--sample %d: at most 1000000 tokens", c->sample);
	if (!(c->comm_timeout >= 0) || !isfinite(c->comm_timeout))
		return ferry_cli_usage_error(CMD, "--comm-timeout must be 0 (never) or a number of seconds");
	if (!(c->sample_temperature >= 0))
		return ferry_cli_usage_error(CMD, "--sample-temperature must not be negative");
	if (!(c->o.lr > 0) || !isfinite(c->o.lr))
		return ferry_cli_usage_error(CMD, "--lr must be a positive number that fits a float");
	if (!(c->o.final_lr_frac >= 0 && c->o.final_lr_frac <= 1))
		return ferry_cli_usage_error(CMD, "--final-lr-frac must be between 0 and 1");
	if ((c->o.given & FERRY_GIVEN_MIN_LR) && (c->o.given & FERRY_GIVEN_FINAL_LR))
		return ferry_cli_usage_error(CMD, "--min-lr and --final-lr-frac are exclusive: each sets the floor");
	if (!(c->o.min_lr >= 0) || !isfinite(c->o.min_lr) ||
	    ((c->o.given & (FERRY_GIVEN_MIN_LR | FERRY_GIVEN_LR)) == (FERRY_GIVEN_MIN_LR | FERRY_GIVEN_LR) &&
	     c->o.min_lr > c->o.lr))
		return ferry_cli_usage_error(CMD, "--min-lr must be between 0 and --lr");
	if (!(c->o.decay_frac > 0 && c->o.decay_frac <= 1))
		return ferry_cli_usage_error(CMD, "--decay-frac must be above 0 and at most 1");
	if (!(c->o.adamw.beta1 >= 0 && c->o.adamw.beta1 < 1) || !(c->o.adamw.beta2 >= 0 && c->o.adamw.beta2 < 1) ||
	    !(c->o.adamw.eps > 0) || !isfinite(c->o.adamw.eps))
		return ferry_cli_usage_error(CMD, "--beta1 and --beta2 must be in [0, 1), --eps positive");
	if (!(c->o.adamw.weight_decay >= 0) || !isfinite(c->o.adamw.weight_decay) ||
	    !(c->o.adamw.grad_clip >= 0) || !isfinite(c->o.adamw.grad_clip))
		return ferry_cli_usage_error(CMD, "--weight-decay and --grad-clip must not be negative");
	if (c->save_every && !c->save)
		fprintf(stderr, "ferry train: note: --save-every has no effect without --save\n");
	if (c->val_every > 0 && !c->o.val_data)
		fprintf(stderr, "ferry train: note: --val-every has no effect without --val-data\n");
	return 0;
}

/* train's flag tables, where their values go (given: the model flags'
 * given bits). */
#define GROUPS 4
static void flag_groups(struct train_cli *c, unsigned *given, struct cli_group groups[GROUPS])
{
	groups[0] = ferry_cli_model_flags_group(&c->o, given);
	groups[1] = ferry_cli_tier_flags_group();
	groups[2] = (struct cli_group){ train_flags, c, &c->o.given, NULL };
	groups[3] = (struct cli_group){ NULL };
}

/* 1 after --help, 2 after a usage error, else 0. */
static int parse(int argc, char **argv, struct train_cli *c)
{
	unsigned given = 0;
	struct cli_group groups[GROUPS];
	int rc;

	flag_groups(c, &given, groups);
	c->argc = argc;
	c->argv = argv;
	rc = ferry_cli_parse(&(struct cli_command){ .cmd = CMD, .groups = groups }, argc, argv);

	c->o.given |= given & ~MODEL_GIVEN_SHAPE;
	if (ferry_cli_tier_flags_given())
		c->o.given |= FERRY_GIVEN_PLACE;
	c->shape_given = given & MODEL_GIVEN_SHAPE;
	if (rc == CLI_HELP) {
		usage();
		return 1;
	}
	return rc ? rc : check_values(c);
}


static void print_sample(ferry_trainer_t tr, const struct train_cli *c)
{
	ferry_model_t m = ferry_trainer_model(tr);
	ferry_tokenizer_t tok = NULL;
	int32_t *seq;
	int len = 1;
	uint64_t rng = run_opts(tr)->seed;

	if (ferry_tokenizer_open(c->o.tokenizer, &tok) != FERRY_OK) {
		fprintf(stderr, "ferry train: no sample: %s\n", ferry_last_error());
		return;
	}
	seq = malloc(((size_t)c->sample + 1) * sizeof(*seq));
	if (!seq) {
		ferry_tokenizer_free(tok);
		return;
	}
	/* start as a document starts: a Hugging Face tokenizer's BOS, else the
	 * end-of-text token */
	seq[0] = ferry_tokenizer_bos(tok) >= 0 ? ferry_tokenizer_bos(tok) : ferry_tokenizer_eot(tok);
	if (seq[0] < 0 || seq[0] >= ferry_model_config(m)->vocab)
		seq[0] = 0;
	printf("\n--- sample (%d tokens, temperature %.2f) ---\n", c->sample, c->sample_temperature);
	fflush(stdout);
	generate(CMD, m, tok, seq, &len, c->sample, &(struct ferry_sample_opts){ c->sample_temperature, 0 }, &rng,
		 stdout);
	printf("\n--- end of sample ---\n");
	free(seq);
	ferry_tokenizer_free(tok);
}

/* The save path with "{step}" replaced by the step number. */
static const char *save_path(const char *pattern, int step)
{
	static char buf[4096];
	const char *at = strstr(pattern, "{step}");

	if (!at)
		return pattern;
	snprintf(buf, sizeof(buf), "%.*s%d%s", (int)(at - pattern), pattern, step, at + 6);
	return buf;
}

/* The bytes of the regular files at path (a file, or a directory's
 * files), for the save's rate. */
static double bytes_at(const char *path)
{
	struct stat sb;
	struct dirent *e;
	double total = 0;
	char file[4200];
	DIR *d;

	if (stat(path, &sb) != 0)
		return 0;
	if (!S_ISDIR(sb.st_mode))
		return (double)sb.st_size;
	if (!(d = opendir(path)))
		return 0;
	while ((e = readdir(d)))
		if (snprintf(file, sizeof(file), "%s/%s", path, e->d_name) < (int)sizeof(file) && stat(file, &sb) == 0 &&
		    S_ISREG(sb.st_mode))
			total += (double)sb.st_size;
	closedir(d);
	return total;
}

/* What a Hugging Face save wrote: the weights' dtype as its config.json
 * says, and the tokenizer files the directory has. */
static void print_saved_dir(const char *path)
{
	struct ferry_hf_config hf;
	char file[4200];

	printf("saved %s/ (" FERRY_HF_CONFIG_NAME ", " FERRY_HF_WEIGHTS_NAME "%s, " FERRY_HF_STATE_NAME, path,
	       ferry_hf_config_read(path, &hf) == FERRY_OK && !strcmp(hf.torch_dtype, "bfloat16") ? " in bf16" : "");
	for (int i = 0, n = 0; ferry_hf_carried_file(i); i++)
		if (snprintf(file, sizeof(file), "%s/%s", path, ferry_hf_carried_file(i)) < (int)sizeof(file) &&
		    access(file, F_OK) == 0)
			printf("%s%s", n++ ? ", " : "; with ", ferry_hf_carried_file(i));
	printf(")");
}

static int save(ferry_trainer_t tr, const struct train_cli *c)
{
	const char *path = save_path(c->save, ferry_trainer_step_count(tr));
	const double t0 = cli_now_s();
	double s, bytes;
	char state[4200];

	if (ferry_trainer_save(tr, path) != FERRY_OK)
		return ranks_fail(CMD, &c->ranks);
	s = cli_now_s() - t0;
	if (ferry_checkpoint_model_is_hf(ferry_model_config(ferry_trainer_model(tr)))) {
		print_saved_dir(path);
		bytes = bytes_at(path);
	} else {
		printf("saved %s and %s.state%s%s%s", path, path, c->o.tokenizer ? " and " : "",
		       c->o.tokenizer ? path : "", c->o.tokenizer ? FERRY_CKPT_TOKENIZER_SUFFIX : "");
		snprintf(state, sizeof(state), "%s.state", path);
		bytes = bytes_at(path) + bytes_at(state);
	}
	/* the time a save takes, against the disk's rate (bench/checkpoint_io.sh) */
	printf(" in %.1f s, %.2f GB/s\n", s, s > 0 ? bytes / s / 1e9 : 0.0);
	fflush(stdout);
	return 0;
}


/* A plan over --device-mem is refused here, before any work, in MiB (the
 * trainer refuses it too, for a device whose size only it knows). */
static int check_device_mem(const struct train_cli *c, const struct ferry_model_config *cfg,
			    const struct ferry_plan *plan)
{
	char need[FERRY_SIZE_CHARS], have[FERRY_SIZE_CHARS], fits[1024], place[FERRY_PLACE_CHARS], tiles[256];
	size_t offloaded;
	bool tiled;

	if (!c->o.device_mem || plan->mem.peak_bytes <= c->o.device_mem)
		return 0;
	fprintf(stderr, "ferry train: policy %s needs %s of device memory, --device-mem gives %s; presets that fit: ",
		plan->policy, ferry_format_size(plan->mem.peak_bytes, need), ferry_format_size(c->o.device_mem, have));
	tiled = ferry_model_fitting_tiles(cfg, c->o.B, c->o.T, &c->o.exec, c->o.device_mem, tiles, sizeof(tiles));
	if (ferry_model_fitting_presets(cfg, c->o.B, c->o.T, &c->o.exec, c->o.device_mem, fits, sizeof(fits)))
		fprintf(stderr, "%s", fits);
	else if ((offloaded = ferry_model_fitting_placement(cfg, c->o.B, c->o.T, &c->o.exec, c->o.device_mem, place,
							      sizeof(place))))
		fprintf(stderr, "none; moving state, the largest plan that fits (%s): --place '%s'",
			ferry_format_size(offloaded, need), place);
	else
		fprintf(stderr, "%s", tiled ? "none" : "none: use a smaller batch or model");
	fprintf(stderr, "%s%s\n", tiled ? "; tiles of tokens that fit: " : "", tiled ? tiles : "");
	return 1;
}

/* Whether a file matching the glob is the file st describes. */
static bool glob_has(const char *pattern, const struct stat *st)
{
	glob_t g;
	bool found = false;

	if (!pattern || glob(pattern, 0, NULL, &g) != 0)
		return false;
	for (size_t i = 0; i < g.gl_pathc && !found; i++) {
		struct stat s;

		found = stat(g.gl_pathv[i], &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino;
	}
	globfree(&g);
	return found;
}

/* Whether st is one of the run's inputs: a shard, the checkpoint it
 * starts from (its state file, the files of its directory). */
static bool is_input(const struct ferry_train_opts *o, const struct stat *st)
{
	const char *start = o->resume ? o->resume : o->checkpoint;
	char pattern[4200];

	if (glob_has(o->data, st) || glob_has(o->val_data, st))
		return true;
	if (!start)
		return false;
	snprintf(pattern, sizeof(pattern), "%s%s", start, ferry_checkpoint_is_hf(start) ? "/*" : "*");
	return glob_has(pattern, st);
}

/* The log of --json: anything that opens for writing (a file, truncated,
 * or appended to by a resumed run; a FIFO; /dev/stdout), every write
 * checked, but never one of the run's inputs (truncating it would lose
 * them). */
static int open_json(const struct train_cli *c, const struct ferry_train_opts *o, FILE **json)
{
	struct stat st;
	int fd;

	if (!c->json || c->ranks.rank != 0) /* rank 0 writes it */
		return 0;
	/* a resumed run continues the log of the run it resumes */
	fd = open(c->json, O_WRONLY | O_CREAT | O_CLOEXEC | (o->resume ? O_APPEND : 0), 0666);
	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "ferry train: cannot write --json %s: %s\n", c->json, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	if (S_ISREG(st.st_mode) && is_input(o, &st)) {
		fprintf(stderr, "ferry train: --json %s is one of this run's inputs (data or checkpoint): "
			"refusing to overwrite it\n", c->json);
		close(fd);
		return 1;
	}
	if ((S_ISREG(st.st_mode) && !o->resume && ftruncate(fd, 0) != 0) ||
	    !(*json = fdopen(fd, o->resume ? "a" : "w"))) {
		fprintf(stderr, "ferry train: cannot write --json %s: %s\n", c->json, strerror(errno));
		close(fd);
		return 1;
	}
	return 0;
}

/* --trace is written at step 2 (replacing the file whole); before step 1:
 * not one of the run's inputs, not something other than a file, and in a
 * directory this process can write. */
static int check_trace_path(const struct train_cli *c, const struct ferry_train_opts *o)
{
	char dir[4096];
	struct stat st;
	const char *slash;

	if (!c->trace)
		return 0;
	if (stat(c->trace, &st) == 0 && (!S_ISREG(st.st_mode) || is_input(o, &st))) {
		fprintf(stderr, "ferry train: --trace %s is %s: refusing to replace it\n", c->trace,
			S_ISREG(st.st_mode) ? "one of this run's inputs" : "not a regular file");
		return 1;
	}
	slash = strrchr(c->trace, '/');
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - c->trace) + (slash == c->trace) : 1,
		 slash ? c->trace : ".");
	if (access(dir, W_OK) != 0) {
		fprintf(stderr, "ferry train: cannot write --trace %s: %s: %s\n", c->trace, dir, strerror(errno));
		return 1;
	}
	return 0;
}

/* The run's outputs before any of them is opened: the save path (its kind,
 * its directory, not an input), --trace, and no two of --json, --trace
 * and the save's files one file. */
static int check_outputs(const struct train_cli *c, ferry_trainer_t tr)
{
	const struct ferry_train_opts *o = run_opts(tr);
	const char *save = c->save ? save_path(c->save, o->steps) : NULL;

	if (save && ferry_trainer_check_save_path(tr, save) != FERRY_OK)
		return ferry_cli_fail(CMD);
	if (out_paths_check(CMD, c->json, c->trace, save,
			    ferry_checkpoint_model_is_hf(ferry_model_config(ferry_trainer_model(tr)))))
		return 1;
	return check_trace_path(c, o);
}

/* A resume takes the batch, sequence and data of the saved run unless
 * given: the batch shape for the checks before any work (0 when the state
 * does not say: the trainer checks then), and the demo corpus's validation
 * split when the run was on the demo corpus. */
static void from_saved_run(struct train_cli *c, int *B, int *T)
{
	static struct ferry_train_state st;
	char sp[4096];

	*B = c->o.B;
	*T = c->o.T;
	if (!c->o.resume)
		return;
	if (ferry_checkpoint_state_path(c->o.resume, ferry_checkpoint_is_hf(c->o.resume), sp, sizeof(sp)) != FERRY_OK ||
	    ferry_state_read_info(sp, &st) != FERRY_OK) {
		*B = *T = 0; /* the trainer says what is wrong */
		return;
	}
	if (!(c->o.given & FERRY_GIVEN_BATCH)) /* the saved run's global batch, split over the ranks */
		*B = st.B % c->ranks.size ? 0 : st.B / c->ranks.size;
	if (!(c->o.given & FERRY_GIVEN_SEQ))
		*T = st.T;
	if (!c->o.data && !c->o.val_data && !strcmp(st.data, FERRY_DEMO_PREFIX "_train_*.bin") &&
	    ferry_demo_data_has_val())
		c->o.val_data = FERRY_DEMO_PREFIX "_val_*.bin";
}

/* A resume given no placement flag continues the saved run's placement
 * (its --place string; a state from before version 6 records none): set
 * now, so the host tiers and the memory check see it. */
static int saved_placement(struct train_cli *c)
{
	static struct ferry_train_state st;
	static char place[FERRY_PLACE_CHARS];
	static struct ferry_places places; /* c->o.exec.policy points here */
	char sp[4096];

	if (!c->o.resume || (c->o.given & FERRY_GIVEN_PLACE) ||
	    ferry_checkpoint_state_path(c->o.resume, ferry_checkpoint_is_hf(c->o.resume), sp, sizeof(sp)) != FERRY_OK ||
	    ferry_state_read_info(sp, &st) != FERRY_OK)
		return 0; /* the trainer says what is wrong */
	if (ferry_train_state_place(&st, c->ranks.size, place, sizeof(place)) != FERRY_OK ||
	    (place[0] && ferry_train_take_place(&c->o.exec, place, &places) != FERRY_OK))
		return ferry_cli_fail(CMD);
	return 0;
}

/* A bad shape, policy, size or save path is refused before any work, even
 * the demo data; then the data is prepared. */
static int prepare(struct train_cli *c)
{
	static char carried[4200];
	struct ferry_model_config cfg;
	struct ferry_plan plan;
	int B, T;

	if ((c->o.checkpoint || c->o.resume) && c->shape_given)
		fprintf(stderr, "ferry train: note: the model shape comes from the checkpoint; "
				"shape flags are ignored\n");
	ferry_set_threads(c->o.threads);
	if (saved_placement(c) || ferry_cli_model_flags_backend(CMD, &c->o, stdout) ||
	    ferry_cli_model_flags_config(CMD, &c->o, &cfg) ||
	    ferry_cli_model_flags_places(CMD, &c->o) || ferry_cli_tier_flags_setup(CMD, &c->o))
		return 1;
	/* documents: the plans below count the positions tensor (the trainer sets it again) */
	c->o.exec.packed = ferry_data_is_packed(c->o.data) || ferry_data_is_packed(c->o.val_data);
	if (is_auto_policy(c->o.exec.policy)) {
		static struct ferry_auto_result autor; /* holds the chosen spec */

		if (auto_policy_resolve(CMD, NULL, &c->o, &cfg, &autor, stdout))
			return 1;
	}
	if (prefetch_auto_resolve(CMD, NULL, &c->o, &cfg, stdout))
		return 1;
	from_saved_run(c, &B, &T);
	if (B > 0 && T > 0) {
		struct train_cli shape = *c;

		shape.o.B = B;
		shape.o.T = T;
		/* this rank's plan: --zero splits over the run's ranks */
		if (shape.o.exec.zero && !shape.o.exec.zero_ranks && c->ranks.size > 1)
			shape.o.exec.zero_ranks = c->ranks.size;
		if (ferry_model_rank_plan(&cfg, B, T, &shape.o.exec, c->ranks.size, c->ranks.rank, &plan) != FERRY_OK)
			return ferry_cli_fail(CMD);
		if (check_device_mem(&shape, &cfg, &plan))
			return 1;
	}
	/* a save path of the wrong kind is refused now, not after training */
	if (c->save && ferry_checkpoint_check_save_path(save_path(c->save, c->o.steps), &cfg) != FERRY_OK)
		return ferry_cli_fail(CMD);
	/* and so is a tokenizer that cannot print the sample; one the
	 * checkpoint carries travels on (a sample it cannot print is said) */
	if (!c->tokenizer && (c->o.checkpoint || c->o.resume) &&
	    checkpoint_tokenizer(c->o.resume ? c->o.resume : c->o.checkpoint, carried, sizeof(carried)))
		c->o.tokenizer = carried;
	else if (c->tokenizer) {
		ferry_tokenizer_t tok;

		if (ferry_tokenizer_open(c->tokenizer, &tok) != FERRY_OK)
			return ferry_cli_fail(CMD);
		ferry_tokenizer_free(tok);
		c->o.tokenizer = c->tokenizer;
	}
	if (!c->o.data && !c->o.resume) {
		/* rank 0 writes it while the others wait */
		if (ranks_agree_rc(CMD, &c->ranks, c->ranks.rank == 0 ? ferry_demo_data_ensure(stdout) : 0))
			return 1;
		c->o.data = FERRY_DEMO_PREFIX "_train_*.bin";
		if (!c->o.val_data && ferry_demo_data_has_val())
			c->o.val_data = FERRY_DEMO_PREFIX "_val_*.bin";
	}
	return 0;
}

/* Why a run ended before its last step. */
enum { STOPPED_BY_SIGNAL = -2, STOPPED_BY_OUTPUT = -3 };

struct run {
	ferry_trainer_t tr;
	struct train_cli *c;
	struct train_report rep;
	int saved_step; /* the step of the last save, -1 none */
	int first_step; /* the step count this run started from (a resume's) */
};

/* A step, traced when it is the one --trace asks for (the run's second,
 * or its only one): 0, or 1 after a message. */
static int trace_step(struct run *run, struct ferry_step_metrics *m)
{
	const struct train_cli *c = run->c;
	ferry_model_t model = ferry_trainer_model(run->tr);
	const int done = ferry_trainer_step_count(run->tr) - run->first_step;
	const bool traced = c->trace && (done == 1 || (done == 0 && run_opts(run->tr)->steps - run->first_step == 1));

	if (traced && ferry_model_trace_begin(model) != FERRY_OK)
		return ranks_fail(CMD, &c->ranks);
	if (ferry_trainer_step(run->tr, m) != FERRY_OK)
		return ranks_fail(CMD, &c->ranks);
	if (traced) {
		if (ferry_model_trace_end(model, c->trace) != FERRY_OK)
			return ranks_fail(CMD, &c->ranks);
		printf("trace of step %d written to %s%s (open it at ui.perfetto.dev)\n", m->step, c->trace,
		       c->ranks.size > 1 ? ", each rank's to its own .rankK file" : "");
	}
	return 0;
}

/* One step, its validation, line, JSON record and periodic save: 0, 1 for
 * a failure (printed), or STOPPED_BY_OUTPUT (the line or the record could
 * not be written). */
static int one_step(struct run *run)
{
	const struct train_cli *c = run->c;
	const struct ferry_train_opts *o = run_opts(run->tr);
	struct ferry_step_metrics m;
	float val_loss = NAN;

	if (trace_step(run, &m))
		return 1;
	if (o->val_data && ((c->val_every && m.step % c->val_every == 0) || m.step == o->steps) &&
	    ferry_trainer_validate(run->tr, c->val_batches, &val_loss) != FERRY_OK)
		return ranks_fail(CMD, &c->ranks);
	if (report_step(&run->rep, &m, val_loss))
		return STOPPED_BY_OUTPUT;
	if (c->save && c->save_every && m.step % c->save_every == 0 && m.step != o->steps) {
		if (save(run->tr, c))
			return 1;
		run->saved_step = m.step;
	}
	return 0;
}

/* Steps until the last, a failure, a signal or a JSON write error. */
static int run_steps(struct run *run)
{
	int rc;

	/* a signal from here on waits for the step under way */
	interrupt_defer();
	while (ferry_trainer_step_count(run->tr) < run_opts(run->tr)->steps) {
		if ((rc = one_step(run)) > 0)
			return rc;
		if (!rc && interrupt_poll())
			rc = STOPPED_BY_SIGNAL;
		/* every rank stops after the same step (rank 0's --json, a signal) */
		if ((rc = ranks_agree_stop(&run->c->ranks, rc)))
			return rc;
	}
	return 0;
}

/* Where the run stands, for the message of a run stopped early. */
static void print_saved(const struct train_cli *c, int step, bool saved)
{
	const char *path = save_path(c->save ? c->save : "", step);

	if (c->save)
		fprintf(stderr, "%s %s; continue with --resume %s\n", saved ? "saved" : "already saved to", path, path);
	else
		fprintf(stderr, "not saved (no --save)\n");
}

/* On several ranks: every rank's measured device peak and host bytes,
 * reported by rank 0 (ferry plan --ranks N plans them).  0, or 1 after a
 * message. */
static int report_rank_peaks(struct run *run)
{
	const struct ranks *r = &run->c->ranks;
	struct ferry_host_memory h;
	size_t mine[2], *all = calloc(2 * (size_t)r->size, sizeof(size_t));
	int rc;

	if ((rc = ranks_agree_rc(CMD, r, all ? 0 : 1))) { /* the others must not wait for this one */
		free(all);
		return rc;
	}
	ferry_model_host_memory(ferry_trainer_model(run->tr), &h);
	mine[0] = ferry_backend_mem_peak(ferry_trainer_backend(run->tr));
	mine[1] = h.allocated_bytes;
	rc = ranks_gather(CMD, r, mine, 2, all);
	if (!rc && r->rank == 0)
		(void)report_rank_memory(&run->rep, r->size, all); /* a failed write: json_errno, seen at the close */
	free(all);
	return rc;
}

/* After the steps: the save (unless this step was saved already), why the
 * run stopped, the summary.  Returns the exit code. */
static int finish_run(struct run *run, int why)
{
	const struct train_cli *c = run->c;
	int step = ferry_trainer_step_count(run->tr), steps = run_opts(run->tr)->steps;
	bool saved = false;

	interrupt_poll(); /* a signal during the last step: noticed, take the time to save */
	if (c->save && run->saved_step != step) {
		if (save(run->tr, c))
			return 1;
		saved = true;
	}
	if (why == STOPPED_BY_OUTPUT) {
		if (run->rep.stdout_errno)
			fprintf(stderr, "ferry train: cannot write standard output: %s; stopped after step %d of %d, ",
				strerror(run->rep.stdout_errno), step, steps);
		else
			fprintf(stderr, "ferry train: cannot write --json %s: %s; stopped after step %d of %d, ",
				c->json, strerror(run->rep.json_errno), step, steps);
		print_saved(c, step, saved);
	} else if (why == STOPPED_BY_SIGNAL) {
		fprintf(stderr, "ferry train: stopped by %s after step %d of %d, ", interrupt_name(interrupt_signal()),
			step, steps);
		print_saved(c, step, saved);
	}
	report_summary(&run->rep, ferry_backend_mem_peak(ferry_trainer_backend(run->tr)), step);
	if (c->ranks.size > 1 && report_rank_peaks(run))
		return 1;
	fflush(stdout);
	return why == STOPPED_BY_OUTPUT ? 1 : why == STOPPED_BY_SIGNAL ? 128 + interrupt_signal() : 0;
}

/* The trainer is made; the steps, the save, the summary and the sample. */
static int train(struct run *run)
{
	const struct ferry_train_opts *o = run_opts(run->tr);
	struct train_cli *c = run->c;
	int rc;

	if (c->val_every < 0) /* the default: ten validations in a run */
		c->val_every = o->steps / 10 > 1 ? o->steps / 10 : 1;
	run->rep.B = o->B * o->grad_accum * c->ranks.size; /* every rank's rows */
	run->rep.T = o->T;
	run->rep.log_every = c->log_every;
	run->rep.packed = ferry_data_is_packed(o->data);
	train_banner_print(run->tr, c);
	train_banner_set_peak(run->tr, c, &run->rep);
	run->rep.peak_flops *= c->ranks.size; /* a device per rank */
	fflush(stdout);
	report_begin(&run->rep, ferry_trainer_step_count(run->tr), o->steps);
	rc = run_steps(run);
	if (rc > 0)
		return rc;
	rc = finish_run(run, rc);
	if (!rc && c->sample && !interrupt_poll() && c->ranks.rank == 0 &&
	    ferry_model_collective_forward(ferry_trainer_model(run->tr)))
		printf("\n(no sample: the parameters are split over the ranks, --zero 3; `ferry sample` reads a save)\n");
	else if (!rc && c->sample && !interrupt_poll() && c->ranks.rank == 0)
		print_sample(run->tr, c);
	if (report_close_json(&run->rep) && rc != 1) {
		fprintf(stderr, "ferry train: cannot write --json %s: %s\n", c->json, strerror(run->rep.json_errno));
		return 1;
	}
	return rc ? rc : interrupt_signal() ? 128 + interrupt_signal() : 0;
}

/* Before step 1, the same outcome on every rank: the data, the trainer,
 * the outputs checked and --json opened (rank 0's). */
static int set_up(struct train_cli *c, struct run *run)
{
	static char trace[4200];
	struct cli_group groups[GROUPS];
	unsigned given = 0;
	int rc;

	/* every rank the same run, before anything that takes them all */
	flag_groups(c, &given, groups);
	if ((rc = ranks_agree_run(&c->ranks, groups, c->argc, c->argv, c->o.resume, c->o.given)))
		return rc;
	if (ferry_comm_in_use(c->ranks.comm))
		c->o.comm = c->ranks.comm; /* one rank too where an engine is named */
	if (c->ranks.size > 1) {
		c->o.threads = ranks_threads(&c->ranks, c->o.threads);
		if (c->trace)
			c->trace = ranks_path(&c->ranks, c->trace, trace, sizeof(trace));
	}
	if ((rc = ranks_agree_rc(CMD, &c->ranks, prepare(c))))
		return rc;
	run->rep.json_path = c->json;
	/* billions of parameters take a while: say what the wait is */
	printf("setting up the model, its state and the data... ");
	fflush(stdout);
	const double t0 = cli_now_s();
	const ferry_status st = ferry_trainer_create(&c->o, &run->tr);

	if (st)
		printf("\n"); /* the error follows on its own line */
	else
		printf("%.1f s\n", cli_now_s() - t0);
	fflush(stdout);
	if (st != FERRY_OK)
		return ferry_cli_fail(CMD); /* the ranks agreed on it: each fails here */
	train_banner_warn_pageable(run->tr);
	run->first_step = ferry_trainer_step_count(run->tr);
	if (!(rc = check_outputs(c, run->tr)))
		rc = open_json(c, run_opts(run->tr), &run->rep.json);
	return ranks_agree_rc(CMD, &c->ranks, rc);
}

int cmd_train(int argc, char **argv)
{
	struct train_cli c = { .val_every = -1, .val_batches = 8, .sample = 256, .sample_temperature = 0.8f,
			       .comm_timeout = 600, .log_every = 1 };
	struct run run = { .c = &c, .saved_step = -1 };
	int rc;

	ferry_cli_model_flags_default(&c.o);
	/* a --json pipe or FIFO, or stdout, whose reader went away is a failed
	 * write (EPIPE): the run stops after saving, as on a full disk */
	signal(SIGPIPE, SIG_IGN);
	/* the demo: words form within about two minutes on 2 cores (docs/performance.md) */
	c.o.steps = 2200;
	c.o.lr = 3e-3f;
	c.o.warmup = 50;
	if (ranks_open(CMD, &c.ranks)) /* mpirun: this process's rank (MPI) */
		return 1;
	/* a usage error on one rank alone: every rank stops, rank 0 prints it
	 * (rather than the others waiting for it in their first collective) */
	if ((rc = ranks_agree_rc(CMD, &c.ranks, parse(argc, argv, &c)))) {
		ranks_close(&c.ranks);
		return rc == 1 ? 0 : rc; /* 1: --help */
	}
	if (!(rc = ranks_watch(&c.ranks, c.comm_timeout)) && !(rc = set_up(&c, &run))) {
		/* Ctrl-C from here on finishes the step and saves */
		interrupt_install();
		rc = train(&run);
		interrupt_restore();
	}
	report_end(&run.rep);
	if (!rc)
		ferry_cli_tier_flags_print_peaks(stdout, &c.o);
	ferry_trainer_free(run.tr);
	ferry_cli_tier_flags_release(&c.o);
	ranks_close(&c.ranks);
	return rc;
}
