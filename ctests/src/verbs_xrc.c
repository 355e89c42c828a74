/*
 * XRC: domains (the fd/oflags rules, close while in use), XRC SRQs and
 * ibv_get_srq_num, XRC send and receive QPs, requests landing in the SRQ
 * they name (its CQ, its PD for RDMA), a wrong SRQ number, the queues XRC
 * QPs do not have, and ibv_wr_set_xrc_srqn.
 */
#include "common/verbs_util.c"

#include <sys/stat.h>

struct xrc {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_xrcd *xrcd;
	struct ibv_cq *scq, *rcq;
	struct ibv_srq *srq;
	uint32_t srqn;
	struct ibv_qp *ini, *tgt;
	struct vt_buf s, r;
};

static struct ibv_srq *xrc_srq(struct vt_env *e, struct ibv_xrcd *xrcd,
			       struct ibv_cq *cq, struct ibv_pd *pd)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
		      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = xrcd;
	a.cq = cq;
	a.pd = pd;
	return CHECK_PTR(ibv_create_srq_ex(e->ctx, &a));
}

static void xrc_open(struct xrc *x)
{
	struct ibv_qp_init_attr_ex a;

	memset(x, 0, sizeof(*x));
	vt_env_open(&x->e);
	CHECK(x->e.dev.device_cap_flags & IBV_DEVICE_XRC);
	x->xrcd = CHECK_PTR(vt_open_xrcd(x->e.ctx, -1, O_CREAT));
	x->scq = CHECK_PTR(ibv_create_cq(x->e.ctx, 32, NULL, NULL, 0));
	x->rcq = CHECK_PTR(ibv_create_cq(x->e.ctx, 32, NULL, NULL, 0));
	x->srq = xrc_srq(&x->e, x->xrcd, x->rcq, x->e.pd);
	CHECK_OK(ibv_get_srq_num(x->srq, &x->srqn));

	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x->xrcd;
	x->tgt = CHECK_PTR(ibv_create_qp_ex(x->e.ctx, &a));
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = x->scq;
	a.cap.max_send_wr = 16;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = x->e.pd;
	x->ini = CHECK_PTR(ibv_create_qp_ex(x->e.ctx, &a));
	vt_xrc_modify(x->tgt, x->ini->qp_num, &x->e, 1);
	vt_xrc_modify(x->ini, x->tgt->qp_num, &x->e, 0);
	vt_buf_reg(&x->e, &x->s, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&x->e, &x->r, 8192, VT_ACCESS_ALL);
	vt_fill(x->s.p, 8192, 8);
}

static void post_xsrq(struct ibv_srq *srq, uint64_t id, void *p, uint32_t len,
		      uint32_t lkey)
{
	struct ibv_sge sge = vt_sge(p, len, lkey);
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	CHECK_OK(ibv_post_srq_recv(srq, &w, &bad));
}

static void xsend(struct xrc *x, uint64_t id, enum ibv_wr_opcode op,
		  uint32_t srqn, size_t off, uint32_t len, void *raddr,
		  uint32_t rkey)
{
	struct ibv_sge sge = vt_sge(x->s.p + off, len, x->s.mr->lkey);
	struct ibv_send_wr w = vt_send_wr(id, op, &sge, IBV_SEND_SIGNALED);

	w.qp_type.xrc.remote_srqn = srqn;
	w.wr.rdma.remote_addr = (uintptr_t)raddr;
	w.wr.rdma.rkey = rkey;
	vt_post_send(x->ini, &w);
}

static void xrcd_open_rules(void)
{
	struct vt_env e;
	char path[] = "/tmp/rsw-xrcd-XXXXXX";

	vt_env_open(&e);
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	/* No domain for the file yet, and no O_CREAT. */
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, fd, 0), EAGAIN);
	struct ibv_xrcd *a = CHECK_PTR(vt_open_xrcd(e.ctx, fd, O_CREAT));
	/* The same file: the same domain, with or without O_CREAT. */
	struct ibv_xrcd *b = CHECK_PTR(vt_open_xrcd(e.ctx, fd, 0));
	struct ibv_xrcd *c = CHECK_PTR(vt_open_xrcd(e.ctx, fd, O_CREAT));
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, fd, O_CREAT | O_EXCL), EINVAL);
	struct ibv_xrcd_init_attr bad;
	memset(&bad, 0, sizeof(bad));
	bad.comp_mask = IBV_XRCD_INIT_ATTR_FD;
	bad.fd = -1;
	CHECK_NULL_ERRNO(ibv_open_xrcd(e.ctx, &bad), EINVAL);

	/* An SRQ made through one handle is in the domain all three name. */
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 4, NULL, NULL, 0));
	struct ibv_srq *srq = xrc_srq(&e, a, cq, e.pd);
	CHECK_OK(ibv_close_xrcd(b));
	CHECK_OK(ibv_close_xrcd(c));
	/* The last handle of a domain still in use stays open. */
	CHECK_RET(ibv_close_xrcd(a), EBUSY);
	CHECK_RET(ibv_destroy_cq(cq), EBUSY);
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_close_xrcd(a));
	CHECK_OK(ibv_destroy_cq(cq));
	/* Its last handle closed, the file's domain is gone. */
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, fd, 0), EAGAIN);
	close(fd);
}

