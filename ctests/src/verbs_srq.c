/*
 * Shared receive queues: creation and limits, many QPs taking from one SRQ
 * (each receive used once, payloads where they belong), RNR while the SRQ
 * is empty, the limit event, resize, destroy while in use, posting to a
 * QP on an SRQ, and IBV_EVENT_QP_LAST_WQE_REACHED.
 */
#include "common/verbs_util.c"

#define NQP 4
#define SLOT 256

/*
 * NQP requesters a[i], each connected to a responder b[i]; every b[i]
 * takes its receives from `srq` and completes into `rcq`.
 */
struct srqset {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_srq *srq;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *a[NQP], *b[NQP];
	struct vt_buf s, r;
};

static struct ibv_srq *make_srq(struct ibv_pd *pd, uint32_t max_wr,
				uint32_t max_sge)
{
	struct ibv_srq_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = max_wr;
	ia.attr.max_sge = max_sge;
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq(pd, &ia));
	CHECK_GE(ia.attr.max_wr, max_wr);
	CHECK_GE(ia.attr.max_sge, max_sge);
	CHECK(srq->context == pd->context);
	CHECK(srq->pd == pd);
	return srq;
}

static struct ibv_qp *srq_qp(struct srqset *t)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = t->scq;
	ia.recv_cq = t->rcq;
	ia.srq = t->srq;
	ia.cap.max_send_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(t->e.pd, &ia));
	CHECK(qp->srq == t->srq);
	return qp;
}

static void srqset_open(struct srqset *t, uint32_t max_wr)
{
	memset(t, 0, sizeof(*t));
	vt_env_open(&t->e);
	vt_default_opts(&t->o);
	t->o.rnr_retry = 7;
	t->srq = make_srq(t->e.pd, max_wr, 1);
	t->scq = CHECK_PTR(ibv_create_cq(t->e.ctx, 256, NULL, NULL, 0));
	t->rcq = CHECK_PTR(ibv_create_cq(t->e.ctx, 256, NULL, NULL, 0));
	for (int i = 0; i < NQP; i++) {
		t->a[i] = vt_create_qp(t->e.pd, t->scq, t->scq, &t->o, NULL);
		t->b[i] = srq_qp(t);
		vt_qp_connect(t->a[i], t->b[i]->qp_num, &t->e.gid, &t->o);
		vt_qp_connect(t->b[i], t->a[i]->qp_num, &t->e.gid, &t->o);
	}
	vt_buf_reg(&t->e, &t->s, 64 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&t->e, &t->r, 64 * SLOT, IBV_ACCESS_LOCAL_WRITE);
}

static void post_srq(struct srqset *t, uint64_t wr_id, unsigned slot,
		     uint32_t len)
{
	struct ibv_sge sge = vt_sge(t->r.p + slot * SLOT, len, t->r.mr->lkey);
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;

	CHECK_OK(ibv_post_srq_recv(t->srq, &wr, &bad));
}

