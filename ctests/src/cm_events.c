/*
 * cm_events: conformance cases for librdmacm's connection manager, run over
 * loopback (127.0.0.1, and ::1 when the host has it).
 *
 *   cm_events [case...]      run the named cases (default: all)
 *   cm_events -l             list the cases
 *
 * Each case runs in a child process of its own, forked before any librdmacm
 * call, with an alarm as a backstop; the parent prints "ok <case>" or
 * "FAIL <case>" and exits 0 only if every case passed. Cases that need two
 * processes (a peer that gets killed) fork again before touching the
 * library. Every wait is bounded: events are waited for with poll() on the
 * channel's descriptor, completions by polling the CQ against a deadline.
 *
 * What is asserted comes from the rdma_cm documentation (rdma_get_cm_event,
 * rdma_connect, rdma_accept, rdma_reject, rdma_disconnect, ...) and from how
 * the IB CM presents private data over RoCE: a connect request always shows
 * the 56-byte private data area, an accept 196 bytes and a reject 148,
 * zero-padded past what the peer sent.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#define EVENT_MS 5000		/* longest wait for one expected CM event */
#define CASE_SECONDS 30		/* backstop for one case */
#define REQ_PDATA 56
#define REP_PDATA 196
#define REJ_PDATA 148

#include "common/cm_util.c"

/* The address the cases connect over: 127.0.0.1, or CM_EVENTS_ADDR (an
 * IPv4 address a kernel RDMA device owns, to run the cases over the
 * kernel's RDMA CM: ctests/vm compares Debian's librdmacm and ours there). */
static const char *test_addr(void)
{
	const char *a = getenv("CM_EVENTS_ADDR");

	return a && *a ? a : "127.0.0.1";
}

/* The test address, host order. */
static uint32_t test_ip(void)
{
	struct in_addr in;

	CHECK(inet_pton(AF_INET, test_addr(), &in) == 1);
	return ntohl(in.s_addr);
}

static struct sockaddr_in loop4(uint16_t port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	sin.sin_addr.s_addr = htonl(test_ip());
	return sin;
}

/* A plain TCP listener (no CM behind it) on 127.0.0.1 and a port the
 * kernel picks, stored in `port`. */
static int tcp_listen_loop(int backlog, uint16_t *port)
{
	struct sockaddr_in sin = loop4(0);
	socklen_t len = sizeof(sin);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(s >= 0);
	CHECK_OK(bind(s, (struct sockaddr *)&sin, sizeof(sin)));
	CHECK_OK(listen(s, backlog));
	CHECK_OK(getsockname(s, (struct sockaddr *)&sin, &len));
	*port = ntohs(sin.sin_port);
	return s;
}

/* A listener on 127.0.0.1 and a port the CM picks; returns the port. */
static uint16_t listen_loop(struct rdma_event_channel *ch, struct rdma_cm_id **lid, void *ctx)
{
	struct sockaddr_in sin = loop4(0);
	uint16_t port;

	CHECK_OK(rdma_create_id(ch, lid, ctx, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(*lid, (struct sockaddr *)&sin));
	port = ntohs(rdma_get_src_port(*lid));
	CHECK(port != 0);
	CHECK_OK(rdma_listen(*lid, 8));
	return port;
}

/* An id with address and route resolved towards 127.0.0.1:port. */
static struct rdma_cm_id *client_route(struct rdma_event_channel *ch, uint16_t port)
{
	struct sockaddr_in dst = loop4(port);
	struct rdma_cm_id *id;

	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(id->verbs != NULL);
	CHECK_EQ(id->port_num, 1);
	CHECK_OK(rdma_resolve_route(id, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

/* ---- verbs helpers --------------------------------------------------------- */

struct qpres {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	char *buf;
	struct ibv_mr *mr;
};

static void make_qp(struct rdma_cm_id *id, struct qpres *r)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	CHECK(id->verbs != NULL);
	r->pd = ibv_alloc_pd(id->verbs);
	CHECK(r->pd);
	r->cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0);
	CHECK(r->cq);
	r->buf = calloc(1, 4096);
	CHECK(r->buf);
	r->mr = ibv_reg_mr(r->pd, r->buf, 4096,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ);
	CHECK(r->mr);
	attr.send_cq = r->cq;
	attr.recv_cq = r->cq;
	attr.cap.max_send_wr = 8;
	attr.cap.max_recv_wr = 8;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	CHECK_OK(rdma_create_qp(id, r->pd, &attr));
	CHECK(id->qp != NULL);
}

/* Posts `n` receives with wr_id 100, 101, ... (possible right after create). */
static void post_recvs(struct rdma_cm_id *id, struct qpres *r, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)(r->buf + 64 * i), .length = 64, .lkey = r->mr->lkey,
		};
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad;

		CHECK_OK(ibv_post_recv(id->qp, &wr, &bad));
	}
}

/* One completion within `ms`, polling the CQ. */
static int poll_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long long end = now_ms() + ms;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		CHECK(n >= 0);
		if (n == 1)
			return 1;
		if (now_ms() > end)
			return 0;
		usleep(1000);
	}
}

/* The `n` receives posted by post_recvs completed with IBV_WC_WR_FLUSH_ERR. */
static void expect_flushed(struct ibv_cq *cq, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc;

		if (!poll_wc(cq, &wc, EVENT_MS))
			failf(__LINE__, "receive %d was not flushed", i);
		CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(wc.wr_id, 100 + i);
	}
}

static void free_qp(struct rdma_cm_id *id, struct qpres *r)
{
	rdma_destroy_qp(id);
	CHECK_OK(ibv_dereg_mr(r->mr));
	free(r->buf);
	CHECK_OK(ibv_destroy_cq(r->cq));
	CHECK_OK(ibv_dealloc_pd(r->pd));
}

/* ---- a connected pair in one process -------------------------------------- */

struct pair {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *lid, *sid, *cid;
	struct qpres sr, cr;
	uint16_t port;
};

static void pair_connect(struct pair *p, int with_qp)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;

	memset(p, 0, sizeof(*p));
	p->sch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	CHECK(p->sch && p->cch);
	p->port = listen_loop(p->sch, &p->lid, NULL);
	p->cid = client_route(p->cch, p->port);
	if (with_qp)
		make_qp(p->cid, &p->cr);
	else
		cp.qp_num = 0x1234;
	CHECK_OK(rdma_connect(p->cid, &cp));
	ev = expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	p->sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	if (with_qp)
		make_qp(p->sid, &p->sr);
	else
		cp.qp_num = 0x5678;
	CHECK_OK(rdma_accept(p->sid, &cp));
	if (with_qp) {
		expect_ack(p->cch, RDMA_CM_EVENT_ESTABLISHED);
	} else {
		expect_ack(p->cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
		CHECK_OK(rdma_establish(p->cid));
	}
	expect_ack(p->sch, RDMA_CM_EVENT_ESTABLISHED);
}

static void pair_destroy(struct pair *p, int with_qp)
{
	if (with_qp) {
		free_qp(p->sid, &p->sr);
		free_qp(p->cid, &p->cr);
	}
	CHECK_OK(rdma_destroy_id(p->sid));
	CHECK_OK(rdma_destroy_id(p->cid));
	CHECK_OK(rdma_destroy_id(p->lid));
	rdma_destroy_event_channel(p->sch);
	rdma_destroy_event_channel(p->cch);
}

/* ---- cases --------------------------------------------------------------- */

static void case_event_strings(void)
{
	static const char *names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	for (int i = 0; i < 16; i++) {
		const char *s = rdma_event_str((enum rdma_cm_event_type)i);

		if (!s || strcmp(s, names[i]))
			failf(__LINE__, "event %d is \"%s\", expected \"%s\"", i, s ? s : "(null)",
			      names[i]);
	}
	CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)16), "UNKNOWN EVENT"));
	CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)-1), "UNKNOWN EVENT"));
}

/* O_NONBLOCK on channel->fd: EAGAIN instead of blocking, and poll() works. */
static void case_nonblocking_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = loop4(9);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct pollfd pfd;
	int fl;

	CHECK(ch);
	CHECK(ch->fd >= 0);
	fl = fcntl(ch->fd, F_GETFL);
	CHECK(fl >= 0);
	CHECK_OK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK));
	CHECK_ERR(rdma_get_cm_event(ch, &ev), EAGAIN);
	CHECK(channel_quiet(ch, 50));

	CHECK_OK(rdma_create_id(ch, &id, (void *)0x77, RDMA_PS_TCP));
	CHECK(id->channel == ch);
	CHECK(id->context == (void *)0x77);
	CHECK_EQ(id->ps, RDMA_PS_TCP);
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	CHECK_EQ(poll(&pfd, 1, EVENT_MS), 1);
	CHECK(pfd.revents & POLLIN);
	CHECK_OK(rdma_get_cm_event(ch, &ev));
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_EQ(ev->status, 0);
	CHECK(ev->id == id);
	CHECK(ev->listen_id == NULL);
	/* Nothing else is pending: the descriptor is quiet and EAGAIN again. */
	CHECK(channel_quiet(ch, 50));
	CHECK_ERR(rdma_get_cm_event(ch, &ev), EAGAIN);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* Calls made in the wrong state, or with bad arguments. */
