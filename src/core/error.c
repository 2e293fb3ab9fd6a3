#include "core/error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *ferry_last_error(void)
{
	return last_error;
}

ferry_status ferry_error(ferry_status status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return status;
}

const char *ferry_status_name(ferry_status status)
{
	switch (status) {
	case FERRY_OK: return "ok";
	case FERRY_ERR_INVALID: return "invalid argument";
	case FERRY_ERR_NOMEM: return "out of host memory";
	case FERRY_ERR_IO: return "i/o error";
	case FERRY_ERR_FORMAT: return "bad file format";
	case FERRY_ERR_UNSUPPORTED: return "unsupported";
	case FERRY_ERR_BACKEND: return "backend error";
	case FERRY_ERR_DEVICE_MEM: return "out of device memory";
	}
	return "unknown error";
}

const char *ferry_format_size(uint64_t n, char buf[FERRY_SIZE_CHARS])
{
	if (n < 1024)
		snprintf(buf, FERRY_SIZE_CHARS, "%llu bytes", (unsigned long long)n);
	else if (n < (1ull << 20))
		snprintf(buf, FERRY_SIZE_CHARS, "%.1f KiB", n / 1024.0);
	else if (n < (1ull << 30))
		snprintf(buf, FERRY_SIZE_CHARS, "%.1f MiB", n / 1048576.0);
	else if (n < (1ull << 40))
		snprintf(buf, FERRY_SIZE_CHARS, "%.2f GiB", n / 1073741824.0);
	else
		snprintf(buf, FERRY_SIZE_CHARS, "%.2f TiB", n / 1099511627776.0);
	return buf;
}

/* Fault injection: countdown of allocations until one fails; -1 = off. */
static atomic_long fail_countdown = -1;

void ferry_fault_fail_after(long n)
{
	atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

static int fault_fires(void)
{
	long c = atomic_load(&fail_countdown);

	while (c >= 0) {
		if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1))
			return c == 0;
	}
	return 0;
}

void *ferry_malloc(size_t size)
{
	return fault_fires() ? NULL : malloc(size ? size : 1);
}

char *ferry_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = ferry_malloc(n);

	if (p)
		memcpy(p, s, n);
	return p;
}

void *ferry_calloc(size_t n, size_t size)
{
	return fault_fires() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *ferry_aligned_alloc(size_t alignment, size_t size)
{
	void *p = NULL;

	if (fault_fires())
		return NULL;
	if (posix_memalign(&p, alignment, size ? size : alignment) != 0)
		return NULL;
	return p;
}

void ferry_free(void *p)
{
	free(p);
}
