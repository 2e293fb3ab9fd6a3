/*
 * Internal: the layers of JAX's host-offloading tutorial networks, declared
 * like any model's (declarations only); exec/tutorial.c and
 * exec/tutorial_adam.c run them on the layer-stack engine.
 */
#ifndef FERRY_MODELS_TUTORIAL_NETS_H
#define FERRY_MODELS_TUTORIAL_NETS_H

#include "graph/layer.h"

/* The first network's parameters, as its layer's matmuls name them. */
enum { FERRY_TUTORIAL_W1, FERRY_TUTORIAL_W2, FERRY_TUTORIAL_PARAMS };

/* x -> y = x @ w1 -> layer_output = y @ w2 (the first two examples). */
extern const struct ferry_layer_decl ferry_tutorial_layer_decl;
/* x -> y = x @ w -> layer_output = gelu(y) (the third, with Adam). */
extern const struct ferry_layer_decl ferry_tutorial_adam_layer_decl;

#endif
