/*
 * A small RC exchange for the verbs tracer (ctests/tests/verbs_trace.sh
 * runs it with and without RDMA_TRACE and checks the trace): a failing
 * ibv_reg_mr (EINVAL), a SEND, an RDMA WRITE with a wrong rkey (a
 * REM_ACCESS_ERR completion), a SEND through ibv_wr_* polled with
 * ibv_start_poll, the destroy verbs, and an address resolution
 * through librdmacm (one CM event). It prints, as one JSON object, the
 * values the trace must carry.
 */
#include <poll.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "common/verbs_util.c"

int main(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_current_case = "trace_rc";
	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, VT_ACCESS_ALL);
	vt_fill(s.p, s.len, 1);

	/* Remote write without local write: EINVAL. */
	errno = 0;
	struct ibv_mr *bad = ibv_reg_mr(e.pd, s.p, 4096, IBV_ACCESS_REMOTE_WRITE);
	CHECK(bad == NULL);
	CHECK_EQ(errno, EINVAL);

	vt_post_recv(p.b, 0xb0b, r.p, 2048, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 1000, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(0xa0a, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 1000);

	uint32_t bad_rkey = r.mr->rkey ^ 0x00f0f0f0;
	struct ibv_sge sge2 = vt_sge(s.p, 64, s.mr->lkey);
	struct ibv_send_wr w2 = vt_send_wr(0xbad, IBV_WR_RDMA_WRITE, &sge2,
					   IBV_SEND_SIGNALED);
	w2.wr.rdma.remote_addr = (uintptr_t)r.p;
	w2.wr.rdma.rkey = bad_rkey;
	vt_post_send(p.a, &w2);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(wc.wr_id, 0xbad);

	/* The extended calls: a SEND built with ibv_wr_*, completions read
	 * with ibv_start_poll from an ibv_cq_ex. */
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_cq_ex *cx = ibv_create_cq_ex(e.ctx, &ca);
	CHECK(cx != NULL);
	struct vt_qp_opts o;
	vt_default_opts(&o);
	o.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *xa = vt_create_qp(e.pd, ibv_cq_ex_to_cq(cx), ibv_cq_ex_to_cq(cx), &o, NULL);
	struct ibv_qp *xb = vt_create_qp(e.pd, ibv_cq_ex_to_cq(cx), ibv_cq_ex_to_cq(cx), &o, NULL);
	vt_qp_connect(xa, xb->qp_num, &e.gid, &o);
	vt_qp_connect(xb, xa->qp_num, &e.gid, &o);
	vt_post_recv(xb, 0xc0c, r.p, 2048, r.mr->lkey);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(xa);
	CHECK(qx != NULL);
	ibv_wr_start(qx);
	qx->wr_id = 0xd0d;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, s.mr->lkey, (uintptr_t)s.p, 300);
	CHECK(ibv_wr_complete(qx) == 0);
	struct ibv_poll_cq_attr pa = { 0 };
	uint64_t deadline = vt_now_ms() + 10000;
	for (int got = 0; got < 2;) {
		int rc = ibv_start_poll(cx, &pa);
		if (rc == ENOENT) {
			CHECK(vt_now_ms() < deadline);
			continue;
		}
		CHECK(rc == 0);
		CHECK_EQ(cx->status, IBV_WC_SUCCESS);
		got++;
		ibv_end_poll(cx);
	}

	/* Verbs the header inlines (they reach the provider through the
	 * context's tables): arming a CQ, a memory window, device memory. */
	CHECK(ibv_req_notify_cq(p.cq_b, 0) == 0);
	struct ibv_mw *mw = ibv_alloc_mw(e.pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	CHECK(ibv_dealloc_mw(mw) == 0);
	struct ibv_alloc_dm_attr da = { .length = 256 };
	struct ibv_dm *dm = ibv_alloc_dm(e.ctx, &da);
	CHECK(dm != NULL);
	CHECK(ibv_memcpy_to_dm(dm, 0, s.p, 64) == 0);
	CHECK(ibv_free_dm(dm) == 0);
	struct ibv_port_attr pattr;
	CHECK(ibv_query_port(e.ctx, 1, &pattr) == 0);

	/* An rsocket, a non-blocking read with nothing there, and its close. */
	int rs = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rs >= 0);
	char rb[4];
	CHECK(rrecv(rs, rb, sizeof(rb), MSG_DONTWAIT) == -1);
	CHECK(rclose(rs) == 0);

	/* One CM event: resolving 127.0.0.1. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL);
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 5000) == 1);
	struct rdma_cm_event *ev = NULL;
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);

	printf("{\"pd\":\"%p\",\"qp_a\":\"%p\",\"qp_b\":\"%p\",\"qpn_a\":%u,\"qpn_b\":%u,"
	       "\"cq_a\":\"%p\",\"cq_b\":\"%p\",\"s_lkey\":\"0x%x\",\"r_lkey\":\"0x%x\","
	       "\"bad_rkey\":\"0x%x\",\"r_addr\":\"%p\",\"cm_id\":\"%p\",\"qp_x\":\"%p\",\"cq_x\":\"%p\","
	       "\"mw\":\"%p\",\"dm\":\"%p\",\"ctx\":\"%p\",\"rs\":%d}\n",
	       (void *)e.pd, (void *)p.a, (void *)p.b, p.a->qp_num, p.b->qp_num,
	       (void *)p.cq_a, (void *)p.cq_b, s.mr->lkey, r.mr->lkey, bad_rkey,
	       (void *)r.p, (void *)id, (void *)xa, (void *)cx,
	       (void *)mw, (void *)dm, (void *)e.ctx, rs);

	CHECK(ibv_destroy_qp(xa) == 0);
	CHECK(ibv_destroy_qp(xb) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cx)) == 0);
	CHECK(ibv_destroy_qp(p.a) == 0);
	CHECK(ibv_destroy_qp(p.b) == 0);
	CHECK(ibv_dereg_mr(s.mr) == 0);
	CHECK(ibv_dereg_mr(r.mr) == 0);
	CHECK(ibv_destroy_cq(p.cq_a) == 0);
	CHECK(ibv_destroy_cq(p.cq_b) == 0);
	CHECK(ibv_dealloc_pd(e.pd) == 0);
	CHECK(ibv_close_device(e.ctx) == 0);
	return 0;
}
