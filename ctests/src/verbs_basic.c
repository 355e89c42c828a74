/*
 * Devices, contexts, queries, PDs, MRs and the string helpers, as an RDMA
 * programmer expects them from rdma-core.
 */
#include "common/verbs_util.c"

#include <net/if.h>

/* Not in verbs.h: rdma-core exports it for its own tools (IBVERBS_PRIVATE). */
enum vt_gid_type_sysfs {
	VT_GID_TYPE_SYSFS_IB_ROCE_V1,
	VT_GID_TYPE_SYSFS_ROCE_V2,
};
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
		       unsigned int index, enum vt_gid_type_sysfs *type);

static const uint8_t lo_gid[16] = { 0, 0, 0, 0, 0, 0, 0,    0,
				    0, 0, 0xff, 0xff, 127, 0, 0, 1 };

static void device_list(void)
{
	int n = -1;
	struct ibv_device **list = CHECK_PTR(ibv_get_device_list(&n));

	CHECK_GE(n, 1);
	CHECK(list[n] == NULL);
	struct ibv_device *lo = vt_find_device(list, n);
	CHECK(strcmp(ibv_get_device_name(lo), VT_DEVICE) == 0);
	CHECK(strcmp(lo->name, VT_DEVICE) == 0);
	CHECK_EQ(lo->node_type, IBV_NODE_CA);
	CHECK_EQ(lo->transport_type, IBV_TRANSPORT_IB);
	CHECK(ibv_get_device_guid(lo) != 0);

	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);

		CHECK(name != NULL);
		CHECKF(ibv_get_device_index(list[i]) >= 0,
		       "ibv_get_device_index(%s) = %d", name,
		       ibv_get_device_index(list[i]));
		for (int j = 0; j < i; j++) {
			CHECKF(strcmp(name, ibv_get_device_name(list[j])) != 0,
			       "device name %s listed twice", name);
			CHECKF(ibv_get_device_index(list[i]) !=
				       ibv_get_device_index(list[j]),
			       "devices %s and %s share index %d", name,
			       ibv_get_device_name(list[j]),
			       ibv_get_device_index(list[i]));
		}
	}
	/* The GUID is stable: a second list reports the same one. */
	__be64 guid = ibv_get_device_guid(lo);
	int idx = ibv_get_device_index(lo);
	ibv_free_device_list(list);

	struct ibv_device **list2 = CHECK_PTR(ibv_get_device_list(NULL));
	int n2 = 0;
	while (list2[n2])
		n2++;
	CHECK_EQ(n2, n);
	struct ibv_device *lo2 = vt_find_device(list2, n2);
	CHECK_EQ(ibv_get_device_guid(lo2), guid);
	CHECK_EQ(ibv_get_device_index(lo2), idx);
	ibv_free_device_list(list2);
}

static void open_close(void)
{
	int n = 0;
	struct ibv_device **list = CHECK_PTR(ibv_get_device_list(&n));
	struct ibv_device *lo = vt_find_device(list, n);

	struct ibv_context *c1 = CHECK_PTR(ibv_open_device(lo));
	struct ibv_context *c2 = CHECK_PTR(ibv_open_device(lo));
	CHECK(c1 != c2);
	CHECK(c1->device == lo);
	CHECK_GE(c1->num_comp_vectors, 1);
	CHECK_GE(c1->async_fd, 0);
	CHECK(fcntl(c1->async_fd, F_GETFL) != -1);
	/* Contexts outlive the list they were opened from. */
	ibv_free_device_list(list);
	struct ibv_device_attr a;
	CHECK_OK(ibv_query_device(c1, &a));
	CHECK_OK(ibv_close_device(c1));
	CHECK_OK(ibv_query_device(c2, &a));
	CHECK_OK(ibv_close_device(c2));
}

