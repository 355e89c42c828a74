/*
 * Thread domains and parent domains: a parent domain stands for its PD
 * (MRs and QPs made on either work together), CQs may name it, a TD or PD
 * in use by a parent domain (or a CQ made on it) cannot go; and the
 * allocators a program gives it provide the rings of the QPs, CQs and SRQs
 * made on it: called with the parent domain, its pd_context, a non-zero
 * size, a power-of-two alignment and an RSW_RES_TYPE_* code; the buffers
 * hold the WRs and completions; each is freed exactly once (on destroy, on
 * resize, on a creation that fails); IBV_ALLOCATOR_USE_DEFAULT falls back
 * to the provider's memory; NULL fails with ENOMEM.
 */
#include "common/verbs_util.c"

#include <infiniband/rswdv.h>

static void *default_alloc(struct ibv_pd *pd, void *pd_context, size_t size,
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
		.alloc = default_alloc, .free = never_free, .pd_context = &tag,
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

/* ---------------------------------------------------------------------- */
/* A counting allocator                                                    */
/* ---------------------------------------------------------------------- */

#define POOL_MAX 512

struct pool_rec {
	void *p;		/* NULL: USE_DEFAULT or NULL was answered */
	size_t size, align;
	uint64_t type;
	int frees;		/* free calls for p */
};

struct pool {
	struct ibv_pd *pd;	/* the parent domain, once made */
	struct pool_rec rec[POOL_MAX];
	int n;			/* alloc calls */
	int fail_at;		/* the alloc call (1-based) answered NULL; 0: none */
	int use_default;	/* answer IBV_ALLOCATOR_USE_DEFAULT */
	int frees;		/* free calls */
	int bad;		/* calls with a wrong pd or pd_context, frees of
				 * pointers not handed out (or freed already) */
};

/* Each case runs in a process of its own: one pool each. */
static struct pool pool;

static void *pool_alloc(struct ibv_pd *pd, void *ctx, size_t size,
			size_t align, uint64_t type)
{
	struct pool *pl = ctx;

	if (pl != &pool || pl->n >= POOL_MAX) {
		pool.bad++;
		return NULL;
	}
	if (pd != pl->pd)
		pl->bad++;
	struct pool_rec *r = &pl->rec[pl->n++];
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->align = align;
	r->type = type;
	if (pl->use_default)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (pl->fail_at == pl->n)
		return NULL;
	void *p = NULL;
	if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align,
			   size ? size : 1))
		return NULL;
	/* ibv_alloc_parent_domain(3): the allocator hands out zeroed memory. */
	memset(p, 0, size);
	r->p = p;
	return p;
}

static void pool_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type)
{
	struct pool *pl = ctx;

	if (pl != &pool) {
		pool.bad++;
		return;
	}
	pl->frees++;
	if (pd != pl->pd)
		pl->bad++;
	for (int i = 0; i < pl->n; i++) {
		struct pool_rec *r = &pl->rec[i];
		if (r->p == ptr && r->frees == 0) {
			if (r->type != type)
				pl->bad++;
			r->frees++;
			free(ptr);
			return;
		}
	}
	pl->bad++;	/* not ours, or a second free: left alone */
}

/* Buffers handed out and not freed, of `type` (0: any). */
static int pool_live(uint64_t type)
{
	int n = 0;

	for (int i = 0; i < pool.n; i++)
		if (pool.rec[i].p && !pool.rec[i].frees &&
		    (!type || pool.rec[i].type == type))
			n++;
	return n;
}

static bool rec_holds(const struct pool_rec *r, const void *needle, size_t len)
{
	return r->p && !r->frees && memmem(r->p, r->size, needle, len);
}

/* Some live buffer of `type` holds the 8 bytes of `v`. */
static bool pool_holds(uint64_t type, uint64_t v)
{
	for (int i = 0; i < pool.n; i++)
		if (pool.rec[i].type == type && rec_holds(&pool.rec[i], &v, 8))
			return true;
	return false;
}

/* Calls [from, pool.n) were for `type`, with a size and a power-of-two
 * alignment; each got a buffer. */
