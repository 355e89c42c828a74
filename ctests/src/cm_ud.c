/*
 * cm_ud: conformance cases for librdmacm's datagram services (RDMA_PS_UDP,
 * RDMA_PS_IPOIB, UD ids of RDMA_PS_IB) and multicast, over loopback
 * (127.0.0.1 on rsw_lo).
 *
 *   cm_ud [case...]      run the named cases (default: all)
 *   cm_ud -l             list the cases
 *
 * Each case runs in a child process of its own with an alarm as a
 * backstop; the parent prints "ok <case>" or "FAIL <case>" and exits 0
 * only if every case passed. Every wait is bounded: events are waited for
 * with poll() on the channel's descriptor, completions by polling the CQ
 * against a deadline.
 *
 * What is asserted comes from rdma-core's librdmacm and the kernel's CM
 * over RoCE: a UD id's QP is in RTS with Q_Key RDMA_UDP_QKEY as soon as
 * rdma_create_qp returns; rdma_connect sends a SIDR request whose private
 * data area shows as 180 bytes (216 less the CM's header) with the
 * listener's RDMA_CM_EVENT_CONNECT_REQUEST; the answer shows 136 bytes
 * with ESTABLISHED (param.ud: an AH towards the peer, its QP number and
 * Q_Key) or with UNREACHABLE (status 2 after rdma_reject, 1 when nobody
 * takes the request); multicast joins report the group's MGID
 * (::ffff:a.b.c.d), QP number 0xFFFFFF, RDMA_UDP_QKEY and the join's
 * context in param.ud.private_data.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define EVENT_MS 5000		/* longest wait for one expected CM event */
#define QUIET_MS 300		/* how long "nothing arrives" is watched */
#define CASE_SECONDS 30		/* backstop for one case */
#define SIDR_REQ_PDATA 180
#define SIDR_REP_PDATA 136
#define GRH 40
#define SLOT 2048
#define NSLOTS 16

#include "common/cm_util.c"

static struct sockaddr_in addr4(const char *ip, uint16_t port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	CHECK(inet_pton(AF_INET, ip, &sin.sin_addr) == 1);
	return sin;
}

/* The RoCE v2 GID of an IPv4 address. */
static union ibv_gid gid4(const char *ip)
{
	union ibv_gid g;

	memset(&g, 0, sizeof(g));
	g.raw[10] = g.raw[11] = 0xff;
	CHECK(inet_pton(AF_INET, ip, &g.raw[12]) == 1);
	return g;
}

/* A listener of port space `ps` on 127.0.0.1 and a port the CM picks. */
static uint16_t listen_ps(struct rdma_event_channel *ch, struct rdma_cm_id **lid,
			  enum rdma_port_space ps)
{
	struct sockaddr_in sin = addr4("127.0.0.1", 0);
	uint16_t port;

	CHECK_OK(rdma_create_id(ch, lid, NULL, ps));
	CHECK_OK(rdma_bind_addr(*lid, (struct sockaddr *)&sin));
	port = ntohs(rdma_get_src_port(*lid));
	CHECK(port != 0);
	CHECK_OK(rdma_listen(*lid, 8));
	return port;
}

/* An id of port space `ps` with address and route resolved to 127.0.0.1:port. */
static struct rdma_cm_id *client_ps(struct rdma_event_channel *ch, uint16_t port,
				    enum rdma_port_space ps)
{
	struct sockaddr_in dst = addr4("127.0.0.1", port);
	struct rdma_cm_id *id;

	CHECK_OK(rdma_create_id(ch, &id, NULL, ps));
	CHECK_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(id->verbs != NULL);
	CHECK_OK(rdma_resolve_route(id, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

/* ---- verbs helpers --------------------------------------------------------- */

struct udres {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	uint8_t *buf;		/* NSLOTS receive slots of SLOT bytes, then a send slot */
	struct ibv_mr *mr;
};

/* A UD QP on `id` made by rdma_create_qp, with its own PD and CQ. */
static void make_ud(struct rdma_cm_id *id, struct udres *r)
{
	struct ibv_qp_init_attr a;

	r->pd = ibv_alloc_pd(id->verbs);
	CHECK(r->pd);
	r->cq = ibv_create_cq(id->verbs, 2 * NSLOTS + 4, NULL, NULL, 0);
	CHECK(r->cq);
	r->buf = calloc(NSLOTS + 1, SLOT);
	CHECK(r->buf);
	r->mr = ibv_reg_mr(r->pd, r->buf, (NSLOTS + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE);
	CHECK(r->mr);
	memset(&a, 0, sizeof(a));
	a.send_cq = r->cq;
	a.recv_cq = r->cq;
	a.qp_type = IBV_QPT_UD;
	a.cap.max_send_wr = NSLOTS;
	a.cap.max_recv_wr = NSLOTS;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	CHECK_OK(rdma_create_qp(id, r->pd, &a));
	CHECK(id->qp != NULL);
}

static void free_ud(struct rdma_cm_id *id, struct udres *r)
{
	rdma_destroy_qp(id);
	ibv_dereg_mr(r->mr);
	free(r->buf);
	ibv_destroy_cq(r->cq);
	ibv_dealloc_pd(r->pd);
}

/* The QP is in RTS with RDMA_UDP_QKEY. */
static void check_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia));
	CHECK_EQ(a.qp_state, IBV_QPS_RTS);
	CHECK_EQ(a.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ia.qp_type, IBV_QPT_UD);
}

static void post_recvs(struct ibv_qp *qp, struct udres *r, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge s = { (uintptr_t)r->buf + (size_t)i * SLOT, SLOT, r->mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;

		CHECK_OK(ibv_post_recv(qp, &w, &bad));
	}
}

/* One completion within `ms`; 0 if none came. */
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
		usleep(200);	/* polling a CQ against a deadline */
	}
}

