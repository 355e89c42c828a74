/*
 * Unreliable datagram QPs and address handles: the GRH in front of every
 * payload (RoCE v2's IPv4 layout here), completions (byte_len, src_qp,
 * imm, flags), building an AH from a completion and answering with it,
 * Q_Key checks (a mismatch drops; a controlled Q_Key takes the sender's
 * own; a refused datagram leaves the buffer alone), drops without a
 * receive, the MTU limit (longer sends complete unsent), receive buffers
 * that are too small (dropped, the receive stays), the traffic class,
 * UD's modify rules, AH errors, the new post-send API, UD on an
 * SRQ, and multicast: attach/detach with delivery to every member in this
 * process and in another one.
 */
#include "common/verbs_util.c"

#define QKEY 0x11111111u
#define SLOT 4096

struct udq {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct vt_buf r;
};

struct udenv {
	struct vt_env e;
	struct vt_buf s;
	struct ibv_ah *ah;	/* to this host's GID 0 */
};

static struct ibv_qp *ud_qp_on(struct vt_env *e, struct ibv_cq *cq,
			       struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = srq;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = srq ? 0 : 32;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = srq ? 0 : 2;
	ia.qp_type = IBV_QPT_UD;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(e->pd, &ia));
	CHECK_EQ(qp->qp_type, IBV_QPT_UD);
	return qp;
}

static void ud_to_rts(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = VT_PORT;
	a.qkey = qkey;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_QKEY));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

static void udq_open(struct udenv *u, struct udq *q, uint32_t qkey)
{
	q->cq = CHECK_PTR(ibv_create_cq(u->e.ctx, 64, NULL, NULL, 0));
	q->qp = ud_qp_on(&u->e, q->cq, NULL);
	ud_to_rts(q->qp, qkey);
	vt_buf_reg(&u->e, &q->r, 8 * SLOT, IBV_ACCESS_LOCAL_WRITE);
}

static struct ibv_ah *make_ah(struct vt_env *e, const union ibv_gid *dgid,
			      int global)
{
	struct ibv_ah_attr a;

	memset(&a, 0, sizeof(a));
	a.is_global = global;
	a.grh.dgid = *dgid;
	a.grh.sgid_index = 0;
	a.grh.hop_limit = 64;
	a.port_num = VT_PORT;
	return CHECK_PTR(ibv_create_ah(e->pd, &a));
}

