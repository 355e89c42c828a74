/*
 * Raw packet QPs, flow steering, work queues and RSS on rsw_lo
 * (ctests/tests/raw_packet_netns.sh runs it as root in a network namespace
 * of its own, where lo carries nothing but these frames).
 *
 * Frames are Ethernet/IPv4/UDP with a payload pattern; a receiver must get
 * each byte for byte (byte_len the frame's length), and only where one of
 * its flows matches. RSS cases compute the Toeplitz hash of every frame
 * here and check that it landed in the WQ the indirection table names.
 */
#include "common/verbs_util.c"

#include <linux/capability.h>
#include <sys/syscall.h>

#define FRAME_LEN 128
#define SLOT 2048
#define NFRAMES 16

static const uint8_t MAC_A[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0xa1 };
static const uint8_t MAC_B[6] = { 0x02, 0x00, 0x00, 0x00, 0x00, 0xb2 };
static const uint8_t SRC_IP[4] = { 192, 0, 2, 1 };
static const uint8_t DST_IP[4] = { 192, 0, 2, 2 };

/* Microsoft's RSS verification key. */
static const uint8_t RSS_KEY[40] = {
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
	0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
	0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
	0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

/* Eth | IPv4 | UDP sport->dport | payload (pattern `seed`). */
static void build_frame(uint8_t *f, const uint8_t *dst_mac, uint16_t sport,
			uint16_t dport, unsigned seed)
{
	memset(f, 0, FRAME_LEN);
	memcpy(f, dst_mac, 6);
	memcpy(f + 6, MAC_A, 6);
	f[12] = 0x08;
	f[13] = 0x00;
	uint8_t *ip = f + 14;
	ip[0] = 0x45;
	ip[2] = (FRAME_LEN - 14) >> 8;
	ip[3] = (FRAME_LEN - 14) & 0xff;
	ip[8] = 64;
	ip[9] = 17;
	memcpy(ip + 12, SRC_IP, 4);
	memcpy(ip + 16, DST_IP, 4);
	uint8_t *udp = ip + 20;
	udp[0] = sport >> 8;
	udp[1] = sport & 0xff;
	udp[2] = dport >> 8;
	udp[3] = dport & 0xff;
	udp[4] = (FRAME_LEN - 34) >> 8;
	udp[5] = (FRAME_LEN - 34) & 0xff;
	vt_fill(udp + 8, FRAME_LEN - 42, seed);
}

/* The Toeplitz hash as Microsoft defines it for RSS. */
static uint32_t toeplitz(const uint8_t *key, size_t klen, const uint8_t *in,
			 size_t n)
{
	uint32_t hash = 0, window = 0;
	size_t bit;

	for (bit = 0; bit < 32; bit++)
		window = window << 1 | ((key[bit / 8] >> (7 - bit % 8)) & 1);
	for (size_t i = 0; i < n * 8; i++) {
		if (in[i / 8] & (0x80 >> (i % 8)))
			hash ^= window;
		bit = i + 32;
		window = window << 1 |
			 (bit / 8 < klen ? (key[bit / 8] >> (7 - bit % 8)) & 1 : 0);
	}
	return hash;
}

/* A flow of ETH (dst MAC) + IPv4 (dst) + UDP (dst port). */
struct flow_eth_ip_udp {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_ipv4 ip;
	struct ibv_flow_spec_tcp_udp udp;
};

static struct ibv_flow *flow_to(struct ibv_qp *qp, const uint8_t *mac,
				uint16_t dport)
{
	struct flow_eth_ip_udp f;

	memset(&f, 0, sizeof(f));
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	f.attr.size = sizeof(f);
	f.attr.num_of_specs = 3;
	f.attr.port = 1;
	f.eth.type = IBV_FLOW_SPEC_ETH;
	f.eth.size = sizeof(f.eth);
	memcpy(f.eth.val.dst_mac, mac, 6);
	memset(f.eth.mask.dst_mac, 0xff, 6);
	f.ip.type = IBV_FLOW_SPEC_IPV4;
	f.ip.size = sizeof(f.ip);
	memcpy(&f.ip.val.dst_ip, DST_IP, 4);
	f.ip.mask.dst_ip = 0xffffffff;
	f.udp.type = IBV_FLOW_SPEC_UDP;
	f.udp.size = sizeof(f.udp);
	f.udp.val.dst_port = htons(dport);
	f.udp.mask.dst_port = 0xffff;
	return ibv_create_flow(qp, &f.attr);
}

struct raw {
	struct vt_env e;
	struct vt_buf buf;	/* NFRAMES slots of SLOT bytes */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct ibv_qp *raw_qp(struct vt_env *e, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RAW_PACKET;
	a.cap.max_send_wr = 32;
	a.cap.max_recv_wr = 32;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 2;
	return ibv_create_qp(e->pd, &a);
}

static void raw_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT));
	a.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE));
}

