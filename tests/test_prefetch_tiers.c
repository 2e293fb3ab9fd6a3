/*
 * Offloaded checkpoints over host tiers, each tier loaded its own depth
 * ahead (activations.prefetch=D1+D2, and auto), on a calibration made by
 * hand so every figure is known: each compute task takes 1 ms (its gap;
 * no op is measured), a host<->device copy of one layer 0.1 ms.
 *  - auto: the depth of each tier is ceil(read / a layer's backward) from
 *    the tier's rate, the layer's backward counted here from the printed
 *    schedule (its compute tasks x 1 ms); a faster tier stays at 1;
 *  - --device-mem holds the deepest tier shallower until the plan fits,
 *    one ring slot (one layer input's bytes) per layer of depth;
 *  - the schedule loads each layer after the backward of the layer its
 *    tier's depth ahead;
 *  - the cost model prices a layer's copies at its own tier: over DRAM and
 *    a CPU-less node (copies at half speed by default), the copies of the
 *    node's layers take twice their DRAM time, the others' DRAM's;
 *  - deeper NVMe loads expose less copy time than depth 1.
 */
#include "ferry/cost.h"
#include "ferry/model.h"
#include "ferry/tier.h"
#include "cost/calibration.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { B = 1, T = 16, L = 8 };
#define GAP 1e-3
#define COPY 1e-4

static char topo_path[512], nvme_dir[512];
static struct ferry_model_config cfg = { .arch = "llama", .max_seq = T, .vocab = 67, .layers = L, .heads = 4,
					 .kv_heads = 2, .channels = 32, .ffn = 48 };
static const size_t LAYER = (size_t)B * T * 32 * sizeof(float); /* one checkpoint */

static struct ferry_calibration *hand_calibration(double nvme_read_Bps)
{
	struct ferry_calibration *c = ferry_calib_new();

	CHECK(c != NULL, "calibration");
	if (!c)
		exit(test_exit_code());
	c->task_gap_s = GAP;
	ferry_calib_add_copy(c, &(struct ferry_calib_copy){ LAYER, COPY, COPY, COPY, COPY });
	c->nvme_read_Bps = nvme_read_Bps;
	c->nvme_write_Bps = 1e12; /* writes never decide here */
	return c;
}

static ferry_host_tiers_t tiers(const char *spec, size_t host_mem)
{
	struct ferry_host_tiers_opts to = { .spec = spec, .topology_file = topo_path, .nvme_dir = nvme_dir,
					    .host_mem = host_mem }; /* AdamW on the device */
	ferry_host_tiers_t h = NULL;

	CHECK(ferry_host_tiers_create(&to, &h) == FERRY_OK, "tiers %s: %s", spec, ferry_last_error());
	return h;
}

static struct ferry_exec_opts opts(ferry_host_tiers_t h, int d0, int d1)
{
	struct ferry_exec_opts o = { .policy = "custom:decoder_layer_input=offload", .host_tiers = h,
				     .prefetch_depth = d0 };

	if (d1) {
		o.prefetch_tiers[0] = d0;
		o.prefetch_tiers[1] = d1;
		o.prefetch_depth = d0 > d1 ? d0 : d1;
	}
	return o;
}

/* One layer's backward as the schedule lists it: its compute tasks. */
static int backward_tasks(const struct ferry_exec_opts *o, int l)
{
	struct ferry_schedule_info s;
	int n = 0;

	CHECK(ferry_model_schedule(&cfg, B, T, o, &s) == FERRY_OK, "schedule: %s", ferry_last_error());
	for (int i = 0; i < s.n_tasks; i++) {
		const struct ferry_sched_task_info *t = &s.tasks[i];

		n += !strcmp(t->program, "backward") && !strcmp(t->stream, "compute") && t->layer == l &&
		     strcmp(t->kind, "record") && strcmp(t->kind, "wait") && strcmp(t->kind, "grads done");
	}
	ferry_schedule_info_free(&s);
	return n;
}

