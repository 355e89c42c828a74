/*
 * QP creation limits, the RC state machine with its required and optional
 * attribute masks, ibv_query_qp, and what posting does in each state.
 */
#include "common/verbs_util.c"

#define MASK_RESET_INIT                                                        \
	(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define MASK_INIT_RTR                                                          \
	(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |        \
	 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define MASK_RTR_RTS                                                           \
	(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |    \
	 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)

static void attr_init(struct ibv_qp_attr *a, int access)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->pkey_index = 0;
	a->port_num = VT_PORT;
	a->qp_access_flags = access;
}

static void attr_rtr(struct ibv_qp_attr *a, uint32_t dest, const union ibv_gid *gid)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_2048;
	a->dest_qp_num = dest;
	a->rq_psn = 0x00abcd;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 7;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = *gid;
	a->ah_attr.grh.sgid_index = 0;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = VT_PORT;
}

static void attr_rts(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->sq_psn = 0x00beef;
	a->timeout = 14;
	a->retry_cnt = 6;
	a->rnr_retry = 5;
	a->max_rd_atomic = 1;
}

static struct ibv_qp *make_qp(struct vt_env *e, struct ibv_cq *cq,
			      struct ibv_qp_cap *cap)
{
	struct vt_qp_opts o;

	vt_default_opts(&o);
	return vt_create_qp(e->pd, cq, cq, &o, cap);
}

/* modify must fail with EINVAL and leave the QP in `state`. */
#define CHECK_MODIFY_EINVAL(qp, a, mask, state)                                \
	do {                                                                   \
		CHECK_RET(ibv_modify_qp((qp), (a), (mask)), EINVAL);           \
		CHECK_EQ(vt_qp_state(qp), (state));                            \
	} while (0)

static void create_caps(void)
{
	struct vt_env e;
	struct ibv_qp_init_attr ia, qia;
	struct ibv_qp_attr qa;
	struct ibv_cq *scq, *rcq;
	int ctx_tag;

	vt_env_open(&e);
	scq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	rcq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	memset(&ia, 0, sizeof(ia));
	ia.qp_context = &ctx_tag;
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = 17;
	ia.cap.max_recv_wr = 33;
	ia.cap.max_send_sge = 3;
	ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = 64;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	CHECK_GE(ia.cap.max_send_wr, 17);
	CHECK_GE(ia.cap.max_recv_wr, 33);
	CHECK_GE(ia.cap.max_send_sge, 3);
	CHECK_GE(ia.cap.max_recv_sge, 2);
	CHECK_GE(ia.cap.max_inline_data, 64);
	CHECK(ia.cap.max_send_wr <= (uint32_t)e.dev.max_qp_wr);
	CHECK(ia.cap.max_send_sge <= (uint32_t)e.dev.max_sge);
	CHECK(qp->qp_num != 0);
	CHECK(qp->context == e.ctx);
	CHECK(qp->pd == e.pd);
	CHECK(qp->send_cq == scq);
	CHECK(qp->recv_cq == rcq);
	CHECK(qp->qp_context == &ctx_tag);
	CHECK_EQ(qp->qp_type, IBV_QPT_RC);
	CHECK_EQ(qp->state, IBV_QPS_RESET);

	memset(&qa, 0, sizeof(qa));
	memset(&qia, 0, sizeof(qia));
	CHECK_OK(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qia));
	CHECK_EQ(qa.qp_state, IBV_QPS_RESET);
	CHECK_EQ(qia.qp_type, IBV_QPT_RC);
	CHECK_EQ(qia.sq_sig_all, 1);
	CHECK(qia.send_cq == scq);
	CHECK(qia.recv_cq == rcq);
	CHECK(qia.qp_context == &ctx_tag);
	CHECK_EQ(qia.cap.max_send_wr, ia.cap.max_send_wr);
	CHECK_EQ(qia.cap.max_recv_wr, ia.cap.max_recv_wr);
	CHECK_EQ(qia.cap.max_send_sge, ia.cap.max_send_sge);
	CHECK_EQ(qia.cap.max_recv_sge, ia.cap.max_recv_sge);
	CHECK_EQ(qia.cap.max_inline_data, ia.cap.max_inline_data);
	CHECK_EQ(qa.cap.max_send_wr, ia.cap.max_send_wr);
	CHECK_EQ(qa.cap.max_inline_data, ia.cap.max_inline_data);

	/* QP numbers are distinct. */
	struct ibv_qp *qp2 = make_qp(&e, scq, NULL);
	CHECK(qp2->qp_num != qp->qp_num);
	CHECK_OK(ibv_destroy_qp(qp2));
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_cq(scq));
	CHECK_OK(ibv_destroy_cq(rcq));
}