static void query_device(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_device_attr a;

	memset(&a, 0xa5, sizeof(a));
	CHECK_OK(ibv_query_device(ctx, &a));
	CHECK(memchr(a.fw_ver, 0, sizeof(a.fw_ver)) != NULL);
	CHECK(a.fw_ver[0] != 0);
	CHECK(a.node_guid != 0);
	CHECK_EQ(a.node_guid, ibv_get_device_guid(ctx->device));
	CHECK_EQ(a.phys_port_cnt, 1);
	CHECK_GE(a.max_qp, 1);
	CHECK_GE(a.max_qp_wr, 1);
	CHECK_GE(a.max_sge, 1);
	CHECK_GE(a.max_sge_rd, 1);
	CHECK_GE(a.max_cq, 1);
	CHECK_GE(a.max_cqe, 1);
	CHECK_GE(a.max_mr, 1);
	CHECK_GE(a.max_pd, 1);
	CHECK(a.max_mr_size > 0);
	CHECK_GE(a.max_qp_rd_atom, 1);
	CHECK_GE(a.max_qp_init_rd_atom, 1);
	CHECK(a.atomic_cap != IBV_ATOMIC_NONE);
	CHECK_GE(a.max_pkeys, 1);

	struct ibv_device_attr_ex x;
	memset(&x, 0xa5, sizeof(x));
	CHECK_OK(ibv_query_device_ex(ctx, NULL, &x));
	CHECK(memcmp(&x.orig_attr, &a, sizeof(a)) == 0);
	CHECK(x.completion_timestamp_mask != 0);
	CHECK(x.hca_core_clock != 0);

	struct ibv_query_device_ex_input in = { .comp_mask = 0 };
	memset(&x, 0, sizeof(x));
	CHECK_OK(ibv_query_device_ex(ctx, &in, &x));
	CHECK_EQ(x.orig_attr.max_qp, a.max_qp);
	/* No input extension is defined: any bit is rejected. */
	in.comp_mask = 1;
	CHECK_RET(ibv_query_device_ex(ctx, &in, &x), EINVAL);
	CHECK_OK(ibv_close_device(ctx));
}

static void query_port(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_port_attr p;

	memset(&p, 0xa5, sizeof(p));
	CHECK_OK(ibv_query_port(ctx, VT_PORT, &p));
	CHECK_EQ(p.state, IBV_PORT_ACTIVE);
	CHECK_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
	CHECK_GE(p.gid_tbl_len, 1);
	CHECK_GE(p.pkey_tbl_len, 1);
	CHECK_EQ(p.lid, 0);
	CHECK_EQ(p.active_mtu, IBV_MTU_4096);
	CHECK_GE(p.max_mtu, p.active_mtu);
	CHECK(p.max_msg_sz >= (1u << 20));

	CHECK_RET(ibv_query_port(ctx, 2, &p), EINVAL);
	CHECK_RET(ibv_query_port(ctx, 0, &p), EINVAL);
	CHECK_OK(ibv_close_device(ctx));
}