/* a[i] sends `len` bytes from send slot `slot` (filled with seed `slot`). */
static void send_from(struct srqset *t, int i, unsigned slot, uint32_t len)
{
	vt_fill(t->s.p + slot * SLOT, len, slot);
	struct ibv_sge sge = vt_sge(t->s.p + slot * SLOT, len, t->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1000 + slot, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(t->a[i], &wr);
}

static int qp_index(struct srqset *t, uint32_t qpn)
{
	for (int i = 0; i < NQP; i++)
		if (t->b[i]->qp_num == qpn)
			return i;
	return -1;
}

static struct ibv_async_event next_async(struct ibv_context *ctx)
{
	struct ibv_async_event ev;

	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_async_event");
	memset(&ev, 0, sizeof(ev));
	CHECK_OK(ibv_get_async_event(ctx, &ev));
	vt_alarm(VT_CASE_SECONDS, "case");
	return ev;
}

static void srq_create_query(void)
{
	struct vt_env e;
	struct ibv_srq_attr a;

	vt_env_open(&e);
	CHECK_GE(e.dev.max_srq, 1);
	CHECK_GE(e.dev.max_srq_wr, 1024);
	CHECK_GE(e.dev.max_srq_sge, 1);
	struct ibv_srq *srq = make_srq(e.pd, 16, 2);
	memset(&a, 0xff, sizeof(a));
	CHECK_OK(ibv_query_srq(srq, &a));
	CHECK_GE(a.max_wr, 16);
	CHECK_GE(a.max_sge, 2);
	CHECK_EQ(a.srq_limit, 0);

	/* Out of range: EINVAL, nothing created. */
	struct ibv_srq_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = e.dev.max_srq_wr + 1;
	ia.attr.max_sge = 1;
	CHECK_NULL_ERRNO(ibv_create_srq(e.pd, &ia), EINVAL);
	ia.attr.max_wr = 4;
	ia.attr.max_sge = e.dev.max_srq_sge + 1;
	CHECK_NULL_ERRNO(ibv_create_srq(e.pd, &ia), EINVAL);

	/* More SGEs than the SRQ has: EINVAL from the post, bad_wr set. */
	struct ibv_sge sge[3] = { 0 };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = sge, .num_sge = 3 };
	struct ibv_recv_wr *bad = NULL;
	CHECK_RET(ibv_post_srq_recv(srq, &wr, &bad), EINVAL);
	CHECK(bad == &wr);

	/* A full SRQ refuses with ENOMEM. */
	struct ibv_srq *small = make_srq(e.pd, 2, 1);
	CHECK_OK(ibv_query_srq(small, &a));
	struct ibv_recv_wr w1 = { .wr_id = 1, .sg_list = sge, .num_sge = 1 };
	for (uint32_t i = 0; i < a.max_wr; i++)
		CHECK_OK(ibv_post_srq_recv(small, &w1, &bad));
	CHECK_RET(ibv_post_srq_recv(small, &w1, &bad), ENOMEM);

	/* The extended call with a basic type lands on the same SRQs. */
	struct ibv_srq_init_attr_ex ax;
	memset(&ax, 0, sizeof(ax));
	ax.attr.max_wr = 8;
	ax.attr.max_sge = 1;
	ax.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
	ax.srq_type = IBV_SRQT_BASIC;
	ax.pd = e.pd;
	struct ibv_srq *ex = CHECK_PTR(ibv_create_srq_ex(e.ctx, &ax));
	CHECK_OK(ibv_destroy_srq(ex));

	CHECK_OK(ibv_destroy_srq(small));
	CHECK_OK(ibv_destroy_srq(srq));
	/* The PD is free again once its SRQs are gone. */
	CHECK_OK(ibv_dealloc_pd(e.pd));
}

/*
 * Every responder takes from one SRQ: each receive is used exactly once,
 * each completion names the QP it arrived on, and the payload in the
 * receive's buffer is the one that QP's peer sent.
 */
