/*
 * Unreliable connected QPs: SEND, SEND_WITH_IMM, RDMA WRITE and
 * WRITE_WITH_IMM with their completions, and UC's semantics: no RNR (a
 * message with no receive posted is dropped, the sender still completes),
 * a bad rkey drops the message silently, no READ or atomics, UC's own
 * attribute rules in modify_qp, and a vanished peer never hangs a sender.
 */
#include "common/verbs_util.c"

struct ucpair {
	struct vt_env e;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	struct vt_buf s, r;
};

static struct ibv_qp *uc_qp(struct vt_env *e, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = 32;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	ia.qp_type = IBV_QPT_UC;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(e->pd, &ia));
	CHECK_EQ(qp->qp_type, IBV_QPT_UC);
	return qp;
}

static void uc_connect(struct vt_env *e, struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = VT_PORT;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = e->gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = VT_PORT;
	/* RC's responder attributes do not belong to UC. */
	a.max_dest_rd_atomic = 1;
	CHECK_RET(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					IBV_QP_MAX_DEST_RD_ATOMIC),
		  EINVAL);
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 14;
	CHECK_RET(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT),
		  EINVAL);
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

static void ucpair_open(struct ucpair *p)
{
	memset(p, 0, sizeof(*p));
	vt_env_open(&p->e);
	p->cq_a = CHECK_PTR(ibv_create_cq(p->e.ctx, 64, NULL, NULL, 0));
	p->cq_b = CHECK_PTR(ibv_create_cq(p->e.ctx, 64, NULL, NULL, 0));
	p->a = uc_qp(&p->e, p->cq_a);
	p->b = uc_qp(&p->e, p->cq_b);
	uc_connect(&p->e, p->a, p->b->qp_num);
	uc_connect(&p->e, p->b, p->a->qp_num);
	vt_buf_reg(&p->e, &p->s, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&p->e, &p->r, 8192,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static void send_one(struct ucpair *p, uint64_t id, enum ibv_wr_opcode op,
		     size_t off, uint32_t len, uint32_t imm, uint64_t raddr,
		     uint32_t rkey)
{
	struct ibv_sge sge = vt_sge(p->s.p + off, len, p->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(id, op, &sge, IBV_SEND_SIGNALED);

	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(p->a, &wr);
}

static void uc_all_opcodes(void)
{
	struct ucpair p;
	struct ibv_wc wc;

	ucpair_open(&p);
	vt_fill(p.s.p, 4096, 3);
	vt_post_recv(p.b, 1, p.r.p, 1024, p.r.mr->lkey);
	vt_post_recv(p.b, 2, p.r.p + 1024, 1024, p.r.mr->lkey);
	vt_post_recv(p.b, 3, p.r.p + 2048, 16, p.r.mr->lkey);

	send_one(&p, 11, IBV_WR_SEND, 0, 1000, 0, 0, 0);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 11);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.byte_len, 1000);
	CHECK_EQ(wc.src_qp, p.a->qp_num);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK_MEM(p.r.p, p.s.p, 1000);

	send_one(&p, 12, IBV_WR_SEND_WITH_IMM, 100, 64, 0xabcd1234, 0, 0);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.byte_len, 64);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(wc.imm_data), 0xabcd1234);
	CHECK_MEM(p.r.p + 1024, p.s.p + 100, 64);

	/* RDMA WRITE: lands with no receive consumed and no completion there. */
	send_one(&p, 13, IBV_WR_RDMA_WRITE, 200, 3000,
		 0, (uintptr_t)p.r.p + 4096, p.r.mr->rkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	/* WRITE_WITH_IMM consumes receive 3 (its buffer is not written). */
	send_one(&p, 14, IBV_WR_RDMA_WRITE_WITH_IMM, 300, 128, 77,
		 (uintptr_t)p.r.p + 7168, p.r.mr->rkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.wr_id, 3);
	CHECK_EQ(wc.byte_len, 128);
	CHECK_EQ(ntohl(wc.imm_data), 77);
	/* Messages are delivered in order: the WRITE is in place by now. */
	CHECK_MEM(p.r.p + 4096, p.s.p + 200, 3000);
	CHECK_MEM(p.r.p + 7168, p.s.p + 300, 128);
	CHECK_CQ_EMPTY(p.cq_b);
}

