/*
 * Completion channels (blocking, O_NONBLOCK + poll(), solicited-only
 * notification, ack and destroy) and asynchronous events through
 * context->async_fd (CQ overrun, communication established).
 */
#include "common/verbs_util.c"

#include <stdatomic.h>

/*
 * a (requester, plain CQ) connected to b whose CQ reports to a completion
 * channel. b's CQ has cq_context &tag.
 */
struct chpair {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	struct vt_buf s, r;
	int tag;
	unsigned next_recv;
};

static void chpair_open(struct chpair *c, bool b_rts)
{
	memset(c, 0, sizeof(*c));
	vt_env_open(&c->e);
	vt_default_opts(&c->o);
	c->ch = CHECK_PTR(ibv_create_comp_channel(c->e.ctx));
	CHECK_GE(c->ch->fd, 0);
	CHECK(c->ch->context == c->e.ctx);
	c->cq_a = CHECK_PTR(ibv_create_cq(c->e.ctx, 64, NULL, NULL, 0));
	c->cq_b = CHECK_PTR(ibv_create_cq(c->e.ctx, 64, &c->tag, c->ch, 0));
	CHECK(c->cq_b->channel == c->ch);
	CHECK(c->cq_b->cq_context == &c->tag);
	c->a = vt_create_qp(c->e.pd, c->cq_a, c->cq_a, &c->o, NULL);
	c->b = vt_create_qp(c->e.pd, c->cq_b, c->cq_b, &c->o, NULL);
	vt_qp_connect(c->a, c->b->qp_num, &c->e.gid, &c->o);
	vt_qp_to_init(c->b, &c->o);
	vt_qp_to_rtr(c->b, c->a->qp_num, &c->e.gid, &c->o);
	if (b_rts)
		vt_qp_to_rts(c->b, &c->o);
	vt_buf_reg(&c->e, &c->s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&c->e, &c->r, 64 * 64, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(c->s.p, c->s.len, 1);
}

/* Posts a receive on b and a SEND on a; a's completion is consumed. */
static void chpair_send(struct chpair *c, unsigned flags)
{
	struct ibv_wc wc;
	unsigned i = c->next_recv++ % 64;

	vt_post_recv(c->b, 500 + i, c->r.p + 64 * i, 64, c->r.mr->lkey);
	struct ibv_sge sge = vt_sge(c->s.p, 16, c->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(600 + i, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED | flags);
	vt_post_send(c->a, &wr);
	vt_poll(c->cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
}

/* b's next receive completion. */
static void expect_recv_wc(struct chpair *c)
{
	struct ibv_wc wc;

	vt_poll(c->cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 16);
}

static void set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	CHECK(flags != -1);
	CHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0);
}

/* poll() on fd for POLLIN: 1 if readable within ms, 0 otherwise. */
static int readable_within(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t deadline = vt_now_ms() + (uint64_t)ms;
	int rc;

	do {
		uint64_t now = vt_now_ms();
		int left = now >= deadline ? 0 : (int)(deadline - now);

		pfd.revents = 0;
		rc = poll(&pfd, 1, left);
		CHECKF(rc >= 0 || errno == EINTR, "poll: %s", strerror(errno));
		if (rc > 0) {
			CHECKF(pfd.revents & POLLIN, "poll revents 0x%x",
			       pfd.revents);
			return 1;
		}
	} while (vt_now_ms() < deadline);
	return 0;
}

/* ibv_get_cq_event in blocking mode, with an alarm as the bound. */
static void get_cq_event_blocking(struct ibv_comp_channel *ch,
				  struct ibv_cq **cq, void **ctx)
{
	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_cq_event");
	int r = ibv_get_cq_event(ch, cq, ctx);
	vt_alarm(VT_CASE_SECONDS, "case");
	CHECKF(r == 0, "ibv_get_cq_event returned %d, errno %s", r,
	       strerror(errno));
}

struct sender {
	struct chpair *c;
	unsigned flags;
};

static void *send_from_thread(void *arg)
{
	struct sender *s = arg;

	chpair_send(s->c, s->flags);
	return NULL;
}

static void channel_blocking(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	pthread_t th;

	chpair_open(&c, true);
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));

	/* The completion happens while this thread sits in the call. */
	struct sender snd = { &c, 0 };
	CHECK_OK(pthread_create(&th, NULL, send_from_thread, &snd));
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	CHECK(ev_cq == c.cq_b);
	CHECK(ev_ctx == &c.tag);
	ibv_ack_cq_events(ev_cq, 1);
	CHECK_OK(pthread_join(th, NULL));
	expect_recv_wc(&c);

	/* One event per arming: the next completion raises none. */
	chpair_send(&c, 0);
	expect_recv_wc(&c);
	CHECK_EQ(readable_within(c.ch->fd, 100), 0);

	/* Armed again, with the completion before the wait. */
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	CHECK(ev_cq == c.cq_b);
	CHECK(ev_ctx == &c.tag);
	ibv_ack_cq_events(ev_cq, 1);
	expect_recv_wc(&c);
	CHECK_CQ_EMPTY(c.cq_b);
}

