#include "demo_data.h"
#include "commands.h"

#include <glob.h>

bool ferry_demo_data_has_val(void)
{
	glob_t g;
	bool found = glob(FERRY_DEMO_PREFIX "_val_*.bin", 0, NULL, &g) == 0;

	globfree(&g);
	return found;
}

int ferry_demo_data_ensure(FILE *log)
{
	char arg0[] = "data";
	char *argv[] = { arg0, NULL };
	glob_t g;
	int found = glob(FERRY_DEMO_PREFIX "_train_*.bin", 0, NULL, &g) == 0;

	globfree(&g);
	if (found)
		return 0;
	fprintf(log, "preparing the demo corpus (first run): ferry data\n");
	fflush(log);
	/* `ferry data` with no files tokenizes the demo corpus into data/demo */
	return cmd_data(1, argv) == 0 ? 0 : -1;
}