static void raw_open(struct raw *r, struct vt_env *e, struct ibv_comp_channel *ch)
{
	r->e = *e;
	vt_buf_reg(e, &r->buf, NFRAMES * SLOT, IBV_ACCESS_LOCAL_WRITE);
	r->cq = CHECK_PTR(ibv_create_cq(e->ctx, 64, NULL, ch, 0));
	r->qp = CHECK_PTR(raw_qp(e, r->cq));
	raw_to_rts(r->qp);
}

static void post_slot(struct raw *r, int slot)
{
	vt_post_recv(r->qp, 1000 + slot, r->buf.p + slot * SLOT, SLOT,
		     r->buf.mr->lkey);
}

/* Sends slot `slot` of r's buffer (a frame put there) and checks its
 * completion. */
static void send_slot(struct raw *r, int slot, uint32_t len)
{
	struct ibv_sge sge = vt_sge(r->buf.p + slot * SLOT, len, r->buf.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2000 + slot, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	struct ibv_wc wc;

	vt_post_send(r->qp, &wr);
	vt_poll(r->cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 2000 + slot);
}

static void expect_frame(struct raw *r, int slot, const uint8_t *frame)
{
	struct ibv_wc wc;

	vt_poll(r->cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 1000 + slot);
	CHECK_EQ(wc.byte_len, FRAME_LEN);
	CHECK_EQ(wc.qp_num, r->qp->qp_num);
	CHECK_MEM(r->buf.p + slot * SLOT, frame, FRAME_LEN);
}

/* A frame reaches the QP whose flow matches, byte for byte, and not the
 * one whose flow names another port; the sender (no flow) gets nothing. */
static void raw_flow_steers(void)
{
	struct vt_env e;
	struct raw s, a, b;
	uint8_t frame[FRAME_LEN];

	vt_env_open(&e);
	raw_open(&s, &e, NULL);
	raw_open(&a, &e, NULL);
	raw_open(&b, &e, NULL);
	struct ibv_flow *fa = CHECK_PTR(flow_to(a.qp, MAC_B, 4791));
	struct ibv_flow *fb = CHECK_PTR(flow_to(b.qp, MAC_B, 4792));
	post_slot(&a, 0);
	post_slot(&b, 0);
	post_slot(&s, 1);
	build_frame(frame, MAC_B, 1000, 4791, 7);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&a, 0, frame);
	CHECK_NO_WC_FOR(b.cq, 200);
	/* The other port reaches b, not a; another MAC reaches neither. */
	post_slot(&a, 1);
	build_frame(frame, MAC_B, 1000, 4792, 8);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&b, 0, frame);
	build_frame(frame, MAC_A, 1000, 4791, 9);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	CHECK_NO_WC_FOR(a.cq, 200);
	CHECK_CQ_EMPTY(s.cq);
	/* Flows hold their QP. */
	CHECK_RET(ibv_destroy_qp(a.qp), EBUSY);
	CHECK_OK(ibv_destroy_flow(fa));
	CHECK_OK(ibv_destroy_flow(fb));
	CHECK_OK(ibv_destroy_qp(a.qp));
}

