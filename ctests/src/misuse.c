/*
 * Programs for the misuse checker (RDMA_CHECK; ctests/tests/verbs_check.sh).
 * `misuse MODE` makes one mistake the checker must name, then cleans up as
 * far as the mistake allows; `misuse clean` is a correct program (an RC
 * exchange with SEND/RECV, WRITE, READ, an atomic, completion events
 * drained the right way, a fork after ibv_fork_init, a CM event acked,
 * everything destroyed) on which the checker must stay silent. Each mode
 * prints the handles it used as "name=value" lines on stdout, which the
 * script matches against the findings.
 */
#include <poll.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "common/verbs_util.c"

static struct vt_env e;
static struct vt_pair p;

static void show_qp(const char *name, struct ibv_qp *qp)
{
	printf("%s=%p qpn=%u\n", name, (void *)qp, qp->qp_num);
}

/* An RC pair on the loopback device (cq_a/cq_b with `cqe` entries). */
static void pair(const struct vt_qp_opts *o, int cqe)
{
	vt_env_open(&e);
	vt_pair_create(&e, &p, o, cqe);
}

static void teardown(void)
{
	CHECK_OK(ibv_destroy_qp(p.a));
	CHECK_OK(ibv_destroy_qp(p.b));
	CHECK_OK(ibv_destroy_cq(p.cq_a));
	CHECK_OK(ibv_destroy_cq(p.cq_b));
}

static void close_env(void)
{
	CHECK_OK(ibv_dealloc_pd(e.pd));
	CHECK_OK(ibv_close_device(e.ctx));
}

static void send1(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
		  void *addr, uint32_t len, uint32_t lkey, void *raddr,
		  uint32_t rkey, unsigned flags)
{
	struct ibv_sge sge = vt_sge(addr, len, lkey);
	struct ibv_send_wr wr = vt_send_wr(wr_id, op, &sge, flags);

	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(qp, &wr);
}

/* Waits for one event of `cq` on `ch`, acknowledges it unless told not to. */
static void wait_event(struct ibv_comp_channel *ch, struct ibv_cq *cq, int ack)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *got;
	void *ctx;

	CHECK(poll(&pfd, 1, VT_POLL_MS) == 1);
	CHECK_OK(ibv_get_cq_event(ch, &got, &ctx));
	CHECK(got == cq);
	if (ack)
		ibv_ack_cq_events(cq, 1);
}

