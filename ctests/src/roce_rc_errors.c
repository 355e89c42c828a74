/*
 * roce_rc_errors: RC over RoCEv2 (RSW_ROCEV2) on one device, QP to QP
 * through its port 4791 (demultiplexed by QPN), the paths a pingpong
 * does not take, each asserted on completions and QP states:
 *
 *   roce_rc_errors DEV
 *
 *  1. data: a 5000-byte SEND with immediate at path MTU 256 (20 packets),
 *     a 3000-byte WRITE with immediate and a 3000-byte READ back; every
 *     byte, byte_len, immediate and opcode checked; PSNs start near the
 *     24-bit wrap (0xfffffa), so they wrap inside the messages.
 *  2. RNR: a SEND with no receive posted and rnr_retry 1 fails with
 *     IBV_WC_RNR_RETRY_EXC_ERR; the WR after it flushes.
 *  3. remote access: a WRITE with a wrong rkey fails with
 *     IBV_WC_REM_ACCESS_ERR; the responder QP is in ERR.
 *  4. retry: requests to a QPN nobody holds fail with
 *     IBV_WC_RETRY_EXC_ERR after retry_cnt resends; the next flushes.
 *  5. no responder resources: a READ to a QP with max_dest_rd_atomic 0
 *     fails with IBV_WC_REM_INV_REQ_ERR (as rxe answers); the responder
 *     QP is in ERR and the READ's buffer unchanged.
 * Atomics, SEND with invalidate and UC: roce_rc_ops.
 *
 * Prints "roce_rc_errors: ok" or a line starting "FAIL".
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

#define LEN 8192

struct end {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned char *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void open_end(struct end *e)
{
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	e->cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	e->buf = calloc(1, LEN);
	if (!e->cq || !e->buf)
		fail("cq");
	a.send_cq = a.recv_cq = e->cq;
	e->qp = ibv_create_qp(pd, &a);
	e->mr = ibv_reg_mr(pd, e->buf, LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!e->qp || !e->mr)
		fail("RC QP or MR");
}

/* INIT, RTR toward dest_qpn, RTS; `psn` both ways. */
/* The responder resources connect_to grants (case 5 sets 0). */
static uint8_t dest_rd_atomic = 4;

static void connect_to(struct end *e, uint32_t dest_qpn, uint32_t psn, uint8_t rnr_retry,
		       uint8_t timeout, uint8_t retry_cnt)
{
	union ibv_gid gid;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };

	if (ibv_query_gid(ctx, 1, 0, &gid))
		fail("query_gid");
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("INIT");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_256,
		.dest_qp_num = dest_qpn,
		.rq_psn = psn,
		.max_dest_rd_atomic = dest_rd_atomic,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		fail("RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = psn, .timeout = timeout,
				  .retry_cnt = retry_cnt, .rnr_retry = rnr_retry,
				  .max_rd_atomic = 4 };
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		fail("RTS");
}

static void pair(struct end *a, struct end *b, uint32_t psn, uint8_t rnr_retry)
{
	open_end(a);
	open_end(b);
	connect_to(a, b->qp->qp_num, psn, rnr_retry, 10, 3);
	connect_to(b, a->qp->qp_num, psn, rnr_retry, 10, 3);
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

static void post_send(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t off,
		      uint32_t len, struct end *peer, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm) },
			   *bad;

	if (peer) {
		wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + off;
		wr.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(e->qp, &wr, &bad))
		fail("post_send %llu", (unsigned long long)id);
}

static void post_recv(struct end *e, uint64_t id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(e->qp, &wr, &bad))
		fail("post_recv");
}

static enum ibv_qp_state state_of(struct end *e)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(e->qp, &a, IBV_QP_STATE, &ia))
		fail("query_qp");
	return a.qp_state;
}

static void data(void)
{
	struct end a, b;

	pair(&a, &b, 0xfffffa, 7);
	for (int i = 0; i < LEN; i++)
		a.buf[i] = (unsigned char)(i * 7 + 3);
	/* SEND with immediate, 5000 bytes = 20 packets of 256. */
	post_recv(&b, 11, 0, 6000);
	post_send(&a, 1, IBV_WR_SEND_WITH_IMM, 0, 5000, NULL, 0, 0x12345678);
	expect(poll1(&a, "SEND"), 1, IBV_WC_SUCCESS, "SEND");
	struct ibv_wc wc = poll1(&b, "receive");
	expect(wc, 11, IBV_WC_SUCCESS, "receive");
	if (wc.byte_len != 5000 || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
	    ntohl(wc.imm_data) != 0x12345678 || wc.opcode != IBV_WC_RECV ||
	    wc.src_qp != a.qp->qp_num)
		fail("receive: len %u flags %#x imm %#x opcode %d src_qp %#x", wc.byte_len,
		     wc.wc_flags, ntohl(wc.imm_data), wc.opcode, wc.src_qp);
	if (memcmp(a.buf, b.buf, 5000))
		fail("SEND's bytes differ");
	/* WRITE with immediate at offset 5000, 3000 bytes. */
	post_recv(&b, 12, 0, 16);
	post_send(&a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, 5000, 3000, &b, b.mr->rkey, 0xabcdef01);
	expect(poll1(&a, "WRITE"), 2, IBV_WC_SUCCESS, "WRITE");
	wc = poll1(&b, "WRITE's receive");
	expect(wc, 12, IBV_WC_SUCCESS, "WRITE's receive");
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.byte_len != 3000 ||
	    ntohl(wc.imm_data) != 0xabcdef01)
		fail("WRITE's receive: opcode %d len %u imm %#x", wc.opcode, wc.byte_len,
		     ntohl(wc.imm_data));
	if (memcmp(a.buf + 5000, b.buf + 5000, 3000))
		fail("WRITE's bytes differ");
	/* READ b's 3000 bytes at 5000 back into a's buffer, cleared. */
	for (int i = 0; i < 3000; i++)
		b.buf[5000 + i] = (unsigned char)(i * 13 + 1);
	memset(a.buf + 5000, 0, 3000);
	post_send(&a, 3, IBV_WR_RDMA_READ, 5000, 3000, &b, b.mr->rkey, 0);
	wc = poll1(&a, "READ");
	expect(wc, 3, IBV_WC_SUCCESS, "READ");
	if (wc.opcode != IBV_WC_RDMA_READ || memcmp(a.buf + 5000, b.buf + 5000, 3000))
		fail("READ: opcode %d, or its bytes differ", wc.opcode);
	printf("roce_rc_errors: SEND 5000, WRITE 3000, READ 3000 across the PSN wrap\n");
}

