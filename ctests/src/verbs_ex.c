/*
 * The extended APIs: ibv_create_cq_ex with the ibv_start_poll /
 * ibv_next_poll / ibv_end_poll / ibv_wc_read_* iterator, and the ibv_wr_*
 * work request builders of ibv_qp_ex.
 */
#include "common/verbs_util.c"

#define WC_FLAGS                                                               \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |                        \
	 IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |                       \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)

#define ALL_SEND_OPS                                                           \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |                  \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |      \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |        \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct ibv_cq_ex *make_cq_ex(struct ibv_context *ctx, uint32_t cqe,
				    uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex ca;

	memset(&ca, 0, sizeof(ca));
	ca.cqe = cqe;
	ca.wc_flags = wc_flags;
	struct ibv_cq_ex *cq = CHECK_PTR(ibv_create_cq_ex(ctx, &ca));
	CHECK_GE(ibv_cq_ex_to_cq(cq)->cqe, (int)cqe);
	CHECK(ibv_cq_ex_to_cq(cq)->context == ctx);
	return cq;
}

/* A pair whose CQs are extended CQs; `ops` nonzero gives `a` the ibv_wr_*
 * API. */
struct xpair {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_cq_ex *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	struct ibv_qp_cap cap_a;
};

static void xpair_open(struct xpair *x, uint64_t ops)
{
	memset(x, 0, sizeof(*x));
	vt_env_open(&x->e);
	vt_default_opts(&x->o);
	x->o.max_inline_data = 64;
	x->cq_a = make_cq_ex(x->e.ctx, 64, WC_FLAGS);
	x->cq_b = make_cq_ex(x->e.ctx, 64, WC_FLAGS);
	struct vt_qp_opts oa = x->o;
	oa.send_ops_flags = ops;
	x->a = vt_create_qp(x->e.pd, ibv_cq_ex_to_cq(x->cq_a),
			    ibv_cq_ex_to_cq(x->cq_a), &oa, &x->cap_a);
	x->b = vt_create_qp(x->e.pd, ibv_cq_ex_to_cq(x->cq_b),
			    ibv_cq_ex_to_cq(x->cq_b), &x->o, NULL);
	vt_qp_connect(x->a, x->b->qp_num, &x->e.gid, &x->o);
	vt_qp_connect(x->b, x->a->qp_num, &x->e.gid, &x->o);
}

/* One completion as read through the extended CQ. */
struct xwc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp;
	unsigned wc_flags;
	__be32 imm;
	uint64_t ts;
};

static void read_current(struct ibv_cq_ex *cq, struct xwc *w)
{
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->src_qp = ibv_wc_read_src_qp(cq);
	w->wc_flags = ibv_wc_read_wc_flags(cq);
	w->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? ibv_wc_read_imm_data(cq) : 0;
	w->ts = ibv_wc_read_completion_ts(cq);
}

/*
 * Collects exactly n completions through start/next/end_poll within
 * VT_POLL_MS; ENOENT must follow the last one.
 */
static void xpoll(struct ibv_cq_ex *cq, struct xwc *w, int n)
{
	uint64_t deadline = vt_now_ms() + VT_POLL_MS;
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	int got = 0;

	while (got < n) {
		int r = ibv_start_poll(cq, &pa);

		if (r == ENOENT) {
			CHECKF(vt_now_ms() < deadline,
			       "ibv_start_poll: %d of %d completions within %d ms",
			       got, n, VT_POLL_MS);
			sched_yield();
			continue;
		}
		CHECKF(r == 0, "ibv_start_poll returned %d", r);
		read_current(cq, &w[got++]);
		while (got < n && (r = ibv_next_poll(cq)) == 0)
			read_current(cq, &w[got++]);
		if (got == n)
			r = ibv_next_poll(cq);
		ibv_end_poll(cq);
		CHECKF(r == ENOENT || got < n,
		       "ibv_next_poll returned %d after the %d expected "
		       "completions (wr_id %llu)",
		       r, n, (unsigned long long)cq->wr_id);
		CHECKF(r == ENOENT || r == 0, "ibv_next_poll returned %d", r);
	}
	CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
}

