/* GPT-2 shapes: validation, parameter layout (llm.c order), vocab padding. */
#include "ferry/model.h"
#include "core/error.h"

#include <limits.h>
#include <stdint.h>

/*
 * Largest parameter count we accept.  The training state file holds two fp32
 * arrays (AdamW m and v) after a 1 KiB header, so 8 bytes per parameter plus
 * the header must fit in both size_t and off_t (int64).
 */
static size_t max_params(void)
{
	uint64_t lim = ((uint64_t)INT64_MAX - 1024) / 8;

	if ((uint64_t)SIZE_MAX / 8 < lim)
		lim = (uint64_t)SIZE_MAX / 8;
	return (size_t)lim;
}

/* Fills sizes[] and returns the total; returns 0 when any product or the sum
 * overflows size_t (only possible for configs that fail the check). */
static size_t compute_sizes(const struct ferry_gpt2_config *cfg,
			    size_t sizes[FERRY_GPT2_NUM_PARAMS])
{
	size_t Vp = (size_t)cfg->padded_vocab, maxT = (size_t)cfg->max_seq;
	size_t L = (size_t)cfg->layers, C = (size_t)cfg->channels;
	size_t CC, total = 0;
	int i, bad = 0;

	/* C <= INT_MAX/4 is checked first, so 3C and 4C never overflow. */
	bad |= __builtin_mul_overflow(C, C, &CC);
	bad |= __builtin_mul_overflow(Vp, C, &sizes[FERRY_GPT2_WTE]);
	bad |= __builtin_mul_overflow(maxT, C, &sizes[FERRY_GPT2_WPE]);
	bad |= __builtin_mul_overflow(L, C, &sizes[FERRY_GPT2_LN1W]);
	sizes[FERRY_GPT2_LN1B] = sizes[FERRY_GPT2_LN1W];
	bad |= __builtin_mul_overflow(L, 3 * CC, &sizes[FERRY_GPT2_QKVW]);
	bad |= CC > SIZE_MAX / 4; /* covers 3 * CC above and 4 * CC below */
	bad |= __builtin_mul_overflow(L, 3 * C, &sizes[FERRY_GPT2_QKVB]);
	bad |= __builtin_mul_overflow(L, CC, &sizes[FERRY_GPT2_ATTPROJW]);
	sizes[FERRY_GPT2_ATTPROJB] = sizes[FERRY_GPT2_LN1W];
	sizes[FERRY_GPT2_LN2W] = sizes[FERRY_GPT2_LN1W];
	sizes[FERRY_GPT2_LN2B] = sizes[FERRY_GPT2_LN1W];
	bad |= __builtin_mul_overflow(L, 4 * CC, &sizes[FERRY_GPT2_FCW]);
	bad |= __builtin_mul_overflow(L, 4 * C, &sizes[FERRY_GPT2_FCB]);
	sizes[FERRY_GPT2_FCPROJW] = sizes[FERRY_GPT2_FCW];
	sizes[FERRY_GPT2_FCPROJB] = sizes[FERRY_GPT2_LN1W];
	sizes[FERRY_GPT2_LNFW] = C;
	sizes[FERRY_GPT2_LNFB] = C;

	for (i = 0; i < FERRY_GPT2_NUM_PARAMS; i++)
		bad |= __builtin_add_overflow(total, sizes[i], &total);
	return bad ? 0 : total;
}

ferry_status ferry_gpt2_config_check(const struct ferry_gpt2_config *cfg)
{
	size_t sizes[FERRY_GPT2_NUM_PARAMS], total;

	if (!cfg)
		return ferry_error(FERRY_ERR_INVALID, "model config is NULL");
	if (cfg->max_seq <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "max_seq must be positive (got %d)",
				   cfg->max_seq);
	if (cfg->vocab <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "vocab must be positive (got %d)", cfg->vocab);
	if (cfg->padded_vocab <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "padded_vocab must be positive (got %d)",
				   cfg->padded_vocab);
	if (cfg->padded_vocab < cfg->vocab)
		return ferry_error(FERRY_ERR_INVALID,
				   "padded_vocab (%d) is smaller than vocab (%d)",
				   cfg->padded_vocab, cfg->vocab);
	if (cfg->layers <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "layers must be positive (got %d)",
				   cfg->layers);
	if (cfg->heads <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "heads must be positive (got %d)", cfg->heads);
	if (cfg->channels <= 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "channels must be positive (got %d)",
				   cfg->channels);
	if (cfg->channels % cfg->heads != 0)
		return ferry_error(FERRY_ERR_INVALID,
				   "channels (%d) is not divisible by heads (%d)",
				   cfg->channels, cfg->heads);
	/* Kernels index the MLP's 4C hidden width with int. */
	if (cfg->channels > INT_MAX / 4)
		return ferry_error(FERRY_ERR_INVALID,
				   "channels (%d) is too large (4*channels overflows int)",
				   cfg->channels);
	total = compute_sizes(cfg, sizes);
	if (total == 0 || total > max_params())
		return ferry_error(FERRY_ERR_INVALID,
				   "config (L=%d, C=%d, Vp=%d, maxT=%d) has too many parameters",
				   cfg->layers, cfg->channels, cfg->padded_vocab,
				   cfg->max_seq);
	return FERRY_OK;
}

size_t ferry_gpt2_param_sizes(const struct ferry_gpt2_config *cfg,
			      size_t sizes[FERRY_GPT2_NUM_PARAMS])
{
	return compute_sizes(cfg, sizes);
}

const char *ferry_gpt2_param_name(enum ferry_gpt2_param p)
{
	static const char *const names[FERRY_GPT2_NUM_PARAMS] = {
		[FERRY_GPT2_WTE] = "wte",
		[FERRY_GPT2_WPE] = "wpe",
		[FERRY_GPT2_LN1W] = "ln1w",
		[FERRY_GPT2_LN1B] = "ln1b",
		[FERRY_GPT2_QKVW] = "qkvw",
		[FERRY_GPT2_QKVB] = "qkvb",
		[FERRY_GPT2_ATTPROJW] = "attprojw",
		[FERRY_GPT2_ATTPROJB] = "attprojb",
		[FERRY_GPT2_LN2W] = "ln2w",
		[FERRY_GPT2_LN2B] = "ln2b",
		[FERRY_GPT2_FCW] = "fcw",
		[FERRY_GPT2_FCB] = "fcb",
		[FERRY_GPT2_FCPROJW] = "fcprojw",
		[FERRY_GPT2_FCPROJB] = "fcprojb",
		[FERRY_GPT2_LNFW] = "lnfw",
		[FERRY_GPT2_LNFB] = "lnfb",
	};

	if ((int)p < 0 || p >= FERRY_GPT2_NUM_PARAMS)
		return "unknown";
	return names[p];
}

/*
 * Padding rule: vocabularies above 4096 round up to a multiple of 128, as
 * llm.c's exporter does (GPT-2's 50257 -> 50304); small ones (the byte-level
 * 257) round up to a multiple of 64 (-> 320) so tiny models do not carry a
 * mostly dead embedding table.  Returns 0 for vocab <= 0 or when the result
 * would not fit in an int.
 */
int ferry_pad_vocab(int vocab)
{
	int align = vocab > 4096 ? 128 : 64;

	if (vocab <= 0 || vocab > INT_MAX - (align - 1))
		return 0;
	return (vocab + align - 1) / align * align;
}
