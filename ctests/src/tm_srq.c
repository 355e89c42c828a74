/*
 * Tag-matching SRQs (IBV_SRQT_TM) on rsw_lo: the device's tm_caps, the
 * checks of ibv_create_srq_ex and ibv_post_srq_ops, tag list operations
 * and their completions (IBV_WC_TM_ADD / DEL / SYNC, IBV_WC_TM_ERR for a
 * tag not in the list), an eager message matched to a tag (payload after
 * the header, the tag's wr_id, ibv_wc_read_tm_info), an unexpected one and
 * a NO_TAG one in the SRQ's ordinary receives with their header, the
 * phase counter (a tag added before a sync takes no part), rendezvous (the
 * receiver reads the data and sends a FIN; a buffer too small is left to
 * software as IBV_WC_TM_RNDV_INCOMPLETE), and rendezvous between two
 * processes. ctests/tests/tm_srq.sh runs it over both of rsw's transports.
 */
#include "common/verbs_util.c"

#include <infiniband/tm_types.h>
#include <sys/wait.h>

#define BUF 4096
#define TAG_MASK 0xffffULL

struct tm_env {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_device_attr_ex dx;
	struct ibv_cq_ex *cqx;	/* the server's: the SRQ's and its QP's */
	struct ibv_cq *ccq;	/* the client's */
	struct ibv_srq *srq;
	struct ibv_qp *s, *c;	/* server (on the SRQ), client */
	struct vt_buf sb, cb;	/* server's buffers, client's */
};

/* One completion as read through the extended CQ. */
struct tm_wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned flags;
	uint32_t byte_len;
	struct ibv_wc_tm_info tm;
};

static struct ibv_cq_ex *tm_cq(struct ibv_context *ctx)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 256,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO,
	};

	return CHECK_PTR(ibv_create_cq_ex(ctx, &ca));
}

static struct ibv_srq *tm_srq(struct tm_env *t, uint32_t tags)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
		      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	a.srq_type = IBV_SRQT_TM;
	a.pd = t->e.pd;
	a.cq = ibv_cq_ex_to_cq(t->cqx);
	a.attr.max_wr = 64;
	a.attr.max_sge = 1;
	a.tm_cap.max_num_tags = tags;
	a.tm_cap.max_ops = 16;
	return CHECK_PTR(ibv_create_srq_ex(t->e.ctx, &a));
}

static void tm_open(struct tm_env *t, uint32_t tags)
{
	memset(t, 0, sizeof(*t));
	vt_env_open(&t->e);
	vt_default_opts(&t->o);
	CHECK_OK(ibv_query_device_ex(t->e.ctx, NULL, &t->dx));
	t->cqx = tm_cq(t->e.ctx);
	t->srq = tm_srq(t, tags);
	t->ccq = CHECK_PTR(ibv_create_cq(t->e.ctx, 256, NULL, NULL, 0));

	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ibv_cq_ex_to_cq(t->cqx);
	ia.recv_cq = ibv_cq_ex_to_cq(t->cqx);
	ia.srq = t->srq;
	/* No send queue of its own, as the pyverbs test makes it: the
	 * rendezvous READs need none of the application's. */
	ia.qp_type = IBV_QPT_RC;
	t->s = CHECK_PTR(ibv_create_qp(t->e.pd, &ia));
	t->c = vt_create_qp(t->e.pd, t->ccq, t->ccq, &t->o, NULL);
	vt_qp_connect(t->s, t->c->qp_num, &t->e.gid, &t->o);
	vt_qp_connect(t->c, t->s->qp_num, &t->e.gid, &t->o);
	vt_buf_reg(&t->e, &t->sb, BUF, VT_ACCESS_ALL);
	vt_buf_reg(&t->e, &t->cb, BUF, VT_ACCESS_ALL);
}

/* The next completion of the server's CQ, within VT_POLL_MS. */
static struct tm_wc tm_poll(struct tm_env *t)
{
	struct ibv_poll_cq_attr pa = { 0 };
	struct tm_wc w;
	uint64_t end = vt_now_ms() + VT_POLL_MS;
	int rc;

	while ((rc = ibv_start_poll(t->cqx, &pa)) == ENOENT) {
		if (vt_now_ms() > end)
			vt_fail(__FILE__, __LINE__, "no TM completion in %d ms",
				VT_POLL_MS);
	}
	CHECK_OK(rc);
	memset(&w, 0, sizeof(w));
	w.wr_id = t->cqx->wr_id;
	w.status = t->cqx->status;
	w.opcode = ibv_wc_read_opcode(t->cqx);
	w.flags = ibv_wc_read_wc_flags(t->cqx);
	w.byte_len = ibv_wc_read_byte_len(t->cqx);
	ibv_wc_read_tm_info(t->cqx, &w.tm);
	ibv_end_poll(t->cqx);
	return w;
}

