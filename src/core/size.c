/* Sizes written as people write them (core/size.h). */
#include "core/size.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

uint64_t ferry_parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end), mult = 1;

	if (end == s || !(v >= 0))
		return 0;
	switch (toupper((unsigned char)*end)) {
	case 'T': mult *= 1024; /* fall through */
	case 'G': mult *= 1024; /* fall through */
	case 'M': mult *= 1024; /* fall through */
	case 'K': mult *= 1024; end++; break;
	case '\0': break;
	default: return 0;
	}
	if (*end && strcmp(end, "B") && strcmp(end, "iB"))
		return 0;
	return v * mult > 1e18 ? 0 : (uint64_t)(v * mult);
}
