/*
 * Host memory tiers side by side: copy bandwidth between the device and
 * memory on each tier (ferry_memcpy_async on a ferry stream, as the offload
 * engine copies; on the NVMe tier, the file I/O the engine emits instead),
 * and the fused CPU AdamW with all its state (param, grad, m, v) on each
 * tier, as `--offload-optimizer cpu` runs it.
 *
 *   bench_tiers [--tiers dram,node:0,cxl,interleave:0*3+1,nvme] [--topology FILE]
 *               [--nvme-dir DIR] [--backend cpu|cuda] [--size MiB] [--params N]
 *               [--rounds R]
 *
 * Defaults: the tiers dram, every single node, cxl when there are CPU-less
 * nodes and nvme when --nvme-dir is given; 256 MiB copies; 16M parameters
 * (448 MiB of AdamW state); 5 rounds; GB/s (1e9 bytes/s) and ms are medians.
 * "no tier": the backend's host memory (ferry_host_alloc) for copies, malloc for
 * AdamW (first touch), for reference.
 * AdamW moves 28 bytes per parameter.  Copies on the CPU backend are
 * memcpy between host memory and its arena; on CUDA, DMA to and from the
 * tier memory registered with cudaHostRegister.
 */
#include "ferry/backend.h"
#include "ferry/tier.h"
#include "optim/cpu_adamw.h"
#include "tier/nvme_tier.h"
#include "core/error.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 15
#define MAX_TIERS 16

struct args {
	char tiers[MAX_TIERS][64];
	int n_tiers;
	const char *topology, *nvme_dir, *backend;
	size_t size;
	long params;
	int rounds;
};

static int usage(int rc)
{
	printf("usage: bench_tiers [--tiers T1,T2,...] [--topology FILE] [--nvme-dir DIR] [--backend cpu|cuda]\n"
	       "                   [--size MiB] [--params N] [--rounds R]\n\n"
	       "Copy bandwidth device <-> each host tier and the CPU AdamW with its state on each\n"
	       "tier (defaults: dram, each node, cxl if present, nvme with --nvme-dir; 256 MiB;\n"
	       "16M parameters; 5 rounds).\n");
	return rc;
}

static void die(const char *what)
{
	fprintf(stderr, "bench_tiers: %s: %s\n", what, ferry_last_error());
	exit(1);
}

static void split_tiers(struct args *a, const char *list)
{
	char buf[1024], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	a->n_tiers = 0;
	for (char *t = strtok_r(buf, ",", &save); t && a->n_tiers < MAX_TIERS; t = strtok_r(NULL, ",", &save))
		snprintf(a->tiers[a->n_tiers++], sizeof(a->tiers[0]), "%s", t);
}

/* The default tiers: dram, each node, cxl if any node is CPU-less, nvme. */
static void default_tiers(struct args *a)
{
	struct ferry_topology t;
	bool cxl = false;

	if ((a->topology ? ferry_topology_load(a->topology, &t) : ferry_topology_discover(NULL, &t)) != FERRY_OK)
		die("topology");
	snprintf(a->tiers[a->n_tiers++], sizeof(a->tiers[0]), "dram");
	for (int i = 0; i < t.n && a->n_tiers < MAX_TIERS - 2; i++) {
		snprintf(a->tiers[a->n_tiers++], sizeof(a->tiers[0]), "node:%d", t.node[i].id);
		cxl |= t.node[i].cpus == 0;
	}
	if (cxl)
		snprintf(a->tiers[a->n_tiers++], sizeof(a->tiers[0]), "cxl");
	if (a->nvme_dir)
		snprintf(a->tiers[a->n_tiers++], sizeof(a->tiers[0]), "nvme");
}