static void case_wrong_state(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct sockaddr_in sin = loop4(0);
	struct ibv_qp_init_attr qattr;
	struct ibv_qp_attr qpa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *id2, *sync_id;
	uint8_t tos = 0, pdata[64] = { 0 };
	int mask, one = 1;

	CHECK(ch);
	CHECK_ERR(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	CHECK_ERR(rdma_create_id(ch, &id, NULL, 0x999), EINVAL);	/* no such port space */
	CHECK_ERR(rdma_get_cm_event(ch, NULL), EINVAL);
	CHECK_ERR(rdma_ack_cm_event(NULL), EINVAL);

	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	/* Nothing resolved, nothing bound: */
	CHECK_ERR(rdma_resolve_route(id, 1000), EINVAL);
	CHECK_ERR(rdma_connect(id, &cp), EINVAL);
	CHECK_ERR(rdma_accept(id, &cp), EINVAL);
	CHECK_ERR(rdma_reject(id, NULL, 0), EINVAL);
	CHECK_ERR(rdma_disconnect(id), EINVAL);
	CHECK_ERR(rdma_establish(id), EINVAL);
	CHECK_ERR(rdma_bind_addr(id, NULL), EINVAL);
	CHECK_ERR(rdma_resolve_addr(id, NULL, NULL, 1000), EINVAL);
	memset(&qattr, 0, sizeof(qattr));
	qattr.qp_type = IBV_QPT_RC;
	CHECK_ERR(rdma_create_qp(id, NULL, &qattr), EINVAL);
	qpa.qp_state = IBV_QPS_RTR;
	CHECK_ERR(rdma_init_qp_attr(id, &qpa, &mask), EINVAL);
	CHECK_ERR(rdma_get_request(id, &id2), EINVAL);	/* not a synchronous id */
	CHECK_ERR(rdma_notify(id, IBV_EVENT_COMM_EST), EINVAL);

	/* Options. */
	CHECK_ERR(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4), EINVAL);
	CHECK_OK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	CHECK_OK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)));
	CHECK_ERR(rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof(one)), ENOSYS);
	CHECK_ERR(rdma_set_option(id, 99, 0, &one, sizeof(one)), ENOSYS);

	/* Bound, then bound again; listening, then listening again. */
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&sin));
	CHECK_ERR(rdma_bind_addr(id, (struct sockaddr *)&sin), EINVAL);
	CHECK_OK(rdma_listen(id, 4));
	CHECK_ERR(rdma_listen(id, 4), EINVAL);
	CHECK_ERR(rdma_accept(id, &cp), EINVAL);
	CHECK_ERR(rdma_connect(id, &cp), EINVAL);
	CHECK_ERR(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 1000), EINVAL);
	CHECK_ERR(rdma_disconnect(id), EINVAL);

	/* Private data over the REQ limit; parameters checked before sending. */
	id2 = client_route(ch, ntohs(rdma_get_src_port(id)));
	cp.private_data = pdata;
	cp.private_data_len = REQ_PDATA + 1;
	CHECK_ERR(rdma_connect(id2, &cp), EINVAL);
	CHECK_ERR(rdma_connect(id2, NULL), EINVAL);	/* no QP and no parameters */
	qpa.qp_state = IBV_QPS_RTR;
	CHECK_ERR(rdma_init_qp_attr(id2, &qpa, &mask), EINVAL);	/* no peer yet */
	CHECK_OK(rdma_destroy_id(id2));

	/* A synchronous id cannot migrate to "no channel" again. */
	CHECK_OK(rdma_create_id(NULL, &sync_id, NULL, RDMA_PS_TCP));
	CHECK(sync_id->channel != NULL);
	CHECK_ERR(rdma_migrate_id(sync_id, NULL), EINVAL);
	CHECK_OK(rdma_destroy_id(sync_id));

	/* Nothing was queued by any failed call. */
	CHECK(channel_quiet(ch, 50));
	(void)ev;
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

static void fill(uint8_t *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + 7 * i);
}

static void check_pdata(int line, const struct rdma_conn_param *c, int area,
			const uint8_t *sent, int sent_len)
{
	const uint8_t *got = c->private_data;

	if (c->private_data_len != area)
		failf(line, "private_data_len %d, expected %d", c->private_data_len, area);
	if (!got)
		failf(line, "private_data is NULL");
	for (int i = 0; i < area; i++) {
		uint8_t want = i < sent_len ? sent[i] : 0;

		if (got[i] != want)
			failf(line, "private data byte %d is %d, expected %d", i, got[i], want);
	}
}

/*
 * Private data and parameters with connect and accept (no QPs: the active
 * side gets CONNECT_RESPONSE and calls rdma_establish).
 */
static void case_pdata_connect_accept(void)
{
	int lens[] = { 10, REQ_PDATA };

	for (unsigned t = 0; t < 2; t++) {
		struct rdma_event_channel *sch = rdma_create_event_channel();
		struct rdma_event_channel *cch = rdma_create_event_channel();
		uint8_t req[REQ_PDATA], rep[REP_PDATA + 1];
		struct rdma_conn_param cp = { 0 }, ap = { 0 };
		struct rdma_cm_id *lid, *cid, *sid;
		struct rdma_cm_event *ev;
		uint16_t port;

		CHECK(sch && cch);
		port = listen_loop(sch, &lid, (void *)0x5eed);
		cid = client_route(cch, port);
		fill(req, sizeof(req), 3 + t);
		cp.private_data = req;
		cp.private_data_len = lens[t];
		cp.responder_resources = 2;
		cp.initiator_depth = 3;
		cp.flow_control = 1;
		cp.retry_count = 5;
		cp.rnr_retry_count = 6;
		cp.srq = 1;
		cp.qp_num = 0xabcde;
		CHECK_OK(rdma_connect(cid, &cp));

		ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK_EQ(ev->status, 0);
		CHECK(ev->listen_id == lid);
		CHECK(ev->id != NULL && ev->id != lid);
		sid = ev->id;
		check_pdata(__LINE__, &ev->param.conn, REQ_PDATA, req, lens[t]);
		/* Each side's view is the peer's, mirrored. */
		CHECK_EQ(ev->param.conn.responder_resources, 3);
		CHECK_EQ(ev->param.conn.initiator_depth, 2);
		CHECK_EQ(ev->param.conn.flow_control, 1);
		CHECK_EQ(ev->param.conn.retry_count, 5);
		CHECK_EQ(ev->param.conn.rnr_retry_count, 6);
		CHECK_EQ(ev->param.conn.srq, 1);
		CHECK_EQ(ev->param.conn.qp_num, 0xabcde);
		CHECK(sid->verbs == cid->verbs);
		CHECK(sid->channel == sch);
		CHECK(sid->context == (void *)0x5eed);
		CHECK_EQ(sid->ps, RDMA_PS_TCP);
		CHECK_OK(rdma_ack_cm_event(ev));

		fill(rep, sizeof(rep), 100 + t);
		ap.private_data = rep;
		ap.private_data_len = REP_PDATA + 1;
		ap.qp_num = 0x54321;
		CHECK_ERR(rdma_accept(sid, &ap), EINVAL);
		ap.private_data_len = REP_PDATA;
		ap.responder_resources = 3;
		ap.initiator_depth = 2;
		ap.rnr_retry_count = 4;
		CHECK_OK(rdma_accept(sid, &ap));
		CHECK_ERR(rdma_accept(sid, &ap), EINVAL);

		ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
		CHECK(ev->id == cid);
		CHECK_EQ(ev->status, 0);
		check_pdata(__LINE__, &ev->param.conn, REP_PDATA, rep, REP_PDATA);
		CHECK_EQ(ev->param.conn.responder_resources, 2);
		CHECK_EQ(ev->param.conn.initiator_depth, 3);
		CHECK_EQ(ev->param.conn.rnr_retry_count, 4);
		CHECK_EQ(ev->param.conn.qp_num, 0x54321);
		CHECK_OK(rdma_ack_cm_event(ev));
		CHECK(channel_quiet(sch, 50));	/* no RTU before rdma_establish */
		CHECK_OK(rdma_establish(cid));
		CHECK_ERR(rdma_establish(cid), EINVAL);

		ev = expect(sch, RDMA_CM_EVENT_ESTABLISHED);
		CHECK(ev->id == sid);
		CHECK(ev->listen_id == NULL);
		CHECK_EQ(ev->param.conn.private_data_len, 0);
		CHECK_OK(rdma_ack_cm_event(ev));
		CHECK(channel_quiet(cch, 50));

		CHECK_OK(rdma_destroy_id(cid));
		expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
		CHECK_OK(rdma_destroy_id(sid));
		CHECK_OK(rdma_destroy_id(lid));
		rdma_destroy_event_channel(sch);
		rdma_destroy_event_channel(cch);
	}
}

/* ECE without QPs (a QP's own ECE would replace the one set): the REQ
 * carries the client's vendor and options, the REP the vendor the request
 * named with the server's options; each side reads the peer's from its id
 * until it has a QP. */
static void case_ece(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { 0 }, ap = { 0 };
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	struct ibv_ece ece;
	uint16_t port;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	cid = client_route(cch, port);
	memset(&ece, 0xff, sizeof(ece));
	CHECK_OK(rdma_get_remote_ece(cid, &ece));
	CHECK_EQ(ece.vendor_id, 0);
	CHECK_EQ(ece.options, 0);
	CHECK_EQ(ece.comp_mask, 0);
	ece.vendor_id = 0x15b3;
	ece.options = 0x12345678;
	ece.comp_mask = 1;
	CHECK_ERR(rdma_set_local_ece(cid, &ece), EINVAL);	/* comp_mask */
	ece.comp_mask = 0;
	CHECK_OK(rdma_set_local_ece(cid, &ece));
	cp.qp_num = 0x1234;
	CHECK_OK(rdma_connect(cid, &cp));

	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	memset(&ece, 0, sizeof(ece));
	CHECK_OK(rdma_get_remote_ece(sid, &ece));
	CHECK_EQ(ece.vendor_id, 0x15b3);
	CHECK_EQ(ece.options, 0x12345678);
	ece.vendor_id = 0x8086;	/* the REP names the request's vendor */
	ece.options = 0x34;
	CHECK_OK(rdma_set_local_ece(sid, &ece));
	ap.qp_num = 0x4321;
	CHECK_OK(rdma_accept(sid, &ap));

	ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_OK(rdma_ack_cm_event(ev));
	memset(&ece, 0, sizeof(ece));
	CHECK_OK(rdma_get_remote_ece(cid, &ece));
	CHECK_EQ(ece.vendor_id, 0x15b3);
	CHECK_EQ(ece.options, 0x34);
	CHECK_OK(rdma_establish(cid));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);

	CHECK_OK(rdma_destroy_id(cid));
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* An id bound to the wildcard address keeps its port and takes the device
 * the route to the peer goes through: the source becomes that address, and
 * the connection works (over the kernel's CM on a kernel device). */
static void case_bind_any(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 0x1234 };
	struct sockaddr_in any, dst;
	struct sockaddr_in *src;
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	uint16_t port, cport;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	CHECK_OK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP));
	memset(&any, 0, sizeof(any));
	any.sin_family = AF_INET;
	CHECK_OK(rdma_bind_addr(cid, (struct sockaddr *)&any));
	cport = ntohs(rdma_get_src_port(cid));
	CHECK(cport != 0);
	CHECK(cport != port);
	dst = loop4(port);
	CHECK_OK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&dst, 2000));
	expect_ack(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(cid->verbs != NULL);
	src = (struct sockaddr_in *)rdma_get_local_addr(cid);
	CHECK_EQ(src->sin_family, AF_INET);
	CHECK_EQ(ntohl(src->sin_addr.s_addr), test_ip());
	CHECK_EQ(ntohs(src->sin_port), cport);
	CHECK_OK(rdma_resolve_route(cid, 2000));
	expect_ack(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_OK(rdma_connect(cid, &cp));

	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_EQ(ev->param.conn.qp_num, 0x1234);
	CHECK_EQ(ntohs(rdma_get_dst_port(sid)), cport);
	CHECK_OK(rdma_ack_cm_event(ev));
	cp.qp_num = 0x4321;
	CHECK_OK(rdma_accept(sid, &cp));
	ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_EQ(ev->param.conn.qp_num, 0x4321);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_establish(cid));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);

	CHECK_OK(rdma_destroy_id(cid));
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* A QP's own ECE replaces what was set before rdma_create_qp (rdma-core's
 * init_ece): the request carries what ibv_query_ece reports for the QP
 * (nothing where the provider has no ECE: EOPNOTSUPP, as rxe), and an id
 * with a QP no longer shows the peer's (EINVAL). */