static void tm_cq_empty(struct tm_env *t)
{
	struct ibv_poll_cq_attr pa = { 0 };

	CHECK_EQ(ibv_start_poll(t->cqx, &pa), ENOENT);
}

#define CHECK_WC_TM(c, op, id)                                                 \
	do {                                                                   \
		CHECKF((c).status == IBV_WC_SUCCESS, "status %d (%s)",          \
		      (c).status, ibv_wc_status_str((c).status));              \
		CHECK_EQ((c).opcode, (op));                                    \
		CHECK_EQ((c).wr_id, (id));                                     \
	} while (0)

static int tm_op(struct tm_env *t, struct ibv_ops_wr *w)
{
	struct ibv_ops_wr *bad = NULL;
	int rc = ibv_post_srq_ops(t->srq, w, &bad);

	if (rc)
		CHECK(bad == w);
	return rc;
}

/* Adds a tag for `len` bytes of the server's buffer at `off`; its handle. */
static uint32_t tm_add(struct tm_env *t, uint64_t tag, uint64_t recv_wr_id,
		       size_t off, uint32_t len, uint32_t unexp, int flags)
{
	struct ibv_sge sge = vt_sge(t->sb.p + off, len, t->sb.mr->lkey);
	struct ibv_ops_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = 1000 + tag;
	w.opcode = IBV_WR_TAG_ADD;
	w.flags = IBV_OPS_SIGNALED | flags;
	w.tm.unexpected_cnt = unexp;
	w.tm.add.recv_wr_id = recv_wr_id;
	w.tm.add.sg_list = &sge;
	w.tm.add.num_sge = 1;
	w.tm.add.tag = tag;
	w.tm.add.mask = TAG_MASK;
	w.tm.handle = 0xdeadbeef;
	CHECK_OK(tm_op(t, &w));
	CHECK(w.tm.handle != 0xdeadbeef);
	return w.tm.handle;
}

static enum ibv_wc_status tm_del(struct tm_env *t, uint32_t handle, int flags)
{
	struct ibv_ops_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = 77;
	w.opcode = IBV_WR_TAG_DEL;
	w.flags = flags;
	w.tm.handle = handle;
	CHECK_OK(tm_op(t, &w));
	struct tm_wc c = tm_poll(t);
	CHECK_EQ(c.opcode, IBV_WC_TM_DEL);
	CHECK_EQ(c.wr_id, 77);
	return c.status;
}

static void tm_sync(struct tm_env *t, uint32_t unexp)
{
	struct ibv_ops_wr w;

	memset(&w, 0, sizeof(w));
	w.wr_id = 27;
	w.opcode = IBV_WR_TAG_SYNC;
	w.flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
	w.tm.unexpected_cnt = unexp;
	CHECK_OK(tm_op(t, &w));
	struct tm_wc c = tm_poll(t);
	CHECK_WC_TM(c, IBV_WC_TM_SYNC, 27);
	CHECK_EQ(c.flags & IBV_WC_TM_SYNC_REQ, 0);
}

static void tm_added(struct tm_env *t, uint64_t tag, int sync_req)
{
	struct tm_wc c = tm_poll(t);

	CHECK_WC_TM(c, IBV_WC_TM_ADD, 1000 + tag);
	CHECK_EQ(!!(c.flags & IBV_WC_TM_SYNC_REQ), sync_req);
}

/* An ordinary receive of the SRQ: `len` bytes at `off` of the server's
 * buffer. */
static void srq_recv(struct tm_env *t, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge = vt_sge(t->sb.p + off, len, t->sb.mr->lkey);
	struct ibv_recv_wr w = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	CHECK_OK(ibv_post_srq_recv(t->srq, &w, &bad));
}

static void put_tmh(uint8_t *p, uint8_t op, uint32_t app_ctx, uint64_t tag)
{
	struct ibv_tmh h = { .opcode = op };

	h.app_ctx = htobe32(app_ctx);
	h.tag = htobe64(tag);
	memcpy(p, &h, sizeof(h));
}

