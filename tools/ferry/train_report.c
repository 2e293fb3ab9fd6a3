#include "train_report.h"
#include "cli_args.h"
#include "cli_clock.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *report_duration(double s, char *buf, size_t n)
{
	long t = lround(s > 0 ? s : 0);

	if (t < 60)
		snprintf(buf, n, "%lds", t);
	else if (t < 3600)
		snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
	return buf;
}

int report_begin(struct train_report *r, int first_step, int steps)
{
	r->first_step = first_step;
	r->steps = steps;
	r->n = 0;
	r->total_ms = 0;
	r->val_loss = NAN;
	r->targets = 0;
	r->flops = 0;
	r->shown_peak = 0;
	r->warned_over = false;
	r->t0 = cli_now_s();
	r->step_ms = calloc((size_t)(steps > first_step ? steps - first_step : 1), sizeof(double));
	return r->step_ms ? 0 : -1;
}

static void record(struct train_report *r, const struct ferry_step_metrics *m, float val_loss)
{
	r->total_ms += m->step_ms;
	if (r->step_ms && m->step - r->first_step <= r->steps - r->first_step)
		r->step_ms[r->n] = m->step_ms;
	r->loss[r->n % 10] = m->loss;
	r->targets += m->targets;
	if (m->flops > 0) { /* documents: attention within them, step by step */
		r->flops += m->flops;
		r->step_flops = m->flops;
	}
	r->n++;
	r->last_step = m->step;
	if (!isnan(val_loss))
		r->val_loss = val_loss, r->val_step = m->step;
}

/* Model FLOP utilisation of a step, or a negative number when no peak is
 * known. */
static double mfu(const struct train_report *r, double step_ms)
{
	if (!(r->peak_flops > 0) || !(step_ms > 0))
		return -1;
	return r->step_flops / (step_ms / 1e3) / r->peak_flops;
}

static int json_record(struct train_report *r, const struct ferry_step_metrics *m, float val_loss, double elapsed)
{
	FILE *f = r->json;
	int bad;

	if (!f || r->json_errno)
		return r->json_errno ? -1 : 0;
	errno = 0;
	/* losses and norms to every digit of their float: a comparison of two
	 * runs sees what differs */
	bad = fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.6e, \"grad_norm\": %.9g, "
			 "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"device_peak_bytes\": %zu, \"elapsed_s\": %.3f",
		      m->step, m->loss, m->lr, m->grad_norm, m->step_ms, m->tokens_per_s, m->device_peak_bytes,
		      elapsed) < 0;
	if (!bad && mfu(r, m->step_ms) >= 0)
		bad = fprintf(f, ", \"mfu\": %.4f", mfu(r, m->step_ms)) < 0;
	if (!bad && !isnan(val_loss))
		bad = fprintf(f, ", \"val_loss\": %.9g", val_loss) < 0;
	if (!bad && r->packed)
		bad = fprintf(f, ", \"targets\": %lld", (long long)m->targets) < 0;
	/* every record reaches the file (or pipe) before the next step */
	if (bad || fprintf(f, "}\n") < 0 || fflush(f) != 0 || ferror(f)) {
		r->json_errno = errno ? errno : EIO;
		return -1;
	}
	return 0;
}

/* A step above the peak (u > 1): on the CPU the peak is an estimate (an
 * sgemm measured or calibrated on a busier machine), so the step's rate
 * becomes the peak, said once, and no line shows more than 100%; a GPU's
 * peak is the device's own (--peak-flops): warned of once.  The MFU to show. */
static double over_peak(struct train_report *r, const struct ferry_step_metrics *m, double u)
{
	double rate = r->step_flops / (m->step_ms / 1e3);

	if (!(u > 1))
		return u;
	if (r->raise_peak) {
		if (!r->warned_over)
			fprintf(stderr, "ferry train: note: step %d ran at %.4g GFLOP/s, above the peak MFU was against "
					"(%s, %.4g GFLOP/s): the best rate seen is the peak from here\n", m->step, rate / 1e9,
				r->peak_what ? r->peak_what : "the peak", r->peak_flops / 1e9);
		r->warned_over = true;
		r->peak_flops = rate;
		r->peak_what = "the fastest step's rate";
		return 1;
	}
	if (!r->warned_over) /* not a real utilisation: the peak is too low */
		fprintf(stderr, "ferry train: warning: MFU above 100%% against %s (%.4g GFLOP/s): that peak is below "
				"what the steps reach; give the device's peak with --peak-flops\n",
			r->peak_what ? r->peak_what : "the peak", r->peak_flops / 1e9);
	r->warned_over = true;
	return u;
}

/* Whether step m gets a line: every --log-every'th, the run's first and
 * last, and one with a validation. */
static bool shown(const struct train_report *r, const struct ferry_step_metrics *m, float val_loss)
{
	return r->log_every <= 1 || m->step % r->log_every == 0 || m->step == r->steps ||
	       m->step == r->first_step + 1 || !isnan(val_loss);
}