static void create_caps_too_large(void)
{
	struct vt_env e;
	struct ibv_qp_init_attr ia, base;
	struct ibv_cq *cq;

	vt_env_open(&e);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	memset(&base, 0, sizeof(base));
	base.send_cq = cq;
	base.recv_cq = cq;
	base.qp_type = IBV_QPT_RC;
	base.cap.max_send_wr = 8;
	base.cap.max_recv_wr = 8;
	base.cap.max_send_sge = 1;
	base.cap.max_recv_sge = 1;

	ia = base;
	ia.cap.max_send_wr = (uint32_t)e.dev.max_qp_wr + 1;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), EINVAL);
	ia = base;
	ia.cap.max_recv_wr = (uint32_t)e.dev.max_qp_wr + 1;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), EINVAL);
	ia = base;
	ia.cap.max_send_sge = (uint32_t)e.dev.max_sge + 1;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), EINVAL);
	ia = base;
	ia.cap.max_recv_sge = (uint32_t)e.dev.max_sge + 1;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), EINVAL);
	ia = base;
	ia.cap.max_inline_data = 16u << 20;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), EINVAL);

	/* The limits themselves are accepted. */
	ia = base;
	ia.cap.max_send_wr = (uint32_t)e.dev.max_qp_wr;
	ia.cap.max_send_sge = (uint32_t)e.dev.max_sge;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	CHECK_EQ(ia.cap.max_send_wr, e.dev.max_qp_wr);
	CHECK_EQ(ia.cap.max_send_sge, e.dev.max_sge);
	CHECK_OK(ibv_destroy_qp(qp));
}