static void check_xwc(const struct xwc *w, uint64_t wr_id,
		      enum ibv_wc_opcode op, const struct ibv_qp *qp)
{
	CHECKF(w->status == IBV_WC_SUCCESS, "wr_id %llu: status %s",
	       (unsigned long long)w->wr_id, ibv_wc_status_str(w->status));
	CHECK_EQ(w->wr_id, wr_id);
	CHECKF(w->opcode == op, "wr_id %llu: opcode %s, expected %s",
	       (unsigned long long)w->wr_id, vt_wc_opcode_name(w->opcode),
	       vt_wc_opcode_name(op));
	CHECK_EQ(w->qp_num, qp->qp_num);
	CHECK(w->ts != 0);
}

static void check_xrecv(const struct xwc *w, uint64_t wr_id,
			enum ibv_wc_opcode op, uint32_t len,
			const struct ibv_qp *dst, const struct ibv_qp *src,
			bool imm, uint32_t imm_host)
{
	check_xwc(w, wr_id, op, dst);
	CHECK_EQ(w->byte_len, len);
	CHECK_EQ(w->src_qp, src->qp_num);
	if (imm) {
		CHECKF(w->wc_flags & IBV_WC_WITH_IMM, "wc_flags 0x%x",
		       w->wc_flags);
		CHECK_EQ(w->imm, htonl(imm_host));
	} else {
		CHECKF(!(w->wc_flags & IBV_WC_WITH_IMM), "wc_flags 0x%x",
		       w->wc_flags);
	}
}

static void cq_ex_empty(void)
{
	struct vt_env e;
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };

	vt_env_open(&e);
	struct ibv_cq_ex *cq = make_cq_ex(e.ctx, 16, WC_FLAGS);
	CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
	CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
	/* Also usable as a plain CQ. */
	struct ibv_wc wc;
	CHECK_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 0);
	CHECK_OK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)));
}

static void cq_ex_bad_attr(void)
{
	struct vt_env e;
	struct ibv_cq_init_attr_ex ca;

	vt_env_open(&e);
	memset(&ca, 0, sizeof(ca));
	ca.cqe = (uint32_t)e.dev.max_cqe + 1;
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(e.ctx, &ca), EINVAL);
	ca.cqe = 16;
	ca.comp_mask = 1u << 20;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(e.ctx, &ca), EINVAL);
	ca.comp_mask = 0;
	ca.wc_flags = 1ULL << 40;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(e.ctx, &ca), EOPNOTSUPP);
	/* The plain call has the same limit. */
	CHECK_NULL_ERRNO(ibv_create_cq(e.ctx, e.dev.max_cqe + 1, NULL, NULL, 0),
			 EINVAL);
}

/* Every field of receive and send completions, in order, with
 * timestamps that never go backwards. */
