/* --policy auto from the command line: search, then say what was chosen
 * and why, in the words of someone choosing a MaxText remat policy. */
#include "auto_flags.h"
#include "cli_args.h"
#include "model_flags.h"
#include "ferry/platform.h"
#include "ferry/policy.h"

#include <string.h>

bool is_auto_policy(const char *policy)
{
	return policy && !strcmp(policy, "auto");
}

ferry_status auto_policy_search(const struct ferry_train_opts *o, const struct ferry_model_config *cfg,
				ferry_calibration_t c, size_t device_mem, size_t host_mem, bool with_state,
				struct ferry_auto_result *r)
{
	struct ferry_memory_limit ml;
	struct ferry_exec_opts e = o->exec;

	if (!e.comm) /* on several ranks, their collectives priced (the trainer makes its own) */
		e.comm = o->comm;
	ferry_memory_limit(&ml);
	if (!host_mem)
		host_mem = (size_t)ml.bytes;
	if (with_state)
		return ferry_policy_auto_state(cfg, o->B, o->T, &e, device_mem, host_mem, c, r);
	return ferry_policy_auto(cfg, o->B, o->T, &e, device_mem, host_mem, c, r);
}

/* The host tiers auto chose, over the ones given, into o->exec.host_tier
 * (so the plan's placements name them): 0, or not 0 after an error. */
static int chosen_tiers(struct ferry_train_opts *o, const struct ferry_auto_result *r)
{
	static char spec[FERRY_PLACE_CHARS];
	struct ferry_places places;

	if (ferry_exec_opts_places(&o->exec, &places) || ferry_places_set_tiers(&places, r->tiers.spec) ||
	    ferry_places_tier_spec(&places, spec, sizeof(spec)))
		return 1;
	o->exec.host_tier = spec[0] ? spec : NULL;
	return 0;
}

int auto_policy_resolve(const char *cmd, const char *target, struct ferry_train_opts *o,
			const struct ferry_model_config *cfg, struct ferry_auto_result *r, FILE *log)
{
	ferry_calibration_t c = NULL;
	size_t cap = 0, host = 0;
	ferry_status st;

	if (auto_pricing(cmd, target, o, cfg, &c, &cap, &host))
		return 1;
	st = auto_policy_search(o, cfg, c, cap, host, !ferry_cli_model_flags_state_given(), r);
	ferry_calibration_free(c);
	if (st)
		return ferry_cli_fail(cmd);
	o->exec.policy = r->policy;
	o->exec.optimizer = r->optimizer;
	o->exec.offload_params = r->offload_params;
	o->exec.mlp_tile = r->mlp_tile;
	o->exec.loss_tile = r->loss_tile;
	if (r->tiers.spec[0] && chosen_tiers(o, r))
		return ferry_cli_fail(cmd);
	if (log) {
		struct ferry_places places;
		char place[FERRY_PLACE_CHARS];

		auto_policy_print(log, r);
		/* the choice as placements, to give again with --place */
		if (ferry_exec_opts_places(&o->exec, &places) == FERRY_OK &&
		    ferry_places_format(&places, place, sizeof(place)) == FERRY_OK)
			fprintf(log, "as placements: --place '%s'\n", place);
	}
	return 0;
}

static const char *verb(int p)
{
	return p == FERRY_PLACE_DEVICE ? "keeping it on the device" : p == FERRY_PLACE_OFFLOAD ? "offloading it"
											   : "recomputing it";
}

/* What each other placement of choice c would do, against the chosen. */
static void alternatives(FILE *f, const struct ferry_auto_result *r, const struct ferry_auto_choice *c)
{
	const double now = c->alt_s[c->place];
	char more[FERRY_SIZE_CHARS];

	for (int p = 0; p < 3; p++) {
		if (p == (int)c->place)
			continue;
		if (!c->alt_valid[p])
			fprintf(f, "; %s is not allowed", verb(p));
		else if (!c->alt_fits[p])
			fprintf(f, "; %s would need %s more than --device-mem allows", verb(p),
				ferry_format_size(c->alt_peak[p] > r->device_mem ? c->alt_peak[p] - r->device_mem : 0, more));
		else if (c->alt_s[p] < now * 1.0001 && c->alt_s[p] > now * 0.9999)
			fprintf(f, "; %s would take as long", verb(p));
		else if (c->alt_s[p] >= now)
			fprintf(f, "; %s would add %.2f ms", verb(p), (c->alt_s[p] - now) * 1e3);
		else
			fprintf(f, "; %s would save %.2f ms", verb(p), (now - c->alt_s[p]) * 1e3);
	}
}

