/*
 * Placement: where each group of training tensors lives, how it reaches
 * the kernels, and where it is updated, as one value per group.
 *
 * Groups (the names --place and `ferry plan` use):
 *   layers.weights  the stacked layers' weights as the kernels read them
 *                   (the compute copy) and their gradients
 *   edges.weights   the same for the unstacked parameters: embeddings, the
 *                   head, the final norm
 *   adam            AdamW's state: fp32 master weights and both moments
 *                   (and, whenever they are on the host, every parameter
 *                   array there: the gradients and the bf16 copy the
 *                   weights' rings stream from)
 *   activations     the layer's named activations, by policy (policy.h)
 *
 * A placement is a home (device, or host memory on a tier), an access
 * (resident: the kernels read it where it lives; stream(d): it passes
 * through a device ring, d layers loaded ahead; recompute, for
 * activations) and, for the optimizer state, where the update runs
 * (device kernels, or host threads, optionally each layer as soon as its
 * gradients arrive).
 *
 * Written down (--place, `ferry plan`'s "place"):
 *
 *   layers.weights=device | host:stream(D)
 *   edges.weights=device  | host:stream
 *   adam=device | HOST:stream | HOST:cpu | HOST:cpu(speculative)
 *        | device:shard(N)             split over N ranks (ZeRO-1): each rank
 *                                      keeps and updates its 1/N of the moments
 *        | device:shard(N,grads)       and of the gradients, each layer's
 *                                      reduce-scattered after its backward (ZeRO-2)
 *        | device:shard(N,params)      and of the parameters, each layer's
 *                                      all-gathered ahead of use (ZeRO-3)
 *        | HOST:stream:shard(N) | HOST:cpu:shard(N) | HOST:cpu(speculative):shard(N)
 *                                      ZeRO-1 with the state on the host: each
 *                                      rank keeps its 1/N of the master weights,
 *                                      moments (and host gradients: cpu), and
 *                                      updates it there
 *   adam.grads=host                    with adam=HOST:cpu: a host copy of every
 *                                      gradient, each layer's sent down when its
 *                                      backward ends (the default; not printed)
 *   adam.grads=device:stream(D)        ... the gradients stay on the device only;
 *                                      the host threads read them through a
 *                                      ring of D + 1 host slots (1 to 15; D
 *                                      units copied down ahead of the one being
 *                                      updated), a unit a layer's slice of
 *                                      every stacked parameter or a slot's
 *                                      worth of an unstacked one
 *   activations=POLICY                 any --policy spec
 *   activations.NAME=device|offload|remat   (one per name: a custom policy,
 *                                      the names not listed recomputed)
 *   activations.host=TIER[+TIER...]    the tier(s) offloaded activations live on (layer by layer)
 *   activations.prefetch=D             offloaded activations loaded D layers ahead
 *   activations.prefetch=D1+D2...      ... the layers on activations.host's Nth tier DN ahead
 *   activations.prefetch=auto          ... as far ahead as each tier's rate needs
 *                                      (ferry_prefetch_auto resolves it to D1+D2...)
 *   activations.mlp_tile=N|auto        the MLP over tiles of N tokens, its hidden
 *                                      activations recomputed per tile in backward
 *   activations.loss_tile=N|auto       the LM head and the loss over tiles of N
 *                                      tokens: one tile's logits at a time
 *
 * where HOST is host (the host tiers' default for each kind of host state,
 * or the backend's host memory without tiers), host(TIER) (every kind of
 * adam's host state on TIER) or host(KIND=TIER,...) (KIND: params, grads,
 * optimizer; those not named as host).  TIER: dram, node:N, cxl,
 * interleave:N*W+M*V, nvme or auto, as ferry/tier.h resolves them.
 *
 * items separated by commas (commas inside brackets do not separate).
 * Today's flags are shorthands: --offload-params is
 * layers.weights=host:stream(1), --param-prefetch D sets its D,
 * --offload-embeddings edges.weights=host:stream, --offload-optimizer
 * stream|cpu adam=host:stream|host:cpu, --clip-order speculative
 * adam=host:cpu(speculative), --device-grads adam.grads=device:stream(1),
 * --zero 1 on N ranks adam=device:shard(N)
 * (with --offload-optimizer stream|cpu: adam=host:stream|cpu:shard(N)),
 * --zero 2 adam=device:shard(N,grads), --zero 3 adam=device:shard(N,params),
 * --policy activations=, --prefetch-depth activations.prefetch=,
 * --mlp-tile activations.mlp_tile=, --loss-tile activations.loss_tile=,
 * --host-tier KIND=TIER the tiers (activations activations.host, the
 * other kinds adam's).
 */
