/*
 * roce_rc_ops: RC atomics, SEND with invalidate and UC over RoCEv2
 * (RSW_ROCEV2) on one device, QP to QP through its port 4791, each
 * asserted on completions, returned values and memory:
 *
 *   roce_rc_ops DEV
 *
 *  1. atomics: FETCH_AND_ADD returns the old value and leaves old + add;
 *     CMP_AND_SWP swaps on a match and not otherwise, returning the old
 *     value each time; 8 FETCH_AND_ADDs each from two QPs on one word
 *     (max_rd_atomic 4 in flight) return 16 distinct old values and
 *     leave start + 16.
 *  2. a misaligned atomic fails with IBV_WC_REM_INV_REQ_ERR; one on an
 *     MR without IBV_ACCESS_REMOTE_ATOMIC with IBV_WC_REM_ACCESS_ERR; one
 *     whose SGE is not 8 bytes with IBV_WC_LOC_LEN_ERR.
 *  3. SEND with invalidate: a WRITE through a bound type 2 window works;
 *     a SEND_WITH_INV of its rkey completes the receive with
 *     IBV_WC_WITH_INV and the rkey; a WRITE through it then fails with
 *     IBV_WC_REM_ACCESS_ERR. A SEND_WITH_INV of a key that names no
 *     window fails with IBV_WC_REM_INV_REQ_ERR.
 *  4. UC: a 5000-byte SEND with immediate (20 packets at MTU 256), a
 *     3000-byte WRITE, a WRITE with immediate, every byte checked; a SEND
 *     with no receive posted is dropped silently (the requester completes
 *     it) and the next message lands in the receive posted after.
 *  5. UC losses, as packets crafted on a UDP socket (BTH, RETH, ICRC)
 *     to a UC QP: a message missing a middle packet is dropped, a FIRST
 *     after a gap drops the message in progress and starts its own, a
 *     MIDDLE and LAST with no FIRST are dropped; the messages complete
 *     around them land whole, in their receives, and nothing else does.
 *  6. RC responses in PSN order: a crafted requester on 127.0.0.2:4791
 *     asks for a READ of 1024 packets, a WRITE with AckReq and a
 *     FETCH_AND_ADD right behind it; the 1024 responses (opcode, PSN,
 *     bytes) all come before the WRITE's ACK, and that before the atomic
 *     response (PSN, the word's old value; the word holds old + add).
 *
 *   roce_rc_ops DEV replay N
 *
 *  N FETCH_AND_ADDs of 1 in bursts of 16 on one word with the local ACK
 *  timeout at its shortest (timeout 1: 8 us), so that requests are sent
 *  again while their responses are on the way: each must be answered
 *  from the responder's saved result, not run twice: the N returned
 *  values are 0..N-1, in order, and the word ends at N.
 *
 * Prints "roce_rc_ops: ok" or a line starting "FAIL".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	printf("FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (errno %d %s)\n", e, strerror(e));
	exit(1);
}

#define LEN (1 << 20)
#define ALL_REMOTE \
	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct end {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned char *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint8_t ack_timeout = 14;

static void open_end(struct end *e, enum ibv_qp_type type, int mr_access)
{
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 32, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
	};

	e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (posix_memalign((void **)&e->buf, 4096, LEN))
		fail("memalign");
	memset(e->buf, 0, LEN);
	if (!e->cq)
		fail("cq");
	a.send_cq = a.recv_cq = e->cq;
	e->qp = ibv_create_qp(pd, &a);
	e->mr = ibv_reg_mr(pd, e->buf, LEN, IBV_ACCESS_LOCAL_WRITE | mr_access);
	if (!e->qp || !e->mr)
		fail("QP of type %d or MR", type);
}

/* INIT, RTR toward dest_qpn at `gid`, RTS; `psn` both ways. */
static void connect_gid(struct end *e, uint32_t dest_qpn, uint32_t psn, const union ibv_gid *gid)
{
	int rc = e->qp->qp_type == IBV_QPT_RC;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	if (rc)
		a.qp_access_flags = ALL_REMOTE;
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("INIT");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_256,
		.dest_qp_num = dest_qpn,
		.rq_psn = psn,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *gid, .sgid_index = 0, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN |
				  (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0)))
		fail("RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = psn, .timeout = ack_timeout,
				  .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4 };
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN |
				  (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						IBV_QP_MAX_QP_RD_ATOMIC :
					0)))
		fail("RTS");
}

/* connect_gid toward a QP of this device. */
static void connect_to(struct end *e, uint32_t dest_qpn, uint32_t psn)
{
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, 0, &gid))
		fail("query_gid");
	connect_gid(e, dest_qpn, psn, &gid);
}

static void pair(struct end *a, struct end *b, enum ibv_qp_type type, uint32_t psn, int b_access)
{
	open_end(a, type, ALL_REMOTE);
	open_end(b, type, b_access);
	connect_to(a, b->qp->qp_num, psn);
	connect_to(b, a->qp->qp_num, psn);
}