/* A flow of no specs of the given kind (ALL_DEFAULT, MC_DEFAULT, SNIFFER). */
static struct ibv_flow *flow_kind(struct ibv_qp *qp, enum ibv_flow_attr_type t)
{
	struct ibv_flow_attr a;

	memset(&a, 0, sizeof(a));
	a.type = t;
	a.size = sizeof(a);
	a.port = 1;
	return ibv_create_flow(qp, &a);
}

/* Which QP a frame goes to: the better priority wins, a sniffer sees
 * everything, the default rules take what no NORMAL rule matched. */
static void raw_flow_kinds(void)
{
	struct vt_env e;
	struct raw s, hi, lo, sniff, all, mc;
	uint8_t frame[FRAME_LEN];
	static const uint8_t MCAST[6] = { 0x01, 0x00, 0x5e, 0x01, 0x02, 0x03 };

	vt_env_open(&e);
	raw_open(&s, &e, NULL);
	raw_open(&hi, &e, NULL);
	raw_open(&lo, &e, NULL);
	raw_open(&sniff, &e, NULL);
	raw_open(&all, &e, NULL);
	raw_open(&mc, &e, NULL);
	struct flow_eth_ip_udp f;
	memset(&f, 0, sizeof(f));
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	f.attr.size = sizeof(f.attr) + sizeof(f.udp);
	f.attr.num_of_specs = 1;
	f.attr.port = 1;
	/* One UDP spec right behind the header. */
	struct ibv_flow_spec_tcp_udp *u = (void *)&f.eth;
	u->type = IBV_FLOW_SPEC_UDP;
	u->size = sizeof(*u);
	u->val.dst_port = htons(8000);
	u->mask.dst_port = 0xffff;
	f.attr.priority = 1;
	struct ibv_flow *fl = CHECK_PTR(ibv_create_flow(lo.qp, &f.attr));
	f.attr.priority = 0;
	struct ibv_flow *fh = CHECK_PTR(ibv_create_flow(hi.qp, &f.attr));
	struct ibv_flow *fs = CHECK_PTR(flow_kind(sniff.qp, IBV_FLOW_ATTR_SNIFFER));
	struct ibv_flow *fa = CHECK_PTR(flow_kind(all.qp, IBV_FLOW_ATTR_ALL_DEFAULT));
	struct ibv_flow *fm = CHECK_PTR(flow_kind(mc.qp, IBV_FLOW_ATTR_MC_DEFAULT));
	for (int i = 0; i < 3; i++) {
		post_slot(&hi, i);
		post_slot(&lo, i);
		post_slot(&sniff, i);
		post_slot(&all, i);
		post_slot(&mc, i);
	}
	/* Matched by both NORMAL rules: priority 0 takes it. */
	build_frame(frame, MAC_B, 1, 8000, 21);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&hi, 0, frame);
	expect_frame(&sniff, 0, frame);
	/* Matched by none, unicast: ALL_DEFAULT. */
	build_frame(frame, MAC_B, 1, 8001, 22);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&all, 0, frame);
	expect_frame(&sniff, 1, frame);
	/* Matched by none, multicast: MC_DEFAULT and ALL_DEFAULT. */
	build_frame(frame, MCAST, 1, 8002, 23);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&mc, 0, frame);
	expect_frame(&all, 1, frame);
	expect_frame(&sniff, 2, frame);
	CHECK_NO_WC_FOR(lo.cq, 200);
	CHECK_CQ_EMPTY(hi.cq);
	CHECK_CQ_EMPTY(mc.cq);
	/* Without the better rule, the other takes its frames. */
	CHECK_OK(ibv_destroy_flow(fh));
	build_frame(frame, MAC_B, 1, 8000, 24);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&lo, 0, frame);
	CHECK_OK(ibv_destroy_flow(fl));
	CHECK_OK(ibv_destroy_flow(fs));
	CHECK_OK(ibv_destroy_flow(fa));
	CHECK_OK(ibv_destroy_flow(fm));
}