#ifndef FERRY_PLACE_H
#define FERRY_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include "ferry/ferry.h"
#include "ferry/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ferry_home {
	FERRY_HOME_DEVICE,
	FERRY_HOME_HOST,
};

enum ferry_access {
	FERRY_ACCESS_RESIDENT,  /* read where it lives */
	FERRY_ACCESS_STREAM,    /* through a device ring, `depth` layers ahead */
	FERRY_ACCESS_RECOMPUTE, /* produced again when needed (activations) */
};

enum ferry_update {
	FERRY_UPDATE_NONE,   /* not optimizer state */
	FERRY_UPDATE_DEVICE, /* AdamW kernels on the device */
	FERRY_UPDATE_HOST,   /* the fused CPU AdamW on host threads */
};


struct ferry_place {
	enum ferry_home home;
	enum ferry_access access;
	int depth;                /* stream: layers loaded ahead (0 for none) */
	enum ferry_update update;
	bool speculative;         /* update HOST: each layer as soon as its
				     gradients are on the host, undone when the
				     norm then needs clipping (FERRY_CLIP_SPECULATIVE) */
	int shard;                /* adam: split over this many ranks, rank r
				     holding elements [r*S, (r+1)*S) of the
				     parameter array's moments (home host: and
				     of its master weights and host gradients),
				     S = n / shard rounded up (ZeRO-1, --zero 1);
				     0: whole */
	bool shard_grads;         /* adam split: the gradients too, each rank
				     keeping its slice of them (ZeRO-2,
				     --zero 2: shard(N,grads); S then rounded
				     up to whole blocks of the gradient norm's
				     sum, src/exec/zero_grads.c; home device
				     or updated on the host) */
	bool shard_params;        /* and the parameters (ZeRO-3, --zero 3:
				     shard(N,params)): each layer's all-gathered
				     into a ring of device slots ahead of use,
				     src/exec/zero_params.c; home device or
				     updated on the host (zero_host.c) */
	char tier[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS]; /* home host: each
				     kind of its host state's tier ("dram", ...;
				     "": not named); adam's: params, grads,
				     optimizer (the weights' groups hold no host
				     state of their own) */
};

enum ferry_place_group {
	FERRY_GROUP_LAYER_WEIGHTS,
	FERRY_GROUP_EDGE_WEIGHTS,
	FERRY_GROUP_ADAM,
	FERRY_GROUP_COUNT,
	FERRY_GROUP_NONE = -1, /* table entries no placement moves: the batch,
				  activation gradients, workspace */
	FERRY_GROUP_ACTIVATIONS = -2, /* placed by the activation policy */
};

/* Layers of offloaded activations loaded ahead in backward, by default. */
#define FERRY_DEFAULT_PREFETCH_DEPTH 2
/* activations.prefetch=auto: a depth per tier from the tiers' rates and a
 * layer's compute time (cost.h, ferry_prefetch_auto); a plan needs it
 * resolved first. */
#define FERRY_PREFETCH_AUTO (-1)
/* Tiers a depth each (as many as offloaded activations may span, tier.h). */
#define FERRY_PREFETCH_TIERS FERRY_TIER_SPAN_MAX

/* adam.grads=device:stream(D): the deepest D (ring slots D + 1). */
#define FERRY_GRADS_DEVICE_MAX_DEPTH 15