static struct ibv_wc poll1(struct end *e, const char *what)
{
	struct ibv_wc wc;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(e->cq, 1, &wc);

		if (n < 0)
			fail("poll");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			fail("%s: no completion in 10 s", what);
	}
}

static void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_status st, const char *what)
{
	if (wc.wr_id != wr_id || wc.status != st)
		fail("%s: wr_id %llu status %s, want %llu %s", what, (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status), (unsigned long long)wr_id,
		     ibv_wc_status_str(st));
}

static void post(struct end *e, struct ibv_send_wr *wr, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_send_wr *bad;

	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(e->qp, wr, &bad))
		fail("post_send %llu", (unsigned long long)wr->wr_id);
}

static void post_atomic(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t off,
			uint64_t raddr, uint32_t rkey, uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op };

	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	post(e, &wr, off, 8);
}

static void post_rdma(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t off,
		      uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op, .imm_data = htonl(imm) };

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post(e, &wr, off, len);
}

static void post_recv(struct end *e, uint64_t id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(e->qp, &wr, &bad))
		fail("post_recv");
}

static uint64_t word(struct end *e, uint32_t off)
{
	uint64_t v;

	memcpy(&v, e->buf + off, 8);
	return v;
}

static void set_word(struct end *e, uint32_t off, uint64_t v)
{
	memcpy(e->buf + off, &v, 8);
}

static void atomics(void)
{
	struct end a, b, c, d;
	uint64_t target = 0, seen[16];
	int n = 0;

	pair(&a, &b, IBV_QPT_RC, 0xfffffe, ALL_REMOTE);
	target = (uintptr_t)b.buf + 128;
	set_word(&b, 128, 100);
	set_word(&a, 0, 0xdeadbeef);
	post_atomic(&a, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, target, b.mr->rkey, 5, 0);
	expect(poll1(&a, "FETCH_AND_ADD"), 1, IBV_WC_SUCCESS, "FETCH_AND_ADD");
	if (word(&a, 0) != 100 || word(&b, 128) != 105)
		fail("FETCH_AND_ADD 5 on 100: returned %llu, memory %llu",
		     (unsigned long long)word(&a, 0), (unsigned long long)word(&b, 128));
	post_atomic(&a, 2, IBV_WR_ATOMIC_CMP_AND_SWP, 8, target, b.mr->rkey, 105, 7);
	struct ibv_wc wc = poll1(&a, "CMP_AND_SWP");
	expect(wc, 2, IBV_WC_SUCCESS, "CMP_AND_SWP");
	if (wc.opcode != IBV_WC_COMP_SWAP || word(&a, 8) != 105 || word(&b, 128) != 7)
		fail("CMP_AND_SWP 105->7: opcode %d returned %llu, memory %llu", wc.opcode,
		     (unsigned long long)word(&a, 8), (unsigned long long)word(&b, 128));
	post_atomic(&a, 3, IBV_WR_ATOMIC_CMP_AND_SWP, 16, target, b.mr->rkey, 999, 1);
	expect(poll1(&a, "CMP_AND_SWP no match"), 3, IBV_WC_SUCCESS, "CMP_AND_SWP no match");
	if (word(&a, 16) != 7 || word(&b, 128) != 7)
		fail("CMP_AND_SWP 999->1 on 7: returned %llu, memory %llu",
		     (unsigned long long)word(&a, 16), (unsigned long long)word(&b, 128));
	printf("roce_rc_ops: FETCH_AND_ADD and CMP_AND_SWP (match, no match) checked\n");

	/* A second pair whose responder reaches the same word (same PD). */
	pair(&c, &d, IBV_QPT_RC, 1000, ALL_REMOTE);
	for (int i = 0; i < 8; i++) {
		post_atomic(&a, 10 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, 256 + 8 * i, target,
			    b.mr->rkey, 1, 0);
		post_atomic(&c, 20 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, 256 + 8 * i, target,
			    b.mr->rkey, 1, 0);
	}
	for (int i = 0; i < 8; i++) {
		expect(poll1(&a, "FETCH_AND_ADD burst"), 10 + i, IBV_WC_SUCCESS, "burst on a");
		expect(poll1(&c, "FETCH_AND_ADD burst"), 20 + i, IBV_WC_SUCCESS, "burst on c");
		seen[n++] = word(&a, 256 + 8 * i);
		seen[n++] = word(&c, 256 + 8 * i);
	}
	if (word(&b, 128) != 7 + 16)
		fail("16 FETCH_AND_ADDs of 1 on 7 left %llu", (unsigned long long)word(&b, 128));
	for (int i = 0; i < 16; i++) {
		if (seen[i] < 7 || seen[i] >= 7 + 16)
			fail("a FETCH_AND_ADD returned %llu, outside 7..22",
			     (unsigned long long)seen[i]);
		for (int j = 0; j < i; j++)
			if (seen[i] == seen[j])
				fail("two FETCH_AND_ADDs both returned %llu",
				     (unsigned long long)seen[i]);
	}
	printf("roce_rc_ops: 16 FETCH_AND_ADDs from two QPs: 16 distinct old values, 23 left\n");

	/* Misaligned: the responder refuses it as an invalid request. */
	post_atomic(&c, 30, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, target + 4, b.mr->rkey, 1, 0);
	expect(poll1(&c, "misaligned"), 30, IBV_WC_REM_INV_REQ_ERR, "misaligned FETCH_AND_ADD");
	if (word(&b, 128) != 23)
		fail("misaligned atomic changed memory: %llu", (unsigned long long)word(&b, 128));
	printf("roce_rc_ops: misaligned atomic: IBV_WC_REM_INV_REQ_ERR\n");

	/* A result SGE of other than 8 bytes: a local length error. */
	struct ibv_send_wr wr = { .wr_id = 31, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD };

	wr.wr.atomic.remote_addr = target;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 1;
	post(&a, &wr, 0, 4);
	expect(poll1(&a, "short SGE"), 31, IBV_WC_LOC_LEN_ERR, "FETCH_AND_ADD into 4 bytes");
	if (word(&b, 128) != 23)
		fail("an atomic failed locally changed memory: %llu",
		     (unsigned long long)word(&b, 128));
	printf("roce_rc_ops: atomic into a 4-byte SGE: IBV_WC_LOC_LEN_ERR\n");
}