static int parse(int argc, char **argv, struct args *a)
{
	const char *list = NULL;

	memset(a, 0, sizeof(*a));
	a->backend = "cpu";
	a->size = (size_t)256 << 20;
	a->params = 16l << 20;
	a->rounds = 5;
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i];

		if (!strcmp(f, "--help") || !strcmp(f, "-h"))
			return usage(0);
		if (i + 1 >= argc)
			return usage(2);
		const char *v = argv[++i];

		if (!strcmp(f, "--tiers")) list = v;
		else if (!strcmp(f, "--topology")) a->topology = v;
		else if (!strcmp(f, "--nvme-dir")) a->nvme_dir = v;
		else if (!strcmp(f, "--backend")) a->backend = v;
		else if (!strcmp(f, "--size")) a->size = (size_t)atol(v) << 20;
		else if (!strcmp(f, "--params")) a->params = atol(v);
		else if (!strcmp(f, "--rounds")) a->rounds = atoi(v);
		else return usage(2);
	}
	if (!a->size || a->params < 1024 || a->rounds < 1 || a->rounds > MAX_ROUNDS) {
		fprintf(stderr, "bench_tiers: --size >= 1, --params >= 1024, --rounds 1 to %d\n", MAX_ROUNDS);
		return 2;
	}
	if (list)
		split_tiers(a, list);
	else
		default_tiers(a);
	return -1;
}

/* Tiers with every kind on `tier` (NVMe holds activations only). */
static ferry_host_tiers_t tiers_on(const struct args *a, const char *tier, enum ferry_host_kind kind, size_t bytes)
{
	char spec[128];
	size_t kinds[FERRY_HOST_KINDS] = { 0 };
	bool nvme = !strcmp(tier, "nvme");
	struct ferry_host_tiers_opts o = { .spec = spec, .topology_file = a->topology, .nvme_dir = a->nvme_dir };
	struct ferry_places cpu; /* AdamW on host threads: the CPU computes on its state */
	ferry_host_tiers_t h;

	ferry_places_default(&cpu);
	if (ferry_places_parse("adam=host:cpu", &cpu) != FERRY_OK)
		die(tier);
	ferry_places_host_use(&cpu, &o.cpu_kinds, &o.copied_kinds);

	snprintf(spec, sizeof(spec), "%s=%s", nvme ? "activations" : "all", tier);
	kinds[kind] = bytes;
	if (ferry_host_tiers_create(&o, &h) != FERRY_OK)
		die(tier);
	if (ferry_host_tiers_place(h, kinds, NULL) != FERRY_OK)
		die(tier);
	return h;
}

/* Seconds for one copy of size bytes each way; host NULL: libc memory. */
static void time_copies(const struct args *a, ferry_backend_t be, const char *tier, double out[2])
{
	double t[2][MAX_ROUNDS];
	ferry_host_tiers_t h = tier ? tiers_on(a, tier, FERRY_HOST_ACTIVATIONS, a->size) : NULL;
	ferry_buffer_t dev;
	ferry_stream_t s;
	void *host = NULL;
	struct ferry_nvme_file *f = NULL;
	uint64_t off = 0;

	if (ferry_buffer_alloc(be, a->size, &dev) || ferry_stream_create(be, "bench", &s))
		die("device buffer");
	if (h ? ferry_host_tiers_alloc(h, be, FERRY_HOST_ACTIVATIONS, a->size, &host) : ferry_host_alloc(be, a->size, &host))
		die("tier memory");
	f = h ? ferry_host_tiers_nvme_at(h, host, &off) : NULL;
	out[0] = out[1] = 0;
	if (f && strcmp(ferry_backend_name(be), "cpu")) /* device memory is not host memory */
		goto done;
	if (!f)
		memset(host, 1, a->size);
	for (int r = 0; r < a->rounds; r++)
		for (int d = 0; d < 2; d++) {
			double t0 = now_s();
			ferry_status st;

			if (f) /* the CPU backend's device memory is host memory */
				st = d ? ferry_nvme_write(f, off, ferry_buffer_ptr(dev), a->size)
				       : ferry_nvme_read(f, off, ferry_buffer_ptr(dev), a->size);
			else
				st = ferry_memcpy_async(s, d ? host : ferry_buffer_ptr(dev), d ? ferry_buffer_ptr(dev) : host,
							a->size, d ? FERRY_COPY_D2H : FERRY_COPY_H2D);
			if (st || ferry_stream_synchronize(s))
				die("copy");
			t[d][r] = now_s() - t0;
		}
	for (int d = 0; d < 2; d++)
		out[d] = a->size / median(t[d], a->rounds) / 1e9;
done:
	if (h)
		ferry_host_tiers_release(h, host);
	else
		ferry_host_free(be, host);
	ferry_host_tiers_free(h);
	ferry_stream_free(s);
	ferry_buffer_free(dev);
}

