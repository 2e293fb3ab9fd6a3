/* The demo corpus: Debian's fortunes (package "fortunes"), tokenized on
 * first use: every cookie a document, the drawings (art, ascii-art) left
 * out, in a fixed shuffled order (the loader reads shards in order, and a
 * short run must see every kind of cookie, not the first files only). */
#ifndef FERRY_TOOLS_DEMO_DATA_H
#define FERRY_TOOLS_DEMO_DATA_H

#include <stdbool.h>
#include <stdio.h>

#define FERRY_DEMO_DIR "data"
#define FERRY_DEMO_PREFIX FERRY_DEMO_DIR "/demo"

/* Writes data/demo_{train,val}_*.bin from the demo corpus unless they exist
 * (without the fortunes, `ferry data`'s own fallback); progress goes to
 * `log`.  Returns 0, or prints the error and returns -1. */
int ferry_demo_data_ensure(FILE *log);
/* Whether the demo corpus has a validation split. */
bool ferry_demo_data_has_val(void);

#endif