static void state_machine(void)
{
	struct vt_env e;
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr qi;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *peer;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;

	vt_env_open(&e);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	qp = make_qp(&e, cq, NULL);
	peer = make_qp(&e, cq, NULL);

	/* RESET -> INIT */
	attr_init(&a, acc);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RESET_INIT));
	CHECK_EQ(qp->state, IBV_QPS_INIT);
	memset(&q, 0, sizeof(q));
	CHECK_OK(ibv_query_qp(qp, &q,
			      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS,
			      &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_INIT);
	CHECK_EQ(q.pkey_index, 0);
	CHECK_EQ(q.port_num, VT_PORT);
	CHECK_EQ(q.qp_access_flags, acc);

	/* INIT -> INIT may change the access flags. */
	acc |= IBV_ACCESS_REMOTE_WRITE;
	attr_init(&a, acc);
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
	memset(&q, 0, sizeof(q));
	CHECK_OK(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_INIT);
	CHECK_EQ(q.qp_access_flags, acc);

	/* INIT -> RTR */
	attr_rtr(&a, peer->qp_num, &e.gid);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_INIT_RTR));
	CHECK_EQ(qp->state, IBV_QPS_RTR);
	memset(&q, 0, sizeof(q));
	CHECK_OK(ibv_query_qp(qp, &q,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER,
			      &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_RTR);
	CHECK_EQ(q.path_mtu, IBV_MTU_2048);
	CHECK_EQ(q.dest_qp_num, peer->qp_num);
	CHECK_EQ(q.rq_psn, 0x00abcd);
	CHECK_EQ(q.max_dest_rd_atomic, 1);
	CHECK_EQ(q.min_rnr_timer, 7);
	CHECK_EQ(q.ah_attr.is_global, 1);
	CHECK_MEM(q.ah_attr.grh.dgid.raw, e.gid.raw, 16);
	CHECK_EQ(q.ah_attr.grh.sgid_index, 0);
	CHECK_EQ(q.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(q.ah_attr.port_num, VT_PORT);

	/* RTR -> RTS */
	attr_rts(&a);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RTR_RTS));
	CHECK_EQ(qp->state, IBV_QPS_RTS);
	memset(&q, 0, sizeof(q));
	CHECK_OK(ibv_query_qp(qp, &q,
			      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_CAP,
			      &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_RTS);
	CHECK_EQ(q.sq_psn, 0x00beef);
	CHECK_EQ(q.timeout, 14);
	CHECK_EQ(q.retry_cnt, 6);
	CHECK_EQ(q.rnr_retry, 5);
	CHECK_EQ(q.max_rd_atomic, 1);
	CHECK_EQ(qi.qp_type, IBV_QPT_RC);

	/* RTS -> RTS with optional attributes. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	a.min_rnr_timer = 3;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
				       IBV_QP_MIN_RNR_TIMER));
	memset(&q, 0, sizeof(q));
	CHECK_OK(ibv_query_qp(qp, &q,
			      IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
				      IBV_QP_MIN_RNR_TIMER,
			      &qi));
	CHECK_EQ(q.qp_state, IBV_QPS_RTS);
	CHECK_EQ(q.qp_access_flags, IBV_ACCESS_LOCAL_WRITE);
	CHECK_EQ(q.min_rnr_timer, 3);

	/* A modify without IBV_QP_STATE keeps the state. */
	memset(&a, 0, sizeof(a));
	a.min_rnr_timer = 4;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER));
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RTS);

	/* RTS -> SQD -> RTS */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	enum ibv_qp_state s = vt_qp_state(qp);
	CHECKF(s == IBV_QPS_SQD, "state after RTS->SQD is %d", s);
	a.qp_state = IBV_QPS_RTS;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RTS);

	/* RTS -> ERR -> RESET, and the QP is usable again. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_EQ(qp->state, IBV_QPS_ERR);
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_ERR);
	a.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_EQ(qp->state, IBV_QPS_RESET);
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RESET);
	attr_init(&a, acc);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RESET_INIT));
	attr_rtr(&a, peer->qp_num, &e.gid);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_INIT_RTR));
	attr_rts(&a);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RTR_RTS));
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RTS);
	/* Straight from RTS to RESET works too. */
	a.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RESET);
}

/* Leaving out any one required attribute is EINVAL; state unchanged. */
static void missing_attr(void)
{
	static const int init_req[] = { IBV_QP_PKEY_INDEX, IBV_QP_PORT,
					IBV_QP_ACCESS_FLAGS };
	static const int rtr_req[] = { IBV_QP_AV, IBV_QP_PATH_MTU,
				       IBV_QP_DEST_QPN, IBV_QP_RQ_PSN,
				       IBV_QP_MAX_DEST_RD_ATOMIC,
				       IBV_QP_MIN_RNR_TIMER };
	static const int rts_req[] = { IBV_QP_SQ_PSN, IBV_QP_TIMEOUT,
				       IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY,
				       IBV_QP_MAX_QP_RD_ATOMIC };
	struct vt_env e;
	struct ibv_qp_attr a;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *peer;

	vt_env_open(&e);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	qp = make_qp(&e, cq, NULL);
	peer = make_qp(&e, cq, NULL);

	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	for (size_t i = 0; i < sizeof(init_req) / sizeof(init_req[0]); i++)
		CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT & ~init_req[i],
				    IBV_QPS_RESET);
	/* An attribute RESET->INIT does not take. */
	a.sq_psn = 1;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT | IBV_QP_SQ_PSN,
			    IBV_QPS_RESET);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RESET_INIT));

	attr_rtr(&a, peer->qp_num, &e.gid);
	for (size_t i = 0; i < sizeof(rtr_req) / sizeof(rtr_req[0]); i++)
		CHECK_MODIFY_EINVAL(qp, &a, MASK_INIT_RTR & ~rtr_req[i],
				    IBV_QPS_INIT);
	a.sq_psn = 1;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_INIT_RTR | IBV_QP_SQ_PSN,
			    IBV_QPS_INIT);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_INIT_RTR));

	attr_rts(&a);
	for (size_t i = 0; i < sizeof(rts_req) / sizeof(rts_req[0]); i++)
		CHECK_MODIFY_EINVAL(qp, &a, MASK_RTR_RTS & ~rts_req[i],
				    IBV_QPS_RTR);
	a.dest_qp_num = peer->qp_num;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RTR_RTS | IBV_QP_DEST_QPN,
			    IBV_QPS_RTR);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RTR_RTS));
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_RTS);
}

