/* Internal: GPT-2's declared layer, shared by the model and the planner. */
#ifndef FERRY_MODELS_GPT2_INTERNAL_H
#define FERRY_MODELS_GPT2_INTERNAL_H

#include "ferry/model.h"
#include "graph/layer.h"

extern const struct ferry_layer_decl ferry_gpt2_layer;

#endif
