/*
 * roce_rc_loss: RC over RoCEv2 (RSW_ROCEV2) on one device, QP to QP
 * through its port 4791, while RSW_FAULTS' roce: rules lose, duplicate
 * and reorder packets (ctests/tests/rsw_rocev2_rc_loss.sh sets them):
 * every message must still arrive once, whole and in order, and every
 * work request complete successfully.
 *
 *   roce_rc_loss DEV fixed [MS]  SEND 5000 with immediate (20 packets at
 *                                MTU 256), WRITE 3000 with immediate,
 *                                READ 3000 (12 responses), SEND 100; with
 *                                MS, taking less than MS ms fails (a loss
 *                                only the ACK timeout recovers takes one)
 *   roce_rc_loss DEV long        SEND, WRITE with immediate and READ of
 *                                40000 bytes at MTU 256: 157 packets, more
 *                                than the requester's window of 128
 *   roce_rc_loss DEV mix ROUNDS  rounds of up to 4 outstanding SENDs,
 *                                WRITEs with immediate and READs of 0 to
 *                                8192 bytes at MTU 1024, both ways
 *
 * Each byte, byte_len, immediate, opcode, status and wr_id is checked:
 * a duplicate taken as a new message would complete a receive beyond
 * those the messages take (the spare in `fixed`, the next round's in
 * `mix`, whose CQs must be empty at the end).
 * Prints "roce_rc_loss: ... ms" and "roce_rc_loss: ok", or "FAIL ...".
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

/* Source slots in the first half of a buffer, destinations in the second. */
#define SLOT 16384
/* The largest message of `mix`. */
#define MIX_MAX 8192
#define SLOTS 4
#define HALF (SLOT * SLOTS)
#define LEN (2 * HALF)
/* The spare receive: any completion on it is a duplicate taken as new. */
#define SPARE_ID 999

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
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
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

static void connect_to(struct end *e, uint32_t dest_qpn, uint32_t psn, enum ibv_mtu mtu)
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
		.path_mtu = mtu,
		.dest_qp_num = dest_qpn,
		.rq_psn = psn,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		fail("RTR");
	/* timeout 12: 16.8 ms; 7 retries, reset by each advance. */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = psn, .timeout = 12,
				  .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4 };
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		fail("RTS");
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
		if (n == 1) {
			if (wc.wr_id == SPARE_ID)
				fail("%s: the spare receive completed (a duplicate taken as new)",
				     what);
			if (wc.status != IBV_WC_SUCCESS)
				fail("%s: wr_id %llu status %s", what, (unsigned long long)wc.wr_id,
				     ibv_wc_status_str(wc.status));
			return wc;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20)
			fail("%s: no completion in 20 s", what);
	}
}

static void post_send(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t off,
		      uint32_t len, struct end *peer, uint32_t roff, uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm) },
			   *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + roff;
	wr.wr.rdma.rkey = peer->mr->rkey;
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

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245 + 12345;
		p[i] = (unsigned char)(seed >> 16);
	}
}

static void pair(struct end *a, struct end *b, uint32_t psn, enum ibv_mtu mtu)
{
	open_end(a);
	open_end(b);
	connect_to(a, b->qp->qp_num, psn, mtu);
	connect_to(b, a->qp->qp_num, psn, mtu);
}

static void check_recv(struct ibv_wc wc, enum ibv_wc_opcode op, uint32_t len, uint32_t imm,
		       const char *what)
{
	if (wc.opcode != op || wc.byte_len != len || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
	    ntohl(wc.imm_data) != imm)
		fail("%s: opcode %d len %u imm %#x, want %d %u %#x", what, wc.opcode, wc.byte_len,
		     ntohl(wc.imm_data), op, len, imm);
}

static double ms_since(struct timespec t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
}

