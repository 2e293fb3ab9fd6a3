/* Learning-rate schedules: a linear warmup, then a decay to a floor (the
 * formulas in include/ferry/train.h, ferry_train_lr). */
#include "ferry/train.h"

#include <math.h>

/* Progress through a decay from first to last (inclusive), clamped to [0, 1]. */
static double progress(int s, int first, int last)
{
	double p;

	if (last <= first)
		return 1.0;
	p = (double)(s - first) / (double)(last - first);
	return p < 0 ? 0 : p > 1 ? 1 : p;
}

static float cosine(int s, int total, int warmup, float lr, float floor_lr)
{
	if (s < warmup)
		return lr * (float)(s + 1) / (float)warmup;
	if (total <= warmup + 1)
		return lr;
	return floor_lr + (float)(0.5 * (1.0 + cos(M_PI * progress(s, warmup, total - 1)))) * (lr - floor_lr);
}

float ferry_lr_schedule(int s, int total, int warmup, float lr, float final_frac)
{
	return cosine(s, total, warmup, lr, lr * final_frac);
}

float ferry_train_lr(const struct ferry_train_opts *o, int s)
{
	float lr = o->lr, floor_lr = o->min_lr > 0 ? o->min_lr : lr * o->final_lr_frac;
	int total = o->steps, warmup = o->warmup, start, D;

	if (o->lr_schedule == FERRY_LR_COSINE)
		return cosine(s, total, warmup, lr, floor_lr);
	if (s < warmup)
		return lr * (float)(s + 1) / (float)warmup;
	switch (o->lr_schedule) {
	case FERRY_LR_LINEAR:
		if (total <= warmup + 1)
			return lr;
		return lr - (lr - floor_lr) * (float)progress(s, warmup, total - 1);
	case FERRY_LR_WSD:
		D = (int)lround((double)o->decay_frac * total);
		start = total - D < warmup ? warmup : total - D;
		if (s < start || total <= start)
			return lr;
		return lr - (lr - floor_lr) * (float)progress(s + 1, start, total);
	default:
		return lr;
	}
}