static void udenv_open(struct udenv *u)
{
	memset(u, 0, sizeof(*u));
	vt_env_open(&u->e);
	vt_buf_reg(&u->e, &u->s, 8 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(u->s.p, 8 * SLOT, 5);
	u->ah = make_ah(&u->e, &u->e.gid, 1);
}

static void post_ud_recv(struct udq *q, uint64_t id, unsigned slot,
			 uint32_t len)
{
	vt_post_recv(q->qp, id, q->r.p + slot * SLOT, len, q->r.mr->lkey);
}

/* Sends `len` bytes from send slot `slot` to (ah, qpn, qkey). */
static void ud_send(struct udenv *u, struct ibv_qp *from, struct ibv_ah *ah,
		    uint32_t qpn, uint32_t qkey, uint64_t id, unsigned slot,
		    uint32_t len, int imm)
{
	struct ibv_sge sge = vt_sge(u->s.p + slot * SLOT, len, u->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(
		id, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, &sge,
		IBV_SEND_SIGNALED);

	wr.imm_data = htonl(0x5eed0000 + id);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	vt_post_send(from, &wr);
}

static void expect_send_ok(struct ibv_cq *cq, uint64_t id)
{
	struct ibv_wc wc;

	vt_poll(cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, id);
}

/* Checks a UD receive completion and the payload behind its GRH. */
static void expect_ud_recv(struct udenv *u, struct udq *q, uint64_t id,
			   unsigned rslot, unsigned sslot, uint32_t len,
			   uint32_t src_qpn)
{
	struct ibv_wc wc;

	vt_poll(q->cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, id);
	CHECK_EQ(wc.byte_len, len + 40);
	CHECK_EQ(wc.src_qp, src_qpn);
	CHECK_EQ(wc.qp_num, q->qp->qp_num);
	CHECK(wc.wc_flags & IBV_WC_GRH);
	CHECK_MEM(q->r.p + rslot * SLOT + 40, u->s.p + sslot * SLOT, len);
}

static void ud_send_recv_grh(void)
{
	struct udenv u;
	struct udq a, b;
	struct ibv_wc wc;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	post_ud_recv(&b, 1, 0, SLOT);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 10, 1, 100, 1);
	expect_send_ok(a.cq, 10);
	vt_poll(b.cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.byte_len, 140);
	CHECK_EQ(wc.src_qp, a.qp->qp_num);
	CHECK_EQ(wc.qp_num, b.qp->qp_num);
	CHECK_EQ(wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM),
		 IBV_WC_GRH | IBV_WC_WITH_IMM);
	CHECK_EQ(ntohl(wc.imm_data), 0x5eed0000 + 10);
	CHECK_EQ(wc.pkey_index, 0);
	/* As a RoCE NIC reports it (mlx5): the packet's network header type,
	 * 2 for IPv4; UCX reads it to parse the GRH. */
	CHECK_EQ(wc.sl, 2);
	CHECK_MEM(b.r.p + 40, u.s.p + SLOT, 100);

	/* RoCE v2 over IPv4: an IPv4 header in the GRH's last 20 bytes. */
	const uint8_t *ip = b.r.p + 20;
	CHECK_EQ(ip[0], 0x45);
	CHECK_EQ(ip[9], 17);
	const uint8_t lo[4] = { 127, 0, 0, 1 };
	CHECK_MEM(ip + 12, lo, 4);
	CHECK_MEM(ip + 16, lo, 4);

	/* An AH built from the completion leads back to the sender. */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof(aa));
	CHECK_OK(ibv_init_ah_from_wc(u.e.ctx, VT_PORT, &wc,
				     (struct ibv_grh *)b.r.p, &aa));
	CHECK_EQ(aa.is_global, 1);
	CHECK_MEM(aa.grh.dgid.raw, u.e.gid.raw, 16);
	struct ibv_ah *back = CHECK_PTR(ibv_create_ah_from_wc(
		u.e.pd, &wc, (struct ibv_grh *)b.r.p, VT_PORT));
	post_ud_recv(&a, 2, 3, SLOT);
	ud_send(&u, b.qp, back, wc.src_qp, QKEY, 11, 2, 333, 0);
	expect_send_ok(b.cq, 11);
	expect_ud_recv(&u, &a, 2, 3, 2, 333, b.qp->qp_num);
	CHECK_OK(ibv_destroy_ah(back));
}

/* A wrong Q_Key drops the datagram; a controlled one uses the sender's. */
static void ud_qkey_rules(void)
{
	struct udenv u;
	struct udq a, b;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	post_ud_recv(&b, 1, 0, SLOT);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY + 1, 20, 1, 64, 0);
	expect_send_ok(a.cq, 20);
	CHECK_NO_WC_FOR(b.cq, 100);
	/* 0x80000000 set: the sending QP's own Q_Key (QKEY) goes out. */
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, 0x80000000u, 21, 2, 64, 0);
	expect_send_ok(a.cq, 21);
	expect_ud_recv(&u, &b, 1, 0, 2, 64, a.qp->qp_num);

	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(b.qp, &at, IBV_QP_QKEY, &ia));
	CHECK_EQ(at.qkey, QKEY);
	CHECK_EQ(ia.qp_type, IBV_QPT_UD);
}

/* No receive posted: dropped, never held for a later receive. */
static void ud_no_receive_drops(void)
{
	struct udenv u;
	struct udq a, b;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 30, 1, 64, 0);
	expect_send_ok(a.cq, 30);
	/*
	 * Polling B's empty CQ makes B read its socket (ibv_poll_cq makes
	 * progress), which drops the datagram: no receive is posted.
	 */
	CHECK_NO_WC_FOR(b.cq, 100);
	post_ud_recv(&b, 9, 5, SLOT);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 31, 2, 64, 0);
	expect_send_ok(a.cq, 31);
	/* The completion is for the second datagram, not the first. */
	expect_ud_recv(&u, &b, 9, 5, 2, 64, a.qp->qp_num);
	CHECK_NO_WC_FOR(b.cq, 50);
}

