#include "ferry/train.h"

#include <math.h>

float ferry_lr_schedule(int s, int total, int warmup, float lr, float final_frac)
{
	float min_lr = lr * final_frac;
	double progress;

	if (s < warmup)
		return lr * (float)(s + 1) / (float)warmup;
	if (total <= warmup + 1)
		return lr;
	progress = (double)(s - warmup) / (double)(total - warmup - 1);
	if (progress > 1.0)
		progress = 1.0;
	return min_lr + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (lr - min_lr);
}
