#include "model_flags.h"
#include "tier_flags.h"
#include "cli_args.h"
#include "ferry/data.h"
#include "ferry/hf_checkpoint.h"
#include "ferry/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char model_flags_help[] =
	"model (shape flags are ignored with --checkpoint/--resume, which carry their own\n"
	"shape and model; --model, if given, must name the checkpoint's model):\n"
	"  --model NAME          gpt2 (default) or llama\n"
	"  --layers N --channels N --heads N --vocab N --max-seq N\n"
	"                        default 2, 128, 4, 257 (bytes + EOT), 256\n"
	"  --kv-heads N          llama: key/value heads, dividing --heads (default = heads)\n"
	"  --ffn N               llama: MLP width (default 8/3 x channels, rounded up to 64)\n"
	"  --rope-theta X        llama: rotary embedding base (default 10000)\n"
	"  --tied-head           llama: the LM head is the token embedding (default: its own)\n"
	"  --checkpoint PATH     start from a checkpoint: a regular file is an llm.c GPT-2\n"
	"                        (fp32, version 3); a directory (or its config.json or a\n"
	"                        .safetensors file) is a Hugging Face Llama: config.json +\n"
	"                        model.safetensors or sharded, fp32, bf16 or fp16\n"
	"  --resume PATH         continue from a --save: FILE and FILE.state, or a Llama\n"
	"                        directory with its ferry_state.bin\n"
	"batch and memory:\n"
	"  --batch B --seq T     batch size and sequence length (default 16, 64)\n"
	"  --policy P            where each activation lives (default everything_saveable):\n"
	"                        a JAX or MaxText policy, e.g. nothing_saveable, dots_saveable,\n"
	"                        save_only_these_names(query_proj,key_proj), full, minimal,\n"
	"                        qkv_proj_offloaded, minimal_offloaded, or\n"
	"                        custom:query_proj=offload,context=device (others remat);\n"
	"                        `ferry plan` lists the model's names; auto: the cost model's\n"
	"                        choice per name for --device-mem (after ferry calibrate)\n"
	"  --prefetch-depth N    layers prefetched ahead in the backward pass (default 2)\n"
	"  --offload-optimizer M where AdamW's state lives: device (default); stream:\n"
	"                        master weights and moments in host memory, each layer's\n"
	"                        slice updated in a two-slot device ring; cpu: in host\n"
	"                        memory, updated by host threads (fused CPU AdamW)\n"
	"  --offload-params      the layers' weights in host memory, loaded into a device\n"
	"                        ring ahead of use in forward and backward; each layer's\n"
	"                        gradients go to the host when its backward ends\n"
	"                        (embedding, head and final norm stay on the device\n"
	"                        unless --offload-embeddings); AdamW's state goes to\n"
	"                        the host too (default cpu)\n"
	"  --offload-embeddings  with --offload-params: the embeddings, head and final\n"
	"                        norm in host memory too, loaded into one device region\n"
	"                        before the prologue and the epilogue (the larger one's\n"
	"                        weights and gradients on the device, not all of them)\n"
	"  --param-prefetch N    layers of weights loaded ahead (default 1)\n"
	"  --clip-order O        with --offload-optimizer cpu: exact (default: every update\n"
	"                        waits for the global norm) or speculative (each layer\n"
	"                        updated as soon as its gradients are on the host, the\n"
	"                        step undone and redone when the norm needs clipping)\n"
	"  --place SPEC          placements written down, over what the flags above set:\n"
	"                        GROUP=PLACEMENT,... with layers.weights=device|host:stream(D),\n"
	"                        edges.weights=device|host:stream, adam=device|host:stream|\n"
	"                        host:cpu|host:cpu(speculative), activations=POLICY,\n"
	"                        activations.NAME=device|offload|remat, activations.prefetch=D;\n"
	"                        `ferry plan` prints every configuration's (docs/design.md)\n"
	"  --backend NAME        auto (default: $FERRY_BACKEND if set, else cuda if a GPU\n"
	"                        is found, else cpu), cpu, cuda\n"
	"  --pinned-limit SIZE   host buffers that copies use come from one pinned pool of\n"
	"                        at most this size, offloaded activations first; the rest\n"
	"                        are pageable, with a warning (default: half the memory)\n"
	"  --device-mem SIZE     device memory capacity with a unit, e.g. 512M or 2G\n"
	"                        (K, M, G, T: powers of 1024; default: all)\n"
	"  --threads N           CPU threads (default: all cores; at most 4 per core)\n"
	"host memory tiers (docs/tiers.md):\n"
	"  --host-tier KIND=TIER,...  where host state lives; KIND: activations, params,\n"
	"                        grads, optimizer, all; TIER: dram, node:N, cxl (CPU-less\n"
	"                        nodes, interleaved), interleave:N*W+M*V, nvme (streamed state),\n"
	"                        auto (default: what the CPU computes on in DRAM, streamed\n"
	"                        state on CXL, what does not fit on DRAM, then NVMe);\n"
	"                        off: no tiers (the backend's host memory; the default on a\n"
	"                        machine without CPU-less nodes and without these flags)\n"
	"  --topology FILE       simulated NUMA nodes, lines 'node ID cpus N mem SIZE'\n"
	"                        (default: this machine's, from /sys/devices/system/node)\n"
	"  --nvme-dir DIR        the NVMe tier's file goes there (created, sized, removed)\n";

