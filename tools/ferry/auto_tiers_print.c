/* --policy auto's choice of host tiers (struct ferry_auto_tiers) in words
 * and in JSON. */
#include "auto_flags.h"
#include "ferry/platform.h"

/* Speeds against DRAM's, as the cost model takes them, and whether they
 * were calibrated (ferry calibrate) or are the defaults. */
static void speeds(FILE *f, const struct ferry_auto_tier_kind *k, int j)
{
	const char *how = k->opt[j].speed_measured ? "measured" : "defaults";

	if (k->opt[j].tier.type == FERRY_TIER_NVME)
		fprintf(f, " (file reads at %.2f, writes at %.2f GB/s, %s)", k->opt[j].read_Bps / 1e9,
			k->opt[j].write_Bps / 1e9, how);
	else if (k->opt[j].copy_speed < 0.999 || k->opt[j].adamw_speed < 0.999)
		fprintf(f, " (copies at %.2f, the CPU AdamW at %.2f of DRAM's speed, %s)", k->opt[j].copy_speed,
			k->opt[j].adamw_speed, how);
}

/* What each other tier the kind was tried on would do, against the choice. */
static void tier_alternatives(FILE *f, const struct ferry_auto_tier_kind *k)
{
	const double now = k->opt[k->chosen].step_s;

	for (int j = 0; j < k->n; j++) {
		if (j == k->chosen || !k->opt[j].judged)
			continue;
		fprintf(f, "; %s", k->opt[j].name);
		if (!k->opt[j].fits)
			fprintf(f, " would not hold it beside the rest");
		else if (k->opt[j].step_s < now * 1.0001 && k->opt[j].step_s > now * 0.9999)
			fprintf(f, " would take as long");
		else if (k->opt[j].step_s > now)
			fprintf(f, " would add %.2f ms", (k->opt[j].step_s - now) * 1e3);
		else
			fprintf(f, " would save %.2f ms", (now - k->opt[j].step_s) * 1e3);
		speeds(f, k, j);
	}
}

void auto_tiers_print(FILE *f, const struct ferry_auto_result *r)
{
	const struct ferry_auto_tiers *t = &r->tiers;
	char sz[FERRY_SIZE_CHARS];

	if (!t->active)
		return;
	fprintf(f, "host tiers: %s (searched %d placements; the default placement ", t->spec[0] ? t->spec : "as given",
		t->searched);
	if (t->default_fits)
		fprintf(f, "predicted %.2f ms)\n", t->default_s * 1e3);
	else
		fprintf(f, "does not fit)\n");
	for (int k = 0; k < FERRY_HOST_KINDS; k++) {
		const struct ferry_auto_tier_kind *kd = &t->kind[k];

		if (!kd->bytes)
			continue;
		ferry_format_size(kd->bytes, sz);
		if (kd->given || kd->chosen < 0) {
			fprintf(f, "  %-12s %s on the tier --host-tier gives\n", ferry_host_kind_name(k), sz);
			continue;
		}
		fprintf(f, "  %-12s %s on %s", ferry_host_kind_name(k), sz, kd->opt[kd->chosen].name);
		speeds(f, kd, kd->chosen);
		if (kd->dflt >= 0 && kd->dflt != kd->chosen)
			fprintf(f, ", not %s where the default puts it", kd->opt[kd->dflt].name);
		else if (kd->dflt == kd->chosen)
			fprintf(f, ", as the default");
		tier_alternatives(f, kd);
		fprintf(f, "\n");
	}
}

static void json_kind(FILE *f, int k, const struct ferry_auto_tier_kind *kd, bool first)
{
	fprintf(f, "%s\n    {\"kind\": \"%s\", \"bytes\": %llu, \"given\": %s, \"tier\": \"%s\", \"default\": \"%s\", "
		   "\"options\": [", first ? "" : ",", ferry_host_kind_name(k), (unsigned long long)kd->bytes,
		kd->given ? "true" : "false", kd->chosen >= 0 ? kd->opt[kd->chosen].name : "",
		kd->dflt >= 0 ? kd->opt[kd->dflt].name : "");
	for (int j = 0; j < kd->n; j++)
		fprintf(f, "%s{\"tier\": \"%s\", \"judged\": %s, \"fits\": %s, \"predicted_ms\": %.4f, "
			   "\"copy_speed\": %.3f, \"adamw_speed\": %.3f, \"read_Bps\": %.6g, \"write_Bps\": %.6g, "
			   "\"speed_measured\": %s}", j ? ", " : "", kd->opt[j].name,
			kd->opt[j].judged ? "true" : "false", kd->opt[j].fits ? "true" : "false", kd->opt[j].step_s * 1e3,
			kd->opt[j].copy_speed, kd->opt[j].adamw_speed, kd->opt[j].read_Bps, kd->opt[j].write_Bps,
			kd->opt[j].speed_measured ? "true" : "false");
	fprintf(f, "]}");
}

void auto_tiers_json(FILE *f, const struct ferry_auto_result *r)
{
	const struct ferry_auto_tiers *t = &r->tiers;
	bool first = true;

	if (!t->active) {
		fprintf(f, "null");
		return;
	}
	fprintf(f, "{\"spec\": \"%s\", \"searched\": %d, \"default_fits\": %s, \"default_ms\": %.4f, \"kinds\": [",
		t->spec, t->searched, t->default_fits ? "true" : "false", t->default_s * 1e3);
	for (int k = 0; k < FERRY_HOST_KINDS; k++)
		if (t->kind[k].bytes) {
			json_kind(f, k, &t->kind[k], first);
			first = false;
		}
	fprintf(f, "]}");
}
