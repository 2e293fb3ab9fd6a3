/* ferry train: the training loop as a command. */
#include "cli_args.h"
#include "commands.h"
#include "model_flags.h"
#include "demo_data.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/platform.h"
#include "ferry/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const CMD = "train";

static void usage(void)
{
	printf("usage: ferry train [flags]\n"
	       "\n"
	       "With no flags, trains a small GPT-2 on the demo corpus (Debian's fortunes,\n"
	       "tokenized into " FERRY_DEMO_PREFIX "_*.bin on first use) and prints a sample.\n"
	       "\n"
	       "data:\n"
	       "  --data GLOB           training shards (llm.c format)\n"
	       "  --val-data GLOB       validation shards\n"
	       "  --val-every N         validate every N steps (default 0: at the end only)\n"
	       "  --val-batches N       batches per validation (default 8)\n"
	       "optimisation:\n"
	       "  --steps N             total optimizer steps (default 400)\n"
	       "  --lr X                peak learning rate (default 2e-3)\n"
	       "  --warmup N            linear warmup steps (default 20)\n"
	       "  --final-lr-frac F     cosine decay to lr*F (default 0.1)\n"
	       "  --weight-decay X      AdamW decoupled weight decay (default 0.1)\n"
	       "  --grad-clip X         clip the global gradient norm (default 1.0; 0 = off)\n"
	       "  --seed S              initialisation and sampling seed (default 1337)\n"
	       "output:\n"
	       "  --save PATH           write the model and its training state at the end: GPT-2\n"
	       "                        as an llm.c FILE + FILE.state, Llama as a Hugging Face\n"
	       "                        directory (config.json, model.safetensors, fp32, and\n"
	       "                        ferry_state.bin); {step} in PATH becomes the step number\n"
	       "  --save-every N        ... and every N steps\n"
	       "  --json FILE           one JSON record per step\n"
	       "  --sample N            tokens to generate at the end (default 256; 0 = none)\n"
	       "  --tokenizer FILE      llm.c tokenizer file for printing samples of BPE models\n"
	       "%s"
	       "\n"
	       "a Llama, from random weights, then from its checkpoint directory:\n"
	       "  ferry train --model llama --layers 4 --channels 128 --heads 4 --kv-heads 2 --steps 400 \\\n"
	       "              --save llama_run\n"
	       "  ferry train --checkpoint llama_run --steps 200 --lr 3e-4 --save llama_tuned\n",
	       model_flags_help);
}

struct train_cli {
	struct ferry_train_opts o;
	const char *save, *json, *tokenizer;
	int save_every, val_every, val_batches, sample;
	bool shape_given;
};

static int parse(int argc, char **argv, struct train_cli *c)
{
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i];
		int r = model_flag(CMD, argc, argv, i, &c->o, &c->shape_given);

		if (r < 0)
			return 2;
		if (r > 0) {
			i += r - 1;
			continue;
		}
#define IS(name) (strcmp(f, name) == 0)
		if (IS("--help") || IS("-h")) {
			usage();
			return 1;
		} else if (IS("--data")) r = arg_value(CMD, argc, argv, i, &c->o.data);
		else if (IS("--val-data")) r = arg_value(CMD, argc, argv, i, &c->o.val_data);
		else if (IS("--val-every")) r = arg_int(CMD, argc, argv, i, &c->val_every);
		else if (IS("--val-batches")) r = arg_int(CMD, argc, argv, i, &c->val_batches);
		else if (IS("--steps")) r = arg_int(CMD, argc, argv, i, &c->o.steps);
		else if (IS("--lr")) r = arg_float(CMD, argc, argv, i, &c->o.lr);
		else if (IS("--warmup")) r = arg_int(CMD, argc, argv, i, &c->o.warmup);
		else if (IS("--final-lr-frac")) r = arg_float(CMD, argc, argv, i, &c->o.final_lr_frac);
		else if (IS("--weight-decay")) r = arg_float(CMD, argc, argv, i, &c->o.adamw.weight_decay);
		else if (IS("--grad-clip")) r = arg_float(CMD, argc, argv, i, &c->o.adamw.grad_clip);
		else if (IS("--seed")) r = arg_u64(CMD, argc, argv, i, &c->o.seed);
		else if (IS("--save")) r = arg_value(CMD, argc, argv, i, &c->save);
		else if (IS("--save-every")) r = arg_int(CMD, argc, argv, i, &c->save_every);
		else if (IS("--json")) r = arg_value(CMD, argc, argv, i, &c->json);
		else if (IS("--sample")) r = arg_int(CMD, argc, argv, i, &c->sample);
		else if (IS("--tokenizer")) r = arg_value(CMD, argc, argv, i, &c->tokenizer);
		else
			return cli_usage_error(CMD, "unknown flag '%s'", f);