static void case_ece_qp(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	struct ibv_ece ece, own;
	struct qpres cr, sr;
	uint16_t port;
	int rc;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	cid = client_route(cch, port);
	ece.vendor_id = 0x15b3;
	ece.options = 0x12345678;
	ece.comp_mask = 0;
	CHECK_OK(rdma_set_local_ece(cid, &ece));
	make_qp(cid, &cr);
	memset(&own, 0xee, sizeof(own));
	rc = ibv_query_ece(cid->qp, &own);
	CHECK(rc == 0 || rc == EOPNOTSUPP);
	if (rc)
		memset(&own, 0, sizeof(own));
	CHECK(own.vendor_id != 0x15b3 || own.options != 0x12345678);
	CHECK_ERR(rdma_get_remote_ece(cid, &ece), EINVAL);
	CHECK_OK(rdma_connect(cid, &cp));

	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	memset(&ece, 0xff, sizeof(ece));
	CHECK_OK(rdma_get_remote_ece(sid, &ece));
	CHECK_EQ(ece.vendor_id, own.vendor_id);
	CHECK_EQ(ece.options, own.options);
	CHECK_EQ(ece.comp_mask, 0);
	make_qp(sid, &sr);
	CHECK_ERR(rdma_get_remote_ece(sid, &ece), EINVAL);
	CHECK_OK(rdma_accept(sid, &cp));
	expect_ack(cch, RDMA_CM_EVENT_ESTABLISHED);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);

	free_qp(cid, &cr);
	CHECK_OK(rdma_destroy_id(cid));
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	free_qp(sid, &sr);
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* rdma_reject: REJECTED with status 28 (consumer defined) and its data. */
static void case_pdata_reject(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	int lens[] = { REJ_PDATA, 3 };
	struct rdma_cm_id *lid;
	uint16_t port;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	for (unsigned t = 0; t < 2; t++) {
		struct rdma_conn_param cp = { .qp_num = 7 };
		uint8_t rej[REJ_PDATA + 1];
		struct rdma_cm_id *cid, *sid;
		struct rdma_cm_event *ev;

		cid = client_route(cch, port);
		CHECK_OK(rdma_connect(cid, &cp));
		ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
		sid = ev->id;
		CHECK_OK(rdma_ack_cm_event(ev));
		fill(rej, sizeof(rej), 50 + t);
		CHECK_ERR(rdma_reject(sid, rej, REJ_PDATA + 1), EINVAL);
		CHECK_OK(rdma_reject(sid, rej, lens[t]));
		CHECK_ERR(rdma_reject(sid, rej, lens[t]), EINVAL);
		CHECK_ERR(rdma_accept(sid, &cp), EINVAL);

		ev = expect(cch, RDMA_CM_EVENT_REJECTED);
		CHECK(ev->id == cid);
		CHECK_EQ(ev->status, 28);
		check_pdata(__LINE__, &ev->param.conn, REJ_PDATA, rej, lens[t]);
		CHECK_OK(rdma_ack_cm_event(ev));
		CHECK(channel_quiet(sch, 50));
		CHECK_OK(rdma_destroy_id(sid));
		CHECK_OK(rdma_destroy_id(cid));
	}
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* A port where nobody listens: REJECTED, status 8 (invalid service ID). */
static void case_closed_port(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct sockaddr_in sin = loop4(0);
	struct rdma_cm_id *tmp, *cid;
	struct rdma_cm_event *ev;
	uint16_t port;

	CHECK(ch);
	/* A port that was free a moment ago and is free again now. */
	CHECK_OK(rdma_create_id(ch, &tmp, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(tmp, (struct sockaddr *)&sin));
	port = ntohs(rdma_get_src_port(tmp));
	CHECK_OK(rdma_destroy_id(tmp));

	cid = client_route(ch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->id == cid);
	CHECK_EQ(ev->status, 8);
	check_pdata(__LINE__, &ev->param.conn, REJ_PDATA, NULL, 0);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_disconnect(cid));	/* harmless after a reject */
	CHECK(channel_quiet(ch, 100));
	CHECK_OK(rdma_destroy_id(cid));
	rdma_destroy_event_channel(ch);
}

/*
 * A listener that starts just after the connect (a peer that agreed out of
 * band to listen, as perftest -R does): the refused connect is retried and
 * the connection is made instead of a REJECTED.
 */
static void case_listen_late(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct rdma_cm_id *tmp, *lid, *cid, *sid;
	struct sockaddr_in sin = loop4(0);
	struct rdma_cm_event *ev;
	long long t0;
	uint16_t port;

	CHECK(sch && cch);
	CHECK_OK(rdma_create_id(sch, &tmp, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(tmp, (struct sockaddr *)&sin));
	port = ntohs(rdma_get_src_port(tmp));
	CHECK_OK(rdma_destroy_id(tmp));

	cid = client_route(cch, port);
	t0 = now_ms();
	CHECK_OK(rdma_connect(cid, &cp));
	/* Nobody listens yet: nothing may be reported while retrying. */
	CHECK(channel_quiet(cch, 20));

	sin = loop4(port);
	CHECK_OK(rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(lid, (struct sockaddr *)&sin));
	CHECK_OK(rdma_listen(lid, 4));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK(now_ms() - t0 < 2000);
	CHECK_OK(rdma_accept(sid, &cp));
	ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(ev->id == cid);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_establish(cid));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);

	CHECK_OK(rdma_disconnect(cid));
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED);
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* The listener destroys the new id instead of answering: REJECTED 28. */
static void case_reject_by_destroy(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	uint16_t port;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	cid = client_route(cch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(sid));
	ev = expect(cch, RDMA_CM_EVENT_REJECTED);
	CHECK_EQ(ev->status, 28);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* Nobody answers the connect: UNREACHABLE with -ETIMEDOUT. */
static void case_unreachable(void)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *cid;
	uint16_t port;
	long long t0;
	int s;

	/* A plain TCP listener that never speaks: the handshake completes in
	 * the kernel, but no CM answers the REQ. The CM response timeout is
	 * shortened to one second for this test. */
	setenv("RDMACM_RS_TIMEOUT_MS", "1000", 1);
	s = tcp_listen_loop(4, &port);

	ch = rdma_create_event_channel();
	CHECK(ch);
	cid = client_route(ch, port);
	t0 = now_ms();
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, -ETIMEDOUT);
	CHECK(now_ms() - t0 >= 900);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	rdma_destroy_event_channel(ch);
	close(s);
}

/* ---- strangers on the CM port ---------------------------------------------- */

/*
 * The frame header of our CM's own protocol (librdmacm-rs, src/wire.rs):
 * "RSCM", version 1, message kind, two zero bytes, body length as a
 * little-endian u32. Kind 1 is a REQ (35 fixed bytes, the last one the
 * private data length), kind 4 an RTU.
 */
static size_t cm_header(uint8_t *b, uint8_t kind, uint32_t len)
{
	memcpy(b, "RSCM", 4);
	b[4] = 1;
	b[5] = kind;
	b[6] = b[7] = 0;
	for (int i = 0; i < 4; i++)
		b[8 + i] = len >> (8 * i);
	return 12;
}