static int mode_clean(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc[4];

	CHECK_OK(ibv_fork_init());
	vt_env_open(&e);
	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	struct vt_qp_opts o;
	vt_default_opts(&o);
	p.cq_a = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, ch, 0));
	p.cq_b = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	p.a = vt_create_qp(e.pd, p.cq_a, p.cq_a, &o, NULL);
	p.b = vt_create_qp(e.pd, p.cq_b, p.cq_b, &o, NULL);
	vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
	vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	vt_buf_reg(&e, &s, 8192, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 8192, VT_ACCESS_ALL);
	vt_fill(s.p, s.len, 3);

	/* SEND/RECV, the send buffer reused only after its completion; the
	 * receive lands in memory a later send gathers from. */
	for (int i = 0; i < 4; i++) {
		vt_post_recv(p.b, 100 + i, r.p, 4096, r.mr->lkey);
		send1(p.a, i, IBV_WR_SEND, s.p, 4096, s.mr->lkey, NULL, 0,
		      IBV_SEND_SIGNALED);
		vt_poll(p.cq_a, wc, 1);
		CHECK_WC_STATUS(&wc[0], IBV_WC_SUCCESS);
		vt_poll(p.cq_b, wc, 1);
		CHECK_WC_STATUS(&wc[0], IBV_WC_SUCCESS);
		s.p[0]++;
	}
	/* WRITE, READ, fetch-and-add within max_rd_atomic (1). */
	send1(p.a, 10, IBV_WR_RDMA_WRITE, s.p, 512, s.mr->lkey, r.p,
	      r.mr->rkey, IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, wc, 1);
	CHECK_WC_STATUS(&wc[0], IBV_WC_SUCCESS);
	send1(p.a, 11, IBV_WR_RDMA_READ, s.p + 4096, 512, s.mr->lkey, r.p,
	      r.mr->rkey, IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, wc, 1);
	CHECK_WC_STATUS(&wc[0], IBV_WC_SUCCESS);
	struct ibv_sge sge = vt_sge(s.p + 8000, 8, s.mr->lkey);
	struct ibv_send_wr fa = vt_send_wr(12, IBV_WR_ATOMIC_FETCH_AND_ADD,
					   &sge, IBV_SEND_SIGNALED);
	fa.wr.atomic.remote_addr = (uintptr_t)r.p + 4096;
	fa.wr.atomic.rkey = r.mr->rkey;
	fa.wr.atomic.compare_add = 1;
	vt_post_send(p.a, &fa);
	vt_poll(p.cq_a, wc, 1);
	CHECK_WC_STATUS(&wc[0], IBV_WC_SUCCESS);

	/* Completion events, drained the documented way: get, ack, re-arm,
	 * poll until the CQ is empty. */
	CHECK_OK(ibv_req_notify_cq(p.cq_a, 0));
	for (int i = 0; i < 3; i++) {
		send1(p.a, 20 + 2 * i, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey,
		      r.p, r.mr->rkey, IBV_SEND_SIGNALED);
		send1(p.a, 21 + 2 * i, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey,
		      r.p, r.mr->rkey, IBV_SEND_SIGNALED);
		int got = 0;
		while (got < 2) {
			wait_event(ch, p.cq_a, 1);
			CHECK_OK(ibv_req_notify_cq(p.cq_a, 0));
			int n;
			while ((n = ibv_poll_cq(p.cq_a, 4, wc)) > 0)
				got += n;
			CHECK(n == 0);
		}
		CHECK_EQ(got, 2);
	}

	/* fork() with memory registered, after ibv_fork_init. */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(0);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));

	/* One CM event, acknowledged before rdma_destroy_id. */
	struct rdma_event_channel *cm = CHECK_PTR(rdma_create_event_channel());
	struct rdma_cm_id *id = NULL;
	CHECK_OK(rdma_create_id(cm, &id, NULL, RDMA_PS_TCP));
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	struct rdma_cm_event *ev = NULL;
	CHECK_OK(rdma_get_cm_event(cm, &ev));
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(cm);

	teardown();
	CHECK_OK(ibv_destroy_comp_channel(ch));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	puts("clean done");
	return 0;
}

/*
 * ibv_post_send on a QP still in INIT: taken (it would wait for RTS),
 * and reported: the spec and several providers refuse it.
 */
static int mode_post_init(void)
{
	struct vt_buf s;
	struct vt_qp_opts o;

	vt_env_open(&e);
	vt_default_opts(&o);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp *qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	vt_qp_to_init(qp, &o);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	show_qp("qp", qp);
	fflush(stdout);
	struct ibv_sge sge = vt_sge(s.p, 64, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	struct ibv_send_wr *bad = NULL;
	/* Taken, as mlx5 takes it; the QP then fails, flushing it. */
	CHECK_OK(ibv_post_send(qp, &wr, &bad));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	struct ibv_wc wc;
	vt_poll(cq, &wc, 1);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_WR_FLUSH_ERR);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dereg_mr(s.mr));
	close_env();
	return 0;
}

/* ibv_post_recv on a QP in ERR: flushed. */
static int mode_post_err(void)
{
	struct vt_buf r;
	struct ibv_wc wc;

	pair(NULL, 0);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	CHECK_OK(ibv_modify_qp(p.b, &a, IBV_QP_STATE));
	show_qp("qp", p.b);
	fflush(stdout);
	vt_post_recv(p.b, 7, r.p, 64, r.mr->lkey);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_WR_FLUSH_ERR);
	teardown();
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* Sends whose SGE is wrong: an lkey of another PD, of a deregistered MR,
 * a range past the end of its MR. */