static void rnr(void)
{
	struct end a, b;

	pair(&a, &b, 100, 1);
	post_send(&a, 1, IBV_WR_SEND, 0, 64, NULL, 0, 0);
	post_send(&a, 2, IBV_WR_SEND, 0, 64, NULL, 0, 0);
	expect(poll1(&a, "RNR"), 1, IBV_WC_RNR_RETRY_EXC_ERR, "SEND without a receive");
	expect(poll1(&a, "flush"), 2, IBV_WC_WR_FLUSH_ERR, "the SEND after it");
	if (state_of(&a) != IBV_QPS_ERR)
		fail("requester not in ERR after RNR retries");
	printf("roce_rc_errors: RNR retries exhausted, next flushed\n");
}

static void access_error(void)
{
	struct end a, b;

	pair(&a, &b, 200, 7);
	post_send(&a, 1, IBV_WR_RDMA_WRITE, 0, 64, &b, b.mr->rkey ^ 0x5a5a00, 0);
	expect(poll1(&a, "bad rkey"), 1, IBV_WC_REM_ACCESS_ERR, "WRITE with a wrong rkey");
	if (state_of(&a) != IBV_QPS_ERR)
		fail("requester not in ERR");
	/* The responder went to ERR as it NAKed: bounded wait for it. */
	for (int i = 0; state_of(&b) != IBV_QPS_ERR; i++)
		if (i > 100000)
			fail("responder not in ERR");
	printf("roce_rc_errors: wrong rkey: IBV_WC_REM_ACCESS_ERR, both QPs in ERR\n");
}

static void retry(void)
{
	struct end a;
	struct timespec t0, t1;

	open_end(&a);
	/* A QPN nobody holds (ours are TCP port numbers, below 2^16). */
	connect_to(&a, 0xabcdef, 300, 7, 8, 2);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	post_send(&a, 1, IBV_WR_SEND, 0, 64, NULL, 0, 0);
	post_send(&a, 2, IBV_WR_RDMA_READ, 0, 64, &a, a.mr->rkey, 0);
	expect(poll1(&a, "retry"), 1, IBV_WC_RETRY_EXC_ERR, "SEND to nobody");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	expect(poll1(&a, "flush"), 2, IBV_WC_WR_FLUSH_ERR, "the READ after it");
	/* timeout 8: 1.05 ms, three periods (the first and two resends). */
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (ms < 3.0)
		fail("retries exhausted after %.2f ms, before 3 timeouts of 1.05 ms", ms);
	printf("roce_rc_errors: no peer: IBV_WC_RETRY_EXC_ERR after %.1f ms, next flushed\n", ms);
}

static void no_rd_resources(void)
{
	struct end a, b;

	dest_rd_atomic = 0;
	pair(&a, &b, 500, 7);
	dest_rd_atomic = 4;
	memset(a.buf, 0x3c, 64);
	memset(b.buf, 0x77, 64);
	post_send(&a, 1, IBV_WR_RDMA_READ, 0, 64, &b, b.mr->rkey, 0);
	expect(poll1(&a, "no resources"), 1, IBV_WC_REM_INV_REQ_ERR,
	       "READ to max_dest_rd_atomic 0");
	for (int i = 0; i < 64; i++)
		if (((unsigned char *)a.buf)[i] != 0x3c)
			fail("READ buffer byte %d changed to %#x", i, ((unsigned char *)a.buf)[i]);
	for (int i = 0; state_of(&b) != IBV_QPS_ERR; i++)
		if (i > 100000)
			fail("responder not in ERR");
	printf("roce_rc_errors: READ with no responder resources: IBV_WC_REM_INV_REQ_ERR\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: roce_rc_errors DEV\n");
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
	data();
	rnr();
	access_error();
	no_rd_resources();
	retry();
	printf("roce_rc_errors: ok\n");
	return 0;
}