/* Transitions the state machine does not have are EINVAL. */
static void illegal_transition(void)
{
	struct vt_env e;
	struct ibv_qp_attr a;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *peer;

	vt_env_open(&e);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	qp = make_qp(&e, cq, NULL);
	peer = make_qp(&e, cq, NULL);

	/* RESET -> RTS with every RTS attribute (and the rest) supplied. */
	attr_rts(&a);
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RTR_RTS, IBV_QPS_RESET);
	attr_rtr(&a, peer->qp_num, &e.gid);
	CHECK_MODIFY_EINVAL(qp, &a, MASK_INIT_RTR, IBV_QPS_RESET);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	CHECK_MODIFY_EINVAL(qp, &a, IBV_QP_STATE, IBV_QPS_RESET);
	a.qp_state = IBV_QPS_SQE;
	CHECK_MODIFY_EINVAL(qp, &a, IBV_QP_STATE, IBV_QPS_RESET);
	a.qp_state = (enum ibv_qp_state)42;
	CHECK_MODIFY_EINVAL(qp, &a, IBV_QP_STATE, IBV_QPS_RESET);

	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RESET_INIT));
	/* INIT -> RTS skips RTR. */
	attr_rts(&a);
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RTR_RTS, IBV_QPS_INIT);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	CHECK_MODIFY_EINVAL(qp, &a, IBV_QP_STATE, IBV_QPS_INIT);

	attr_rtr(&a, peer->qp_num, &e.gid);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_INIT_RTR));
	/* RTR -> INIT goes backwards. */
	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT, IBV_QPS_RTR);
	/* Any state -> ERR is legal and needs only the state. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	/* ERR -> RTS is not. */
	attr_rts(&a);
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RTR_RTS, IBV_QPS_ERR);
}

/* Attribute values out of range are EINVAL. */
static void bad_attr_values(void)
{
	struct vt_env e;
	struct ibv_qp_attr a;
	struct ibv_port_attr pa;
	struct ibv_cq *cq;
	struct ibv_qp *qp;

	vt_env_open(&e);
	CHECK_OK(ibv_query_port(e.ctx, VT_PORT, &pa));
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	qp = make_qp(&e, cq, NULL);

	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	a.port_num = 0;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT, IBV_QPS_RESET);
	a.port_num = 2;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT, IBV_QPS_RESET);
	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	a.pkey_index = (uint16_t)pa.pkey_tbl_len;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_RESET_INIT, IBV_QPS_RESET);

	attr_init(&a, IBV_ACCESS_LOCAL_WRITE);
	CHECK_OK(ibv_modify_qp(qp, &a, MASK_RESET_INIT));
	/* A source GID index past the table. */
	attr_rtr(&a, 1, &e.gid);
	a.ah_attr.grh.sgid_index = (uint8_t)pa.gid_tbl_len;
	CHECK_MODIFY_EINVAL(qp, &a, MASK_INIT_RTR, IBV_QPS_INIT);
	/* More responder resources than the device has. */
	attr_rtr(&a, 1, &e.gid);
	if (e.dev.max_qp_rd_atom < 255) {
		a.max_dest_rd_atomic = (uint8_t)(e.dev.max_qp_rd_atom + 1);
		CHECK_MODIFY_EINVAL(qp, &a, MASK_INIT_RTR, IBV_QPS_INIT);
	}
}