static void atomic_access(void)
{
	struct end a, b;

	/* b's MR lacks IBV_ACCESS_REMOTE_ATOMIC; its QP has it. */
	pair(&a, &b, IBV_QPT_RC, 2000, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	set_word(&b, 0, 41);
	post_atomic(&a, 1, IBV_WR_ATOMIC_CMP_AND_SWP, 0, (uintptr_t)b.buf, b.mr->rkey, 41, 42);
	expect(poll1(&a, "no atomic right"), 1, IBV_WC_REM_ACCESS_ERR,
	       "CMP_AND_SWP on an MR without remote atomic");
	if (word(&b, 0) != 41)
		fail("refused atomic changed memory: %llu", (unsigned long long)word(&b, 0));
	printf("roce_rc_ops: atomic without IBV_ACCESS_REMOTE_ATOMIC: IBV_WC_REM_ACCESS_ERR\n");
}

static void send_inv(void)
{
	struct end a, b;
	struct ibv_mw *mw;

	pair(&a, &b, IBV_QPT_RC, 3000, ALL_REMOTE | IBV_ACCESS_MW_BIND);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw)
		fail("alloc_mw type 2");
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr bind = { .wr_id = 50, .opcode = IBV_WR_BIND_MW,
				    .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	bind.bind_mw.mw = mw;
	bind.bind_mw.rkey = rkey;
	bind.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = b.mr, .addr = (uintptr_t)b.buf, .length = 4096,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE
	};
	if (ibv_post_send(b.qp, &bind, &bad))
		fail("post bind");
	expect(poll1(&b, "bind"), 50, IBV_WC_SUCCESS, "bind of a type 2 window");
	rkey = mw->rkey;
	/* A WRITE through the window. */
	memcpy(a.buf, "through the window", 18);
	post_rdma(&a, 1, IBV_WR_RDMA_WRITE, 0, 18, (uintptr_t)b.buf + 100, rkey, 0);
	expect(poll1(&a, "WRITE via window"), 1, IBV_WC_SUCCESS, "WRITE through the window");
	if (memcmp(b.buf + 100, "through the window", 18))
		fail("WRITE through the window: bytes differ");
	/* SEND with invalidate of it. */
	post_recv(&b, 60, 1024, 256);
	memcpy(a.buf + 32, "invalidate!", 11);
	struct ibv_send_wr si = { .wr_id = 2, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = rkey };
	post(&a, &si, 32, 11);
	expect(poll1(&a, "SEND_WITH_INV"), 2, IBV_WC_SUCCESS, "SEND_WITH_INV");
	struct ibv_wc wc = poll1(&b, "SEND_WITH_INV's receive");
	expect(wc, 60, IBV_WC_SUCCESS, "SEND_WITH_INV's receive");
	if (wc.opcode != IBV_WC_RECV || wc.byte_len != 11 || !(wc.wc_flags & IBV_WC_WITH_INV) ||
	    (wc.wc_flags & IBV_WC_WITH_IMM) || wc.invalidated_rkey != rkey ||
	    memcmp(b.buf + 1024, "invalidate!", 11))
		fail("SEND_WITH_INV's receive: opcode %d len %u flags %#x rkey %#x (want %#x)",
		     wc.opcode, wc.byte_len, wc.wc_flags, wc.invalidated_rkey, rkey);
	/* The window is invalid now. */
	post_rdma(&a, 3, IBV_WR_RDMA_WRITE, 0, 18, (uintptr_t)b.buf + 200, rkey, 0);
	expect(poll1(&a, "WRITE via invalidated window"), 3, IBV_WC_REM_ACCESS_ERR,
	       "WRITE through the invalidated window");
	if (b.buf[200] != 0)
		fail("WRITE through the invalidated window landed");
	printf("roce_rc_ops: SEND_WITH_INV: IBV_WC_WITH_INV with the rkey, "
	       "then a WRITE with it IBV_WC_REM_ACCESS_ERR\n");

	/* SEND_WITH_INV of a key naming no window: invalid request. */
	struct end c, d;

	pair(&c, &d, IBV_QPT_RC, 4000, ALL_REMOTE);
	post_recv(&d, 61, 0, 256);
	struct ibv_send_wr bogus = { .wr_id = 4, .opcode = IBV_WR_SEND_WITH_INV,
				     .invalidate_rkey = d.mr->rkey };
	post(&c, &bogus, 0, 8);
	expect(poll1(&c, "SEND_WITH_INV of an MR key"), 4, IBV_WC_REM_INV_REQ_ERR,
	       "SEND_WITH_INV of a key naming no window");
	printf("roce_rc_ops: SEND_WITH_INV of no window's key: IBV_WC_REM_INV_REQ_ERR\n");
}

