#include "model_flags.h"
#include "tier_flags.h"
#include "cli_args.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/backend.h"
#include "ferry/policy.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether --offload-optimizer was given (--offload-params and
 * --device-grads default it to cpu otherwise), and --offload-params,
 * --offload-embeddings, --device-grads or --place. */
static bool optimizer_given, params_given, embeddings_given, grads_given, place_given;

/* --model NAME: the arch, checked by name later (ferry_cli_model_flags_config). */
static int model_arch_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;
	const char *name;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &name))
		return -1;
	if (snprintf(o->model.arch, sizeof(o->model.arch), "%s", name) >= (int)sizeof(o->model.arch)) {
		ferry_cli_error(cmd, "unknown model '%s' (models: %s)", name, ferry_model_arch_list());
		return -1;
	}
	return 2;
}

/* --rope-theta X: positive; an explicit 0 would read as "not given" and
 * become the default, so it is refused here, where it is still told apart. */
static int rope_theta_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;

	(void)f;
	if (ferry_cli_arg_float(cmd, argc, argv, i, &o->model.rope_theta))
		return -1;
	if (!(o->model.rope_theta > 0)) {
		ferry_cli_error(cmd, "--rope-theta must be positive, got '%s'", argv[i + 1]);
		return -1;
	}
	return 2;
}

/* --policy P: a spec that parses (or auto), checked here, so that one
 * --place activations= replaces is refused too, not dropped unread; an
 * empty one names nothing. */
static int policy_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;
	struct ferry_policy *p = NULL;
	const char *v;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (!v[strspn(v, " \t")]) {
		ferry_cli_error(cmd, "--policy '%s': name a policy (e.g. everything_saveable, the default; "
			       "`ferry plan` lists the model's names)", v);
		return -1;
	}
	if (strcmp(v, "auto") && ferry_policy_parse(v, &p) != FERRY_OK) {
		ferry_cli_error(cmd, "--policy: %s", ferry_last_error());
		return -1;
	}
	ferry_policy_free(p);
	o->exec.policy = v;
	return 2;
}

/* --offload-optimizer device|stream|cpu */
static int optimizer_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;
	const char *v;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	optimizer_given = true;
	if (strcmp(v, "device") && strcmp(v, "stream") && strcmp(v, "cpu")) {
		ferry_cli_error(cmd, "--offload-optimizer '%s': device, stream or cpu", v);
		return -1;
	}
	o->exec.optimizer = !strcmp(v, "stream") ? FERRY_OPTIM_STREAM : !strcmp(v, "cpu") ? FERRY_OPTIM_CPU
											  : FERRY_OPTIM_DEVICE;
	return 2;
}

static int params_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;

	(void)f, (void)cmd, (void)argc, (void)argv, (void)i;
	o->exec.offload_params = params_given = true;
	if (!optimizer_given) /* the master weights are on the host: AdamW there too */
		o->exec.optimizer = FERRY_OPTIM_CPU;
	return 1;
}

static int embeddings_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	(void)f, (void)cmd, (void)argc, (void)argv, (void)i;
	/* the plan checks for --offload-params */
	((struct ferry_train_opts *)dst)->exec.offload_embeddings = embeddings_given = true;
	return 1;
}

static int device_grads_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;

	(void)f, (void)cmd, (void)argc, (void)argv, (void)i;
	o->exec.device_grads = 1;
	grads_given = true;
	if (!optimizer_given) /* the host threads update from the device's gradients */
		o->exec.optimizer = FERRY_OPTIM_CPU;
	return 1;
}

/* --clip-order exact|speculative */
static int clip_order_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;
	const char *v;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (strcmp(v, "exact") && strcmp(v, "speculative")) {
		ferry_cli_error(cmd, "--clip-order '%s': exact or speculative", v);
		return -1;
	}
	o->exec.clip_order = !strcmp(v, "speculative") ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT;
	return 2;
}

/* --mlp-tile, --loss-tile N|auto: tokens per tile (the option at f->at). */
static int tile_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	int *out = (int *)CLI_AT(f, dst);
	const char *v;

	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (!strcmp(v, "auto")) {
		*out = FERRY_TILE_AUTO;
		return 2;
	}
	if (ferry_cli_arg_int(cmd, argc, argv, i, out))
		return -1;
	if (*out < 1) {
		ferry_cli_error(cmd, "%s %s: tokens per tile (at least 1) or auto", f->name, v);
		return -1;
	}
	return 2;
}