static void print_choice(FILE *f, const struct ferry_auto_result *r, const struct ferry_auto_choice *c)
{
	char size[FERRY_SIZE_CHARS];

	ferry_format_size(c->layer_bytes, size);
	if (c->place == FERRY_PLACE_OFFLOAD && r->pred.exposed_copy_s < 0.01 * r->pred.copy_s)
		fprintf(f, "  %-26s offloaded: %.2f ms of copies a step (%d layers x %s out and back), hidden "
			   "under compute", c->name, c->copy_s * 1e3, r->layers, size);
	else if (c->place == FERRY_PLACE_OFFLOAD)
		fprintf(f, "  %-26s offloaded: %.2f ms of copies a step (%d layers x %s out and back), under "
			   "compute but for %.2f ms the step waits on copies (all tensors)", c->name, c->copy_s * 1e3,
			r->layers, size, r->pred.exposed_copy_s * 1e3);
	else if (c->place == FERRY_PLACE_DEVICE)
		fprintf(f, "  %-26s kept on the device (%d layers x %s)", c->name, r->layers, size);
	else
		fprintf(f, "  %-26s recomputed in the backward pass (%s a layer not kept)", c->name, size);
	alternatives(f, r, c);
	fprintf(f, "\n");
}

static void print_presets(FILE *f, const struct ferry_auto_result *r)
{
	char need[FERRY_SIZE_CHARS];
	const double me = r->pred.step_s;

	fprintf(f, "presets, as the calibration predicts them%s:\n",
		r->tiers.active ? " (host state where the tiers' default puts it)" : "");
	for (int i = 0; i < r->n_presets; i++) {
		const struct ferry_auto_preset *p = &r->presets[i];

		if (!p->valid)
			fprintf(f, "  %-34s not for this model\n", p->name);
		else if (!p->fits)
			fprintf(f, "  %-34s does not fit: needs %s of device memory\n", p->name,
				ferry_format_size(p->peak, need));
		else if (p->step_s > me * 1.0005)
			fprintf(f, "  %-34s %8.2f ms  auto is %.1f%% faster\n", p->name, p->step_s * 1e3,
				(p->step_s / me - 1) * 100);
		else
			fprintf(f, "  %-34s %8.2f ms  as fast as auto\n", p->name, p->step_s * 1e3);
	}
}

void auto_policy_print(FILE *f, const struct ferry_auto_result *r)
{
	char peak[FERRY_SIZE_CHARS], cap[FERRY_SIZE_CHARS], host[FERRY_SIZE_CHARS];

	fprintf(f, "--policy auto: %s\n", r->policy);
	fprintf(f, "  searched %d placements in %.2f s, starting from %s (the best preset that fits)\n",
		r->evaluations, r->search_s, r->start);
	fprintf(f, "  predicted step %.2f ms: compute %.2f ms, copies %.2f ms of which the step waits %.2f ms; "
		   "device peak %s of %s, host %s\n", r->pred.step_s * 1e3, r->pred.compute_s * 1e3,
		r->pred.copy_s * 1e3, r->pred.exposed_copy_s * 1e3, ferry_format_size(r->pred.device_peak_bytes, peak),
		ferry_format_size(r->device_mem, cap), ferry_format_size(r->pred.host_bytes, host));
	if (r->n_states > 1)
		fprintf(f, "  AdamW's state %s, the layers' weights %s (the fastest of %d placements of the parameters "
			   "and optimizer state; --offload-optimizer or --offload-params fixes them)\n",
			r->optimizer == FERRY_OPTIM_DEVICE   ? "on the device"
			: r->optimizer == FERRY_OPTIM_STREAM ? "on the host, streamed through the device"
							     : "on the host, updated by host threads",
			r->offload_params ? "on the host" : "on the device", r->n_states);
	if (r->mlp_tile || r->loss_tile)
		fprintf(f, "  tiles of tokens: the MLP %s, the LM head and loss %s (what fits, or is faster, "
			   "against untiled)\n", r->mlp_tile ? "tiled" : "untiled", r->loss_tile ? "tiled" : "untiled");
	auto_tiers_print(f, r);
	fprintf(f, "per activation (one choice for all %d layers):\n", r->layers);
	for (int i = 0; i < r->n; i++)
		if (r->c[i].needed)
			print_choice(f, r, &r->c[i]);
	print_presets(f, r);
}