#undef IS
		if (r)
			return 2;
		i++;
	}
	if (c->o.checkpoint && c->o.resume)
		return cli_usage_error(CMD, "--checkpoint and --resume are exclusive");
	if (c->save_every < 0 || c->val_every < 0 || c->val_batches < 1 || c->sample < 0 ||
	    c->o.warmup < 0)
		return cli_usage_error(CMD, "counts must not be negative");
	if (c->sample > 1000000)
		return cli_usage_error(CMD, "--sample %d: at most 1000000 tokens", c->sample);
	if (!(c->o.lr > 0) || !isfinite(c->o.lr))
		return cli_usage_error(CMD, "--lr must be a positive number that fits a float");
	if (!(c->o.final_lr_frac >= 0 && c->o.final_lr_frac <= 1))
		return cli_usage_error(CMD, "--final-lr-frac must be between 0 and 1");
	if (!(c->o.adamw.weight_decay >= 0) || !isfinite(c->o.adamw.weight_decay) ||
	    !(c->o.adamw.grad_clip >= 0) || !isfinite(c->o.adamw.grad_clip))
		return cli_usage_error(CMD, "--weight-decay and --grad-clip must not be negative");
	if (c->save_every && !c->save)
		fprintf(stderr, "ferry train: note: --save-every has no effect without --save\n");
	if (c->val_every && !c->o.val_data)
		fprintf(stderr, "ferry train: note: --val-every has no effect without --val-data\n");
	return 0;
}