static void fill(uint8_t *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + 7 * i);
}

static int filled(const uint8_t *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		if (b[i] != (uint8_t)(seed + 7 * i))
			return 0;
	return 1;
}

/* Sends `len` bytes of pattern `seed` with immediate `seed` to (ah, qpn,
 * qkey) and waits for the send completion. */
static void ud_send(struct ibv_qp *qp, struct udres *r, struct ibv_ah *ah, uint32_t qpn,
		    uint32_t qkey, int len, int seed)
{
	uint8_t *p = r->buf + (size_t)NSLOTS * SLOT;
	struct ibv_sge s = { (uintptr_t)p, len, r->mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1000 + seed, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	fill(p, len, seed);
	w.imm_data = htonl(seed);
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = qkey;
	CHECK_OK(ibv_post_send(qp, &w, &bad));
	CHECK(poll_wc(r->cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_SEND);
}

/* A receive of `len` bytes of pattern `seed` from QP `src_qp`, with a
 * 40-byte GRH whose IPv4 header (its last 20 bytes, RoCE v2) names `src`
 * and `dst`. */
static struct ibv_wc expect_recv(int line, struct udres *r, int len, int seed,
				 uint32_t src_qp, const char *src, const char *dst)
{
	struct ibv_wc wc;
	struct in_addr s, d;
	const uint8_t *p;

	if (!poll_wc(r->cq, &wc, EVENT_MS))
		failf(line, "no receive within %d ms", EVENT_MS);
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV)
		failf(line, "receive status %s opcode %d", ibv_wc_status_str(wc.status),
		      wc.opcode);
	if (wc.byte_len != (uint32_t)(GRH + len) || !(wc.wc_flags & IBV_WC_GRH) ||
	    !(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != (uint32_t)seed)
		failf(line, "receive byte_len %u flags %#x imm %u", wc.byte_len, wc.wc_flags,
		      ntohl(wc.imm_data));
	if (wc.src_qp != src_qp)
		failf(line, "src_qp %u, expected %u", wc.src_qp, src_qp);
	p = r->buf + wc.wr_id * SLOT;
	CHECK(inet_pton(AF_INET, src, &s) == 1 && inet_pton(AF_INET, dst, &d) == 1);
	if (p[20] != 0x45 || memcmp(p + 32, &s, 4) || memcmp(p + 36, &d, 4))
		failf(line, "GRH: version byte %#x, addresses not %s -> %s", p[20], src, dst);
	if (!filled(p + GRH, len, seed))
		failf(line, "payload of message %d differs", seed);
	return wc;
}

static void check_pdata(int line, const void *got, int got_len, int area,
			const uint8_t *sent, int sent_len)
{
	const uint8_t *g = got;

	if (got_len != area)
		failf(line, "private_data_len %d, expected %d", got_len, area);
	if (!g)
		failf(line, "no private data");
	if (sent_len && memcmp(g, sent, sent_len))
		failf(line, "private data differs");
	for (int i = sent_len; i < area; i++)
		if (g[i])
			failf(line, "private data byte %d past what was sent is %#x", i, g[i]);
}

/* ---- cases ------------------------------------------------------------------ */

/* The full SIDR exchange with private data both ways, then datagrams both
 * ways: the client's with the AH from its ESTABLISHED event, the server's
 * reply with rdma_post_ud_send through an AH made from the receive's GRH. */
static void case_sidr_established(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *sid, *cid;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	struct udres sr, cr;
	uint8_t req[SIDR_REQ_PDATA], rep[SIDR_REP_PDATA];
	union ibv_gid lo = gid4("127.0.0.1");
	struct ibv_ah *ah, *reply_ah;
	struct ibv_wc wc;
	uint32_t sqpn, cqpn;
	int mask;
	uint16_t port;

	CHECK(sch && cch);
	port = listen_ps(sch, &lid, RDMA_PS_UDP);
	CHECK_EQ(lid->qp_type, IBV_QPT_UD);
	cid = client_ps(cch, port, RDMA_PS_UDP);
	CHECK_EQ(cid->qp_type, IBV_QPT_UD);
	CHECK_EQ(cid->ps, RDMA_PS_UDP);

	/* A datagram id's QP is ready to send at once. */
	make_ud(cid, &cr);
	check_rts(cid->qp);
	cqpn = cid->qp->qp_num;
	qa.qp_state = IBV_QPS_INIT;
	CHECK_OK(rdma_init_qp_attr(cid, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	CHECK_EQ(qa.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(qa.port_num, 1);
	qa.qp_state = IBV_QPS_RTS;
	CHECK_OK(rdma_init_qp_attr(cid, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN);
	post_recvs(cid->qp, &cr, 4);

	/* Private data: at most 180 bytes with the request. */
	memset(&cp, 0, sizeof(cp));
	fill(req, sizeof(req), 3);
	cp.private_data = req;
	cp.private_data_len = SIDR_REQ_PDATA + 1;
	CHECK_ERR(rdma_connect(cid, &cp), EINVAL);
	cp.private_data_len = 100;
	CHECK_OK(rdma_connect(cid, &cp));

	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK_EQ(ev->status, 0);
	CHECK(ev->listen_id == lid);
	sid = ev->id;
	CHECK_EQ(sid->qp_type, IBV_QPT_UD);
	CHECK_EQ(sid->ps, RDMA_PS_UDP);
	check_pdata(__LINE__, ev->param.ud.private_data, ev->param.ud.private_data_len,
		    SIDR_REQ_PDATA, req, 100);
	CHECK_EQ(ev->param.ud.qp_num, cqpn);
	CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ev->param.ud.ah_attr.is_global, 1);
	CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, lo.raw, 16));
	CHECK_OK(rdma_ack_cm_event(ev));

	make_ud(sid, &sr);
	check_rts(sid->qp);
	sqpn = sid->qp->qp_num;
	post_recvs(sid->qp, &sr, 4);
	memset(&cp, 0, sizeof(cp));
	fill(rep, sizeof(rep), 9);
	cp.private_data = rep;
	cp.private_data_len = SIDR_REP_PDATA + 1;
	CHECK_ERR(rdma_accept(sid, &cp), EINVAL);
	cp.private_data_len = 50;
	CHECK_OK(rdma_accept(sid, &cp));
	CHECK_ERR(rdma_accept(sid, &cp), EINVAL);	/* answered already */

	ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(ev->status, 0);
	CHECK(ev->id == cid);
	check_pdata(__LINE__, ev->param.ud.private_data, ev->param.ud.private_data_len,
		    SIDR_REP_PDATA, rep, 50);
	CHECK_EQ(ev->param.ud.qp_num, sqpn);
	CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ev->param.ud.ah_attr.is_global, 1);
	CHECK_EQ(ev->param.ud.ah_attr.port_num, 1);
	CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, lo.raw, 16));
	ah = ibv_create_ah(cr.pd, &ev->param.ud.ah_attr);
	CHECK(ah);
	CHECK_OK(rdma_ack_cm_event(ev));
	/* The passive side gets no event for a datagram accept. */
	CHECK(channel_quiet(sch, 100));

	/* Client -> server with the event's AH; the GRH precedes the payload. */
	ud_send(cid->qp, &cr, ah, sqpn, RDMA_UDP_QKEY, 200, 1);
	ud_send(cid->qp, &cr, ah, sqpn, RDMA_UDP_QKEY, 1000, 2);
	expect_recv(__LINE__, &sr, 200, 1, cqpn, "127.0.0.1", "127.0.0.1");
	wc = expect_recv(__LINE__, &sr, 1000, 2, cqpn, "127.0.0.1", "127.0.0.1");

	/* Server -> client: an AH from the receive (its GRH), and
	 * rdma_post_ud_send, which sends with RDMA_UDP_QKEY. */
	reply_ah = ibv_create_ah_from_wc(sr.pd, &wc, (struct ibv_grh *)(sr.buf + wc.wr_id * SLOT),
					 sid->port_num);
	CHECK(reply_ah);
	fill(sr.buf + (size_t)NSLOTS * SLOT, 64, 5);
	CHECK_OK(rdma_post_ud_send(sid, NULL, sr.buf + (size_t)NSLOTS * SLOT, 64, sr.mr,
				   IBV_SEND_SIGNALED, reply_ah, cqpn));
	CHECK(poll_wc(sr.cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(poll_wc(cr.cq, &wc, EVENT_MS));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, GRH + 64);
	CHECK_EQ(wc.src_qp, sqpn);
	CHECK(filled(cr.buf + wc.wr_id * SLOT + GRH, 64, 5));

	/* Nothing to disconnect: the QP stops, no event, no error. */
	CHECK_OK(rdma_disconnect(cid));
	CHECK(channel_quiet(cch, 100));
	CHECK_OK(ibv_query_qp(cid->qp, &qa, IBV_QP_STATE, &(struct ibv_qp_init_attr){ 0 }));
	CHECK_EQ(qa.qp_state, IBV_QPS_ERR);

	ibv_destroy_ah(ah);
	ibv_destroy_ah(reply_ah);
	free_ud(cid, &cr);
	free_ud(sid, &sr);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* rdma_reject: UNREACHABLE with status 2 (SIDR reject) and the reject's
 * private data; a destroyed request answers the same without data. */
static void case_sidr_reject(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid;
	struct rdma_cm_event *ev;
	uint8_t pd[SIDR_REP_PDATA + 1];
	uint16_t port;

	CHECK(sch && cch);
	port = listen_ps(sch, &lid, RDMA_PS_UDP);
	fill(pd, sizeof(pd), 11);

	/* Reject with 40 bytes of private data. */
	cid = client_ps(cch, port, RDMA_PS_UDP);
	CHECK_OK(rdma_connect(cid, NULL));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK_ERR(rdma_reject(ev->id, pd, SIDR_REP_PDATA + 1), EINVAL);
	CHECK_OK(rdma_reject(ev->id, pd, 40));
	CHECK_ERR(rdma_accept(ev->id, NULL), EINVAL);	/* answered already */
	CHECK_OK(rdma_destroy_id(ev->id));
	CHECK_OK(rdma_ack_cm_event(ev));
	ev = expect(cch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, 2);
	CHECK(ev->id == cid);
	check_pdata(__LINE__, ev->param.ud.private_data, ev->param.ud.private_data_len,
		    SIDR_REP_PDATA, pd, 40);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK(channel_quiet(cch, 100));
	CHECK_OK(rdma_destroy_id(cid));

	/* The request's id destroyed without an answer. */
	cid = client_ps(cch, port, RDMA_PS_UDP);
	CHECK_OK(rdma_connect(cid, NULL));
	ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	{
		struct rdma_cm_id *req = ev->id;

		CHECK_OK(rdma_ack_cm_event(ev));
		CHECK_OK(rdma_destroy_id(req));
	}
	ev = expect(cch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, 2);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));

	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* Nobody takes the request: a closed port, a listener of another port
 * space or QP type. UNREACHABLE with status 1 (the SIDR "unsupported"
 * answer); a connection request to a datagram listener is REJECTED with
 * reason 8 (invalid service ID). */
static void case_sidr_nobody(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid;
	struct rdma_cm_event *ev;
	struct sockaddr_in sin = addr4("127.0.0.1", 0);
	socklen_t len = sizeof(sin);
	uint16_t port;
	int s;

	CHECK(ch);
	/* A port nobody listens on. */
	s = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0);
	CHECK_OK(bind(s, (struct sockaddr *)&sin, sizeof(sin)));
	CHECK_OK(getsockname(s, (struct sockaddr *)&sin, &len));
	port = ntohs(sin.sin_port);
	cid = client_ps(ch, port, RDMA_PS_UDP);
	CHECK_OK(rdma_connect(cid, NULL));
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, 1);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	close(s);

	/* A connected (TCP) listener. */
	port = listen_ps(ch, &lid, RDMA_PS_TCP);
	cid = client_ps(ch, port, RDMA_PS_UDP);
	CHECK_OK(rdma_connect(cid, NULL));
	ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, 1);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));

	/* An RDMA_PS_IB listener (RC by default) and a UD id of that space. */
	port = listen_ps(ch, &lid, RDMA_PS_IB);
	CHECK_EQ(lid->qp_type, IBV_QPT_RC);
	cid = client_ps(ch, port, RDMA_PS_IB);
	{
		struct udres r;

		make_ud(cid, &r);
		CHECK_EQ(cid->qp_type, IBV_QPT_UD);
		check_rts(cid->qp);
		CHECK_OK(rdma_connect(cid, NULL));
		ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE);
		CHECK_EQ(ev->status, 1);
		CHECK_OK(rdma_ack_cm_event(ev));
		free_ud(cid, &r);
	}
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(lid));

	/* A connection request to a datagram listener. */
	port = listen_ps(ch, &lid, RDMA_PS_UDP);
	cid = client_ps(ch, port, RDMA_PS_TCP);
	{
		struct rdma_conn_param cp = { .qp_num = 1 };

		CHECK_OK(rdma_connect(cid, &cp));
	}
	ev = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK_EQ(ev->status, 8);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_destroy_id(cid));
	CHECK(channel_quiet(ch, 100));	/* the listener saw nothing */
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