static void query_gid(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_port_attr p;
	union ibv_gid gid;

	CHECK_OK(ibv_query_port(ctx, VT_PORT, &p));
	CHECK_OK(ibv_query_gid(ctx, VT_PORT, 0, &gid));
	CHECK_MEM(gid.raw, lo_gid, 16);
	/* Every entry of the table is readable, none past it. */
	for (int i = 0; i < p.gid_tbl_len; i++)
		CHECK_OK(ibv_query_gid(ctx, VT_PORT, i, &gid));
	CHECK_EQ(ibv_query_gid(ctx, VT_PORT, p.gid_tbl_len, &gid), -1);

	struct ibv_gid_entry ge;
	memset(&ge, 0xa5, sizeof(ge));
	CHECK_OK(ibv_query_gid_ex(ctx, VT_PORT, 0, &ge, 0));
	CHECK_MEM(ge.gid.raw, lo_gid, 16);
	CHECK_EQ(ge.gid_index, 0);
	CHECK_EQ(ge.port_num, VT_PORT);
	CHECK_EQ(ge.gid_type, IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(ge.ndev_ifindex, if_nametoindex("lo"));
	CHECK_RET(ibv_query_gid_ex(ctx, VT_PORT, p.gid_tbl_len, &ge, 0),
		  EINVAL);

	enum vt_gid_type_sysfs t = VT_GID_TYPE_SYSFS_IB_ROCE_V1;
	CHECK_OK(ibv_query_gid_type(ctx, VT_PORT, 0, &t));
	CHECK_EQ(t, VT_GID_TYPE_SYSFS_ROCE_V2);

	size_t cap = (size_t)p.gid_tbl_len + 4;
	struct ibv_gid_entry *tab = vt_alloc(cap * sizeof(*tab));
	ssize_t got = ibv_query_gid_table(ctx, tab, cap, 0);
	CHECKF(got >= 1 && got <= p.gid_tbl_len,
	       "ibv_query_gid_table returned %zd (gid_tbl_len %d)", got,
	       p.gid_tbl_len);
	CHECK_MEM(tab[0].gid.raw, lo_gid, 16);
	CHECK_EQ(tab[0].gid_index, 0);
	CHECK_EQ(tab[0].port_num, VT_PORT);
	CHECK_EQ(tab[0].gid_type, IBV_GID_TYPE_ROCE_V2);
	for (ssize_t i = 0; i < got; i++) {
		struct ibv_gid_entry one;

		CHECK_OK(ibv_query_gid_ex(ctx, tab[i].port_num,
					  tab[i].gid_index, &one, 0));
		CHECK_MEM(&one, &tab[i], sizeof(one));
	}
	/* A table too small for the valid entries is an error. */
	if (got >= 2)
		CHECK_EQ(ibv_query_gid_table(ctx, tab, (size_t)got - 1, 0),
			 -EINVAL);
	CHECK_OK(ibv_close_device(ctx));
}

static void query_pkey(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_port_attr p;
	__be16 pkey = 0;

	CHECK_OK(ibv_query_port(ctx, VT_PORT, &p));
	CHECK_OK(ibv_query_pkey(ctx, VT_PORT, 0, &pkey));
	CHECK_EQ(pkey, htons(0xffff));
	CHECK_EQ(ibv_query_pkey(ctx, VT_PORT, p.pkey_tbl_len, &pkey), -1);
	CHECK_EQ(ibv_get_pkey_index(ctx, VT_PORT, htons(0xffff)), 0);
	CHECK_EQ(ibv_get_pkey_index(ctx, VT_PORT, htons(0x1234)), -1);
	CHECK_OK(ibv_close_device(ctx));
}

static void pd_alloc(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_pd *a = CHECK_PTR(ibv_alloc_pd(ctx));
	struct ibv_pd *b = CHECK_PTR(ibv_alloc_pd(ctx));

	CHECK(a != b);
	CHECK(a->context == ctx);
	CHECK(b->context == ctx);
	CHECK_OK(ibv_dealloc_pd(a));
	CHECK_OK(ibv_dealloc_pd(b));
	CHECK_OK(ibv_close_device(ctx));
}

/* A PD that still has an MR cannot go away (EBUSY, as the kernel says). */
static void pd_busy(void)
{
	struct ibv_context *ctx = vt_open_lo();
	struct ibv_pd *pd = CHECK_PTR(ibv_alloc_pd(ctx));
	void *buf = vt_alloc(4096);
	struct ibv_mr *mr = CHECK_PTR(ibv_reg_mr(pd, buf, 4096, 0));

	CHECK_RET(ibv_dealloc_pd(pd), EBUSY);
	CHECK_OK(ibv_dereg_mr(mr));
	CHECK_OK(ibv_dealloc_pd(pd));
	CHECK_OK(ibv_close_device(ctx));
}

static void mr_reg(void)
{
	struct vt_env e;
	static const int ok_access[] = {
		0,
		IBV_ACCESS_LOCAL_WRITE,
		IBV_ACCESS_REMOTE_READ,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	size_t len = 3 * 4096;
	uint8_t *buf;

	vt_env_open(&e);
	buf = vt_alloc(len);
	for (size_t i = 0; i < sizeof(ok_access) / sizeof(ok_access[0]); i++) {
		/* A non-constant access value takes the iova2 path. */
		volatile int acc = ok_access[i];
		struct ibv_mr *mr = ibv_reg_mr(e.pd, buf + 100, 5000, acc);

		CHECKF(mr != NULL, "ibv_reg_mr(access 0x%x): errno %d (%s)",
		       acc, errno, strerror(errno));
		CHECK(mr->context == e.ctx);
		CHECK(mr->pd == e.pd);
		CHECK(mr->addr == buf + 100);
		CHECK_EQ(mr->length, 5000);
		CHECK_OK(ibv_dereg_mr(mr));
	}
	/* The constant-access form reaches the classic symbol. */
	struct ibv_mr *m1 = CHECK_PTR(ibv_reg_mr(e.pd, buf, len,
						 IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *m2 = CHECK_PTR(ibv_reg_mr(e.pd, buf, len,
						 IBV_ACCESS_LOCAL_WRITE));
	CHECK(m1 != m2);
	CHECK(m1->lkey != m2->lkey);
	CHECK(m1->rkey != m2->rkey);
	CHECK_OK(ibv_dereg_mr(m1));
	CHECK_OK(ibv_dereg_mr(m2));

	/* Remote write or atomic access requires local write access. */
	CHECK_NULL_ERRNO(ibv_reg_mr(e.pd, buf, len, IBV_ACCESS_REMOTE_WRITE),
			 EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(e.pd, buf, len,
				    IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ),
			 EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(e.pd, buf, len, IBV_ACCESS_REMOTE_ATOMIC),
			 EINVAL);
	volatile int rw = IBV_ACCESS_REMOTE_WRITE;
	CHECK_NULL_ERRNO(ibv_reg_mr(e.pd, buf, len, rw), EINVAL);

	/* reg_mr_iova: the MR keeps the iova apart from the address. */
	struct ibv_mr *mi = CHECK_PTR(ibv_reg_mr_iova(
		e.pd, buf, len, 0x10000000, IBV_ACCESS_LOCAL_WRITE));
	CHECK(mi->addr == buf);
	CHECK_EQ(mi->length, len);
	CHECK_OK(ibv_dereg_mr(mi));
}

/* NULL where an object belongs is an error return, never a crash. */
static void null_args(void)
{
	void *buf = vt_alloc(4096);
	struct ibv_device_attr da;
	struct ibv_qp_init_attr ia;

	CHECK_NULL_ERRNO(ibv_open_device(NULL), EINVAL);
	CHECK(ibv_get_device_name(NULL) == NULL);
	CHECK_NULL_ERRNO(ibv_alloc_pd(NULL), EINVAL);
	CHECK_RET(ibv_dealloc_pd(NULL), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(NULL, buf, 4096, 0), EINVAL);
	volatile int acc = IBV_ACCESS_LOCAL_WRITE;
	CHECK_NULL_ERRNO(ibv_reg_mr(NULL, buf, 4096, acc), EINVAL);
	CHECK_RET(ibv_dereg_mr(NULL), EINVAL);
	CHECK(ibv_query_device(NULL, &da) != 0);
	CHECK_NULL_ERRNO(ibv_create_cq(NULL, 16, NULL, NULL, 0), EINVAL);
	CHECK(ibv_destroy_cq(NULL) != 0);
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	CHECK_NULL_ERRNO(ibv_create_qp(NULL, &ia), EINVAL);
	CHECK(ibv_destroy_qp(NULL) != 0);
	CHECK_NULL_ERRNO(ibv_create_comp_channel(NULL), EINVAL);
	CHECK(ibv_destroy_comp_channel(NULL) != 0);
}

/* NULL attribute/output pointers with valid objects: errors too. */
static void null_outputs(void)
{
	struct vt_env e;

	vt_env_open(&e);
	CHECK_NULL_ERRNO(ibv_create_qp(e.pd, NULL), EINVAL);
	CHECK(ibv_query_device(e.ctx, NULL) != 0);
	CHECK(ibv_query_gid(e.ctx, VT_PORT, 0, NULL) != 0);
}

static void strings(void)
{
	static const char *const wc[] = {
		"success",
		"local length error",
		"local QP operation error",
		"local EE context operation error",
		"local protection error",
		"Work Request Flushed Error",
		"memory management operation error",
		"bad response error",
		"local access error",
		"remote invalid request error",
		"remote access error",
		"remote operation error",
		"transport retry counter exceeded",
		"RNR retry counter exceeded",
		"local RDD violation error",
		"remote invalid RD request",
		"aborted error",
		"invalid EE context number",
		"invalid EE context state",
		"fatal error",
		"response timeout error",
		"general error",
		"TM error",
		"TM software rendezvous",
	};
	static const char *const ev[] = {
		"CQ error",
		"local work queue catastrophic error",
		"invalid request local work queue error",
		"local access violation work queue error",
		"communication established",
		"send queue drained",
		"path migrated",
		"path migration request error",
		"local catastrophic error",
		"port active",
		"port error",
		"LID change",
		"P_Key change",
		"SM change",
		"SRQ catastrophic error",
		"SRQ limit reached",
		"last WQE reached",
		"client reregistration",
		"GID table change",
		"WQ fatal",
	};
	static const char *const node[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	static const char *const port[] = {
		"no state change (NOP)", "down", "init", "armed", "active",
		"active defer",
	};

#define STR_IS(call, want)                                                     \
	do {                                                                   \
		const char *s_ = (call);                                       \
		CHECKF(s_ && !strcmp(s_, (want)), "%s = \"%s\", expected \"%s\"", \
		       #call, s_ ? s_ : "(null)", (want));                     \
	} while (0)

	for (int i = 0; i < (int)(sizeof(wc) / sizeof(wc[0])); i++)
		STR_IS(ibv_wc_status_str((enum ibv_wc_status)i), wc[i]);
	STR_IS(ibv_wc_status_str((enum ibv_wc_status)999), "unknown");
	STR_IS(ibv_wc_status_str((enum ibv_wc_status)-1), "unknown");
	for (int i = 0; i < (int)(sizeof(ev) / sizeof(ev[0])); i++)
		STR_IS(ibv_event_type_str((enum ibv_event_type)i), ev[i]);
	STR_IS(ibv_event_type_str((enum ibv_event_type)999), "unknown");
	for (int i = IBV_NODE_CA; i <= IBV_NODE_UNSPECIFIED; i++)
		STR_IS(ibv_node_type_str((enum ibv_node_type)i), node[i]);
	STR_IS(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
	STR_IS(ibv_node_type_str((enum ibv_node_type)999), "unknown");
	for (int i = IBV_PORT_NOP; i <= IBV_PORT_ACTIVE_DEFER; i++)
		STR_IS(ibv_port_state_str((enum ibv_port_state)i), port[i]);
	STR_IS(ibv_port_state_str((enum ibv_port_state)999), "unknown");
#undef STR_IS
}

static const struct vt_case cases[] = {
	VT_CASE(device_list), VT_CASE(open_close), VT_CASE(query_device),
	VT_CASE(query_port),  VT_CASE(query_gid),  VT_CASE(query_pkey),
	VT_CASE(pd_alloc),    VT_CASE(pd_busy),    VT_CASE(mr_reg),
	VT_CASE(null_args),   VT_CASE(null_outputs), VT_CASE(strings),
};
VT_MAIN(cases)