/*
 * Larger than the port's MTU: nothing is sent and the send completes
 * successfully (IBTA C10-93.1.1; rxe does the same). The receiver's next
 * completion is the datagram sent after it, and the QP stays in RTS.
 */
static void ud_message_over_mtu(void)
{
	struct udenv u;
	struct udq a, b;
	struct ibv_port_attr pa;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	CHECK_OK(ibv_query_port(u.e.ctx, VT_PORT, &pa));
	uint32_t mtu = 128u << pa.active_mtu;
	CHECK(mtu <= 4096);
	post_ud_recv(&b, 1, 0, SLOT * 2);
	post_ud_recv(&b, 2, 2, SLOT * 2);
	/* Exactly the MTU is fine. */
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 40, 0, mtu, 0);
	expect_send_ok(a.cq, 40);
	expect_ud_recv(&u, &b, 1, 0, 0, mtu, a.qp->qp_num);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 41, 0, mtu + 1, 0);
	expect_send_ok(a.cq, 41);
	CHECK_EQ(vt_qp_state(a.qp), IBV_QPS_RTS);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 42, 3, 64, 0);
	expect_send_ok(a.cq, 42);
	expect_ud_recv(&u, &b, 2, 2, 3, 64, a.qp->qp_num);
	CHECK_NO_WC_FOR(b.cq, 50);
}

/*
 * A datagram larger than the receive (GRH + payload) is dropped silently:
 * no completion, the receive stays posted and its buffer untouched, and
 * the next datagram that fits takes it (as ConnectX; IB class D).
 */
static void ud_receive_too_small(void)
{
	struct udenv u;
	struct udq a, b;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	memset(b.r.p, 0xab, SLOT);
	post_ud_recv(&b, 7, 0, 40 + 63);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 50, 1, 64, 0);
	expect_send_ok(a.cq, 50);
	CHECK_NO_WC_FOR(b.cq, 50);
	for (unsigned i = 0; i < 40 + 63; i++)
		CHECKF(b.r.p[i] == 0xab, "receive buffer byte %u written", i);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 51, 2, 32, 0);
	expect_send_ok(a.cq, 51);
	expect_ud_recv(&u, &b, 7, 0, 2, 32, a.qp->qp_num);
	for (unsigned i = 40 + 32; i < 40 + 63; i++)
		CHECKF(b.r.p[i] == 0xab, "byte %u past the payload written", i);
	CHECK_EQ(vt_qp_state(b.qp), IBV_QPS_RTS);
}

/*
 * A datagram refused for its Q_Key never touches the receive buffer
 * (hardware checks the header before it writes): the bytes past the next
 * accepted datagram keep their old contents.
 */
static void ud_qkey_mismatch_leaves_buffer(void)
{
	struct udenv u;
	struct udq a, b;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	/* Both sizes of receive: one that holds any datagram, one smaller. */
	static const uint32_t lens[] = { SLOT * 2, 40 + 256 };
	for (unsigned k = 0; k < 2; k++) {
		memset(b.r.p, 0xab, SLOT * 2);
		post_ud_recv(&b, 60 + k, 0, lens[k]);
		ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY ^ 1, 70 + k, 1, 200,
			0);
		expect_send_ok(a.cq, 70 + k);
		CHECK_NO_WC_FOR(b.cq, 50);
		for (unsigned i = 0; i < 40 + 200; i++)
			CHECKF(b.r.p[i] == 0xab, "case %u: byte %u written", k,
			       i);
		ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 80 + k, 2, 16, 0);
		expect_send_ok(a.cq, 80 + k);
		expect_ud_recv(&u, &b, 60 + k, 0, 2, 16, a.qp->qp_num);
		for (unsigned i = 40 + 16; i < 40 + 200; i++)
			CHECKF(b.r.p[i] == 0xab, "case %u: byte %u written", k,
			       i);
	}
}

