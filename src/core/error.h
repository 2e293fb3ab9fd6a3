/* Internal: error reporting and the host allocation hook. */
#ifndef FERRY_CORE_ERROR_H
#define FERRY_CORE_ERROR_H

#include "ferry/ferry.h"
#include <stddef.h>

/* Records a formatted message for ferry_last_error() and returns status, so
 * call sites read: return ferry_error(FERRY_ERR_FORMAT, "%s: bad magic", path); */
ferry_status ferry_error(ferry_status status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Host allocations; all of them honour ferry_fault_fail_after(). */
void *ferry_malloc(size_t size);
void *ferry_calloc(size_t n, size_t size);
void *ferry_aligned_alloc(size_t alignment, size_t size); /* free with ferry_free */
void ferry_free(void *p);
/* A ferry_malloc copy of the string s, or NULL; free with ferry_free. */
char *ferry_strdup(const char *s);

#endif