/* Moving to ERR flushes posted receives, in order, with their wr_ids. */
static void err_flushes_recv(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf b;
	struct ibv_qp_attr a;
	struct ibv_wc wc[3];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &b, 3 * 256, IBV_ACCESS_LOCAL_WRITE);
	memset(b.p, 0x5c, b.len);
	for (int i = 0; i < 3; i++)
		vt_post_recv(p.b, 101 + i, b.p + 256 * i, 256, b.mr->lkey);
	CHECK_CQ_EMPTY(p.cq_b);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(p.b, &a, IBV_QP_STATE));
	CHECK_EQ(p.b->state, IBV_QPS_ERR);
	CHECK_EQ(vt_qp_state(p.b), IBV_QPS_ERR);

	vt_poll(p.cq_b, wc, 3);
	for (int i = 0; i < 3; i++) {
		CHECK_WC(&wc[i], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
		CHECK_EQ(wc[i].wr_id, 101 + i);
		CHECK_EQ(wc[i].qp_num, p.b->qp_num);
	}
	CHECK_CQ_EMPTY(p.cq_b);
	CHECK_BYTES(b.p, 0x5c, b.len);
}

/* Sends stuck behind RNR (no receive at the peer) flush on ERR too. */
static void err_flushes_send(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf b;
	struct ibv_qp_attr a;
	struct ibv_wc wc[3];
	struct ibv_sge sge[3];
	struct ibv_send_wr wr[3];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);	/* rnr_retry 7: forever */
	vt_buf_reg(&e, &b, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 3; i++) {
		sge[i] = vt_sge(b.p + 64 * i, 64, b.mr->lkey);
		wr[i] = vt_send_wr(201 + i, IBV_WR_SEND, &sge[i],
				   IBV_SEND_SIGNALED);
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	vt_post_send(p.a, wr);
	CHECK_CQ_EMPTY(p.cq_a);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(p.a, &a, IBV_QP_STATE));
	vt_poll(p.cq_a, wc, 3);
	for (int i = 0; i < 3; i++) {
		CHECK_WC(&wc[i], IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND);
		CHECK_EQ(wc[i].wr_id, 201 + i);
		CHECK_EQ(wc[i].qp_num, p.a->qp_num);
	}
	CHECK_CQ_EMPTY(p.cq_a);
}

/* In ERR, posts are accepted and complete with IBV_WC_WR_FLUSH_ERR. */
static void post_in_err(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf b;
	struct ibv_qp_attr a;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &b, 4096, IBV_ACCESS_LOCAL_WRITE);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(p.a, &a, IBV_QP_STATE));

	vt_post_recv(p.a, 301, b.p, 128, b.mr->lkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 301);
	CHECK_EQ(wc.qp_num, p.a->qp_num);

	struct ibv_sge sge = vt_sge(b.p, 128, b.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(302, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 302);
	CHECK_EQ(wc.qp_num, p.a->qp_num);
	/* The flushed send never reached the peer. */
	vt_post_recv(p.b, 303, b.p + 2048, 128, b.mr->lkey);
	CHECK_NO_WC_FOR(p.cq_b, 100);
}

/*
 * RESET refuses posts; from INIT on they are taken, sends waiting for RTS,
 * and a move back to RESET discards what waits.
 */