/* The client sends `len` bytes at `off` of its buffer; its completion. */
static void client_send(struct tm_env *t, size_t off, uint32_t len)
{
	struct ibv_sge sge = vt_sge(t->cb.p + off, len, t->cb.mr->lkey);
	struct ibv_send_wr w = vt_send_wr(5, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	struct ibv_wc wc;

	vt_post_send(t->c, &w);
	vt_poll(t->ccq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
}

/* An eager message: header (tag, app_ctx) and `n` payload bytes of
 * pattern `seed`, at the start of the client's buffer; its length. */
static uint32_t eager_msg(struct tm_env *t, uint8_t op, uint64_t tag,
			  uint32_t app_ctx, uint32_t n, unsigned seed)
{
	put_tmh(t->cb.p, op, app_ctx, tag);
	vt_fill(t->cb.p + sizeof(struct ibv_tmh), n, seed);
	return sizeof(struct ibv_tmh) + n;
}

static void caps(void)
{
	struct tm_env t;
	struct ibv_srq_init_attr_ex a;

	tm_open(&t, 8);
	struct ibv_tm_caps *c = &t.dx.tm_caps;
	CHECK(c->flags & IBV_TM_CAP_RC);
	CHECK_GE(c->max_num_tags, 8);
	CHECK_GE(c->max_ops, 16);
	CHECK_GE(c->max_sge, 1);
	CHECK_GE(c->max_rndv_hdr_size, sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh));

	/* A TM-SRQ needs its CQ and its tm_cap, within the caps. */
	memset(&a, 0, sizeof(a));
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
		      IBV_SRQ_INIT_ATTR_TM;
	a.srq_type = IBV_SRQT_TM;
	a.pd = t.e.pd;
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	a.tm_cap.max_num_tags = 4;
	a.tm_cap.max_ops = 4;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(t.e.ctx, &a), EINVAL);
	a.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	a.cq = ibv_cq_ex_to_cq(t.cqx);
	a.tm_cap.max_num_tags = c->max_num_tags + 1;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(t.e.ctx, &a), EINVAL);
	a.tm_cap.max_num_tags = 4;
	a.tm_cap.max_ops = c->max_ops + 1;
	CHECK_NULL_ERRNO(ibv_create_srq_ex(t.e.ctx, &a), EINVAL);
	a.tm_cap.max_ops = 4;
	struct ibv_srq *srq = CHECK_PTR(ibv_create_srq_ex(t.e.ctx, &a));
	/* The CQ is the SRQ's: not destroyed under it. */
	CHECK_RET(ibv_destroy_cq(ibv_cq_ex_to_cq(t.cqx)), EBUSY);
	CHECK_OK(ibv_destroy_srq(srq));

	/* Tag operations on a basic SRQ. */
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = CHECK_PTR(ibv_create_srq(t.e.pd, &ba));
	struct ibv_ops_wr w = { .opcode = IBV_WR_TAG_SYNC }, *bad = NULL;
	CHECK_RET(ibv_post_srq_ops(basic, &w, &bad), EINVAL);
	CHECK(bad == &w);
	CHECK_OK(ibv_destroy_srq(basic));
}

static void tag_ops(void)
{
	struct tm_env t;
	struct ibv_ops_wr w, w2, *bad;

	tm_open(&t, 4);
	uint32_t h1 = tm_add(&t, 1, 101, 0, 64, 0, 0);
	tm_added(&t, 1, 0);
	uint32_t h2 = tm_add(&t, 2, 102, 64, 64, 0, 0);
	tm_added(&t, 2, 0);
	CHECK(h1 != h2);
	CHECK_EQ(tm_del(&t, h1, IBV_OPS_SIGNALED), IBV_WC_SUCCESS);
	/* Deleted, or never added: IBV_WC_TM_ERR, signaled or not. */
	CHECK_EQ(tm_del(&t, h1, IBV_OPS_SIGNALED), IBV_WC_TM_ERR);
	CHECK_EQ(tm_del(&t, 12345, 0), IBV_WC_TM_ERR);
	/* Unsignaled: no completion. */
	memset(&w, 0, sizeof(w));
	w.opcode = IBV_WR_TAG_DEL;
	w.tm.handle = h2;
	CHECK_OK(tm_op(&t, &w));
	tm_cq_empty(&t);
	tm_sync(&t, 0);

	/* The list holds max_num_tags (4): the fifth is refused, with
	 * bad_wr naming it, and the list is as it was. */
	for (int i = 0; i < 4; i++) {
		tm_add(&t, 10 + i, 110 + i, 64 * i, 64, 0, 0);
		tm_added(&t, 10 + i, 0);
	}
	struct ibv_sge sge = vt_sge(t.sb.p, 64, t.sb.mr->lkey);
	memset(&w, 0, sizeof(w));
	w.opcode = IBV_WR_TAG_ADD;
	w.tm.add.sg_list = &sge;
	w.tm.add.num_sge = 1;
	CHECK_EQ(tm_op(&t, &w), ENOMEM);
	/* More SGEs than max_sge, an unknown opcode: EINVAL; a list stops
	 * at the first refused. */
	w2 = w;
	w2.opcode = IBV_WR_TAG_SYNC;
	w2.next = &w;
	w.tm.add.num_sge = 2;
	bad = NULL;
	CHECK_RET(ibv_post_srq_ops(t.srq, &w2, &bad), EINVAL);
	CHECK(bad == &w);
	w.opcode = 99;
	CHECK_EQ(tm_op(&t, &w), EINVAL);
	tm_cq_empty(&t);
}