static void uc(void)
{
	struct end a, b;

	pair(&a, &b, IBV_QPT_UC, 0xfffff0, ALL_REMOTE);
	for (int i = 0; i < LEN; i++)
		a.buf[i] = (unsigned char)(i * 11 + 5);
	post_recv(&b, 11, 0, 6000);
	post_rdma(&a, 1, IBV_WR_SEND_WITH_IMM, 0, 5000, 0, 0, 0x01020304);
	expect(poll1(&a, "UC SEND"), 1, IBV_WC_SUCCESS, "UC SEND");
	struct ibv_wc wc = poll1(&b, "UC receive");
	expect(wc, 11, IBV_WC_SUCCESS, "UC receive");
	if (wc.byte_len != 5000 || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
	    ntohl(wc.imm_data) != 0x01020304 || wc.opcode != IBV_WC_RECV ||
	    wc.src_qp != a.qp->qp_num || memcmp(a.buf, b.buf, 5000))
		fail("UC receive: len %u flags %#x imm %#x opcode %d src_qp %#x, or bytes differ",
		     wc.byte_len, wc.wc_flags, ntohl(wc.imm_data), wc.opcode, wc.src_qp);
	/* WRITE 3000 at 5000, then a WRITE with immediate of 8 at 0. */
	post_rdma(&a, 2, IBV_WR_RDMA_WRITE, 5000, 3000, (uintptr_t)b.buf + 5000, b.mr->rkey, 0);
	expect(poll1(&a, "UC WRITE"), 2, IBV_WC_SUCCESS, "UC WRITE");
	post_recv(&b, 12, 0, 16);
	memset(b.buf, 0, 8);
	post_rdma(&a, 3, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, (uintptr_t)b.buf, b.mr->rkey,
		  0xabcdef01);
	expect(poll1(&a, "UC WRITE_WITH_IMM"), 3, IBV_WC_SUCCESS, "UC WRITE_WITH_IMM");
	wc = poll1(&b, "UC WRITE_WITH_IMM's receive");
	expect(wc, 12, IBV_WC_SUCCESS, "UC WRITE_WITH_IMM's receive");
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.byte_len != 8 ||
	    ntohl(wc.imm_data) != 0xabcdef01)
		fail("UC WRITE_WITH_IMM's receive: opcode %d len %u imm %#x", wc.opcode,
		     wc.byte_len, ntohl(wc.imm_data));
	/* The WRITE before it came first (UC keeps order). */
	if (memcmp(a.buf + 5000, b.buf + 5000, 3000) || memcmp(a.buf, b.buf, 8))
		fail("UC WRITEs' bytes differ");
	printf("roce_rc_ops: UC SEND_WITH_IMM 5000, WRITE 3000, WRITE_WITH_IMM across the PSN wrap\n");

	/* A SEND with no receive posted: dropped, the requester completes. */
	memset(a.buf, 'x', 64);
	post_rdma(&a, 4, IBV_WR_SEND, 0, 64, 0, 0, 0);
	expect(poll1(&a, "UC SEND to no receive"), 4, IBV_WC_SUCCESS, "UC SEND to no receive");
	/* A WRITE after it: once it landed, the SEND was taken or dropped. */
	memset(a.buf + 64, 'f', 8);
	post_rdma(&a, 5, IBV_WR_RDMA_WRITE, 64, 8, (uintptr_t)b.buf + 4096, b.mr->rkey, 0);
	expect(poll1(&a, "UC WRITE flag"), 5, IBV_WC_SUCCESS, "UC WRITE flag");
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (memcmp(b.buf + 4096, "ffffffff", 8)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			fail("UC WRITE flag did not land in 10 s");
	}
	memset(b.buf + 2048, 0, 64);
	post_recv(&b, 13, 2048, 64);
	memset(a.buf, 'y', 32);
	post_rdma(&a, 6, IBV_WR_SEND, 0, 32, 0, 0, 0);
	expect(poll1(&a, "UC SEND after the drop"), 6, IBV_WC_SUCCESS, "UC SEND after the drop");
	wc = poll1(&b, "UC receive after the drop");
	expect(wc, 13, IBV_WC_SUCCESS, "UC receive after the drop");
	if (wc.byte_len != 32 || b.buf[2048] != 'y' || b.buf[2048 + 32] != 0)
		fail("UC receive after the drop: len %u, first byte %c", wc.byte_len,
		     b.buf[2048]);
	if (ibv_poll_cq(b.cq, 1, &wc) != 0)
		fail("UC: a completion for the dropped SEND");
	printf("roce_rc_ops: UC SEND with no receive dropped, the next one received\n");
}

