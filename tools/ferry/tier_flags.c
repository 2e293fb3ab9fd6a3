#include "tier_flags.h"
#include "cli_args.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct tier_given {
	const char *spec, *topology, *nvme_dir;
	size_t host_mem;
};
static struct tier_given given;

#define AT(field) offsetof(struct tier_given, field)
const struct cli_flag ferry_cli_tier_flags[] = {
	{ .name = "--host-tier", .value = "KIND=TIER,...", .type = CLI_STRING, .at = AT(spec),
	  .help = "where host state lives; KIND: activations, params,\n"
	  "grads, optimizer, all; TIER: dram, node:N, cxl (CPU-less\n"
	  "nodes, interleaved), interleave:N*W+M*V, nvme (streamed state),\n"
	  "auto (default: what the CPU computes on in DRAM, streamed\n"
	  "state on CXL, what does not fit on DRAM, then NVMe);\n"
	  "off: no tiers (the backend's host memory; the default on a\n"
	  "machine without CPU-less nodes and without these flags);\n"
	  "the placements' tiers: --place adam=host(KIND=TIER,...):...,\n"
	  "activations.host=TIER or TIER+TIER... (layer by layer, in order)",
	  .section = "host memory tiers (docs/tiers.md):" },
	{ .name = "--topology", .value = "FILE", .type = CLI_STRING, .at = AT(topology),
	  .help = "simulated NUMA nodes, lines 'node ID cpus N mem SIZE'\n"
	  "(default: this machine's, from /sys/devices/system/node)" },
	{ .name = "--nvme-dir", .value = "DIR", .type = CLI_STRING, .at = AT(nvme_dir),
	  .help = "the NVMe tier's file goes there (created, sized, removed)" },
	{ .name = "--host-mem", .value = "SIZE", .type = CLI_SIZE, .at = AT(host_mem),
	  .help = "the most DRAM host state may take (default: the free\n"
	  "memory of the nodes with CPUs); offloaded activations past it\n"
	  "go to the next tier of activations.host=dram+nvme (or auto)" },
	{ NULL },
};
#undef AT

struct cli_group ferry_cli_tier_flags_group(void)
{
	return (struct cli_group){ ferry_cli_tier_flags, &given, NULL, NULL };
}

bool ferry_cli_tier_flags_given(void)
{
	return given.spec != NULL;
}

const char *ferry_cli_tier_flags_spec(void)
{
	return given.spec && strcmp(given.spec, "off") ? given.spec : NULL;
}

int ferry_cli_tier_flags_setup(const char *cmd, struct ferry_train_opts *o)
{
	struct ferry_host_tiers_opts to = { .spec = o->exec.host_tier, .topology_file = given.topology,
					    .nvme_dir = given.nvme_dir, .host_mem = given.host_mem };
	ferry_host_tiers_t h;
	bool cxl = false;

	ferry_optim_host_use(o->exec.optimizer, &to.cpu_kinds, &to.copied_kinds);

	o->exec.host_tiers = NULL;
	if (given.spec && !strcmp(given.spec, "off") && o->exec.host_tier) {
		ferry_cli_error(cmd, "--host-tier off: the placements name host tiers (%s)", o->exec.host_tier);
		return -1;
	}
	if (given.spec && !strcmp(given.spec, "off"))
		return 0; /* the backend's host memory, whatever the machine has */
	if (ferry_host_tiers_create(&to, &h) != FERRY_OK) {
		ferry_cli_fail(cmd);
		return -1;
	}
	for (int i = 0; i < ferry_host_tiers_topology(h)->n; i++) {
		const struct ferry_numa_node *nd = &ferry_host_tiers_topology(h)->node[i];

		cxl |= nd->cpus == 0 && nd->capacity > 0;
	}
	if (!o->exec.host_tier && !given.spec && !given.topology && !given.nvme_dir && !given.host_mem && !cxl) {
		ferry_host_tiers_free(h); /* one kind of memory: nothing to choose */
		return 0;
	}
	o->exec.host_tiers = h;
	return 0;
}

static void print_use(FILE *out, const struct ferry_tier_use *u)
{
	char name[160], sz[FERRY_SIZE_CHARS], cap[FERRY_SIZE_CHARS];

	fprintf(out, "  %-34s %10s of %10s free:", ferry_tier_describe(&u->tier, name, sizeof(name)),
		ferry_format_size(u->total, sz), ferry_format_size(u->capacity, cap));
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		if (u->bytes[k])
			fprintf(out, " %s %s", ferry_host_kind_name(k), ferry_format_size(u->bytes[k], sz));
	if (u->act_count)
		fprintf(out, " (layers %d-%d, %llu bytes)", u->act_first, u->act_first + u->act_count - 1,
			(unsigned long long)u->bytes[FERRY_HOST_ACTIVATIONS]);
	fprintf(out, "\n");
}

