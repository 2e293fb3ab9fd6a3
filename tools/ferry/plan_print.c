#include "plan_print.h"

#include <string.h>

#define MIB (1024.0 * 1024.0)

const char *plan_tensor_lives(const struct ferry_plan *p, int i, char *buf, size_t n)
{
	const struct ferry_plan_tensor *t = &p->tensors[i];

	if (t->device_slots == 0)
		snprintf(buf, n, "next layer's input");
	else if (t->tiled)
		snprintf(buf, n, "tile of %d rows, recomputed", p->mlp_tile);
	else if (t->stored && t->placement == FERRY_PLACE_OFFLOAD && t->device_slots == p->ring_slots)
		snprintf(buf, n, "host (device ring of %d)", t->device_slots);
	else if (t->stored && t->placement == FERRY_PLACE_OFFLOAD) /* the layer input */
		snprintf(buf, n, "host (device ring of %d + last output)", p->ring_slots);
	else if (t->stored)
		snprintf(buf, n, "device (%d slots)", t->device_slots);
	else if (t->recomputed)
		snprintf(buf, n, "recomputed");
	else
		snprintf(buf, n, "not kept (unused by backward)");
	return buf;
}

static void line(FILE *f, const char *what, size_t bytes, const char *note)
{
	fprintf(f, "  %-10s %14zu bytes %10.2f MiB%s%s\n", what, bytes, bytes / MIB, note ? "  " : "",
		note ? note : "");
}