/* A plain TCP connection to 127.0.0.1:port that has sent `len` bytes. */
static int raw_send(uint16_t port, const void *buf, size_t len)
{
	struct sockaddr_in sin = loop4(port);
	int s = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(s >= 0);
	CHECK_OK(connect(s, (struct sockaddr *)&sin, sizeof(sin)));
	if (len)
		CHECK(send(s, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
	return s;
}

/* The CM closes a connection that spoke garbage, within EVENT_MS and
 * without answering it; closes our end. */
static void expect_dropped_at(int line, int s)
{
	long long end = now_ms() + EVENT_MS;
	char buf[256];

	for (;;) {
		struct pollfd pfd = { .fd = s, .events = POLLIN };
		int left = (int)(end - now_ms());
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, left) != 1)
			failf(line, "the CM kept a connection that sent garbage");
		n = recv(s, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			break;
		if (n > 0)
			failf(line, "the CM answered garbage with %zd bytes", n);
	}
	close(s);
}
#define expect_dropped(s) expect_dropped_at(__LINE__, s)

/*
 * Strangers connect to a listener's port and send what no CM sends: text,
 * an unknown message kind, absurd lengths, a REQ whose private data length
 * disagrees with its body, an RTU instead of a REQ, truncated frames, a
 * stream of junk. Each connection is dropped, no event reaches the
 * application, and a real connection to the same listener then works,
 * while another stranger sits silent on a half-sent header.
 */
static void case_garbage_on_listen_port(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	uint8_t b[64 + 35];
	size_t n;
	uint16_t port;
	int s, silent;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);

	expect_dropped(raw_send(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27));
	n = cm_header(b, 99, 0);
	expect_dropped(raw_send(port, b, n));
	n = cm_header(b, 1, 0xffffffffu);
	expect_dropped(raw_send(port, b, n));
	n = cm_header(b, 1, 35);
	memset(b + n, 0, 35);
	b[n + 34] = 200;	/* private data length beyond the body */
	expect_dropped(raw_send(port, b, n + 35));
	n = cm_header(b, 4, 0);
	expect_dropped(raw_send(port, b, n));
	b[4] = 9;		/* a version we do not speak */
	expect_dropped(raw_send(port, b, n));

	/* Truncated frames, then end of stream. */
	n = cm_header(b, 1, 35);
	s = raw_send(port, b, n + 10);
	CHECK_OK(shutdown(s, SHUT_WR));
	expect_dropped(s);
	s = raw_send(port, "RSC", 3);
	CHECK_OK(shutdown(s, SHUT_WR));
	expect_dropped(s);

	/* A stream of junk behind a plausible header: the CM stops reading at
	 * the first bad frame, so our writes end in an error or the CM's close. */
	{
		static uint8_t junk[1 << 16];

		memset(junk, 0xa5, sizeof(junk));
		cm_header(junk, 1, 1024);
		s = raw_send(port, NULL, 0);
		CHECK_OK(fcntl(s, F_SETFL, O_NONBLOCK));
		for (int i = 0; i < 64; i++) {
			struct pollfd pfd = { .fd = s, .events = POLLOUT };

			if (poll(&pfd, 1, EVENT_MS) != 1 ||
			    send(s, junk, sizeof(junk), MSG_NOSIGNAL) < 0)
				break;
		}
		CHECK_OK(fcntl(s, F_SETFL, 0));
		expect_dropped(s);
	}

	/* Silent on a half header: must not hold up anybody else. */
	silent = raw_send(port, "RSCM", 4);
	CHECK(channel_quiet(sch, 200));

	cid = client_route(cch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK(ev->listen_id == lid);
	CHECK_OK(rdma_ack_cm_event(ev));
	cp.qp_num = 2;
	CHECK_OK(rdma_accept(sid, &cp));
	expect_ack(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_OK(rdma_establish(cid));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_OK(rdma_disconnect(cid));
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED);
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	close(silent);
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(cid));
	CHECK(channel_quiet(sch, 100));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/*
 * A peer that acknowledges the REQ (MRA) over and over but never answers
 * it: only the first MRA extends the wait (to six times the base timeout,
 * shortened here to 200 ms), so the connect still ends in UNREACHABLE.
 */
static void case_repeated_mra(void)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *cid;
	struct pollfd pfd;
	uint8_t mra[12], req[512];
	uint16_t port;
	long long t0;
	int s, c;

	setenv("RDMACM_RS_TIMEOUT_MS", "200", 1);
	s = tcp_listen_loop(4, &port);
	cm_header(mra, 2, 0);

	ch = rdma_create_event_channel();
	CHECK(ch);
	cid = client_route(ch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	c = accept(s, NULL, NULL);
	CHECK(c >= 0);
	pfd = (struct pollfd){ .fd = c, .events = POLLIN };
	CHECK(poll(&pfd, 1, EVENT_MS) == 1);
	CHECK(recv(c, req, sizeof(req), 0) > 12);	/* the REQ */
	t0 = now_ms();
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	while (now_ms() - t0 < 5000 && poll(&pfd, 1, 100) == 0)
		CHECK(send(c, mra, sizeof(mra), MSG_NOSIGNAL) == sizeof(mra));
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, -ETIMEDOUT);
	if (now_ms() - t0 > 3000)
		failf(__LINE__, "UNREACHABLE only after %lld ms of MRAs", now_ms() - t0);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	rdma_destroy_event_channel(ch);
	close(c);
	close(s);
}

/*
 * rdma_disconnect while the CM's TCP connection is still being set up (the
 * listener's accept queue is full, so our SYN goes unanswered): the REQ
 * must never reach the listener later, when room frees up and the SYN is
 * retransmitted.
 */
static void case_disconnect_while_connecting(void)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct sockaddr_in sin;
	struct rdma_cm_id *cid;
	struct pollfd pfd;
	uint16_t port;
	int s, c1, a1;

	s = tcp_listen_loop(0, &port);	/* room for one connection */
	sin = loop4(port);
	c1 = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(c1 >= 0);
	CHECK_OK(connect(c1, (struct sockaddr *)&sin, sizeof(sin)));

	ch = rdma_create_event_channel();
	CHECK(ch);
	cid = client_route(ch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	CHECK(channel_quiet(ch, 200));	/* still connecting */
	CHECK_OK(rdma_disconnect(cid));

	/* Make room; the kernel retransmits an unanswered SYN after 1 s. */
	a1 = accept(s, NULL, NULL);
	CHECK(a1 >= 0);
	pfd = (struct pollfd){ .fd = s, .events = POLLIN };
	if (poll(&pfd, 1, 2500) == 1) {
		int a2 = accept(s, NULL, NULL);
		char b[64];

		CHECK(a2 >= 0);
		pfd = (struct pollfd){ .fd = a2, .events = POLLIN };
		CHECK(poll(&pfd, 1, EVENT_MS) == 1);
		if (recv(a2, b, sizeof(b), 0) > 0)
			failf(__LINE__, "the REQ of a disconnected id reached the listener");
		close(a2);
	}
	CHECK(channel_quiet(ch, 100));
	CHECK_OK(rdma_destroy_id(cid));
	rdma_destroy_event_channel(ch);
	close(a1);
	close(c1);
	close(s);
}

/* CPU time this process used, in ms (every thread, the CM's included). */
static long long cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/*
 * A connection arrives while the process has no descriptor left: the CM
 * cannot accept it, must not spin on the still-readable listening socket
 * meanwhile, and accepts it once descriptors are free again.
 */
static void case_listen_out_of_fds(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid;
	struct rdma_cm_event *ev;
	struct sockaddr_in sin;
	struct rlimit old, low;
	static int held[4096];
	int nheld = 0, s;
	long long c0;
	uint16_t port;

	CHECK(ch);
	port = listen_loop(ch, &lid, NULL);
	sin = loop4(port);
	s = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0);

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &old));
	low = old;
	low.rlim_cur = 256;
	if (old.rlim_cur < low.rlim_cur)
		low.rlim_cur = old.rlim_cur;
	CHECK_OK(setrlimit(RLIMIT_NOFILE, &low));
	for (;;) {
		int fd = dup(0);

		if (fd < 0) {
			CHECK_EQ(errno, EMFILE);
			break;
		}
		CHECK(nheld < (int)(sizeof(held) / sizeof(held[0])));
		held[nheld++] = fd;
	}
	/* The kernel completes the handshake into the listener's backlog. */
	CHECK_OK(connect(s, (struct sockaddr *)&sin, sizeof(sin)));
	c0 = cpu_ms();
	usleep(500 * 1000);	/* a measurement interval, not a synchronisation */
	if (cpu_ms() - c0 > 50)
		failf(__LINE__, "%lld ms of CPU in 500 ms while accept could not succeed",
		      cpu_ms() - c0);
	while (nheld)
		close(held[--nheld]);
	CHECK_OK(setrlimit(RLIMIT_NOFILE, &old));

	/* Accepted now: as a stranger it is dropped; a real client gets in. */
	CHECK(send(s, "junk", 4, MSG_NOSIGNAL) == 4);
	expect_dropped(s);
	cid = client_route(ch, port);
	{
		struct rdma_conn_param cp = { .qp_num = 1 };

		CHECK_OK(rdma_connect(cid, &cp));
	}
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK_OK(rdma_reject(ev->id, NULL, 0));
	CHECK_OK(rdma_destroy_id(ev->id));
	CHECK_OK(rdma_ack_cm_event(ev));
	ev = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->id == cid);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