/* QP types and port spaces: RDMA_PS_IPOIB ids are UD too; a datagram id
 * refuses a connected QP; RDMA_PS_IB ids take their first QP's type;
 * rdma_init_qp_attr for a UD id; a UD id with no connect to end. */
static void case_qp_types(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr a;
	struct ibv_qp_attr qa;
	struct udres r;
	int mask;

	CHECK(ch);
	id = client_ps(ch, 9, RDMA_PS_IPOIB);
	CHECK_EQ(id->qp_type, IBV_QPT_UD);
	make_ud(id, &r);
	check_rts(id->qp);
	free_ud(id, &r);
	CHECK(id->qp == NULL);
	/* A connected QP on a datagram id. */
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	CHECK_ERR(rdma_create_qp(id, NULL, &a), EINVAL);
	CHECK(id->qp == NULL);
	qa.qp_state = IBV_QPS_RTR;
	CHECK_OK(rdma_init_qp_attr(id, &qa, &mask));
	CHECK_EQ(mask, IBV_QP_STATE);
	qa.qp_state = IBV_QPS_SQD;
	CHECK_ERR(rdma_init_qp_attr(id, &qa, &mask), EINVAL);
	/* Nothing was connected: nothing to disconnect. */
	CHECK_ERR(rdma_disconnect(id), EINVAL);
	CHECK_OK(rdma_destroy_id(id));

	/* RDMA_PS_IB: connected by default, datagram with a UD QP. */
	id = client_ps(ch, 9, RDMA_PS_IB);
	CHECK_EQ(id->qp_type, IBV_QPT_RC);
	a.qp_type = IBV_QPT_RC;
	CHECK_OK(rdma_create_qp(id, NULL, &a));
	CHECK_EQ(id->qp_type, IBV_QPT_RC);
	rdma_destroy_qp(id);
	make_ud(id, &r);
	CHECK_EQ(id->qp_type, IBV_QPT_UD);
	check_rts(id->qp);
	free_ud(id, &r);
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

struct sync_server {
	uint16_t port;
	int ready[2];		/* pipe: the listener is up */
	uint32_t qpn;
	int rc;
};

/* rdma_create_ep / rdma_get_request / rdma_accept on a datagram listener
 * (synchronous ids): the accept returns at once; then rdma_verbs.h's
 * helpers on the CQs the CM made: rdma_reg_msgs, rdma_post_recv,
 * rdma_post_ud_send, rdma_get_send_comp, rdma_get_recv_comp. */
static void *sync_server_thread(void *p)
{
	struct sync_server *s = p;
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr a;
	struct rdma_cm_id *lid, *id;
	static uint8_t buf[GRH + 300];
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char port[16];

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_UD;
	snprintf(port, sizeof(port), "%u", s->port);
	CHECK_OK(rdma_getaddrinfo("127.0.0.1", port, &hints, &res));
	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = a.cap.max_recv_wr = 2;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	CHECK_OK(rdma_create_ep(&lid, res, NULL, &a));
	rdma_freeaddrinfo(res);
	CHECK_EQ(lid->qp_type, IBV_QPT_UD);
	CHECK_OK(rdma_listen(lid, 1));
	CHECK_EQ(write(s->ready[1], "r", 1), 1);
	CHECK_OK(rdma_get_request(lid, &id));
	CHECK(id->qp != NULL);
	check_rts(id->qp);
	s->qpn = id->qp->qp_num;
	CHECK_EQ(id->event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK_EQ(id->event->param.ud.private_data_len, SIDR_REQ_PDATA);
	/* rdma_verbs.h's helpers on the CQs rdma_create_ep made. */
	mr = rdma_reg_msgs(id, buf, sizeof(buf));
	CHECK(mr);
	CHECK_OK(rdma_post_recv(id, buf, buf, sizeof(buf), mr));
	CHECK_OK(rdma_accept(id, NULL));
	CHECK(id->event == NULL);	/* released: no event follows */
	CHECK_EQ(rdma_get_recv_comp(id, &wc), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(wc.wr_id == (uintptr_t)buf);
	CHECK_EQ(wc.byte_len, GRH + 300);
	CHECK(wc.wc_flags & IBV_WC_GRH);
	CHECK(filled(buf + GRH, 300, 77));
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(lid);
	s->rc = 0;
	return NULL;
}

static void case_sync_endpoints(void)
{
	struct sync_server s = { .rc = -1 };
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr a;
	struct rdma_cm_id *id;
	struct sockaddr_in sin = addr4("127.0.0.1", 0);
	socklen_t len = sizeof(sin);
	static uint8_t msg[300];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	pthread_t t;
	char port[16], c;
	int fd;

	/* A port free right now for the server to listen on. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK_OK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)));
	CHECK_OK(getsockname(fd, (struct sockaddr *)&sin, &len));
	close(fd);
	s.port = ntohs(sin.sin_port);
	CHECK_OK(pipe(s.ready));
	CHECK_OK(pthread_create(&t, NULL, sync_server_thread, &s));
	CHECK_EQ(read(s.ready[0], &c, 1), 1);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_UD;
	snprintf(port, sizeof(port), "%u", s.port);
	CHECK_OK(rdma_getaddrinfo("127.0.0.1", port, &hints, &res));
	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = a.cap.max_recv_wr = 2;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	CHECK_OK(rdma_create_ep(&id, res, NULL, &a));
	rdma_freeaddrinfo(res);
	CHECK_EQ(id->qp_type, IBV_QPT_UD);
	check_rts(id->qp);
	CHECK_OK(rdma_connect(id, NULL));
	CHECK(id->event != NULL);
	CHECK_EQ(id->event->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(id->event->param.ud.qkey, RDMA_UDP_QKEY);
	ah = ibv_create_ah(id->pd, &id->event->param.ud.ah_attr);
	CHECK(ah);
	mr = rdma_reg_msgs(id, msg, sizeof(msg));
	CHECK(mr);
	fill(msg, sizeof(msg), 77);
	CHECK_OK(rdma_post_ud_send(id, msg, msg, sizeof(msg), mr, IBV_SEND_SIGNALED, ah,
				   id->event->param.ud.qp_num));
	CHECK_EQ(rdma_get_send_comp(id, &wc), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(wc.wr_id == (uintptr_t)msg);
	CHECK_OK(pthread_join(t, NULL));
	CHECK_EQ(s.rc, 0);
	CHECK_EQ(id->event->param.ud.qp_num, s.qpn);
	ibv_destroy_ah(ah);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
}

/* ---- multicast --------------------------------------------------------------- */

#define GROUP "239.77.1.2"

/* A UD id bound to 127.0.0.1 with a QP and `nrecv` receives posted. */
static struct rdma_cm_id *mc_node(struct rdma_event_channel *ch, struct udres *r, int nrecv)
{
	struct sockaddr_in sin = addr4("127.0.0.1", 0);
	struct rdma_cm_id *id;

	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&sin));
	make_ud(id, r);
	post_recvs(id->qp, r, nrecv);
	return id;
}

/* Joins GROUP with `flags` and checks the JOIN event; returns an AH for
 * the group made from it. */
static struct ibv_ah *join_at(int line, struct rdma_event_channel *ch, struct rdma_cm_id *id,
			      struct udres *r, int flags, int use_ex, void *ctx)
{
	struct sockaddr_in g = addr4(GROUP, 0);
	struct rdma_cm_join_mc_attr_ex ja = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = flags,
		.addr = (struct sockaddr *)&g,
	};
	union ibv_gid mgid = gid4(GROUP);
	struct rdma_cm_event *ev;
	struct ibv_ah *ah;

	if (!use_ex)
		CHECK_OK(rdma_join_multicast(id, (struct sockaddr *)&g, ctx));
	else
		CHECK_OK(rdma_join_multicast_ex(id, &ja, ctx));
	ev = expect_at(line, ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	if (ev->status != 0 || ev->id != id || ev->param.ud.private_data != ctx ||
	    ev->param.ud.qp_num != 0xffffff || ev->param.ud.qkey != RDMA_UDP_QKEY ||
	    !ev->param.ud.ah_attr.is_global || ev->param.ud.ah_attr.port_num != 1 ||
	    memcmp(ev->param.ud.ah_attr.grh.dgid.raw, mgid.raw, 16))
		failf(line, "JOIN event: status %d qp_num %#x qkey %#x global %d context %p",
		      ev->status, ev->param.ud.qp_num, ev->param.ud.qkey,
		      ev->param.ud.ah_attr.is_global, ev->param.ud.private_data);
	ah = ibv_create_ah(r->pd, &ev->param.ud.ah_attr);
	if (!ah)
		failf(line, "ibv_create_ah from the JOIN event");
	CHECK_OK(rdma_ack_cm_event(ev));
	return ah;
}

/* Full members receive what is sent to the group (payload and GRH naming
 * the group); a send-only member's QP is not attached and receives
 * nothing, yet it can send to the group. */
static void case_mcast_join(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct udres ra, rb, rs;
	struct rdma_cm_id *a, *b, *snd;
	struct ibv_ah *aha, *ahb, *ahs;
	struct ibv_wc wc;
	int ctx_a, ctx_b, ctx_s;

	CHECK(ch);
	a = mc_node(ch, &ra, 8);
	b = mc_node(ch, &rb, 8);
	snd = mc_node(ch, &rs, 0);
	aha = join_at(__LINE__, ch, a, &ra, RDMA_MC_JOIN_FLAG_FULLMEMBER, 0, &ctx_a);
	ahb = join_at(__LINE__, ch, b, &rb, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, 1, &ctx_b);
	ahs = join_at(__LINE__, ch, snd, &rs, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, 1, &ctx_s);

	for (int k = 0; k < 4; k++)
		ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 100 + k, 20 + k);
	for (int k = 0; k < 4; k++)
		expect_recv(__LINE__, &ra, 100 + k, 20 + k, snd->qp->qp_num, "127.0.0.1", GROUP);
	/* The send-only member (b) can send: a receives it. */
	ud_send(b->qp, &rb, ahb, 0xffffff, RDMA_UDP_QKEY, 33, 40);
	expect_recv(__LINE__, &ra, 33, 40, b->qp->qp_num, "127.0.0.1", GROUP);
	/* ... and received none of the five. */
	CHECK(!poll_wc(rb.cq, &wc, QUIET_MS));
	/* Nothing is left for a either (one copy per datagram). */
	CHECK(!poll_wc(ra.cq, &wc, 50));

	ibv_destroy_ah(aha);
	ibv_destroy_ah(ahb);
	ibv_destroy_ah(ahs);
	CHECK_OK(rdma_leave_multicast(a, (struct sockaddr *)&(struct sockaddr_in){
		.sin_family = AF_INET, .sin_addr.s_addr = inet_addr(GROUP) }));
	free_ud(a, &ra);
	free_ud(b, &rb);
	free_ud(snd, &rs);
	CHECK_OK(rdma_destroy_id(a));
	CHECK_OK(rdma_destroy_id(b));
	CHECK_OK(rdma_destroy_id(snd));
	CHECK(channel_quiet(ch, 50));
	rdma_destroy_event_channel(ch);
}

/* Leaving detaches the QP: nothing more arrives; joining again restores
 * delivery. Leaving a group not joined is EADDRNOTAVAIL. */
static void case_mcast_leave(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in g = addr4(GROUP, 0);
	struct udres ra, rs;
	struct rdma_cm_id *a, *snd;
	struct ibv_ah *aha, *ahs;
	struct ibv_wc wc;

	CHECK(ch);
	a = mc_node(ch, &ra, 8);
	snd = mc_node(ch, &rs, 0);
	aha = join_at(__LINE__, ch, a, &ra, RDMA_MC_JOIN_FLAG_FULLMEMBER, 1, NULL);
	ahs = join_at(__LINE__, ch, snd, &rs, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, 1, NULL);
	ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 64, 1);
	expect_recv(__LINE__, &ra, 64, 1, snd->qp->qp_num, "127.0.0.1", GROUP);

	CHECK_OK(rdma_leave_multicast(a, (struct sockaddr *)&g));
	CHECK_ERR(rdma_leave_multicast(a, (struct sockaddr *)&g), EADDRNOTAVAIL);
	ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 64, 2);
	CHECK(!poll_wc(ra.cq, &wc, QUIET_MS));

	/* Joined twice, left once: still a member. */
	ibv_destroy_ah(aha);
	aha = join_at(__LINE__, ch, a, &ra, RDMA_MC_JOIN_FLAG_FULLMEMBER, 0, NULL);
	ibv_destroy_ah(aha);
	aha = join_at(__LINE__, ch, a, &ra, RDMA_MC_JOIN_FLAG_FULLMEMBER, 1, NULL);
	CHECK_OK(rdma_leave_multicast(a, (struct sockaddr *)&g));
	ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 64, 3);
	expect_recv(__LINE__, &ra, 64, 3, snd->qp->qp_num, "127.0.0.1", GROUP);
	CHECK_OK(rdma_leave_multicast(a, (struct sockaddr *)&g));
	ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 64, 4);
	CHECK(!poll_wc(ra.cq, &wc, QUIET_MS));

	ibv_destroy_ah(aha);
	ibv_destroy_ah(ahs);
	free_ud(a, &ra);
	free_ud(snd, &rs);
	CHECK_OK(rdma_destroy_id(a));
	CHECK_OK(rdma_destroy_id(snd));
	rdma_destroy_event_channel(ch);
}

