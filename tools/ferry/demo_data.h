/* The demo corpus: Debian's fortunes, tokenized on first use. */
#ifndef FERRY_TOOLS_DEMO_DATA_H
#define FERRY_TOOLS_DEMO_DATA_H

#include <stdbool.h>
#include <stdio.h>

#define FERRY_DEMO_PREFIX "data/demo"

/* Writes data/demo_{train,val}_*.bin from the demo corpus unless they exist;
 * progress goes to `log`.  Returns 0, or prints the error and returns -1. */
int ferry_demo_data_ensure(FILE *log);
/* Whether the demo corpus has a validation split. */
bool ferry_demo_data_has_val(void);

#endif
