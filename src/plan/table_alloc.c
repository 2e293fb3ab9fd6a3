/*
 * The tensor table's buffers allocated on a backend: device buffers from
 * its arena, host buffers from one pinned pool or on their host tiers.
 */
#include "plan/table_build.h"
#include "core/error.h"
#include "ferry/platform.h"

#include <string.h>

/* The pinned pool, in one allocation before step 1.  A backend that
 * cannot pin it (out of page-locked memory) leaves every buffer pageable:
 * copies are slower, nothing fails. */
static void alloc_pool(const struct ferry_tensor_table *tt, ferry_backend_t be, struct ferry_table_alloc *a)
{
	bool pinned_before = ferry_backend_caps(be).host_pinned;

	if (!tt->pinned_bytes)
		return;
	if (ferry_host_alloc(be, tt->pinned_bytes, &a->pool) != FERRY_OK) {
		a->pool = NULL;
		a->pool_failed = true;
		return;
	}
	a->pool_bytes = tt->pinned_bytes;
	a->pool_pageable = pinned_before && !ferry_backend_caps(be).host_pinned;
}

/* A host buffer of its own, page-aligned (pageable). */
static ferry_status alloc_pageable(const struct ferry_table_buffer *b, struct ferry_table_alloc *a, int i)
{
	size_t bytes = ferry_table_host_aligned(b->bytes ? b->bytes : 1);

	if (!(a->host[i] = ferry_aligned_alloc(FERRY_TABLE_HOST_ALIGN, bytes)))
		return ferry_error(FERRY_ERR_NOMEM, "cannot allocate %zu bytes of host memory for %s", b->bytes,
				   b->name);
	a->host_bytes += bytes;
	return FERRY_OK;
}

ferry_status ferry_tensor_table_alloc(const struct ferry_tensor_table *tt, ferry_backend_t be,
				      struct ferry_table_alloc *a)
{
	ferry_status st = FERRY_OK;
	size_t carved = 0;

	memset(a, 0, sizeof(*a));
	a->be = be;
	a->tiers = tt->host_tiers;
	if (a->tiers) {
		size_t host_kind_bytes[FERRY_HOST_KINDS];

		ferry_table_host_bytes_by_kind(tt, host_kind_bytes);
		if ((st = ferry_host_tiers_place_layers(a->tiers, host_kind_bytes, ferry_tensor_table_act_unit(tt),
							NULL)))
			return st;
	} else {
		alloc_pool(tt, be, a); /* tier memory is registered by its tier */
		a->host_bytes = a->pool_bytes;
	}
	for (int i = 0; i < tt->n_buffers && !st; i++, a->n++) {
		const struct ferry_table_buffer *b = &tt->buffers[i];

		if (b->site == FERRY_SITE_DEVICE) {
			st = ferry_buffer_alloc(be, b->bytes, &a->dev[i]);
		} else if (a->tiers) {
			if (!(st = ferry_host_tiers_alloc(a->tiers, be, ferry_host_kind_of(b->kind), b->bytes, &a->host[i])))
				a->host_bytes += b->bytes;
		} else if (b->pinned && a->pool) {
			a->host[i] = (char *)a->pool + carved;
			a->in_pool[i] = true;
			carved += ferry_table_host_aligned(b->bytes);
		} else {
			st = alloc_pageable(b, a, i);
		}
	}
	if (st)
		ferry_tensor_table_free(a);
	return st;
}

void ferry_tensor_table_free(struct ferry_table_alloc *a)
{
	for (int i = 0; i < a->n; i++) {
		ferry_buffer_free(a->dev[i]);
		if (a->host[i] && a->tiers)
			ferry_host_tiers_release(a->tiers, a->host[i]);
		else if (a->host[i] && !a->in_pool[i])
			ferry_free(a->host[i]);
	}
	if (a->pool)
		ferry_host_free(a->be, a->pool);
	memset(a, 0, sizeof(*a));
}

void *ferry_tensor_ptr(const struct ferry_tensor_table *tt, const struct ferry_table_alloc *a, int i)
{
	const struct ferry_tensor_entry *e;
	char *base;

	if (i < 0)
		return NULL;
	e = &tt->e[i];
	if (e->site == FERRY_SITE_DEVICE)
		base = a->dev[e->buffer] ? ferry_buffer_ptr(a->dev[e->buffer]) : NULL;
	else
		base = a->host[e->buffer];
	return base ? base + e->offset : NULL; /* NULL: not allocated (a dry build) */
}