static void cq_ex_fields(void)
{
	struct xpair x;
	struct vt_buf s, r, t;
	struct xwc w[4];

	xpair_open(&x, 0);
	vt_buf_reg(&x.e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &t, 4096,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	vt_fill(s.p, s.len, 3);
	for (int i = 0; i < 4; i++)
		vt_post_recv(x.b, 10 + i, r.p + 256 * i, 256, r.mr->lkey);

	struct ibv_sge sge[4];
	struct ibv_send_wr wr[4];
	for (int i = 0; i < 4; i++) {
		sge[i] = vt_sge(s.p + 64 * i, 10 + 10 * (uint32_t)i, s.mr->lkey);
		wr[i] = vt_send_wr(20 + i, IBV_WR_SEND_WITH_IMM, &sge[i],
				   IBV_SEND_SIGNALED);
		wr[i].imm_data = htonl(0xabc00000u + (uint32_t)i);
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
	}
	wr[1].opcode = IBV_WR_SEND;
	wr[3].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr[3].wr.rdma.remote_addr = (uintptr_t)t.p;
	wr[3].wr.rdma.rkey = t.mr->rkey;
	vt_post_send(x.a, wr);

	xpoll(x.cq_b, w, 4);
	check_xrecv(&w[0], 10, IBV_WC_RECV, 10, x.b, x.a, true, 0xabc00000u);
	check_xrecv(&w[1], 11, IBV_WC_RECV, 20, x.b, x.a, false, 0);
	check_xrecv(&w[2], 12, IBV_WC_RECV, 30, x.b, x.a, true, 0xabc00002u);
	check_xrecv(&w[3], 13, IBV_WC_RECV_RDMA_WITH_IMM, 40, x.b, x.a, true,
		    0xabc00003u);
	for (int i = 1; i < 4; i++)
		CHECKF(w[i].ts >= w[i - 1].ts, "timestamp %d went back", i);
	CHECK_MEM(r.p, s.p, 10);
	CHECK_MEM(r.p + 256, s.p + 64, 20);
	CHECK_MEM(r.p + 512, s.p + 128, 30);
	CHECK_MEM(t.p, s.p + 192, 40);

	xpoll(x.cq_a, w, 4);
	for (int i = 0; i < 4; i++)
		check_xwc(&w[i], 20 + i,
			  i == 3 ? IBV_WC_RDMA_WRITE : IBV_WC_SEND, x.a);
}

/* Error and flush completions come through the iterator as well. */
static void cq_ex_flush(void)
{
	struct xpair x;
	struct vt_buf r;
	struct xwc w[2];
	struct ibv_qp_attr qa;

	xpair_open(&x, 0);
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_post_recv(x.b, 1, r.p, 64, r.mr->lkey);
	vt_post_recv(x.b, 2, r.p + 64, 64, r.mr->lkey);
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(x.b, &qa, IBV_QP_STATE));

	uint64_t deadline = vt_now_ms() + VT_POLL_MS;
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	int r0;
	while ((r0 = ibv_start_poll(x.cq_b, &pa)) == ENOENT &&
	       vt_now_ms() < deadline)
		sched_yield();
	CHECK_EQ(r0, 0);
	w[0].wr_id = x.cq_b->wr_id;
	w[0].status = x.cq_b->status;
	w[0].qp_num = ibv_wc_read_qp_num(x.cq_b);
	int r1 = ibv_next_poll(x.cq_b);
	while (r1 == ENOENT && vt_now_ms() < deadline) {
		/* The second flush may not be there yet: end and restart. */
		ibv_end_poll(x.cq_b);
		while ((r1 = ibv_start_poll(x.cq_b, &pa)) == ENOENT &&
		       vt_now_ms() < deadline)
			sched_yield();
	}
	CHECK_EQ(r1, 0);
	w[1].wr_id = x.cq_b->wr_id;
	w[1].status = x.cq_b->status;
	w[1].qp_num = ibv_wc_read_qp_num(x.cq_b);
	ibv_end_poll(x.cq_b);
	for (int i = 0; i < 2; i++) {
		CHECKF(w[i].status == IBV_WC_WR_FLUSH_ERR, "status %s",
		       ibv_wc_status_str(w[i].status));
		CHECK_EQ(w[i].wr_id, 1 + i);
		CHECK_EQ(w[i].qp_num, x.b->qp_num);
	}
	CHECK_EQ(ibv_start_poll(x.cq_b, &pa), ENOENT);
}

