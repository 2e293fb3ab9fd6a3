/*
 * Host memory tiers change where host state lives, never what training
 * computes: on the CPU backend, training with offloaded activations and
 * AdamW's state on the host (streamed and on host threads) gives losses,
 * parameters and moments bit-identical to the same run without tiers, for
 * every tier combination: DRAM, a node, CXL (simulated nodes), weighted
 * interleave, the CXL-aware default, and the NVMe file (io_uring and
 * pread/pwrite, O_DIRECT and the page cache), which holds the master
 * weights and moments too when they are streamed.  The NVMe file exists while
 * the model does and is removed with it.
 */
#include "ferry/model.h"
#include "ferry/tier.h"
#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define STEPS 3

enum { B = 2, T = 16 };

struct result {
	float loss[STEPS];
	float *params, *mom, *var;
};

struct combo {
	const char *spec;     /* --host-tier */
	bool simulated;       /* on the simulated topology (two CXL nodes) */
	const char *nvme_io;  /* FERRY_NVME_IO, or NULL */
};

static char topo_path[512], nvme_dir[512];

static int files_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void batch(const struct ferry_model_config *cfg, int32_t *in, int32_t *tg, int s)
{
	for (int i = 0; i < B * T; i++) {
		in[i] = (i * 13 + s * 7 + i / 5) % cfg->vocab;
		tg[i] = (in[i] * 5 + 3) % cfg->vocab;
	}
}

static void run_steps(ferry_model_t m, const struct ferry_model_config *cfg, struct result *r, const char *what)
{
	struct ferry_adamw opt = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	int32_t in[B * T], tg[B * T];
	size_t n = ferry_model_num_params(m);

	r->params = TALLOC(float, n);
	r->mom = TALLOC(float, n);
	r->var = TALLOC(float, n);
	for (int s = 1; s <= STEPS; s++) {
		float norm;

		batch(cfg, in, tg, s);
		CHECK(ferry_model_step_submit(m, in, tg, B, T) == FERRY_OK &&
			      ferry_model_step_finish(m, &opt, s, &r->loss[s - 1], &norm) == FERRY_OK,
		      "%s step %d: %s", what, s, ferry_last_error());
	}
	CHECK(ferry_model_get_params(m, r->params) == FERRY_OK && ferry_model_get_opt_state(m, r->mom, r->var) ==
		      FERRY_OK, "%s: read back", what);
}

/* Trains with the combo's tiers (NULL: none); false if it could not. */
static bool train(const struct ferry_model_config *cfg, const char *policy, enum ferry_optim_place optim,
		  const struct combo *c, struct result *r)
{
	struct ferry_host_tiers_opts to = { .spec = c ? c->spec : NULL, .topology_file = c && c->simulated ? topo_path : NULL,
					    .nvme_dir = nvme_dir };
	/* depth 1: a ring of 2 slots, so most layers' activations come back
	 * from their tier (the last 2 are read where they are) */
	struct ferry_exec_opts o = { .policy = policy, .optimizer = optim, .prefetch_depth = 1 };
	ferry_backend_t be = NULL;
	ferry_model_t m = NULL;
	bool ok;

	if (c && c->nvme_io)
		setenv("FERRY_NVME_IO", c->nvme_io, 1);
	else
		unsetenv("FERRY_NVME_IO");
	ferry_optim_host_use(optim, &to.cpu_kinds, &to.copied_kinds);
	ok = !c || ferry_host_tiers_create(&to, &o.host_tiers) == FERRY_OK;
	CHECK(ok, "tiers '%s': %s", c ? c->spec : "", ferry_last_error());
	ok = ok && ferry_backend_open("cpu", NULL, &be) == FERRY_OK;
	ok = ok && ferry_model_create(be, cfg, B, T, &o, &m) == FERRY_OK;
	CHECK(ok, "create with tiers '%s': %s", c ? c->spec : "(none)", ferry_last_error());
	if (ok && c && c->spec && strstr(c->spec, "nvme") && strstr(policy, "offloaded"))
		CHECK(files_in(nvme_dir) == 1, "'%s': the NVMe file exists while the model does", c->spec);
	if (ok && (ok = ferry_model_init_random(m, 5) == FERRY_OK))
		run_steps(m, cfg, r, c ? c->spec : "no tiers");
	ferry_model_free(m);
	ferry_backend_close(be);
	ferry_host_tiers_free(o.host_tiers);
	CHECK(files_in(nvme_dir) == 0, "the NVMe file is removed with the model");
	return ok;
}

