/* The one-process engine: every collective over one rank is a copy at most. */
#include "comm/comm_impl.h"

#include <string.h>

static ferry_status single_all_reduce(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t,
				      enum ferry_comm_op op, void *stream)
{
	(void)c, (void)buf, (void)count, (void)t, (void)op, (void)stream;
	return FERRY_OK;
}

static ferry_status single_reduce_scatter(struct ferry_comm *c, const void *send, void *recv, size_t count,
					  enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	(void)c, (void)op, (void)stream;
	if (send != recv)
		memmove(recv, send, count * ferry_comm_dtype_size(t));
	return FERRY_OK;
}

static ferry_status single_all_gather(struct ferry_comm *c, const void *send, void *recv, size_t count,
				      enum ferry_comm_dtype t, void *stream)
{
	(void)c, (void)stream;
	if (send != recv)
		memmove(recv, send, count * ferry_comm_dtype_size(t));
	return FERRY_OK;
}

/* One rank: its slice is the whole. */
static ferry_status single_reduce_scatter_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
					    enum ferry_comm_dtype t, enum ferry_comm_op op, void *stream)
{
	return single_reduce_scatter(c, send, recv, counts[0], t, op, stream);
}

static ferry_status single_all_gather_v(struct ferry_comm *c, const void *send, void *recv, const size_t *counts,
					enum ferry_comm_dtype t, void *stream)
{
	return single_all_gather(c, send, recv, counts[0], t, stream);
}

static ferry_status single_broadcast(struct ferry_comm *c, void *buf, size_t count, enum ferry_comm_dtype t,
				     int root, void *stream)
{
	(void)c, (void)buf, (void)count, (void)t, (void)root, (void)stream;
	return FERRY_OK;
}

static ferry_status single_barrier(struct ferry_comm *c)
{
	(void)c;
	return FERRY_OK;
}

const struct ferry_comm_iface ferry_comm_single_iface = {
	.version = FERRY_COMM_IFACE_VERSION,
	.name = "single",
	.all_reduce = single_all_reduce,
	.reduce_scatter = single_reduce_scatter,
	.all_gather = single_all_gather,
	.reduce_scatter_v = single_reduce_scatter_v,
	.all_gather_v = single_all_gather_v,
	.broadcast = single_broadcast,
	.barrier = single_barrier,
};