/*
 * The AH's traffic class reaches the receiver in the GRH (RoCE v2: the
 * IPv4 header's TOS), and an AH built from that completion carries it.
 */
static void ud_traffic_class(void)
{
	struct udenv u;
	struct udq a, b;
	struct ibv_ah_attr at;
	struct ibv_wc wc;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	memset(&at, 0, sizeof(at));
	at.is_global = 1;
	at.grh.dgid = u.e.gid;
	at.grh.hop_limit = 64;
	at.grh.traffic_class = 252;
	at.port_num = VT_PORT;
	struct ibv_ah *ah = CHECK_PTR(ibv_create_ah(u.e.pd, &at));
	post_ud_recv(&b, 5, 0, SLOT);
	ud_send(&u, a.qp, ah, b.qp->qp_num, QKEY, 90, 1, 32, 0);
	expect_send_ok(a.cq, 90);
	vt_poll(b.cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 5);
	const uint8_t *ip = b.r.p + 20;
	CHECK_EQ(ip[0], 0x45);
	CHECK_EQ(ip[1], 252);
	struct ibv_ah_attr back;
	memset(&back, 0, sizeof(back));
	CHECK_OK(ibv_init_ah_from_wc(u.e.ctx, VT_PORT, &wc,
				     (struct ibv_grh *)b.r.p, &back));
	CHECK_EQ(back.grh.traffic_class, 252);
	/* Without a traffic class, 0 arrives. */
	post_ud_recv(&b, 6, 1, SLOT);
	ud_send(&u, a.qp, u.ah, b.qp->qp_num, QKEY, 91, 1, 32, 0);
	expect_send_ok(a.cq, 91);
	expect_ud_recv(&u, &b, 6, 1, 1, 32, a.qp->qp_num);
	CHECK_EQ(b.r.p[SLOT + 21], 0);
	CHECK_OK(ibv_destroy_ah(ah));
}

/*
 * RDMA READ, WRITE (with immediate) and atomics on a UD QP: the post is
 * accepted, as hardware accepts it, and the request completes with
 * IBV_WC_LOC_QP_OP_ERR; the QP goes to ERR and what waits behind it (a
 * SEND, a receive) is flushed. Posted before RTS, such a request fails
 * when the QP gets there.
 */
static void ud_rdma_and_atomics_fail_at_completion(void)
{
	static const enum ibv_wr_opcode ops[] = {
		IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
		IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
	};
	struct udenv u;
	struct ibv_wc wc;

	udenv_open(&u);
	for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct udq a;

		udq_open(&u, &a, QKEY);
		post_ud_recv(&a, 90, 0, SLOT);
		struct ibv_sge sge = vt_sge(u.s.p, 8, u.s.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(80 + i, ops[i], &sge,
						   IBV_SEND_SIGNALED);
		if (ops[i] == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    ops[i] == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			wr.wr.atomic.remote_addr = (uintptr_t)u.s.p + 64;
			wr.wr.atomic.rkey = u.s.mr->rkey;
		} else {
			wr.wr.rdma.remote_addr = (uintptr_t)u.s.p + 64;
			wr.wr.rdma.rkey = u.s.mr->rkey;
		}
		vt_post_send(a.qp, &wr);
		ud_send(&u, a.qp, u.ah, a.qp->qp_num, QKEY, 99, 1, 16, 0);
		vt_poll(a.cq, &wc, 1);
		CHECK_EQ(wc.wr_id, 80 + i);
		CHECK_WC_STATUS(&wc, IBV_WC_LOC_QP_OP_ERR);
		CHECK_EQ(vt_qp_state(a.qp), IBV_QPS_ERR);
		/* Flushed: the SEND behind it and the receive, in queue order
		 * each. */
		int seen_send = 0, seen_recv = 0;
		for (int k = 0; k < 2; k++) {
			vt_poll(a.cq, &wc, 1);
			CHECK_WC_STATUS(&wc, IBV_WC_WR_FLUSH_ERR);
			seen_send += wc.wr_id == 99;
			seen_recv += wc.wr_id == 90;
		}
		CHECK(seen_send == 1 && seen_recv == 1);
		CHECK_CQ_EMPTY(a.cq);
		CHECK_OK(ibv_destroy_qp(a.qp));
		CHECK_OK(ibv_destroy_cq(a.cq));
		CHECK_OK(ibv_dereg_mr(a.r.mr));
	}

	/* Posted in INIT: nothing happens until RTS, where it fails. */
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(u.e.ctx, 8, NULL, NULL, 0));
	struct ibv_qp *q = ud_qp_on(&u.e, cq, NULL);
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = VT_PORT;
	at.qkey = QKEY;
	CHECK_OK(ibv_modify_qp(q, &at,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_QKEY));
	struct ibv_sge sge = vt_sge(u.s.p, 8, u.s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(88, IBV_WR_RDMA_READ, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)u.s.p + 64;
	wr.wr.rdma.rkey = u.s.mr->rkey;
	vt_post_send(q, &wr);
	CHECK_NO_WC_FOR(cq, 50);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(q, &at, IBV_QP_STATE));
	at.qp_state = IBV_QPS_RTS;
	CHECK_OK(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN));
	vt_poll(cq, &wc, 1);
	CHECK_EQ(wc.wr_id, 88);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_QP_OP_ERR);
	CHECK_EQ(vt_qp_state(q), IBV_QPS_ERR);
	CHECK_OK(ibv_destroy_qp(q));
	CHECK_OK(ibv_destroy_cq(cq));
}

