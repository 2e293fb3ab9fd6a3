/* Internal: the model's vocabulary against the training data (vocab_check.c). */
#ifndef FERRY_TRAIN_VOCAB_CHECK_H
#define FERRY_TRAIN_VOCAB_CHECK_H

#include <stdbool.h>
#include "ferry/ferry.h"

/* Reads every token of the shards of data and val (NULL: none): a token
 * id of vocab or more is FERRY_ERR_INVALID naming its shard and the
 * vocabulary that fits (fresh: the model is made from flags, so --vocab
 * says; else it is a checkpoint's, made with another tokenizer). */
ferry_status ferry_vocab_check(const char *data, const char *val, int vocab, bool fresh) FERRY_MUST_CHECK;

#endif