void plan_print_text(FILE *f, const struct ferry_plan *p)
{
	const struct ferry_memory_analysis *m = &p->mem;
	char lives[64];

	fprintf(f, "plan: %s, %d layers, batch %d x %d, %s activations, policy %s, prefetch depth %d\n",
		p->model, p->L, p->B, p->T, ferry_dtype_name(p->act_dtype), p->policy, p->prefetch_depth);
	if (p->place[0])
		fprintf(f, "placement: %s\n", p->place);
	if (p->n_tier_prefetch) {
		fprintf(f, "prefetch per host tier (layers loaded ahead, in the span's order):");
		for (int i = 0; i < p->n_tier_prefetch; i++)
			fprintf(f, "%s %d layers %d ahead", i ? ";" : "", p->tier_layers[i], p->tier_prefetch[i]);
		fprintf(f, "; ring of %d slots\n", p->ring_slots);
	}
	if (p->param_ring_slots && strstr(p->place, ",params)")) /* ZeRO-3 gathers through the ring */
		fprintf(f, "parameters split over the ranks (ZeRO-3): each rank's slice on the %s, the layers' "
			   "weights gathered into a %d-layer ring\n",
			strstr(p->place, "layers.weights=host") ? "host (a layer's part staged up before its gather)"
								 : "device",
			p->param_ring_slots);
	else if (p->param_ring_slots)
		fprintf(f, "parameters offloaded: the layers' weights and gradients on the host, %d-layer weight "
			   "ring on the device\n", p->param_ring_slots);
	if (p->edge_bytes)
		fprintf(f, "embeddings offloaded: the embeddings, head and final norm on the host, one %zu-byte "
			   "edge region on the device (%lld bytes less than keeping them)\n", p->edge_bytes,
			(long long)p->edge_saved_bytes);
	if (p->mlp_tile)
		fprintf(f, "MLP tiled: %d tokens per tile, its hidden activations recomputed per tile in backward\n",
			p->mlp_tile);
	if (p->loss_tile)
		fprintf(f, "loss tiled: %d tokens per tile of the LM head and the loss, logits recomputed per tile "
			   "in backward\n", p->loss_tile);
	fprintf(f, "\ndevice memory (JAX's memory_analysis terms):\n");
	line(f, "argument", m->argument_bytes, NULL);
	line(f, "output", m->output_bytes, NULL);
	line(f, "alias", m->alias_bytes, "(arguments updated in place)");
	line(f, "temp", m->temp_bytes, NULL);
	line(f, "total", m->total_bytes, "(argument + output + temp - alias)");
	line(f, "peak", m->peak_bytes, "(live bytes over the step)");
	fprintf(f, "\nby kind (%d tensors in the table):\n", p->n_table_entries);
	fprintf(f, "  %-22s %14s %14s\n", "", "device bytes", "host bytes");
	for (int k = 0; k < FERRY_TK_COUNT; k++)
		if (m->device_kind_bytes[k] || m->host_kind_bytes[k])
			fprintf(f, "  %-22s %14zu %14zu\n", ferry_tensor_kind_name((enum ferry_tensor_kind)k),
				m->device_kind_bytes[k], m->host_kind_bytes[k]);
	fprintf(f, "\nhost memory:\n");
	line(f, "activations", m->host_activation_bytes, "(offloaded, all layers)");
	line(f, "total", m->host_total_bytes, NULL);
	line(f, "pinned", m->host_pinned_bytes, "(one pool, before step 1; pinned where the backend can)");
	line(f, "pageable", m->host_pageable_bytes, m->host_pageable_bytes && m->host_pinned_bytes + m->host_pageable_bytes >
	     m->pinned_limit ? "(past --pinned-limit, or never copied)" : "(never copied: no need to pin)");
	fprintf(f, "\nactivations (per layer; %d of %d layer ops recomputed in backward):\n",
		p->n_recompute_ops, p->n_ops);
	fprintf(f, "  %-26s %12s  %-8s %-30s %14s %14s\n", "name", "bytes/layer", "policy", "lives",
		"device bytes", "host bytes");
	for (int i = 0; i < p->n_tensors; i++) {
		const struct ferry_plan_tensor *t = &p->tensors[i];

		fprintf(f, "  %-26s %12zu  %-8s %-30s %14zu %14zu\n", t->name, t->layer_bytes,
			ferry_placement_name(t->placement), plan_tensor_lives(p, i, lives, sizeof(lives)),
			t->device_bytes, t->host_bytes);
	}
	fprintf(f, "\ndevice buffers:\n");
	for (int i = 0; i < p->n_buffers; i++)
		fprintf(f, "  %-32s %-9s %14zu\n", p->buffers[i].name,
			ferry_buffer_kind_name(p->buffers[i].kind), p->buffers[i].bytes);
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void plan_print_json(FILE *f, const struct ferry_plan *p, size_t device_mem)
{
	const struct ferry_memory_analysis *m = &p->mem;
	char lives[64];

	fprintf(f, "{\"model\": ");
	json_string(f, p->model);
	fprintf(f, ", \"policy\": ");
	json_string(f, p->policy);
	fprintf(f, ", \"place\": ");
	json_string(f, p->place);
	fprintf(f, ", \"activation_dtype\": \"%s\"", ferry_dtype_name(p->act_dtype));
	fprintf(f, ", \"layers\": %d, \"batch\": %d, \"seq\": %d, \"prefetch_depth\": %d, "
		   "\"recomputed_ops\": %d, \"layer_ops\": %d,\n", p->L, p->B, p->T, p->prefetch_depth,
		p->n_recompute_ops, p->n_ops);
	fprintf(f, " \"param_ring_slots\": %d, \"edge_bytes\": %zu, \"edge_saved_bytes\": %lld,\n",
		p->param_ring_slots, p->edge_bytes, (long long)p->edge_saved_bytes);
	if (p->n_tier_prefetch) { /* a depth per tier: the others print as before */
		fprintf(f, " \"tier_prefetch\": [");
		for (int i = 0; i < p->n_tier_prefetch; i++)
			fprintf(f, "%s{\"layers\": %d, \"depth\": %d}", i ? ", " : "", p->tier_layers[i],
				p->tier_prefetch[i]);
		fprintf(f, "], \"ring_slots\": %d,\n", p->ring_slots);
	}
	if (p->mlp_tile || p->loss_tile) /* untiled plans print as they did before tiles */
		fprintf(f, " \"mlp_tile\": %d, \"loss_tile\": %d,\n", p->mlp_tile, p->loss_tile);
	fprintf(f, " \"device\": {\"argument_bytes\": %zu, \"output_bytes\": %zu, \"alias_bytes\": %zu, "
		   "\"temp_bytes\": %zu, \"total_bytes\": %zu, \"peak_bytes\": %zu},\n",
		m->argument_bytes, m->output_bytes, m->alias_bytes, m->temp_bytes, m->total_bytes,
		m->peak_bytes);
	fprintf(f, " \"host\": {\"activations_bytes\": %zu, \"total_bytes\": %zu, \"pinned_bytes\": %zu, "
		   "\"pageable_bytes\": %zu, \"pinned_limit\": %zu},\n",
		m->host_activation_bytes, m->host_total_bytes, m->host_pinned_bytes, m->host_pageable_bytes,
		m->pinned_limit);
	fprintf(f, " \"by_kind\": {");
	for (int k = 0, first = 1; k < FERRY_TK_COUNT; k++) {
		if (!m->device_kind_bytes[k] && !m->host_kind_bytes[k])
			continue;
		fprintf(f, "%s\"%s\": {\"device_bytes\": %zu, \"host_bytes\": %zu}", first ? "" : ", ",
			ferry_tensor_kind_name((enum ferry_tensor_kind)k), m->device_kind_bytes[k], m->host_kind_bytes[k]);
		first = 0;
	}
	fprintf(f, "},\n");
	if (device_mem)
		fprintf(f, " \"device_mem\": %zu, \"fits\": %s,\n", device_mem,
			m->peak_bytes <= device_mem ? "true" : "false");
	fprintf(f, " \"tensors\": [");
	for (int i = 0; i < p->n_tensors; i++) {
		const struct ferry_plan_tensor *t = &p->tensors[i];

		fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
		json_string(f, t->name);
		fprintf(f, ", \"placement\": \"%s\", \"lives\": ", ferry_placement_name(t->placement));
		json_string(f, plan_tensor_lives(p, i, lives, sizeof(lives)));
		fprintf(f, ", \"stored\": %s, \"recomputed\": %s, \"layer_bytes\": %zu, \"device_slots\": %d, "
			   "\"device_bytes\": %zu, \"host_bytes\": %zu}",
			t->stored ? "true" : "false", t->recomputed ? "true" : "false", t->layer_bytes,
			t->device_slots, t->device_bytes, t->host_bytes);
	}
	fprintf(f, "],\n \"buffers\": [");
	for (int i = 0; i < p->n_buffers; i++) {
		fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
		json_string(f, p->buffers[i].name);
		fprintf(f, ", \"kind\": \"%s\", \"bytes\": %zu}", ferry_buffer_kind_name(p->buffers[i].kind),
			p->buffers[i].bytes);
	}
	fprintf(f, "]}\n");
}

void plan_print_schedule(FILE *f, const struct ferry_schedule_info *s)
{
	fprintf(f, "\nschedule of one training step: %d tasks on %d streams (", s->n_tasks, s->n_streams);
	for (int k = 0; k < s->n_streams; k++) {
		int n = 0;

		for (int i = 0; i < s->n_tasks; i++)
			n += !strcmp(s->tasks[i].stream, s->streams[k]);
		fprintf(f, "%s%s %d", k ? ", " : "", s->streams[k], n);
	}
	fprintf(f, "), %d events, %d host synchronisation%s per step\n", s->n_events, s->host_syncs,
		s->host_syncs == 1 ? "" : "s");
	fprintf(f, "  %5s  %-14s %-8s %5s  %-18s %-40s %12s\n", "#", "program", "stream", "layer", "task",
		"tensor / event", "bytes");
	for (int i = 0; i < s->n_tasks; i++) {
		const struct ferry_sched_task_info *t = &s->tasks[i];
		char layer[16] = "-";

		if (i == s->sync_after)
			fprintf(f, "  ----- host synchronisation: the loss and the gradient norm reach the host; "
				   "the clipped update is queued -----\n");
		if (t->layer >= 0)
			snprintf(layer, sizeof(layer), "%d", t->layer);
		fprintf(f, "  %5d  %-14s %-8s %5s  %-18s ", i, t->program, t->stream, layer, t->kind);
		if (t->bytes)
			fprintf(f, "%-40s %12zu\n", t->what, t->bytes);
		else
			fprintf(f, "%s\n", t->what);
	}
}
