/*
 * The device's reported limits hold: creating up to max_pd PDs, max_cq CQs,
 * max_qp QPs, max_srq SRQs, max_ah AHs, max_mw windows and
 * max_mcast_qp_attach attachments to one group succeeds, one more fails
 * with ENOMEM, and freeing one makes room again.
 * Also: the identity fields programs look at are set.
 */
#include <sys/resource.h>

#include "common/verbs_util.c"

static void device_identity_and_caps(void)
{
	struct vt_env e;
	struct ibv_device_attr_ex ax;

	vt_env_open(&e);
	CHECK(e.dev.vendor_id != 0);
	CHECK(e.dev.vendor_part_id != 0);
	CHECK_GE(e.dev.max_srq, 1);
	CHECK_GE(e.dev.max_srq_wr, 1);
	CHECK_GE(e.dev.max_ah, 1);
	CHECK_GE(e.dev.max_mcast_grp, 1);
	CHECK_GE(e.dev.max_mcast_qp_attach, 1);
	CHECK_EQ(e.dev.max_total_mcast_qp_attach,
		 e.dev.max_mcast_grp * e.dev.max_mcast_qp_attach);
	CHECK(e.dev.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	memset(&ax, 0, sizeof(ax));
	CHECK_OK(ibv_query_device_ex(e.ctx, NULL, &ax));
	CHECK_EQ(ax.orig_attr.vendor_id, e.dev.vendor_id);
	CHECK_EQ(ax.orig_attr.max_ah, e.dev.max_ah);
}

static void pd_limit(void)
{
	struct vt_env e;

	vt_env_open(&e);
	int n = e.dev.max_pd;
	struct ibv_pd **pds = calloc(n, sizeof(*pds));
	CHECK(pds);
	/* vt_env_open holds one already. */
	for (int i = 0; i < n - 1; i++)
		pds[i] = CHECK_PTR(ibv_alloc_pd(e.ctx));
	CHECK_NULL_ERRNO(ibv_alloc_pd(e.ctx), ENOMEM);
	CHECK_OK(ibv_dealloc_pd(pds[0]));
	pds[0] = CHECK_PTR(ibv_alloc_pd(e.ctx));
	for (int i = 0; i < n - 1; i++)
		CHECK_OK(ibv_dealloc_pd(pds[i]));
	free(pds);
}

static void cq_limit(void)
{
	struct vt_env e;

	vt_env_open(&e);
	int n = e.dev.max_cq;
	struct ibv_cq **cqs = calloc(n, sizeof(*cqs));
	CHECK(cqs);
	for (int i = 0; i < n; i++)
		cqs[i] = CHECK_PTR(ibv_create_cq(e.ctx, 1, NULL, NULL, 0));
	CHECK_NULL_ERRNO(ibv_create_cq(e.ctx, 1, NULL, NULL, 0), ENOMEM);
	CHECK_OK(ibv_destroy_cq(cqs[7]));
	cqs[7] = CHECK_PTR(ibv_create_cq(e.ctx, 1, NULL, NULL, 0));
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_destroy_cq(cqs[i]));
	free(cqs);
}

static void srq_limit(void)
{
	struct vt_env e;
	struct ibv_srq_init_attr ia;

	vt_env_open(&e);
	int n = e.dev.max_srq;
	struct ibv_srq **s = calloc(n, sizeof(*s));
	CHECK(s);
	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = 1;
	ia.attr.max_sge = 1;
	for (int i = 0; i < n; i++)
		s[i] = CHECK_PTR(ibv_create_srq(e.pd, &ia));
	CHECK_NULL_ERRNO(ibv_create_srq(e.pd, &ia), ENOMEM);
	CHECK_OK(ibv_destroy_srq(s[3]));
	s[3] = CHECK_PTR(ibv_create_srq(e.pd, &ia));
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_destroy_srq(s[i]));
	free(s);
}