static size_t peak(const struct ferry_exec_opts *o)
{
	struct ferry_plan p;

	CHECK(ferry_model_plan(&cfg, B, T, o, &p) == FERRY_OK, "plan: %s", ferry_last_error());
	return p.mem.peak_bytes;
}

/* dram+nvme, two layers in DRAM: auto gives DRAM 1 and NVMe the reads'
 * depth; device memory holds it back one slot a layer. */
static void auto_depths(void)
{
	ferry_host_tiers_t h = tiers("activations=dram+nvme", 2 * LAYER);
	struct ferry_exec_opts o = opts(h, 1, 0);
	double bwd = backward_tasks(&o, L / 2) * GAP;
	/* a read of one layer takes 2.5 layers' backward: 3 ahead */
	struct ferry_calibration *c = hand_calibration((double)LAYER / (2.5 * bwd));
	struct ferry_prefetch_choice ch;
	struct ferry_exec_opts o13 = opts(h, 1, 3), o12 = opts(h, 1, 2), o11 = opts(h, 1, 1);
	size_t p13 = peak(&o13), p12 = peak(&o12), p11 = peak(&o11);

	CHECK(ferry_prefetch_auto(&cfg, B, T, &o, c, 0, &ch) == FERRY_OK, "auto: %s", ferry_last_error());
	CHECK(ch.n == 2 && ch.layers[0] == 2 && ch.layers[1] == L - 2, "two tiers, layers %d and %d", ch.layers[0],
	      ch.layers[1]);
	CHECK(fabs(ch.backward_s - bwd) < 1e-9, "a layer's backward %g s, the schedule's %g s", ch.backward_s, bwd);
	CHECK(ch.depth[0] == 1 && ch.depth[1] == 3, "depths %d+%d, want 1+3", ch.depth[0], ch.depth[1]);
	CHECK(ch.peak_bytes == p13, "its peak is the plan's with 1+3");
	CHECK(p13 - p12 == LAYER && p12 - p11 == LAYER, "a layer of depth is one slot of %zu bytes: %zu, %zu", LAYER,
	      p13 - p12, p12 - p11);
	CHECK(ferry_prefetch_auto(&cfg, B, T, &o, c, p12, &ch) == FERRY_OK && ch.depth[1] == 2 && ch.wanted[1] == 3 &&
		      ch.peak_bytes == p12, "--device-mem of the 1+2 plan: 2 (want 3), got %d", ch.depth[1]);
	CHECK(ferry_prefetch_auto(&cfg, B, T, &o, c, p12 - 1, &ch) == FERRY_OK && ch.depth[1] == 1,
	      "a byte less: 1, got %d", ch.depth[1]);
	ferry_calibration_free(c);
	ferry_host_tiers_free(h);
}

/* 1+3: each layer loaded after the backward of the layer its depth
 * ahead (the last 4 layers are the ring's, read where they are). */
static void schedule_order(void)
{
	ferry_host_tiers_t h = tiers("activations=dram+nvme", 2 * LAYER);
	struct ferry_exec_opts o = opts(h, 1, 3);
	struct ferry_schedule_info s;
	int last_done = L, loaded = 0;

	CHECK(ferry_model_schedule(&cfg, B, T, &o, &s) == FERRY_OK, "schedule: %s", ferry_last_error());
	for (int i = 0; i < s.n_tasks; i++) {
		const struct ferry_sched_task_info *t = &s.tasks[i];

		if (strcmp(t->program, "backward"))
			continue;
		if (!strcmp(t->kind, "grads done"))
			last_done = t->layer;
		if (!strcmp(t->stream, "h2d") && !strcmp(t->kind, "copy")) {
			int want = t->layer + (t->layer < 2 ? 1 : 3) + 1;

			CHECK(last_done == want, "layer %d loaded after layer %d's backward, want %d's", t->layer,
			      last_done, want);
			loaded++;
		}
	}
	CHECK(loaded == L - 4, "%d layers loaded back, want %d", loaded, L - 4);
	ferry_schedule_info_free(&s);
	ferry_host_tiers_free(h);
}