static void free_result(struct result *r)
{
	free(r->params);
	free(r->mom);
	free(r->var);
}

static void check_combos(const char *arch, const struct ferry_model_config *cfg, const char *policy,
			 enum ferry_optim_place optim)
{
	static const struct combo combos[] = {
		{ "all=dram", false, NULL },
		{ "all=node:0", false, NULL },
		{ "all=interleave:0*3", false, NULL },
		{ NULL, true, NULL }, /* the default on CXL nodes */
		{ "all=cxl", true, NULL },
		{ "activations=interleave:1*3+2,params=node:2,grads=dram,optimizer=cxl", true, NULL },
		{ "activations=nvme", false, NULL },
		{ "activations=nvme", false, "pread" },
		{ "activations=nvme,params=cxl", true, "nodirect" },
		{ "activations=nvme", false, "pread,nodirect" },
		{ "all=nvme", false, NULL }, /* streamed: params and optimizer too */
		{ "params=nvme,optimizer=nvme", true, "pread" },
	};
	size_t n = ferry_model_config_num_params(cfg);
	struct result ref, got;
	int failed = test_failed();

	if (!train(cfg, policy, optim, NULL, &ref))
		return;
	size_t n_combos = sizeof(combos) / sizeof(combos[0]) - (optim == FERRY_OPTIM_STREAM ? 0 : 1);

	for (size_t i = 0; i < n_combos; i++) {
		const char *spec = combos[i].spec ? combos[i].spec : "(default)";

		if (!train(cfg, policy, optim, &combos[i], &got))
			continue;
		CHECK(!memcmp(ref.loss, got.loss, sizeof(ref.loss)) && !memcmp(ref.params, got.params, n * 4) &&
			      !memcmp(ref.mom, got.mom, n * 4) && !memcmp(ref.var, got.var, n * 4),
		      "%s %s optimizer %d, tiers %s%s%s: not bit-identical to no tiers", arch, policy, (int)optim,
		      spec, combos[i].simulated ? " (simulated)" : "", combos[i].nvme_io ? combos[i].nvme_io : "");
		free_result(&got);
	}
	if (test_failed() == failed)
		printf("  %s %-20s optimizer %s: %zu tier combinations bit-identical, loss %.5f -> %.5f\n", arch, policy,
		       optim == FERRY_OPTIM_CPU ? "cpu" : optim == FERRY_OPTIM_STREAM ? "stream" : "device",
		       n_combos, ref.loss[0], ref.loss[STEPS - 1]);
	free_result(&ref);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	struct ferry_model_config gpt2 = { .arch = "gpt2", .max_seq = 16, .vocab = 61, .layers = 4, .heads = 2,
					   .channels = 32 };
	struct ferry_model_config llama = { .arch = "llama", .max_seq = 16, .vocab = 67, .layers = 3, .heads = 4,
					    .kv_heads = 2, .channels = 32, .ffn = 48 };
	FILE *f;

	snprintf(topo_path, sizeof(topo_path), "%s/tier_training_topology.txt", tmp ? tmp : "/tmp");
	snprintf(nvme_dir, sizeof(nvme_dir), "%s/tier_training_nvme", tmp ? tmp : "/tmp");
	mkdir(nvme_dir, 0700);
	f = fopen(topo_path, "w");
	CHECK(f != NULL, "%s", topo_path);
	if (!f)
		return test_exit_code();
	fputs("node 0 cpus 2 mem 4G\nnode 1 cpus 0 mem 1G\nnode 2 cpus 0 mem 1G\n", f);
	fclose(f);
	CHECK(files_in(nvme_dir) == 0, "%s starts empty", nvme_dir);
	CHECK(ferry_model_config_complete(&gpt2) == FERRY_OK && ferry_model_config_complete(&llama) == FERRY_OK,
	      "configs");
	check_combos("gpt2", &gpt2, "minimal_offloaded", FERRY_OPTIM_STREAM);
	check_combos("gpt2", &gpt2, "qkv_proj_offloaded", FERRY_OPTIM_CPU);
	check_combos("gpt2", &gpt2, "everything_saveable", FERRY_OPTIM_DEVICE); /* no host state */
	check_combos("llama", &llama, "minimal_offloaded", FERRY_OPTIM_CPU);
	return test_exit_code();
}
