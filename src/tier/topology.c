/*
 * NUMA topology: discovered from sysfs (each nodeN/ folder's cpulist and
 * meminfo, the files libnuma reads too) or loaded from a description file
 * of simulated nodes.
 */
#include "ferry/tier.h"
#include "core/error.h"
#include "core/size.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYSFS_NODES "/sys/devices/system/node"
#define WEIGHTED_INTERLEAVE_DIR "/sys/kernel/mm/mempolicy/weighted_interleave"

const struct ferry_numa_node *ferry_topology_node(const struct ferry_topology *t, int id)
{
	for (int i = 0; i < t->n; i++)
		if (t->node[i].id == id)
			return &t->node[i];
	return NULL;
}

/* CPUs in a cpulist ("0-3,8,10-11"), each marked node in node_of_cpu
 * (when given, for CPUs below n_cpus); -1 when it is not one. */
static int walk_cpulist(const char *s, int node, int *node_of_cpu, int n_cpus)
{
	int n = 0;

	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b;

		if (end == s || a < 0)
			return -1;
		b = a;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a)
				return -1;
		}
		n += (int)(b - a + 1);
		for (long c = a; node_of_cpu && c <= b && c < n_cpus; c++)
			node_of_cpu[c] = node;
		s = end;
		if (*s == ',')
			s++;
	}
	return n;
}

static int read_small_file(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");
	size_t got;

	if (!f)
		return -1;
	got = fread(buf, 1, n - 1, f);
	buf[got] = '\0';
	fclose(f);
	return 0;
}

/* "Node 0 MemTotal:  21325600 kB": the kB of field in meminfo's text. */
static uint64_t meminfo_field(const char *text, const char *field)
{
	const char *p = strstr(text, field);
	unsigned long long kb;

	if (!p || sscanf(p + strlen(field), " %llu", &kb) != 1)
		return 0;
	return (uint64_t)kb * 1024;
}

static ferry_status read_node(const char *dir, int id, struct ferry_numa_node *node)
{
	char path[512], text[4096];

	node->id = id;
	snprintf(path, sizeof(path), "%s/node%d/cpulist", dir, id);
	if (read_small_file(path, text, sizeof(text)) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: %s", path, strerror(errno));
	node->cpus = walk_cpulist(text, id, NULL, 0);
	if (node->cpus < 0)
		return ferry_error(FERRY_ERR_FORMAT, "%s: not a CPU list: '%.40s'", path, text);
	snprintf(path, sizeof(path), "%s/node%d/meminfo", dir, id);
	if (read_small_file(path, text, sizeof(text)) != 0)
		return ferry_error(FERRY_ERR_IO, "%s: %s", path, strerror(errno));
	node->capacity = meminfo_field(text, "MemTotal:");
	node->free = meminfo_field(text, "MemFree:");
	return FERRY_OK;
}

static int compare_nodes(const void *a, const void *b)
{
	return ((const struct ferry_numa_node *)a)->id - ((const struct ferry_numa_node *)b)->id;
}

/* No NUMA in the kernel: the whole machine is node 0. */
static void single_node(struct ferry_topology *t)
{
	long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
	long page = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);

	t->n = 1;
	t->node[0] = (struct ferry_numa_node){ 0, cpus > 0 ? (int)cpus : 1,
					       (uint64_t)(pages > 0 ? pages : 0) * (uint64_t)page,
					       (uint64_t)(avail > 0 ? avail : 0) * (uint64_t)page };
}

ferry_status ferry_topology_discover(const char *sysfs_dir, struct ferry_topology *t)
{
	const char *dir = sysfs_dir ? sysfs_dir : SYSFS_NODES;
	struct dirent *d;
	struct stat sb;
	ferry_status st = FERRY_OK;
	DIR *dp;

	memset(t, 0, sizeof(*t));
	snprintf(t->source, sizeof(t->source), "%s", dir);
	t->weighted_interleave = !sysfs_dir && stat(WEIGHTED_INTERLEAVE_DIR, &sb) == 0;
	dp = opendir(dir);
	if (!dp) {
		if (sysfs_dir)
			return ferry_error(FERRY_ERR_IO, "topology: %s: %s", dir, strerror(errno));
		single_node(t);
		return FERRY_OK;
	}
	while (!st && (d = readdir(dp))) {
		char *end;
		long id;

		if (strncmp(d->d_name, "node", 4) || !isdigit((unsigned char)d->d_name[4]))
			continue;
		id = strtol(d->d_name + 4, &end, 10);
		if (*end || id >= 1 << 20)
			continue;
		if (t->n == FERRY_MAX_NODES)
			st = ferry_error(FERRY_ERR_UNSUPPORTED, "topology: more than %d NUMA nodes in %s",
					 FERRY_MAX_NODES, dir);
		else
			st = read_node(dir, (int)id, &t->node[t->n++]);
	}
	closedir(dp);
	if (st)
		return st;
	if (t->n == 0)
		return ferry_error(FERRY_ERR_FORMAT, "topology: no nodeN folders in %s", dir);
	qsort(t->node, (size_t)t->n, sizeof(t->node[0]), compare_nodes);
	return FERRY_OK;
}