/* UD's own modify rules; AH argument checks. */
static void ud_rules_and_ah_errors(void)
{
	struct udenv u;
	struct udq a;
	struct ibv_qp_attr at;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	struct ibv_sge sge = vt_sge(u.s.p, 8, u.s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_SEND, &sge, 0);
	struct ibv_send_wr *bad = NULL;
	wr.wr.ud.ah = NULL;
	CHECK_RET(ibv_post_send(a.qp, &wr, &bad), EINVAL);

	/* RESET -> INIT needs the Q_Key; RTR takes no path. */
	struct ibv_qp *q = ud_qp_on(&u.e, a.cq, NULL);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = VT_PORT;
	CHECK_RET(ibv_modify_qp(q, &at,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT),
		  EINVAL);
	at.qkey = 5;
	CHECK_OK(ibv_modify_qp(q, &at,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_QKEY));
	at.qp_state = IBV_QPS_RTR;
	at.ah_attr.port_num = VT_PORT;
	CHECK_RET(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_AV), EINVAL);
	CHECK_OK(ibv_destroy_qp(q));

	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.grh.dgid = u.e.gid;
	aa.port_num = 2;
	CHECK_NULL_ERRNO(ibv_create_ah(u.e.pd, &aa), EINVAL);
	aa.port_num = VT_PORT;
	aa.grh.sgid_index = 200;
	CHECK_NULL_ERRNO(ibv_create_ah(u.e.pd, &aa), EINVAL);

	/* A destroyed AH cannot be posted with. */
	struct ibv_ah *ah = make_ah(&u.e, &u.e.gid, 1);
	CHECK_OK(ibv_destroy_ah(ah));
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = a.qp->qp_num;
	CHECK_RET(ibv_post_send(a.qp, &wr, &bad), EINVAL);
	CHECK_CQ_EMPTY(a.cq);
}

/*
 * An AH without a GRH (LID addressing) reaches this host, as an RC QP's
 * LID-only path does (qperf's UD tests address that way).
 */
static void ud_lid_only_ah(void)
{
	struct udenv u;
	struct udq a, b;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	struct ibv_ah *ah = make_ah(&u.e, &u.e.gid, 0);
	post_ud_recv(&b, 1, 0, SLOT);
	ud_send(&u, a.qp, ah, b.qp->qp_num, QKEY, 60, 3, 512, 0);
	expect_send_ok(a.cq, 60);
	expect_ud_recv(&u, &b, 1, 0, 3, 512, a.qp->qp_num);
}

