/*
 * Memory registrations changed under traffic: ibv_rereg_mr moving an MR
 * to a new buffer, a new PD, both, or new access rights keeps its keys
 * working for the QPs that use it, with the new translation and rights.
 * Memory windows: type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW,
 * ibv_wr_bind_mw) windows give remote access to exactly their range and
 * rights, until rebound, unbound, invalidated locally (IBV_WR_LOCAL_INV)
 * or by the peer (IBV_WR_SEND_WITH_INV, IBV_WC_WITH_INV); type 2 windows
 * only through the QP they were bound on; bind errors complete with
 * IBV_WC_MW_BIND_ERR; an MR with windows bound cannot be deregistered.
 */
#include "common/verbs_util.c"

#include <sys/mman.h>

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

/* A pair with everything allowed, a source buffer and a bindable MR on b. */
struct mwenv {
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_pair p;
	struct vt_buf s;
	uint8_t *x;
	struct ibv_mr *mr;
};

static void mwenv_open(struct mwenv *m)
{
	memset(m, 0, sizeof(*m));
	vt_env_open(&m->e);
	CHECK(m->e.dev.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	CHECK(m->e.dev.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	CHECK_GE(m->e.dev.max_mw, 1);
	vt_default_opts(&m->o);
	m->o.access = VT_ACCESS_ALL;
	vt_pair_create(&m->e, &m->p, &m->o, 0);
	vt_buf_reg(&m->e, &m->s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(m->s.p, 4096, 12);
	m->x = vt_alloc(8192);
	m->mr = CHECK_PTR(ibv_reg_mr(m->e.pd, m->x, 8192,
				     VT_ACCESS_ALL | IBV_ACCESS_MW_BIND));
}

/* a writes 64 bytes through `rkey` at x + off; returns the status. */
static enum ibv_wc_status write_via(struct mwenv *m, uint32_t rkey, size_t off)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(m->s.p, 64, m->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(77, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);

	wr.wr.rdma.remote_addr = (uintptr_t)m->x + off;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(m->p.a, &wr);
	vt_poll(m->p.cq_a, &wc, 1);
	CHECK_EQ(wc.wr_id, 77);
	return wc.status;
}

/* a writes 64 bytes through `rkey` at remote address `raddr` (an offset
 * for a zero-based window); returns the status. */
static enum ibv_wc_status write_via_addr(struct mwenv *m, uint32_t rkey,
					 uint64_t raddr)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(m->s.p, 64, m->s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(78, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(m->p.a, &wr);
	vt_poll(m->p.cq_a, &wc, 1);
	CHECK_EQ(wc.wr_id, 78);
	return wc.status;
}

/* After a refused access the pair is in ERR: connect a fresh one. */
static void fresh_pair(struct mwenv *m)
{
	vt_pair_create(&m->e, &m->p, &m->o, 0);
}

static void expect_b_completion(struct mwenv *m, uint64_t id,
				enum ibv_wc_status st, int opcode)
{
	struct ibv_wc wc;

	vt_poll(m->p.cq_b, &wc, 1);
	CHECK_EQ(wc.wr_id, id);
	if (st == IBV_WC_SUCCESS)
		CHECK_WC(&wc, st, opcode);
	else
		CHECK_WC_STATUS(&wc, st);
}

static struct ibv_send_wr bind_wr(struct ibv_mw *mw, uint32_t rkey,
				  struct ibv_mr *mr, void *addr, uint64_t len,
				  unsigned access)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 500;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	return wr;
}

static void mw_type1(void)
{
	struct mwenv m;

	mwenv_open(&m);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_1));
	CHECK_EQ(mw->type, IBV_MW_TYPE_1);
	CHECK(mw->pd == m.e.pd);
	uint32_t unbound = mw->rkey;
	/* Unbound: nothing is reachable through it. */
	CHECK_EQ(write_via(&m, unbound, 1024), IBV_WC_REM_ACCESS_ERR);
	fresh_pair(&m);

	struct ibv_mw_bind b;
	memset(&b, 0, sizeof(b));
	b.wr_id = 41;
	b.send_flags = IBV_SEND_SIGNALED;
	b.bind_info.mr = m.mr;
	b.bind_info.addr = (uintptr_t)m.x + 1024;
	b.bind_info.length = 2048;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK_OK(ibv_bind_mw(m.p.b, mw, &b));
	expect_b_completion(&m, 41, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	uint32_t k1 = mw->rkey;
	CHECK(k1 != unbound);
	CHECK_EQ(k1 >> 8, unbound >> 8);

	CHECK_EQ(write_via(&m, k1, 1024 + 2048 - 64), IBV_WC_SUCCESS);
	CHECK_MEM(m.x + 1024 + 2048 - 64, m.s.p, 64);
	/* Outside the window, though inside the MR: refused. */
	CHECK_EQ(write_via(&m, k1, 1024 + 2048 - 32), IBV_WC_REM_ACCESS_ERR);
	fresh_pair(&m);
	CHECK_EQ(write_via(&m, k1, 0), IBV_WC_REM_ACCESS_ERR);
	fresh_pair(&m);

	/* Rebinding changes the key: the old one stops working. */
	b.wr_id = 42;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK_OK(ibv_bind_mw(m.p.b, mw, &b));
	expect_b_completion(&m, 42, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	uint32_t k2 = mw->rkey;
	CHECK(k2 != k1);
	CHECK_EQ(write_via(&m, k2, 2048), IBV_WC_SUCCESS);
	CHECK_EQ(write_via(&m, k1, 2048), IBV_WC_REM_ACCESS_ERR);
	fresh_pair(&m);

	/* The MR cannot go while the window is bound to it. */
	CHECK_RET(ibv_dereg_mr(m.mr), EBUSY);
	/* A zero-length bind unbinds. */
	b.wr_id = 43;
	b.bind_info.length = 0;
	CHECK_OK(ibv_bind_mw(m.p.b, mw, &b));
	expect_b_completion(&m, 43, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK_EQ(write_via(&m, mw->rkey, 2048), IBV_WC_REM_ACCESS_ERR);
	CHECK_OK(ibv_dealloc_mw(mw));
	CHECK_OK(ibv_dereg_mr(m.mr));
}

static void mw_type2_bind_and_local_invalidate(void)
{
	struct mwenv m;

	mwenv_open(&m);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_2));
	CHECK_EQ(mw->type, IBV_MW_TYPE_2);
	uint32_t k = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = bind_wr(mw, k, m.mr, m.x, 4096,
					IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	expect_b_completion(&m, 500, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK_EQ(write_via(&m, k, 100), IBV_WC_SUCCESS);
	CHECK_MEM(m.x + 100, m.s.p, 64);

	/* Bound already: a second bind is a bind error (the QP fails). */
	struct vt_pair keep = m.p;
	fresh_pair(&m);
	wr = bind_wr(mw, ibv_inc_rkey(k), m.mr, m.x, 4096, IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(keep.b, &wr);
	struct ibv_wc wc;
	vt_poll(keep.cq_b, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_MW_BIND_ERR);

	/* Type 2B: only the QP it was bound on (keep.b) may use it. */
	CHECK_EQ(write_via(&m, k, 100), IBV_WC_REM_ACCESS_ERR);

	/*
	 * Only the QP it is bound to may invalidate it: from another QP of
	 * its PD, a bind error (and that QP fails).
	 */
	fresh_pair(&m);
	struct ibv_send_wr inv = vt_send_wr(501, IBV_WR_LOCAL_INV, NULL,
					    IBV_SEND_SIGNALED);
	inv.invalidate_rkey = k;
	vt_post_send(m.p.b, &inv);
	expect_b_completion(&m, 501, IBV_WC_MW_BIND_ERR, 0);
	CHECK_EQ(vt_qp_state(m.p.b), IBV_QPS_ERR);

	/* keep.b is in ERR: its window goes with dealloc. A new one, bound
	 * on a fresh pair's b, is invalidated there: then rebindable. */
	CHECK_OK(ibv_dealloc_mw(mw));
	fresh_pair(&m);
	mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_2));
	k = ibv_inc_rkey(mw->rkey);
	wr = bind_wr(mw, k, m.mr, m.x, 4096, IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	expect_b_completion(&m, 500, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	inv.invalidate_rkey = k;
	vt_post_send(m.p.b, &inv);
	expect_b_completion(&m, 501, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	k = ibv_inc_rkey(k);
	wr = bind_wr(mw, k, m.mr, m.x, 4096, IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	expect_b_completion(&m, 500, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK_EQ(write_via(&m, k, 200), IBV_WC_SUCCESS);
	/* Invalidating a key that is not the current one fails. */
	inv.invalidate_rkey = k ^ 1;
	vt_post_send(m.p.b, &inv);
	expect_b_completion(&m, 501, IBV_WC_LOC_QP_OP_ERR, 0);
}

/*
 * Keys as applications pass them in IBV_WR_BIND_MW (a counter, a
 * constant): only their low 8 bits count, the window keeps its index, and
 * mw->rkey shows the key once the bind is posted. A zero-based window is
 * addressed from 0; a type 2 window cannot be bound empty.
 */
static void mw_type2_application_keys(void)
{
	struct mwenv m;
	static const uint32_t asked[] = { 1024, 0xBA, 17 };

	mwenv_open(&m);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_2));
	uint32_t first = mw->rkey;
	for (unsigned i = 0; i < sizeof(asked) / sizeof(asked[0]); i++) {
		uint32_t want = (first & ~0xffu) | (asked[i] & 0xff);
		struct ibv_send_wr wr = bind_wr(mw, asked[i], m.mr, m.x + 2048,
						1024,
						IBV_ACCESS_REMOTE_WRITE |
							IBV_ACCESS_ZERO_BASED);
		vt_post_send(m.p.b, &wr);
		CHECK_EQ(mw->rkey, want);
		expect_b_completion(&m, 500, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
		/* Offsets from the window's start: x + 2048 + 64 * i. */
		CHECK_EQ(write_via_addr(&m, want, 64 * i), IBV_WC_SUCCESS);
		CHECK_MEM(m.x + 2048 + 64 * i, m.s.p, 64);
		struct ibv_send_wr inv = vt_send_wr(501, IBV_WR_LOCAL_INV, NULL,
						    IBV_SEND_SIGNALED);
		inv.invalidate_rkey = want;
		vt_post_send(m.p.b, &inv);
		expect_b_completion(&m, 501, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	}
	struct ibv_send_wr wr = bind_wr(mw, ibv_inc_rkey(mw->rkey), m.mr, m.x,
					0, IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	expect_b_completion(&m, 500, IBV_WC_MW_BIND_ERR, 0);
	CHECK_OK(ibv_dealloc_mw(mw));
	CHECK_OK(ibv_dereg_mr(m.mr));
}

/* The peer invalidates the window with SEND_WITH_INV. */
static void mw_send_with_invalidate(void)
{
	struct mwenv m;
	struct ibv_wc wc;

	mwenv_open(&m);
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_2));
	uint32_t k = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = bind_wr(mw, k, m.mr, m.x, 4096,
					IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	expect_b_completion(&m, 500, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK_EQ(write_via(&m, k, 0), IBV_WC_SUCCESS);

	vt_post_recv(m.p.b, 9, m.x + 4096, 256, m.mr->lkey);
	struct ibv_sge sge = vt_sge(m.s.p, 32, m.s.mr->lkey);
	struct ibv_send_wr s = vt_send_wr(60, IBV_WR_SEND_WITH_INV, &sge,
					  IBV_SEND_SIGNALED);
	s.invalidate_rkey = k;
	vt_post_send(m.p.a, &s);
	vt_poll(m.p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(m.p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK(wc.wc_flags & IBV_WC_WITH_INV);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK_EQ(wc.invalidated_rkey, k);
	CHECK_EQ(wc.byte_len, 32);
	CHECK_MEM(m.x + 4096, m.s.p, 32);
	CHECK_EQ(write_via(&m, k, 0), IBV_WC_REM_ACCESS_ERR);
}

/* Bind errors; the extended post API; dealloc of a stale window. */
static void mw_bind_errors_and_wr_api(void)
{
	struct mwenv m;
	struct ibv_wc wc;

	mwenv_open(&m);
	/* An MR registered without IBV_ACCESS_MW_BIND cannot be windowed. */
	uint8_t *y = vt_alloc(4096);
	struct ibv_mr *plain = CHECK_PTR(ibv_reg_mr(m.e.pd, y, 4096, VT_ACCESS_ALL));
	struct ibv_mw *mw = CHECK_PTR(ibv_alloc_mw(m.e.pd, IBV_MW_TYPE_2));
	struct ibv_send_wr wr = bind_wr(mw, ibv_inc_rkey(mw->rkey), plain, y,
					4096, IBV_ACCESS_REMOTE_WRITE);
	vt_post_send(m.p.b, &wr);
	vt_poll(m.p.cq_b, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_MW_BIND_ERR);
	CHECK_EQ(vt_qp_state(m.p.b), IBV_QPS_ERR);

	/* ibv_wr_bind_mw and ibv_wr_send_inv on an extended QP. */
	fresh_pair(&m);
	struct vt_qp_opts ox = m.o;
	ox.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
			    IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE;
	struct vt_pair px;
	vt_pair_create(&m.e, &px, &ox, 0);
	struct ibv_qp_ex *bx = CHECK_PTR(ibv_qp_to_qp_ex(px.b));
	uint32_t k = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = {
		.mr = m.mr, .addr = (uintptr_t)m.x, .length = 512,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	ibv_wr_start(bx);
	bx->wr_id = 70;
	bx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(bx, mw, k, &info);
	CHECK_OK(ibv_wr_complete(bx));
	vt_poll(px.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	ibv_wr_start(bx);
	bx->wr_id = 71;
	ibv_wr_local_inv(bx, k);
	CHECK_OK(ibv_wr_complete(bx));
	vt_poll(px.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);

	CHECK_OK(ibv_dealloc_mw(mw));
	CHECK_RET(ibv_dealloc_mw(mw), EINVAL);
	/* No such window type. */
	CHECK_NULL_ERRNO(ibv_alloc_mw(m.e.pd, 7), EINVAL);
}

/*
 * On-demand paging: memory mapped after its registration, an implicit MR
 * over the whole address space, ibv_advise_mr, and the capabilities.
 */
static void odp(void)
{
	struct mwenv m;
	struct ibv_device_attr_ex ax;
	struct ibv_wc wc;

	mwenv_open(&m);
	memset(&ax, 0, sizeof(ax));
	CHECK_OK(ibv_query_device_ex(m.e.ctx, NULL, &ax));
	CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
	CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE);

	/* Inaccessible at registration: EFAULT, unless on demand. */
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *z = mmap(NULL, 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(z != MAP_FAILED);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK_NULL_ERRNO(ibv_reg_mr(m.e.pd, z, 2 * pg, acc), EFAULT);
	struct ibv_mr *omr = CHECK_PTR(ibv_reg_mr(m.e.pd, z, 2 * pg,
						  acc | IBV_ACCESS_ON_DEMAND));
	CHECK(mprotect(z, 2 * pg, PROT_READ | PROT_WRITE) == 0);
	struct ibv_sge sge = vt_sge(m.s.p, 300, m.s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(80, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)z + pg - 100;
	wr.wr.rdma.rkey = omr->rkey;
	vt_post_send(m.p.a, &wr);
	vt_poll(m.p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_MEM(z + pg - 100, m.s.p, 300);
	struct ibv_sge adv = vt_sge(z, 2 * pg, omr->lkey);
	CHECK_OK(ibv_advise_mr(m.e.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
			       IBV_ADVISE_MR_FLAG_FLUSH, &adv, 1));
	adv.lkey ^= 0x55;
	CHECK_RET(ibv_advise_mr(m.e.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &adv, 1),
		  EINVAL);

	/* Implicit ODP: one key for every address. */
	struct ibv_mr *all = CHECK_PTR(ibv_reg_mr(m.e.pd, NULL, SIZE_MAX,
						  acc | IBV_ACCESS_ON_DEMAND));
	uint8_t *h = vt_alloc(4096);
	wr.wr.rdma.remote_addr = (uintptr_t)h + 17;
	wr.wr.rdma.rkey = all->rkey;
	vt_post_send(m.p.a, &wr);
	vt_poll(m.p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_MEM(h + 17, m.s.p, 300);
	/* Its lkey gathers from anywhere too. */
	vt_post_recv(m.p.b, 3, m.x, 64, m.mr->lkey);
	struct ibv_sge g2 = vt_sge(h + 17, 64, all->lkey);
	struct ibv_send_wr s2 = vt_send_wr(81, IBV_WR_SEND, &g2, IBV_SEND_SIGNALED);
	vt_post_send(m.p.a, &s2);
	vt_poll(m.p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_MEM(m.x, m.s.p, 64);
	CHECK_OK(ibv_dereg_mr(all));
	CHECK_OK(ibv_dereg_mr(omr));
	munmap(z, 2 * pg);
}

/* Device memory: copies in and out, zero-based MRs over it, the limits. */
static void device_memory(void)
{
	struct mwenv m;
	struct ibv_device_attr_ex ax;
	struct ibv_wc wc;

	mwenv_open(&m);
	memset(&ax, 0, sizeof(ax));
	CHECK_OK(ibv_query_device_ex(m.e.ctx, NULL, &ax));
	CHECK_GE(ax.max_dm_size, 8192);
	struct ibv_alloc_dm_attr da = { .length = 8192 };
	struct ibv_dm *dm = CHECK_PTR(ibv_alloc_dm(m.e.ctx, &da));
	/* More than the device has: ENOMEM. */
	struct ibv_alloc_dm_attr huge = { .length = ax.max_dm_size };
	CHECK_NULL_ERRNO(ibv_alloc_dm(m.e.ctx, &huge), ENOMEM);

	CHECK_OK(ibv_memcpy_to_dm(dm, 4000, m.s.p, 1000));
	uint8_t back[1000];
	CHECK_OK(ibv_memcpy_from_dm(back, dm, 4000, 1000));
	CHECK_MEM(back, m.s.p, 1000);
	CHECK_RET(ibv_memcpy_to_dm(dm, 8000, m.s.p, 193), EINVAL);
	CHECK_RET(ibv_memcpy_from_dm(back, dm, 8192, 1), EINVAL);

	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(m.e.pd, dm, 0, 4096, acc), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dm_mr(m.e.pd, dm, 4096, 8192,
				       acc | IBV_ACCESS_ZERO_BASED), EINVAL);
	struct ibv_mr *dmr = CHECK_PTR(ibv_reg_dm_mr(m.e.pd, dm, 4096, 4096,
						     acc | IBV_ACCESS_ZERO_BASED));
	/* RDMA WRITE into it: remote addresses are offsets in the MR. */
	struct ibv_sge sge = vt_sge(m.s.p + 100, 256, m.s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(90, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = 512;
	wr.wr.rdma.rkey = dmr->rkey;
	vt_post_send(m.p.a, &wr);
	vt_poll(m.p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_OK(ibv_memcpy_from_dm(back, dm, 4096 + 512, 256));
	CHECK_MEM(back, m.s.p + 100, 256);
	/* And a SEND gathered from it by b (local addresses are offsets). */
	vt_post_recv(m.p.a, 4, m.s.p + 2048, 256, m.s.mr->lkey);
	struct ibv_sge g2 = vt_sge((void *)(uintptr_t)512, 256, dmr->lkey);
	struct ibv_send_wr s2 = vt_send_wr(91, IBV_WR_SEND, &g2, IBV_SEND_SIGNALED);
	vt_post_send(m.p.b, &s2);
	vt_poll(m.p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_MEM(m.s.p + 2048, m.s.p + 100, 256);

	CHECK_RET(ibv_free_dm(dm), EBUSY);
	CHECK_OK(ibv_dereg_mr(dmr));
	CHECK_OK(ibv_free_dm(dm));
}

static const struct vt_case cases[] = {
	VT_CASE(rereg_translation_pd_access),
	VT_CASE(odp),
	VT_CASE(device_memory),
	VT_CASE(mw_type1),
	VT_CASE(mw_type2_bind_and_local_invalidate),
	VT_CASE(mw_type2_application_keys),
	VT_CASE(mw_send_with_invalidate),
	VT_CASE(mw_bind_errors_and_wr_api),
};
VT_MAIN(cases)