void model_flags_default(struct ferry_train_opts *o)
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

/* --offload-optimizer device|stream; 0 or -1 after a message. */
static int optimizer_flag(const char *cmd, int argc, char **argv, int i, enum ferry_optim_place *out)
{
	const char *v;

	if (arg_value(cmd, argc, argv, i, &v))
		return -1;
	if (!strcmp(v, "device") || !strcmp(v, "stream") || !strcmp(v, "cpu")) {
		*out = !strcmp(v, "stream") ? FERRY_OPTIM_STREAM : !strcmp(v, "cpu") ? FERRY_OPTIM_CPU
										       : FERRY_OPTIM_DEVICE;
		return 0;
	}
	fprintf(stderr, "ferry %s: --offload-optimizer '%s': device, stream or cpu\n", cmd, v);
	return -1;
}

/* Whether --offload-optimizer was given (--offload-params defaults it to
 * cpu otherwise), and --offload-params or --offload-embeddings. */
static bool optimizer_given, params_given, embeddings_given, place_given;

bool model_flags_state_given(void)
{
	return optimizer_given || params_given || embeddings_given || place_given;
}

int model_flags_places(const char *cmd, struct ferry_train_opts *o)
{
	static struct ferry_places places; /* o->exec.policy points into it */

	if (!o->exec.place)
		return 0;
	if (ferry_exec_opts_places(&o->exec, &places) != FERRY_OK) {
		cli_fail(cmd);
		return -1;
	}
	ferry_exec_opts_set_places(&o->exec, &places);
	place_given = true;
	return 0;
}

/* Where the weights and the optimizer state live: the shorthands, and
 * --place written out; as model_flag returns. */
static int state_flag(const char *cmd, int argc, char **argv, int i, struct ferry_train_opts *o)
{
	const char *f = argv[i];
	int r;

#define IS(name) (strcmp(f, name) == 0)
	if (IS("--offload-optimizer")) {
		r = optimizer_flag(cmd, argc, argv, i, &o->exec.optimizer);
		optimizer_given = true;
	} else if (IS("--offload-params")) {
		o->exec.offload_params = true;
		params_given = true;
		if (!optimizer_given) /* the master weights are on the host: AdamW there too */
			o->exec.optimizer = FERRY_OPTIM_CPU;
		return 1;
	} else if (IS("--offload-embeddings")) {
		o->exec.offload_embeddings = embeddings_given = true; /* the plan checks for --offload-params */
		return 1;
	} else if (IS("--clip-order")) {
		const char *v = NULL;

		r = arg_value(cmd, argc, argv, i, &v);
		if (!r && strcmp(v, "exact") && strcmp(v, "speculative")) {
			fprintf(stderr, "ferry %s: --clip-order '%s': exact or speculative\n", cmd, v);
			r = -1;
		}
		if (!r)
			o->exec.clip_order = !strcmp(v, "speculative") ? FERRY_CLIP_SPECULATIVE : FERRY_CLIP_EXACT;
	} else if (IS("--param-prefetch")) {
		r = arg_int(cmd, argc, argv, i, &o->exec.param_prefetch);
		if (!r && (o->exec.param_prefetch < 1 || o->exec.param_prefetch > 64)) {
			fprintf(stderr, "ferry %s: --param-prefetch must be from 1 to 64\n", cmd);
			r = -1;
		}
	} else if (IS("--place")) {
		r = arg_value(cmd, argc, argv, i, &o->exec.place);
	} else {
		return 0;
	}
#undef IS
	return r ? -1 : 2;
}