/* One ibv_wr_* batch with every RC operation. */
static void wr_all_ops(void)
{
	struct xpair x;
	struct vt_buf s, l, r, t;
	struct xwc w[7];

	xpair_open(&x, ALL_SEND_OPS);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(x.a));
	CHECK(&qx->qp_base == x.a);
	vt_buf_reg(&x.e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &l, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &t, 8192, VT_ACCESS_ALL);
	vt_fill(s.p, s.len, 5);
	vt_fill(t.p + 4096, 1024, 6);
	memset(t.p, 0, 4096);
	*(uint64_t *)(void *)(t.p + 2048) = 1000;
	*(uint64_t *)(void *)(t.p + 2056) = 50;
	vt_post_recv(x.b, 1, r.p, 256, r.mr->lkey);
	vt_post_recv(x.b, 2, r.p + 256, 256, r.mr->lkey);
	vt_post_recv(x.b, 3, r.p + 512, 256, r.mr->lkey);

	uint8_t *inl = vt_alloc(64);
	uint8_t inl_copy[48];
	vt_fill(inl, 48, 7);
	memcpy(inl_copy, inl, 48);
	struct ibv_sge two[2] = { vt_sge(s.p + 100, 7, s.mr->lkey),
				  vt_sge(s.p + 300, 9, s.mr->lkey) };

	ibv_wr_start(qx);
	qx->wr_flags = IBV_SEND_SIGNALED;
	qx->wr_id = 101;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p, 50);
	qx->wr_id = 102;
	ibv_wr_send_imm(qx, htonl(0x11223344));
	ibv_wr_set_sge_list(qx, 2, two);
	qx->wr_id = 103;
	ibv_wr_rdma_write(qx, t.mr->rkey, (uintptr_t)t.p + 16);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p + 1000, 300);
	qx->wr_id = 104;
	ibv_wr_rdma_write_imm(qx, t.mr->rkey, (uintptr_t)t.p + 1024,
			      htonl(0x55667788));
	ibv_wr_set_inline_data(qx, inl, 48);
	memset(inl, 0, 48);	/* inline data was copied by the setter */
	qx->wr_id = 105;
	ibv_wr_rdma_read(qx, t.mr->rkey, (uintptr_t)t.p + 4096);
	ibv_wr_set_sge(qx, l.mr->lkey, (uintptr_t)l.p, 1024);
	qx->wr_id = 106;
	ibv_wr_atomic_cmp_swp(qx, t.mr->rkey, (uintptr_t)t.p + 2048, 1000, 2000);
	ibv_wr_set_sge(qx, l.mr->lkey, (uintptr_t)l.p + 2048, 8);
	qx->wr_id = 107;
	ibv_wr_atomic_fetch_add(qx, t.mr->rkey, (uintptr_t)t.p + 2056, 5);
	ibv_wr_set_sge(qx, l.mr->lkey, (uintptr_t)l.p + 2056, 8);
	/* Nothing is executed before ibv_wr_complete. */
	CHECK_NO_WC_FOR(ibv_cq_ex_to_cq(x.cq_b), 100);
	CHECK_BYTES(t.p + 16, 0, 300);
	CHECK_OK(ibv_wr_complete(qx));

	xpoll(x.cq_a, w, 7);
	static const enum ibv_wc_opcode ops[7] = {
		IBV_WC_SEND,	  IBV_WC_SEND,	    IBV_WC_RDMA_WRITE,
		IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
		IBV_WC_FETCH_ADD,
	};
	for (int i = 0; i < 7; i++)
		check_xwc(&w[i], 101 + i, ops[i], x.a);

	xpoll(x.cq_b, w, 3);
	check_xrecv(&w[0], 1, IBV_WC_RECV, 50, x.b, x.a, false, 0);
	check_xrecv(&w[1], 2, IBV_WC_RECV, 16, x.b, x.a, true, 0x11223344);
	check_xrecv(&w[2], 3, IBV_WC_RECV_RDMA_WITH_IMM, 48, x.b, x.a, true,
		    0x55667788);
	CHECK_MEM(r.p, s.p, 50);
	CHECK_MEM(r.p + 256, s.p + 100, 7);
	CHECK_MEM(r.p + 256 + 7, s.p + 300, 9);
	CHECK_MEM(t.p + 16, s.p + 1000, 300);
	CHECK_MEM(t.p + 1024, inl_copy, 48);
	CHECK_MEM(l.p, t.p + 4096, 1024);
	CHECK_EQ(*(uint64_t *)(void *)(l.p + 2048), 1000);
	CHECK_EQ(*(uint64_t *)(void *)(t.p + 2048), 2000);
	CHECK_EQ(*(uint64_t *)(void *)(l.p + 2056), 50);
	CHECK_EQ(*(uint64_t *)(void *)(t.p + 2056), 55);
	CHECK_BYTES(t.p, 0, 16);
	CHECK_BYTES(t.p + 316, 0, 1024 - 316);
}