/* Median ms of one AdamW step with its four arrays on the tier. */
static double time_adamw(const struct args *a, const char *tier)
{
	size_t bytes = (size_t)a->params * sizeof(float);
	ferry_host_tiers_t h = tier ? tiers_on(a, tier, FERRY_HOST_OPTIMIZER, 4 * bytes) : NULL;
	float *arr[4];
	double t[MAX_ROUNDS];

	for (int i = 0; i < 4; i++) {
		arr[i] = NULL;
		if (h ? ferry_host_tiers_alloc(h, NULL, FERRY_HOST_OPTIMIZER, bytes, (void **)&arr[i])
		      : !(arr[i] = malloc(bytes)))
			die("AdamW state");
		for (long j = 0; j < a->params; j++)
			arr[i][j] = 1e-3f * (float)(j % 1000);
	}
	for (int r = 0; r <= a->rounds; r++) {
		struct ferry_cpu_adamw_args x = { .param = arr[0], .grad = arr[1], .m = arr[2], .v = arr[3],
						  .n = a->params, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
						  .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1, .step = r + 1 };
		double t0 = now_s();

		if (ferry_cpu_adamw_step(&x))
			die("AdamW");
		if (r) /* the first is a warm-up */
			t[r - 1] = now_s() - t0;
	}
	for (int i = 0; i < 4; i++)
		h ? ferry_host_tiers_release(h, arr[i]) : free(arr[i]);
	ferry_host_tiers_free(h);
	return median(t, a->rounds) * 1e3;
}

int main(int argc, char **argv)
{
	struct args a;
	int rc = parse(argc, argv, &a);
	ferry_backend_t be;

	if (rc >= 0)
		return rc;
	if (ferry_backend_open(a.backend, NULL, &be) != FERRY_OK)
		die(a.backend);
	printf("%s; %zu MiB copies, AdamW over %ld parameters (%zu MiB of state), %d rounds%s\n",
	       ferry_backend_description(be), a.size >> 20, a.params, (size_t)a.params * 16 >> 20, a.rounds,
	       a.topology ? " (simulated topology: memory not bound)" : "");
	printf("  %-26s %12s %12s %12s %10s\n", "tier", "to tier GB/s", "from GB/s", "AdamW ms", "AdamW GB/s");
	for (int i = -1; i < a.n_tiers; i++) {
		const char *tier = i < 0 ? NULL : a.tiers[i];
		double gbs[2], ms = 0;

		time_copies(&a, be, tier, gbs);
		if (!tier || strcmp(tier, "nvme"))
			ms = time_adamw(&a, tier);
		if (gbs[0] > 0)
			printf("  %-26s %12.2f %12.2f", tier ? tier : "no tier", gbs[1], gbs[0]);
		else /* the NVMe tier on a GPU: staged copies, measured in training */
			printf("  %-26s %12s %12s", tier, "-", "-");
		if (ms > 0)
			printf(" %12.2f %10.2f\n", ms, 28.0 * a.params / (ms * 1e-3) / 1e9);
		else
			printf(" %12s %10s\n", "-", "-");
	}
	ferry_backend_close(be);
	return 0;
}
