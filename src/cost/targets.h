/*
 * Internal: the built-in planning targets, the JSON of src/cost/targets/
 * compiled in by CMakeLists.txt (generated/targets_data.c).
 */
#ifndef FERRY_COST_TARGETS_H
#define FERRY_COST_TARGETS_H

struct ferry_builtin_target {
	const char *name; /* the file's name: "h100" */
	const char *json; /* its text */
};

/* Ends with { NULL, NULL }. */
extern const struct ferry_builtin_target ferry_builtin_targets[];

#endif