/* wr_flags per WR: only the signaled ones complete; inline list. */
static void wr_flags_and_inline_list(void)
{
	struct xpair x;
	struct vt_buf r;
	struct xwc w[3];

	xpair_open(&x, IBV_QP_EX_WITH_SEND);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(x.a));
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 3; i++)
		vt_post_recv(x.b, i, r.p + 256 * i, 256, r.mr->lkey);

	uint8_t *a = vt_alloc(64), *b = vt_alloc(64);
	memcpy(a, "hello, ", 7);
	memcpy(b, "inline list", 11);
	struct ibv_data_buf bufs[2] = { { a, 7 }, { b, 11 } };

	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = 0;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data_list(qx, 2, bufs);
	qx->wr_id = 2;
	qx->wr_flags = 0;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, a, 7);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, b, 11);
	memset(a, 0, 64);
	memset(b, 0, 64);
	CHECK_OK(ibv_wr_complete(qx));

	xpoll(x.cq_a, w, 1);
	check_xwc(&w[0], 3, IBV_WC_SEND, x.a);
	xpoll(x.cq_b, w, 3);
	check_xrecv(&w[0], 0, IBV_WC_RECV, 18, x.b, x.a, false, 0);
	check_xrecv(&w[1], 1, IBV_WC_RECV, 7, x.b, x.a, false, 0);
	check_xrecv(&w[2], 2, IBV_WC_RECV, 11, x.b, x.a, false, 0);
	CHECK(memcmp(r.p, "hello, inline list", 18) == 0);
	CHECK(memcmp(r.p + 256, "hello, ", 7) == 0);
	CHECK(memcmp(r.p + 512, "inline list", 11) == 0);
}