/* What a join refuses, synchronously, and what it reports as an event. */
static void case_mcast_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in g = addr4(GROUP, 0), any = addr4("0.0.0.0", 0);
	struct sockaddr_in uni = addr4("127.0.0.1", 0);
	struct rdma_cm_join_mc_attr_ex ja;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int ctx;

	CHECK(ch);
	/* A connected (TCP) id, bound and resolved. */
	id = client_ps(ch, 9, RDMA_PS_TCP);
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&g, NULL), EINVAL);
	CHECK_ERR(rdma_leave_multicast(id, (struct sockaddr *)&g), EADDRNOTAVAIL);
	CHECK_OK(rdma_destroy_id(id));

	/* A datagram id without a device: not bound, then bound to the wildcard. */
	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP));
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&g, NULL), EINVAL);
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&any));
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&g, NULL), EINVAL);
	CHECK_OK(rdma_destroy_id(id));

	CHECK_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&uni));
	CHECK_ERR(rdma_join_multicast(id, NULL, NULL), EINVAL);
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&any, NULL), EINVAL);
	CHECK_ERR(rdma_leave_multicast(id, NULL), EINVAL);
	CHECK_ERR(rdma_leave_multicast(id, (struct sockaddr *)&g), EADDRNOTAVAIL);
	/* rdma_join_multicast_ex's attribute checks, in rdma-core's order. */
	memset(&ja, 0, sizeof(ja));
	ja.addr = (struct sockaddr *)&g;
	ja.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	CHECK_ERR(rdma_join_multicast_ex(id, &ja, NULL), EOPNOTSUPP);
	ja.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	CHECK_ERR(rdma_join_multicast_ex(id, &ja, NULL), EINVAL);
	ja.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	CHECK_ERR(rdma_join_multicast_ex(id, &ja, NULL), EINVAL);
	ja.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ja.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	CHECK_ERR(rdma_join_multicast_ex(id, &ja, NULL), EINVAL);
	CHECK(channel_quiet(ch, 50));

	/* A unicast address is no group: MULTICAST_ERROR, with the context. */
	CHECK_OK(rdma_join_multicast(id, (struct sockaddr *)&uni, &ctx));
	ev = expect(ch, RDMA_CM_EVENT_MULTICAST_ERROR);
	CHECK_EQ(ev->status, -EINVAL);
	CHECK(ev->param.ud.private_data == &ctx);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_leave_multicast(id, (struct sockaddr *)&uni));

	/* An IPv4 group written IPv4-mapped is the same group. */
	{
		struct sockaddr_in6 m6;
		union ibv_gid mg = gid4("239.77.1.9");

		memset(&m6, 0, sizeof(m6));
		m6.sin6_family = AF_INET6;
		CHECK(inet_pton(AF_INET6, "::ffff:239.77.1.9", &m6.sin6_addr) == 1);
		CHECK_OK(rdma_join_multicast(id, (struct sockaddr *)&m6, NULL));
		ev = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, mg.raw, 16));
		CHECK_OK(rdma_ack_cm_event(ev));
		CHECK_OK(rdma_leave_multicast(id, (struct sockaddr *)&m6));
	}

	/* Joined without a QP: the event comes, nothing is attached later. */
	CHECK_OK(rdma_join_multicast(id, (struct sockaddr *)&g, &ctx));
	ev = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(ev->status, 0);
	CHECK_OK(rdma_ack_cm_event(ev));
	CHECK_OK(rdma_leave_multicast(id, (struct sockaddr *)&g));
	CHECK_OK(rdma_destroy_id(id));

	/* Synchronous ids wait for the join's event. */
	CHECK_OK(rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(id, (struct sockaddr *)&uni));
	CHECK_OK(rdma_join_multicast(id, (struct sockaddr *)&g, &ctx));
	CHECK(id->event != NULL);
	CHECK_EQ(id->event->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(id->event->param.ud.private_data == &ctx);
	CHECK_ERR(rdma_join_multicast(id, (struct sockaddr *)&uni, NULL), EINVAL);
	CHECK_EQ(id->event->event, RDMA_CM_EVENT_MULTICAST_ERROR);
	CHECK_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* ---- IPv6 -------------------------------------------------------------------- */

static struct sockaddr_in6 addr6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 six;

	memset(&six, 0, sizeof(six));
	six.sin6_family = AF_INET6;
	six.sin6_port = htons(port);
	CHECK(inet_pton(AF_INET6, ip, &six.sin6_addr) == 1);
	return six;
}