static void json_choice(FILE *f, const struct ferry_auto_choice *c, bool first)
{
	fprintf(f, "%s\n   {\"name\": \"%s\", \"placement\": \"%s\", \"layer_bytes\": %zu, \"copy_ms\": %.4f, "
		   "\"alternatives\": {", first ? "" : ",", c->name, ferry_placement_name(c->place), c->layer_bytes,
		c->copy_s * 1e3);
	for (int p = 0; p < 3; p++)
		fprintf(f, "%s\"%s\": {\"allowed\": %s, \"fits\": %s, \"predicted_ms\": %.4f, \"device_peak_bytes\": %zu}",
			p ? ", " : "", ferry_placement_name((enum ferry_placement)p), c->alt_valid[p] ? "true" : "false",
			c->alt_fits[p] ? "true" : "false", c->alt_s[p] * 1e3, c->alt_peak[p]);
	fprintf(f, "}}");
}

void auto_policy_json(FILE *f, const struct ferry_auto_result *r)
{
	bool first = true;

	fprintf(f, "{\"policy\": \"%s\", \"fits\": %s, \"predicted_ms\": %.4f, \"compute_ms\": %.4f, "
		   "\"copy_ms\": %.4f, \"exposed_copy_ms\": %.4f, \"device_peak_bytes\": %zu, \"host_bytes\": %zu, "
		   "\"device_mem\": %zu, \"host_mem\": %zu, \"layers\": %d, \"start\": \"%s\", \"evaluations\": %d, "
		   "\"search_s\": %.3f, \"optimizer\": \"%s\", \"offload_params\": %s, \"state_placements\": %d,\n",
		r->policy, r->fits ? "true" : "false", r->pred.step_s * 1e3,
		r->pred.compute_s * 1e3, r->pred.copy_s * 1e3, r->pred.exposed_copy_s * 1e3, r->pred.device_peak_bytes,
		r->pred.host_bytes, r->device_mem, r->host_mem, r->layers, r->start, r->evaluations, r->search_s,
		r->optimizer == FERRY_OPTIM_DEVICE ? "device" : r->optimizer == FERRY_OPTIM_STREAM ? "stream" : "cpu",
		r->offload_params ? "true" : "false", r->n_states);
	if (r->mlp_tile || r->loss_tile) /* untiled choices print as before tiles */
		fprintf(f, "  \"mlp_tile\": %d, \"loss_tile\": %d,\n", r->mlp_tile, r->loss_tile);
	fprintf(f, "  \"choices\": [");
	for (int i = 0; i < r->n; i++)
		if (r->c[i].needed) {
			json_choice(f, &r->c[i], first);
			first = false;
		}
	fprintf(f, "],\n  \"presets\": [");
	for (int i = 0; i < r->n_presets; i++) {
		const struct ferry_auto_preset *p = &r->presets[i];

		fprintf(f, "%s\n   {\"name\": \"%s\", \"valid\": %s, \"fits\": %s, \"predicted_ms\": %.4f, "
			   "\"device_peak_bytes\": %zu, \"host_bytes\": %zu}", i ? "," : "", p->name,
			p->valid ? "true" : "false", p->fits ? "true" : "false", p->step_s * 1e3, p->peak, p->host);
	}
	fprintf(f, "],\n  \"host_tiers\": ");
	auto_tiers_json(f, r);
	fprintf(f, "}");
}