#define FERRY_PLACE_POLICY_CHARS 1024 /* as --policy auto's choice (cost.h) */
#define FERRY_PLACE_CHARS 3072

/* Tiles of tokens (--mlp-tile, --loss-tile): the plan's choice (one
 * tile's extra tensors about one activation of the model's width). */
#define FERRY_TILE_AUTO (-1)

/* Every group's placement, and the activation policy. */
struct ferry_places {
	struct ferry_place group[FERRY_GROUP_COUNT];
	char policy[FERRY_PLACE_POLICY_CHARS]; /* "" : everything_saveable */
	int act_prefetch;                      /* 0: the default (2); FERRY_PREFETCH_AUTO;
						  with depths per tier, the deepest */
	int act_prefetch_tier[FERRY_PREFETCH_TIERS]; /* activations.prefetch=D1+D2...: the
						  depth of each tier of act_tier, in its
						  order (0 after the last; none: one depth) */
	int mlp_tile, loss_tile;               /* tokens per tile; 0: untiled,
						  FERRY_TILE_AUTO: the plan's choice */
	char act_tier[FERRY_TIER_NAME_CHARS];  /* offloaded activations' tier ("": not named) */
	int adam_grads_device;                 /* adam=HOST:cpu: 0, a host copy of every
						  gradient (adam.grads=host); D >= 1, they
						  stay on the device and reach the host
						  threads through D + 1 host slots
						  (adam.grads=device:stream(D)); apart from
						  adam's value, so an adam= item keeps it */
};

/* "layers.weights", "edges.weights", "adam". */
const char *ferry_place_group_name(enum ferry_place_group g);

/* The placements today's defaults give: everything on the device. */
void ferry_places_default(struct ferry_places *p);

/* Applies the items of spec (the syntax above) to *p, in order; a group
 * not named keeps its placement.  Errors name the item and what it
 * expected; *p is unchanged then. */
ferry_status ferry_places_parse(const char *spec, struct ferry_places *p) FERRY_MUST_CHECK;

/* Checks that the placements go together (streamed weights need the
 * optimizer state on the host, ...); errors say which. */
ferry_status ferry_places_check(const struct ferry_places *p) FERRY_MUST_CHECK;

/* Every group's placement in the syntax above, parsed back to the same
 * placements.  Errors: it does not fit n bytes. */
ferry_status ferry_places_format(const struct ferry_places *p, char *buf, size_t n) FERRY_MUST_CHECK;

/* Applies a --host-tier spec (KIND=TIER,..., ferry/tier.h) to the tiers
 * of *p: each kind it names takes its tier (adam's kinds when adam is on
 * the host), the others keep theirs.  Errors name the item; *p is
 * unchanged then. */
ferry_status ferry_places_set_tiers(struct ferry_places *p, const char *spec) FERRY_MUST_CHECK;

/* An activations.prefetch value (D, D1+D2..., auto) into *depth (the
 * deepest; FERRY_PREFETCH_AUTO) and tiers[] (zeros for one depth), and
 * back (what fits n bytes; the length it wanted, as snprintf). */
ferry_status ferry_prefetch_parse(const char *v, int *depth, int tiers[FERRY_PREFETCH_TIERS]) FERRY_MUST_CHECK;
size_t ferry_prefetch_format(int depth, const int tiers[FERRY_PREFETCH_TIERS], char *buf, size_t n);

/* How p uses each kind of host state (bits 1 << enum ferry_host_kind), as
 * ferry_host_tiers_opts takes it: the kinds host threads compute on, and
 * those only copied to and from the device. */
void ferry_places_host_use(const struct ferry_places *p, unsigned *cpu_kinds, unsigned *copied_kinds);

/* The host tiers the placements name, as --host-tier's KIND=TIER,... (""
 * when none): what ferry_host_tiers_create takes.  Errors: it does not
 * fit n bytes. */
ferry_status ferry_places_tier_spec(const struct ferry_places *p, char *buf, size_t n) FERRY_MUST_CHECK;

#ifdef __cplusplus
}
#endif
#endif