static int mode_sge(const char *which)
{
	struct vt_buf s, r;
	struct ibv_wc wc;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	struct ibv_pd *pd2 = CHECK_PTR(ibv_alloc_pd(e.ctx));
	struct ibv_mr *other = CHECK_PTR(ibv_reg_mr(pd2, s.p, 4096, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *gone = CHECK_PTR(ibv_reg_mr(e.pd, s.p, 4096, IBV_ACCESS_LOCAL_WRITE));
	uint32_t gone_lkey = gone->lkey;
	CHECK_OK(ibv_dereg_mr(gone));
	show_qp("qp", p.a);
	fflush(stdout);
	uint32_t lkey = s.mr->lkey, len = 64;
	if (!strcmp(which, "other_pd"))
		lkey = other->lkey;
	else if (!strcmp(which, "deregistered"))
		lkey = gone_lkey;
	else
		len = 8192;
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, len, lkey, r.p, r.mr->rkey,
	      IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_PROT_ERR);
	teardown();
	CHECK_OK(ibv_dereg_mr(other));
	CHECK_OK(ibv_dealloc_pd(pd2));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* The same mistake through ibv_wr_*: an SGE lkey of another PD. */
static int mode_wr_other_pd(void)
{
	struct vt_buf s, r;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_default_opts(&o);
	o.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	pair(&o, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	struct ibv_pd *pd2 = CHECK_PTR(ibv_alloc_pd(e.ctx));
	struct ibv_mr *other = CHECK_PTR(ibv_reg_mr(pd2, s.p, 4096, IBV_ACCESS_LOCAL_WRITE));
	show_qp("qp", p.a);
	fflush(stdout);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(p.a));
	ibv_wr_start(qx);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, r.mr->rkey, (uintptr_t)r.p);
	ibv_wr_set_sge(qx, other->lkey, (uintptr_t)s.p, 64);
	CHECK_OK(ibv_wr_complete(qx));
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_PROT_ERR);
	teardown();
	CHECK_OK(ibv_dereg_mr(other));
	CHECK_OK(ibv_dealloc_pd(pd2));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* A SEND that waits for a receive (RNR, retried for ever) has its buffer
 * changed before it completes. */
static int mode_buf_changed(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	vt_fill(s.p, s.len, 5);
	show_qp("qp", p.a);
	fflush(stdout);
	send1(p.a, 0x51, IBV_WR_SEND, s.p, 1024, s.mr->lkey, NULL, 0,
	      IBV_SEND_SIGNALED);
	s.p[100] ^= 0xff;
	vt_post_recv(p.b, 9, r.p, 4096, r.mr->lkey);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_SUCCESS);
	vt_poll(p.cq_b, &wc, 1);
	teardown();
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* Eight signaled WRITEs outstanding on a CQ of four entries. */
static int mode_cq_overrun(void)
{
	struct vt_buf s, r;

	pair(NULL, 4);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	printf("cq=%p\n", (void *)p.cq_a);
	fflush(stdout);
	struct ibv_sge sge[8];
	struct ibv_send_wr wr[8];
	for (int i = 0; i < 8; i++) {
		sge[i] = vt_sge(s.p, 64, s.mr->lkey);
		wr[i] = vt_send_wr(i, IBV_WR_RDMA_WRITE, &sge[i], IBV_SEND_SIGNALED);
		wr[i].wr.rdma.remote_addr = (uintptr_t)r.p;
		wr[i].wr.rdma.rkey = r.mr->rkey;
		wr[i].next = i < 7 ? &wr[i + 1] : NULL;
	}
	vt_post_send(p.a, wr);
	return 0;
}

/* A QP destroyed with a SEND in flight (waiting for a receive). */
static int mode_destroy_qp(void)
{
	struct vt_buf s;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	show_qp("qp", p.a);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_SEND, s.p, 64, s.mr->lkey, NULL, 0, IBV_SEND_SIGNALED);
	teardown();
	CHECK_OK(ibv_dereg_mr(s.mr));
	close_env();
	return 0;
}

/* An MR deregistered while a posted receive still names it. */
static int mode_dereg_busy(void)
{
	struct vt_buf r;

	pair(NULL, 0);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	printf("mr=%p\n", (void *)r.mr);
	fflush(stdout);
	vt_post_recv(p.b, 1, r.p, 4096, r.mr->lkey);
	CHECK_OK(ibv_dereg_mr(r.mr));
	teardown();
	close_env();
	return 0;
}