static void ah_limit(void)
{
	struct vt_env e;
	struct ibv_ah_attr a;

	vt_env_open(&e);
	int n = e.dev.max_ah;
	struct ibv_ah **ahs = calloc(n, sizeof(*ahs));
	CHECK(ahs);
	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.grh.dgid = e.gid;
	a.port_num = VT_PORT;
	for (int i = 0; i < n; i++)
		ahs[i] = CHECK_PTR(ibv_create_ah(e.pd, &a));
	CHECK_NULL_ERRNO(ibv_create_ah(e.pd, &a), ENOMEM);
	CHECK_OK(ibv_destroy_ah(ahs[1]));
	ahs[1] = CHECK_PTR(ibv_create_ah(e.pd, &a));
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_destroy_ah(ahs[i]));
	free(ahs);
}

static void mcast_attach_limit(void)
{
	struct vt_env e;
	union ibv_gid g;

	vt_env_open(&e);
	int n = e.dev.max_mcast_qp_attach;
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp **qps = calloc(n + 1, sizeof(*qps));
	CHECK(qps);
	memset(&g, 0, sizeof(g));
	g.raw[10] = g.raw[11] = 0xff;
	g.raw[12] = 239;
	g.raw[13] = 9;
	g.raw[14] = (uint8_t)getpid();
	g.raw[15] = 9;
	for (int i = 0; i <= n; i++) {
		struct ibv_qp_init_attr ia;
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = ia.recv_cq = cq;
		ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
		ia.qp_type = IBV_QPT_UD;
		qps[i] = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	}
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_attach_mcast(qps[i], &g, 0));
	CHECK_RET(ibv_attach_mcast(qps[n], &g, 0), ENOMEM);
	CHECK_OK(ibv_detach_mcast(qps[0], &g, 0));
	CHECK_OK(ibv_attach_mcast(qps[n], &g, 0));
	/* Destroying an attached QP gives its place back too. */
	CHECK_OK(ibv_destroy_qp(qps[1]));
	CHECK_OK(ibv_attach_mcast(qps[0], &g, 0));
	for (int i = 0; i <= n; i++)
		if (i != 1)
			CHECK_OK(ibv_destroy_qp(qps[i]));
	free(qps);
}

/*
 * max_qp is what a program can have: QPs past it fail with ENOMEM (here
 * with a descriptor limit that makes max_qp small, as max_qp follows it).
 * UD QPs count too; destroying one makes room again.
 */
static void qp_limit(void)
{
	struct vt_env e;
	struct rlimit rl;
	struct ibv_device_attr da;

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	rl.rlim_cur = 64 + 3 * 40 + 2;
	CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	vt_env_open(&e);
	CHECK_OK(ibv_query_device(e.ctx, &da));
	int n = da.max_qp;
	CHECK_EQ(n, 40);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp **qps = calloc(n, sizeof(*qps));
	struct ibv_qp_init_attr ia;
	CHECK(qps);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	for (int i = 0; i < n; i++) {
		ia.qp_type = i % 2 ? IBV_QPT_UD : IBV_QPT_RC;
		qps[i] = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	}
	ia.qp_type = IBV_QPT_RC;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), ENOMEM);
	ia.qp_type = IBV_QPT_UD;
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), ENOMEM);
	CHECK_OK(ibv_destroy_qp(qps[5]));
	qps[5] = CHECK_PTR(ibv_create_qp(e.pd, &ia));
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, &ia), ENOMEM);
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_destroy_qp(qps[i]));
	CHECK_OK(ibv_destroy_cq(cq));
	free(qps);
}

