/* Flags shared by `ferry train` and `ferry plan`: the model's shape, the
 * batch, the activation policy and the device. */
#ifndef FERRY_TOOLS_MODEL_FLAGS_H
#define FERRY_TOOLS_MODEL_FLAGS_H

#include <stdbool.h>
#include <stdio.h>
#include "cli_args.h"
#include "ferry/train.h"

/* The defaults of `ferry train`: the demo model. */
void ferry_cli_model_flags_default(struct ferry_train_opts *o);
/* Whether --offload-optimizer, --offload-params or --offload-embeddings
 * was given (else --policy auto chooses where the parameters and AdamW's
 * state live). */
bool ferry_cli_model_flags_state_given(void);

/* The model flags' table: shape, batch, policy, placements, device.  A
 * parse into a struct ferry_train_opts sets the given bits FERRY_GIVEN_BATCH
 * and FERRY_GIVEN_SEQ, and MODEL_GIVEN_SHAPE for the shape flags (not for
 * --model, which sets o->model.arch; left empty it means GPT-2 for a fresh
 * model and whatever a checkpoint holds), FERRY_GIVEN_PLACE for the
 * placement flags (--policy, the offloading and ZeRO flags, --place). */
#define MODEL_GIVEN_SHAPE (1u << 31)
extern const struct cli_flag ferry_cli_model_flags[];
/* The group that parses them into o (given: NULL, or where the given bits
 * go). */
struct cli_group ferry_cli_model_flags_group(struct ferry_train_opts *o, unsigned *given);

/* --place: its placements (over the flags') resolved into the flags, so
 * every later step (host tiers, --policy auto) sees them, the host tiers
 * they name (and --host-tier's) in o->exec.host_tier.  Prints the error
 * and returns -1 for a bad spec or placements that do not go together.
 * Call after parsing, before ferry_cli_tier_flags_setup. */
int ferry_cli_model_flags_places(const char *cmd, struct ferry_train_opts *o);

/* Their help, and the host tiers' (tier_flags.h), as every command that
 * takes them prints it. */
#define MODEL_FLAGS_HELP_COL 24
void ferry_cli_model_flags_help(FILE *out);

/* What --backend auto means: $FERRY_BACKEND when set (tests pin the
 * backend so), else cuda when a GPU can be opened, else cpu. */
const char *ferry_cli_auto_backend(void);

/* Resolves --backend auto (the default): cuda when a GPU can be opened,
 * else cpu, printing why to `log`; sets the activation type plans use.
 * Returns -1 (after printing) for an unknown backend. */
int ferry_cli_model_flags_backend(const char *cmd, struct ferry_train_opts *o, FILE *log);

/* The model shape: from --checkpoint/--resume when given (either kind of
 * checkpoint; a --model that names another model is an error), else the
 * flags (padding the vocabulary).  Prints the error and returns -1 on
 * failure. */
int ferry_cli_model_flags_config(const char *cmd, const struct ferry_train_opts *o,
		       struct ferry_model_config *cfg);

#endif
