/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Runtime checks of the static inline code in the public headers.
 *
 * The wrappers are exercised against a hand-built verbs_context and stub
 * versions of the few library functions they fall back to, so the test
 * needs neither libibverbs nor librdmacm.  It builds as C and as C++.
 * Exit status is the number of failed checks (0 = pass).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static int failures;

#define EXPECT(cond)                                                           \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			failures++;                                            \
		}                                                              \
	} while (0)

/* Which fallback entry point the last wrapper reached, and with what. */
static const char *last_call;
static unsigned int last_access;
static uint64_t last_iova;
static size_t last_size;

static struct ibv_mr fake_mr;
static struct ibv_qp fake_qp;
static struct ibv_srq fake_srq;

/* ---- stand-ins for exported library functions ---- */

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
			    int access)
{
	(void)pd;
	(void)addr;
	(void)length;
	last_call = "ibv_reg_mr";
	last_access = (unsigned int)access;
	return &fake_mr;
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length,
				 uint64_t iova, int access)
{
	(void)pd;
	(void)addr;
	(void)length;
	last_call = "ibv_reg_mr_iova";
	last_access = (unsigned int)access;
	last_iova = iova;
	return &fake_mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	(void)pd;
	(void)addr;
	(void)length;
	last_call = "ibv_reg_mr_iova2";
	last_access = access;
	last_iova = iova;
	return &fake_mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	(void)mr;
	last_call = "ibv_dereg_mr";
	return EBUSY;
}

int ibv_query_device(struct ibv_context *context,
		     struct ibv_device_attr *device_attr)
{
	(void)context;
	last_call = "ibv_query_device";
	device_attr->max_qp = 7;
	return 0;
}

int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
		    struct _compat_ibv_port_attr *port_attr)
{
	(void)context;
	(void)port_num;
	last_call = "ibv_query_port";
	((struct ibv_port_attr *)port_attr)->lid = 0x55;
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	(void)pd;
	(void)qp_init_attr;
	last_call = "ibv_create_qp";
	return &fake_qp;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *srq_init_attr)
{
	(void)pd;
	(void)srq_init_attr;
	last_call = "ibv_create_srq";
	return &fake_srq;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
		      uint32_t gid_index, struct ibv_gid_entry *entry,
		      uint32_t flags, size_t entry_size)
{
	(void)context;
	(void)port_num;
	(void)gid_index;
	(void)entry;
	(void)flags;
	last_call = "_ibv_query_gid_ex";
	last_size = entry_size;
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context,
			     struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	(void)context;
	(void)entries;
	(void)flags;
	last_call = "_ibv_query_gid_table";
	last_size = entry_size;
	return (ssize_t)max_entries;
}

static int cq_events_pending;
static unsigned int cq_events_acked;
static struct rdma_cm_id *event_id;	/* owner of the CQ that gets events */

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
		     void **cq_context)
{
	(void)channel;
	if (!cq_events_pending)
		return -1;
	cq_events_pending--;
	*cq = event_id->send_cq;
	*cq_context = event_id;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	cq_events_acked += nevents;
}

/* ---- provider side: a fake device context ---- */

static struct verbs_context vctx_storage;

static struct ibv_context *fresh_context(void)
{
	memset(&vctx_storage, 0, sizeof(vctx_storage));
	vctx_storage.sz = sizeof(vctx_storage);
	vctx_storage.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	return &vctx_storage.context;
}

static int qdx_ret;
static size_t qdx_size;

static int fake_query_device_ex(struct ibv_context *context,
				const struct ibv_query_device_ex_input *input,
				struct ibv_device_attr_ex *attr,
				size_t attr_size)
{
	(void)context;
	(void)input;
	last_call = "query_device_ex";
	qdx_size = attr_size;
	attr->comp_mask = 0x1234;
	return qdx_ret;
}

static int fake_query_port(struct ibv_context *context, uint8_t port_num,
			   struct ibv_port_attr *port_attr, size_t len)
{
	(void)context;
	(void)port_num;
	last_call = "query_port";
	last_size = len;
	port_attr->port_cap_flags2 = 0x77;
	return 0;
}

