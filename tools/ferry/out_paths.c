#include "out_paths.h"
#include "ferry/hf_checkpoint.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_OUTS 8

struct out {
	const char *flag; /* "--json", "the state file of --save" */
	char path[PATH_MAX + 64];
};

/* The real path a file would have: that of the longest leading part of
 * path that is there, plus the rest as written ("a/../b" not there is
 * taken as written); "" when even "." cannot be resolved. */
static void real_of(const char *path, char *out, size_t n)
{
	char head[PATH_MAX + 64], *r = NULL, *slash;
	const char *rest = "";

	out[0] = 0;
	snprintf(head, sizeof(head), "%s", path);
	while (!(r = realpath(head[0] ? head : ".", NULL))) {
		slash = strrchr(head, '/');
		if (!head[0])
			return;
		rest = path + (slash ? slash - head + 1 : 0);
		if (slash == head)
			head[1] = 0;
		else if (slash)
			*slash = 0;
		else
			head[0] = 0;
	}
	snprintf(out, n, "%s%s%s", strcmp(r, "/") ? r : "", *rest ? "/" : "", rest);
	free(r);
}

static bool same(const char *a, const char *b)
{
	struct stat sa, sb;
	char ra[PATH_MAX + 64], rb[PATH_MAX + 64];

	if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	real_of(a, ra, sizeof(ra));
	real_of(b, rb, sizeof(rb));
	return ra[0] && !strcmp(ra, rb);
}

/* path with runs of slashes as one and no trailing one ("dir//a/" is
 * "dir/a") */
static void add(struct out *outs, int *n, const char *flag, const char *path)
{
	char *p = outs[*n].path;
	size_t k = 0;

	if (*n >= MAX_OUTS || !path)
		return;
	for (const char *c = path; *c && k + 1 < sizeof(outs[*n].path); c++)
		if (*c != '/' || !k || p[k - 1] != '/')
			p[k++] = *c;
	while (k > 1 && p[k - 1] == '/')
		k--;
	p[k] = 0;
	outs[*n].flag = flag;
	(*n)++;
}

/* The files a save to path writes. */
static void add_save(struct out *outs, int *n, const char *path, bool hf)
{
	static const char *const hf_files[] = { FERRY_HF_CONFIG_NAME, FERRY_HF_WEIGHTS_NAME, FERRY_HF_STATE_NAME };
	char file[PATH_MAX + 64];

	if (!path)
		return;
	if (!hf) {
		add(outs, n, "--save", path);
		if (ferry_checkpoint_state_path(path, false, file, sizeof(file)) == FERRY_OK)
			add(outs, n, "the state file of --save", file);
		return;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(file, sizeof(file), "%s/%s", path, hf_files[i]);
		add(outs, n, "a file of --save", file);
	}
}

int out_paths_check(const char *cmd, const char *json, const char *trace, const char *save, bool hf)
{
	struct out outs[MAX_OUTS];
	int n = 0;

	add(outs, &n, "--json", json);
	add(outs, &n, "--trace", trace);
	add_save(outs, &n, save, hf);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (same(outs[i].path, outs[j].path)) {
				fprintf(stderr, "ferry %s: %s %s and %s %s are one file: one would overwrite the "
					"other; give them different paths\n", cmd, outs[i].flag, outs[i].path,
					outs[j].flag, outs[j].path);
				return 1;
			}
	return 0;
}