static void disconnect_case(int server_first)
{
	struct pair p;
	struct rdma_cm_id *first, *second;
	struct rdma_event_channel *fch, *sch2;
	struct rdma_cm_event *ev;

	pair_connect(&p, 1);
	post_recvs(p.cid, &p.cr, 2);
	post_recvs(p.sid, &p.sr, 2);
	first = server_first ? p.sid : p.cid;
	second = server_first ? p.cid : p.sid;
	fch = server_first ? p.sch : p.cch;
	sch2 = server_first ? p.cch : p.sch;

	CHECK_OK(rdma_disconnect(first));
	ev = expect(sch2, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == second);
	CHECK_EQ(ev->status, 0);
	CHECK_OK(rdma_ack_cm_event(ev));
	ev = expect(fch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == first);
	CHECK_EQ(ev->status, 0);
	CHECK_OK(rdma_ack_cm_event(ev));

	/* Both QPs are in the error state: the posted receives are flushed. */
	expect_flushed(p.cr.cq, 2);
	expect_flushed(p.sr.cq, 2);

	/* Answering the peer's disconnect, or disconnecting twice, is fine. */
	CHECK_OK(rdma_disconnect(second));
	CHECK_OK(rdma_disconnect(first));

	/* The QPs leave timewait on both sides, as the kernel's CM reports. */
	expect_ack(p.cch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
	expect_ack(p.sch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
	CHECK(channel_quiet(p.cch, 50) && channel_quiet(p.sch, 50));
	pair_destroy(&p, 1);
}

static void case_disconnect_client_first(void)
{
	disconnect_case(0);
}

static void case_disconnect_server_first(void)
{
	disconnect_case(1);
}

/* Data flows over the QPs the CM connected; both sides learn each other. */
static void case_qp_traffic(void)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct pair p;
	struct sockaddr_in *a;
	uint8_t *raw;

	pair_connect(&p, 1);
	post_recvs(p.sid, &p.sr, 1);

	/* The QPs are in RTS, peered with each other. */
	CHECK_OK(ibv_query_qp(p.cid->qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qa.dest_qp_num, p.sid->qp->qp_num);
	CHECK_OK(ibv_query_qp(p.sid->qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia));
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qa.dest_qp_num, p.cid->qp->qp_num);

	/* Ports and addresses agree on both ends. */
	CHECK_EQ(rdma_get_src_port(p.cid), rdma_get_dst_port(p.sid));
	CHECK_EQ(rdma_get_dst_port(p.cid), rdma_get_src_port(p.sid));
	CHECK_EQ(ntohs(rdma_get_src_port(p.sid)), p.port);
	a = (struct sockaddr_in *)rdma_get_local_addr(p.cid);
	CHECK_EQ(a->sin_family, AF_INET);
	CHECK_EQ(ntohl(a->sin_addr.s_addr), test_ip());
	a = (struct sockaddr_in *)rdma_get_peer_addr(p.sid);
	CHECK_EQ(a->sin_family, AF_INET);
	CHECK_EQ(ntohl(a->sin_addr.s_addr), test_ip());
	/* RoCE v2 GIDs: IPv4 as ::ffff:a.b.c.d. */
	raw = p.cid->route.addr.addr.ibaddr.sgid.raw;
	CHECK(raw[10] == 0xff && raw[11] == 0xff && raw[12] == test_ip() >> 24 &&
	      raw[15] == (test_ip() & 0xff));
	raw = p.sid->route.addr.addr.ibaddr.dgid.raw;
	CHECK(raw[10] == 0xff && raw[11] == 0xff && raw[12] == test_ip() >> 24 &&
	      raw[15] == (test_ip() & 0xff));

	/* A SEND from client to server. */
	memcpy(p.cr.buf + 1024, "hello over rdma_cm", 19);
	sge.addr = (uintptr_t)(p.cr.buf + 1024);
	sge.length = 19;
	sge.lkey = p.cr.mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 9;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	CHECK_OK(ibv_post_send(p.cid->qp, &wr, &bad));
	CHECK(poll_wc(p.cr.cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 9);
	CHECK(poll_wc(p.sr.cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 100);
	CHECK_EQ(wc.byte_len, 19);
	CHECK(!memcmp(p.sr.buf, "hello over rdma_cm", 19));

	/* An RDMA READ by the server of the client's buffer (rping does it). */
	memcpy(p.cr.buf + 2048, "readable", 9);
	sge.addr = (uintptr_t)(p.sr.buf + 2048);
	sge.length = 9;
	sge.lkey = p.sr.mr->lkey;
	wr.wr_id = 10;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)(p.cr.buf + 2048);
	wr.wr.rdma.rkey = p.cr.mr->rkey;
	CHECK_OK(ibv_post_send(p.sid->qp, &wr, &bad));
	CHECK(poll_wc(p.sr.cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 10);
	CHECK(!memcmp(p.sr.buf + 2048, "readable", 9));

	CHECK_OK(rdma_disconnect(p.cid));
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED);
	pair_destroy(&p, 1);
}

/* rdma_init_qp_attr on the passive side, before accepting. */
static void case_init_qp_attr(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 6, .rnr_retry_count = 5 };
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	struct qpres cr;
	uint16_t port;
	int mask;

	CHECK(sch && cch);
	port = listen_loop(sch, &lid, NULL);
	cid = client_route(cch, port);
	make_qp(cid, &cr);
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_EQ(ev->param.conn.qp_num, cid->qp->qp_num);
	CHECK_OK(rdma_ack_cm_event(ev));

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	CHECK_OK(rdma_init_qp_attr(sid, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	CHECK_EQ(qa.qp_state, IBV_QPS_INIT);
	CHECK_EQ(qa.port_num, 1);
	CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
	CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_READ);

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	CHECK_OK(rdma_init_qp_attr(sid, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	CHECK_EQ(qa.dest_qp_num, cid->qp->qp_num);
	CHECK_EQ(qa.ah_attr.is_global, 1);
	CHECK(!memcmp(qa.ah_attr.grh.dgid.raw, cid->route.addr.addr.ibaddr.sgid.raw, 16));
	CHECK_EQ(qa.ah_attr.port_num, 1);
	CHECK(qa.path_mtu >= IBV_MTU_256 && qa.path_mtu <= IBV_MTU_4096);
	CHECK_EQ(qa.max_dest_rd_atomic, 1);

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	CHECK_OK(rdma_init_qp_attr(sid, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	CHECK_EQ(qa.retry_cnt, 6);
	CHECK_EQ(qa.rnr_retry, 5);
	CHECK_EQ(qa.max_rd_atomic, 1);
	qa.qp_state = IBV_QPS_SQD;
	CHECK_ERR(rdma_init_qp_attr(sid, &qa, &mask), EINVAL);

	CHECK_OK(rdma_reject(sid, NULL, 0));
	expect_ack(cch, RDMA_CM_EVENT_REJECTED);
	CHECK_OK(rdma_destroy_id(sid));
	free_qp(cid, &cr);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* responder_resources / initiator_depth are bounded by the device. */
static void case_rd_atomic_limits(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct ibv_device_attr da;
	struct rdma_cm_id *lid, *cid;
	uint16_t port;

	CHECK(ch);
	port = listen_loop(ch, &lid, NULL);
	cid = client_route(ch, port);
	CHECK_OK(ibv_query_device(cid->verbs, &da));
	CHECK(da.max_qp_rd_atom < 255 && da.max_qp_init_rd_atom < 255);
	cp.responder_resources = da.max_qp_rd_atom + 1;
	CHECK_ERR(rdma_connect(cid, &cp), EINVAL);
	cp.responder_resources = 0;
	cp.initiator_depth = da.max_qp_init_rd_atom + 1;
	CHECK_ERR(rdma_connect(cid, &cp), EINVAL);
	/* 255 means "the device's maximum". */
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	CHECK_OK(rdma_connect(cid, &cp));
	{
		struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);

		CHECK_EQ(ev->param.conn.responder_resources, da.max_qp_init_rd_atom);
		CHECK_EQ(ev->param.conn.initiator_depth, da.max_qp_rd_atom);
		CHECK_OK(rdma_reject(ev->id, NULL, 0));
		CHECK_OK(rdma_destroy_id(ev->id));
		CHECK_OK(rdma_ack_cm_event(ev));
	}
	expect_ack(ch, RDMA_CM_EVENT_REJECTED);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

/* rdma_migrate_id moves an id and its pending events to another channel. */
static void case_migrate(void)
{
	struct rdma_event_channel *a = rdma_create_event_channel();
	struct rdma_event_channel *b = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .qp_num = 1 };
	struct sockaddr_in dst = loop4(9);
	struct rdma_cm_id *id, *lid, *cid;
	struct rdma_cm_event *ev;
	uint16_t port;

	CHECK(a && b && cch);
	CHECK_OK(rdma_create_id(a, &id, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	{
		struct pollfd pfd = { .fd = a->fd, .events = POLLIN };

		CHECK_EQ(poll(&pfd, 1, EVENT_MS), 1);	/* queued on a */
	}
	CHECK_OK(rdma_migrate_id(id, b));
	CHECK(id->channel == b);
	CHECK(channel_quiet(a, 50));
	ev = expect(b, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev->id == id);
	CHECK_OK(rdma_ack_cm_event(ev));
	/* Later events go to the new channel too. */
	CHECK_OK(rdma_resolve_route(id, 2000));
	expect_ack(b, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(channel_quiet(a, 50));
	CHECK_OK(rdma_destroy_id(id));

	/* A listener's pending connect request moves with it, and the new id
	 * it names belongs to the listener's new channel. */
	port = listen_loop(a, &lid, NULL);
	cid = client_route(cch, port);
	CHECK_OK(rdma_connect(cid, &cp));
	{
		struct pollfd pfd = { .fd = a->fd, .events = POLLIN };

		CHECK_EQ(poll(&pfd, 1, EVENT_MS), 1);
	}
	CHECK_OK(rdma_migrate_id(lid, b));
	CHECK(channel_quiet(a, 50));
	ev = expect(b, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == lid);
	CHECK(ev->id->channel == b);
	CHECK_OK(rdma_reject(ev->id, NULL, 0));
	CHECK_OK(rdma_destroy_id(ev->id));
	CHECK_OK(rdma_ack_cm_event(ev));
	expect_ack(cch, RDMA_CM_EVENT_REJECTED);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	rdma_destroy_event_channel(cch);
}

struct destroy_arg {
	struct rdma_cm_id *id;
	volatile int done;
};

static void *destroy_thread(void *p)
{
	struct destroy_arg *d = p;

	rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

/* rdma_destroy_id waits until the id's events have been acked. */
static void case_destroy_waits_for_ack(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = loop4(9);
	struct destroy_arg d = { 0 };
	struct rdma_cm_event *ev;
	pthread_t t;
	long long end;

	CHECK(ch);
	CHECK_OK(rdma_create_id(ch, &d.id, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_resolve_addr(d.id, NULL, (struct sockaddr *)&dst, 2000));
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_OK(pthread_create(&t, NULL, destroy_thread, &d));
	/* Still blocked a while later (the event is not acked yet)... */
	end = now_ms() + 300;
	while (now_ms() < end) {
		CHECK(!d.done);
		usleep(5000);
	}
	/* ...and free to go once it is. */
	CHECK_OK(rdma_ack_cm_event(ev));
	end = now_ms() + EVENT_MS;
	while (!d.done && now_ms() < end)
		usleep(1000);
	CHECK(d.done);
	CHECK_OK(pthread_join(t, NULL));
	CHECK(channel_quiet(ch, 20));
	rdma_destroy_event_channel(ch);
}

/* rdma_get_devices lists the shared contexts the ids use. */
static void case_devices(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = loop4(9);
	struct ibv_context **list;
	struct rdma_cm_id *id;
	int n = -1, found = 0;

	CHECK(ch);
	list = rdma_get_devices(&n);
	CHECK(list);
	CHECK(n >= 1);
	CHECK(list[n] == NULL);
	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK(id->verbs == NULL);
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	for (int i = 0; i < n; i++)
		found |= list[i] == id->verbs;
	CHECK(found);
	CHECK(id->pd != NULL);	/* the per-device default PD */
	rdma_free_devices(list);
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* Binding: port 0 picks a port; a wildcard bind has no device yet. */
static void case_bind(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in any, lo = loop4(0);
	struct sockaddr_in6 six;
	struct rdma_cm_id *a, *b, *c;
	int s6;

	CHECK(ch);
	memset(&any, 0, sizeof(any));
	any.sin_family = AF_INET;
	CHECK_OK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(a, (struct sockaddr *)&any));
	CHECK(rdma_get_src_port(a) != 0);
	CHECK(a->verbs == NULL);
	CHECK_OK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(b, (struct sockaddr *)&lo));
	CHECK(b->verbs != NULL);
	CHECK(rdma_get_src_port(b) != 0);
	CHECK(rdma_get_src_port(a) != rdma_get_src_port(b));
	CHECK_EQ(((struct sockaddr_in *)rdma_get_local_addr(b))->sin_addr.s_addr,
		 htonl(test_ip()));
	/* Listening on a port that is taken fails. */
	CHECK_OK(rdma_listen(b, 1));
	lo.sin_port = rdma_get_src_port(b);
	CHECK_OK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP));
	errno = 0;
	if (rdma_bind_addr(c, (struct sockaddr *)&lo) == 0)
		CHECK_ERR(rdma_listen(c, 1), EADDRINUSE);
	else
		CHECK_EQ(errno, EADDRINUSE);
	CHECK_OK(rdma_destroy_id(c));

	/* IPv6 loopback, where the host has it. */
	s6 = socket(AF_INET6, SOCK_STREAM, 0);
	memset(&six, 0, sizeof(six));
	six.sin6_family = AF_INET6;
	six.sin6_addr = in6addr_loopback;
	if (s6 >= 0 && bind(s6, (struct sockaddr *)&six, sizeof(six)) == 0) {
		CHECK_OK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP));
		CHECK_OK(rdma_bind_addr(c, (struct sockaddr *)&six));
		CHECK(c->verbs != NULL);
		CHECK_EQ(rdma_get_local_addr(c)->sa_family, AF_INET6);
		CHECK_OK(rdma_destroy_id(c));
	}
	if (s6 >= 0)
		close(s6);
	CHECK(channel_quiet(ch, 20));
	CHECK_OK(rdma_destroy_id(a));
	CHECK_OK(rdma_destroy_id(b));
	rdma_destroy_event_channel(ch);
}

/* IPv6: connect over ::1 when the host has it. */
static void case_ipv6(void)
{
	struct rdma_event_channel *sch, *cch;
	struct sockaddr_in6 six;
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_conn_param cp = { .qp_num = 3 };
	struct rdma_cm_event *ev;
	int s6 = socket(AF_INET6, SOCK_STREAM, 0);

	memset(&six, 0, sizeof(six));
	six.sin6_family = AF_INET6;
	six.sin6_addr = in6addr_loopback;
	if (s6 < 0 || bind(s6, (struct sockaddr *)&six, sizeof(six))) {
		printf("  (no IPv6 loopback here: nothing to check)\n");
		return;
	}
	close(s6);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	CHECK(sch && cch);
	CHECK_OK(rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(lid, (struct sockaddr *)&six));
	CHECK_OK(rdma_listen(lid, 2));
	six.sin6_port = rdma_get_src_port(lid);
	CHECK_OK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&six, 2000));
	expect_ack(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_OK(rdma_resolve_route(cid, 2000));
	expect_ack(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_OK(rdma_connect(cid, &cp));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_EQ(rdma_get_peer_addr(sid)->sa_family, AF_INET6);
	CHECK_EQ(ev->param.conn.qp_num, 3);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_accept(sid, &cp));
	expect_ack(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_OK(rdma_establish(cid));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_OK(rdma_disconnect(sid));
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED);
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* ---- synchronous mode (NULL channel): rdma_create_ep & co. --------------- */

struct sync_server {
	int port_pipe[2];
	int ok;
};

static void *sync_server_thread(void *p)
{
	struct sync_server *s = p;
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *lid, *sid;
	uint16_t port;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK_OK(rdma_getaddrinfo(test_addr(), "0", &hints, &res));
	CHECK(res->ai_src_addr != NULL);
	CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	CHECK_OK(rdma_create_ep(&lid, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	CHECK_OK(rdma_listen(lid, 1));
	port = ntohs(rdma_get_src_port(lid));
	CHECK(write(s->port_pipe[1], &port, sizeof(port)) == sizeof(port));

	CHECK_OK(rdma_get_request(lid, &sid));
	CHECK(sid->event != NULL);
	CHECK_EQ(sid->event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(sid->qp != NULL);		/* made from the endpoint's QP attributes */
	CHECK(sid->send_cq != NULL && sid->recv_cq != NULL);
	CHECK(sid->channel != lid->channel);
	CHECK_OK(rdma_accept(sid, NULL));
	CHECK_EQ(sid->event->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_OK(rdma_disconnect(sid));
	CHECK_EQ(sid->event->event, RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_ep(sid);
	rdma_destroy_ep(lid);
	s->ok = 1;
	return NULL;
}

static void case_sync_endpoints(void)
{
	struct sync_server s = { .ok = 0 };
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *cid, *tmp;
	struct pollfd pfd;
	char service[16];
	pthread_t t;
	uint16_t port;

	CHECK_OK(pipe(s.port_pipe));
	CHECK_OK(pthread_create(&t, NULL, sync_server_thread, &s));
	pfd.fd = s.port_pipe[0];
	pfd.events = POLLIN;
	CHECK_EQ(poll(&pfd, 1, EVENT_MS), 1);
	CHECK(read(s.port_pipe[0], &port, sizeof(port)) == sizeof(port));
	snprintf(service, sizeof(service), "%u", port);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK_OK(rdma_getaddrinfo(test_addr(), service, &hints, &res));
	CHECK(res->ai_dst_addr != NULL);
	CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	CHECK_OK(rdma_create_ep(&cid, res, NULL, &attr));
	CHECK(cid->qp != NULL && cid->pd != NULL);
	CHECK(cid->event != NULL);
	CHECK_EQ(cid->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_OK(rdma_connect(cid, NULL));
	CHECK_EQ(cid->event->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_OK(rdma_disconnect(cid));
	CHECK_EQ(cid->event->event, RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_ep(cid);

	/* Synchronous connect to a port nobody listens on: ECONNREFUSED. */
	CHECK_OK(rdma_create_ep(&tmp, res, NULL, NULL));
	rdma_freeaddrinfo(res);
	CHECK_OK(pthread_join(t, NULL));
	CHECK(s.ok);
	{
		struct rdma_conn_param cp = { .qp_num = 1 };

		CHECK_ERR(rdma_connect(tmp, &cp), ECONNREFUSED);
		CHECK_EQ(tmp->event->event, RDMA_CM_EVENT_REJECTED);
	}
	rdma_destroy_ep(tmp);
}

/* ---- two processes --------------------------------------------------------- */

static void write_byte(int fd, char c)
{
	CHECK(write(fd, &c, 1) == 1);
}

static char read_byte(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c = 0;

	if (poll(&pfd, 1, ms) != 1 || read(fd, &c, 1) != 1)
		return 0;
	return c;
}

/* Child: connect to port from `in`, report 'E' on `out` once established,
 * then wait to be killed. */
static void child_client(int in, int out)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_id *cid;
	struct qpres r;
	uint16_t port;

	CHECK(read(in, &port, sizeof(port)) == sizeof(port));
	ch = rdma_create_event_channel();
	CHECK(ch);
	cid = client_route(ch, port);
	make_qp(cid, &r);
	CHECK_OK(rdma_connect(cid, &cp));
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	write_byte(out, 'E');
	for (;;)
		pause();
}

/* Child: listen, send the port on `out`, accept one connection, report 'E',
 * then wait to be killed. */
static void child_server(int out)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *lid, *sid;
	struct qpres r;
	uint16_t port;

	CHECK(ch);
	port = listen_loop(ch, &lid, NULL);
	CHECK(write(out, &port, sizeof(port)) == sizeof(port));
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	make_qp(sid, &r);
	CHECK_OK(rdma_accept(sid, &cp));
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	write_byte(out, 'E');
	for (;;)
		pause();
}

/* A child forked after its parent used librdmacm (so the parent's CM
 * thread runs) connects on its own: it must get a CM thread of its own,
 * not register its sockets in the parent's epoll set, which only the
 * parent's thread reads. The parent's pair keeps working. */
static void case_connect_after_fork(void)
{
	struct pair p;
	pid_t pid;
	int st;

	pair_connect(&p, 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct pair q;

		case_name = "connect_after_fork (child)";
		pair_connect(&q, 0);
		pair_destroy(&q, 0);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_OK(rdma_disconnect(p.cid));
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED);
	pair_destroy(&p, 0);
}

static void reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &st, 0) == pid);
}

/* The active peer is killed: the server sees DISCONNECTED and its posted
 * receives are flushed. */
static void case_peer_killed_client(void)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	int to_child[2], from_child[2];
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *lid, *sid;
	struct qpres r;
	uint16_t port;
	pid_t pid;

	CHECK_OK(pipe(to_child));
	CHECK_OK(pipe(from_child));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		case_name = "peer_killed_client (child)";
		child_client(to_child[0], from_child[1]);
	}
	ch = rdma_create_event_channel();
	CHECK(ch);
	port = listen_loop(ch, &lid, NULL);
	CHECK(write(to_child[1], &port, sizeof(port)) == sizeof(port));
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	make_qp(sid, &r);
	post_recvs(sid, &r, 3);
	CHECK_OK(rdma_accept(sid, &cp));
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(read_byte(from_child[0], EVENT_MS), 'E');

	reap(pid);
	ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == sid);
	CHECK_OK(rdma_ack_cm_event(ev));
	expect_flushed(r.cq, 3);
	free_qp(sid, &r);
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

/* The passive peer is killed: the client sees DISCONNECTED and its posted
 * receives are flushed. */
static void case_peer_killed_server(void)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *cid;
	int from_child[2];
	struct qpres r;
	uint16_t port;
	pid_t pid;

	CHECK_OK(pipe(from_child));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		case_name = "peer_killed_server (child)";
		child_server(from_child[1]);
	}
	{
		struct pollfd pfd = { .fd = from_child[0], .events = POLLIN };

		CHECK_EQ(poll(&pfd, 1, EVENT_MS), 1);
		CHECK(read(from_child[0], &port, sizeof(port)) == sizeof(port));
	}
	ch = rdma_create_event_channel();
	CHECK(ch);
	cid = client_route(ch, port);
	make_qp(cid, &r);
	post_recvs(cid, &r, 2);
	CHECK_OK(rdma_connect(cid, &cp));
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(read_byte(from_child[0], EVENT_MS), 'E');

	reap(pid);
	ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == cid);
	CHECK_OK(rdma_ack_cm_event(ev));
	expect_flushed(r.cq, 2);
	free_qp(cid, &r);
	CHECK_OK(rdma_destroy_id(cid));
	rdma_destroy_event_channel(ch);
}

/* The active peer dies while its request waits for an answer: the new id
 * reports CONNECT_ERROR, and accepting it is refused. */
static void case_peer_killed_in_handshake(void)
{
	int to_child[2];
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *lid, *sid;
	uint16_t port;
	pid_t pid;

	CHECK_OK(pipe(to_child));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rdma_conn_param cp = { .qp_num = 1 };
		struct rdma_event_channel *cch;
		struct rdma_cm_id *cid;

		case_name = "peer_killed_in_handshake (child)";
		CHECK(read(to_child[0], &port, sizeof(port)) == sizeof(port));
		cch = rdma_create_event_channel();
		CHECK(cch);
		cid = client_route(cch, port);
		CHECK_OK(rdma_connect(cid, &cp));
		for (;;)
			pause();
	}
	ch = rdma_create_event_channel();
	CHECK(ch);
	port = listen_loop(ch, &lid, NULL);
	CHECK(write(to_child[1], &port, sizeof(port)) == sizeof(port));
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	reap(pid);
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_ERROR);
	CHECK(ev->id == sid);
	CHECK(ev->status < 0);
	CHECK_OK(rdma_ack_cm_event(ev));
	{
		struct rdma_conn_param cp = { .qp_num = 2 };

		CHECK_ERR(rdma_accept(sid, &cp), EINVAL);
	}
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

/*
 * Address resolution towards a destination without a route: ADDR_ERROR with
 * a negative errno. Run in a network namespace of its own (only loopback,
 * no default route); skipped where namespaces cannot be made.
 */
static void case_addr_error(void)
{
	struct sockaddr_in far = loop4(7), lo = loop4(7);
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *sid;
	struct ifreq ifr;
	int s;

	if (unshare(CLONE_NEWNET)) {
		printf("  (cannot make a network namespace here: %s; nothing to check)\n",
		       strerror(errno));
		return;
	}
	s = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(s >= 0);
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	CHECK_OK(ioctl(s, SIOCGIFFLAGS, &ifr));
	ifr.ifr_flags |= IFF_UP;
	CHECK_OK(ioctl(s, SIOCSIFFLAGS, &ifr));
	close(s);

	far.sin_addr.s_addr = inet_addr("10.213.7.9");
	ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 1000));
	ev = expect(ch, RDMA_CM_EVENT_ADDR_ERROR);
	CHECK(ev->id == id);
	CHECK_EQ(ev->status, -ENETUNREACH);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_ERR(rdma_resolve_route(id, 1000), EINVAL);
	/* The id may try again, towards somewhere reachable. */
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&lo, 1000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_OK(rdma_destroy_id(id));

	/* Synchronous ids return the error from the call itself. */
	CHECK_OK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP));
	CHECK_ERR(rdma_resolve_addr(sid, NULL, (struct sockaddr *)&far, 1000), ENETUNREACH);
	CHECK_EQ(sid->event->event, RDMA_CM_EVENT_ADDR_ERROR);
	CHECK_OK(rdma_destroy_id(sid));
	rdma_destroy_event_channel(ch);
}