static struct ibv_qp *fake_create_qp_ex(struct ibv_context *context,
					struct ibv_qp_init_attr_ex *attr)
{
	(void)context;
	(void)attr;
	last_call = "create_qp_ex";
	return &fake_qp;
}

static struct ibv_srq *fake_create_srq_ex(struct ibv_context *context,
					  struct ibv_srq_init_attr_ex *attr)
{
	(void)context;
	(void)attr;
	last_call = "create_srq_ex";
	return &fake_srq;
}

static struct ibv_wq fake_wq;

static struct ibv_wq *fake_create_wq(struct ibv_context *context,
				     struct ibv_wq_init_attr *attr)
{
	(void)context;
	(void)attr;
	memset(&fake_wq, 0xa5, sizeof(fake_wq));
	return &fake_wq;
}

static int close_xrcd_calls;

static int fake_close_xrcd(struct ibv_xrcd *xrcd)
{
	(void)xrcd;
	close_xrcd_calls++;
	return 0;
}

/* Data-path ops: record the last work request seen. */
static struct ibv_send_wr seen_send;
static struct ibv_sge seen_sge;
static struct ibv_recv_wr seen_recv;
static const char *seen_path;
static int poll_script[4];
static int poll_step;
static int notify_calls;

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad)
{
	(void)qp;
	(void)bad;
	seen_send = *wr;
	if (wr->num_sge > 0)
		seen_sge = wr->sg_list[0];
	seen_path = "post_send";
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	(void)qp;
	*bad = wr;
	seen_recv = *wr;
	seen_path = "post_recv";
	return ENOMEM;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad)
{
	(void)srq;
	(void)bad;
	seen_recv = *wr;
	seen_path = "post_srq_recv";
	return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	(void)cq;
	(void)n;
	if (poll_script[poll_step] > 0)
		wc->wr_id = 99;
	return poll_script[poll_step++];
}

static int fake_req_notify(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	notify_calls++;
	return 0;
}

static int bind_calls;

static int fake_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
			struct ibv_mw_bind *bind)
{
	(void)qp;
	(void)mw;
	(void)bind;
	bind_calls++;
	return 0;
}

/* ---- the checks ---- */

static void test_context_lookup(void)
{
	struct ibv_context *ctx = fresh_context();
	const size_t total = sizeof(struct verbs_context);
	const size_t need =
		total - offsetof(struct verbs_context, query_device_ex);

	EXPECT(verbs_get_ctx(ctx) == &vctx_storage);
	EXPECT(verbs_get_ctx_op(ctx, query_device_ex) == NULL);

	vctx_storage.query_device_ex = fake_query_device_ex;
	EXPECT(verbs_get_ctx_op(ctx, query_device_ex) == &vctx_storage);

	/* a provider that only knows the slots up to query_device_ex */
	vctx_storage.sz = need;
	EXPECT(verbs_get_ctx_op(ctx, query_device_ex) == &vctx_storage);
	vctx_storage.sz = need - 1;
	EXPECT(verbs_get_ctx_op(ctx, query_device_ex) == NULL);
	vctx_storage.sz = total;

	ctx->abi_compat = NULL;
	EXPECT(verbs_get_ctx(ctx) == NULL);
	EXPECT(verbs_get_ctx_op(ctx, query_device_ex) == NULL);

	EXPECT(__VERBS_ABI_IS_EXTENDED == (void *)UINTPTR_MAX);
	EXPECT(vext_field_avail(struct ibv_port_attr, lid, 64));
	EXPECT(!vext_field_avail(struct ibv_port_attr, port_cap_flags2, 8));
}