static void eager_match(void)
{
	struct tm_env t;

	tm_open(&t, 8);
	uint32_t h1 = tm_add(&t, 1, 101, 0, 512, 0, 0);
	tm_added(&t, 1, 0);
	uint32_t h2 = tm_add(&t, 2, 102, 1024, 512, 0, 0);
	tm_added(&t, 2, 0);
	/* A tag that would match too, added later: the oldest wins. */
	tm_add(&t, 2, 103, 2048, 512, 0, 0);
	tm_added(&t, 2, 0);
	/* The mask: 0x10002 & 0xffff matches tag 2. */
	uint32_t len = eager_msg(&t, IBV_TMH_EAGER, 0x10002, 0xabcd, 300, 7);
	client_send(&t, 0, len);
	struct tm_wc c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 102);
	CHECK_EQ(c.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
		 IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
	CHECK_EQ(c.byte_len, 300);
	CHECK_EQ(c.tm.tag, 0x10002);
	CHECK_EQ(c.tm.priv, 0xabcd);
	/* The payload after the header, at the start of the tag's buffer. */
	CHECK_MEM(t.sb.p + 1024, t.cb.p + sizeof(struct ibv_tmh), 300);
	/* The tag is used: deleting it fails; the other one is there. */
	CHECK_EQ(tm_del(&t, h2, IBV_OPS_SIGNALED), IBV_WC_TM_ERR);
	CHECK_EQ(tm_del(&t, h1, IBV_OPS_SIGNALED), IBV_WC_SUCCESS);
	/* The next message with tag 2 takes the later buffer. */
	len = eager_msg(&t, IBV_TMH_EAGER, 2, 1, 16, 8);
	client_send(&t, 0, len);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 103);
	CHECK_EQ(c.byte_len, 16);
	CHECK_MEM(t.sb.p + 2048, t.cb.p + sizeof(struct ibv_tmh), 16);
	/* A header alone: an empty payload. */
	tm_add(&t, 9, 109, 0, 512, 0, 0);
	tm_added(&t, 9, 0);
	len = eager_msg(&t, IBV_TMH_EAGER, 9, 2, 0, 9);
	client_send(&t, 0, len);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 109);
	CHECK_EQ(c.byte_len, 0);
	CHECK_EQ(c.tm.priv, 2);
	tm_cq_empty(&t);
}

static void unexpected(void)
{
	struct tm_env t;

	tm_open(&t, 8);
	tm_add(&t, 1, 101, 0, 512, 0, 0);
	tm_added(&t, 1, 0);
	srq_recv(&t, 201, 1024, 1024);
	srq_recv(&t, 202, 2048, 1024);
	/* No tag 7: the whole message, header and all, in an ordinary
	 * receive; IBV_WC_TM_RECV without TM flags. */
	uint32_t len = eager_msg(&t, IBV_TMH_EAGER, 7, 9, 100, 3);
	client_send(&t, 0, len);
	struct tm_wc c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 201);
	CHECK_EQ(c.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), 0);
	CHECK_EQ(c.byte_len, len);
	CHECK_MEM(t.sb.p + 1024, t.cb.p, len);
	/* Software has not seen it yet (count 0): a tag added now takes no
	 * part, and says so. */
	tm_add(&t, 7, 107, 3072, 512, 0, IBV_OPS_TM_SYNC);
	tm_added(&t, 7, 1);
	len = eager_msg(&t, IBV_TMH_EAGER, 7, 9, 50, 4);
	client_send(&t, 0, len);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 202);
	CHECK_EQ(c.flags & IBV_WC_TM_MATCH, 0);
	/* Two unexpected messages handled: level again, tag 7 matches. */
	tm_sync(&t, 2);
	len = eager_msg(&t, IBV_TMH_EAGER, 7, 9, 40, 5);
	client_send(&t, 0, len);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 107);
	CHECK(c.flags & IBV_WC_TM_MATCH);
	CHECK_EQ(c.byte_len, 40);
	CHECK_MEM(t.sb.p + 3072, t.cb.p + sizeof(struct ibv_tmh), 40);
}