static void channel_nonblock(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;

	chpair_open(&c, true);
	set_nonblock(c.ch->fd);
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx), -1);
	CHECK_EQ(errno, EAGAIN);

	/* Not armed: a completion, but no event. */
	chpair_send(&c, 0);
	expect_recv_wc(&c);
	CHECK_EQ(readable_within(c.ch->fd, 100), 0);
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx), -1);
	CHECK_EQ(errno, EAGAIN);

	/* Armed: poll() wakes up when the completion arrives. */
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	CHECK_EQ(readable_within(c.ch->fd, 0), 0);
	chpair_send(&c, 0);
	CHECKF(readable_within(c.ch->fd, VT_POLL_MS),
	       "channel fd not readable within %d ms of the completion",
	       VT_POLL_MS);
	CHECK_OK(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == c.cq_b);
	CHECK(ev_ctx == &c.tag);
	ibv_ack_cq_events(ev_cq, 1);
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(readable_within(c.ch->fd, 0), 0);
	expect_recv_wc(&c);
}

static void solicited_only(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	struct ibv_qp_attr qa;
	struct ibv_wc wc;

	chpair_open(&c, true);
	set_nonblock(c.ch->fd);
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 1));

	/* An unsolicited message completes without waking anyone. */
	chpair_send(&c, 0);
	expect_recv_wc(&c);
	CHECK_EQ(readable_within(c.ch->fd, 100), 0);

	/* A solicited one does. */
	chpair_send(&c, IBV_SEND_SOLICITED);
	CHECK(readable_within(c.ch->fd, VT_POLL_MS));
	CHECK_OK(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == c.cq_b);
	ibv_ack_cq_events(ev_cq, 1);
	expect_recv_wc(&c);

	/* An error completion counts as solicited. */
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 1));
	vt_post_recv(c.b, 99, c.r.p, 64, c.r.mr->lkey);
	CHECK_EQ(readable_within(c.ch->fd, 50), 0);
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_ERR;
	CHECK_OK(ibv_modify_qp(c.b, &qa, IBV_QP_STATE));
	CHECK(readable_within(c.ch->fd, VT_POLL_MS));
	CHECK_OK(ibv_get_cq_event(c.ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == c.cq_b);
	ibv_ack_cq_events(ev_cq, 1);
	vt_poll(c.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 99);
}

/* Two CQs on one channel: the event names the CQ that completed. */
static void shared_channel(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	int tag2;

	chpair_open(&c, true);
	struct ibv_cq *other = CHECK_PTR(ibv_create_cq(c.e.ctx, 8, &tag2, c.ch, 0));
	CHECK_OK(ibv_req_notify_cq(other, 0));
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	CHECK(ev_cq == c.cq_b);
	CHECK(ev_ctx == &c.tag);
	ibv_ack_cq_events(ev_cq, 1);
	CHECK_EQ(readable_within(c.ch->fd, 50), 0);
	expect_recv_wc(&c);
	/* The channel cannot go while CQs use it. */
	CHECK_RET(ibv_destroy_comp_channel(c.ch), EBUSY);
	CHECK_OK(ibv_destroy_cq(other));
}