int ferry_cli_tier_flags_print_plan(FILE *out, const char *cmd, struct ferry_train_opts *o, const struct ferry_plan *plan)
{
	ferry_host_tiers_t h = o->exec.host_tiers;
	const struct ferry_topology *t;
	struct ferry_tier_report r;
	size_t kind_bytes[FERRY_HOST_KINDS];
	char sz[FERRY_SIZE_CHARS];

	if (!h)
		return 0;
	t = ferry_host_tiers_topology(h);
	fprintf(out, "\nhost tiers (%s%s):\n", t->simulated ? "simulated, " : "", t->source);
	for (int i = 0; i < t->n; i++)
		fprintf(out, "  node %d: %s, %s free\n", t->node[i].id,
			t->node[i].cpus ? "CPUs" : "no CPUs (CXL)", ferry_format_size(t->node[i].free, sz));
	if (t->nvme_free)
		fprintf(out, "  nvme: %s free (declared; --nvme-dir's disk is not asked)\n",
			ferry_format_size(t->nvme_free, sz));
	ferry_plan_host_kinds(plan, kind_bytes);
	if (ferry_host_tiers_place_layers(h, kind_bytes, plan->mem.host_act_unit, &r) != FERRY_OK) {
		fprintf(out, "does not fit: %s\n", ferry_last_error());
		return 1;
	}
	if (!r.n)
		fprintf(out, "  no host state\n");
	for (int u = 0; u < r.n; u++)
		print_use(out, &r.use[u]);
	(void)cmd;
	return 0;
}

int ferry_cli_tier_flags_check(const char *cmd, struct ferry_train_opts *o, const struct ferry_plan *plan)
{
	size_t kind_bytes[FERRY_HOST_KINDS];

	ferry_plan_host_kinds(plan, kind_bytes);
	if (!o->exec.host_tiers || ferry_host_tiers_place_layers(o->exec.host_tiers, kind_bytes,
								    plan->mem.host_act_unit, NULL) == FERRY_OK)
		return 0;
	fprintf(stderr, "ferry %s: %s\n", cmd, ferry_last_error());
	return 1;
}

void ferry_cli_tier_flags_print_placement(FILE *out, const struct ferry_train_opts *o)
{
	struct ferry_tier_report r;
	const char *mode;
	char name[160], sz[FERRY_SIZE_CHARS];

	if (!o->exec.host_tiers)
		return;
	ferry_host_tiers_report(o->exec.host_tiers, &r);
	fprintf(out, "host tiers:");
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		for (int u = 0; u < r.n && r.tier_of[k] >= 0; u++)
			if (r.use[u].bytes[k] && (u == r.tier_of[k] || r.use[u].act_count))
				fprintf(out, " %s %s on %s;", ferry_host_kind_name(k), ferry_format_size(r.use[u].bytes[k], sz),
					ferry_tier_describe(&r.use[u].tier, name, sizeof(name)));
	if (!r.n)
		fprintf(out, " no host state;");
	mode = ferry_host_tiers_nvme_mode(o->exec.host_tiers);
	fprintf(out, "%s%s%s\n", mode ? " NVMe file: " : "", mode ? mode : "",
		ferry_host_tiers_topology(o->exec.host_tiers)->simulated ? " (simulated topology: not bound)" : "");
}

void ferry_cli_tier_flags_print_peaks(FILE *out, const struct ferry_train_opts *o)
{
	struct ferry_tier_report plan, peak;
	char name[160];

	if (!o->exec.host_tiers)
		return;
	ferry_host_tiers_report(o->exec.host_tiers, &plan);
	if (plan.act_tiers < 2)
		return;
	ferry_host_tiers_peaks(o->exec.host_tiers, &peak);
	fprintf(out, "host tier peaks (bytes, measured / planned):");
	for (int u = 0; u < plan.n; u++) {
		uint64_t got = 0;

		for (int p = 0; p < peak.n; p++)
			if (!memcmp(&peak.use[p].tier, &plan.use[u].tier, sizeof(plan.use[u].tier)))
				got = peak.use[p].total;
		fprintf(out, " %s %llu / %llu;", ferry_tier_describe(&plan.use[u].tier, name, sizeof(name)),
			(unsigned long long)got, (unsigned long long)plan.use[u].total);
	}
	fprintf(out, "\n");
}

void ferry_cli_tier_flags_release(struct ferry_train_opts *o)
{
	ferry_host_tiers_free(o->exec.host_tiers);
	o->exec.host_tiers = NULL;
}
