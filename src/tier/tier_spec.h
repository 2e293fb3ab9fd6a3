/* Internal: the --host-tier spec read by kind, before a topology resolves
 * its tier names (tier_spec.c); placements (src/plan/place.c) read their
 * shorthand with it. */
#ifndef FERRY_TIER_TIER_SPEC_H
#define FERRY_TIER_TIER_SPEC_H

#include "ferry/tier.h"

/* Whether the NVMe tier can hold kind k: what only travels to and from
 * the device (offloaded activations; the kinds in copied_kinds, as
 * ferry_host_tiers_opts'). */
bool ferry_tier_kind_on_nvme(int k, unsigned copied_kinds);

/* "KIND=TIER,..." into names[k], the TIER given for kind k ("" when none);
 * "all" names every kind (with nvme, every kind the NVMe tier can hold).
 * Errors, starting with `what` (where the spec came from): an item not
 * KIND=TIER, an unknown kind, a kind given twice, nvme for a kind it
 * cannot hold, a name too long. */
ferry_status ferry_tier_spec_split(const char *what, const char *spec, unsigned copied_kinds,
				   char names[FERRY_HOST_KINDS][FERRY_TIER_NAME_CHARS]) FERRY_MUST_CHECK;

#endif
