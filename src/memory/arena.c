#include "memory/arena.h"
#include "core/error.h"

#include <string.h>

static size_t round_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

ferry_status ferry_arena_init(struct ferry_arena *a, size_t capacity,
			      size_t alignment, int max_fragments)
{
	memset(a, 0, sizeof(*a));
	if (alignment == 0 || (alignment & (alignment - 1)) != 0 || max_fragments < 1)
		return ferry_error(FERRY_ERR_INVALID, "arena: bad alignment or fragment count");
	a->free_list = ferry_calloc((size_t)max_fragments, sizeof(*a->free_list));
	if (!a->free_list)
		return ferry_error(FERRY_ERR_NOMEM, "arena: cannot allocate its free list");
	a->capacity = capacity / alignment * alignment;
	a->alignment = alignment;
	a->max_free = max_fragments;
	if (a->capacity > 0) {
		a->free_list[0] = (struct ferry_range){ 0, a->capacity };
		a->n_free = 1;
	}
	return FERRY_OK;
}

void ferry_arena_release(struct ferry_arena *a)
{
	ferry_free(a->free_list);
	memset(a, 0, sizeof(*a));
}

ferry_status ferry_arena_alloc(struct ferry_arena *a, size_t size, size_t *offset)
{
	char sz[4][FERRY_SIZE_CHARS];
	size_t need;

	if (size > a->capacity) /* also keeps the rounding below from wrapping */
		return ferry_error(FERRY_ERR_DEVICE_MEM, "device arena full: asked for %s (%zu bytes), the arena "
				   "has %s", ferry_format_size(size, sz[0]), size,
				   ferry_format_size(a->capacity, sz[1]));
	need = round_up(size ? size : 1, a->alignment);

	for (int i = 0; i < a->n_free; i++) {
		struct ferry_range *r = &a->free_list[i];

		if (r->size < need)
			continue;
		*offset = r->offset;
		r->offset += need;
		r->size -= need;
		if (r->size == 0) {
			memmove(r, r + 1, (size_t)(a->n_free - i - 1) * sizeof(*r));
			a->n_free--;
		}
		a->live += need;
		if (a->live > a->peak)
			a->peak = a->live;
		return FERRY_OK;
	}
	return ferry_error(FERRY_ERR_DEVICE_MEM,
			   "device arena full: asked for %s (%zu bytes) with %s of %s live (largest free block %s)",
			   ferry_format_size(need, sz[0]), need, ferry_format_size(a->live, sz[1]),
			   ferry_format_size(a->capacity, sz[2]), ferry_format_size(ferry_arena_largest_free(a), sz[3]));
}

ferry_status ferry_arena_free(struct ferry_arena *a, size_t offset, size_t size)
{
	size_t need = round_up(size ? size : 1, a->alignment);
	int i = 0;

	while (i < a->n_free && a->free_list[i].offset < offset)
		i++;
	int merge_prev = i > 0 && a->free_list[i - 1].offset + a->free_list[i - 1].size == offset;
	int merge_next = i < a->n_free && offset + need == a->free_list[i].offset;

	if (merge_prev && merge_next) {
		a->free_list[i - 1].size += need + a->free_list[i].size;
		memmove(&a->free_list[i], &a->free_list[i + 1],
			(size_t)(a->n_free - i - 1) * sizeof(a->free_list[0]));
		a->n_free--;
	} else if (merge_prev) {
		a->free_list[i - 1].size += need;
	} else if (merge_next) {
		a->free_list[i].offset = offset;
		a->free_list[i].size += need;
	} else {
		/* A range between two live ones needs an entry of its own, and
		 * the entries were bounded at init.  Many small buffers freed out
		 * of order can use them all up (bad luck with the input, not a
		 * bug), so this is checked in every build: the range is then not
		 * recorded and stays counted as live, lost until release, and the
		 * arena stays consistent. */
		if (a->n_free >= a->max_free)
			return ferry_error(FERRY_ERR_DEVICE_MEM,
					   "device arena: free list full (%d ranges): %zu bytes at "
					   "offset %zu stay allocated",
					   a->max_free, need, offset);
		memmove(&a->free_list[i + 1], &a->free_list[i],
			(size_t)(a->n_free - i) * sizeof(a->free_list[0]));
		a->free_list[i] = (struct ferry_range){ offset, need };
		a->n_free++;
	}
	a->live -= need;
	return FERRY_OK;
}

size_t ferry_arena_largest_free(const struct ferry_arena *a)
{
	size_t best = 0;

	for (int i = 0; i < a->n_free; i++)
		if (a->free_list[i].size > best)
			best = a->free_list[i].size;
	return best;
}