/* rdma_getaddrinfo: passive and active results, hints, errors. */
static void case_getaddrinfo(void)
{
	struct rdma_addrinfo hints, *res;
	struct sockaddr_in *sin;
	struct sockaddr_in src = loop4(4242);
	int rc;

	CHECK_ERR(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_family = AF_INET;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK_OK(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res));
	CHECK_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
	CHECK_EQ(res->ai_family, AF_INET);
	CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	CHECK(res->ai_src_addr != NULL && res->ai_dst_addr == NULL);
	CHECK_EQ(res->ai_src_len, sizeof(struct sockaddr_in));
	sin = (struct sockaddr_in *)res->ai_src_addr;
	CHECK_EQ(ntohs(sin->sin_port), 7471);
	CHECK_EQ(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
	rdma_freeaddrinfo(res);

	/* Passive without a node: the wildcard address. */
	CHECK_OK(rdma_getaddrinfo(NULL, "7471", &hints, &res));
	sin = (struct sockaddr_in *)res->ai_src_addr;
	CHECK_EQ(sin->sin_addr.s_addr, htonl(INADDR_ANY));
	rdma_freeaddrinfo(res);

	/* Active, with a source address from the hints. */
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	CHECK_OK(rdma_getaddrinfo("127.0.0.1", "7472", &hints, &res));
	CHECK_EQ(res->ai_flags & RAI_PASSIVE, 0);
	CHECK(res->ai_dst_addr != NULL && res->ai_src_addr != NULL);
	CHECK_EQ(ntohs(((struct sockaddr_in *)res->ai_dst_addr)->sin_port), 7472);
	CHECK_EQ(ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port), 4242);
	rdma_freeaddrinfo(res);

	/* Name errors come back as getaddrinfo's codes. */
	hints.ai_src_addr = NULL;
	hints.ai_src_len = 0;
	rc = rdma_getaddrinfo("not-a-number.invalid", "1", &hints, &res);
	CHECK_EQ(rc, EAI_NONAME);
}