/* --prefetch-depth N, D1+D2... (a depth per tier of the activations'
 * span) or auto. */
static int prefetch_flag(const struct cli_flag *f, const char *cmd, int argc, char **argv, int i, void *dst)
{
	struct ferry_train_opts *o = dst;
	const char *v;

	(void)f;
	if (ferry_cli_arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (v[0] == '-' || (v[0] == '0' && !v[1])) {
		ferry_cli_error(cmd, "--prefetch-depth must be at least 1");
		return -1;
	}
	if (ferry_prefetch_parse(v, &o->exec.prefetch_depth, o->exec.prefetch_tiers)) {
		ferry_cli_error(cmd, "--prefetch-depth %s: %s", v, ferry_last_error());
		return -1;
	}
	return 2;
}

#define AT(field) offsetof(struct ferry_train_opts, field)
#define SHAPE(flag, field, ...) \
	{ .name = flag, .value = "N", .type = CLI_INT, .at = AT(model.field), .given = MODEL_GIVEN_SHAPE, __VA_ARGS__ }

/* --model's help: the model table's names, the first the default
 * ("gpt2 (default), llama or qwen2"). */
static const char *model_list_help(void)
{
	static char help[256];
	const char *list = ferry_model_arch_list(), *last = strrchr(list, ',');
	size_t first = strcspn(list, ",");

	if (!last)
		snprintf(help, sizeof(help), "%s (the only one)", list);
	else if (last == list + first)
		snprintf(help, sizeof(help), "%.*s (default) or %s", (int)first, list, last + 2);
	else
		snprintf(help, sizeof(help), "%.*s (default)%.*s or %s", (int)first, list,
			 (int)(last - list - first), list + first, last + 2);
	return help;
}

const struct cli_flag ferry_cli_model_flags[] = {
	{ .name = "--model", .value = "NAME", .type = CLI_CUSTOM,
	  .help_fn = model_list_help, .parse = model_arch_flag,
	  .section = "model (shape flags are ignored with --checkpoint/--resume, which carry their own\n"
		     "shape and model; --model, if given, must name the checkpoint's model):" },
	SHAPE("--layers", layers, .help = "\ndefault 2, 128, 4, 257 (bytes + EOT), 256"),
	SHAPE("--channels", channels, .join = true),
	SHAPE("--heads", heads, .join = true),
	SHAPE("--vocab", vocab, .join = true),
	SHAPE("--max-seq", max_seq, .join = true),
	SHAPE("--kv-heads", kv_heads, .help = "llama: key/value heads, dividing --heads (default = heads)"),
	SHAPE("--ffn", ffn, .help = "llama: MLP width (default 8/3 x channels, rounded up to 64)"),
	{ .name = "--rope-theta", .value = "X", .type = CLI_CUSTOM, .parse = rope_theta_flag,
	  .help = "llama: rotary embedding base (default 10000)",
	  .given = MODEL_GIVEN_SHAPE },
	SHAPE("--sliding-window", sliding_window,
	      .help = "mistral, qwen2, qwen3 (every layer), gemma2 (the even\n"
		      "layers), gemma3, gemma4 (five of six): each query attends\nto the last N keys, itself included "
		      "(default: every earlier key)"),
	{ .name = "--tied-head", .type = CLI_ONE, .at = AT(model.tie_embeddings),
	  .help = "llama: the LM head is the token embedding (default: its own)",
	  .given = MODEL_GIVEN_SHAPE },
	{ .name = "--checkpoint", .value = "PATH", .type = CLI_STRING, .at = AT(checkpoint),
	  .help = "start from a checkpoint: a regular file is an llm.c GPT-2\n"
	  "(fp32, version 3); a directory (or its config.json or a\n"
	  ".safetensors file) is a Hugging Face Llama: config.json +\n"
	  "model.safetensors or sharded, fp32, bf16 or fp16" },
	{ .name = "--resume", .value = "PATH", .type = CLI_STRING, .at = AT(resume),
	  .help = "continue from a --save: FILE and FILE.state, or a Llama\n"
	  "directory with its ferry_state.bin; the saved run's\n"
	  "placement unless a placement flag (--policy ... --place,\n"
	  "--host-tier) is given" },
	{ .name = "--batch", .value = "B", .type = CLI_INT, .at = AT(B),
	  .help = "batch size and sequence length (default 16, 64)",
	  .section = "batch and memory:", .given = FERRY_GIVEN_BATCH },
	{ .name = "--seq",
	  .value = "T", .type = CLI_INT, .at = AT(T), .join = true, .given = FERRY_GIVEN_SEQ },
	/* the placement flags: a resume given none continues the saved run's */
	{ .name = "--policy", .value = "P", .type = CLI_CUSTOM, .at = 0, .parse = policy_flag,
	  .help = "where each activation lives (default everything_saveable):\n"
	  "a JAX or MaxText policy, e.g. nothing_saveable, dots_saveable,\n"
	  "save_only_these_names(query_proj,key_proj), full, minimal,\n"
	  "qkv_proj_offloaded, minimal_offloaded, or\n"
	  "custom:query_proj=offload,context=device (others remat);\n"
	  "`ferry plan` lists the model's names; auto: the cost model's\n"
	  "choice per name for --device-mem (calibrating this machine\n"
	  "first where ferry calibrate's cache lacks the model)",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--prefetch-depth", .value = "N", .type = CLI_CUSTOM, .at = 0, .parse = prefetch_flag,
	  .help = "layers prefetched ahead in the backward pass (default 2);\n"
	  "over host tiers (--host-tier activations=dram+nvme) one per\n"
	  "tier, D1+D2, or auto: each tier's from its rate against a\n"
	  "layer's compute time (this machine's calibration)",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--mlp-tile", .value = "N", .type = CLI_CUSTOM, .at = AT(exec.mlp_tile), .parse = tile_flag,
	  .help = "the MLP over tiles of N tokens (or auto), its hidden\n"
	  "activations recomputed per tile in backward: one tile's\n"
	  "exist at a time (long sequences; docs/long_context.md)",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--loss-tile", .value = "N", .type = CLI_CUSTOM, .at = AT(exec.loss_tile), .parse = tile_flag,
	  .help = "the LM head and the loss over tiles of N tokens (or\n"
	  "auto), the logits recomputed per tile in backward: one\n"
	  "tile's logits at a time, not batch x seq x vocab",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--offload-optimizer", .value = "M", .type = CLI_CUSTOM, .at = 0,
	  .help = "where AdamW's state lives: device (default); stream:\n"
	  "master weights and moments in host memory, each layer's\n"
	  "slice updated in a two-slot device ring; cpu: in host\n"
	  "memory, updated by host threads (fused CPU AdamW)", .parse = optimizer_flag,
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--offload-params", .type = CLI_CUSTOM, .at = 0,
	  .help = "the layers' weights in host memory, loaded into a device\n"
	  "ring ahead of use in forward and backward; each layer's\n"
	  "gradients go to the host when its backward ends\n"
	  "(embedding, head and final norm stay on the device\n"
	  "unless --offload-embeddings); AdamW's state goes to\n"
	  "the host too (default cpu)", .parse = params_flag,
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--offload-embeddings", .type = CLI_CUSTOM, .at = 0,
	  .help = "with --offload-params: the embeddings, head and final\n"
	  "norm in host memory too, loaded into one device region\n"
	  "before the prologue and the epilogue (the larger one's\n"
	  "weights and gradients on the device, not all of them;\n"
	  "--zero 3: gathered there from the ranks' slices)", .parse = embeddings_flag,
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--param-prefetch", .value = "N", .type = CLI_INT, .at = AT(exec.param_prefetch),
	  .help = "layers of weights loaded ahead (default 1; with --zero 3,\n"
	  "layers gathered ahead)",
	  .min = 1, .max = 64, .range = "--param-prefetch must be from 1 to 64",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--zero", .value = "K", .type = CLI_INT, .at = AT(exec.zero),
	  .help = "on several ranks (mpirun): 0 (default) each keeps all of\n"
	  "AdamW's state; 1 (ZeRO-1) each keeps and updates its 1/N\n"
	  "of the moments (with --offload-optimizer cpu or stream: also\n"
	  "of the master weights (cpu: and gradients) on the host),\n"
	  "then the ranks gather the parameters; 2 (ZeRO-2) also\n"
	  "keeps only its 1/N of the gradients, each layer's\n"
	  "reduce-scattered as soon as its backward is done; 3 (ZeRO-3)\n"
	  "also keeps only its 1/N of the parameters, each layer's\n"
	  "all-gathered one layer ahead of use (2 and 3: AdamW on the\n"
	  "device, streamed or --offload-optimizer cpu; 1 and 2 with\n"
	  "--offload-params (--offload-optimizer cpu or stream) keep\n"
	  "the parameters whole on every host, gathered after the update;\n"
	  "3 with them keeps only the slice on the host, each layer's\n"
	  "part sent up before its all-gather, --param-prefetch ahead)",
	  .min = 0, .max = 3, .range = "--zero %d: 0, 1, 2 or 3",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--clip-order", .value = "O", .type = CLI_CUSTOM, .at = 0,
	  .help = "with --offload-optimizer cpu: exact (default: every update\n"
	  "waits for the global norm) or speculative (each layer\n"
	  "updated as soon as its gradients are on the host, the\n"
	  "step undone and redone when the norm needs clipping)", .parse = clip_order_flag,
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--device-grads", .type = CLI_CUSTOM, .at = 0,
	  .help = "with --offload-optimizer cpu (the default with it): the\n"
	  "fp32 gradients stay on the device; after the norm each\n"
	  "layer's come down into a ring of two pinned host slots\n"
	  "and the host threads update from there, the next layer's\n"
	  "copy overlapping (no host copy of every gradient;\n"
	  "adam.grads=device:stream(D) in --place: D + 1 slots); on\n"
	  "several ranks averaged on the device first, with --zero\n"
	  "1-3 only the rank's slice coming down", .parse = device_grads_flag,
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--place", .value = "SPEC", .type = CLI_STRING, .at = AT(exec.place),
	  .help = "placements written down, over what the flags above set:\n"
	  "GROUP=PLACEMENT,... with layers.weights=device|host:stream(D),\n"
	  "edges.weights=device|host:stream, adam=device|host:stream|\n"
	  "host:cpu|host:cpu(speculative)|device:shard(N[,grads|params])|\n"
	  "host:stream:shard(N)|host:cpu:shard(N[,grads])|\n"
	  "host:cpu(speculative):shard(N[,grads]),\n"
	  "adam.grads=host|device:stream(D),\n"
	  "activations=POLICY,\n"
	  "activations.NAME=device|offload|remat,\n"
	  "activations.prefetch=D|D1+D2...|auto,\n"
	  "activations.mlp_tile=N|auto, activations.loss_tile=N|auto;\n"
	  "adam's host(TIER) or host(KIND=TIER,...) and activations.host=TIER\n"
	  "name host tiers (as --host-tier);\n"
	  "`ferry plan` prints every configuration's (docs/design.md)",
	  .given = FERRY_GIVEN_PLACE },
	{ .name = "--backend", .value = "NAME", .type = CLI_STRING, .at = AT(backend),
	  .help = "auto (default: $FERRY_BACKEND if set, else cuda if a GPU\n"
	  "is found, else cpu), cpu, cuda" },
	{ .name = "--pinned-limit", .value = "SIZE", .type = CLI_SIZE, .at = AT(exec.pinned_limit),
	  .help = "host buffers that copies use come from one pinned pool of\n"
	  "at most this size, offloaded activations first; the rest\n"
	  "are pageable, with a warning (default: half the memory)" },
	{ .name = "--device-mem", .value = "SIZE", .type = CLI_SIZE, .at = AT(device_mem),
	  .help = "device memory capacity with a unit, e.g. 512M or 2G\n"
	  "(K, M, G, T: powers of 1024; default: all)" },
	{ .name = "--threads", .value = "N", .type = CLI_THREADS, .at = AT(threads),
	  .help = "CPU threads (default: all cores; at most 4 per core)" },
	{ NULL },
};

#undef SHAPE
#undef AT

struct cli_group ferry_cli_model_flags_group(struct ferry_train_opts *o, unsigned *given)
{
	return (struct cli_group){ ferry_cli_model_flags, o, given, NULL };
}

void ferry_cli_model_flags_help(FILE *out)
{
	ferry_cli_help(out, ferry_cli_model_flags, MODEL_FLAGS_HELP_COL);
	ferry_cli_help(out, ferry_cli_tier_flags, MODEL_FLAGS_HELP_COL);
}

void ferry_cli_model_flags_default(struct ferry_train_opts *o)
{
	ferry_train_opts_default(o);
	o->backend = "auto";
	/* arch "": not chosen (GPT-2 for a fresh model, the checkpoint's model
	 * with --checkpoint/--resume) */
	o->model = (struct ferry_model_config){ .max_seq = 256, .vocab = FERRY_BYTE_VOCAB,
						.layers = 2, .heads = 4, .channels = 128 };
	o->B = 16;
	o->T = 64;
}

bool ferry_cli_model_flags_state_given(void)
{
	return optimizer_given || params_given || embeddings_given || grads_given || place_given;
}

int ferry_cli_model_flags_places(const char *cmd, struct ferry_train_opts *o)
{
	static struct ferry_places places; /* o->exec.policy points into it */
	static char tiers[FERRY_PLACE_CHARS]; /* and o->exec.host_tier into this */

	o->exec.host_tier = ferry_cli_tier_flags_spec();
	if (!o->exec.place)
		return 0;
	if (ferry_exec_opts_places(&o->exec, &places) != FERRY_OK ||
	    ferry_places_tier_spec(&places, tiers, sizeof(tiers)) != FERRY_OK) {
		ferry_cli_fail(cmd);
		return -1;
	}
	ferry_exec_opts_set_places(&o->exec, &places);
	o->exec.host_tier = tiers[0] ? tiers : NULL;
	place_given = true;
	return 0;
}

const char *ferry_cli_auto_backend(void)
{
	const char *env = getenv("FERRY_BACKEND");

	if (env && *env && strcmp(env, "auto"))
		return env;
	return ferry_backend_probe("cuda") == FERRY_OK ? "cuda" : "cpu";
}

int ferry_cli_model_flags_backend(const char *cmd, struct ferry_train_opts *o, FILE *log)
{
	if (strcmp(o->backend, "auto") == 0) {
		const char *env = getenv("FERRY_BACKEND");

		if (env && *env && strcmp(env, "auto")) {
			o->backend = env;
			if (ferry_backend_probe(o->backend) != FERRY_OK) {
				ferry_cli_fail(cmd);
				return -1;
			}
		} else if (ferry_backend_probe("cuda") == FERRY_OK) {
			o->backend = "cuda";
		} else {
			if (log)
				fprintf(log, "backend: cpu (cuda: %s)\n", ferry_last_error());
			o->backend = "cpu";
		}
	} else if (ferry_backend_probe(o->backend) != FERRY_OK) {
		ferry_cli_fail(cmd);
		return -1;
	}
	o->exec.act_dtype = ferry_backend_act_dtype(o->backend);
	o->exec.backend = o->backend;
	return 0;
}

int ferry_cli_model_flags_config(const char *cmd, const struct ferry_train_opts *o,
		       struct ferry_model_config *cfg)
{
	const char *start = o->resume ? o->resume : o->checkpoint;

	if (start) {
		if (ferry_checkpoint_any_read_config(start, cfg) != FERRY_OK) {
			ferry_cli_fail(cmd);
			return -1;
		}
		if (o->model.arch[0] && strcmp(o->model.arch, cfg->arch) != 0) {
			fprintf(stderr, "ferry %s: --model %s, but %s is a %s checkpoint (%s)\n", cmd,
				o->model.arch, start, ferry_model_title(cfg->arch),
				ferry_checkpoint_is_hf(start) ? "Hugging Face config.json" : "llm.c format");
			return -1;
		}
		return 0;
	}
	*cfg = o->model;
	if (ferry_model_config_complete(cfg) == FERRY_OK)
		return 0;
	ferry_cli_fail(cmd);
	return -1;
}
