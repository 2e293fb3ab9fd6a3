/*
 * A resumed run's placement: the state records the run's (version 6, as
 * --place writes it), and a resume continues it unless the caller gives
 * one (FERRY_GIVEN_PLACE), so a run saved with its weights and optimizer
 * on the host does not come back with everything on the device.
 */
#include "ferry/train.h"
#include "ferry/checkpoint.h"
#include "ferry/place.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

ferry_status ferry_train_state_place(const struct ferry_train_state *s, int ranks, char *buf, size_t n)
{
	struct ferry_places p;
	struct ferry_place *adam = &p.group[FERRY_GROUP_ADAM];
	char why[384];

	if (n)
		buf[0] = 0;
	if (!s->place[0])
		return FERRY_OK;
	ferry_places_default(&p);
	if (ferry_places_parse(s->place, &p) != FERRY_OK) {
		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_FORMAT, "the saved run's placement '%.200s': %s", s->place, why);
	}
	/* ZeRO over this run's ranks: a save resumes on any number of them */
	if (adam->shard > 1 && adam->shard != ranks) {
		adam->shard = ranks > 1 ? ranks : 0;
		adam->shard_grads = adam->shard_grads && adam->shard;
		adam->shard_params = adam->shard_params && adam->shard;
	}
	return ferry_places_format(&p, buf, n);
}

void ferry_train_place_of(const struct ferry_exec_opts *e, char *buf, size_t n)
{
	struct ferry_places p;

	if (ferry_exec_opts_places(e, &p) != FERRY_OK || ferry_places_format(&p, buf, n) != FERRY_OK)
		buf[0] = 0; /* not recorded: a resume places it as its flags say */
}

ferry_status ferry_train_take_place(struct ferry_exec_opts *e, const char *place, struct ferry_places *keep)
{
	char why[384];

	ferry_places_default(keep);
	if (ferry_places_parse(place, keep) != FERRY_OK || ferry_places_check(keep) != FERRY_OK) {
		snprintf(why, sizeof(why), "%s", ferry_last_error());
		return ferry_error(FERRY_ERR_FORMAT, "the saved run's placement '%.200s': %s", place, why);
	}
	/* the saved placement whole, in the shorthands too (callers read them) */
	ferry_exec_opts_set_places(e, keep);
	e->place = place; /* and its host tiers */
	return FERRY_OK;
}
