/* Flags shared by `ferry train` and `ferry plan`: the model's shape, the
 * batch, the activation policy and the device. */
#ifndef FERRY_TOOLS_MODEL_FLAGS_H
#define FERRY_TOOLS_MODEL_FLAGS_H

#include <stdbool.h>
#include <stdio.h>
#include "ferry/train.h"

/* The defaults of `ferry train`: the demo model. */
void model_flags_default(struct ferry_train_opts *o);
/* Whether --offload-optimizer, --offload-params or --offload-embeddings
 * was given (else --policy auto chooses where the parameters and AdamW's
 * state live). */
bool model_flags_state_given(void);

/* If argv[i] is one of these flags, parses it (and its value) into o and
 * returns how many arguments it took (1 or 2); returns 0 for another flag,
 * -1 (after printing why) for a bad value.  *shape_given is set by shape
 * flags (not by --model, which sets o->model.arch; left empty it means
 * GPT-2 for a fresh model and whatever a checkpoint holds). */
int model_flag(const char *cmd, int argc, char **argv, int i, struct ferry_train_opts *o,
	       bool *shape_given);

/* --place: its placements (over the flags') resolved into the flags, so
 * every later step (host tiers, --policy auto) sees them.  Prints the
 * error and returns -1 for a bad spec or placements that do not go
 * together.  Call after parsing, before tier_flags_setup. */
int model_flags_places(const char *cmd, struct ferry_train_opts *o);

/* Help text for those flags. */
extern const char model_flags_help[];

/* What --backend auto means: $FERRY_BACKEND when set (tests pin the
 * backend so), else cuda when a GPU can be opened, else cpu. */
const char *cli_auto_backend(void);

/* Resolves --backend auto (the default): cuda when a GPU can be opened,
 * else cpu, printing why to `log`; sets the activation type plans use.
 * Returns -1 (after printing) for an unknown backend. */
int model_flags_backend(const char *cmd, struct ferry_train_opts *o, FILE *log);

/* The model shape: from --checkpoint/--resume when given (either kind of
 * checkpoint; a --model that names another model is an error), else the
 * flags (padding the vocabulary).  Prints the error and returns -1 on
 * failure. */
int model_flags_config(const char *cmd, const struct ferry_train_opts *o,
		       struct ferry_model_config *cfg);

#endif