/* Calls that are not supported yet fail cleanly with EOPNOTSUPP/ENOSYS;
 * rpoll on ordinary descriptors behaves like poll(2). */
static void case_unsupported(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sin = loop4(0), mc;
	struct pollfd pfd[2];
	struct rdma_cm_id *id;
	struct ibv_ece ece;
	struct ibv_srq_init_attr sattr;
	int fds[2], r;
	char c = 'x';

	CHECK(ch);
	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&sin));
	mc = sin;
	mc.sin_addr.s_addr = inet_addr("239.1.2.3");
	/* Multicast is for datagram ids (ctests/src/cm_ud.c has the rest). */
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL), EINVAL);
	CHECK_ERR(rdma_leave_multicast(id, (struct sockaddr *)&mc), EADDRNOTAVAIL);

	/* ECE: checked locally (case_ece has the exchange). */
	memset(&ece, 0, sizeof(ece));
	CHECK_ERR(rdma_set_local_ece(id, &ece), EINVAL);	/* vendor_id 0 */
	ece.vendor_id = 0x1234;
	CHECK_OK(rdma_set_local_ece(id, &ece));
	CHECK_OK(rdma_get_remote_ece(id, &ece));
	CHECK_EQ(ece.vendor_id, 0);

	/* SRQs go to the provider, which may not have them. */
	memset(&sattr, 0, sizeof(sattr));
	sattr.attr.max_wr = 4;
	sattr.attr.max_sge = 1;
	errno = 0;
	r = rdma_create_srq(id, NULL, &sattr);
	if (r == 0) {
		CHECK(id->srq != NULL);
		rdma_destroy_srq(id);
		CHECK(id->srq == NULL);
	} else {
		CHECK_EQ(r, -1);
		CHECK(errno == EOPNOTSUPP || errno == ENOSYS);
	}

	/* rpoll takes ordinary descriptors too (rping and cmtime poll their
	 * channel's descriptor with it); the other r* calls are for rsockets
	 * only (rsocket_errors.c covers them). */
	CHECK_OK(pipe(fds));
	pfd[0].fd = fds[0];
	pfd[0].events = POLLIN;
	pfd[1].fd = fds[1];
	pfd[1].events = POLLOUT;
	CHECK_EQ(rpoll(pfd, 2, 0), 1);	/* only the write end is ready */
	CHECK(pfd[1].revents & POLLOUT);
	CHECK_EQ(write(fds[1], &c, 1), 1);
	CHECK_EQ(rpoll(pfd, 1, 1000), 1);
	CHECK(pfd[0].revents & POLLIN);
	CHECK_ERR(rread(fds[0], &c, 1), ENOTSOCK);
	c = 0;
	CHECK_EQ(read(fds[0], &c, 1), 1);
	CHECK_EQ(c, 'x');
	CHECK_OK(close(fds[0]));
	CHECK_OK(close(fds[1]));

	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* A blocking rdma_get_cm_event and signals: restarted under SA_RESTART,
 * EINTR otherwise, as a read of the kernel's CM device behaves. */
static volatile sig_atomic_t usr1_count;
static void on_usr1(int sig)
{
	(void)sig;
	usr1_count++;
}

struct poker {
	pthread_t target;
	struct rdma_cm_id *id;	/* resolve this after a few signals, if set */
	volatile int stop;
};

static void *poke_thread(void *p)
{
	struct poker *k = p;
	struct sockaddr_in dst = loop4(9);

	for (int i = 0; !k->stop && i < 500; i++) {
		pthread_kill(k->target, SIGUSR1);
		usleep(10000);
		if (k->id && i == 5)
			rdma_resolve_addr(k->id, NULL, (struct sockaddr *)&dst, 1000);
	}
	return NULL;
}

static void case_blocking_get_signals(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct poker k = { .target = pthread_self() };
	struct sigaction sa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	pthread_t t;

	CHECK(ch);
	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;

	/* With SA_RESTART the wait goes on through the signals. */
	sa.sa_flags = SA_RESTART;
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	k.id = id;
	CHECK_OK(pthread_create(&t, NULL, poke_thread, &k));
	CHECK_OK(rdma_get_cm_event(ch, &ev));
	k.stop = 1;
	CHECK_OK(pthread_join(t, NULL));
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(usr1_count >= 5);
	CHECK_OK(rdma_ack_cm_event(ev));

	/* Without it, a signal ends the wait. */
	sa.sa_flags = 0;
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	k.id = NULL;
	k.stop = 0;
	CHECK_OK(pthread_create(&t, NULL, poke_thread, &k));
	CHECK_ERR(rdma_get_cm_event(ch, &ev), EINTR);
	k.stop = 1;
	CHECK_OK(pthread_join(t, NULL));

	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* ---- port ownership -------------------------------------------------------- */

/* A TCP port nobody holds, below the ephemeral range (the library binds
 * ephemeral ports of its own meanwhile, and could be handed this one). */
static uint16_t free_port(void)
{
	int i;

	srand(getpid() ^ (unsigned)now_ms());
	for (i = 0; i < 1000; i++) {
		uint16_t port = 10000 + rand() % 20000;
		struct sockaddr_in sin = loop4(port);
		int s = socket(AF_INET, SOCK_STREAM, 0);
		int ok;

		CHECK(s >= 0);
		sin.sin_addr.s_addr = htonl(INADDR_ANY);
		ok = bind(s, (struct sockaddr *)&sin, sizeof(sin)) == 0;
		close(s);
		if (ok)
			return port;
	}
	failf(__LINE__, "no free port");
	return 0;
}

static struct sockaddr_in any4(uint16_t port)
{
	struct sockaddr_in sin = loop4(port);

	sin.sin_addr.s_addr = htonl(INADDR_ANY);
	return sin;
}

/* A new TCP id, RDMA_OPTION_ID_REUSEADDR set when `reuse`, bound to `a`:
 * the id, or NULL with errno from rdma_bind_addr. */
static struct rdma_cm_id *bound(struct rdma_event_channel *ch, enum rdma_port_space ps,
				const void *a, int reuse)
{
	struct rdma_cm_id *id;
	int e;

	CHECK_OK(rdma_create_id(ch, &id, NULL, ps));
	if (reuse)
		CHECK_OK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
					 &reuse, sizeof(reuse)));
	if (rdma_bind_addr(id, (struct sockaddr *)a) == 0)
		return id;
	e = errno;
	CHECK_OK(rdma_destroy_id(id));
	errno = e;
	return NULL;
}