static void replay(int n)
{
	struct end a, b;
	int done = 0;

	ack_timeout = 1;
	pair(&a, &b, IBV_QPT_RC, 0xffff00, ALL_REMOTE);
	while (done < n) {
		int k = n - done < 16 ? n - done : 16;

		for (int i = 0; i < k; i++)
			post_atomic(&a, done + i, IBV_WR_ATOMIC_FETCH_AND_ADD, 8 * i,
				    (uintptr_t)b.buf, b.mr->rkey, 1, 0);
		for (int i = 0; i < k; i++) {
			expect(poll1(&a, "FETCH_AND_ADD"), done + i, IBV_WC_SUCCESS,
			       "FETCH_AND_ADD with a short ACK timeout");
			if (word(&a, 8 * i) != (uint64_t)(done + i))
				fail("FETCH_AND_ADD %d returned %llu", done + i,
				     (unsigned long long)word(&a, 8 * i));
		}
		done += k;
	}
	if (word(&b, 0) != (uint64_t)n)
		fail("%d FETCH_AND_ADDs of 1 left %llu", n, (unsigned long long)word(&b, 0));
	printf("roce_rc_ops: %d FETCH_AND_ADDs with timeout 1: each ran once\n", n);
}

/* ---- UC packets crafted by hand (IBA 9.8, RoCEv2 Annex A17) ---- */

static uint32_t crc_table[256];

static uint32_t crc_update(uint32_t c, const uint8_t *p, size_t n)
{
	while (n--)
		c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

/*
 * The ICRC of `ib` (BTH to the ICRC's 4 bytes) sent over IPv4 between
 * these addresses and ports, identification 0 and DF (what the receiver
 * assumes when it solves for the identification): CRC-32 over 8 bytes
 * of ones, the IP header with TOS, TTL and checksum as ones, the UDP
 * header with its checksum as ones, the BTH with byte 4 as ones, the rest.
 */
static uint32_t icrc(const uint8_t src[4], const uint8_t dst[4], uint16_t sport, uint16_t dport,
		     const uint8_t *ib, size_t len)
{
	uint8_t ones[8], ip[20], udp[8], bth[12];
	uint16_t total = htons(20 + 8 + len), ulen = htons(8 + len), df = htons(0x4000);

	memset(ones, 0xff, 8);
	memset(ip, 0xff, 20);
	ip[0] = 0x45;
	memcpy(ip + 2, &total, 2);
	ip[4] = ip[5] = 0;
	memcpy(ip + 6, &df, 2);
	ip[9] = 17;
	memcpy(ip + 12, src, 4);
	memcpy(ip + 16, dst, 4);
	memset(udp, 0xff, 8);
	sport = htons(sport);
	dport = htons(dport);
	memcpy(udp, &sport, 2);
	memcpy(udp + 2, &dport, 2);
	memcpy(udp + 4, &ulen, 2);
	memcpy(bth, ib, 12);
	bth[4] = 0xff;
	uint32_t c = crc_update(0xffffffff, ones, 8);

	c = crc_update(c, ip, 20);
	c = crc_update(c, udp, 8);
	c = crc_update(c, bth, 12);
	c = crc_update(c, ib + 12, len - 12 - 4);
	return ~c;
}

struct crafter {
	int fd;
	uint16_t sport;
	uint32_t dest_qpn;
	/* Our socket's address (the device's is 127.0.0.1). */
	uint8_t src[4];
};

/* The AckReq bit, or'ed into a PSN given to craft(). */
#define ACK_REQ 0x80000000u

/* A packet: `op` with PSN `psn` (and ACK_REQ), the `n` bytes of `body`
 * after the BTH (extension headers, payload), pad and ICRC added. */
static void craft_raw(struct crafter *c, uint8_t op, uint32_t psn, const uint8_t *body, size_t n)
{
	static const uint8_t lo[4] = { 127, 0, 0, 1 };
	uint8_t p[12 + 28 + 512 + 3 + 4] = { 0 };
	size_t at = 12, pad = (4 - n % 4) % 4;
	uint32_t v;

	if (n > sizeof(p) - 12 - 3 - 4)
		fail("craft: %zu bytes", n);
	p[0] = op;
	p[1] = (uint8_t)(pad << 4);
	p[2] = p[3] = 0xff;
	v = htonl(c->dest_qpn & 0xffffff);
	memcpy(p + 4, &v, 4);
	v = htonl(psn & (0xffffff | ACK_REQ));
	memcpy(p + 8, &v, 4);
	memcpy(p + at, body, n);
	at += n + pad + 4;
	v = icrc(c->src, lo, c->sport, 4791, p, at);
	/* Least significant byte first. */
	for (int i = 0; i < 4; i++)
		p[at - 4 + i] = (uint8_t)(v >> (8 * i));
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(4791),
				  .sin_addr = { htonl(INADDR_LOOPBACK) } };

	if (sendto(c->fd, p, at, 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)at)
		fail("sendto port 4791");
}

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/* A packet with `n` payload bytes of `fill`; a RETH (va, rkey, dma_len)
 * when `reth_va` names one. */
