/* --prefetch-depth auto (activations.prefetch=auto) on the command line:
 * this machine's calibration, the depths per tier it gives, said in words. */
#include "auto_flags.h"
#include "cli_args.h"

#include <string.h>

static void print_choice(FILE *f, const struct ferry_prefetch_choice *ch)
{
	char size[FERRY_SIZE_CHARS];

	fprintf(f, "prefetch (auto): one layer computes %.2f ms forward and %.2f ms backward; its %s of offloaded "
		   "activations", ch->forward_s * 1e3, ch->backward_s * 1e3, ferry_format_size(ch->layer_bytes, size));
	for (int i = 0; i < ch->n; i++)
		fprintf(f, "%s %s (%d layers): written in %.2f ms, read in %.2f ms (%s) -> %d ahead%s", i ? ";" : ":",
			ch->tier[i], ch->layers[i], ch->write_s[i] * 1e3, ch->read_s[i] * 1e3,
			ch->rate_measured[i] ? "calibrated" : "default rates", ch->depth[i],
			ch->depth[i] < ch->wanted[i] ? " (fewer than the rates ask: --device-mem)" : "");
	fprintf(f, "\n");
}

int prefetch_auto_resolve(const char *cmd, const char *target, struct ferry_train_opts *o,
			  const struct ferry_model_config *cfg, FILE *log)
{
	static char place[FERRY_PLACE_CHARS + 64]; /* o->exec.place points into it */
	struct ferry_prefetch_choice one = { .n = 1, .depth = { 1 } }, ch;
	struct ferry_train_opts q = *o;
	char qplace[FERRY_PLACE_CHARS + 64];
	ferry_calibration_t c = NULL;
	size_t cap = 0, host = 0;
	ferry_status st;

	if (o->exec.prefetch_depth != FERRY_PREFETCH_AUTO)
		return 0;
	/* what the calibration measures: the same step at some depth */
	if (ferry_prefetch_apply(&one, &q.exec, qplace, sizeof(qplace)) != FERRY_OK)
		return ferry_cli_fail(cmd);
	if (auto_pricing(cmd, target, &q, cfg, &c, &cap, &host))
		return 1;
	st = ferry_prefetch_auto(cfg, o->B, o->T, &o->exec, c, o->device_mem, &ch);
	ferry_calibration_free(c);
	if (st || ferry_prefetch_apply(&ch, &o->exec, place, sizeof(place)) != FERRY_OK)
		return ferry_cli_fail(cmd);
	if (log)
		print_choice(log, &ch);
	return 0;
}