/* ibv_destroy_cq with a completion event not acknowledged: the checker
 * turns rdma-core's endless wait into EBUSY; acknowledged, it goes. */
static int mode_unacked_cq(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	struct vt_qp_opts o;
	vt_default_opts(&o);
	p.cq_a = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, ch, 0));
	p.cq_b = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	p.a = vt_create_qp(e.pd, p.cq_a, p.cq_a, &o, NULL);
	p.b = vt_create_qp(e.pd, p.cq_b, p.cq_b, &o, NULL);
	vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
	vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	printf("cq=%p\n", (void *)p.cq_a);
	fflush(stdout);
	CHECK_OK(ibv_req_notify_cq(p.cq_a, 0));
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey, r.p, r.mr->rkey,
	      IBV_SEND_SIGNALED);
	wait_event(ch, p.cq_a, 0);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_OK(ibv_destroy_qp(p.a));
	CHECK_OK(ibv_destroy_qp(p.b));
	CHECK_EQ(ibv_destroy_cq(p.cq_a), EBUSY);
	ibv_ack_cq_events(p.cq_a, 1);
	CHECK_OK(ibv_destroy_cq(p.cq_a));
	CHECK_OK(ibv_destroy_cq(p.cq_b));
	CHECK_OK(ibv_destroy_comp_channel(ch));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* ibv_destroy_qp with an async event about it not acknowledged: a WRITE
 * with a bad rkey gives the responder QP IBV_EVENT_QP_ACCESS_ERR. */