static void craft(struct crafter *c, uint8_t op, uint32_t psn, size_t n, char fill,
		  const uint64_t *reth_va, uint32_t rkey, uint32_t dma_len)
{
	uint8_t body[16 + 512];
	size_t at = 0;

	if (reth_va) {
		put_be(body, *reth_va, 8);
		put_be(body + 8, rkey, 4);
		put_be(body + 12, dma_len, 4);
		at = 16;
	}
	memset(body + at, fill, n);
	craft_raw(c, op, psn, body, at + n);
}

/* A FETCH_ADD of `add` at `va`. */
static void craft_fetch_add(struct crafter *c, uint32_t psn, uint64_t va, uint32_t rkey,
			    uint64_t add)
{
	uint8_t eth[28] = { 0 };

	put_be(eth, va, 8);
	put_be(eth + 8, rkey, 4);
	put_be(eth + 12, add, 8);
	craft_raw(c, 0x14, psn, eth, sizeof(eth));
}

enum { UC_SEND_FIRST = 0x20, UC_SEND_MIDDLE, UC_SEND_LAST, UC_SEND_ONLY = 0x24,
       UC_SEND_ONLY_IMM, UC_WRITE_ONLY = 0x2a };

/* A UDP socket on `addr` (host order), port `port` (0: any). */
static void crafter_open(struct crafter *c, uint32_t addr, uint16_t port)
{
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr = { htonl(addr) } };
	socklen_t ml = sizeof(me);
	int pmtu = IP_PMTUDISC_DO;
	uint32_t a = htonl(addr);

	for (uint32_t i = 0; i < 256; i++) {
		uint32_t x = i;

		for (int k = 0; k < 8; k++)
			x = x & 1 ? 0xedb88320 ^ (x >> 1) : x >> 1;
		crc_table[i] = x;
	}
	c->fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (c->fd < 0 || setsockopt(c->fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) ||
	    bind(c->fd, (struct sockaddr *)&me, sizeof(me)) ||
	    getsockname(c->fd, (struct sockaddr *)&me, &ml))
		fail("UDP socket on %#x port %u", addr, port);
	c->sport = ntohs(me.sin_port);
	memcpy(c->src, &a, 4);
}