/* Destroying the flow stops delivery; a new one starts it again. */
static void raw_flow_destroy_stops(void)
{
	struct vt_env e;
	struct raw s, a;
	uint8_t frame[FRAME_LEN];

	vt_env_open(&e);
	raw_open(&s, &e, NULL);
	raw_open(&a, &e, NULL);
	struct ibv_flow *f = CHECK_PTR(flow_to(a.qp, MAC_B, 5000));
	post_slot(&a, 0);
	post_slot(&a, 1);
	build_frame(frame, MAC_B, 1, 5000, 11);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&a, 0, frame);
	CHECK_OK(ibv_destroy_flow(f));
	send_slot(&s, 0, FRAME_LEN);
	CHECK_NO_WC_FOR(a.cq, 300);
	f = CHECK_PTR(flow_to(a.qp, MAC_B, 5000));
	build_frame(frame, MAC_B, 2, 5000, 12);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	expect_frame(&a, 1, frame);
	CHECK_OK(ibv_destroy_flow(f));
}

/* A frame spread over two receive SGEs, and the receive CQ's completion
 * channel fires for it. */
static void raw_channel_and_sges(void)
{
	struct vt_env e;
	struct raw s, a;
	uint8_t frame[FRAME_LEN];

	vt_env_open(&e);
	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	raw_open(&s, &e, NULL);
	raw_open(&a, &e, ch);
	struct ibv_flow *f = CHECK_PTR(flow_to(a.qp, MAC_B, 6000));
	struct ibv_sge sg[2] = {
		vt_sge(a.buf.p, 50, a.buf.mr->lkey),
		vt_sge(a.buf.p + SLOT, SLOT, a.buf.mr->lkey),
	};
	struct ibv_recv_wr rwr = { .wr_id = 77, .sg_list = sg, .num_sge = 2 };
	struct ibv_recv_wr *bad;
	CHECK_OK(ibv_post_recv(a.qp, &rwr, &bad));
	CHECK_OK(ibv_req_notify_cq(a.cq, 0));
	build_frame(frame, MAC_B, 3, 6000, 13);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK_EQ(poll(&pfd, 1, VT_POLL_MS), 1);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	CHECK(ev_cq == a.cq);
	ibv_ack_cq_events(a.cq, 1);
	struct ibv_wc wc;
	vt_poll(a.cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.byte_len, FRAME_LEN);
	CHECK_MEM(a.buf.p, frame, 50);
	CHECK_MEM(a.buf.p + SLOT, frame + 50, FRAME_LEN - 50);
	CHECK_OK(ibv_destroy_flow(f));
}