static void fixed(double min_ms)
{
	struct end a, b;
	struct ibv_wc wc;
	struct timespec t0;

	/* Near the 24-bit wrap: the messages cross it. */
	pair(&a, &b, 0xfffff0, IBV_MTU_256);
	fill(a.buf, HALF, 1);
	fill(b.buf, HALF, 2);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	post_recv(&b, 11, HALF + SLOT, SLOT);
	post_recv(&b, 12, 0, 0);
	post_recv(&b, 13, HALF + 3 * SLOT, SLOT);
	/* Beyond what the messages take: see SPARE_ID. */
	post_recv(&b, SPARE_ID, HALF, SLOT);
	post_send(&a, 1, IBV_WR_SEND_WITH_IMM, 0, 5000, &b, 0, 0x11111111);
	post_send(&a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, SLOT, 3000, &b, HALF + 2 * SLOT, 0x22222222);
	post_send(&a, 3, IBV_WR_RDMA_READ, HALF, 3000, &b, 2 * SLOT, 0);
	post_send(&a, 4, IBV_WR_SEND_WITH_IMM, 3 * SLOT, 100, &b, 0, 0x44444444);
	for (uint64_t id = 1; id <= 4; id++) {
		wc = poll1(&a, "requester");
		if (wc.wr_id != id)
			fail("requester: wr_id %llu, want %llu", (unsigned long long)wc.wr_id,
			     (unsigned long long)id);
	}
	wc = poll1(&b, "SEND's receive");
	check_recv(wc, IBV_WC_RECV, 5000, 0x11111111, "SEND's receive");
	wc = poll1(&b, "WRITE's receive");
	check_recv(wc, IBV_WC_RECV_RDMA_WITH_IMM, 3000, 0x22222222, "WRITE's receive");
	wc = poll1(&b, "second SEND's receive");
	check_recv(wc, IBV_WC_RECV, 100, 0x44444444, "second SEND's receive");
	if (memcmp(a.buf, b.buf + HALF + SLOT, 5000))
		fail("SEND's bytes differ");
	if (memcmp(a.buf + SLOT, b.buf + HALF + 2 * SLOT, 3000))
		fail("WRITE's bytes differ");
	if (memcmp(a.buf + HALF, b.buf + 2 * SLOT, 3000))
		fail("READ's bytes differ");
	if (memcmp(a.buf + 3 * SLOT, b.buf + HALF + 3 * SLOT, 100))
		fail("second SEND's bytes differ");
	double ms = ms_since(t0);

	printf("roce_rc_loss: SEND 5000, WRITE 3000, READ 3000, SEND 100 in %.1f ms\n", ms);
	if (ms < min_ms)
		fail("done in %.1f ms: a recovery by the ACK timeout takes %.1f", ms, min_ms);
}

static void long_messages(void)
{
	struct end a, b;
	struct ibv_wc wc;
	struct timespec t0;
	const uint32_t n = 40000;

	pair(&a, &b, 0xfffff0, IBV_MTU_256);
	fill(a.buf, HALF, 3);
	fill(b.buf, HALF, 4);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	post_recv(&b, 11, HALF, SLOT * 3);
	post_recv(&b, 12, 0, 0);
	post_recv(&b, SPARE_ID, HALF, SLOT);
	post_send(&a, 1, IBV_WR_SEND_WITH_IMM, 0, n, &b, 0, 0x11111111);
	for (uint64_t id = 1; id <= 1; id++)
		if ((wc = poll1(&a, "SEND")).wr_id != id)
			fail("SEND: wr_id %llu", (unsigned long long)wc.wr_id);
	wc = poll1(&b, "SEND's receive");
	check_recv(wc, IBV_WC_RECV, n, 0x11111111, "SEND's receive");
	if (memcmp(a.buf, b.buf + HALF, n))
		fail("SEND's bytes differ");
	fill(a.buf, HALF, 5);
	post_send(&a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, 0, n, &b, HALF, 0x22222222);
	if ((wc = poll1(&a, "WRITE")).wr_id != 2)
		fail("WRITE: wr_id %llu", (unsigned long long)wc.wr_id);
	wc = poll1(&b, "WRITE's receive");
	check_recv(wc, IBV_WC_RECV_RDMA_WITH_IMM, n, 0x22222222, "WRITE's receive");
	if (memcmp(a.buf, b.buf + HALF, n))
		fail("WRITE's bytes differ");
	post_send(&a, 3, IBV_WR_RDMA_READ, HALF, n, &b, 0, 0);
	if ((wc = poll1(&a, "READ")).wr_id != 3)
		fail("READ: wr_id %llu", (unsigned long long)wc.wr_id);
	if (memcmp(a.buf + HALF, b.buf, n))
		fail("READ's bytes differ");
	printf("roce_rc_loss: SEND, WRITE, READ of %u bytes at MTU 256 in %.1f ms\n", n,
	       ms_since(t0));
}