/* Copies of a layer on the CPU-less node (half DRAM's speed by default)
 * take twice as long: the prediction's copy time grows by one DRAM copy
 * time for each of them. */
static void priced_per_tier(void)
{
	ferry_host_tiers_t dram = tiers("activations=dram", 0), span = tiers("activations=dram+node:1", 2 * LAYER);
	struct ferry_exec_opts od = opts(dram, 1, 0), os = opts(span, 1, 0);
	struct ferry_calibration *c = hand_calibration(0);
	struct ferry_prediction pd, ps;
	struct ferry_schedule_info s;
	int on_node = 0;

	CHECK(ferry_model_schedule(&cfg, B, T, &os, &s) == FERRY_OK, "schedule: %s", ferry_last_error());
	for (int i = 0; i < s.n_tasks; i++)
		on_node += !strcmp(s.tasks[i].kind, "copy") && s.tasks[i].layer >= 2 &&
			   !strcmp(s.tasks[i].what, "decoder_layer_input") && s.tasks[i].bytes == LAYER &&
			   (!strcmp(s.tasks[i].stream, "h2d") || !strcmp(s.tasks[i].stream, "d2h"));
	ferry_schedule_info_free(&s);
	CHECK(ferry_model_predict(&cfg, B, T, &od, c, &pd) == FERRY_OK &&
		      ferry_model_predict(&cfg, B, T, &os, c, &ps) == FERRY_OK, "predict: %s", ferry_last_error());
	CHECK(on_node > 0 && fabs((ps.copy_s - pd.copy_s) - on_node * COPY * (1 / FERRY_TIER_CXL_COPY - 1)) < 1e-9,
	      "%d copies on the node: copy time %g s against %g s in DRAM", on_node, ps.copy_s, pd.copy_s);
	ferry_calibration_free(c);
	ferry_host_tiers_free(dram);
	ferry_host_tiers_free(span);
}

/* Slow NVMe reads: loading them 3 ahead leaves less of them exposed than
 * 1 ahead. */
static void deeper_hides_more(void)
{
	ferry_host_tiers_t h = tiers("activations=dram+nvme", 2 * LAYER);
	struct ferry_exec_opts o11 = opts(h, 1, 1), o13 = opts(h, 1, 3);
	struct ferry_calibration *c = hand_calibration((double)LAYER / (2.5 * backward_tasks(&o11, L / 2) * GAP));
	struct ferry_prediction p11, p13;

	CHECK(ferry_model_predict(&cfg, B, T, &o11, c, &p11) == FERRY_OK &&
		      ferry_model_predict(&cfg, B, T, &o13, c, &p13) == FERRY_OK, "predict: %s", ferry_last_error());
	CHECK(p13.exposed_copy_s < p11.exposed_copy_s, "exposed copies %g s at 1+3, %g s at 1+1", p13.exposed_copy_s,
	      p11.exposed_copy_s);
	ferry_calibration_free(c);
	ferry_host_tiers_free(h);
}

int main(void)
{
	const char *tmp = getenv("FERRY_TEST_TMP");
	FILE *f;

	snprintf(topo_path, sizeof(topo_path), "%s/prefetch_tiers_topology.txt", tmp ? tmp : "/tmp");
	snprintf(nvme_dir, sizeof(nvme_dir), "%s/prefetch_tiers_nvme", tmp ? tmp : "/tmp");
	mkdir(nvme_dir, 0700);
	f = fopen(topo_path, "w");
	CHECK(f != NULL, "%s", topo_path);
	if (!f)
		return test_exit_code();
	fputs("node 0 cpus 2 mem 4G\nnode 1 cpus 0 mem 1G\n", f);
	fclose(f);
	CHECK(ferry_model_config_complete(&cfg) == FERRY_OK, "config");
	auto_depths();
	schedule_order();
	priced_per_tier();
	deeper_hides_more();
	return test_exit_code();
}