/* Bad flow specs and verbs the QP cannot take. */
static void raw_flow_errors(void)
{
	struct vt_env e;
	struct raw a;
	struct flow_eth_ip_udp f;

	vt_env_open(&e);
	raw_open(&a, &e, NULL);
	memset(&f, 0, sizeof(f));
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	f.attr.size = sizeof(f.attr) + sizeof(f.eth);
	f.attr.num_of_specs = 1;
	f.attr.port = 1;
	f.eth.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
	f.eth.size = sizeof(f.eth);
	CHECK_NULL_ERRNO(ibv_create_flow(a.qp, &f.attr), EOPNOTSUPP);
	f.eth.type = IBV_FLOW_SPEC_ETH;
	f.attr.port = 2;
	CHECK_NULL_ERRNO(ibv_create_flow(a.qp, &f.attr), EINVAL);
	f.attr.port = 1;
	f.eth.size = 8; /* too short for its filters */
	CHECK_NULL_ERRNO(ibv_create_flow(a.qp, &f.attr), EINVAL);
	f.eth.size = sizeof(f.eth);
	f.attr.type = IBV_FLOW_ATTR_SNIFFER; /* no specs for a sniffer */
	CHECK_NULL_ERRNO(ibv_create_flow(a.qp, &f.attr), EINVAL);
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	f.attr.flags = IBV_FLOW_ATTR_FLAGS_EGRESS;
	CHECK_NULL_ERRNO(ibv_create_flow(a.qp, &f.attr), EOPNOTSUPP);
	f.attr.flags = 0;
	struct ibv_flow *ok = CHECK_PTR(ibv_create_flow(a.qp, &f.attr));
	CHECK_OK(ibv_destroy_flow(ok));
	/* Flows are for raw packet QPs. */
	struct vt_qp_opts o;
	vt_default_opts(&o);
	struct ibv_qp *rc = CHECK_PTR(vt_create_qp(e.pd, a.cq, a.cq, &o, NULL));
	CHECK_NULL_ERRNO(ibv_create_flow(rc, &f.attr), EOPNOTSUPP);
	/* A raw packet QP sends frames: nothing else. */
	struct ibv_sge sge = vt_sge(a.buf.p, 64, a.buf.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge, 0), *bad;
	CHECK_RET(ibv_post_send(a.qp, &wr, &bad), EINVAL);
	/* A frame shorter than an Ethernet header fails, and the QP too. */
	struct ibv_send_wr shortwr = vt_send_wr(2, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	sge.length = 10;
	CHECK_OK(ibv_post_send(a.qp, &shortwr, &bad));
	struct ibv_wc wc;
	vt_poll(a.cq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_LEN_ERR);
	CHECK_EQ(vt_qp_state(a.qp), IBV_QPS_ERR);
}

/* Without CAP_NET_RAW a raw packet QP is EPERM (as the kernel's are). */
static void raw_needs_cap_net_raw(void)
{
	struct vt_env e;

	vt_env_open(&e);
	struct __user_cap_header_struct h = {
		.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0,
	};
	struct __user_cap_data_struct d[2];
	CHECK_OK((int)syscall(SYS_capget, &h, d));
	d[0].effective &= ~(1u << CAP_NET_RAW);
	CHECK_OK((int)syscall(SYS_capset, &h, d));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 8, NULL, NULL, 0));
	CHECK_NULL_ERRNO(raw_qp(&e, cq), EPERM);
}

/* The device says what it offers. */
static void raw_device_caps(void)
{
	struct vt_env e;
	struct ibv_device_attr_ex x;

	vt_env_open(&e);
	memset(&x, 0, sizeof(x));
	CHECK_OK(ibv_query_device_ex(e.ctx, NULL, &x));
	CHECK_EQ(x.rss_caps.supported_qpts, 1u << IBV_QPT_RAW_PACKET);
	CHECK_EQ(x.rss_caps.rx_hash_function, IBV_RX_HASH_FUNC_TOEPLITZ);
	CHECK(x.rss_caps.rx_hash_fields_mask & IBV_RX_HASH_DST_PORT_UDP);
	CHECK_GE(x.rss_caps.max_rwq_indirection_table_size, 4);
	CHECK_GE(x.max_wq_type_rq, 4);
	CHECK_EQ(x.raw_packet_caps, 0);
}

struct rss {
	struct ibv_cq *cq[2];
	struct ibv_wq *wq[4];
	struct ibv_rwq_ind_table *tbl;
	struct ibv_qp *qp;
};

static void rss_open(struct vt_env *e, struct rss *r, uint64_t fields)
{
	struct ibv_wq_init_attr wa;
	struct ibv_wq_attr ma;

	for (int i = 0; i < 2; i++)
		r->cq[i] = CHECK_PTR(ibv_create_cq(e->ctx, 64, NULL, NULL, 0));
	for (int i = 0; i < 4; i++) {
		memset(&wa, 0, sizeof(wa));
		wa.wq_type = IBV_WQT_RQ;
		wa.max_wr = 32;
		wa.max_sge = 1;
		wa.pd = e->pd;
		wa.cq = r->cq[i % 2];
		r->wq[i] = CHECK_PTR(ibv_create_wq(e->ctx, &wa));
		CHECK_EQ(r->wq[i]->state, IBV_WQS_RESET);
		memset(&ma, 0, sizeof(ma));
		ma.attr_mask = IBV_WQ_ATTR_STATE;
		ma.wq_state = IBV_WQS_RDY;
		CHECK_OK(ibv_modify_wq(r->wq[i], &ma));
		CHECK_EQ(r->wq[i]->state, IBV_WQS_RDY);
	}
	struct ibv_rwq_ind_table_init_attr ta = {
		.log_ind_tbl_size = 2, .ind_tbl = r->wq, .comp_mask = 0,
	};
	r->tbl = CHECK_PTR(ibv_create_rwq_ind_table(e->ctx, &ta));
	struct ibv_qp_init_attr_ex qa;
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RAW_PACKET;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE |
		       IBV_QP_INIT_ATTR_RX_HASH;
	qa.pd = e->pd;
	qa.rwq_ind_tbl = r->tbl;
	qa.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	qa.rx_hash_conf.rx_hash_key_len = sizeof(RSS_KEY);
	qa.rx_hash_conf.rx_hash_key = (uint8_t *)RSS_KEY;
	qa.rx_hash_conf.rx_hash_fields_mask = fields;
	r->qp = CHECK_PTR(ibv_create_qp_ex(e->ctx, &qa));
}

