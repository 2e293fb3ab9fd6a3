/* The files a run writes, checked against each other before step 1: two
 * outputs that name one file (--trace t.json --json t.json, --trace m.bin
 * --save m.bin) would leave one of them lost. */
#ifndef FERRY_TOOLS_OUT_PATHS_H
#define FERRY_TOOLS_OUT_PATHS_H

#include <stdbool.h>

/* Whether any two of --json, --trace and the files of a save to save (the
 * model and its state file; a Hugging Face directory's files when hf) are
 * one file: the same device and inode, or for files not there yet the same
 * real path.  Any of them may be NULL.  Returns 0, or 1 after printing
 * "ferry <cmd>: ..." naming both flags. */
int out_paths_check(const char *cmd, const char *json, const char *trace, const char *save, bool hf);

#endif