static void uc_losses(void)
{
	struct end b;
	struct crafter c;
	uint32_t p = 0xfffffe;

	crafter_open(&c, INADDR_LOOPBACK, 0);
	open_end(&b, IBV_QPT_UC, ALL_REMOTE);
	/* Its peer: our socket, as QPN 0x4242 at 127.0.0.1. */
	c.dest_qpn = b.qp->qp_num;
	connect_to(&b, 0x4242, p);
	for (int i = 0; i < 4; i++)
		post_recv(&b, 100 + i, 1024 * i, 1024);
	/* 1. FIRST, (MIDDLE lost), LAST: dropped. */
	craft(&c, UC_SEND_FIRST, p, 256, 'A', NULL, 0, 0);
	craft(&c, UC_SEND_LAST, p + 2, 100, 'A', NULL, 0, 0);
	/* 2. ONLY: lands in receive 100. */
	craft(&c, UC_SEND_ONLY, p + 3, 50, 'B', NULL, 0, 0);
	/* 3. FIRST, MIDDLE, (gap), FIRST, LAST: the second lands in 101. */
	craft(&c, UC_SEND_FIRST, p + 4, 256, 'C', NULL, 0, 0);
	craft(&c, UC_SEND_MIDDLE, p + 5, 256, 'C', NULL, 0, 0);
	craft(&c, UC_SEND_FIRST, p + 7, 256, 'D', NULL, 0, 0);
	craft(&c, UC_SEND_LAST, p + 8, 10, 'D', NULL, 0, 0);
	/* 4. MIDDLE and LAST of a message whose FIRST was lost: dropped. */
	craft(&c, UC_SEND_MIDDLE, p + 9, 256, 'E', NULL, 0, 0);
	craft(&c, UC_SEND_LAST, p + 10, 20, 'E', NULL, 0, 0);
	/* 5. A WRITE, then a SEND with immediate that marks the end. */
	uint64_t va = (uintptr_t)b.buf + 6000;

	craft(&c, UC_WRITE_ONLY, p + 11, 40, 'W', &va, b.mr->rkey, 40);
	/* Its 4 bytes after the BTH are the ImmDt; no payload. */
	craft(&c, UC_SEND_ONLY_IMM, p + 12, 4, 'M', NULL, 0, 0);
	struct {
		uint64_t id;
		uint32_t len;
		char fill;
	} want[] = { { 100, 50, 'B' }, { 101, 266, 'D' }, { 102, 0, 0 } };

	for (int i = 0; i < 3; i++) {
		struct ibv_wc wc = poll1(&b, "UC receive of crafted packets");

		expect(wc, want[i].id, IBV_WC_SUCCESS, "UC receive of crafted packets");
		if (wc.byte_len != want[i].len)
			fail("UC crafted: receive %llu has %u bytes, want %u",
			     (unsigned long long)wc.wr_id, wc.byte_len, want[i].len);
		for (uint32_t k = 0; k < want[i].len; k++)
			if (b.buf[1024 * i + k] != want[i].fill)
				fail("UC crafted: receive %llu byte %u is %#x, want %c",
				     (unsigned long long)wc.wr_id, k, b.buf[1024 * i + k],
				     want[i].fill);
		if (i == 2 && (!(wc.wc_flags & IBV_WC_WITH_IMM) || wc.imm_data != 0x4d4d4d4d))
			fail("UC crafted: the marker's immediate %#x flags %#x", wc.imm_data,
			     wc.wc_flags);
	}
	for (int k = 0; k < 40; k++)
		if (b.buf[6000 + k] != 'W')
			fail("UC crafted: the WRITE did not land whole");
	struct ibv_wc extra;

	if (ibv_poll_cq(b.cq, 1, &extra) != 0)
		fail("UC crafted: a completion for a dropped message (wr_id %llu)",
		     (unsigned long long)extra.wr_id);
	printf("roce_rc_ops: UC crafted losses: 3 messages dropped, the 3 complete ones whole\n");
	close(c.fd);
}

/* ---- RC responses in PSN order, seen by a crafted requester ---- */

enum { RC_WRITE_ONLY = 0x0a, RC_READ_REQUEST = 0x0c, RC_READ_RESPONSE_FIRST = 0x0d,
       RC_READ_RESPONSE_MIDDLE, RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_ONLY, RC_ACK,
       RC_ATOMIC_ACK };

/*
 * A requester at 127.0.0.2:4791 (where an RC QP's responses go) asks an
 * RC QP for a READ of 1024 packets and, right behind it, a WRITE that asks
 * for an ACK and a FETCH_AND_ADD. The responder sends a long READ's
 * responses in bursts and reads its socket in between, so it has the
 * WRITE and the atomic while it still owes most of them; their responses
 * must still come after the last of them, in PSN order:
 * a response past a READ it waits for tells a requester (rxe, a NIC)
 * that the READ's responses were lost, and it asks again.
 */