ferry_status ferry_topology_cpu_nodes(const struct ferry_topology *t, int *node_of_cpu, int n_cpus)
{
	char path[512], text[4096];

	for (int c = 0; c < n_cpus; c++)
		node_of_cpu[c] = t->n == 1 && !t->simulated ? t->node[0].id : -1;
	if (t->n == 1 || t->simulated) /* one node (or none in sysfs); a simulated one binds nothing */
		return FERRY_OK;
	for (int i = 0; i < t->n; i++) {
		snprintf(path, sizeof(path), "%s/node%d/cpulist", t->source, t->node[i].id);
		if (read_small_file(path, text, sizeof(text)) != 0)
			return ferry_error(FERRY_ERR_IO, "%s: %s", path, strerror(errno));
		if (walk_cpulist(text, t->node[i].id, node_of_cpu, n_cpus) < 0)
			return ferry_error(FERRY_ERR_FORMAT, "%s: not a CPU list: '%.40s'", path, text);
	}
	return FERRY_OK;
}

/* "nvme free SIZE": the room the NVMe tier plans with, so a capacity check
 * gives the same answer on any disk. */
static ferry_status parse_nvme_line(const char *path, int line, char *s, struct ferry_topology *t)
{
	char *save = NULL, *key, *val, *extra;

	strtok_r(s, " \t", &save); /* "nvme" */
	key = strtok_r(NULL, " \t", &save);
	val = strtok_r(NULL, " \t", &save);
	extra = strtok_r(NULL, " \t", &save);
	if (!key || strcmp(key, "free") || !val || extra || !(t->nvme_free = ferry_parse_size(val)))
		return ferry_error(FERRY_ERR_FORMAT, "%s:%d: the NVMe line is 'nvme free SIZE' (a size like 2T)",
				   path, line);
	return FERRY_OK;
}

/* One "node ID cpus N mem SIZE [free SIZE]" line into t. */
static ferry_status parse_node_line(const char *path, int line, char *s, struct ferry_topology *t)
{
	struct ferry_numa_node nd = { .id = -1, .cpus = -1 };
	char *save = NULL, *key = strtok_r(s, " \t", &save);
	bool have_free = false;

	while (key) {
		char *val = strtok_r(NULL, " \t", &save);

		if (!val)
			return ferry_error(FERRY_ERR_FORMAT, "%s:%d: '%s' needs a value", path, line, key);
		if (!strcmp(key, "node") || !strcmp(key, "cpus")) {
			char *end;
			long v = strtol(val, &end, 10);

			if (*end || v < 0 || v >= 1 << 20)
				return ferry_error(FERRY_ERR_FORMAT, "%s:%d: %s '%s': a count", path, line, key, val);
			*(!strcmp(key, "node") ? &nd.id : &nd.cpus) = (int)v;
		} else if (!strcmp(key, "mem") || !strcmp(key, "free")) {
			uint64_t v = ferry_parse_size(val);

			if (!v)
				return ferry_error(FERRY_ERR_FORMAT, "%s:%d: %s '%s': a size like 64G", path, line,
						   key, val);
			*(!strcmp(key, "mem") ? &nd.capacity : &nd.free) = v;
			have_free |= !strcmp(key, "free");
		} else {
			return ferry_error(FERRY_ERR_FORMAT, "%s:%d: unknown key '%s' (node, cpus, mem, free)",
					   path, line, key);
		}
		key = strtok_r(NULL, " \t", &save);
	}
	if (nd.id < 0 || nd.cpus < 0 || !nd.capacity)
		return ferry_error(FERRY_ERR_FORMAT, "%s:%d: a node needs node ID cpus N mem SIZE", path, line);
	if (!have_free || nd.free > nd.capacity)
		nd.free = nd.capacity;
	if (ferry_topology_node(t, nd.id))
		return ferry_error(FERRY_ERR_FORMAT, "%s:%d: node %d declared twice", path, line, nd.id);
	if (t->n == FERRY_MAX_NODES)
		return ferry_error(FERRY_ERR_UNSUPPORTED, "%s:%d: more than %d nodes", path, line, FERRY_MAX_NODES);
	t->node[t->n++] = nd;
	return FERRY_OK;
}

ferry_status ferry_topology_load(const char *path, struct ferry_topology *t)
{
	FILE *f;
	char *buf = NULL;
	size_t cap = 0;
	int line = 0;
	ferry_status st = FERRY_OK;

	memset(t, 0, sizeof(*t));
	t->simulated = true;
	snprintf(t->source, sizeof(t->source), "%s", path);
	f = fopen(path, "r");
	if (!f)
		return ferry_error(FERRY_ERR_IO, "--topology %s: %s", path, strerror(errno));
	/* whole lines, however long: a fixed buffer split a long comment and
	 * made its tail (a commented-out node) a line of its own */
	while (!st && getline(&buf, &cap, f) >= 0) {
		char *hash = strchr(buf, '#'), *s = buf;

		line++;
		if (hash)
			*hash = '\0';
		buf[strcspn(buf, "\r\n")] = '\0';
		while (isspace((unsigned char)*s))
			s++;
		if (!strncmp(s, "nvme", 4) && (!s[4] || isspace((unsigned char)s[4])))
			st = parse_nvme_line(path, line, s, t);
		else if (*s)
			st = parse_node_line(path, line, s, t);
	}
	free(buf);
	fclose(f);
	if (!st && t->n == 0)
		st = ferry_error(FERRY_ERR_FORMAT, "--topology %s: no nodes (lines: node ID cpus N mem SIZE)", path);
	if (!st && t->n > 0) {
		bool cpus = false;

		for (int i = 0; i < t->n; i++)
			cpus |= t->node[i].cpus > 0;
		if (!cpus)
			st = ferry_error(FERRY_ERR_FORMAT, "--topology %s: no node has CPUs", path);
	}
	if (!st)
		qsort(t->node, (size_t)t->n, sizeof(t->node[0]), compare_nodes);
	return st;
}