static int mode_unacked_async(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;
	struct ibv_async_event ev;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	show_qp("qp", p.b);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey, r.p,
	      r.mr->rkey ^ 0x00f0f0f0, IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
	struct pollfd pfd = { .fd = e.ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, VT_POLL_MS) == 1);
	CHECK_OK(ibv_get_async_event(e.ctx, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
	CHECK(ev.element.qp == p.b);
	CHECK_OK(ibv_destroy_qp(p.a));
	CHECK_EQ(ibv_destroy_qp(p.b), EBUSY);
	ibv_ack_async_event(&ev);
	CHECK_OK(ibv_destroy_qp(p.b));
	CHECK_OK(ibv_destroy_cq(p.cq_a));
	CHECK_OK(ibv_destroy_cq(p.cq_b));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* ibv_destroy_srq with IBV_EVENT_SRQ_LIMIT_REACHED not acknowledged. */
static int mode_unacked_srq(void)
{
	struct vt_buf s, r;
	struct vt_qp_opts o;
	struct ibv_wc wc;
	struct ibv_async_event ev;

	vt_env_open(&e);
	vt_default_opts(&o);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq(e.pd, &sa));
	printf("srq=%p\n", (void *)srq);
	fflush(stdout);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = vt_sge(r.p + 64 * i, 64, r.mr->lkey);
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;
		CHECK_OK(ibv_post_srq_recv(srq, &wr, &bad));
	}
	struct ibv_srq_attr a = { .srq_limit = 2 };
	CHECK_OK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT));
	p.cq_a = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	p.cq_b = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	p.a = vt_create_qp(e.pd, p.cq_a, p.cq_a, &o, NULL);
	struct ibv_qp_init_attr ia = {
		.send_cq = p.cq_b, .recv_cq = p.cq_b, .srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	p.b = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
	vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	send1(p.a, 1, IBV_WR_SEND, s.p, 8, s.mr->lkey, NULL, 0, IBV_SEND_SIGNALED);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_SUCCESS);
	vt_poll(p.cq_a, &wc, 1);
	struct pollfd pfd = { .fd = e.ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, VT_POLL_MS) == 1);
	CHECK_OK(ibv_get_async_event(e.ctx, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	teardown();
	CHECK_EQ(ibv_destroy_srq(srq), EBUSY);
	ibv_ack_async_event(&ev);
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* rdma_destroy_id with its CM event not acknowledged. */
static int mode_unacked_cm(void)
{
	struct rdma_event_channel *cm = CHECK_PTR(rdma_create_event_channel());
	struct rdma_cm_id *id = NULL;
	CHECK_OK(rdma_create_id(cm, &id, NULL, RDMA_PS_TCP));
	printf("cm_id=%p\n", (void *)id);
	fflush(stdout);
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	struct rdma_cm_event *ev = NULL;
	CHECK_OK(rdma_get_cm_event(cm, &ev));
	CHECK_EQ(rdma_destroy_id(id), -1);
	CHECK_EQ(errno, EBUSY);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(cm);
	return 0;
}

/* An event consumed, one completion polled of two, the CQ re-armed, and
 * the next event awaited: the second completion is never drained. The
 * two completions are flushes, made together by moving the QP to ERR
 * while two SENDs wait for receives. */
static int mode_rearm(void)
{
	struct vt_buf s;
	struct ibv_wc wc;

	vt_env_open(&e);
	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	struct vt_qp_opts o;
	vt_default_opts(&o);
	p.cq_a = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, ch, 0));
	p.cq_b = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	p.a = vt_create_qp(e.pd, p.cq_a, p.cq_a, &o, NULL);
	p.b = vt_create_qp(e.pd, p.cq_b, p.cq_b, &o, NULL);
	vt_qp_connect(p.a, p.b->qp_num, &e.gid, &o);
	vt_qp_connect(p.b, p.a->qp_num, &e.gid, &o);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	printf("cq=%p\n", (void *)p.cq_a);
	fflush(stdout);
	CHECK_OK(ibv_req_notify_cq(p.cq_a, 0));
	send1(p.a, 1, IBV_WR_SEND, s.p, 64, s.mr->lkey, NULL, 0, IBV_SEND_SIGNALED);
	send1(p.a, 2, IBV_WR_SEND, s.p, 64, s.mr->lkey, NULL, 0, IBV_SEND_SIGNALED);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	CHECK_OK(ibv_modify_qp(p.a, &a, IBV_QP_STATE));
	wait_event(ch, p.cq_a, 1);
	CHECK_EQ(ibv_poll_cq(p.cq_a, 1, &wc), 1);
	CHECK_OK(ibv_req_notify_cq(p.cq_a, 0));
	/* Waits for the next event with a completion still queued. */
	wait_event(ch, p.cq_a, 1);
	while (ibv_poll_cq(p.cq_a, 1, &wc) > 0)
		;
	teardown();
	CHECK_OK(ibv_destroy_comp_channel(ch));
	CHECK_OK(ibv_dereg_mr(s.mr));
	close_env();
	return 0;
}

/* fork() with an MR registered and no ibv_fork_init. */
static int mode_fork(void)
{
	struct vt_buf s;

	vt_env_open(&e);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	printf("pid=%d\n", (int)getpid());
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(0);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
	CHECK_OK(ibv_dereg_mr(s.mr));
	close_env();
	return 0;
}

/* A WRITE naming the rkey of an MR this process deregistered. */
static int mode_rkey(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	uint32_t rkey = r.mr->rkey;
	CHECK_OK(ibv_dereg_mr(r.mr));
	show_qp("qp", p.a);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey, r.p, rkey,
	      IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
	teardown();
	CHECK_OK(ibv_dereg_mr(s.mr));
	close_env();
	return 0;
}

