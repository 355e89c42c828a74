/*
 * Stale and foreign object pointers through libibverbs: a destroyed QP,
 * CQ, completion channel, a deregistered MR, a deallocated PD, and
 * pointers that were never objects, given to every control verb, get
 * EINVAL (or NULL with EINVAL) and no read of freed memory. The test
 * script runs this under valgrind as well, which reports any such read.
 */
#include "common/verbs_util.c"

static void stale_qp(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;

	vt_env_open(&e);
	vt_default_opts(&o);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp *qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	CHECK_OK(ibv_destroy_qp(qp));

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	CHECK_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);
	CHECK_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), EINVAL);
	CHECK_EQ(ibv_destroy_qp(qp), EINVAL);
	CHECK_OK(ibv_destroy_cq(cq));
}

static void stale_mr_pd_cq_channel(void)
{
	struct vt_env e;

	vt_env_open(&e);
	void *buf = vt_alloc(4096);
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_mr(e.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE));
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_EQ(ibv_dereg_mr(mr), EINVAL);
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0),
		 IBV_REREG_MR_ERR_INPUT);

	struct ibv_pd *pd = CHECK_PTR(ibv_alloc_pd(e.ctx));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_EQ(ibv_dealloc_pd(pd), EINVAL);
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL);
	CHECK_EQ(errno, EINVAL);

	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, ch, 0));
	CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_EQ(ibv_destroy_cq(cq), EINVAL);
	CHECK_EQ(ibv_resize_cq(cq, 32), EINVAL);
	CHECK_OK(ibv_destroy_comp_channel(ch));
	CHECK_EQ(ibv_destroy_comp_channel(ch), EINVAL);
	free(buf);
}

/* Pointers to memory that never held an object: refused, not trusted. */
static void never_objects(void)
{
	struct vt_env e;
	/* Looks like an object of e.ctx to anyone who reads it. */
	struct ibv_context *fake[16];

	vt_env_open(&e);
	for (int i = 0; i < 16; i++)
		fake[i] = e.ctx;
	CHECK_EQ(ibv_destroy_qp((struct ibv_qp *)fake), EINVAL);
	CHECK_EQ(ibv_dereg_mr((struct ibv_mr *)fake), EINVAL);
	CHECK_EQ(ibv_dealloc_pd((struct ibv_pd *)fake), EINVAL);
	CHECK_EQ(ibv_destroy_cq((struct ibv_cq *)fake), EINVAL);
}

static const struct vt_case cases[] = {
	VT_CASE(stale_qp),
	VT_CASE(stale_mr_pd_cq_channel),
	VT_CASE(never_objects),
};
VT_MAIN(cases)