static void ack_then_destroy(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;

	chpair_open(&c, true);
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	CHECK(ev_cq == c.cq_b);
	expect_recv_wc(&c);
	/* Acks may be batched: one call acknowledges several events. */
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	expect_recv_wc(&c);
	ibv_ack_cq_events(ev_cq, 2);

	CHECK_RET(ibv_destroy_comp_channel(c.ch), EBUSY);
	CHECK_OK(ibv_destroy_qp(c.b));
	CHECK_OK(ibv_destroy_cq(c.cq_b));
	CHECK_OK(ibv_destroy_comp_channel(c.ch));
	CHECK_OK(ibv_destroy_qp(c.a));
	CHECK_OK(ibv_destroy_cq(c.cq_a));
}

struct destroyer {
	struct ibv_cq *cq;
	atomic_int done;
	int ret;
};

static void *destroy_cq_thread(void *arg)
{
	struct destroyer *d = arg;

	d->ret = ibv_destroy_cq(d->cq);
	atomic_store(&d->done, 1);
	return NULL;
}

/* ibv_destroy_cq waits until every event it handed out is acknowledged. */
static void destroy_waits_for_ack(void)
{
	struct chpair c;
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	pthread_t th;

	chpair_open(&c, true);
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &ev_cq, &ev_ctx);
	expect_recv_wc(&c);
	CHECK_OK(ibv_destroy_qp(c.b));

	struct destroyer d = { .cq = c.cq_b, .done = 0, .ret = -1 };
	CHECK_OK(pthread_create(&th, NULL, destroy_cq_thread, &d));
	uint64_t until = vt_now_ms() + 200;
	while (vt_now_ms() < until) {
		CHECKF(!atomic_load(&d.done),
		       "ibv_destroy_cq returned %d with an event unacked",
		       d.ret);
		sched_yield();
	}
	ibv_ack_cq_events(ev_cq, 1);
	until = vt_now_ms() + VT_POLL_MS;
	while (!atomic_load(&d.done) && vt_now_ms() < until)
		sched_yield();
	CHECKF(atomic_load(&d.done), "ibv_destroy_cq still blocked after the ack");
	CHECK_OK(pthread_join(th, NULL));
	CHECK_EQ(d.ret, 0);
	CHECK_OK(ibv_destroy_comp_channel(c.ch));
}

/*
 * Fills a CQ past its capacity: the requester's CQ has the smallest size
 * the provider grants for cqe 1, and gets that many + 2 completions.
 */
static struct ibv_cq *overrun_cq(struct vt_env *e)
{
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_cq *small = CHECK_PTR(ibv_create_cq(e->ctx, 1, NULL, NULL, 0));
	CHECK_GE(small->cqe, 1);
	int n = small->cqe + 2;

