/*
 * Objects whose `handle` (or `context`) field the program overwrote. Over
 * the kernel, rdma-core sends what it finds in those fields and uverbs
 * finds no such object: destroys and the ioctl creates (QP, SRQ) fail
 * with ENOENT, the write() commands (modify, query, reg_mr, alloc_mw,
 * create_ah, resize_cq, req_notify_cq, attach_mcast) with EINVAL, and
 * nothing is destroyed or created (device memory too: its free and
 * reg_dm_mr are ioctls). Each case checks those errnos, then
 * puts the field back and checks that the object still works and can be
 * destroyed (a refused destroy must not have freed anything: the
 * program's later cleanup would touch freed memory).
 */
#include "common/verbs_util.c"

#define SPOIL 0x5a5a5a5au

/* An RDMA WRITE from a to b through the pair; checks the bytes landed. */
static void write_works(struct vt_pair *p, struct vt_buf *src,
			struct vt_buf *dst, unsigned seed)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(src->p, 256, src->mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(seed, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);

	vt_fill(src->p, 256, seed);
	memset(dst->p, 0, 256);
	wr.wr.rdma.remote_addr = (uintptr_t)dst->p;
	wr.wr.rdma.rkey = dst->mr->rkey;
	vt_post_send(p->a, &wr);
	vt_poll(p->cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_MEM(dst->p, src->p, 256);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq,
			    struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.srq = srq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	return ibv_create_qp(pd, &ia);
}

static struct ibv_srq *basic_srq(struct ibv_pd *pd)
{
	struct ibv_srq_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = 4;
	ia.attr.max_sge = 1;
	return ibv_create_srq(pd, &ia);
}

static struct ibv_ah *lo_ah(struct vt_env *e, struct ibv_pd *pd)
{
	struct ibv_ah_attr a;

	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.grh.dgid = e->gid;
	a.port_num = VT_PORT;
	return ibv_create_ah(pd, &a);
}

static void pd_handle(void)
{
	struct vt_env e;

	vt_env_open(&e);
	struct ibv_pd *pd = CHECK_PTR(ibv_alloc_pd(e.ctx));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	void *buf = vt_alloc(4096);
	uint32_t h = pd->handle;

	pd->handle = h ^ SPOIL;
	CHECK_RET(ibv_dealloc_pd(pd), ENOENT);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE),
			 EINVAL);
	CHECK_NULL_ERRNO(ibv_alloc_mw(pd, IBV_MW_TYPE_2), EINVAL);
	CHECK_NULL_ERRNO(lo_ah(&e, pd), EINVAL);
	CHECK_NULL_ERRNO(rc_qp(pd, cq, NULL), ENOENT);
	CHECK_NULL_ERRNO(basic_srq(pd), ENOENT);

	/* Nothing was made on it, nothing was freed: it works and goes. */
	pd->handle = h;
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_mr(pd, buf, 4096,
						 IBV_ACCESS_LOCAL_WRITE));
	struct ibv_qp *qp = CHECK_PTR(rc_qp(pd, cq, NULL));
	CHECK_RET(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_RET(ibv_dealloc_pd(pd), EINVAL);
	CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
}

/* An object given through another open context than its own. */
static void pd_other_context(void)
{
	struct vt_env e;

	vt_env_open(&e);
	struct ibv_context *other = vt_open_lo();
	struct ibv_pd *pd = CHECK_PTR(ibv_alloc_pd(e.ctx));
	struct ibv_cq *cq2 = CHECK_PTR(ibv_create_cq(other, 16, NULL, NULL, 0));

	pd->context = other;
	CHECK_RET(ibv_dealloc_pd(pd), ENOENT);
	pd->context = e.ctx;

	/* A QP made in `other` on a PD of e.ctx: the PD is unknown there. */
	struct ibv_qp_init_attr_ex ia;
	memset(&ia, 0, sizeof(ia));
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	ia.pd = pd;
	ia.send_cq = ia.recv_cq = cq2;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(other, &ia), ENOENT);

	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_destroy_cq(cq2));
	CHECK_OK(ibv_close_device(other));
}

static void cq_handle(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf src, dst;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &src, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &dst, 4096, VT_ACCESS_ALL);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	uint32_t h = cq->handle;

	cq->handle = h ^ SPOIL;
	CHECK_RET(ibv_destroy_cq(cq), ENOENT);
	CHECK_RET(ibv_resize_cq(cq, 64), EINVAL);
	CHECK_RET(ibv_req_notify_cq(cq, 0), EINVAL);
	CHECK_NULL_ERRNO(rc_qp(e.pd, cq, NULL), ENOENT);
	cq->handle = h;
	CHECK_OK(ibv_req_notify_cq(cq, 0));
	CHECK_OK(ibv_resize_cq(cq, 64));
	CHECK_OK(ibv_destroy_cq(cq));

	/* A CQ in use, whose destroy was refused, still takes completions. */
	h = p.cq_a->handle;
	p.cq_a->handle = h + 1;
	CHECK_RET(ibv_destroy_cq(p.cq_a), ENOENT);
	p.cq_a->handle = h;
	write_works(&p, &src, &dst, 1);
}