/* A receive of `len` bytes of pattern `seed` whose GRH is an IPv6 header
 * to `dst`, from `src` unless that is NULL. */
static void expect_recv6(int line, struct udres *r, int len, int seed, const char *src,
			 const char *dst)
{
	struct in6_addr s, d;
	struct ibv_wc wc;
	const uint8_t *p;

	if (!poll_wc(r->cq, &wc, EVENT_MS))
		failf(line, "no receive within %d ms", EVENT_MS);
	if (wc.status != IBV_WC_SUCCESS || wc.byte_len != (uint32_t)(GRH + len) ||
	    !(wc.wc_flags & IBV_WC_GRH))
		failf(line, "receive status %s byte_len %u flags %#x",
		      ibv_wc_status_str(wc.status), wc.byte_len, wc.wc_flags);
	p = r->buf + wc.wr_id * SLOT;
	CHECK(inet_pton(AF_INET6, dst, &d) == 1);
	CHECK(!src || inet_pton(AF_INET6, src, &s) == 1);
	if (p[0] >> 4 != 6 || (src && memcmp(p + 8, &s, 16)) || memcmp(p + 24, &d, 16))
failf(line, "GRH: not an IPv6 header from %s to %s", src ? src : "?", dst);
	if (!filled(p + GRH, len, seed))
		failf(line, "payload of message %d differs", seed);
}

