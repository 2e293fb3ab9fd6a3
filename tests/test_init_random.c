/*
 * ferry_model_init_random draws its normals on every thread, and, where the
 * master weights live in host memory, straight into them:
 *  - the values are the one stream's, drawn one after another (splitmix64,
 *    two uniforms a pair, Box-Muller), written out here serially: the token
 *    embedding (several pieces of the parallel loop) and the position table
 *    (an odd number of values, its last piece short);
 *  - 1 and 3 threads, AdamW's state on the device, streamed and on host
 *    threads: the same bits.
 */
#include "ferry/model.h"
#include "test_util.h"

#include <omp.h>

#define SEED 7

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* n values of std 0.02, one after another from *s */
static void serial_normals(float *x, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i += 2) {
		double r = sqrt(-2.0 * log(uniform01(s))), a = 2.0 * M_PI * uniform01(s);

		x[i] = (float)(0.02 * r * cos(a));
		if (i + 1 < n)
			x[i + 1] = (float)(0.02 * r * sin(a));
	}
}

static float *init(const struct ferry_model_config *cfg, enum ferry_optim_place where, int threads)
{
	struct ferry_exec_opts o = { .optimizer = where };
	ferry_backend_t be;
	ferry_model_t m;
	float *p = TALLOC(float, ferry_model_config_num_params(cfg));

	CHECK(ferry_backend_open("cpu", NULL, &be) == FERRY_OK, "open");
	CHECK(ferry_model_create(be, cfg, 1, 8, &o, &m) == FERRY_OK, "create: %s", ferry_last_error());
	omp_set_num_threads(threads);
	CHECK(ferry_model_init_random(m, SEED) == FERRY_OK, "init: %s", ferry_last_error());
	CHECK(ferry_model_get_params(m, p) == FERRY_OK, "get params");
	ferry_model_free(m);
	ferry_backend_close(be);
	return p;
}

/* The first two tensors, wte and wpe, against the serial stream */
static void check_stream(const struct ferry_model_config *cfg, const float *p)
{
	struct ferry_param_info wte, wpe;
	uint64_t s = SEED;

	CHECK(ferry_model_param_info(cfg, 0, &wte) == FERRY_OK && !strcmp(wte.name, "wte"), "wte first");
	CHECK(ferry_model_param_info(cfg, 1, &wpe) == FERRY_OK && !strcmp(wpe.name, "wpe"), "wpe second");
	CHECK(wte.numel > (1u << 16) && wpe.numel > (1u << 16) && wpe.numel % 2 == 1,
	      "shapes that cover several pieces and an odd tail: %zu, %zu", wte.numel, wpe.numel);
	float *ref = TALLOC(float, wte.numel + wpe.numel);

	serial_normals(ref, wte.numel, &s);
	memset(ref + (size_t)cfg->vocab * cfg->channels, 0, (wte.numel - (size_t)cfg->vocab * cfg->channels) * 4);
	serial_normals(ref + wte.numel, wpe.numel, &s);
	CHECK(!memcmp(ref, p + wte.offset, wte.numel * sizeof(float)), "wte: the serial stream's values");
	CHECK(!memcmp(ref + wte.numel, p + wpe.offset, wpe.numel * sizeof(float)), "wpe: the serial stream's values");
	double sum = 0, sq = 0;

	for (size_t i = 0; i < wpe.numel; i++)
		sum += ref[wte.numel + i], sq += (double)ref[wte.numel + i] * ref[wte.numel + i];
	CHECK(fabs(sum / wpe.numel) < 1e-3 && fabs(sqrt(sq / wpe.numel) - 0.02) < 1e-3, "wpe: mean %g, std %g",
	      sum / wpe.numel, sqrt(sq / wpe.numel));
	free(ref);
}

int main(void)
{
	/* vocab 1000 pads to more rows (zero); 701 positions x 95 channels is odd */
	struct ferry_model_config cfg = { .arch = "gpt2", .max_seq = 701, .vocab = 1000, .layers = 1, .heads = 5,
					  .channels = 95 };
	const enum ferry_optim_place where[] = { FERRY_OPTIM_DEVICE, FERRY_OPTIM_STREAM, FERRY_OPTIM_CPU };
	const char *names[] = { "device", "stream", "cpu" };

	CHECK(ferry_model_config_complete(&cfg) == FERRY_OK, "config: %s", ferry_last_error());
	float *one = init(&cfg, FERRY_OPTIM_DEVICE, 1);
	const size_t n = ferry_model_config_num_params(&cfg);

	check_stream(&cfg, one);
	for (int w = 0; w < 3; w++) {
		float *p = init(&cfg, where[w], 3);

		CHECK(!memcmp(one, p, n * sizeof(float)), "AdamW %s, 3 threads: the one-thread bits", names[w]);
		free(p);
	}
	free(one);
	return test_exit_code();
}
