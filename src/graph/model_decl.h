/*
 * A model is a declaration: named dimensions, parameter tensors, and three
 * programs of ops over named tensors (prologue, the repeated layer,
 * epilogue).  The tensor table (src/plan/), the executor (src/exec/), the
 * checkpoint readers and the CLI read declarations only; src/models/ holds
 * one file per model and nothing else model-specific exists.
 *
 * Parameters live in one fp32 array in declaration order, each per-layer
 * parameter stacked [L, ...] (llm.c's layout, so an llm.c file is the array
 * itself).  A Hugging Face file names each layer's slice separately
 * (hf_name, a printf format taking the layer).
 *
 * Prologue and epilogue are ferry_layer_decl programs run once per step.
 * Their tensors carry a role binding them to the step: the prologue writes
 * the stack's input (its `output`), the epilogue reads the stack's output
 * (its `input`); token ids, targets and per-row losses are the step's
 * arguments and result.
 */
#ifndef FERRY_GRAPH_MODEL_DECL_H
#define FERRY_GRAPH_MODEL_DECL_H

#include "ferry/model_config.h"
#include "ferry/safetensors.h"
#include "graph/layer.h"

#define FERRY_MODEL_MAX_PARAMS 24
#define FERRY_MODEL_MAX_DECLS 8 /* models in the table (model_decl.c checks) */

enum ferry_param_init {
	FERRY_INIT_ZERO,
	FERRY_INIT_ONE,
	FERRY_INIT_NORMAL,       /* N(0, 0.02) */
	FERRY_INIT_NORMAL_RESID, /* N(0, 0.02 / sqrt(2 L)): projections into the residual */
};

struct ferry_param_decl {
	const char *name;         /* short name ("wte", "q_proj") */
	const char *hf_name;      /* Hugging Face name; "%d" = layer (NULL: none) */
	struct ferry_shape shape; /* one layer's slice for a per-layer parameter */
	bool per_layer;
	bool decay;               /* AdamW weight decay applies (matrices, embeddings) */
	enum ferry_param_init init;
	bool zero_pad_rows;       /* an embedding: rows past the vocabulary stay 0 */
	bool tied_head;           /* the LM head: absent when cfg->tie_embeddings > 0,
				     and then ops read parameter tied_to */
	int tied_to;
};

/* Where a stage tensor comes from or goes (0: an ordinary activation). */
enum ferry_tensor_role {
	FERRY_ROLE_ACT,
	FERRY_ROLE_TOKENS,       /* int32 [B, T] input ids */
	FERRY_ROLE_TARGETS,      /* int32 [B, T] next-token ids */
	FERRY_ROLE_LOSSES,       /* fp32 [B, T] per-row losses, the step's output */
	FERRY_ROLE_STACK_INPUT,  /* the layer stack's input (prologue output) */
	FERRY_ROLE_STACK_OUTPUT, /* the layer stack's output (epilogue input) */
	FERRY_ROLE_ALIAS,        /* shares storage with tensor alias_of (in place) */
};

struct ferry_stage_tensor {
	enum ferry_tensor_role role;
	int alias_of;      /* ALIAS: the tensor whose storage it uses */
	bool grad_in_place; /* its gradient overwrites its value (the consumer's
			       backward writes it, nothing accumulates) */
};

/* The checkpoint a model's users have, and so the one ferry reads and
 * writes for it. */
enum ferry_ckpt_format {
	FERRY_CKPT_LLMC, /* an llm.c model file (+ FILE.state) */
	FERRY_CKPT_HF,   /* a Hugging Face directory: config.json + safetensors */
};

struct ferry_model_decl {
	const char *name;         /* --model and cfg->arch ("gpt2") */
	const char *title;        /* in messages ("GPT-2") */
	enum ferry_ckpt_format ckpt;
	const struct ferry_hf_family *hf; /* FERRY_CKPT_HF: config.json's family
					     (model_type, architecture, defaults) */
	int n_params;
	struct ferry_param_decl params[FERRY_MODEL_MAX_PARAMS];
	const struct ferry_layer_decl *prologue, *layer, *epilogue;
	const struct ferry_stage_tensor *prologue_roles, *epilogue_roles;

	/* Completes a config for this model (derived sizes, defaults) and
	 * checks it; the message names the offending field. */
	ferry_status (*config_check)(struct ferry_model_config *cfg);
};

/* The model's dimensions for a batch of B x T. */
struct ferry_dims ferry_model_dims(const struct ferry_model_config *cfg, int B, int T);

/* The constants ops take (indexed by enum ferry_op_scalar). */
void ferry_model_scalars(const struct ferry_model_config *cfg, float out[FERRY_OP_SCALAR_COUNT]);

/* Whether parameter p has storage of its own under cfg (a tied LM head
 * does not). */
bool ferry_param_present(const struct ferry_model_decl *md, const struct ferry_model_config *cfg,
			 int p);

#endif