/* ibv_wr_set_ud_addr on an extended UD QP. */
static void ud_new_post_api(void)
{
	struct udenv u;
	struct udq b;
	struct ibv_qp_init_attr_ex ax;

	udenv_open(&u);
	udq_open(&u, &b, QKEY);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(u.e.ctx, 16, NULL, NULL, 0));
	memset(&ax, 0, sizeof(ax));
	ax.send_cq = cq;
	ax.recv_cq = cq;
	ax.cap.max_send_wr = 8;
	ax.cap.max_recv_wr = 8;
	ax.cap.max_send_sge = 1;
	ax.cap.max_recv_sge = 1;
	ax.qp_type = IBV_QPT_UD;
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = u.e.pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(u.e.ctx, &ax), EOPNOTSUPP);
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp_ex(u.e.ctx, &ax));
	ud_to_rts(qp, QKEY);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(qp));
	post_ud_recv(&b, 4, 1, SLOT);
	ibv_wr_start(qx);
	qx->wr_id = 70;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htonl(99));
	ibv_wr_set_ud_addr(qx, u.ah, b.qp->qp_num, QKEY);
	ibv_wr_set_sge(qx, u.s.mr->lkey, (uintptr_t)u.s.p + 4 * SLOT, 200);
	CHECK_OK(ibv_wr_complete(qx));
	expect_send_ok(cq, 70);
	expect_ud_recv(&u, &b, 4, 1, 4, 200, qp->qp_num);
}