/* ibv_wr_abort discards the whole batch; the QP goes on working. */
static void wr_abort(void)
{
	struct xpair x;
	struct vt_buf s, r, t;
	struct xwc w[2];

	xpair_open(&x, ALL_SEND_OPS);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(x.a));
	vt_buf_reg(&x.e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &t, 4096,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	vt_fill(s.p, s.len, 8);
	memset(t.p, 0x3c, t.len);
	vt_post_recv(x.b, 1, r.p, 256, r.mr->lkey);

	ibv_wr_start(qx);
	qx->wr_flags = IBV_SEND_SIGNALED;
	qx->wr_id = 50;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p, 100);
	qx->wr_id = 51;
	ibv_wr_rdma_write(qx, t.mr->rkey, (uintptr_t)t.p);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p, 100);
	ibv_wr_abort(qx);
	CHECK_NO_WC_FOR(ibv_cq_ex_to_cq(x.cq_a), 100);
	CHECK_CQ_EMPTY(ibv_cq_ex_to_cq(x.cq_b));
	CHECK_BYTES(t.p, 0x3c, t.len);

	/* The next batch goes through; the receive was not consumed. */
	ibv_wr_start(qx);
	qx->wr_flags = IBV_SEND_SIGNALED;
	qx->wr_id = 60;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p + 500, 33);
	CHECK_OK(ibv_wr_complete(qx));
	xpoll(x.cq_a, w, 1);
	check_xwc(&w[0], 60, IBV_WC_SEND, x.a);
	xpoll(x.cq_b, w, 1);
	check_xrecv(&w[0], 1, IBV_WC_RECV, 33, x.b, x.a, false, 0);
	CHECK_MEM(r.p, s.p + 500, 33);
	CHECK_BYTES(t.p, 0x3c, t.len);
	/* ibv_post_send and the builders mix on one QP. */
	vt_post_recv(x.b, 2, r.p + 256, 256, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 5, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(61, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(x.a, &wr);
	xpoll(x.cq_a, w, 1);
	check_xwc(&w[0], 61, IBV_WC_SEND, x.a);
	xpoll(x.cq_b, w, 1);
	check_xrecv(&w[0], 2, IBV_WC_RECV, 5, x.b, x.a, false, 0);
}

/* A bad WR inside a batch: ibv_wr_complete fails and nothing is posted. */
static void wr_complete_error(void)
{
	struct xpair x;
	struct vt_buf s, r;

	xpair_open(&x, IBV_QP_EX_WITH_SEND);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(x.a));
	vt_buf_reg(&x.e, &s, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x.e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_post_recv(x.b, 1, r.p, 256, r.mr->lkey);
	vt_post_recv(x.b, 2, r.p + 256, 256, r.mr->lkey);

	uint32_t too_much = x.cap_a.max_inline_data + 1;
	CHECK(too_much <= 8192);
	ibv_wr_start(qx);
	qx->wr_flags = IBV_SEND_SIGNALED;
	qx->wr_id = 1;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p, 10);
	qx->wr_id = 2;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, s.p, too_much);
	int ret = ibv_wr_complete(qx);
	CHECKF(ret != 0, "ibv_wr_complete accepted %u bytes of inline data "
			 "(max_inline_data %u)",
	       too_much, x.cap_a.max_inline_data);
	CHECK_NO_WC_FOR(ibv_cq_ex_to_cq(x.cq_b), 100);
	CHECK_CQ_EMPTY(ibv_cq_ex_to_cq(x.cq_a));
}

/* Asking for a builder RC does not have fails the creation. */
static void qp_ex_unsupported_ops(void)
{
	struct vt_env e;
	struct ibv_qp_init_attr_ex ax;

	vt_env_open(&e);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	memset(&ax, 0, sizeof(ax));
	ax.send_cq = cq;
	ax.recv_cq = cq;
	ax.qp_type = IBV_QPT_RC;
	ax.cap.max_send_wr = 4;
	ax.cap.max_recv_wr = 4;
	ax.cap.max_send_sge = 1;
	ax.cap.max_recv_sge = 1;
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = e.pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp_ex(e.ctx, &ax);
	CHECKF(qp == NULL, "RC QP created with IBV_QP_EX_WITH_TSO");
	CHECKF(errno == EOPNOTSUPP || errno == EINVAL, "errno %d (%s)", errno,
	       strerror(errno));
	/* Unknown comp_mask bits are rejected too. */
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	ax.comp_mask |= 1u << 30;
	errno = 0;
	qp = ibv_create_qp_ex(e.ctx, &ax);
	CHECK(qp == NULL);
	CHECKF(errno == EOPNOTSUPP || errno == EINVAL, "errno %d (%s)", errno,
	       strerror(errno));
}

static const struct vt_case cases[] = {
	VT_CASE(cq_ex_empty),	    VT_CASE(cq_ex_bad_attr),
	VT_CASE(cq_ex_fields),	    VT_CASE(cq_ex_flush),
	VT_CASE(wr_all_ops),	    VT_CASE(wr_flags_and_inline_list),
	VT_CASE(wr_abort),	    VT_CASE(wr_complete_error),
	VT_CASE(qp_ex_unsupported_ops),
};
VT_MAIN(cases)