static void test_query_device_ex(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_query_device_ex_input input;
	struct ibv_device_attr_ex attr;

	/* no extended op: zeroed attr plus the classic query */
	memset(&attr, 0xff, sizeof(attr));
	EXPECT(ibv_query_device_ex(ctx, NULL, &attr) == 0);
	EXPECT(strcmp(last_call, "ibv_query_device") == 0);
	EXPECT(attr.orig_attr.max_qp == 7);
	EXPECT(attr.comp_mask == 0 && attr.phys_port_cnt_ex == 0);

	/* provider declines: same fallback */
	vctx_storage.query_device_ex = fake_query_device_ex;
	qdx_ret = EOPNOTSUPP;
	memset(&attr, 0xff, sizeof(attr));
	EXPECT(ibv_query_device_ex(ctx, NULL, &attr) == 0);
	EXPECT(strcmp(last_call, "ibv_query_device") == 0);
	EXPECT(attr.comp_mask == 0);

	/* provider answers, including with a real error */
	qdx_ret = 0;
	EXPECT(ibv_query_device_ex(ctx, NULL, &attr) == 0);
	EXPECT(strcmp(last_call, "query_device_ex") == 0);
	EXPECT(qdx_size == sizeof(struct ibv_device_attr_ex));
	EXPECT(attr.comp_mask == 0x1234);
	qdx_ret = EIO;
	EXPECT(ibv_query_device_ex(ctx, NULL, &attr) == EIO);

	input.comp_mask = 1;
	EXPECT(ibv_query_device_ex(ctx, &input, &attr) == EINVAL);
}

static void test_query_port(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_port_attr attr;

	memset(&attr, 0xff, sizeof(attr));
	EXPECT(ibv_query_port(ctx, 1, &attr) == 0);
	EXPECT(strcmp(last_call, "ibv_query_port") == 0);
	EXPECT(attr.lid == 0x55);
	EXPECT(attr.port_cap_flags2 == 0 && attr.flags == 0);

	vctx_storage.query_port = fake_query_port;
	EXPECT(ibv_query_port(ctx, 1, &attr) == 0);
	EXPECT(strcmp(last_call, "query_port") == 0);
	EXPECT(last_size == sizeof(struct ibv_port_attr));
	EXPECT(attr.port_cap_flags2 == 0x77);
}