/* Frames with different UDP source ports spread over the four WQs, each
 * into the WQ its Toeplitz hash names. */
static void rss_spreads_by_hash(void)
{
	struct vt_env e;
	struct raw s;
	struct rss r;
	struct vt_buf rb;
	uint8_t frame[FRAME_LEN];
	int hits[4] = { 0 };

	vt_env_open(&e);
	raw_open(&s, &e, NULL);
	rss_open(&e, &r, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
				 IBV_RX_HASH_SRC_PORT_UDP |
				 IBV_RX_HASH_DST_PORT_UDP);
	vt_buf_reg(&e, &rb, 4 * NFRAMES * SLOT, IBV_ACCESS_LOCAL_WRITE);
	for (int w = 0; w < 4; w++)
		for (int k = 0; k < NFRAMES; k++) {
			int slot = w * NFRAMES + k;
			struct ibv_sge sge = vt_sge(rb.p + slot * SLOT, SLOT,
						    rb.mr->lkey);
			struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge,
						  .num_sge = 1 }, *bad;
			CHECK_OK(ibv_post_wq_recv(r.wq[w], &wr, &bad));
		}
	struct ibv_flow *f = CHECK_PTR(flow_to(r.qp, MAC_B, 7000));
	for (int i = 0; i < 32; i++) {
		uint16_t sport = 20000 + 37 * i;
		uint8_t in[12];
		memcpy(in, SRC_IP, 4);
		memcpy(in + 4, DST_IP, 4);
		in[8] = sport >> 8;
		in[9] = sport & 0xff;
		in[10] = 7000 >> 8;
		in[11] = 7000 & 0xff;
		int w = toeplitz(RSS_KEY, sizeof(RSS_KEY), in, 12) & 3;
		build_frame(frame, MAC_B, sport, 7000, 100 + i);
		memcpy(s.buf.p, frame, FRAME_LEN);
		send_slot(&s, 0, FRAME_LEN);
		struct ibv_wc wc;
		vt_poll(r.cq[w % 2], &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECKF((int)wc.wr_id / NFRAMES == w,
		       "frame %d (sport %u): WQ %d, expected %d", i, sport,
		       (int)wc.wr_id / NFRAMES, w);
		CHECK_EQ(wc.wr_id, w * NFRAMES + hits[w]);
		CHECK_EQ(wc.qp_num, r.wq[w]->wq_num);
		CHECK_EQ(wc.byte_len, FRAME_LEN);
		CHECK_MEM(rb.p + wc.wr_id * SLOT, frame, FRAME_LEN);
		hits[w]++;
	}
	for (int w = 0; w < 4; w++)
		CHECKF(hits[w] > 0, "WQ %d got no frame of 32", w);
	CHECK_CQ_EMPTY(r.cq[0]);
	CHECK_CQ_EMPTY(r.cq[1]);
	/* Objects in use cannot go. */
	CHECK_RET(ibv_destroy_rwq_ind_table(r.tbl), EBUSY);
	CHECK_RET(ibv_destroy_wq(r.wq[0]), EBUSY);
	CHECK_RET(ibv_destroy_qp(r.qp), EBUSY);
	CHECK_OK(ibv_destroy_flow(f));
	CHECK_OK(ibv_destroy_qp(r.qp));
	CHECK_OK(ibv_destroy_rwq_ind_table(r.tbl));
	for (int w = 0; w < 4; w++)
		CHECK_OK(ibv_destroy_wq(r.wq[w]));
}