/* No receive posted: the message is dropped, the sender never knows. */
static void uc_no_receive_drops(void)
{
	struct ucpair p;
	struct ibv_wc wc;

	ucpair_open(&p);
	vt_fill(p.s.p, 256, 1);
	vt_fill(p.s.p + 256, 256, 2);
	send_one(&p, 21, IBV_WR_SEND, 0, 256, 0, 0, 0);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	/* A WRITE_WITH_IMM needs a receive as well. */
	send_one(&p, 22, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 256, 5,
		 (uintptr_t)p.r.p + 4096, p.r.mr->rkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_NO_WC_FOR(p.cq_b, 100);
	CHECK_EQ(vt_qp_state(p.b), IBV_QPS_RTS);

	/* The next message, with a receive posted, arrives intact. */
	vt_post_recv(p.b, 7, p.r.p, 512, p.r.mr->lkey);
	send_one(&p, 23, IBV_WR_SEND, 256, 256, 0, 0, 0);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.byte_len, 256);
	CHECK_MEM(p.r.p, p.s.p + 256, 256);
	vt_poll(p.cq_a, &wc, 1);
	/* The dropped WRITE_WITH_IMM's payload did not land either. */
	CHECK_BYTES(p.r.p + 4096, 0, 256);
}

/* A bad rkey, or a range outside the MR: dropped, both QPs stay usable. */
static void uc_bad_rkey_drops(void)
{
	struct ucpair p;
	struct ibv_wc wc;

	ucpair_open(&p);
	vt_fill(p.s.p, 8192, 9);
	send_one(&p, 31, IBV_WR_RDMA_WRITE, 0, 512, 0,
		 (uintptr_t)p.r.p, p.r.mr->rkey ^ 0x5a5a);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	send_one(&p, 32, IBV_WR_RDMA_WRITE, 0, 512, 0,
		 (uintptr_t)p.r.p + 8000, p.r.mr->rkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	/* A good one after them, then a send to know they are all through. */
	send_one(&p, 33, IBV_WR_RDMA_WRITE, 1024, 512, 0,
		 (uintptr_t)p.r.p + 1024, p.r.mr->rkey);
	vt_post_recv(p.b, 8, p.r.p + 4096, 64, p.r.mr->lkey);
	send_one(&p, 34, IBV_WR_SEND, 2048, 64, 0, 0, 0);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_BYTES(p.r.p, 0, 1024);
	CHECK_MEM(p.r.p + 1024, p.s.p + 1024, 512);
	CHECK_BYTES(p.r.p + 1536, 0, 2560);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_RTS);
	CHECK_EQ(vt_qp_state(p.b), IBV_QPS_RTS);
}

/* UC has no READ and no atomics. */
static void uc_no_read_atomic(void)
{
	struct ucpair p;
	struct ibv_send_wr *bad = NULL;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	ucpair_open(&p);
	struct ibv_sge sge = vt_sge(p.s.p, 8, p.s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_READ, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)p.r.p;
	wr.wr.rdma.rkey = p.r.mr->rkey;
	CHECK_RET(ibv_post_send(p.a, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)p.r.p;
	wr.wr.atomic.rkey = p.r.mr->rkey;
	CHECK_RET(ibv_post_send(p.a, &wr, &bad), EINVAL);
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_OK(ibv_query_qp(p.a, &a, IBV_QP_STATE, &ia));
	CHECK_EQ(ia.qp_type, IBV_QPT_UC);
	CHECK_EQ(a.qp_state, IBV_QPS_RTS);

	/* The extended QP refuses READ and atomics among its send ops. */
	struct ibv_qp_init_attr_ex ax;
	memset(&ax, 0, sizeof(ax));
	ax.send_cq = p.cq_a;
	ax.recv_cq = p.cq_a;
	ax.cap.max_send_wr = 4;
	ax.cap.max_recv_wr = 4;
	ax.cap.max_send_sge = 1;
	ax.cap.max_recv_sge = 1;
	ax.qp_type = IBV_QPT_UC;
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = p.e.pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(p.e.ctx, &ax), EOPNOTSUPP);
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *q = CHECK_PTR(ibv_create_qp_ex(p.e.ctx, &ax));
	CHECK_OK(ibv_destroy_qp(q));
}

/* The peer QP is gone: sends still complete (lost on the wire), no hang. */
static void uc_peer_gone(void)
{
	struct ucpair p;
	struct ibv_wc wc[8];

	ucpair_open(&p);
	CHECK_OK(ibv_destroy_qp(p.b));
	for (int i = 0; i < 8; i++)
		send_one(&p, 40 + i, IBV_WR_SEND, 64 * i, 64, 0, 0, 0);
	vt_poll(p.cq_a, wc, 8);
	for (int i = 0; i < 8; i++) {
		CHECK_WC(&wc[i], IBV_WC_SUCCESS, IBV_WC_SEND);
		CHECK_EQ(wc[i].wr_id, 40 + i);
	}
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_RTS);
}

static const struct vt_case cases[] = {
	VT_CASE(uc_all_opcodes),	VT_CASE(uc_no_receive_drops),
	VT_CASE(uc_bad_rkey_drops),	VT_CASE(uc_no_read_atomic),
	VT_CASE(uc_peer_gone),
};
VT_MAIN(cases)