static void pool_check_calls(int from, uint64_t type)
{
	for (int i = from; i < pool.n; i++) {
		const struct pool_rec *r = &pool.rec[i];
		CHECKF(r->type == type, "alloc call %d: resource_type %#llx, expected %#llx",
		       i + 1, (unsigned long long)r->type, (unsigned long long)type);
		CHECKF(r->size > 0, "alloc call %d: size 0", i + 1);
		CHECKF(r->align >= 8 && !(r->align & (r->align - 1)),
		       "alloc call %d: alignment %zu is not a power of two >= 8",
		       i + 1, r->align);
		if (!pool.use_default)
			CHECKF(r->p != NULL, "alloc call %d got no buffer", i + 1);
	}
}

/* Every buffer handed out was freed exactly once, and nothing else was. */
static void pool_check_all_freed(void)
{
	int handed = 0;

	for (int i = 0; i < pool.n; i++) {
		if (!pool.rec[i].p)
			continue;
		handed++;
		CHECKF(pool.rec[i].frees == 1,
		       "buffer %d (type %#llx, %zu bytes) freed %d times", i + 1,
		       (unsigned long long)pool.rec[i].type, pool.rec[i].size,
		       pool.rec[i].frees);
	}
	CHECK_EQ(pool.frees, handed);
	CHECK_EQ(pool.bad, 0);
}

static struct ibv_pd *pool_parent(struct vt_env *e)
{
	memset(&pool, 0, sizeof(pool));
	struct ibv_parent_domain_init_attr pa = {
		.pd = e->pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = pool_alloc, .free = pool_free, .pd_context = &pool,
	};
	struct ibv_pd *par = CHECK_PTR(ibv_alloc_parent_domain(e->ctx, &pa));
	pool.pd = par;
	CHECK_EQ(pool.n, 0);
	return par;
}

static struct ibv_cq *pool_cq(struct vt_env *e, struct ibv_pd *par, int cqe)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = cqe, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
		.parent_domain = par, .wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	return ibv_cq_ex_to_cq(CHECK_PTR(ibv_create_cq_ex(e->ctx, &ca)));
}

#define WR_SEND 0x5e4d000000000a01ULL
#define WR_WRITE 0x5e4d000000000a02ULL
#define WR_RECV 0x5e4d000000000a03ULL
#define WR_WRITE2 0x5e4d000000000a04ULL
#define WR_PEER 0x5e4d000000000b01ULL
#define WR_PEER_RECV 0x5e4d000000000b02ULL
#define WR_UD_RECV 0x5e4d000000000c01ULL
#define WR_SRQ_RECV 0x5e4d000000000d01ULL

/* a SEND from `from` into `to`'s receive (or its SRQ's), payload checked. */
static void send_one(struct ibv_qp *from, struct ibv_cq *from_cq,
		     struct ibv_cq *to_cq, uint64_t wr_id, uint64_t recv_id,
		     struct vt_buf *src, struct vt_buf *dst, uint32_t len)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(src->p, len, src->mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(wr_id, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);

	vt_post_send(from, &wr);
	vt_poll(from_cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, wr_id);
	vt_poll(to_cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, recv_id);
	CHECK_EQ(wc.byte_len, len);
	CHECK_MEM(dst->p, src->p, len);
}

