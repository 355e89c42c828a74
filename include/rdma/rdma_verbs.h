/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Convenience wrappers that drive the verbs objects owned by an
 * rdma_cm_id (its pd, qp/srq and CQs).  Everything here is inline except
 * the SRQ helpers.  Like the rest of librdmacm they report failure as -1
 * with errno set.
 */
#ifndef RDMA_VERBS_H
#define RDMA_VERBS_H

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Turns a verbs-style positive error into librdmacm's -1/errno form. */
static inline int rdma_seterrno(int ret)
{
	if (ret == 0)
		return 0;
	errno = ret;
	return -1;
}

/* SRQ attached to the id (exported by librdmacm). */
int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
		    struct ibv_srq_init_attr *attr);
int rdma_create_srq_ex(struct rdma_cm_id *id,
		       struct ibv_srq_init_attr_ex *attr);
void rdma_destroy_srq(struct rdma_cm_id *id);

/* ---- memory registration on id->pd ---- */

/* Buffers used only as local send/receive data. */
static inline struct ibv_mr *rdma_reg_msgs(struct rdma_cm_id *id, void *addr,
					   size_t length)
{
	return ibv_reg_mr(id->pd, addr, length, IBV_ACCESS_LOCAL_WRITE);
}

/* Buffers the peer may RDMA-read. */
static inline struct ibv_mr *rdma_reg_read(struct rdma_cm_id *id, void *addr,
					   size_t length)
{
	return ibv_reg_mr(id->pd, addr, length,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
}

/* Buffers the peer may RDMA-write. */
static inline struct ibv_mr *rdma_reg_write(struct rdma_cm_id *id, void *addr,
					    size_t length)
{
	return ibv_reg_mr(id->pd, addr, length,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static inline int rdma_dereg_mr(struct ibv_mr *mr)
{
	return rdma_seterrno(ibv_dereg_mr(mr));
}

/* ---- scatter/gather variants; @context becomes the wr_id ---- */

/* Goes to the id's SRQ when it has one, otherwise to its QP. */
static inline int rdma_post_recvv(struct rdma_cm_id *id, void *context,
				  struct ibv_sge *sgl, int nsge)
{
	struct ibv_recv_wr wr;
	struct ibv_recv_wr *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uintptr_t)context;
	wr.sg_list = sgl;
	wr.num_sge = nsge;

	if (id->srq)
		return rdma_seterrno(ibv_post_srq_recv(id->srq, &wr, &bad));
	return rdma_seterrno(ibv_post_recv(id->qp, &wr, &bad));
}

/* Shared by the send-side helpers below. */
static inline void __rdma_fill_send_wr(struct ibv_send_wr *wr, void *context,
				       struct ibv_sge *sgl, int nsge,
				       enum ibv_wr_opcode opcode, int flags)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = (uintptr_t)context;
	wr->sg_list = sgl;
	wr->num_sge = nsge;
	wr->opcode = opcode;
	wr->send_flags = (unsigned int)flags;
}

static inline int rdma_post_sendv(struct rdma_cm_id *id, void *context,
				  struct ibv_sge *sgl, int nsge, int flags)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad;

	__rdma_fill_send_wr(&wr, context, sgl, nsge, IBV_WR_SEND, flags);
	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad));
}

static inline int rdma_post_readv(struct rdma_cm_id *id, void *context,
				  struct ibv_sge *sgl, int nsge, int flags,
				  uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad;

	__rdma_fill_send_wr(&wr, context, sgl, nsge, IBV_WR_RDMA_READ, flags);
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad));
}

static inline int rdma_post_writev(struct rdma_cm_id *id, void *context,
				   struct ibv_sge *sgl, int nsge, int flags,
				   uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad;

	__rdma_fill_send_wr(&wr, context, sgl, nsge, IBV_WR_RDMA_WRITE, flags);
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad));
}

/* ---- single-buffer variants ---- */