static void xrc_send_lands_in_named_srq(void)
{
	struct xrc x;
	struct ibv_wc wc;

	xrc_open(&x);
	/* A second SRQ in the domain, with its own CQ. */
	struct ibv_cq *rcq2 = CHECK_PTR(ibv_create_cq(x.e.ctx, 8, NULL, NULL, 0));
	struct ibv_srq *srq2 = xrc_srq(&x.e, x.xrcd, rcq2, x.e.pd);
	uint32_t srqn2;
	CHECK_OK(ibv_get_srq_num(srq2, &srqn2));
	CHECK(srqn2 != x.srqn);

	post_xsrq(x.srq, 1, x.r.p, 1024, x.r.mr->lkey);
	post_xsrq(srq2, 2, x.r.p + 1024, 1024, x.r.mr->lkey);
	xsend(&x, 10, IBV_WR_SEND, srqn2, 0, 300, NULL, 0);
	xsend(&x, 11, IBV_WR_SEND, x.srqn, 512, 200, NULL, 0);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);

	vt_poll(rcq2, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(wc.byte_len, 300);
	CHECK_EQ(wc.qp_num, x.tgt->qp_num);
	CHECK_EQ(wc.src_qp, x.ini->qp_num);
	CHECK_MEM(x.r.p + 1024, x.s.p, 300);
	vt_poll(x.rcq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.byte_len, 200);
	CHECK_MEM(x.r.p, x.s.p + 512, 200);
	CHECK_CQ_EMPTY(rcq2);
	CHECK_CQ_EMPTY(x.rcq);
}

/* RDMA through XRC is checked against the named SRQ's PD. */
static void xrc_rdma_uses_srq_pd(void)
{
	struct xrc x;
	struct ibv_wc wc;

	xrc_open(&x);
	xsend(&x, 20, IBV_WR_RDMA_WRITE, x.srqn, 0, 256, x.r.p + 4096,
	      x.r.mr->rkey);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_MEM(x.r.p + 4096, x.s.p, 256);
	xsend(&x, 21, IBV_WR_RDMA_READ, x.srqn, 1024, 128, x.r.p + 4096,
	      x.r.mr->rkey);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	CHECK_MEM(x.s.p + 1024, x.r.p + 4096, 128);

	/* An SRQ on another PD: the same rkey is refused. */
	struct ibv_pd *pd2 = CHECK_PTR(ibv_alloc_pd(x.e.ctx));
	struct ibv_srq *other = xrc_srq(&x.e, x.xrcd, x.rcq, pd2);
	uint32_t n2;
	CHECK_OK(ibv_get_srq_num(other, &n2));
	xsend(&x, 22, IBV_WR_RDMA_WRITE, n2, 0, 64, x.r.p, x.r.mr->rkey);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
}

/* A number that is no SRQ of the receiver's domain: an invalid request. */
static void xrc_unknown_srqn(void)
{
	struct xrc x;
	struct ibv_wc wc;

	xrc_open(&x);
	/* An XRC SRQ of another domain does not count either. */
	struct ibv_xrcd *d2 = CHECK_PTR(vt_open_xrcd(x.e.ctx, -1, O_CREAT));
	struct ibv_srq *foreign = xrc_srq(&x.e, d2, x.rcq, x.e.pd);
	uint32_t fn;
	CHECK_OK(ibv_get_srq_num(foreign, &fn));
	post_xsrq(foreign, 5, x.r.p, 64, x.r.mr->lkey);
	xsend(&x, 30, IBV_WR_SEND, fn, 0, 16, NULL, 0);
	vt_poll(x.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
	CHECK_EQ(wc.wr_id, 30);
	CHECK_CQ_EMPTY(x.rcq);
}

/* The queues XRC QPs do not have; the new post-send API. */
static void xrc_queues_and_wr_api(void)
{
	struct xrc x;
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	xrc_open(&x);
	struct ibv_sge sge = vt_sge(x.r.p, 16, x.r.mr->lkey);
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *rbad;
	CHECK_RET(ibv_post_recv(x.ini, &rw, &rbad), EINVAL);
	CHECK_RET(ibv_post_recv(x.tgt, &rw, &rbad), EINVAL);
	struct ibv_send_wr sw = vt_send_wr(1, IBV_WR_SEND, &sge, 0);
	struct ibv_send_wr *sbad;
	CHECK_RET(ibv_post_send(x.tgt, &sw, &sbad), EINVAL);
	CHECK_OK(ibv_query_qp(x.tgt, &at, IBV_QP_CAP, &ia));
	CHECK_EQ(ia.qp_type, IBV_QPT_XRC_RECV);
	CHECK_EQ(at.cap.max_send_wr, 0);
	CHECK_EQ(at.cap.max_recv_wr, 0);
	CHECK_OK(ibv_query_qp(x.ini, &at, IBV_QP_CAP, &ia));
	CHECK_EQ(ia.qp_type, IBV_QPT_XRC_SEND);
	CHECK_EQ(at.cap.max_recv_wr, 0);
	CHECK_GE(at.cap.max_send_wr, 16);
	/* The XRC SRQ's CQ and domain are busy while they are in use. */
	CHECK_RET(ibv_close_xrcd(x.xrcd), EBUSY);

	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = x.scq;
	a.cap.max_send_wr = 4;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = x.e.pd;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *ini2 = CHECK_PTR(ibv_create_qp_ex(x.e.ctx, &a));
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x.xrcd;
	struct ibv_qp *tgt2 = CHECK_PTR(ibv_create_qp_ex(x.e.ctx, &a));
	vt_xrc_modify(tgt2, ini2->qp_num, &x.e, 1);
	vt_xrc_modify(ini2, tgt2->qp_num, &x.e, 0);
	post_xsrq(x.srq, 9, x.r.p + 2048, 512, x.r.mr->lkey);
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(ini2));
	ibv_wr_start(qx);
	qx->wr_id = 40;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, x.srqn);
	ibv_wr_set_sge(qx, x.s.mr->lkey, (uintptr_t)x.s.p + 100, 50);
	CHECK_OK(ibv_wr_complete(qx));
	vt_poll(x.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 40);
	vt_poll(x.rcq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 9);
	CHECK_EQ(wc.qp_num, tgt2->qp_num);
	CHECK_MEM(x.r.p + 2048, x.s.p + 100, 50);
}