static void write_one(struct ibv_qp *from, struct ibv_cq *from_cq,
		      uint64_t wr_id, struct vt_buf *src, struct vt_buf *dst,
		      uint32_t len)
{
	struct ibv_wc wc;
	struct ibv_sge sge = vt_sge(src->p, len, src->mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(wr_id, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);

	wr.wr.rdma.remote_addr = (uintptr_t)dst->p;
	wr.wr.rdma.rkey = dst->mr->rkey;
	vt_post_send(from, &wr);
	vt_poll(from_cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(wc.wr_id, wr_id);
	CHECK_MEM(dst->p, src->p, len);
}

static void free_bufs(struct vt_buf *b, int n)
{
	for (int i = 0; i < n; i++) {
		CHECK_OK(ibv_dereg_mr(b[i].mr));
		free(b[i].p);
	}
}

/*
 * A QP and a CQ made on a parent domain with allocators: their rings are
 * the allocator's buffers (the WRs posted and the completions polled are
 * found in them), traffic over them is intact, a resize takes a new CQ
 * ring from the allocator and frees the old one, and destroying them
 * frees every buffer once.
 */
static void allocators_hold_the_rings(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf buf[4];

	vt_env_open(&e);
	struct ibv_pd *par = pool_parent(&e);

	struct ibv_cq *cqa = pool_cq(&e, par, 32);
	CHECK_EQ(pool.n, 1);
	pool_check_calls(0, RSW_RES_TYPE_CQ);
	CHECK_GE(pool.rec[0].size, 32);
	/* The CQ holds the parent domain. */
	CHECK_RET(ibv_dealloc_pd(par), EBUSY);

	/* Objects on the plain PD: not the allocator's business. */
	struct ibv_cq *cqb = CHECK_PTR(ibv_create_cq(e.ctx, 32, NULL, NULL, 0));
	vt_default_opts(&o);
	o.max_inline_data = 32;
	struct ibv_qp *b = vt_create_qp(e.pd, cqb, cqb, &o, NULL);
	CHECK_EQ(pool.n, 1);

	int before = pool.n;
	struct ibv_qp *a = vt_create_qp(par, cqa, cqa, &o, NULL);
	int qp_calls = pool.n - before;
	CHECK_GE(qp_calls, 1);
	pool_check_calls(before, RSW_RES_TYPE_QP);
	vt_qp_connect(a, b->qp_num, &e.gid, &o);
	vt_qp_connect(b, a->qp_num, &e.gid, &o);

	for (int i = 0; i < 4; i++)
		vt_buf_reg(&e, &buf[i], 4096, VT_ACCESS_ALL);
	struct vt_buf *src = &buf[0], *dst = &buf[1], *rbuf = &buf[2], *wdst = &buf[3];

	vt_fill(src->p, 4096, 11);
	vt_post_recv(b, WR_PEER_RECV, dst->p, 4096, dst->mr->lkey);
	send_one(a, cqa, cqb, WR_SEND, WR_PEER_RECV, src, dst, 3000);
	vt_fill(src->p, 4096, 12);
	write_one(a, cqa, WR_WRITE, src, wdst, 4096);
	vt_fill(dst->p, 4096, 13);
	vt_post_recv(a, WR_RECV, rbuf->p, 4096, rbuf->mr->lkey);
	send_one(b, cqb, cqa, WR_PEER, WR_RECV, dst, rbuf, 1500);

	/* The send ring: a's WRs (and the WRITE's target) are in its
	 * buffers; the completion ring: a's completions are in the CQ's. */
	CHECK(pool_holds(RSW_RES_TYPE_QP, WR_SEND));
	CHECK(pool_holds(RSW_RES_TYPE_QP, WR_WRITE));
	CHECK(pool_holds(RSW_RES_TYPE_QP, (uintptr_t)wdst->p));
	CHECK(pool_holds(RSW_RES_TYPE_CQ, WR_SEND));
	CHECK(pool_holds(RSW_RES_TYPE_CQ, WR_WRITE));
	CHECK(pool_holds(RSW_RES_TYPE_CQ, WR_RECV));
	/* b's are not. */
	CHECK(!pool_holds(RSW_RES_TYPE_QP, WR_PEER));
	CHECK(!pool_holds(RSW_RES_TYPE_CQ, WR_PEER));

	/* Resize: a new ring from the allocator, the old one freed. */
	before = pool.n;
	CHECK_OK(ibv_resize_cq(cqa, 100));
	CHECK_EQ(pool.n, before + 1);
	pool_check_calls(before, RSW_RES_TYPE_CQ);
	CHECK_GE(pool.rec[before].size, 100);
	CHECK_EQ(pool.rec[0].frees, 1);
	CHECK_EQ(pool_live(RSW_RES_TYPE_CQ), 1);
	CHECK_GE(cqa->cqe, 100);
	vt_fill(src->p, 4096, 14);
	write_one(a, cqa, WR_WRITE2, src, wdst, 2048);
	uint64_t id = WR_WRITE2;
	CHECK(rec_holds(&pool.rec[before], &id, 8));

	/* Destroy: each buffer back once, when its object goes. */
	CHECK_RET(ibv_dealloc_pd(par), EBUSY);
	CHECK_EQ(pool_live(RSW_RES_TYPE_QP), qp_calls);
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_EQ(pool_live(RSW_RES_TYPE_QP), 0);
	CHECK_EQ(pool_live(RSW_RES_TYPE_CQ), 1);
	CHECK_OK(ibv_destroy_cq(cqa));
	CHECK_EQ(pool_live(0), 0);
	pool_check_all_freed();
	CHECK_OK(ibv_dealloc_pd(par));

	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_cq(cqb));
	free_bufs(buf, 4);
	pool_check_all_freed();
}

/*
 * Private receive rings come from the allocator too: a UD QP's, a basic
 * SRQ's once a resize has made it private (before that it may live in the
 * same-host mailbox, which is not asked of the allocator), an XRC SRQ's
 * from the start; SENDs land through the SRQ's allocator ring.
 */
static void receive_rings_from_the_allocator(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf buf[2];

	vt_env_open(&e);
	struct ibv_pd *par = pool_parent(&e);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	for (int i = 0; i < 2; i++)
		vt_buf_reg(&e, &buf[i], 4096, VT_ACCESS_ALL);

	/* UD: its receive ring is always its own. */
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *ud = CHECK_PTR(ibv_create_qp(par, &ia));
	CHECK_GE(pool.n, 2);
	pool_check_calls(0, RSW_RES_TYPE_QP);
	struct ibv_qp_attr qa = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = VT_PORT,
		.qkey = 0x11111111,
	};
	CHECK_OK(ibv_modify_qp(ud, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_QKEY));
	vt_post_recv(ud, WR_UD_RECV, buf[1].p, 4096, buf[1].mr->lkey);
	CHECK(pool_holds(RSW_RES_TYPE_QP, WR_UD_RECV));
	CHECK_OK(ibv_destroy_qp(ud));
	CHECK_EQ(pool_live(0), 0);

	/* SRQ: in the mailbox or private; after a resize, private. */
	int before = pool.n;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq(par, &sa));
	int srq_calls = pool.n - before;
	pool_check_calls(before, RSW_RES_TYPE_SRQ);
	CHECK_EQ(pool_live(RSW_RES_TYPE_SRQ), srq_calls);
	before = pool.n;
	struct ibv_srq_attr ma = { .max_wr = 64 };
	CHECK_OK(ibv_modify_srq(srq, &ma, IBV_SRQ_MAX_WR));
	CHECK_GE(pool.n - before, 1);
	pool_check_calls(before, RSW_RES_TYPE_SRQ);
	CHECK_EQ(pool_live(RSW_RES_TYPE_SRQ), pool.n - before);

	/* c takes its receives from the SRQ; d sends to it. */
	struct ibv_qp_init_attr ca = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_send_sge = 1 },
	};
	struct ibv_qp *c = CHECK_PTR(ibv_create_qp(par, &ca));
	struct ibv_cq *dcq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	vt_default_opts(&o);
	struct ibv_qp *d = vt_create_qp(e.pd, dcq, dcq, &o, NULL);
	vt_qp_connect(c, d->qp_num, &e.gid, &o);
	vt_qp_connect(d, c->qp_num, &e.gid, &o);
	struct ibv_sge rs = vt_sge(buf[1].p, 4096, buf[1].mr->lkey);
	struct ibv_recv_wr rw = { .wr_id = WR_SRQ_RECV, .sg_list = &rs, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	CHECK_OK(ibv_post_srq_recv(srq, &rw, &bad));
	CHECK(pool_holds(RSW_RES_TYPE_SRQ, WR_SRQ_RECV));
	vt_fill(buf[0].p, 4096, 21);
	send_one(d, dcq, cq, WR_PEER, WR_SRQ_RECV, &buf[0], &buf[1], 2500);

	CHECK_OK(ibv_destroy_qp(c));
	CHECK_OK(ibv_destroy_qp(d));
	CHECK_GE(pool_live(RSW_RES_TYPE_SRQ), 1);
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_EQ(pool_live(0), 0);

	/* An XRC SRQ's ring is private from the start. */
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1, .oflags = O_CREAT,
	};
	struct ibv_xrcd *xrcd = CHECK_PTR(ibv_open_xrcd(e.ctx, &xa));
	struct ibv_srq_init_attr_ex xs = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC, .xrcd = xrcd, .cq = cq, .pd = par,
	};
	before = pool.n;
	struct ibv_srq *xsrq = CHECK_PTR(ibv_create_srq_ex(e.ctx, &xs));
	CHECK_GE(pool.n - before, 1);
	pool_check_calls(before, RSW_RES_TYPE_SRQ);
	rw.wr_id = WR_SRQ_RECV + 1;
	CHECK_OK(ibv_post_srq_recv(xsrq, &rw, &bad));
	CHECK(pool_holds(RSW_RES_TYPE_SRQ, WR_SRQ_RECV + 1));
	CHECK_OK(ibv_destroy_srq(xsrq));
	CHECK_EQ(pool_live(0), 0);
	CHECK_OK(ibv_close_xrcd(xrcd));
	pool_check_all_freed();
	CHECK_OK(ibv_destroy_cq(dcq));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_dealloc_pd(par));
	free_bufs(buf, 2);
}