static void mw_limit(void)
{
	struct vt_env e;

	vt_env_open(&e);
	int n = e.dev.max_mw;
	CHECK_GE(n, 1);
	struct ibv_mw **mws = calloc(n, sizeof(*mws));
	CHECK(mws);
	for (int i = 0; i < n; i++)
		mws[i] = CHECK_PTR(ibv_alloc_mw(e.pd, IBV_MW_TYPE_2));
	CHECK_NULL_ERRNO(ibv_alloc_mw(e.pd, IBV_MW_TYPE_1), ENOMEM);
	CHECK_OK(ibv_dealloc_mw(mws[2]));
	mws[2] = CHECK_PTR(ibv_alloc_mw(e.pd, IBV_MW_TYPE_1));
	for (int i = 0; i < n; i++)
		CHECK_OK(ibv_dealloc_mw(mws[i]));
	free(mws);
}

/*
 * An address handle uses its PD, as in the kernel: the PD's dealloc is
 * EBUSY while one lives, and the AH still works after the refusal.
 */
static void pd_busy_with_ah(void)
{
	struct vt_env e;
	struct ibv_ah_attr a;

	vt_env_open(&e);
	struct ibv_pd *pd = CHECK_PTR(ibv_alloc_pd(e.ctx));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.grh.dgid = e.gid;
	a.port_num = VT_PORT;
	struct ibv_ah *ah = CHECK_PTR(ibv_create_ah(pd, &a));
	CHECK_RET(ibv_dealloc_pd(pd), EBUSY);

	/* The AH carries a datagram from a UD QP of its PD to itself. */
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 2;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_UD;
	struct ibv_qp *qp = CHECK_PTR(ibv_create_qp(pd, &ia));
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = VT_PORT;
	qa.qkey = 0x11111111;
	CHECK_OK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						IBV_QP_PORT | IBV_QP_QKEY));
	qa.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(qp, &qa, IBV_QP_STATE));
	qa.qp_state = IBV_QPS_RTS;
	qa.sq_psn = 0;
	CHECK_OK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN));
	uint8_t *buf = vt_alloc(4096);
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_mr(pd, buf, 4096,
						 IBV_ACCESS_LOCAL_WRITE));
	vt_post_recv(qp, 1, buf + 1024, 40 + 64, mr->lkey);
	vt_fill(buf, 64, 9);
	struct ibv_sge sge = vt_sge(buf, 64, mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qp->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	vt_post_send(qp, &wr);
	struct ibv_wc got[2];
	vt_poll(cq, got, 2);
	for (int i = 0; i < 2; i++)
		CHECK_WC_STATUS(&got[i], IBV_WC_SUCCESS);
	CHECK_MEM(buf + 1024 + 40, buf, 64);

	CHECK_OK(ibv_destroy_qp(qp));
	CHECK_OK(ibv_dereg_mr(mr));
	/* The AH alone holds it now. */
	CHECK_RET(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_destroy_ah(ah));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
}

/* ECE: the device's vendor id and no options; nothing else is accepted. */
static void ece(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct ibv_ece x;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	memset(&x, 0xff, sizeof(x));
	CHECK_OK(ibv_query_ece(p.a, &x));
	CHECK_EQ(x.vendor_id, e.dev.vendor_id);
	CHECK_EQ(x.options, 0);
	CHECK_EQ(x.comp_mask, 0);
	CHECK_OK(ibv_set_ece(p.a, &x));
	x.options = 1;
	CHECK_RET(ibv_set_ece(p.a, &x), EINVAL);
	x.options = 0;
	x.vendor_id = 0x02c9;	/* another vendor's */
	CHECK_RET(ibv_set_ece(p.a, &x), EINVAL);
}

static const struct vt_case cases[] = {
	VT_CASE(ece),
	VT_CASE(device_identity_and_caps), VT_CASE(pd_limit),
	VT_CASE(cq_limit),		   VT_CASE(srq_limit),
	VT_CASE(ah_limit),		   VT_CASE(mcast_attach_limit),
	VT_CASE(qp_limit),		   VT_CASE(mw_limit),
	VT_CASE(pd_busy_with_ah),
};
VT_MAIN(cases)