/* Describes [addr, addr+length); a NULL @mr gives lkey 0 (inline sends). */
static inline void __rdma_fill_sge(struct ibv_sge *sge, void *addr,
				   size_t length, struct ibv_mr *mr)
{
	sge->addr = (uint64_t)(uintptr_t)addr;
	sge->length = (uint32_t)length;
	sge->lkey = mr ? mr->lkey : 0;
}

/* The receive buffer has to lie inside @mr. */
static inline int rdma_post_recv(struct rdma_cm_id *id, void *context,
				 void *addr, size_t length, struct ibv_mr *mr)
{
	struct ibv_sge sge;

	assert((uint8_t *)addr >= (uint8_t *)mr->addr &&
	       (uint8_t *)addr + length <= (uint8_t *)mr->addr + mr->length);
	__rdma_fill_sge(&sge, addr, length, mr);
	return rdma_post_recvv(id, context, &sge, 1);
}

static inline int rdma_post_send(struct rdma_cm_id *id, void *context,
				 void *addr, size_t length, struct ibv_mr *mr,
				 int flags)
{
	struct ibv_sge sge;

	__rdma_fill_sge(&sge, addr, length, mr);
	return rdma_post_sendv(id, context, &sge, 1, flags);
}

/* The local target of a read must be registered: @mr may not be NULL. */
static inline int rdma_post_read(struct rdma_cm_id *id, void *context,
				 void *addr, size_t length, struct ibv_mr *mr,
				 int flags, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge;

	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr->lkey;
	return rdma_post_readv(id, context, &sge, 1, flags, remote_addr, rkey);
}

static inline int rdma_post_write(struct rdma_cm_id *id, void *context,
				  void *addr, size_t length, struct ibv_mr *mr,
				  int flags, uint64_t remote_addr,
				  uint32_t rkey)
{
	struct ibv_sge sge;

	__rdma_fill_sge(&sge, addr, length, mr);
	return rdma_post_writev(id, context, &sge, 1, flags, remote_addr,
				rkey);
}

/* UD send to @remote_qpn through @ah, using the CM's well-known Q_Key. */
static inline int rdma_post_ud_send(struct rdma_cm_id *id, void *context,
				    void *addr, size_t length,
				    struct ibv_mr *mr, int flags,
				    struct ibv_ah *ah, uint32_t remote_qpn)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad;
	struct ibv_sge sge;

	__rdma_fill_sge(&sge, addr, length, mr);
	__rdma_fill_send_wr(&wr, context, &sge, 1, IBV_WR_SEND, flags);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = remote_qpn;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad));
}

/*
 * Blocks until one completion is available on @cq and stores it in @wc.
 * Polls first, arms the CQ, polls again to close the race with a
 * completion that arrived before arming, and only then sleeps on the
 * completion channel.  Returns the number of completions (1) or -1.
 */
static inline int __rdma_wait_one_comp(struct rdma_cm_id *id,
				       struct ibv_cq *cq,
				       struct ibv_comp_channel *channel,
				       struct ibv_wc *wc)
{
	for (;;) {
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		int ret;

		ret = ibv_poll_cq(cq, 1, wc);
		if (ret)
			return ret < 0 ? rdma_seterrno(ret) : ret;

		ret = ibv_req_notify_cq(cq, 0);
		if (ret)
			return rdma_seterrno(ret);

		ret = ibv_poll_cq(cq, 1, wc);
		if (ret)
			return ret < 0 ? rdma_seterrno(ret) : ret;

		ret = ibv_get_cq_event(channel, &ev_cq, &ev_ctx);
		if (ret)
			return ret;

		assert(ev_cq == cq && ev_ctx == id);
		(void)ev_ctx;
		(void)id;
		ibv_ack_cq_events(cq, 1);
	}
}

static inline int rdma_get_send_comp(struct rdma_cm_id *id, struct ibv_wc *wc)
{
	return __rdma_wait_one_comp(id, id->send_cq, id->send_cq_channel, wc);
}

static inline int rdma_get_recv_comp(struct rdma_cm_id *id, struct ibv_wc *wc)
{
	return __rdma_wait_one_comp(id, id->recv_cq, id->recv_cq_channel, wc);
}

#ifdef __cplusplus
}
#endif

#endif /* RDMA_VERBS_H */