static void no_tag(void)
{
	struct tm_env t;

	tm_open(&t, 8);
	tm_add(&t, 5, 105, 0, 512, 0, 0);
	tm_added(&t, 5, 0);
	srq_recv(&t, 301, 1024, 1024);
	srq_recv(&t, 302, 2048, 1024);
	/* NO_TAG: never matched, even with a tag that would. */
	uint32_t len = eager_msg(&t, IBV_TMH_NO_TAG, 5, 0, 64, 6);
	client_send(&t, 0, len);
	struct tm_wc c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_NO_TAG, 301);
	CHECK_EQ(c.byte_len, len);
	CHECK_MEM(t.sb.p + 1024, t.cb.p, len);
	/* Shorter than a header: a plain receive. */
	memset(t.cb.p, 0x5a, 10);
	client_send(&t, 0, 10);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_RECV, 302);
	CHECK_EQ(c.byte_len, 10);
	CHECK_MEM(t.sb.p + 2048, t.cb.p, 10);
	/* No unexpected message counted: tags still match without a sync. */
	tm_add(&t, 6, 106, 3072, 512, 0, 0);
	tm_added(&t, 6, 0);
}

/* A rendezvous request for `len` bytes at `data` of the client's buffer
 * (its rkey), tag `tag`, at the buffer's start; its length. */
static uint32_t rndv_msg(struct tm_env *t, uint64_t tag, size_t data,
			 uint32_t len)
{
	struct ibv_rvh r;

	put_tmh(t->cb.p, IBV_TMH_RNDV, 0x77, tag);
	r.va = htobe64((uintptr_t)(t->cb.p + data));
	r.rkey = htobe32(t->cb.mr->rkey);
	r.len = htobe32(len);
	memcpy(t->cb.p + sizeof(struct ibv_tmh), &r, sizeof(r));
	vt_fill(t->cb.p + data, len, 11);
	return sizeof(struct ibv_tmh) + sizeof(r);
}

static void rndv(void)
{
	struct tm_env t;
	struct ibv_wc wc;

	tm_open(&t, 8);
	tm_add(&t, 3, 103, 0, 2048, 0, 0);
	tm_added(&t, 3, 0);
	/* The client takes the FIN into a receive of its own. */
	vt_post_recv(t.c, 9, t.cb.p + 3072, 64, t.cb.mr->lkey);
	uint32_t hl = rndv_msg(&t, 3, 1024, 1500);
	client_send(&t, 0, hl);
	/* Matched: the tag is consumed ... */
	struct tm_wc c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 103);
	CHECK_EQ(c.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
		 IBV_WC_TM_MATCH);
	CHECK_EQ(c.tm.tag, 3);
	CHECK_EQ(c.tm.priv, 0x77);
	/* ... the data read in ... */
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 103);
	CHECK_EQ(c.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
		 IBV_WC_TM_DATA_VALID);
	CHECK_EQ(c.byte_len, 1500);
	CHECK_MEM(t.sb.p, t.cb.p + 1024, 1500);
	/* ... and the FIN sent: the request's headers, opcode FIN. */
	vt_poll(t.ccq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 9);
	CHECK_EQ(wc.byte_len, hl);
	CHECK_EQ(t.cb.p[3072], IBV_TMH_FIN);
	CHECK_MEM(t.cb.p + 3072 + 1, t.cb.p + 1, hl - 1);
	tm_cq_empty(&t);
}

static void rndv_incomplete(void)
{
	struct tm_env t;

	tm_open(&t, 8);
	/* 100 bytes of buffer for 1500 bytes of data: software's turn. */
	tm_add(&t, 4, 104, 0, 100, 0, 0);
	tm_added(&t, 4, 0);
	uint32_t hl = rndv_msg(&t, 4, 1024, 1500);
	client_send(&t, 0, hl);
	struct tm_wc c = tm_poll(&t);
	CHECK_EQ(c.status, IBV_WC_TM_RNDV_INCOMPLETE);
	CHECK_EQ(c.opcode, IBV_WC_TM_RECV);
	CHECK_EQ(c.wr_id, 104);
	CHECK(c.flags & IBV_WC_TM_MATCH);
	CHECK_EQ(c.tm.tag, 4);
	CHECK_EQ(c.byte_len, hl);
	/* The headers are in the tag's buffer. */
	CHECK_MEM(t.sb.p, t.cb.p, hl);
	tm_cq_empty(&t);
}