static void post_bad_state(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf b;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *peer;
	struct ibv_qp_attr a;
	struct ibv_send_wr *bad_s;
	struct ibv_recv_wr rwr, *bad_r;

	vt_env_open(&e);
	vt_default_opts(&o);
	vt_buf_reg(&e, &b, 4096, IBV_ACCESS_LOCAL_WRITE);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	peer = vt_create_qp(e.pd, cq, cq, &o, NULL);

	struct ibv_sge sge = vt_sge(b.p, 64, b.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 2;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;

	/* RESET */
	bad_s = NULL;
	CHECK_RET(ibv_post_send(qp, &wr, &bad_s), EINVAL);
	CHECK(bad_s == &wr);
	bad_r = NULL;
	CHECK_RET(ibv_post_recv(qp, &rwr, &bad_r), EINVAL);
	CHECK(bad_r == &rwr);

	/* INIT: both are taken; the send waits for RTS (as mlx5 takes it). */
	vt_qp_to_init(qp, &o);
	CHECK_OK(ibv_post_send(qp, &wr, &bad_s));
	bad_r = NULL;
	CHECK_OK(ibv_post_recv(qp, &rwr, &bad_r));

	/* RTR: still waiting; another send waits behind it. */
	vt_qp_to_rtr(qp, peer->qp_num, &e.gid, &o);
	wr.wr_id = 3;
	CHECK_OK(ibv_post_send(qp, &wr, &bad_s));
	CHECK_NO_WC_FOR(cq, 50);

	/* RESET discards what waits without a completion. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_CQ_EMPTY(cq);
	/* ... and a later ERR has nothing left to flush. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	CHECK_NO_WC_FOR(cq, 50);
}

/* A connected pair taken back to RESET and connected again (new PSNs)
 * carries traffic as before. */
static void reset_reconnect(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_qp_attr a;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 9);

	for (int round = 0; round < 3; round++) {
		vt_post_recv(p.b, 10 + round, r.p, 4096, r.mr->lkey);
		struct ibv_sge sge = vt_sge(s.p + round, 100, s.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(20 + round, IBV_WR_SEND,
						   &sge, IBV_SEND_SIGNALED);
		vt_post_send(p.a, &wr);
		vt_poll(p.cq_a, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
		CHECK_EQ(wc.wr_id, 20 + round);
		vt_poll(p.cq_b, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.wr_id, 10 + round);
		CHECK_EQ(wc.byte_len, 100);
		CHECK_MEM(r.p, s.p + round, 100);

		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RESET;
		CHECK_OK(ibv_modify_qp(p.a, &a, IBV_QP_STATE));
		CHECK_OK(ibv_modify_qp(p.b, &a, IBV_QP_STATE));
		CHECK_CQ_EMPTY(p.cq_a);
		CHECK_CQ_EMPTY(p.cq_b);
		o.psn = 0x100000 * (uint32_t)(round + 1) + 77;
		vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
		vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	}
}

/* A CQ in use by a QP cannot be destroyed. */
static void cq_busy(void)
{
	struct vt_env e;
	struct ibv_cq *cq;
	struct ibv_qp *qp;

	vt_env_open(&e);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	qp = make_qp(&e, cq, NULL);
	CHECK_RET(ibv_destroy_cq(cq), EBUSY);
	CHECK_RET(ibv_dealloc_pd(e.pd), EBUSY);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(e.pd));
	CHECK_OK(ibv_close_device(e.ctx));
}

/*
 * Moving a failed QP to RESET removes its unpolled completions from its
 * CQs, as hardware providers clean them: after resetting and reconnecting,
 * the first completions a program polls are the new traffic's.
 */
static void reset_cleans_cq(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	vt_pair_create(&e, &p, &o, 0);
	struct vt_buf s, r;
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	/* A receive with a bad key, and a good one behind it. */
	vt_post_recv(p.b, 1, r.p, 64, r.mr->lkey ^ 0x77);
	vt_post_recv(p.b, 2, r.p, 64, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 16, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(3, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_OP_ERR);
	/* b's error completions are there, unpolled; now reset both. */
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RESET;
	CHECK_OK(ibv_modify_qp(p.a, &at, IBV_QP_STATE));
	CHECK_OK(ibv_modify_qp(p.b, &at, IBV_QP_STATE));
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_CQ_EMPTY(p.cq_b);
	vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
	vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	vt_post_recv(p.b, 4, r.p, 64, r.mr->lkey);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 4);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
}

/*
 * A peer QP left in ERR: the requester connects again (its listener still
 * accepts) and is refused each time; the retry timer still ends it with
 * RETRY_EXC_ERR, no endless reconnecting.
 */
static void peer_in_err_retry_exceeded(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	vt_pair_create(&e, &p, &o, 0);
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(p.b, &at, IBV_QP_STATE));
	struct vt_buf s;
	vt_buf_reg(&e, &s, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = vt_sge(s.p, 16, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(9, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_RETRY_EXC_ERR);
	CHECK_EQ(wc.wr_id, 9);
}

static const struct vt_case cases[] = {
	VT_CASE(reset_cleans_cq),	VT_CASE(peer_in_err_retry_exceeded),
	VT_CASE(create_caps),	     VT_CASE(create_caps_too_large),
	VT_CASE(state_machine),	     VT_CASE(missing_attr),
	VT_CASE(illegal_transition), VT_CASE(bad_attr_values),
	VT_CASE(err_flushes_recv),   VT_CASE(err_flushes_send),
	VT_CASE(post_in_err),	     VT_CASE(post_bad_state),
	VT_CASE(cq_busy),	     VT_CASE(reset_reconnect),
};
VT_MAIN(cases)
