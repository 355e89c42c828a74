/*
 * Thread domains and parent domains: a parent domain stands for its PD
 * (MRs and QPs made on either work together), CQs may name it, a TD or PD
 * in use by a parent domain cannot go, and the allocators a program passes
 * are accepted.
 */
#include "common/verbs_util.c"

static void *never_alloc(struct ibv_pd *pd, void *pd_context, size_t size,
			 size_t alignment, uint64_t resource_type)
{
	(void)pd; (void)pd_context; (void)size; (void)alignment;
	(void)resource_type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void never_free(struct ibv_pd *pd, void *pd_context, void *ptr,
		       uint64_t resource_type)
{
	(void)pd; (void)pd_context; (void)ptr; (void)resource_type;
}

static void parent_domain_stands_for_its_pd(void)
{
	struct vt_env e;
	struct ibv_td_init_attr ta = { 0 };
	struct ibv_wc wc;

	vt_env_open(&e);
	struct ibv_td *td = CHECK_PTR(ibv_alloc_td(e.ctx, &ta));
	CHECK(td->context == e.ctx);
	ta.comp_mask = 1;
	CHECK_NULL_ERRNO(ibv_alloc_td(e.ctx, &ta), EINVAL);

	int tag;
	struct ibv_parent_domain_init_attr pa = {
		.pd = e.pd, .td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = never_alloc, .free = never_free, .pd_context = &tag,
	};
	struct ibv_pd *par = CHECK_PTR(ibv_alloc_parent_domain(e.ctx, &pa));
	CHECK(par->context == e.ctx);
	CHECK_RET(ibv_dealloc_td(td), EBUSY);
	CHECK_RET(ibv_dealloc_pd(e.pd), EBUSY);

	/* A CQ naming the parent domain; a plain PD is refused there. */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
		.parent_domain = e.pd,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	CHECK_NULL_ERRNO(ibv_create_cq_ex(e.ctx, &ca), EINVAL);
	ca.parent_domain = par;
	struct ibv_cq *cqa = ibv_cq_ex_to_cq(CHECK_PTR(ibv_create_cq_ex(e.ctx, &ca)));
	struct ibv_cq *cqb = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));

	/* a on the parent domain, b on the PD: an MR of either serves both. */
	struct vt_qp_opts o;
	vt_default_opts(&o);
	o.access = VT_ACCESS_ALL;
	struct ibv_qp *a = vt_create_qp(par, cqa, cqa, &o, NULL);
	struct ibv_qp *b = vt_create_qp(e.pd, cqb, cqb, &o, NULL);
	CHECK(a->pd == par);
	vt_qp_connect(a, b->qp_num, &e.gid, &o);
	vt_qp_connect(b, a->qp_num, &e.gid, &o);
	uint8_t *src = vt_alloc(4096), *dst = vt_alloc(4096);
	vt_fill(src, 4096, 3);
	struct ibv_mr *smr = CHECK_PTR(ibv_reg_mr(par, src, 4096, IBV_ACCESS_LOCAL_WRITE));
	CHECK(smr->pd == par);
	struct ibv_mr *dmr = CHECK_PTR(ibv_reg_mr(e.pd, dst, 4096, VT_ACCESS_ALL));
	struct ibv_sge sge = vt_sge(src, 1000, smr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge, IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	vt_post_send(a, &wr);
	vt_poll(cqa, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_MEM(dst, src, 1000);

	CHECK_RET(ibv_dealloc_pd(par), EBUSY);
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_dereg_mr(smr));
	CHECK_OK(ibv_destroy_cq(cqa));
	CHECK_OK(ibv_dealloc_pd(par));
	CHECK_OK(ibv_dealloc_td(td));
}

static const struct vt_case cases[] = {
	VT_CASE(parent_domain_stands_for_its_pd),
};
VT_MAIN(cases)