/* WQ states: no posting in RESET; ERR flushes; a WQ in RESET takes no
 * frame even when the hash names it. */
static void wq_states(void)
{
	struct vt_env e;
	struct raw s;
	struct rss r;
	struct vt_buf rb;
	uint8_t frame[FRAME_LEN];
	struct ibv_wq_attr ma;

	vt_env_open(&e);
	raw_open(&s, &e, NULL);
	/* Hashing on nothing: every frame goes to entry 0 (WQ 0). */
	rss_open(&e, &r, 0);
	vt_buf_reg(&e, &rb, 4 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = vt_sge(rb.p, SLOT, rb.mr->lkey);
	struct ibv_recv_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	memset(&ma, 0, sizeof(ma));
	ma.attr_mask = IBV_WQ_ATTR_STATE;
	ma.wq_state = IBV_WQS_RESET;
	CHECK_OK(ibv_modify_wq(r.wq[0], &ma));
	CHECK_RET(ibv_post_wq_recv(r.wq[0], &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	struct ibv_flow *f = CHECK_PTR(flow_to(r.qp, MAC_B, 7100));
	build_frame(frame, MAC_B, 1, 7100, 55);
	memcpy(s.buf.p, frame, FRAME_LEN);
	send_slot(&s, 0, FRAME_LEN);
	CHECK_NO_WC_FOR(r.cq[0], 200);
	/* Ready again: the next frame lands. */
	ma.wq_state = IBV_WQS_RDY;
	CHECK_OK(ibv_modify_wq(r.wq[0], &ma));
	CHECK_OK(ibv_post_wq_recv(r.wq[0], &wr, &bad));
	send_slot(&s, 0, FRAME_LEN);
	struct ibv_wc wc;
	vt_poll(r.cq[0], &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 5);
	CHECK_MEM(rb.p, frame, FRAME_LEN);
	/* ERR flushes what is posted. */
	wr.wr_id = 6;
	CHECK_OK(ibv_post_wq_recv(r.wq[0], &wr, &bad));
	ma.attr_mask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE;
	ma.curr_wq_state = IBV_WQS_RESET; /* wrong */
	ma.wq_state = IBV_WQS_ERR;
	CHECK_RET(ibv_modify_wq(r.wq[0], &ma), EINVAL);
	ma.curr_wq_state = IBV_WQS_RDY;
	CHECK_OK(ibv_modify_wq(r.wq[0], &ma));
	vt_poll(r.cq[0], &wc, 1);
	CHECK_WC(&wc, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 6);
	/* Bad WQ and table attributes. */
	struct ibv_wq_init_attr wa;
	memset(&wa, 0, sizeof(wa));
	wa.wq_type = IBV_WQT_RQ;
	wa.max_wr = 0;
	wa.max_sge = 1;
	wa.pd = e.pd;
	wa.cq = r.cq[0];
	CHECK_NULL_ERRNO(ibv_create_wq(e.ctx, &wa), EINVAL);
	struct ibv_rwq_ind_table_init_attr ta = {
		.log_ind_tbl_size = 20, .ind_tbl = r.wq, .comp_mask = 0,
	};
	CHECK_NULL_ERRNO(ibv_create_rwq_ind_table(e.ctx, &ta), EINVAL);
	CHECK_OK(ibv_destroy_flow(f));
}

static const struct vt_case cases[] = {
	VT_CASE(raw_flow_steers),	VT_CASE(raw_flow_destroy_stops),
	VT_CASE(raw_channel_and_sges),	VT_CASE(raw_flow_errors),
	VT_CASE(raw_needs_cap_net_raw),	VT_CASE(raw_device_caps),
	VT_CASE(rss_spreads_by_hash),	VT_CASE(wq_states),
	VT_CASE(raw_flow_kinds),
};
VT_MAIN(cases)