#define BIND_ERR(ch, a, reuse, err) \
	do { errno = 0; struct rdma_cm_id *_id = bound(ch, RDMA_PS_TCP, a, reuse); \
	     if (_id || errno != (err)) \
		failf(__LINE__, "second bind: %s errno %d, expected errno %d (%s)", \
		      _id ? "succeeded" : "failed", errno, (err), strerror(err)); \
	} while (0)

/* Two ids on one port, as the kernel's CM allows them (cma.c
 * cma_check_port): a wildcard on either side is EADDRNOTAVAIL, the same
 * address EADDRINUSE, unless both ids set RDMA_OPTION_ID_REUSEADDR; a
 * listener shares its port with no one; another port space is another
 * set of ports. */
static void case_bind_port_rules(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	uint16_t port = free_port();
	struct sockaddr_in lo = loop4(port), any = any4(port);
	struct sockaddr_in6 six;
	struct rdma_cm_id *a, *b, *c;
	int s6, zero = 0, one = 1;

	CHECK(ch);
	/* Without reuse. */
	CHECK((a = bound(ch, RDMA_PS_TCP, &any, 0)));
	BIND_ERR(ch, &any, 0, EADDRNOTAVAIL);
	BIND_ERR(ch, &lo, 0, EADDRNOTAVAIL);
	BIND_ERR(ch, &any, 1, EADDRNOTAVAIL);
	CHECK_OK(rdma_destroy_id(a));
	CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 0)));
	BIND_ERR(ch, &lo, 0, EADDRINUSE);
	BIND_ERR(ch, &any, 0, EADDRNOTAVAIL);
	/* Reuse takes both ids asking for it. */
	BIND_ERR(ch, &lo, 1, EADDRINUSE);
	CHECK_OK(rdma_destroy_id(a));
	CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 1)));
	BIND_ERR(ch, &lo, 0, EADDRINUSE);
	CHECK((b = bound(ch, RDMA_PS_TCP, &lo, 1)));
	/* Listening checks again as if neither allowed reuse... */
	CHECK_ERR(rdma_listen(a, 1), EADDRINUSE);
	CHECK_OK(rdma_destroy_id(b));
	CHECK_OK(rdma_listen(a, 1));
	/* ...and the listener is nobody's to share any more. */
	BIND_ERR(ch, &lo, 1, EADDRINUSE);
	BIND_ERR(ch, &any, 1, EADDRNOTAVAIL);
	CHECK_OK(rdma_destroy_id(a));
	/* Wildcards sharing, then one of them listening. */
	CHECK((a = bound(ch, RDMA_PS_TCP, &any, 1)));
	CHECK((b = bound(ch, RDMA_PS_TCP, &any, 1)));
	CHECK((c = bound(ch, RDMA_PS_TCP, &lo, 1)));
	CHECK_ERR(rdma_listen(b, 1), EADDRNOTAVAIL);
	CHECK_OK(rdma_destroy_id(a));
	CHECK_OK(rdma_destroy_id(c));
	CHECK_OK(rdma_listen(b, 1));
	CHECK_OK(rdma_destroy_id(b));
	/* Reuse set after the bind counts too. */
	CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 0)));
	CHECK_OK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)));
	CHECK((b = bound(ch, RDMA_PS_TCP, &lo, 1)));
	CHECK_OK(rdma_destroy_id(b));
	CHECK_OK(rdma_destroy_id(a));
	/* The UDP port space is another set of ports. */
	CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 0)));
	CHECK((b = bound(ch, RDMA_PS_UDP, &lo, 0)));
	CHECK_OK(rdma_destroy_id(b));
	/* A port freed by rdma_destroy_id is free. */
	CHECK_OK(rdma_destroy_id(a));
	CHECK((a = bound(ch, RDMA_PS_TCP, &any, 0)));
	/* IPv6, where the host has it: an AF-only IPv6 id never meets an IPv4
	 * one; one that is not AF-only meets the IPv4 wildcard. */
	s6 = socket(AF_INET6, SOCK_STREAM, 0);
	memset(&six, 0, sizeof(six));
	six.sin6_family = AF_INET6;
	six.sin6_addr = in6addr_any;
	if (s6 >= 0 && bind(s6, (struct sockaddr *)&six, sizeof(six)) == 0) {
		six.sin6_port = htons(port);
		CHECK_OK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP));
		CHECK_OK(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &zero, sizeof(zero)));
		CHECK_ERR(rdma_bind_addr(b, (struct sockaddr *)&six), EADDRNOTAVAIL);
		CHECK_OK(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)));
		CHECK_OK(rdma_bind_addr(b, (struct sockaddr *)&six));
		CHECK_OK(rdma_destroy_id(b));
	}
	if (s6 >= 0)
		close(s6);
	CHECK_OK(rdma_destroy_id(a));
	CHECK(channel_quiet(ch, 20));
	rdma_destroy_event_channel(ch);
}

/* The same rules between processes: a port another process's id holds is
 * taken until that id is destroyed (or the process is gone). */
static void case_bind_port_other_process(void)
{
	int to_child[2], from_child[2];
	struct rdma_event_channel *ch;
	struct sockaddr_in lo, any;
	struct rdma_cm_id *a;
	uint16_t port;
	pid_t pid;
	char c;

	port = free_port();
	lo = loop4(port);
	any = any4(port);
	CHECK_OK(pipe(to_child));
	CHECK_OK(pipe(from_child));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		case_name = "bind_port_other_process (child)";
		ch = rdma_create_event_channel();
		CHECK(ch);
		CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 1)));
		CHECK(write(from_child[1], "B", 1) == 1);
		/* Until the parent says so; then the id goes, the process stays. */
		CHECK(read_byte(to_child[0], EVENT_MS) == 'D');
		CHECK_OK(rdma_destroy_id(a));
		CHECK(write(from_child[1], "D", 1) == 1);
		CHECK(read_byte(to_child[0], EVENT_MS) == 'X');
		_exit(0);
	}
	CHECK_EQ(read_byte(from_child[0], EVENT_MS), 'B');
	ch = rdma_create_event_channel();
	CHECK(ch);
	BIND_ERR(ch, &lo, 0, EADDRINUSE);
	BIND_ERR(ch, &any, 0, EADDRNOTAVAIL);
	/* Both asked for reuse: shared across processes too. */
	CHECK((a = bound(ch, RDMA_PS_TCP, &lo, 1)));
	CHECK_ERR(rdma_listen(a, 1), EADDRINUSE);
	CHECK_OK(rdma_destroy_id(a));
	c = 'D';
	CHECK(write(to_child[1], &c, 1) == 1);
	CHECK_EQ(read_byte(from_child[0], EVENT_MS), 'D');
	CHECK((a = bound(ch, RDMA_PS_TCP, &any, 0)));
	CHECK_OK(rdma_listen(a, 1));
	c = 'X';
	CHECK(write(to_child[1], &c, 1) == 1);
	reap(pid);
	CHECK_OK(rdma_destroy_id(a));
	rdma_destroy_event_channel(ch);
}

/* ---- runner --------------------------------------------------------------- */

static const struct cm_case cases[] = {
	{ "event_strings", case_event_strings },
	{ "nonblocking_channel", case_nonblocking_channel },
	{ "blocking_get_signals", case_blocking_get_signals },
	{ "wrong_state", case_wrong_state },
	{ "bind", case_bind },
	{ "bind_port_rules", case_bind_port_rules },
	{ "bind_port_other_process", case_bind_port_other_process },
	{ "devices", case_devices },
	{ "getaddrinfo", case_getaddrinfo },
	{ "unsupported", case_unsupported },
	{ "pdata_connect_accept", case_pdata_connect_accept },
	{ "pdata_reject", case_pdata_reject },
	{ "ece", case_ece },
	{ "ece_qp", case_ece_qp },
	{ "bind_any", case_bind_any },
	{ "closed_port", case_closed_port },
	{ "listen_late", case_listen_late },
	{ "addr_error", case_addr_error },
	{ "reject_by_destroy", case_reject_by_destroy },
	{ "unreachable", case_unreachable },
	{ "garbage_on_listen_port", case_garbage_on_listen_port },
	{ "listen_out_of_fds", case_listen_out_of_fds },
	{ "repeated_mra", case_repeated_mra },
	{ "disconnect_while_connecting", case_disconnect_while_connecting },
	{ "init_qp_attr", case_init_qp_attr },
	{ "rd_atomic_limits", case_rd_atomic_limits },
	{ "qp_traffic", case_qp_traffic },
	{ "disconnect_client_first", case_disconnect_client_first },
	{ "disconnect_server_first", case_disconnect_server_first },
	{ "migrate", case_migrate },
	{ "destroy_waits_for_ack", case_destroy_waits_for_ack },
	{ "ipv6", case_ipv6 },
	{ "sync_endpoints", case_sync_endpoints },
	{ "connect_after_fork", case_connect_after_fork },
	{ "peer_killed_client", case_peer_killed_client },
	{ "peer_killed_server", case_peer_killed_server },
	{ "peer_killed_in_handshake", case_peer_killed_in_handshake },
};

int main(int argc, char **argv)
{
	return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
