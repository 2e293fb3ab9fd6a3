/*
 * Internal: the NVMe tier's file.  One file per run in a directory, created
 * with a unique name, sized with fallocate (so a full disk shows before
 * step 1), removed at close.  Opened with O_DIRECT (bypassing the page
 * cache) where the file system allows it; I/O through io_uring (liburing)
 * with registered staging buffers and several chunk requests in flight,
 * or pread/pwrite where io_uring is refused (seccomp, old kernels) or not
 * built in.  FERRY_NVME_IO=pread forces that fallback, FERRY_NVME_IO=nodirect
 * the page cache, both "pread,nodirect" (the tests run every one).
 *
 * Any byte range can be written and read: blocks a write covers only in
 * part are read first (read-modify-write), so neighbouring ranges written
 * one after the other keep each other's bytes.  One thread at a time per
 * direction: writes and reads each have their own staging buffers and
 * ring (a read may run beside a write of other bytes of the same block:
 * the write puts back the bytes it does not own unchanged).
 */
#ifndef FERRY_TIER_NVME_FILE_H
#define FERRY_TIER_NVME_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/ferry.h"

#define FERRY_NVME_ALIGN 4096

struct ferry_nvme_file;

ferry_status ferry_nvme_file_create(const char *dir, struct ferry_nvme_file **out) FERRY_MUST_CHECK;
/* Grows the file to at least size bytes, allocating the blocks (ENOSPC:
 * FERRY_ERR_IO saying the disk is full, and how much it has). */
ferry_status ferry_nvme_file_reserve(struct ferry_nvme_file *f, uint64_t size) FERRY_MUST_CHECK;
ferry_status ferry_nvme_write(struct ferry_nvme_file *f, uint64_t offset, const void *src, size_t n)
	FERRY_MUST_CHECK;
ferry_status ferry_nvme_read(struct ferry_nvme_file *f, uint64_t offset, void *dst, size_t n) FERRY_MUST_CHECK;
/* I/O run on a stream's host thread has nobody to return an error to: the
 * file keeps the first (keep; any thread), and the executor reports it
 * after the step (status: FERRY_OK, or that error again). */
void ferry_nvme_file_keep(struct ferry_nvme_file *f, ferry_status st);
ferry_status ferry_nvme_file_status(struct ferry_nvme_file *f) FERRY_MUST_CHECK;
/* Closes and removes the file (NULL: nothing). */
void ferry_nvme_file_close(struct ferry_nvme_file *f);

const char *ferry_nvme_file_path(const struct ferry_nvme_file *f);
/* "io_uring, O_DIRECT, 8 x 1 MiB in flight" or the fallback and why. */
const char *ferry_nvme_file_mode(const struct ferry_nvme_file *f);
bool ferry_nvme_file_direct(const struct ferry_nvme_file *f);
bool ferry_nvme_file_uring(const struct ferry_nvme_file *f);

#endif