	CHECKF(n <= 4096, "cqe 1 became %d entries", small->cqe);
	vt_default_opts(&o);
	o.max_send_wr = o.max_recv_wr = (uint32_t)n;
	struct ibv_cq *big = CHECK_PTR(ibv_create_cq(e->ctx, 2 * n + 16, NULL, NULL, 0));
	struct ibv_qp *a = vt_create_qp(e->pd, small, big, &o, NULL);
	struct ibv_qp *b = vt_create_qp(e->pd, big, big, &o, NULL);
	vt_qp_connect(a, b->qp_num, &e->gid, &o);
	vt_qp_connect(b, a->qp_num, &e->gid, &o);
	vt_buf_reg(e, &s, 64, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(e, &r, 64 * (size_t)n, IBV_ACCESS_LOCAL_WRITE);

	struct ibv_sge sge = vt_sge(s.p, 8, s.mr->lkey);
	struct ibv_send_wr *wr = vt_alloc(sizeof(*wr) * (size_t)n);
	for (int i = 0; i < n; i++) {
		vt_post_recv(b, i, r.p + 64 * i, 64, r.mr->lkey);
		wr[i] = vt_send_wr(i, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	vt_post_send(a, wr);
	/*
	 * Once cqe + 1 messages have arrived, the sender has produced more
	 * completions than its CQ holds (the QP may go to ERR on the
	 * overrun, so the last message need not arrive).
	 */
	struct ibv_wc *wc = vt_alloc(sizeof(*wc) * (size_t)n);
	int got = vt_poll_cq_n(big, wc, small->cqe + 1, VT_POLL_MS);
	CHECKF(got == small->cqe + 1, "only %d of %d messages arrived", got,
	       small->cqe + 1);
	for (int i = 0; i < got; i++)
		CHECK_WC(&wc[i], IBV_WC_SUCCESS, IBV_WC_RECV);
	return small;
}

static void async_cq_overrun(void)
{
	struct vt_env e;
	struct ibv_async_event ev;

	vt_env_open(&e);
	struct ibv_cq *small = overrun_cq(&e);

	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_async_event");
	for (;;) {
		memset(&ev, 0, sizeof(ev));
		CHECK_OK(ibv_get_async_event(e.ctx, &ev));
		if (ev.event_type == IBV_EVENT_CQ_ERR)
			break;
		fprintf(stderr, "  (other async event: %s)\n",
			ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	}
	vt_alarm(VT_CASE_SECONDS, "case");
	CHECK(ev.element.cq == small);
	ibv_ack_async_event(&ev);
}

static void async_nonblock(void)
{
	struct vt_env e;
	struct ibv_async_event ev;

	vt_env_open(&e);
	set_nonblock(e.ctx->async_fd);
	errno = 0;
	CHECK_EQ(ibv_get_async_event(e.ctx, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(readable_within(e.ctx->async_fd, 0), 0);

	struct ibv_cq *small = overrun_cq(&e);
	/*
	 * The overrun raises IBV_EVENT_CQ_ERR for the CQ and, as the spec
	 * moves the QPs that lost completions to the error state,
	 * IBV_EVENT_QP_FATAL for the sending QP (in either order).
	 */
	bool got = false, fatal = false;
	uint64_t deadline = vt_now_ms() + VT_POLL_MS;
	while (!(got && fatal) && vt_now_ms() < deadline) {
		if (!readable_within(e.ctx->async_fd,
				     (int)(deadline - vt_now_ms())))
			break;
		memset(&ev, 0, sizeof(ev));
		CHECK_OK(ibv_get_async_event(e.ctx, &ev));
		if (ev.event_type == IBV_EVENT_CQ_ERR) {
			got = true;
			CHECK(ev.element.cq == small);
		} else if (ev.event_type == IBV_EVENT_QP_FATAL) {
			fatal = true;
			CHECK(ev.element.qp->send_cq == small);
			CHECK_EQ(vt_qp_state(ev.element.qp), IBV_QPS_ERR);
		} else {
			fprintf(stderr, "  (other async event: %s)\n",
				ibv_event_type_str(ev.event_type));
		}
		ibv_ack_async_event(&ev);
	}
	CHECKF(got, "no IBV_EVENT_CQ_ERR within %d ms", VT_POLL_MS);
	CHECKF(fatal, "no IBV_EVENT_QP_FATAL within %d ms", VT_POLL_MS);
	errno = 0;
	CHECK_EQ(ibv_get_async_event(e.ctx, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
}

/* The first request reaching a QP in RTR raises IBV_EVENT_COMM_EST. */
static void async_comm_est(void)
{
	struct chpair c;
	struct ibv_async_event ev;

	chpair_open(&c, false);
	CHECK_EQ(vt_qp_state(c.b), IBV_QPS_RTR);
	chpair_send(&c, 0);
	expect_recv_wc(&c);

	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_async_event");
	memset(&ev, 0, sizeof(ev));
	CHECK_OK(ibv_get_async_event(c.e.ctx, &ev));
	vt_alarm(VT_CASE_SECONDS, "case");
	CHECKF(ev.event_type == IBV_EVENT_COMM_EST, "got %s",
	       ibv_event_type_str(ev.event_type));
	CHECK(ev.element.qp == c.b);
	ibv_ack_async_event(&ev);
	/* Now to RTS, and b may send as well. */
	vt_qp_to_rts(c.b, &c.o);
	CHECK_OK(ibv_destroy_qp(c.b));
}

/*
 * One completion per event: a WRITE and a signaled SEND, then the reply.
 * The program waits for an event, re-arms, polls exactly one completion
 * and waits again. Completions that arrived together must not strand it:
 * arming a CQ with unpolled completions no event announced raises an
 * event at once, as ConnectX hardware does.
 */
static void one_completion_per_event(void)
{
	struct chpair c;
	struct ibv_cq *cq;
	void *ctx;
	struct ibv_wc wc;
	struct ibv_comp_channel *ch;
	int seen_write = 0, seen_send = 0, seen_recv = 0;

	chpair_open(&c, true);
	/* a's CQ reports to a channel of its own for this case. */
	ch = CHECK_PTR(ibv_create_comp_channel(c.e.ctx));
	struct ibv_cq *acq = CHECK_PTR(ibv_create_cq(c.e.ctx, 16, NULL, ch, 0));
	struct ibv_qp *a = vt_create_qp(c.e.pd, acq, acq, &c.o, NULL);
	struct ibv_qp *b = vt_create_qp(c.e.pd, c.cq_b, c.cq_b, &c.o, NULL);
	c.o.access = VT_ACCESS_ALL;
	vt_qp_connect(a, b->qp_num, &c.e.gid, &c.o);
	vt_qp_connect(b, a->qp_num, &c.e.gid, &c.o);
	struct vt_buf t;
	vt_buf_reg(&c.e, &t, 4096, VT_ACCESS_ALL);

	vt_post_recv(a, 1, c.r.p, 64, c.r.mr->lkey);
	vt_post_recv(b, 2, c.r.p + 64, 64, c.r.mr->lkey);
	CHECK_OK(ibv_req_notify_cq(acq, 0));
	struct ibv_sge sw = vt_sge(c.s.p, 512, c.s.mr->lkey);
	struct ibv_send_wr w = vt_send_wr(10, IBV_WR_RDMA_WRITE, &sw,
					  IBV_SEND_SIGNALED);
	w.wr.rdma.remote_addr = (uintptr_t)t.p;
	w.wr.rdma.rkey = t.mr->rkey;
	struct ibv_sge ss = vt_sge(c.s.p, 16, c.s.mr->lkey);
	struct ibv_send_wr s = vt_send_wr(11, IBV_WR_SEND, &ss,
					  IBV_SEND_SIGNALED);
	w.next = &s;
	vt_post_send(a, &w);
	/* b answers once a's SEND is in. */
	struct ibv_wc bwc;
	vt_poll(c.cq_b, &bwc, 1);
	CHECK_WC(&bwc, IBV_WC_SUCCESS, IBV_WC_RECV);
	struct ibv_send_wr r = vt_send_wr(12, IBV_WR_SEND, &ss, IBV_SEND_SIGNALED);
	vt_post_send(b, &r);
	vt_poll(c.cq_b, &bwc, 1);

	for (int i = 0; i < 3; i++) {
		get_cq_event_blocking(ch, &cq, &ctx);
		CHECK(cq == acq);
		ibv_ack_cq_events(acq, 1);
		CHECK_OK(ibv_req_notify_cq(acq, 0));
		CHECK_EQ(vt_poll_cq_n(acq, &wc, 1, VT_POLL_MS), 1);
		CHECK_WC_STATUS(&wc, IBV_WC_SUCCESS);
		seen_write += wc.wr_id == 10;
		seen_send += wc.wr_id == 11;
		seen_recv += wc.wr_id == 1;
	}
	CHECK(seen_write == 1 && seen_send == 1 && seen_recv == 1);
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_cq(acq));
	CHECK_OK(ibv_destroy_comp_channel(ch));
}

static void on_usr1(int sig)
{
	(void)sig;
}

struct nagger {
	pthread_t target;
	atomic_bool stop;
};

/* Signals the target thread every 20 ms until told to stop. */
static void *nag(void *arg)
{
	struct nagger *n = arg;
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	while (!atomic_load(&n->stop)) {
		pthread_kill(n->target, SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/*
 * A signal (handler installed without SA_RESTART) interrupts a blocking
 * ibv_get_cq_event and ibv_get_async_event: -1 with errno EINTR, as
 * rdma-core's do. Timed tests (qperf) end their wait this way. The channel
 * works normally afterwards.
 */
static void wait_interrupted_by_signal(void)
{
	struct chpair c;
	struct sigaction sa;
	struct nagger n;
	pthread_t th;
	struct ibv_cq *cq;
	void *ctx;
	struct ibv_async_event ev;

	chpair_open(&c, true);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	CHECK_OK(ibv_req_notify_cq(c.cq_b, 0));

	n.target = pthread_self();
	atomic_store(&n.stop, false);
	CHECK(pthread_create(&th, NULL, nag, &n) == 0);
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(c.ch, &cq, &ctx), -1);
	CHECK_EQ(errno, EINTR);
	errno = 0;
	CHECK_EQ(ibv_get_async_event(c.e.ctx, &ev), -1);
	CHECK_EQ(errno, EINTR);
	atomic_store(&n.stop, true);
	CHECK(pthread_join(th, NULL) == 0);

	/* Still armed: the next completion raises the event. */
	chpair_send(&c, 0);
	get_cq_event_blocking(c.ch, &cq, &ctx);
	CHECK(cq == c.cq_b);
	CHECK(ctx == &c.tag);
	expect_recv_wc(&c);
	ibv_ack_cq_events(c.cq_b, 1);
}

/*
 * The verbs are no thread-cancellation points: a thread with a cancel
 * pending sends, polls and receives through them, and is cancelled only
 * where it asks. (The system calls under a TCP QP's data path are
 * cancellation points in libc's wrappers; a thread cancelled inside one
 * would die holding its QP.)
 */
struct cancel_pending {
	struct chpair *c;
	atomic_int ready, requested, through;
};

/* One completion, polled with yields only: vt_poll sleeps in nanosleep (a
 * cancellation point) when a completion is slow to come. */
static void spin_poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = vt_now_ms() + VT_POLL_MS;
	int r;

	while ((r = ibv_poll_cq(cq, 1, wc)) == 0 && vt_now_ms() < end)
		sched_yield();
	CHECK_EQ(r, 1);
}

static void *verbs_with_cancel_pending(void *arg)
{
	struct cancel_pending *p = arg;
	int old;

	CHECK_OK(pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old));
	atomic_store(&p->ready, 1);
	uint64_t until = vt_now_ms() + VT_POLL_MS;
	while (!atomic_load(&p->requested) && vt_now_ms() < until)
		sched_yield();
	CHECK(atomic_load(&p->requested));
	/* Deferred: the pending cancel acts at the next cancellation point. */
	CHECK_OK(pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old));
	for (int i = 0; i < 20; i++) {
		struct ibv_wc wc;

		for (int k = 0; k < 50; k++)
			CHECK_EQ(ibv_poll_cq(p->c->cq_b, 1, &wc), 0);
		struct chpair *c = p->c;
		unsigned k = c->next_recv++ % 64;

		vt_post_recv(c->b, 500 + k, c->r.p + 64 * k, 64, c->r.mr->lkey);
		struct ibv_sge sge = vt_sge(c->s.p, 16, c->s.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(600 + k, IBV_WR_SEND, &sge,
						   IBV_SEND_SIGNALED);
		vt_post_send(c->a, &wr);
		spin_poll_one(c->cq_a, &wc);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
		spin_poll_one(c->cq_b, &wc);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.byte_len, 16);
		atomic_store(&p->through, i + 1);
	}
	pthread_testcancel();
	return NULL;
}

static void verbs_are_no_cancellation_points(void)
{
	struct chpair c;
	struct cancel_pending p = { .c = &c };
	pthread_t th;
	void *ret = NULL;

	chpair_open(&c, true);
	CHECK_OK(pthread_create(&th, NULL, verbs_with_cancel_pending, &p));
	uint64_t until = vt_now_ms() + VT_POLL_MS;
	while (!atomic_load(&p.ready) && vt_now_ms() < until)
		sched_yield();
	CHECK_OK(pthread_cancel(th));
	atomic_store(&p.requested, 1);
	CHECK_OK(pthread_join(th, &ret));
	CHECK(ret == PTHREAD_CANCELED);
	CHECK_EQ(atomic_load(&p.through), 20);
	/* Nothing was left held: the pair works on. */
	chpair_send(&c, 0);
	expect_recv_wc(&c);
	CHECK_CQ_EMPTY(c.cq_b);
}

static const struct vt_case cases[] = {
	VT_CASE(channel_blocking),	VT_CASE(channel_nonblock),
	VT_CASE(solicited_only),	VT_CASE(shared_channel),
	VT_CASE(ack_then_destroy),	VT_CASE(destroy_waits_for_ack),
	VT_CASE(async_cq_overrun),	VT_CASE(async_nonblock),
	VT_CASE(async_comm_est),	VT_CASE(wait_interrupted_by_signal),
	VT_CASE(one_completion_per_event), VT_CASE(verbs_are_no_cancellation_points),
};
VT_MAIN(cases)
