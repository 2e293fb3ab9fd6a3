/*
 * ferry: host offloading for transformer training.
 *
 * Conventions for the whole public API:
 *  - every fallible function returns a ferry_status: FERRY_OK (0) or a negative
 *    error code; the library never prints and never exits;
 *  - after an error, ferry_last_error() returns a one-line message naming the
 *    object (a file, a flag, a shape) and the problem; it is per thread and
 *    stays valid until the next failing call on that thread;
 *  - handles are opaque pointers; whoever creates a handle frees it with the
 *    matching _free/_close function, which accepts NULL.
 */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define FERRY_MUST_CHECK __attribute__((warn_unused_result))
#else
#define FERRY_MUST_CHECK
#endif

typedef int ferry_status;

enum {
	FERRY_OK = 0,
	FERRY_ERR_INVALID = -1,     /* bad argument, flag or shape */
	FERRY_ERR_NOMEM = -2,       /* host allocation failed */
	FERRY_ERR_IO = -3,          /* open/read/write/rename failed */
	FERRY_ERR_FORMAT = -4,      /* corrupt, truncated or foreign file */
	FERRY_ERR_UNSUPPORTED = -5, /* not available in this build or backend */
	FERRY_ERR_BACKEND = -6,     /* the device or its runtime failed */
	FERRY_ERR_DEVICE_MEM = -7,  /* the device arena is too small */
};

/* The message of the last error on this thread ("" when none). */
const char *ferry_last_error(void);

/* A short name for a status code ("invalid argument", ...). */
const char *ferry_status_name(ferry_status status);

/* A size as people read it: "512 bytes", "64.0 KiB", "27.7 MiB",
 * "1.50 GiB" (powers of 1024), into buf, which it returns. */
#define FERRY_SIZE_CHARS 32
const char *ferry_format_size(uint64_t bytes, char buf[FERRY_SIZE_CHARS]);

/* ---- fault injection (tests) ------------------------------------------------
 * Every host allocation in libferry goes through one hook.  After
 * ferry_fault_fail_after(n), the n+1-th allocation from now fails (returns
 * NULL); n < 0 turns injection off.  Used by tests to exercise every
 * allocation-failure path; never set in production. */
void ferry_fault_fail_after(long n);

#ifdef __cplusplus
}
#endif
#endif