int model_flag(const char *cmd, int argc, char **argv, int i, struct ferry_train_opts *o,
	       bool *shape_given)
{
	struct ferry_model_config *m = &o->model;
	const char *f = argv[i];
	int r;

	if ((r = tier_flag(cmd, argc, argv, i)) != 0)
		return r;
#define IS(name) (strcmp(f, name) == 0)
	if (IS("--layers") || IS("--channels") || IS("--heads") || IS("--vocab") || IS("--max-seq") ||
	    IS("--kv-heads") || IS("--ffn")) {
		int *dst = IS("--layers") ? &m->layers : IS("--channels") ? &m->channels :
			   IS("--heads") ? &m->heads : IS("--vocab") ? &m->vocab :
			   IS("--kv-heads") ? &m->kv_heads : IS("--ffn") ? &m->ffn : &m->max_seq;

		*shape_given = true;
		r = arg_int(cmd, argc, argv, i, dst);
	} else if (IS("--model")) {
		const char *name = NULL;

		r = arg_value(cmd, argc, argv, i, &name);
		if (!r && snprintf(m->arch, sizeof(m->arch), "%s", name) >= (int)sizeof(m->arch)) {
			fprintf(stderr, "ferry %s: unknown model '%s' (models: %s)\n", cmd, name,
				ferry_model_arch_list());
			r = -1;
		}
	} else if (IS("--rope-theta")) {
		*shape_given = true;
		r = arg_float(cmd, argc, argv, i, &m->rope_theta);
	} else if (IS("--tied-head")) {
		*shape_given = true;
		m->tie_embeddings = 1;
		return 1; /* a flag without a value */
	} else if (IS("--checkpoint")) r = arg_value(cmd, argc, argv, i, &o->checkpoint);
	else if (IS("--resume")) r = arg_value(cmd, argc, argv, i, &o->resume);
	else if (IS("--batch")) r = arg_int(cmd, argc, argv, i, &o->B);
	else if (IS("--seq")) r = arg_int(cmd, argc, argv, i, &o->T);
	else if (IS("--policy")) r = arg_value(cmd, argc, argv, i, &o->exec.policy);
	else if (IS("--prefetch-depth")) {
		r = arg_int(cmd, argc, argv, i, &o->exec.prefetch_depth);
		if (!r && o->exec.prefetch_depth < 1) {
			fprintf(stderr, "ferry %s: --prefetch-depth must be at least 1\n", cmd);
			r = -1;
		}
	} else if ((r = state_flag(cmd, argc, argv, i, o)) != 0) {
		return r;
	} else if (IS("--backend")) r = arg_value(cmd, argc, argv, i, &o->backend);
	else if (IS("--device-mem")) r = arg_size(cmd, argc, argv, i, &o->device_mem);
	else if (IS("--pinned-limit")) r = arg_size(cmd, argc, argv, i, &o->exec.pinned_limit);
	else if (IS("--threads")) r = arg_threads(cmd, argc, argv, i, &o->threads);
	else
		return 0;
#undef IS
	return r ? -1 : 2;
}

const char *cli_auto_backend(void)
{
	const char *env = getenv("FERRY_BACKEND");

	if (env && *env && strcmp(env, "auto"))
		return env;
	return ferry_backend_probe("cuda") == FERRY_OK ? "cuda" : "cpu";
}

int model_flags_backend(const char *cmd, struct ferry_train_opts *o, FILE *log)
{
	if (strcmp(o->backend, "auto") == 0) {
		const char *env = getenv("FERRY_BACKEND");

		if (env && *env && strcmp(env, "auto")) {
			o->backend = env;
			if (ferry_backend_probe(o->backend) != FERRY_OK) {
				cli_fail(cmd);
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
		cli_fail(cmd);
		return -1;
	}
	o->exec.act_dtype = ferry_backend_act_dtype(o->backend);
	o->exec.backend = o->backend;
	return 0;
}

int model_flags_config(const char *cmd, const struct ferry_train_opts *o,
		       struct ferry_model_config *cfg)
{
	const char *start = o->resume ? o->resume : o->checkpoint;

	if (start) {
		if (ferry_checkpoint_any_read_config(start, cfg) != FERRY_OK) {
			cli_fail(cmd);
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
	cli_fail(cmd);
	return -1;
}