static void print_sample(ferry_trainer_t tr, const struct train_cli *c)
{
	ferry_model_t m = ferry_trainer_model(tr);
	ferry_tokenizer_t tok = NULL;
	int32_t *seq;
	int len = 1, cap = c->sample + 1;
	uint64_t rng = c->o.seed;

	if (ferry_tokenizer_open(c->tokenizer, &tok) != FERRY_OK) {
		fprintf(stderr, "ferry train: no sample: %s\n", ferry_last_error());
		return;
	}
	seq = malloc((size_t)cap * sizeof(*seq));
	if (!seq) {
		ferry_tokenizer_free(tok);
		return;
	}
	/* start from the end-of-text token, as at a document's start */
	seq[0] = ferry_tokenizer_eot(tok) < ferry_model_config(m)->vocab ? ferry_tokenizer_eot(tok) : 0;
	if (ferry_model_sample(m, seq, &len, cap, c->sample, &rng) != FERRY_OK) {
		fprintf(stderr, "ferry train: sampling failed: %s\n", ferry_last_error());
	} else {
		printf("\n--- sample (%d tokens) ---\n", c->sample);
		for (int i = 1; i < len; i++) {
			int n;
			const char *s = ferry_tokenizer_decode(tok, seq[i], &n);

			if (s)
				fwrite(s, 1, (size_t)n, stdout);
			else if (seq[i] == ferry_tokenizer_eot(tok))
				printf("\n<|endoftext|>\n");
			else
				printf("<%d>", seq[i]);
		}
		printf("\n--- end of sample ---\n");
	}
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

static int save(ferry_trainer_t tr, const char *pattern)
{
	const char *path = save_path(pattern, ferry_trainer_step_count(tr));

	if (ferry_trainer_save(tr, path) != FERRY_OK)
		return cli_fail(CMD);
	if (!strcmp(ferry_model_config(ferry_trainer_model(tr))->arch, "llama"))
		printf("saved %s/ (" FERRY_HF_CONFIG_NAME ", " FERRY_HF_WEIGHTS_NAME ", " FERRY_HF_STATE_NAME ")\n",
		       path);
	else
		printf("saved %s and %s.state\n", path, path);
	return 0;
}

/* Device bytes of the layer stack's activation storage. */
static size_t stack_bytes(const struct ferry_plan *p)
{
	size_t n = 0;

	for (int i = 0; i < p->n_tensors; i++)
		n += p->tensors[i].device_bytes;
	return n;
}

static void json_record(FILE *f, const struct ferry_step_metrics *m, float val_loss)
{
	fprintf(f, "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, "
		   "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"device_peak_bytes\": %zu",
		m->step, m->loss, m->lr, m->grad_norm, m->step_ms, m->tokens_per_s,
		m->device_peak_bytes);
	if (!isnan(val_loss))
		fprintf(f, ", \"val_loss\": %.6f", val_loss);
	fprintf(f, "}\n");
	fflush(f);
}

/* A bad shape, policy or save path is refused before any work, even the
 * demo data; then the data and the JSON log are opened. */
static int prepare(struct train_cli *c, FILE **json)
{
	struct ferry_model_config cfg;
	struct ferry_plan plan;

	if ((c->o.checkpoint || c->o.resume) && c->shape_given)
		fprintf(stderr, "ferry train: note: the model shape comes from the checkpoint; "
				"shape flags are ignored\n");
	ferry_set_threads(c->o.threads);
	if (model_flags_backend(CMD, &c->o, stdout) || model_flags_config(CMD, &c->o, &cfg))
		return 1;
	if (ferry_model_plan(&cfg, c->o.B, c->o.T, &c->o.exec, &plan) != FERRY_OK)
		return cli_fail(CMD);
	/* a save path of the wrong kind is refused now, not after training */
	if (c->save && ferry_checkpoint_check_save_path(save_path(c->save, c->o.steps), &cfg) != FERRY_OK)
		return cli_fail(CMD);
	if (!c->o.data) {
		if (ferry_demo_data_ensure(stdout) != 0)
			return 1;
		c->o.data = FERRY_DEMO_PREFIX "_train_*.bin";
		if (!c->o.val_data && ferry_demo_data_has_val())
			c->o.val_data = FERRY_DEMO_PREFIX "_val_*.bin";
	}
	if (c->json && !(*json = fopen(c->json, "w"))) {
		fprintf(stderr, "ferry train: cannot write %s\n", c->json);
		return 1;
	}
	return 0;
}

static void print_resume_note(ferry_trainer_t tr, const struct train_cli *c)
{
	int steps, warmup, at = ferry_trainer_step_count(tr);
	float lr, frac;

	printf("resumed at step %d\n", at);
	if (ferry_trainer_resumed_schedule(tr, &steps, &warmup, &lr, &frac) &&
	    (steps != c->o.steps || warmup != c->o.warmup || lr != c->o.lr || frac != c->o.final_lr_frac))
		fprintf(stderr, "ferry train: note: the saved run followed a schedule of %d steps "
				"(warmup %d, lr %.2e, final %.2f); from step %d this run follows %d steps "
				"(warmup %d, lr %.2e, final %.2f), so the learning rate changes to %.2e\n",
			steps, warmup, lr, frac, at, c->o.steps, c->o.warmup, c->o.lr, c->o.final_lr_frac,
			ferry_lr_schedule(at, c->o.steps, c->o.warmup, c->o.lr, c->o.final_lr_frac));
}

static void print_banner(ferry_trainer_t tr, const struct train_cli *c)
{
	ferry_model_t m = ferry_trainer_model(tr);
	const struct ferry_model_config *cfg = ferry_model_config(m);
	const struct ferry_plan *p = ferry_trainer_plan(tr);

	printf("model: %s, %d layers, %d channels, %d heads", cfg->arch, cfg->layers, cfg->channels, cfg->heads);
	if (cfg->kv_heads != cfg->heads)
		printf(" (%d key/value)", cfg->kv_heads);
	printf(", MLP %d, vocab %d (padded %d), max seq %d%s: %.2fM parameters\n", cfg->ffn, cfg->vocab,
	       cfg->padded_vocab, cfg->max_seq, cfg->tie_embeddings > 0 ? ", tied head" : "",
	       ferry_model_num_params(m) / 1e6);
	printf("batch %d x %d tokens, %d steps, lr %.2e (warmup %d, cosine to %.2f), backend %s (%s)\n",
	       c->o.B, c->o.T, c->o.steps, c->o.lr, c->o.warmup, c->o.final_lr_frac,
	       ferry_backend_name(ferry_trainer_backend(tr)), ferry_backend_description(ferry_trainer_backend(tr)));
	printf("policy %s: device %.1f MiB (activations kept %.1f MiB), host %.1f MiB offloaded, "
	       "%d of %d layer ops recomputed\n", p->policy, p->mem.peak_bytes / 1048576.0,
	       stack_bytes(p) / 1048576.0, p->mem.host_total_bytes / 1048576.0, p->n_recompute_ops, p->n_ops);
	if (c->o.resume)
		print_resume_note(tr, c);
}

/* What the summary reports. */
struct run_stats {
	int first_step, n;
	double total_ms;
	double *step_ms;      /* [steps]: for the median */
	float loss[10];       /* the last ten training losses */
	float val_loss;
};

static void record(struct run_stats *r, const struct ferry_step_metrics *m, float val_loss)
{
	r->total_ms += m->step_ms;
	if (r->step_ms)
		r->step_ms[r->n] = m->step_ms;
	r->loss[r->n % 10] = m->loss;
	r->n++;
	if (!isnan(val_loss))
		r->val_loss = val_loss;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median step time (the first step, which warms caches, left out when
 * there are others) and the mean of the last ten losses: one step's time
 * or loss is noise on a shared machine. */
static void print_summary(ferry_trainer_t tr, const struct train_cli *c, struct run_stats *r)
{
	int k = r->n > 1 ? 1 : 0, last = r->n < 10 ? r->n : 10;
	double med = 0, loss = 0;

	if (!r->n) {
		printf("\nsummary: no steps taken (the run is at step %d of %d)\n", ferry_trainer_step_count(tr),
		       c->o.steps);
		return;
	}
	if (r->step_ms) {
		qsort(r->step_ms + k, (size_t)(r->n - k), sizeof(double), cmp_double);
		med = r->step_ms[k + (r->n - k) / 2];
	}
	for (int i = 0; i < last; i++)
		loss += r->loss[i];
	printf("\nsummary: %d steps in %.1f s, %.1f ms/step (median), %.0f tokens/s, train loss %.4f "
	       "(mean of the last %d)", r->n, r->total_ms / 1e3, med, med > 0 ? c->o.B * c->o.T / (med / 1e3) : 0.0,
	       loss / last, last);
	if (!isnan(r->val_loss))
		printf(", validation loss %.4f", r->val_loss);
	printf(", device peak %.1f MiB\n", ferry_backend_mem_peak(ferry_trainer_backend(tr)) / 1048576.0);
}

/* One step, its validation, line, JSON record and periodic save. */
static int one_step(ferry_trainer_t tr, const struct train_cli *c, FILE *json, struct run_stats *r)
{
	struct ferry_step_metrics m;
	float val_loss = NAN;

	if (ferry_trainer_step(tr, &m) != FERRY_OK)
		return cli_fail(CMD);
	if (c->o.val_data && ((c->val_every && m.step % c->val_every == 0) || m.step == c->o.steps) &&
	    ferry_trainer_validate(tr, c->val_batches, &val_loss) != FERRY_OK)
		return cli_fail(CMD);
	record(r, &m, val_loss);
	printf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %8.1f ms | %8.0f tok/s", m.step, c->o.steps, m.loss,
	       m.lr, m.grad_norm, m.step_ms, m.tokens_per_s);
	if (!isnan(val_loss))
		printf(" | val loss %.4f", val_loss);
	printf("\n");
	fflush(stdout);
	if (json)
		json_record(json, &m, val_loss);
	if (c->save && c->save_every && m.step % c->save_every == 0 && m.step != c->o.steps)
		return save(tr, c->save);
	return 0;
}

int cmd_train(int argc, char **argv)
{
	struct train_cli c;
	struct run_stats r = { .val_loss = NAN };
	ferry_trainer_t tr = NULL;
	FILE *json = NULL;
	int rc;

	memset(&c, 0, sizeof(c));
	model_flags_default(&c.o);
	c.o.steps = 400;
	c.o.lr = 2e-3f;
	c.o.warmup = 20;
	c.val_batches = 8;
	c.sample = 256;
	rc = parse(argc, argv, &c);
	if (rc)
		return rc == 1 ? 0 : rc;
	if ((rc = prepare(&c, &json)))
		goto out;
	if (ferry_trainer_create(&c.o, &tr) != FERRY_OK) {
		rc = cli_fail(CMD);
		goto out;
	}
	print_banner(tr, &c);
	r.first_step = ferry_trainer_step_count(tr);
	r.step_ms = calloc((size_t)(c.o.steps > r.first_step ? c.o.steps - r.first_step : 1), sizeof(double));
	while (ferry_trainer_step_count(tr) < c.o.steps)
		if ((rc = one_step(tr, &c, json, &r)))
			goto out;
	if (c.save && (rc = save(tr, c.save)))
		goto out;
	print_summary(tr, &c, &r);
	if (c.sample)
		print_sample(tr, &c);
out:
	if (json)
		fclose(json);
	free(r.step_ms);
	ferry_trainer_free(tr);
	return rc;
}