/* A UD QP on an SRQ. */
static void ud_on_srq(void)
{
	struct udenv u;
	struct udq a;
	struct ibv_srq_init_attr si;
	struct ibv_wc wc;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	memset(&si, 0, sizeof(si));
	si.attr.max_wr = 8;
	si.attr.max_sge = 1;
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq(u.e.pd, &si));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(u.e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp *q = ud_qp_on(&u.e, cq, srq);
	ud_to_rts(q, QKEY);
	struct vt_buf r;
	vt_buf_reg(&u.e, &r, SLOT, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = vt_sge(r.p, SLOT, r.mr->lkey);
	struct ibv_recv_wr rw = { .wr_id = 88, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	CHECK_OK(ibv_post_srq_recv(srq, &rw, &bad));
	ud_send(&u, a.qp, u.ah, q->qp_num, QKEY, 80, 6, 300, 0);
	expect_send_ok(a.cq, 80);
	vt_poll(cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 88);
	CHECK_EQ(wc.byte_len, 340);
	CHECK_EQ(wc.qp_num, q->qp_num);
	CHECK_MEM(r.p + 40, u.s.p + 6 * SLOT, 300);
}

static union ibv_gid group_gid(uint8_t last)
{
	union ibv_gid g;

	memset(&g, 0, sizeof(g));
	g.raw[10] = 0xff;
	g.raw[11] = 0xff;
	g.raw[12] = 239;
	g.raw[13] = 77;
	g.raw[14] = (uint8_t)(getpid() & 0xff);
	g.raw[15] = last;
	return g;
}

/*
 * Every attached QP gets its own copy; one that is not attached (or was
 * detached) gets none. Attach rules: UD only, multicast GIDs only.
 */
static void ud_multicast_in_process(void)
{
	struct udenv u;
	struct udq a, b, c, d;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	udq_open(&u, &b, QKEY);
	udq_open(&u, &c, QKEY);
	udq_open(&u, &d, QKEY);
	union ibv_gid grp = group_gid(1);
	CHECK_OK(ibv_attach_mcast(b.qp, &grp, 0));
	CHECK_OK(ibv_attach_mcast(c.qp, &grp, 0));
	CHECK_RET(ibv_attach_mcast(b.qp, &u.e.gid, 0), EINVAL);
	CHECK_RET(ibv_detach_mcast(d.qp, &grp, 0), EINVAL);
	struct ibv_ah *mah = make_ah(&u.e, &grp, 1);
	for (unsigned i = 0; i < 3; i++) {
		post_ud_recv(&b, 100 + i, i, SLOT);
		post_ud_recv(&c, 200 + i, i, SLOT);
		post_ud_recv(&d, 300 + i, i, SLOT);
	}
	ud_send(&u, a.qp, mah, 0xffffff, QKEY, 90, 2, 256, 0);
	expect_send_ok(a.cq, 90);
	expect_ud_recv(&u, &b, 100, 0, 2, 256, a.qp->qp_num);
	expect_ud_recv(&u, &c, 200, 0, 2, 256, a.qp->qp_num);
	/* The GRH names the group as the destination. */
	CHECK_MEM(b.r.p + 36, &grp.raw[12], 4);
	CHECK_NO_WC_FOR(d.cq, 50);

	CHECK_OK(ibv_detach_mcast(c.qp, &grp, 0));
	ud_send(&u, a.qp, mah, 0xffffff, QKEY, 91, 3, 128, 0);
	expect_send_ok(a.cq, 91);
	expect_ud_recv(&u, &b, 101, 1, 3, 128, a.qp->qp_num);
	CHECK_NO_WC_FOR(c.cq, 50);

	/* A wrong Q_Key drops multicast too. */
	ud_send(&u, a.qp, mah, 0xffffff, QKEY + 7, 92, 3, 128, 0);
	expect_send_ok(a.cq, 92);
	CHECK_NO_WC_FOR(b.cq, 50);

	/* An IPv6 group works on the loopback device too. */
	union ibv_gid g6;
	memset(&g6, 0, sizeof(g6));
	g6.raw[0] = 0xff;
	g6.raw[1] = 0x0e;
	g6.raw[14] = (uint8_t)getpid();
	g6.raw[15] = 6;
	CHECK_OK(ibv_attach_mcast(d.qp, &g6, 0));
	struct ibv_ah *ah6 = make_ah(&u.e, &g6, 1);
	ud_send(&u, a.qp, ah6, 0xffffff, QKEY, 93, 4, 64, 0);
	expect_send_ok(a.cq, 93);
	expect_ud_recv(&u, &d, 300, 0, 4, 64, a.qp->qp_num);
	/* Its GRH is IPv6-shaped and names the group. */
	CHECK_EQ(d.r.p[0] >> 4, 6);
	CHECK_MEM(d.r.p + 24, g6.raw, 16);
	/* Only d is in that group. */
	CHECK_NO_WC_FOR(b.cq, 50);

	/* Not UD: EINVAL. */
	struct vt_pair p;
	vt_pair_create(&u.e, &p, NULL, 0);
	CHECK_RET(ibv_attach_mcast(p.a, &grp, 0), EINVAL);
}

/* IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: a member that sends to its own group
 * does not get its datagram back; the other members do, and without the
 * flag the sender does too. The flag is UD's only. */
static void ud_multicast_block_self(void)
{
	struct udenv u;
	struct udq a, b, c;

	udenv_open(&u);
	udq_open(&u, &b, QKEY);
	udq_open(&u, &c, QKEY);
	a.cq = CHECK_PTR(ibv_create_cq(u.e.ctx, 64, NULL, NULL, 0));
	struct ibv_qp_init_attr_ex ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = a.cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.pd = u.e.pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	errno = 0;
	CHECK(ibv_create_qp_ex(u.e.ctx, &ia) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);
	ia.qp_type = IBV_QPT_UD;
	ia.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	CHECK(ibv_create_qp_ex(u.e.ctx, &ia) == NULL);
	ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	a.qp = CHECK_PTR(ibv_create_qp_ex(u.e.ctx, &ia));
	ud_to_rts(a.qp, QKEY);
	vt_buf_reg(&u.e, &a.r, 8 * SLOT, IBV_ACCESS_LOCAL_WRITE);

	union ibv_gid grp = group_gid(3);
	CHECK_OK(ibv_attach_mcast(a.qp, &grp, 0));
	CHECK_OK(ibv_attach_mcast(b.qp, &grp, 0));
	CHECK_OK(ibv_attach_mcast(c.qp, &grp, 0));
	struct ibv_ah *mah = make_ah(&u.e, &grp, 1);
	post_ud_recv(&a, 10, 0, SLOT);
	post_ud_recv(&b, 20, 0, SLOT);
	post_ud_recv(&c, 30, 0, SLOT);
	post_ud_recv(&c, 31, 1, SLOT);
	/* a (blocking) sends: b and c receive, a does not. */
	ud_send(&u, a.qp, mah, 0xffffff, QKEY, 1, 1, 100, 0);
	expect_send_ok(a.cq, 1);
	expect_ud_recv(&u, &b, 20, 0, 1, 100, a.qp->qp_num);
	expect_ud_recv(&u, &c, 30, 0, 1, 100, a.qp->qp_num);
	/* b (not blocking) sends: a and c receive it, and so does b. */
	post_ud_recv(&b, 21, 1, SLOT);
	ud_send(&u, b.qp, mah, 0xffffff, QKEY, 2, 2, 60, 0);
	struct ibv_wc wc[2];
	vt_poll(b.cq, wc, 2);
	int got_self = 0, got_send = 0;
	for (int i = 0; i < 2; i++) {
		if (wc[i].opcode == IBV_WC_SEND) {
			CHECK_EQ(wc[i].wr_id, 2);
			got_send = 1;
		} else {
			CHECK_WC(&wc[i], IBV_WC_SUCCESS, IBV_WC_RECV);
			CHECK_EQ(wc[i].wr_id, 21);
			CHECK_EQ(wc[i].src_qp, b.qp->qp_num);
			got_self = 1;
		}
	}
	CHECK(got_self && got_send);
	expect_ud_recv(&u, &c, 31, 1, 2, 60, b.qp->qp_num);
	/* a's receive took b's datagram, not its own earlier one. */
	expect_ud_recv(&u, &a, 10, 0, 2, 60, b.qp->qp_num);
}

/* A member in another process receives what this one sends. */
static void ud_multicast_other_process(void)
{
	union ibv_gid grp = group_gid(2);
	int ready[2], done[2];

	CHECK(pipe(ready) == 0 && pipe(done) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct udenv u;
		struct udq b;

		vt_alarm(VT_CASE_SECONDS, "multicast child");
		udenv_open(&u);
		udq_open(&u, &b, QKEY);
		CHECK_OK(ibv_attach_mcast(b.qp, &grp, 0));
		post_ud_recv(&b, 1, 0, SLOT);
		uint32_t qpn = b.qp->qp_num;
		vt_write_all(ready[1], &qpn, sizeof(qpn));
		struct ibv_wc wc;
		vt_poll(b.cq, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.byte_len, 40 + 777);
		uint8_t want[777];
		for (int i = 0; i < 777; i++)
			want[i] = vt_pattern_byte(5, 5 * SLOT + i);
		CHECK_MEM(b.r.p + 40, want, 777);
		uint32_t src = wc.src_qp;
		vt_write_all(done[1], &src, sizeof(src));
		_exit(0);
	}
	struct udenv u;
	struct udq a;
	uint32_t qpn, src;

	udenv_open(&u);
	udq_open(&u, &a, QKEY);
	vt_read_all(ready[0], &qpn, sizeof(qpn));
	struct ibv_ah *mah = make_ah(&u.e, &grp, 1);
	ud_send(&u, a.qp, mah, 0xffffff, QKEY, 95, 5, 777, 0);
	expect_send_ok(a.cq, 95);
	vt_read_all(done[0], &src, sizeof(src));
	CHECK_EQ(src, a.qp->qp_num);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
}

static const struct vt_case cases[] = {
	VT_CASE(ud_send_recv_grh),	VT_CASE(ud_qkey_rules),
	VT_CASE(ud_no_receive_drops),	VT_CASE(ud_message_over_mtu),
	VT_CASE(ud_receive_too_small),	VT_CASE(ud_qkey_mismatch_leaves_buffer),
	VT_CASE(ud_traffic_class),	VT_CASE(ud_rules_and_ah_errors),
	VT_CASE(ud_rdma_and_atomics_fail_at_completion),
	VT_CASE(ud_lid_only_ah),	VT_CASE(ud_new_post_api),
	VT_CASE(ud_on_srq),		VT_CASE(ud_multicast_in_process),
	VT_CASE(ud_multicast_other_process), VT_CASE(ud_multicast_block_self),
};
VT_MAIN(cases)
