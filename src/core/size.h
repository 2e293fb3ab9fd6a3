/*
 * Internal: sizes written as people write them ("16G", "512M", "4096"),
 * for the library's own text (topology files, environment variables).
 */
#ifndef FERRY_CORE_SIZE_H
#define FERRY_CORE_SIZE_H

#include <stdint.h>

/* Bytes: a number, optionally with K, M, G or T (powers of 1024) and a
 * trailing B or iB; 0 when s is not a size (or is past 1e18). */
uint64_t ferry_parse_size(const char *s);

#endif