static void test_reg_mr(void)
{
	struct ibv_pd pd;
	char buf[64];
	volatile unsigned int runtime_access = IBV_ACCESS_LOCAL_WRITE;

	memset(&pd, 0, sizeof(pd));

	EXPECT(ibv_reg_mr(&pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) ==
	      &fake_mr);
	EXPECT(strcmp(last_call, "ibv_reg_mr") == 0);
	EXPECT(last_access == IBV_ACCESS_LOCAL_WRITE);

	ibv_reg_mr(&pd, buf, sizeof(buf),
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	EXPECT(strcmp(last_call, "ibv_reg_mr_iova2") == 0);
	EXPECT(last_iova == (uint64_t)(uintptr_t)buf);
	EXPECT(last_access ==
	      (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING));

	/* unknown at compile time: always the new entry point */
	ibv_reg_mr(&pd, buf, sizeof(buf), runtime_access);
	EXPECT(strcmp(last_call, "ibv_reg_mr_iova2") == 0);

	ibv_reg_mr_iova(&pd, buf, sizeof(buf), 0x7000, IBV_ACCESS_REMOTE_READ);
	EXPECT(strcmp(last_call, "ibv_reg_mr_iova") == 0);
	EXPECT(last_iova == 0x7000);
	ibv_reg_mr_iova(&pd, buf, sizeof(buf), 0x8000,
			IBV_ACCESS_RELAXED_ORDERING);
	EXPECT(strcmp(last_call, "ibv_reg_mr_iova2") == 0);
	EXPECT(last_iova == 0x8000);

	EXPECT(IBV_ACCESS_OPTIONAL_RANGE == 0x3ff00000);
}

static void test_create_ex(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_qp_init_attr_ex qattr;
	struct ibv_srq_init_attr_ex sattr;

	memset(&qattr, 0, sizeof(qattr));
	qattr.comp_mask = IBV_QP_INIT_ATTR_PD;
	EXPECT(ibv_create_qp_ex(ctx, &qattr) == &fake_qp);
	EXPECT(strcmp(last_call, "ibv_create_qp") == 0);

	qattr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	errno = 0;
	EXPECT(ibv_create_qp_ex(ctx, &qattr) == NULL);
	EXPECT(errno == EOPNOTSUPP);
	vctx_storage.create_qp_ex = fake_create_qp_ex;
	EXPECT(ibv_create_qp_ex(ctx, &qattr) == &fake_qp);
	EXPECT(strcmp(last_call, "create_qp_ex") == 0);

	memset(&sattr, 0, sizeof(sattr));
	sattr.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	EXPECT(ibv_create_srq_ex(ctx, &sattr) == &fake_srq);
	EXPECT(strcmp(last_call, "ibv_create_srq") == 0);
	sattr.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
	sattr.srq_type = IBV_SRQT_BASIC;
	ibv_create_srq_ex(ctx, &sattr);
	EXPECT(strcmp(last_call, "ibv_create_srq") == 0);

	sattr.srq_type = IBV_SRQT_XRC;
	errno = 0;
	EXPECT(ibv_create_srq_ex(ctx, &sattr) == NULL);
	EXPECT(errno == EOPNOTSUPP);
	vctx_storage.create_srq_ex = fake_create_srq_ex;
	EXPECT(ibv_create_srq_ex(ctx, &sattr) == &fake_srq);
	EXPECT(strcmp(last_call, "create_srq_ex") == 0);

	/* PD missing: never the classic call */
	sattr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	sattr.srq_type = IBV_SRQT_BASIC;
	ibv_create_srq_ex(ctx, &sattr);
	EXPECT(strcmp(last_call, "create_srq_ex") == 0);
}

static void test_misc_ext(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_wq_init_attr wattr;
	struct ibv_wq *wq;
	struct ibv_xrcd xrcd;
	struct ibv_srq srq;
	struct ibv_ops_wr op, *bad_op = NULL;
	struct ibv_gid_entry entries[4];

	errno = 0;
	EXPECT(ibv_open_xrcd(ctx, NULL) == NULL && errno == EOPNOTSUPP);
	EXPECT(ibv_alloc_td(ctx, NULL) == NULL);
	EXPECT(ibv_create_cq_ex(ctx, NULL) == NULL);
	EXPECT(ibv_query_rt_values_ex(ctx, NULL) == EOPNOTSUPP);

	memset(&wattr, 0, sizeof(wattr));
	wattr.wq_context = &wattr;
	EXPECT(ibv_create_wq(ctx, &wattr) == NULL);
	vctx_storage.create_wq = fake_create_wq;
	wq = ibv_create_wq(ctx, &wattr);
	EXPECT(wq == &fake_wq);
	EXPECT(wq->wq_context == &wattr && wq->events_completed == 0);

	xrcd.context = ctx;
	vctx_storage.close_xrcd = fake_close_xrcd;
	EXPECT(ibv_close_xrcd(&xrcd) == 0 && close_xrcd_calls == 1);

	memset(&srq, 0, sizeof(srq));
	srq.context = ctx;
	EXPECT(ibv_post_srq_ops(&srq, &op, &bad_op) == EOPNOTSUPP);
	EXPECT(bad_op == &op);

	ibv_query_gid_ex(ctx, 1, 0, &entries[0], 0);
	EXPECT(strcmp(last_call, "_ibv_query_gid_ex") == 0);
	EXPECT(last_size == sizeof(struct ibv_gid_entry) && last_size == 32);
	EXPECT(ibv_query_gid_table(ctx, entries, 4, 0) == 4);
	EXPECT(last_size == sizeof(struct ibv_gid_entry));
}

static void test_small_helpers(void)
{
	EXPECT(ibv_inc_rkey(0x12345610) == 0x12345611);
	EXPECT(ibv_inc_rkey(0x123456ff) == 0x12345600);
	EXPECT(ibv_inc_rkey(0xffffffff) == 0xffffff00);

	EXPECT(ibv_flow_label_to_udp_sport(0) == 0xC000);
	EXPECT(ibv_flow_label_to_udp_sport(0x4000) == 0xC001);
	EXPECT(ibv_flow_label_to_udp_sport(0xFFFFF) == 0xFFC0);
	EXPECT(ibv_flow_label_to_udp_sport(0x12345) == 0xC000 + (0x2345 ^ 0x4));

	EXPECT(ibv_is_qpt_supported(1u << IBV_QPT_UD, IBV_QPT_UD) == 1);
	EXPECT(ibv_is_qpt_supported(1u << IBV_QPT_UD, IBV_QPT_RC) == 0);

	EXPECT(IBV_WC_RECV_RDMA_WITH_IMM == 129 && IBV_WC_DRIVER3 == 137);
	EXPECT((IBV_WC_TM_RECV & IBV_WC_RECV) != 0);
}

static void test_ib_addr(void)
{
	struct ib_addr a, b;

	memset(&a, 0, sizeof(a));
	EXPECT(ib_addr_any(&a) && !ib_addr_loopback(&a));
	ib_addr_set(&a, 0, 0, 0, htobe32(1));
	EXPECT(!ib_addr_any(&a) && ib_addr_loopback(&a));
	EXPECT(a.sib_raw[15] == 1 && a.sib_interface_id == htobe64(1));
	b = a;
	EXPECT(ib_addr_cmp(&a, &b) == 0);
	b.sib_addr8[0] = 0xfe;
	EXPECT(ib_addr_cmp(&a, &b) < 0);
	EXPECT(sizeof(struct sockaddr_ib) == 48);
}

static void test_mw(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_pd pd, other_pd;
	struct ibv_mr mr;
	struct ibv_mw mw;
	struct ibv_mw_bind bind;
	struct ibv_qp qp;

	memset(&pd, 0, sizeof(pd));
	memset(&other_pd, 0, sizeof(other_pd));
	memset(&mr, 0, sizeof(mr));
	memset(&mw, 0, sizeof(mw));
	memset(&bind, 0, sizeof(bind));
	memset(&qp, 0, sizeof(qp));
	pd.context = ctx;
	mw.context = ctx;
	mw.pd = &pd;
	mr.pd = &pd;
	ctx->ops.bind_mw = fake_bind_mw;

	errno = 0;
	EXPECT(ibv_alloc_mw(&pd, IBV_MW_TYPE_1) == NULL && errno == EOPNOTSUPP);

	mw.type = IBV_MW_TYPE_2;
	EXPECT(ibv_bind_mw(&qp, &mw, &bind) == EINVAL);
	mw.type = IBV_MW_TYPE_1;
	bind.bind_info.addr = 0x1000;
	EXPECT(ibv_bind_mw(&qp, &mw, &bind) == EINVAL);
	bind.bind_info.mr = &mr;
	mr.pd = &other_pd;
	EXPECT(ibv_bind_mw(&qp, &mw, &bind) == EPERM);
	mr.pd = &pd;
	EXPECT(ibv_bind_mw(&qp, &mw, &bind) == 0 && bind_calls == 1);
	bind.bind_info.mr = NULL;
	bind.bind_info.addr = 0;
	bind.bind_info.length = 0;
	EXPECT(ibv_bind_mw(&qp, &mw, &bind) == 0 && bind_calls == 2);
}

static void test_rdma_verbs(void)
{
	struct ibv_context *ctx = fresh_context();
	struct ibv_pd pd;
	struct ibv_qp qp;
	struct ibv_srq srq;
	struct ibv_cq cq;
	struct ibv_comp_channel chan;
	struct ibv_mr mr;
	struct ibv_ah ah;
	struct ibv_wc wc;
	struct rdma_cm_id id;
	char buf[128];

	memset(&pd, 0, sizeof(pd));
	memset(&qp, 0, sizeof(qp));
	memset(&srq, 0, sizeof(srq));
	memset(&cq, 0, sizeof(cq));
	memset(&mr, 0, sizeof(mr));
	memset(&id, 0, sizeof(id));
	pd.context = qp.context = srq.context = cq.context = ctx;
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->ops.post_srq_recv = fake_post_srq_recv;
	ctx->ops.poll_cq = fake_poll_cq;
	ctx->ops.req_notify_cq = fake_req_notify;
	mr.addr = buf;
	mr.length = sizeof(buf);
	mr.lkey = 0xabc;
	id.pd = &pd;
	id.qp = &qp;
	id.send_cq = id.recv_cq = &cq;
	memset(&chan, 0, sizeof(chan));
	event_id = &id;
	id.send_cq_channel = id.recv_cq_channel = &chan;

	errno = 0;
	EXPECT(rdma_seterrno(0) == 0 && errno == 0);
	EXPECT(rdma_seterrno(EAGAIN) == -1 && errno == EAGAIN);

	EXPECT(rdma_reg_msgs(&id, buf, sizeof(buf)) == &fake_mr);
	EXPECT(last_access == IBV_ACCESS_LOCAL_WRITE);
	rdma_reg_read(&id, buf, sizeof(buf));
	EXPECT(last_access == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
	rdma_reg_write(&id, buf, sizeof(buf));
	EXPECT(last_access ==
	      (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	errno = 0;
	EXPECT(rdma_dereg_mr(&mr) == -1 && errno == EBUSY);

	EXPECT(rdma_post_send(&id, &id, buf + 8, 16, &mr, IBV_SEND_SIGNALED) ==
	      0);
	EXPECT(strcmp(seen_path, "post_send") == 0);
	EXPECT(seen_send.opcode == IBV_WR_SEND && seen_send.num_sge == 1);
	EXPECT(seen_send.wr_id == (uint64_t)(uintptr_t)&id);
	EXPECT(seen_send.send_flags == IBV_SEND_SIGNALED);
	EXPECT(seen_send.next == NULL);
	EXPECT(seen_sge.addr == (uint64_t)(uintptr_t)(buf + 8));
	EXPECT(seen_sge.length == 16 && seen_sge.lkey == 0xabc);

	rdma_post_send(&id, NULL, buf, 4, NULL, IBV_SEND_INLINE);
	EXPECT(seen_sge.lkey == 0);

	rdma_post_write(&id, NULL, buf, 8, &mr, 0, 0x1122334455ull, 0x99);
	EXPECT(seen_send.opcode == IBV_WR_RDMA_WRITE);
	EXPECT(seen_send.wr.rdma.remote_addr == 0x1122334455ull);
	EXPECT(seen_send.wr.rdma.rkey == 0x99);

	rdma_post_read(&id, NULL, buf, 8, &mr, 0, 0x42, 0x43);
	EXPECT(seen_send.opcode == IBV_WR_RDMA_READ);
	EXPECT(seen_send.wr.rdma.remote_addr == 0x42 &&
	      seen_send.wr.rdma.rkey == 0x43);

	rdma_post_ud_send(&id, NULL, buf, 8, &mr, 0, &ah, 0x10203);
	EXPECT(seen_send.wr.ud.ah == &ah && seen_send.wr.ud.remote_qpn == 0x10203);
	EXPECT(seen_send.wr.ud.remote_qkey == RDMA_UDP_QKEY);

	/* receive: QP path reports the provider's error as -1/errno */
	errno = 0;
	EXPECT(rdma_post_recv(&id, &id, buf, sizeof(buf), &mr) == -1);
	EXPECT(errno == ENOMEM && strcmp(seen_path, "post_recv") == 0);
	EXPECT(seen_recv.wr_id == (uint64_t)(uintptr_t)&id);

	/* receive: an SRQ on the id takes precedence over the QP */
	id.srq = &srq;
	EXPECT(rdma_post_recv(&id, NULL, buf, 32, &mr) == 0);
	EXPECT(strcmp(seen_path, "post_srq_recv") == 0);
	id.srq = NULL;

	/* completion: empty, arm, still empty, event, then one completion */
	poll_script[0] = 0;
	poll_script[1] = 0;
	poll_script[2] = 1;
	poll_step = 0;
	cq_events_pending = 1;
	cq_events_acked = 0;
	notify_calls = 0;
	memset(&wc, 0, sizeof(wc));
	EXPECT(rdma_get_send_comp(&id, &wc) == 1);
	EXPECT(wc.wr_id == 99 && poll_step == 3);
	EXPECT(notify_calls == 1 && cq_events_acked == 1);

	/* completion found by the second poll: no sleep, no ack */
	poll_script[0] = 0;
	poll_script[1] = 1;
	poll_step = 0;
	EXPECT(rdma_get_recv_comp(&id, &wc) == 1);
	EXPECT(poll_step == 2 && cq_events_acked == 1);

	/* a poll error becomes -1 */
	poll_script[0] = -EIO;
	poll_step = 0;
	EXPECT(rdma_get_send_comp(&id, &wc) == -1);
}

int main(void)
{
	test_context_lookup();
	test_query_device_ex();
	test_query_port();
	test_reg_mr();
	test_create_ex();
	test_misc_ext();
	test_small_helpers();
	test_ib_addr();
	test_mw();
	test_rdma_verbs();

	if (failures)
		fprintf(stderr, "inline_wrappers: %d check(s) failed\n",
			failures);
	else
		printf("inline_wrappers: all checks passed\n");
	return failures ? 1 : 0;
}