/* IBV_ALLOCATOR_USE_DEFAULT: the allocator is asked, the provider's own
 * memory is used, traffic works, and free is never called. */
static void use_default_falls_back(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf buf[3];

	vt_env_open(&e);
	struct ibv_pd *par = pool_parent(&e);
	pool.use_default = 1;
	struct ibv_cq *cqa = pool_cq(&e, par, 16);
	CHECK_EQ(pool.n, 1);
	pool_check_calls(0, RSW_RES_TYPE_CQ);
	struct ibv_cq *cqb = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	vt_default_opts(&o);
	struct ibv_qp *a = vt_create_qp(par, cqa, cqa, &o, NULL);
	CHECK_GE(pool.n, 2);
	pool_check_calls(1, RSW_RES_TYPE_QP);
	struct ibv_qp *b = vt_create_qp(e.pd, cqb, cqb, &o, NULL);
	vt_qp_connect(a, b->qp_num, &e.gid, &o);
	vt_qp_connect(b, a->qp_num, &e.gid, &o);
	for (int i = 0; i < 3; i++)
		vt_buf_reg(&e, &buf[i], 4096, VT_ACCESS_ALL);
	vt_fill(buf[0].p, 4096, 31);
	vt_post_recv(b, WR_PEER_RECV, buf[1].p, 4096, buf[1].mr->lkey);
	send_one(a, cqa, cqb, WR_SEND, WR_PEER_RECV, &buf[0], &buf[1], 4096);
	vt_fill(buf[0].p, 4096, 32);
	write_one(a, cqa, WR_WRITE, &buf[0], &buf[2], 4000);
	int n = pool.n;
	CHECK_OK(ibv_resize_cq(cqa, 64));
	CHECK_EQ(pool.n, n + 1);
	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_cq(cqa));
	CHECK_OK(ibv_dealloc_pd(par));
	CHECK_EQ(pool.frees, 0);
	CHECK_EQ(pool.bad, 0);
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_cq(cqb));
	free_bufs(buf, 3);
}