/*
 * Rendezvous between two processes (the same-host path, unless
 * RSW_TRANSPORT=tcp): the child is the client, with its own device,
 * buffers and QP; QPNs, the buffer's address and rkey go through pipes.
 */
static void rndv_procs(void)
{
	struct tm_env t;
	int up[2], down[2];
	struct { uint32_t qpn; } srv;
	struct { uint32_t qpn; uint64_t va; uint32_t rkey; } cli;

	tm_open(&t, 8);
	CHECK_OK(pipe(up));
	CHECK_OK(pipe(down));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct vt_env e;
		struct vt_qp_opts o;
		struct vt_buf b;
		struct ibv_wc wc;
		char go;

		vt_alarm(30, "rndv_procs client");
		vt_env_open(&e);
		vt_default_opts(&o);
		struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
		struct ibv_qp *qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
		vt_buf_reg(&e, &b, BUF, VT_ACCESS_ALL);
		vt_fill(b.p + 1024, 2000, 21);
		cli.qpn = qp->qp_num;
		cli.va = (uintptr_t)(b.p + 1024);
		cli.rkey = b.mr->rkey;
		vt_write_all(up[1], &cli, sizeof(cli));
		vt_read_all(down[0], &srv, sizeof(srv));
		vt_qp_connect(qp, srv.qpn, &e.gid, &o);
		vt_post_recv(qp, 9, b.p + 3072, 64, b.mr->lkey);
		vt_read_all(down[0], &go, 1);
		struct ibv_rvh r = { .va = htobe64(cli.va),
				     .rkey = htobe32(cli.rkey),
				     .len = htobe32(2000) };
		put_tmh(b.p, IBV_TMH_RNDV, 0x99, 42);
		memcpy(b.p + sizeof(struct ibv_tmh), &r, sizeof(r));
		struct ibv_sge sge = vt_sge(b.p, 32, b.mr->lkey);
		struct ibv_send_wr w = vt_send_wr(5, IBV_WR_SEND, &sge,
						  IBV_SEND_SIGNALED);
		vt_post_send(qp, &w);
		vt_poll(cq, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
		vt_poll(cq, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.byte_len, 32);
		CHECK_EQ(b.p[3072], IBV_TMH_FIN);
		CHECK_MEM(b.p + 3072 + 1, b.p + 1, 31);
		/* The server has the data before we go. */
		vt_read_all(down[0], &go, 1);
		_exit(0);
	}
	vt_read_all(up[0], &cli, sizeof(cli));
	srv.qpn = t.s->qp_num;
	/* Reconnected to the child's QP. */
	CHECK_OK(ibv_modify_qp(t.s, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET },
			       IBV_QP_STATE));
	vt_qp_connect(t.s, cli.qpn, &t.e.gid, &t.o);
	tm_add(&t, 42, 142, 0, 2048, 0, 0);
	tm_added(&t, 42, 0);
	vt_write_all(down[1], &srv, sizeof(srv));
	vt_write_all(down[1], "g", 1);
	struct tm_wc c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 142);
	CHECK_EQ(c.flags & IBV_WC_TM_DATA_VALID, 0);
	CHECK_EQ(c.tm.tag, 42);
	CHECK_EQ(c.tm.priv, 0x99);
	c = tm_poll(&t);
	CHECK_WC_TM(c, IBV_WC_TM_RECV, 142);
	CHECK(c.flags & IBV_WC_TM_DATA_VALID);
	CHECK_EQ(c.byte_len, 2000);
	for (size_t i = 0; i < 2000; i++)
		CHECK_EQ(t.sb.p[i], vt_pattern_byte(21, i));
	vt_write_all(down[1], "g", 1);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client status %#x", st);
}

static const struct vt_case cases[] = {
	VT_CASE(caps),	     VT_CASE(tag_ops), VT_CASE(eager_match),
	VT_CASE(unexpected), VT_CASE(no_tag),  VT_CASE(rndv),
	VT_CASE(rndv_incomplete), VT_CASE(rndv_procs),
};
VT_MAIN(cases)