/*
 * ibv_open_qp: another handle to an XRC receive QP of the domain, by
 * number. Modify and query through it act on the QP; closing it leaves
 * the QP working. Wrong domain or number: EINVAL.
 */
static void xrc_open_qp(void)
{
	struct vt_env e;
	struct ibv_wc wc;
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;

	vt_env_open(&e);
	struct ibv_xrcd *xrcd = CHECK_PTR(vt_open_xrcd(e.ctx, -1, O_CREAT));
	struct ibv_xrcd *other = CHECK_PTR(vt_open_xrcd(e.ctx, -1, O_CREAT));
	struct ibv_cq *scq = CHECK_PTR(ibv_create_cq(e.ctx, 8, NULL, NULL, 0));
	struct ibv_cq *rcq = CHECK_PTR(ibv_create_cq(e.ctx, 8, NULL, NULL, 0));
	struct ibv_srq *srq = xrc_srq(&e, xrcd, rcq, e.pd);
	uint32_t srqn;
	CHECK_OK(ibv_get_srq_num(srq, &srqn));
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = xrcd;
	struct ibv_qp *tgt = CHECK_PTR(ibv_create_qp_ex(e.ctx, &a));
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = scq;
	a.cap.max_send_wr = 4;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = e.pd;
	struct ibv_qp *ini = CHECK_PTR(ibv_create_qp_ex(e.ctx, &a));

	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			     IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT,
		.qp_num = tgt->qp_num, .xrcd = other, .qp_context = &oa,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	CHECK_NULL_ERRNO(ibv_open_qp(e.ctx, &oa), EINVAL);
	oa.xrcd = xrcd;
	oa.qp_num = tgt->qp_num ^ 0x100;
	CHECK_NULL_ERRNO(ibv_open_qp(e.ctx, &oa), EINVAL);
	oa.qp_num = tgt->qp_num;
	struct ibv_qp *h = CHECK_PTR(ibv_open_qp(e.ctx, &oa));
	CHECK(h != tgt);
	CHECK_EQ(h->qp_num, tgt->qp_num);
	CHECK(h->qp_context == &oa);

	/* Connected through the opened handle. */
	vt_xrc_modify(h, ini->qp_num, &e, 1);
	vt_xrc_modify(ini, tgt->qp_num, &e, 0);
	CHECK_OK(ibv_query_qp(tgt, &at, IBV_QP_STATE, &ia));
	CHECK_EQ(at.qp_state, IBV_QPS_RTS);
	CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
	CHECK_EQ(at.qp_state, IBV_QPS_RTS);

	struct vt_buf s, r;
	vt_buf_reg(&e, &s, 256, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 256, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, 256, 6);
	/* Closing the handle leaves the QP as it was. */
	CHECK_OK(ibv_destroy_qp(h));
	post_xsrq(srq, 7, r.p, 256, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 100, s.mr->lkey);
	struct ibv_send_wr w = vt_send_wr(8, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	w.qp_type.xrc.remote_srqn = srqn;
	vt_post_send(ini, &w);
	vt_poll(scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(rcq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.qp_num, tgt->qp_num);
	CHECK_MEM(r.p, s.p, 100);
}

static const struct vt_case cases[] = {
	VT_CASE(xrc_open_qp),
	VT_CASE(xrcd_open_rules),	VT_CASE(xrc_send_lands_in_named_srq),
	VT_CASE(xrc_rdma_uses_srq_pd),	VT_CASE(xrc_unknown_srqn),
	VT_CASE(xrc_queues_and_wr_api),
};
VT_MAIN(cases)