/*
 * An allocator that answers NULL: the creation fails with ENOMEM and
 * whatever it had been given before is freed; a resize (CQ, SRQ) fails
 * with ENOMEM and leaves the object as it was.
 */
static void null_fails_with_enomem(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_env_open(&e);
	struct ibv_pd *par = pool_parent(&e);
	struct ibv_cq_init_attr_ex cx = {
		.cqe = 16, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
		.parent_domain = par, .wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	pool.fail_at = 1;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(e.ctx, &cx), ENOMEM);
	CHECK_EQ(pool.n, 1);
	CHECK_EQ(pool.frees, 0);
	pool.fail_at = 0;
	struct ibv_cq *cq = pool_cq(&e, par, 16);

	/* How many buffers a QP takes, then a NULL at each in turn. */
	vt_default_opts(&o);
	int before = pool.n;
	struct ibv_qp *q = vt_create_qp(par, cq, cq, &o, NULL);
	int k = pool.n - before;
	CHECK_GE(k, 1);
	CHECK_OK(ibv_destroy_qp(q));
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = o.max_send_wr, .max_recv_wr = o.max_recv_wr,
			 .max_send_sge = o.max_send_sge, .max_recv_sge = o.max_recv_sge },
	};
	for (int i = 1; i <= k; i++) {
		before = pool.n;
		pool.fail_at = before + i;
		CHECK_NULL_ERRNO(ibv_create_qp(par, &ia), ENOMEM);
		CHECKF(pool.n == before + i, "failing call %d of %d: %d calls made",
		       i, k, pool.n - before);
		CHECKF(pool_live(RSW_RES_TYPE_QP) == 0,
		       "failing call %d of %d: %d buffers not freed", i, k,
		       pool_live(RSW_RES_TYPE_QP));
	}
	pool.fail_at = 0;

	/* After the failures a QP is made, and works. */
	struct ibv_cq *cqb = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	struct ibv_qp *a = vt_create_qp(par, cq, cq, &o, NULL);
	struct ibv_qp *b = vt_create_qp(e.pd, cqb, cqb, &o, NULL);
	vt_qp_connect(a, b->qp_num, &e.gid, &o);
	vt_qp_connect(b, a->qp_num, &e.gid, &o);
	struct vt_buf buf[2];
	for (int i = 0; i < 2; i++)
		vt_buf_reg(&e, &buf[i], 4096, VT_ACCESS_ALL);
	vt_fill(buf[0].p, 4096, 41);
	write_one(a, cq, WR_WRITE, &buf[0], &buf[1], 4096);

	/* A resize the allocator refuses: ENOMEM, the CQ as it was. */
	int cqe = cq->cqe;
	int live = pool_live(RSW_RES_TYPE_CQ);
	pool.fail_at = pool.n + 1;
	CHECK_RET(ibv_resize_cq(cq, 200), ENOMEM);
	pool.fail_at = 0;
	CHECK_EQ(cq->cqe, cqe);
	CHECK_EQ(pool_live(RSW_RES_TYPE_CQ), live);
	vt_fill(buf[0].p, 4096, 42);
	write_one(a, cq, WR_WRITE2, &buf[0], &buf[1], 4096);
	CHECK(pool_holds(RSW_RES_TYPE_CQ, WR_WRITE2));
	CHECK_CQ_EMPTY(cq);

	/* SRQ: a refused creation, then a refused resize. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq(par, &sa));
	struct ibv_srq_attr ma = { .max_wr = 64 };
	pool.fail_at = pool.n + 1;
	CHECK_RET(ibv_modify_srq(srq, &ma, IBV_SRQ_MAX_WR), ENOMEM);
	pool.fail_at = 0;
	struct ibv_srq_attr qa;
	CHECK_OK(ibv_query_srq(srq, &qa));
	CHECK_EQ(qa.max_wr, 16);
	CHECK_OK(ibv_modify_srq(srq, &ma, IBV_SRQ_MAX_WR));
	CHECK_OK(ibv_query_srq(srq, &qa));
	CHECK_EQ(qa.max_wr, 64);
	CHECK_OK(ibv_destroy_srq(srq));

	CHECK_OK(ibv_destroy_qp(a));
	CHECK_OK(ibv_destroy_qp(b));
	CHECK_OK(ibv_destroy_cq(cq));
	CHECK_OK(ibv_destroy_cq(cqb));
	CHECK_EQ(pool_live(0), 0);
	pool_check_all_freed();
	CHECK_OK(ibv_dealloc_pd(par));
	free_bufs(buf, 2);
	(void)wc;
}

static const struct vt_case cases[] = {
	VT_CASE(parent_domain_stands_for_its_pd),
	VT_CASE(allocators_hold_the_rings),
	VT_CASE(receive_rings_from_the_allocator),
	VT_CASE(use_default_falls_back),
	VT_CASE(null_fails_with_enomem),
};
VT_MAIN(cases)
