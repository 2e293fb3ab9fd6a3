#include "plan_ranks.h"
#include "ferry/ferry.h"

#include <stdlib.h>

int plan_ranks_make(const char *cmd, const struct ferry_model_config *cfg, int B, int T,
		    const struct ferry_exec_opts *o, struct plan_ranks *r)
{
	struct ferry_plan *plan = malloc(sizeof(*plan));

	r->device = calloc((size_t)r->ranks, sizeof(size_t));
	r->host = calloc((size_t)r->ranks, sizeof(size_t));
	r->max_device = 0;
	if (!plan || !r->device || !r->host) {
		free(plan);
		fprintf(stderr, "ferry %s: out of memory\n", cmd);
		return 1;
	}
	for (int k = 0; k < r->ranks; k++) {
		if (ferry_model_rank_plan(cfg, B, T, o, r->ranks, k, plan) != FERRY_OK) {
			free(plan);
			fprintf(stderr, "ferry %s: --ranks %d: %s\n", cmd, r->ranks, ferry_last_error());
			return 1;
		}
		r->device[k] = plan->mem.peak_bytes;
		r->host[k] = plan->mem.host_alloc_bytes;
		if (r->device[k] > r->max_device)
			r->max_device = r->device[k];
	}
	free(plan);
	return 0;
}

void plan_ranks_free(struct plan_ranks *r)
{
	free(r->device);
	free(r->host);
	r->device = r->host = NULL;
}

/* The ranks from k on with k's bytes: the end of the run. */
static int same_run(const struct plan_ranks *r, int k)
{
	int e = k + 1;

	while (e < r->ranks && r->device[e] == r->device[k] && r->host[e] == r->host[k])
		e++;
	return e;
}

/* Machine j's ranks [*lo, *hi) and their host bytes (on the CPU backend
 * with the device arenas, which are host memory there). */
static size_t machine_bytes(const struct plan_ranks *r, int j, int *lo, int *hi, size_t *with_device)
{
	size_t host = 0;

	*lo = j * r->per_node;
	*hi = *lo + r->per_node < r->ranks ? *lo + r->per_node : r->ranks;
	*with_device = 0;
	for (int k = *lo; k < *hi; k++) {
		host += r->host[k];
		*with_device += r->host[k] + r->device[k];
	}
	return host;
}

static int machines(const struct plan_ranks *r)
{
	return (r->ranks + r->per_node - 1) / r->per_node;
}

static void print_machines(FILE *f, const struct plan_ranks *r)
{
	char s[FERRY_SIZE_CHARS];

	fprintf(f, "\nhost memory per machine (--ranks-per-node %d, %d machine%s; a rank is a process of its own, "
		   "so nothing is shared between a machine's ranks):\n", r->per_node, machines(r), machines(r) == 1 ? "" : "s");
	for (int j = 0; j < machines(r); j++) {
		int lo, hi;
		size_t dev, host = machine_bytes(r, j, &lo, &hi, &dev);

		fprintf(f, "  machine %-4d ranks %d-%d: %zu bytes (%s)", j, lo, hi - 1, host, ferry_format_size(host, s));
		if (r->cpu)
			fprintf(f, "; with the ranks' device arenas, host memory on the CPU backend: %zu bytes (%s)",
				dev, ferry_format_size(dev, s));
		fprintf(f, "\n");
	}
}

void plan_ranks_print_text(FILE *f, const struct plan_ranks *r)
{
	char d[FERRY_SIZE_CHARS], h[FERRY_SIZE_CHARS];

	fprintf(f, "\nper rank (%d data-parallel ranks, --zero %d; device: the peak above, host: the buffers as "
		   "allocated, the pinned pool and each other buffer rounded up to a 4 KiB page):\n", r->ranks, r->zero);
	fprintf(f, "  %-12s %18s %12s %18s %12s\n", "ranks", "device bytes", "", "host bytes", "");
	for (int k = 0, e; k < r->ranks; k = e) {
		char who[32];

		e = same_run(r, k);
		snprintf(who, sizeof(who), e - k > 1 ? "%d-%d" : "%d", k, e - 1);
		fprintf(f, "  %-12s %18zu %12s %18zu %12s\n", who, r->device[k], ferry_format_size(r->device[k], d),
			r->host[k], ferry_format_size(r->host[k], h));
	}
	if (same_run(r, 0) == r->ranks)
		fprintf(f, "every rank the same%s\n", r->zero ? ": ZeRO-1 pads the last rank's slice to the others' size"
							       : "");
	print_machines(f, r);
	fprintf(f, "not counted: each rank's staging of its batch and losses, its data loader's buffers, MPI's and "
		   "NCCL's own memory, the program itself\n");
}

void plan_ranks_print_json(FILE *f, const struct plan_ranks *r)
{
	fprintf(f, "\"ranks\": [");
	for (int k = 0; k < r->ranks; k++)
		fprintf(f, "%s{\"rank\": %d, \"device_bytes\": %zu, \"host_bytes\": %zu}", k ? ", " : "", k, r->device[k],
			r->host[k]);
	fprintf(f, "],\n\"ranks_per_node\": %d, \"machines\": [", r->per_node);
	for (int j = 0; j < machines(r); j++) {
		int lo, hi;
		size_t dev, host = machine_bytes(r, j, &lo, &hi, &dev);

		fprintf(f, "%s{\"machine\": %d, \"first_rank\": %d, \"ranks\": %d, \"host_bytes\": %zu", j ? ", " : "", j,
			lo, hi - lo, host);
		if (r->cpu)
			fprintf(f, ", \"host_bytes_with_device\": %zu", dev);
		fprintf(f, "}");
	}
	fprintf(f, "]");
}