/* One round from `s` to `d`: n work requests, each checked. */
static void round_of(struct end *s, struct end *d, int n, uint32_t *rng)
{
	enum ibv_wr_opcode op[SLOTS];
	uint32_t len[SLOTS];
	int recvs = 0;

	for (int i = 0; i < n; i++) {
		*rng = *rng * 1664525 + 1013904223;
		op[i] = (enum ibv_wr_opcode[]){ IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM,
						IBV_WR_RDMA_READ }[(*rng >> 8) % 3];
		len[i] = (*rng >> 12) % (MIX_MAX + 1);
		fill(s->buf + i * SLOT, SLOT, *rng);
		fill(d->buf + i * SLOT, SLOT, *rng ^ 0x5a5a5a5a);
		memset(s->buf + HALF + i * SLOT, 0, SLOT);
		memset(d->buf + HALF + i * SLOT, 0, SLOT);
		if (op[i] != IBV_WR_RDMA_READ)
			post_recv(d, 100 + i, HALF + i * SLOT, SLOT);
	}
	for (int i = 0; i < n; i++) {
		if (op[i] == IBV_WR_RDMA_READ)
			post_send(s, i, op[i], HALF + i * SLOT, len[i], d, i * SLOT, 0);
		else
			post_send(s, i, op[i], i * SLOT, len[i], d, HALF + i * SLOT, 0x1000 + i);
	}
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = poll1(s, "requester");

		if (wc.wr_id != (uint64_t)i)
			fail("requester: wr_id %llu, want %d", (unsigned long long)wc.wr_id, i);
		if (op[i] == IBV_WR_RDMA_READ) {
			if (wc.opcode != IBV_WC_RDMA_READ ||
			    memcmp(s->buf + HALF + i * SLOT, d->buf + i * SLOT, len[i]))
				fail("READ %d of %u bytes: opcode %d or bytes differ", i, len[i],
				     wc.opcode);
		} else {
			recvs++;
		}
	}
	for (int i = 0; i < n; i++) {
		if (op[i] == IBV_WR_RDMA_READ)
			continue;
		struct ibv_wc wc = poll1(d, "receive");

		if (wc.wr_id != (uint64_t)(100 + i))
			fail("receive: wr_id %llu, want %d", (unsigned long long)wc.wr_id, 100 + i);
		check_recv(wc,
			   op[i] == IBV_WR_SEND_WITH_IMM ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM,
			   len[i], 0x1000 + i, "receive");
		if (memcmp(s->buf + i * SLOT, d->buf + HALF + i * SLOT, len[i]))
			fail("%s %d of %u bytes: bytes differ",
			     op[i] == IBV_WR_SEND_WITH_IMM ? "SEND" : "WRITE", i, len[i]);
		recvs--;
	}
	if (recvs)
		fail("receives missing");
}

static void mix(int rounds)
{
	struct end a, b;
	struct timespec t0;
	uint32_t rng = 12345;
	int msgs = 0;

	pair(&a, &b, 0xffff00, IBV_MTU_1024);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int r = 0; r < rounds; r++) {
		int n = 1 + (int)((rng >> 20) % SLOTS);

		if (r % 2)
			round_of(&b, &a, n, &rng);
		else
			round_of(&a, &b, n, &rng);
		msgs += n;
	}
	struct ibv_wc wc;
	if (ibv_poll_cq(a.cq, 1, &wc) || ibv_poll_cq(b.cq, 1, &wc))
		fail("a completion more than the messages: wr_id %llu", (unsigned long long)wc.wr_id);
	printf("roce_rc_loss: %d rounds, %d messages both ways in %.1f ms\n", rounds, msgs,
	       ms_since(t0));
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: roce_rc_loss DEV fixed [MS] | long | mix ROUNDS\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(100);
	struct ibv_device **l = ibv_get_device_list(NULL);

	for (int i = 0; l && l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), argv[1]))
			ctx = ibv_open_device(l[i]);
	if (!ctx)
		fail("cannot open %s", argv[1]);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("pd");
	if (!strcmp(argv[2], "fixed"))
		fixed(argc > 3 ? atof(argv[3]) : 0);
	else if (!strcmp(argv[2], "long"))
		long_messages();
	else if (!strcmp(argv[2], "mix") && argc == 4)
		mix(atoi(argv[3]));
	else
		fail("unknown scenario %s", argv[2]);
	printf("roce_rc_loss: ok\n");
	return 0;
}