/* A WRITE naming the old rkey of a memory window bound again since. */
static int mode_mw_rkey(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;
	uint32_t old = 0;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(e.pd, IBV_MW_TYPE_1));
	struct ibv_mw_bind b;
	memset(&b, 0, sizeof(b));
	b.send_flags = IBV_SEND_SIGNALED;
	b.bind_info.mr = r.mr;
	b.bind_info.addr = (uintptr_t)r.p;
	b.bind_info.length = 2048;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	for (int i = 0; i < 2; i++) {
		b.wr_id = 40 + i;
		CHECK_OK(ibv_bind_mw(p.b, mw, &b));
		vt_poll(p.cq_b, &wc, 1);
		CHECK_WC_STATUS(&wc, IBV_WC_SUCCESS);
		if (i == 0)
			old = mw->rkey;
	}
	CHECK(old != mw->rkey);
	show_qp("qp", p.a);
	printf("rkey=0x%x\n", old);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey, r.p, old,
	      IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
	teardown();
	CHECK_OK(ibv_dealloc_mw(mw));
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* ibv_close_device with an async event (the responder's access error)
 * never acknowledged; the QP it is about is left to the exit. */
static int mode_close_unacked(void)
{
	struct vt_buf s, r;
	struct ibv_wc wc;
	struct ibv_async_event ev;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	printf("ctx=%p\n", (void *)e.ctx);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_RDMA_WRITE, s.p, 64, s.mr->lkey, r.p,
	      r.mr->rkey ^ 0x00f0f0f0, IBV_SEND_SIGNALED);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
	struct pollfd pfd = { .fd = e.ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, VT_POLL_MS) == 1);
	CHECK_OK(ibv_get_async_event(e.ctx, &ev));
	CHECK_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
	CHECK_OK(ibv_close_device(e.ctx));
	return 0;
}

/* An RDMA READ on a QP whose max_rd_atomic is 0. */
static int mode_rd_atomic(void)
{
	struct vt_buf s, r;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_default_opts(&o);
	o.max_rd_atomic = 0;
	pair(&o, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	show_qp("qp", p.a);
	fflush(stdout);
	send1(p.a, 1, IBV_WR_RDMA_READ, s.p, 64, s.mr->lkey, r.p, r.mr->rkey,
	      IBV_SEND_SIGNALED);
	(void)vt_poll_cq_n(p.cq_a, &wc, 1, 2000);
	teardown();
	CHECK_OK(ibv_dereg_mr(s.mr));
	CHECK_OK(ibv_dereg_mr(r.mr));
	close_env();
	return 0;
}

/* Objects never destroyed: the exit summary lists them. */
static int mode_leak(void)
{
	struct vt_buf s;

	pair(NULL, 0);
	vt_buf_reg(&e, &s, 4096, VT_ACCESS_ALL);
	show_qp("qp", p.a);
	printf("mr=%p\n", (void *)s.mr);
	/* A CM id and its event, neither released. */
	struct rdma_event_channel *cm = CHECK_PTR(rdma_create_event_channel());
	struct rdma_cm_id *id = NULL;
	CHECK_OK(rdma_create_id(cm, &id, NULL, RDMA_PS_TCP));
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	struct rdma_cm_event *ev = NULL;
	CHECK_OK(rdma_get_cm_event(cm, &ev));
	printf("cm_id=%p\n", (void *)id);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*f)(void);
	} modes[] = {
		{ "clean", mode_clean },
		{ "post_init", mode_post_init },
		{ "post_err", mode_post_err },
		{ "wr_other_pd", mode_wr_other_pd },
		{ "buf_changed", mode_buf_changed },
		{ "cq_overrun", mode_cq_overrun },
		{ "destroy_qp", mode_destroy_qp },
		{ "dereg_busy", mode_dereg_busy },
		{ "unacked_cq", mode_unacked_cq },
		{ "unacked_async", mode_unacked_async },
		{ "unacked_cm", mode_unacked_cm },
		{ "unacked_srq", mode_unacked_srq },
		{ "rearm", mode_rearm },
		{ "fork", mode_fork },
		{ "rkey", mode_rkey },
		{ "mw_rkey", mode_mw_rkey },
		{ "close_unacked", mode_close_unacked },
		{ "rd_atomic", mode_rd_atomic },
		{ "leak", mode_leak },
	};

	if (argc != 2) {
		fprintf(stderr, "usage: misuse MODE\n");
		return 2;
	}
	vt_current_case = argv[1];
	vt_alarm(VT_CASE_SECONDS, argv[1]);
	if (!strcmp(argv[1], "other_pd") || !strcmp(argv[1], "deregistered") ||
	    !strcmp(argv[1], "out_of_mr"))
		return mode_sge(argv[1]);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(argv[1], modes[i].name))
			return modes[i].f();
	fprintf(stderr, "misuse: unknown mode %s\n", argv[1]);
	return 2;
}