int report_step(struct train_report *r, const struct ferry_step_metrics *m, float val_loss)
{
	double elapsed = cli_now_s() - r->t0, u = mfu(r, m->step_ms);
	int done = m->step - r->first_step;
	char el[32], eta[32], mem[32];

	record(r, m, val_loss);
	u = over_peak(r, m, r->flops > 0 ? mfu(r, m->step_ms) : u); /* documents: this step's FLOPs */
	if (!shown(r, m, val_loss))
		return json_record(r, m, val_loss, elapsed);
	errno = 0;
	printf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %7.0f tok/s", m->step, r->steps, m->loss,
	       m->lr, m->grad_norm, m->step_ms, m->tokens_per_s);
	if (u >= 0)
		printf(" | MFU %4.1f%%", 100 * u);
	if (r->packed) /* the loss is the mean over these */
		printf(" | %lld targets", (long long)m->targets);
	printf(" | %s, ETA %s", report_duration(elapsed, el, sizeof(el)),
	       report_duration(done > 0 ? elapsed / done * (r->steps - m->step) : 0, eta, sizeof(eta)));
	if (!isnan(val_loss))
		printf(" | val loss %.4f", val_loss);
	if (m->device_peak_bytes != r->shown_peak) {
		printf(" | device peak %s", ferry_format_size(m->device_peak_bytes, mem));
		r->shown_peak = m->device_peak_bytes;
	}
	printf("\n");
	if ((fflush(stdout) != 0 || ferror(stdout)) && !r->stdout_errno) {
		r->stdout_errno = errno ? errno : EIO;
		return -1;
	}
	return json_record(r, m, val_loss, elapsed);
}

int report_close_json(struct train_report *r)
{
	int failed = r->json_errno != 0;

	if (!r->json)
		return 0;
	errno = 0;
	if (fclose(r->json) != 0 && !failed) {
		r->json_errno = errno ? errno : EIO;
		failed = 1;
	}
	r->json = NULL;
	return failed ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median step time (the first step, which warms caches, left out when
 * there are others) and the mean of the last ten losses: one step's time
 * or loss is noise on a shared machine. */
void report_summary(const struct train_report *r, size_t device_peak, int at_step)
{
	int k = r->n > 1 ? 1 : 0, last = r->n < 10 ? r->n : 10;
	double med = 0, loss = 0;
	char mem[32];

	if (!r->n) {
		printf("\nsummary: no steps taken (the run is at step %d of %d)\n", at_step, r->steps);
		return;
	}
	if (r->step_ms) {
		qsort(r->step_ms + k, (size_t)(r->n - k), sizeof(double), cmp_double);
		med = r->step_ms[k + (r->n - k) / 2];
	}
	for (int i = 0; i < last; i++)
		loss += r->loss[i];
	printf("\nsummary: %d step%s in %.1f s, %.1f ms/step (median), %.0f tokens/s", r->n, r->n == 1 ? "" : "s",
	       r->total_ms / 1e3, med,
	       med > 0 ? r->B * r->T / (med / 1e3) : 0.0);
	if (r->flops > 0) { /* documents: the steps' mean FLOPs */
		struct train_report mean = *r;

		mean.step_flops = r->flops / r->n;
		if (mfu(&mean, med) >= 0)
			printf(", MFU %.1f%%", 100 * mfu(&mean, med));
	} else if (mfu(r, med) >= 0) {
		printf(", MFU %.1f%%", 100 * mfu(r, med));
	}
	printf(", train loss %.4f (mean of the last %d)", loss / last, last);
	if (r->packed)
		printf(" over %.1f counted targets a step", (double)r->targets / r->n);
	if (!isnan(r->val_loss))
		printf(", validation loss %.4f", r->val_loss);
	if (!isnan(r->val_loss) && r->val_step != r->last_step) /* a run stopped between validations */
		printf(" (at step %d)", r->val_step);
	printf(", device peak %s\n", ferry_format_size(device_peak, mem));
}

int report_rank_memory(struct train_report *r, int ranks, const size_t *bytes)
{
	int bad = 0;

	printf("memory per rank (measured; device peak, host buffers):");
	for (int k = 0; k < ranks; k++)
		printf("%s rank %d %zu + %zu bytes", k ? ";" : "", k, bytes[2 * k], bytes[2 * k + 1]);
	printf("\n");
	if (!r->json || r->json_errno)
		return r->json_errno ? -1 : 0;
	errno = 0;
	bad = fprintf(r->json, "{\"rank_memory\": [") < 0;
	for (int k = 0; k < ranks && !bad; k++)
		bad = fprintf(r->json, "%s{\"rank\": %d, \"device_peak_bytes\": %zu, \"host_bytes\": %zu}", k ? ", " : "",
			      k, bytes[2 * k], bytes[2 * k + 1]) < 0;
	if (bad || fprintf(r->json, "]}\n") < 0 || fflush(r->json) != 0 || ferror(r->json)) {
		r->json_errno = errno ? errno : EIO;
		return -1;
	}
	return 0;
}

void report_end(struct train_report *r)
{
	report_close_json(r);
	free(r->step_ms);
	r->step_ms = NULL;
}