static void qp_handle(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf src, dst;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &src, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &dst, 4096, VT_ACCESS_ALL);
	uint32_t h = p.a->handle;

	p.a->handle = h ^ SPOIL;
	memset(&attr, 0, sizeof(attr));
	CHECK_RET(ibv_query_qp(p.a, &attr, IBV_QP_STATE, &init), EINVAL);
	attr.qp_state = IBV_QPS_ERR;
	CHECK_RET(ibv_modify_qp(p.a, &attr, IBV_QP_STATE), EINVAL);
	CHECK_RET(ibv_destroy_qp(p.a), ENOENT);
	p.a->handle = h;

	/* Neither moved to ERR nor destroyed: it still carries data. */
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_RTS);
	write_works(&p, &src, &dst, 2);

	/* A UD QP's multicast attach goes to the kernel too. */
	struct ibv_qp_init_attr ia;
	union ibv_gid g;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = p.cq_b;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_UD;
	struct ibv_qp *ud = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	memset(&g, 0, sizeof(g));
	g.raw[10] = g.raw[11] = 0xff;
	g.raw[12] = 239;
	g.raw[13] = 8;
	g.raw[14] = (uint8_t)getpid();
	g.raw[15] = 25;
	h = ud->handle;
	ud->handle = h ^ SPOIL;
	CHECK_RET(ibv_attach_mcast(ud, &g, 0), EINVAL);
	ud->handle = h;
	CHECK_OK(ibv_attach_mcast(ud, &g, 0));
	CHECK_OK(ibv_detach_mcast(ud, &g, 0));
	CHECK_OK(ibv_destroy_qp(ud));
}

static void srq_handle(void)
{
	struct vt_env e;
	struct ibv_srq_attr sa;

	vt_env_open(&e);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_srq *srq = CHECK_PTR(basic_srq(e.pd));
	uint32_t h = srq->handle;

	srq->handle = h ^ SPOIL;
	CHECK_RET(ibv_query_srq(srq, &sa), EINVAL);
	memset(&sa, 0, sizeof(sa));
	sa.srq_limit = 1;
	CHECK_RET(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), EINVAL);
	CHECK_RET(ibv_destroy_srq(srq), ENOENT);
	CHECK_NULL_ERRNO(rc_qp(e.pd, cq, srq), ENOENT);
	srq->handle = h;

	memset(&sa, 0, sizeof(sa));
	CHECK_OK(ibv_query_srq(srq, &sa));
	CHECK_EQ(sa.srq_limit, 0);
	struct ibv_qp *qp = CHECK_PTR(rc_qp(e.pd, cq, srq));
	CHECK_RET(ibv_destroy_srq(srq), EBUSY);
	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_destroy_cq(cq));
}

static void mr_handle(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf src, dst;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &src, 4096, VT_ACCESS_ALL);
	vt_buf_reg(&e, &dst, 4096, VT_ACCESS_ALL);
	uint32_t h = dst.mr->handle;

	dst.mr->handle = h ^ SPOIL;
	CHECK_RET(ibv_dereg_mr(dst.mr), ENOENT);
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
			      0, IBV_ACCESS_LOCAL_WRITE),
		 IBV_REREG_MR_ERR_CMD);
	CHECK_EQ(errno, ENOENT);
	dst.mr->handle = h;

	/* Still registered, with its remote access: a WRITE lands in it. */
	write_works(&p, &src, &dst, 3);
	CHECK_OK(ibv_dereg_mr(dst.mr));
}

static void mw_handle(void)
{
	struct vt_env e;

	vt_env_open(&e);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(e.pd, IBV_MW_TYPE_2));
	uint32_t h = mw->handle;

	mw->handle = h ^ SPOIL;
	CHECK_RET(ibv_dealloc_mw(mw), ENOENT);
	mw->handle = h;
	CHECK_RET(ibv_dealloc_pd(e.pd), EBUSY);
	CHECK_OK(ibv_dealloc_mw(mw));
}

static void ah_handle(void)
{
	struct vt_env e;

	vt_env_open(&e);
	struct ibv_ah *ah = CHECK_PTR(lo_ah(&e, e.pd));
	uint32_t h = ah->handle;

	ah->handle = h ^ SPOIL;
	CHECK_RET(ibv_destroy_ah(ah), ENOENT);
	ah->handle = h;
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_RET(ibv_destroy_ah(ah), EINVAL);
}

static void dm_handle(void)
{
	struct vt_env e;
	struct ibv_alloc_dm_attr da;

	vt_env_open(&e);
	memset(&da, 0, sizeof(da));
	da.length = 4096;
	struct ibv_dm *dm = CHECK_PTR(ibv_alloc_dm(e.ctx, &da));
	uint32_t h = dm->handle;

	dm->handle = h ^ SPOIL;
	CHECK_RET(ibv_free_dm(dm), ENOENT);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(e.pd, dm, 0, 64,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_ZERO_BASED),
			 ENOENT);
	dm->handle = h;
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_dm_mr(
		e.pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED));
	CHECK_RET(ibv_free_dm(dm), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_free_dm(dm));
}

static const struct vt_case cases[] = {
	VT_CASE(dm_handle),
	VT_CASE(pd_handle), VT_CASE(pd_other_context), VT_CASE(cq_handle),
	VT_CASE(qp_handle), VT_CASE(srq_handle),       VT_CASE(mr_handle),
	VT_CASE(mw_handle), VT_CASE(ah_handle),
};
VT_MAIN(cases)
