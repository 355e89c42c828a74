/*
 * Memory registrations changed under traffic: ibv_rereg_mr moving an MR
 * to a new buffer, a new PD, both, or new access rights keeps its keys
 * working for the QPs that use it, with the new translation and rights.
 */
#include "common/verbs_util.c"

/* RDMA WRITE of 256 bytes from a to b's MR `mr` at `addr`. */
static void write_to(struct vt_pair *p, struct vt_buf *s, struct ibv_mr *mr,
		     void *addr, enum ibv_wc_status want)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(s->p, 256, s->mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);

	wr.wr.rdma.remote_addr = (uintptr_t)addr;
	wr.wr.rdma.rkey = mr->rkey;
	vt_post_send(p->a, &wr);
	vt_poll(p->cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, want);
}

static void rereg_translation_pd_access(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.access = VT_ACCESS_ALL;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, 4096, 4);

	uint8_t *x = vt_alloc(4096), *y = vt_alloc(8192);
	struct ibv_pd *other = CHECK_PTR(ibv_alloc_pd(e.ctx));
	/* Registered on another PD first: b's QP may not use it. */
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_mr(other, x, 4096, VT_ACCESS_ALL));
	uint32_t rkey = mr->rkey;
	write_to(&p, &s, mr, x, IBV_WC_REM_ACCESS_ERR);
	/* The pair is in ERR now; a fresh one for the rest. */
	vt_pair_create(&e, &p, &o, 0);

	/* Move it to b's PD: the same keys now work. */
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, e.pd, NULL, 0, 0));
	CHECK(mr->pd == e.pd);
	CHECK_EQ(mr->rkey, rkey);
	write_to(&p, &s, mr, x, IBV_WC_SUCCESS);
	CHECK_MEM(x, s.p, 256);

	/* New translation: y, and the old range is no longer reachable. */
	CHECK_OK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, y,
			      8192, 0));
	CHECK(mr->addr == y);
	CHECK_EQ(mr->length, 8192);
	write_to(&p, &s, mr, y + 4096, IBV_WC_SUCCESS);
	CHECK_MEM(y + 4096, s.p, 256);
	/* A send through the local key lands in y as well. */
	vt_post_recv(p.b, 5, y, 512, mr->lkey);
	struct ibv_sge sge = vt_sge(s.p + 512, 100, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_MEM(y, s.p + 512, 100);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);

	/* Both at once, back to x on the other PD: refused by b again. */
	CHECK_OK(ibv_rereg_mr(mr,
			      IBV_REREG_MR_CHANGE_TRANSLATION |
				      IBV_REREG_MR_CHANGE_PD,
			      other, x, 4096, 0));
	write_to(&p, &s, mr, x, IBV_WC_REM_ACCESS_ERR);
	vt_pair_create(&e, &p, &o, 0);

	/* Back on b's PD, read-only for the peer: a WRITE is refused. */
	CHECK_OK(ibv_rereg_mr(mr,
			      IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
			      e.pd, NULL, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
	write_to(&p, &s, mr, x, IBV_WC_REM_ACCESS_ERR);
	CHECK_OK(ibv_dereg_mr(mr));
}

static const struct vt_case cases[] = {
	VT_CASE(rereg_translation_pd_access),
};
VT_MAIN(cases)
