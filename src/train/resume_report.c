/*
 * A resumed run, said: the schedule it took from its state, and which
 * given options differ from the saved run's (the banner's overrides).
 */
#include "train/trainer_internal.h"
#include "ferry/comm.h"
#include "ferry/hf_checkpoint.h"
#include "core/error.h"
#include "ckpt/commit.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool ferry_trainer_resumed_schedule(ferry_trainer_t tr, int *total_steps, int *warmup, float *lr,
				    float *final_lr_frac)
{
	if (!tr->resumed)
		return false;
	*total_steps = (int)tr->saved.total_steps;
	*warmup = tr->saved.warmup;
	*lr = tr->saved.lr;
	*final_lr_frac = tr->saved.final_lr_frac;
	return true;
}

/* "what X (saved Y)" into a growing list. */
struct said {
	char *buf;
	size_t n, used;
	int count;
};

__attribute__((format(printf, 2, 3))) static void say(struct said *w, const char *fmt, ...)
{
	va_list ap;
	int k;

	w->count++;
	if (w->used + 1 >= w->n)
		return;
	if (w->count > 1)
		w->used += (size_t)snprintf(w->buf + w->used, w->n - w->used, ", ");
	if (w->used + 1 >= w->n)
		return;
	va_start(ap, fmt);
	k = vsnprintf(w->buf + w->used, w->n - w->used, fmt, ap);
	va_end(ap);
	if (k > 0)
		w->used += (size_t)k < w->n - w->used ? (size_t)k : w->n - w->used - 1;
}

static void say_data(struct said *w, ferry_trainer_t tr)
{
	const struct ferry_train_state *s = &tr->saved;

	if (!tr->data_override)
		return;
	if (s->version >= 2 && s->data[0] && strcmp(s->data, tr->opts.data) != 0)
		say(w, "data '%s' (saved '%s'; read from its start)", tr->opts.data, s->data);
	else if (s->version >= 2 && s->data[0])
		say(w, "data '%s' (its files changed since the save; read from its start)", tr->opts.data);
	else
		say(w, "data '%s' (%d shards, saved with %lld; read from its start)", tr->opts.data,
		    ferry_loader_num_shards(tr->train), (long long)s->data_shards);
}

static const char *const lr_kinds[] = { "cosine", "linear", "constant", "wsd" };

static const char *lr_kind(int k)
{
	return k >= 0 && k <= FERRY_LR_WSD ? lr_kinds[k] : "?";
}

/* The overrides of what a version-5 state adds. */
static void say_v5(struct said *w, const struct ferry_train_opts *o, const struct ferry_train_state *s)
{
	unsigned g = o->given;

	if ((g & FERRY_GIVEN_LR_SCHEDULE) && o->lr_schedule != s->lr_schedule)
		say(w, "lr schedule %s (saved %s)", lr_kind(o->lr_schedule), lr_kind(s->lr_schedule));
	if ((g & FERRY_GIVEN_MIN_LR) && o->min_lr != s->min_lr)
		say(w, "min lr %g (saved %g)", (double)o->min_lr, (double)s->min_lr);
	if ((g & FERRY_GIVEN_DECAY_FRAC) && o->decay_frac != s->decay_frac)
		say(w, "decay fraction %g (saved %g)", (double)o->decay_frac, (double)s->decay_frac);
	if ((g & FERRY_GIVEN_GRAD_ACCUM) && o->grad_accum != s->grad_accum)
		say(w, "grad accum %d (saved %d)", o->grad_accum, s->grad_accum);
}

/* A placement given that is not the saved run's. */
static void say_place(struct said *w, ferry_trainer_t tr)
{
	char now[FERRY_PLACE_CHARS];

	if (!(tr->opts.given & FERRY_GIVEN_PLACE) || !tr->saved_place[0])
		return;
	ferry_train_place_of(&tr->opts.exec, now, sizeof(now));
	if (strcmp(now, tr->saved_place) != 0)
		say(w, "placement '%s' (saved '%s')", now, tr->saved_place);
}

int ferry_trainer_resume_overrides(ferry_trainer_t tr, char *buf, size_t n)
{
	const struct ferry_train_opts *o = &tr->opts;
	const struct ferry_train_state *s = &tr->saved;
	struct said w = { buf, n, 0, 0 };
	unsigned g = o->given;
	bool v2 = s->version >= 2, sched = s->total_steps > 0;

	if (n)
		buf[0] = 0;
	if (!tr->resumed)
		return 0;
	if ((g & FERRY_GIVEN_BATCH) && v2 && s->B > 0 && o->B * tr->ranks != s->B)
		say(&w, "batch %d (saved %d)", o->B * tr->ranks, s->B);
	if ((g & FERRY_GIVEN_SEQ) && v2 && s->T > 0 && o->T != s->T)
		say(&w, "seq %d (saved %d)", o->T, s->T);
	if ((g & FERRY_GIVEN_STEPS) && sched && o->steps != s->total_steps)
		say(&w, "steps %d (saved %lld)", o->steps, (long long)s->total_steps);
	if ((g & FERRY_GIVEN_LR) && s->lr > 0 && o->lr != s->lr)
		say(&w, "lr %g (saved %g)", (double)o->lr, (double)s->lr);
	if ((g & FERRY_GIVEN_WARMUP) && sched && o->warmup != s->warmup)
		say(&w, "warmup %d (saved %d)", o->warmup, s->warmup);
	if ((g & FERRY_GIVEN_FINAL_LR) && sched && o->final_lr_frac != s->final_lr_frac)
		say(&w, "final lr fraction %g (saved %g)", (double)o->final_lr_frac, (double)s->final_lr_frac);
	if ((g & FERRY_GIVEN_WEIGHT_DECAY) && v2 && o->adamw.weight_decay != s->adamw.weight_decay)
		say(&w, "weight decay %g (saved %g)", (double)o->adamw.weight_decay, (double)s->adamw.weight_decay);
	if ((g & FERRY_GIVEN_GRAD_CLIP) && v2 && o->adamw.grad_clip != s->adamw.grad_clip)
		say(&w, "grad clip %g (saved %g)", (double)o->adamw.grad_clip, (double)s->adamw.grad_clip);
	if ((g & FERRY_GIVEN_ADAMW) && v2 &&
	    (o->adamw.beta1 != s->adamw.beta1 || o->adamw.beta2 != s->adamw.beta2 || o->adamw.eps != s->adamw.eps))
		say(&w, "AdamW betas %g, %g, eps %g (saved %g, %g, %g)", (double)o->adamw.beta1,
		    (double)o->adamw.beta2, (double)o->adamw.eps, (double)s->adamw.beta1, (double)s->adamw.beta2,
		    (double)s->adamw.eps);
	if (s->version >= 5)
		say_v5(&w, o, s);
	if ((g & FERRY_GIVEN_SEED) && v2 && o->seed != s->seed)
		say(&w, "seed %llu (saved %llu)", (unsigned long long)o->seed, (unsigned long long)s->seed);
	if (tr->order_override)
		say(&w, "%s batches (saved %s; read from the data's start)", o->shuffle ? "shuffled" : "in-order",
		    s->shuffle ? "shuffled" : "in order");
	say_place(&w, tr);
	say_data(&w, tr);
	return w.count;
}