/* Over ::1: the SIDR exchange, a datagram with the event's AH, and an IPv6
 * multicast group (its MGID is the group's address itself). */
static void case_ipv6(void)
{
	struct sockaddr_in6 lo = addr6("::1", 0), grp = addr6("ff0e::77:2", 0);
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *cid, *sid, *m, *snd;
	struct rdma_cm_event *ev;
	struct udres cr, sr, mr, rs;
	struct ibv_ah *ah, *ahs;
	struct in6_addr want;
	int s6 = socket(AF_INET6, SOCK_STREAM, 0);

	if (s6 < 0 || bind(s6, (struct sockaddr *)&lo, sizeof(lo))) {
		printf("  (no IPv6 loopback here: nothing to check)\n");
		return;
	}
	close(s6);
	ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK_OK(rdma_create_id(ch, &lid, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(lid, (struct sockaddr *)&lo));
	CHECK_OK(rdma_listen(lid, 2));
	lo.sin6_port = rdma_get_src_port(lid);
	CHECK_OK(rdma_create_id(ch, &cid, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&lo, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_OK(rdma_resolve_route(cid, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	make_ud(cid, &cr);
	CHECK_OK(rdma_connect(cid, NULL));
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK_OK(rdma_ack_cm_event(ev));
	make_ud(sid, &sr);
	post_recvs(sid->qp, &sr, 2);
	CHECK_OK(rdma_accept(sid, NULL));
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == cid);
	CHECK_EQ(ev->param.ud.qp_num, sid->qp->qp_num);
	CHECK(inet_pton(AF_INET6, "::1", &want) == 1);
	CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, &want, 16));
	ah = ibv_create_ah(cr.pd, &ev->param.ud.ah_attr);
	CHECK(ah);
	CHECK_OK(rdma_ack_cm_event(ev));
	ud_send(cid->qp, &cr, ah, sid->qp->qp_num, RDMA_UDP_QKEY, 128, 6);
	expect_recv6(__LINE__, &sr, 128, 6, "::1", "::1");

	/* Multicast on an IPv6 group. */
	lo.sin6_port = 0;
	CHECK_OK(rdma_create_id(ch, &m, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(m, (struct sockaddr *)&lo));
	make_ud(m, &mr);
	post_recvs(m->qp, &mr, 2);
	CHECK_OK(rdma_create_id(ch, &snd, NULL, RDMA_PS_UDP));
	CHECK_OK(rdma_bind_addr(snd, (struct sockaddr *)&lo));
	make_ud(snd, &rs);
	CHECK_OK(rdma_join_multicast(m, (struct sockaddr *)&grp, NULL));
	ev = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, &grp.sin6_addr, 16));
	CHECK_OK(rdma_ack_cm_event(ev));
	{
		struct rdma_cm_join_mc_attr_ex ja = {
			.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
			.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
			.addr = (struct sockaddr *)&grp,
		};

		CHECK_OK(rdma_join_multicast_ex(snd, &ja, NULL));
	}
	ev = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(ev->param.ud.qp_num, 0xffffff);
	ahs = ibv_create_ah(rs.pd, &ev->param.ud.ah_attr);
	CHECK(ahs);
	CHECK_OK(rdma_ack_cm_event(ev));
	ud_send(snd->qp, &rs, ahs, 0xffffff, RDMA_UDP_QKEY, 90, 8);
	/* (rsw_lo carries an IPv6 group as an IPv4 one, so the source the
	 * GRH names is not ::1: only the destination is checked.) */
	expect_recv6(__LINE__, &mr, 90, 8, NULL, "ff0e::77:2");
	CHECK_OK(rdma_leave_multicast(m, (struct sockaddr *)&grp));

	ibv_destroy_ah(ah);
	ibv_destroy_ah(ahs);
	free_ud(cid, &cr);
	free_ud(sid, &sr);
	free_ud(m, &mr);
	free_ud(snd, &rs);
	CHECK_OK(rdma_destroy_id(cid));
	CHECK_OK(rdma_destroy_id(sid));
	CHECK_OK(rdma_destroy_id(m));
	CHECK_OK(rdma_destroy_id(snd));
	CHECK_OK(rdma_destroy_id(lid));
	rdma_destroy_event_channel(ch);
}

/* ---- runner --------------------------------------------------------------- */

static const struct cm_case cases[] = {
	{ "sidr_established", case_sidr_established },
	{ "sidr_reject", case_sidr_reject },
	{ "sidr_nobody", case_sidr_nobody },
	{ "qp_types", case_qp_types },
	{ "sync_endpoints", case_sync_endpoints },
	{ "mcast_join", case_mcast_join },
	{ "mcast_leave", case_mcast_leave },
	{ "mcast_errors", case_mcast_errors },
	{ "ipv6", case_ipv6 },
};

int main(int argc, char **argv)
{
	return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