static void rc_order(void)
{
	enum { N = 1024, MTU = 256, W = 40 };
	struct end b;
	struct crafter c;
	struct timeval tv = { .tv_sec = 5 };
	uint32_t p = 0xffffc0, got = 0, acked = 0;
	uint8_t pkt[2048];
	int rcvbuf = 16 << 20;

	/* 127.0.0.2 is loopback too; rsw_lo's socket is on 127.0.0.1. */
	crafter_open(&c, INADDR_LOOPBACK + 1, 4791);
	/* Room for all the responses: they are read only after both
	 * requests went (SO_RCVBUFFORCE as root; a drop fails the test
	 * as a PSN gap, never silently). */
	if (setsockopt(c.fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)))
		setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	open_end(&b, IBV_QPT_RC, ALL_REMOTE);
	for (int i = 0; i < LEN; i++)
		b.buf[i] = (unsigned char)(i * 7 + 3);
	c.dest_qpn = b.qp->qp_num;
	{
		/* connect_to names the device's own GID; ours is 127.0.0.2. */
		union ibv_gid gid = { 0 };

		gid.raw[10] = gid.raw[11] = 0xff;
		memcpy(gid.raw + 12, c.src, 4);
		connect_gid(&b, 0x4242, p, &gid);
	}
	uint64_t va = (uintptr_t)b.buf, wva = va + N * MTU;

	craft(&c, RC_READ_REQUEST, p, 0, 0, &va, b.mr->rkey, N * MTU);
	craft(&c, RC_WRITE_ONLY, (p + N) | ACK_REQ, W, 'W', &wva, b.mr->rkey, W);
	/* And a FETCH_ADD on the word after the WRITE's bytes. */
	uint64_t ava = wva + 64, old_word, add = 0x0102030405060708ull;

	memcpy(&old_word, b.buf + N * MTU + 64, 8);
	craft_fetch_add(&c, (p + N + 1) | ACK_REQ, ava, b.mr->rkey, add);
	for (;;) {
		ssize_t n = recv(c.fd, pkt, sizeof(pkt), 0);

		if (n < 0)
			fail("RC order: %u of %d READ responses, then nothing in 5 s", got, N);
		if (n < 12 + 4)
			fail("RC order: a packet of %zd bytes", n);
		uint8_t op = pkt[0];
		uint32_t psn = ((uint32_t)pkt[9] << 16 | pkt[10] << 8 | pkt[11]);
		uint8_t syndrome = pkt[12];

		if (op == RC_ACK) {
			if (got != N || acked)
				fail("RC order: the WRITE's ACK (PSN %#x) came after %u of the READ's %d "
				     "responses%s",
				     psn, got, N, acked ? ", twice" : "");
			if (psn != ((p + N) & 0xffffff) || syndrome >> 5 != 0)
				fail("RC order: ACK PSN %#x syndrome %#x, want %#x and an ACK", psn,
				     syndrome, (p + N) & 0xffffff);
			acked = 1;
			continue;
		}
		if (op == RC_ATOMIC_ACK) {
			uint64_t orig = 0;

			if (!acked || n != 12 + 4 + 8 + 4)
				fail("RC order: the FETCH_ADD's response (%zd bytes) before the "
				     "WRITE's ACK",
				     n);
			for (int k = 0; k < 8; k++)
				orig = orig << 8 | pkt[16 + k];
			if (psn != ((p + N + 1) & 0xffffff) || syndrome >> 5 != 0 ||
			    orig != old_word)
				fail("RC order: atomic response PSN %#x syndrome %#x value %#llx, "
				     "want %#x, an ACK, %#llx",
				     psn, syndrome, (unsigned long long)orig, (p + N + 1) & 0xffffff,
				     (unsigned long long)old_word);
			break;
		}
		uint8_t want = got == 0 ? RC_READ_RESPONSE_FIRST :
			       got == N - 1 ? RC_READ_RESPONSE_LAST :
					      RC_READ_RESPONSE_MIDDLE;
		size_t hdr = 12 + (op == RC_READ_RESPONSE_MIDDLE ? 0 : 4);

		if (op != want || psn != ((p + got) & 0xffffff) || n != (ssize_t)(hdr + MTU + 4))
			fail("RC order: response %u: opcode %#x PSN %#x %zd bytes, want %#x %#x %zu",
			     got, op, psn, n, want, (p + got) & 0xffffff, hdr + MTU + 4);
		if (memcmp(pkt + hdr, b.buf + got * MTU, MTU))
			fail("RC order: response %u carries other bytes than the memory's", got);
		if (got == N)
			fail("RC order: a response more than the READ's %d", N);
		got++;
	}
	for (int k = 0; k < W; k++)
		if (b.buf[N * MTU + k] != 'W')
			fail("RC order: the WRITE did not land whole");
	uint64_t now;

	memcpy(&now, b.buf + N * MTU + 64, 8);
	if (now != old_word + add)
		fail("RC order: the word holds %#llx after the FETCH_ADD, want %#llx",
		     (unsigned long long)now, (unsigned long long)(old_word + add));
	printf("roce_rc_ops: RC: a WRITE's ACK and an atomic response after the %d responses "
	       "of the READ before them\n",
	       N);
	close(c.fd);
}

int main(int argc, char **argv)
{
	if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "replay"))) {
		fprintf(stderr, "usage: roce_rc_ops DEV [replay N]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(60);
	struct ibv_device **l = ibv_get_device_list(NULL);

	for (int i = 0; l && l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			ctx = ibv_open_device(l[i]);
	if (!ctx)
		fail("cannot open %s", argv[1]);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("pd");
	if (argc == 4) {
		replay(atoi(argv[3]));
		return 0;
	}
	atomics();
	atomic_access();
	send_inv();
	uc();
	uc_losses();
	rc_order();
	printf("roce_rc_ops: ok\n");
	return 0;
}