static void srq_many_qps(void)
{
	struct srqset t;
	struct ibv_wc wc[2 * NQP];
	bool used[2 * NQP] = { false };

	srqset_open(&t, 64);
	for (unsigned k = 0; k < 2 * NQP; k++)
		post_srq(&t, 100 + k, k, SLOT);
	for (int i = 0; i < NQP; i++) {
		send_from(&t, i, 2 * i, 40 + i);
		send_from(&t, i, 2 * i + 1, 40 + i);
	}
	vt_poll(t.scq, wc, 2 * NQP);
	for (int k = 0; k < 2 * NQP; k++)
		CHECK_WC(&wc[k], IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(t.rcq, wc, 2 * NQP);
	unsigned per_qp[NQP] = { 0 };
	for (int k = 0; k < 2 * NQP; k++) {
		CHECK_WC(&wc[k], IBV_WC_SUCCESS, IBV_WC_RECV);
		int i = qp_index(&t, wc[k].qp_num);
		CHECKF(i >= 0, "completion names QP %#x", wc[k].qp_num);
		CHECK_EQ(wc[k].byte_len, 40 + i);
		CHECK_EQ(wc[k].src_qp, t.a[i]->qp_num);
		uint64_t slot = wc[k].wr_id - 100;
		CHECKF(slot < 2 * NQP && !used[slot], "wr_id %llu twice or unknown",
		       (unsigned long long)wc[k].wr_id);
		used[slot] = true;
		/* Messages of one QP arrive in order: its first, then its second. */
		unsigned seed = 2 * i + per_qp[i]++;
		uint8_t want[SLOT];
		vt_fill(want, 40 + i, seed);
		CHECK_MEM(t.r.p + slot * SLOT, want, 40 + i);
	}
	CHECK_CQ_EMPTY(t.rcq);
}

/* An empty SRQ stalls the sender (RNR) until a receive is posted. */
static void srq_rnr_then_post(void)
{
	struct srqset t;
	struct ibv_wc wc;

	srqset_open(&t, 16);
	send_from(&t, 1, 0, 100);
	CHECK_NO_WC_FOR(t.scq, 200);
	CHECK_NO_WC_FOR(t.rcq, 10);
	post_srq(&t, 77, 5, SLOT);
	vt_poll(t.rcq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.qp_num, t.b[1]->qp_num);
	CHECK_EQ(wc.byte_len, 100);
	uint8_t want[100];
	vt_fill(want, 100, 0);
	CHECK_MEM(t.r.p + 5 * SLOT, want, 100);
	vt_poll(t.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
}

/*
 * srq_limit arms IBV_EVENT_SRQ_LIMIT_REACHED: it fires once when fewer
 * receives than the limit remain, and the limit reads 0 afterwards.
 */
static void srq_limit_event(void)
{
	struct srqset t;
	struct ibv_srq_attr a;
	struct ibv_wc wc[3];

	srqset_open(&t, 16);
	for (unsigned k = 0; k < 6; k++)
		post_srq(&t, 10 + k, k, SLOT);
	memset(&a, 0, sizeof(a));
	a.srq_limit = 17;
	CHECK_RET(ibv_modify_srq(t.srq, &a, IBV_SRQ_LIMIT), EINVAL);
	a.srq_limit = 4;
	CHECK_OK(ibv_modify_srq(t.srq, &a, IBV_SRQ_LIMIT));
	CHECK_OK(ibv_query_srq(t.srq, &a));
	CHECK_EQ(a.srq_limit, 4);

	/* 6 -> 5 -> 4: not below the limit yet. */
	send_from(&t, 0, 0, 8);
	send_from(&t, 0, 1, 8);
	vt_poll(t.rcq, wc, 2);
	struct pollfd pfd = { .fd = t.e.ctx->async_fd, .events = POLLIN };
	CHECK_EQ(poll(&pfd, 1, 100), 0);

	/* 4 -> 3: below. */
	send_from(&t, 2, 2, 8);
	vt_poll(t.rcq, wc, 1);
	struct ibv_async_event ev = next_async(t.e.ctx);
	CHECKF(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED, "got %s",
	       ibv_event_type_str(ev.event_type));
	CHECK(ev.element.srq == t.srq);
	ibv_ack_async_event(&ev);
	CHECK_OK(ibv_query_srq(t.srq, &a));
	CHECK_EQ(a.srq_limit, 0);

	/* Disarmed: no second event. */
	send_from(&t, 3, 3, 8);
	vt_poll(t.rcq, wc, 1);
	CHECK_EQ(poll(&pfd, 1, 100), 0);
	vt_poll(t.scq, wc, 3);
	vt_poll(t.scq, wc, 1);
}

/* Resizing keeps what is posted; shrinking below it is refused. */
static void srq_resize(void)
{
	struct srqset t;
	struct ibv_srq_attr a;
	struct ibv_wc wc[4];

	srqset_open(&t, 4);
	for (unsigned k = 0; k < 4; k++)
		post_srq(&t, 20 + k, k, SLOT);
	memset(&a, 0, sizeof(a));
	a.max_wr = 2;
	CHECK_RET(ibv_modify_srq(t.srq, &a, IBV_SRQ_MAX_WR), EINVAL);
	a.max_wr = 32;
	CHECK_OK(ibv_modify_srq(t.srq, &a, IBV_SRQ_MAX_WR));
	CHECK_OK(ibv_query_srq(t.srq, &a));
	CHECK_GE(a.max_wr, 32);
	for (unsigned k = 4; k < 8; k++)
		post_srq(&t, 20 + k, k, SLOT);
	for (unsigned k = 0; k < 8; k++)
		send_from(&t, k % NQP, k, 16);
	bool seen[8] = { false };
	for (int round = 0; round < 2; round++) {
		vt_poll(t.rcq, wc, 4);
		for (int k = 0; k < 4; k++) {
			CHECK_WC(&wc[k], IBV_WC_SUCCESS, IBV_WC_RECV);
			uint64_t s = wc[k].wr_id - 20;
			CHECK(s < 8 && !seen[s]);
			seen[s] = true;
		}
	}
}

/*
 * A QP on an SRQ: its own receive queue does not exist (caps 0, post_recv
 * EINVAL), query_qp names the SRQ, and the SRQ cannot be destroyed while
 * the QP exists.
 */
static void srq_qp_attrs_and_busy(void)
{
	struct srqset t;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	srqset_open(&t, 8);
	CHECK_OK(ibv_query_qp(t.b[0], &a, IBV_QP_CAP, &ia));
	CHECK(ia.srq == t.srq);
	CHECK_EQ(ia.cap.max_recv_wr, 0);
	CHECK_EQ(a.cap.max_recv_wr, 0);

	struct ibv_sge sge = vt_sge(t.r.p, 16, t.r.mr->lkey);
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	CHECK_RET(ibv_post_recv(t.b[0], &wr, &bad), EINVAL);
	CHECK(bad == &wr);

	CHECK_RET(ibv_destroy_srq(t.srq), EBUSY);
	CHECK_RET(ibv_dealloc_pd(t.e.pd), EBUSY);
	for (int i = 0; i < NQP; i++)
		CHECK_OK(ibv_destroy_qp(t.b[i]));
	CHECK_OK(ibv_destroy_srq(t.srq));
	CHECK_RET(ibv_destroy_srq(t.srq), EINVAL);
}

/*
 * A QP on an SRQ that enters ERR raises IBV_EVENT_QP_LAST_WQE_REACHED;
 * the SRQ's receives stay posted for the other QPs.
 */
static void srq_last_wqe_reached(void)
{
	struct srqset t;
	struct ibv_qp_attr a;
	struct ibv_wc wc;

	srqset_open(&t, 8);
	post_srq(&t, 55, 3, SLOT);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(t.b[0], &a, IBV_QP_STATE));
	struct ibv_async_event ev = next_async(t.e.ctx);
	CHECKF(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED, "got %s",
	       ibv_event_type_str(ev.event_type));
	CHECK(ev.element.qp == t.b[0]);
	ibv_ack_async_event(&ev);
	/* Nothing of the SRQ was flushed into b[0]'s CQ. */
	CHECK_CQ_EMPTY(t.rcq);
	send_from(&t, 2, 1, 24);
	vt_poll(t.rcq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 55);
	CHECK_EQ(wc.qp_num, t.b[2]->qp_num);
}

/* A message longer than the SRQ receive: LOC_LEN_ERR here, REM_INV_REQ there. */
static void srq_too_long(void)
{
	struct srqset t;
	struct ibv_wc wc;

	srqset_open(&t, 8);
	post_srq(&t, 66, 0, 32);
	send_from(&t, 1, 1, 64);
	vt_poll(t.rcq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_LEN_ERR);
	CHECK_EQ(wc.wr_id, 66);
	vt_poll(t.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
}

static const struct vt_case cases[] = {
	VT_CASE(srq_create_query),	VT_CASE(srq_many_qps),
	VT_CASE(srq_rnr_then_post),	VT_CASE(srq_limit_event),
	VT_CASE(srq_resize),		VT_CASE(srq_qp_attrs_and_busy),
	VT_CASE(srq_last_wqe_reached),	VT_CASE(srq_too_long),
};
VT_MAIN(cases)
