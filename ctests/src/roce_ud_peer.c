/*
 * roce_ud_peer: UD SENDs between two verbs implementations (rsw in RoCEv2
 * mode and the kernel's rxe, one per process), every byte, the immediate,
 * the source QPN and the GRH area checked at both ends.
 *
 *   roce_ud_peer server DEV GID_INDEX TCP_PORT [controlled]
 *   roce_ud_peer client DEV GID_INDEX TCP_PORT SERVER [COUNT [controlled]]
 *
 * The two exchange their QPN and GID over TCP, then the client sends
 * COUNT messages (default 100) one at a time, resending every 300 ms
 * until the answer comes (UD is lossy). Message seq has size
 * SIZES[seq % N]: bytes 0-3 are seq (big-endian), the rest pattern(i,
 * seq). Even seqs go as SEND WITH IMMEDIATE (imm = seq ^ IMM_MARK), odd
 * ones as plain SEND; with "controlled", every fourth names the Q_Key
 * 0x80000000 (the QP's own, IBA's controlled Q_Key; rxe, as of Linux 6.1,
 * sends the WR's Q_Key as it is, so only rsw's side asks for it). Before
 * each first try the client sends, with seq | WRONG, a copy with a wrong
 * Q_Key and one with the right Q_Key to a QPN that does not exist, which
 * the server must never see. The server answers with the same seq and
 * size, every other byte inverted, with an immediate exactly when the
 * request had none.
 *
 * Checked at each end, for every message: status, opcode, byte_len
 * (40 + size), IBV_WC_GRH, IBV_WC_WITH_IMM and imm_data, src_qp (the
 * peer's QPN), every payload byte, and the GRH area as RoCEv2 writes it:
 * for IPv4, 20 zero bytes then the IP header (version 4, IHL 5, protocol
 * UDP, total length = 20 + 8 + BTH 12 + DETH 8 [+ 4 imm] + size + pad +
 * ICRC 4, the peer's and our address, a valid header checksum); for
 * IPv6, the header with next header UDP and both GIDs.
 *
 * Output: "roce_ud_peer client|server: N messages, B bytes verified,
 * R resent" and exit status 0; on any mismatch a line starting "FAIL" and
 * exit status 1. An alarm bounds either side.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define LIMIT_SECONDS 60
#define RESEND_MS 300
#define TRIES 30
#define QKEY 0x11111111u
#define WRONG_QKEY 0x22222222u
#define CONTROLLED_QKEY 0x80000000u
#define IMM_MARK 0x5a5a0000u
#define WRONG 0x40000000u
/* Flipped in the peer's QPN: a QP that does not exist there. */
#define OTHER_QPN 0x800000u
#define BYE 0xffffffffu
#define GRH 40
#define MAXLEN 1024
#define SLOTS 32
/* Sends in flight: each message's decoys and tries, a poll behind. */
#define SEND_DEPTH 32
/* Send WRs' ids: above any receive slot's. */
#define SEND_WR (1ull << 40)

static const size_t SIZES[] = { 4, 5, 6, 7, 64, 255, 256, 1000, 1021, 1024 };
#define NSIZES (sizeof(SIZES) / sizeof(SIZES[0]))

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

static uint8_t pattern(size_t i, uint32_t seq)
{
	return (uint8_t)(i * 29 + seq * 3 + (i >> 8));
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct peer {
	uint32_t qpn;
	union ibv_gid gid;
};

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	uint8_t *buf; /* SLOTS receive slots, then one send slot */
	union ibv_gid gid;
	int gid_index;
	struct peer peer;
	int answering; /* server */
	unsigned long verified, bytes, resent;
	int sends_out;
};

static uint8_t *slot(struct ctx *c, int i)
{
	return c->buf + (size_t)i * (GRH + MAXLEN);
}

static void post_recv(struct ctx *c, int i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)slot(c, i), .length = GRH + MAXLEN, .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

	/* Stale bytes must not pass for a GRH or payload. */
	memset(slot(c, i), 0xee, GRH + MAXLEN);
	if (ibv_post_recv(c->qp, &wr, &bad))
		fail("ibv_post_recv");
}

static void setup(struct ctx *c, const char *name, int gid_index)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	int i;

	if (!l)
		fail("ibv_get_device_list");
	for (i = 0; l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			break;
	if (!l[i])
		fail("no device %s", name);
	c->dev = ibv_open_device(l[i]);
	if (!c->dev)
		fail("ibv_open_device %s", name);
	ibv_free_device_list(l);
	c->gid_index = gid_index;
	if (ibv_query_gid(c->dev, 1, gid_index, &c->gid))
		fail("ibv_query_gid %d", gid_index);
	c->pd = ibv_alloc_pd(c->dev);
	c->cq = ibv_create_cq(c->dev, SLOTS + SEND_DEPTH, NULL, NULL, 0);
	c->buf = calloc(SLOTS + 1, GRH + MAXLEN);
	if (!c->pd || !c->cq || !c->buf)
		fail("pd/cq/buffer");
	c->mr = ibv_reg_mr(c->pd, c->buf, (SLOTS + 1) * (GRH + MAXLEN), IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		fail("ibv_reg_mr");
	struct ibv_qp_init_attr ia = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.cap = { .max_send_wr = SEND_DEPTH, .max_recv_wr = SLOTS, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		fail("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY };
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		fail("modify to INIT");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE))
		fail("modify to RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0x1234 };
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		fail("modify to RTS");
	for (i = 0; i < SLOTS; i++)
		post_recv(c, i);
}

static void make_ah(struct ctx *c)
{
	struct ibv_ah_attr a = {
		.is_global = 1,
		.grh = { .dgid = c->peer.gid, .sgid_index = c->gid_index, .hop_limit = 64 },
		.port_num = 1,
	};

	c->ah = ibv_create_ah(c->pd, &a);
	if (!c->ah)
		fail("ibv_create_ah");
}

static void exchange(struct ctx *c, int s)
{
	uint8_t out[20], in[20];
	size_t got = 0;

	put32(out, c->qp->qp_num);
	memcpy(out + 4, c->gid.raw, 16);
	if (write(s, out, sizeof(out)) != (ssize_t)sizeof(out))
		fail("write the exchange");
	while (got < sizeof(in)) {
		ssize_t n = read(s, in + got, sizeof(in) - got);

		if (n <= 0)
			fail("read the exchange");
		got += (size_t)n;
	}
	c->peer.qpn = get32(in);
	memcpy(c->peer.gid.raw, in + 4, 16);
}

static int is_v4(const union ibv_gid *g)
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g->raw, pre, 12);
}

static void send_to(struct ctx *c, uint32_t qpn, uint32_t seq, size_t size, int imm, uint32_t qkey,
		    int invert)
{
	uint8_t *p = slot(c, SLOTS);
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = (uint32_t)size, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = SEND_WR | seq,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	size_t i;

	put32(p, seq);
	for (i = 4; i < size; i++)
		p[i] = invert && i % 2 ? (uint8_t)~pattern(i, seq) : pattern(i, seq);
	if (imm)
		wr.imm_data = htonl(seq ^ IMM_MARK);
	wr.wr.ud.ah = c->ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	if (ibv_post_send(c->qp, &wr, &bad))
		fail("ibv_post_send seq %u", seq);
	c->sends_out++;
}

static void send_msg(struct ctx *c, uint32_t seq, size_t size, int imm, uint32_t qkey, int invert)
{
	send_to(c, c->peer.qpn, seq, size, imm, qkey, invert);
}

static uint16_t ip_sum(const uint8_t *h)
{
	uint32_t s = 0;
	int i;

	for (i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* Checks a received message in slot `i`: all but the payload's meaning. */
static uint32_t check_recv(struct ctx *c, const struct ibv_wc *wc, int *with_imm, size_t *size)
{
	const uint8_t *g = slot(c, (int)wc->wr_id), *p = g + GRH;
	uint32_t seq;
	size_t n, i, wire;

	if (wc->opcode != IBV_WC_RECV)
		fail("opcode %d, not IBV_WC_RECV", wc->opcode);
	if (wc->byte_len < GRH + 4 || wc->byte_len > GRH + MAXLEN)
		fail("byte_len %u", wc->byte_len);
	n = wc->byte_len - GRH;
	seq = get32(p);
	if (seq != BYE && seq & WRONG)
		fail("a message with a wrong Q_Key arrived (seq %#x)", seq);
	if (n != SIZES[seq % NSIZES])
		fail("seq %u: %zu bytes, sent %zu", seq, n, SIZES[seq % NSIZES]);
	if (!(wc->wc_flags & IBV_WC_GRH))
		fail("seq %u: no IBV_WC_GRH", seq);
	if (wc->src_qp != c->peer.qpn)
		fail("seq %u: src_qp %#x, peer's QPN %#x", seq, wc->src_qp, c->peer.qpn);
	*with_imm = !!(wc->wc_flags & IBV_WC_WITH_IMM);
	if (*with_imm && ntohl(wc->imm_data) != (seq ^ IMM_MARK))
		fail("seq %u: imm %#x", seq, ntohl(wc->imm_data));
	wire = 12 + 8 + (*with_imm ? 4 : 0) + ((n + 3) & ~(size_t)3) + 4;
	if (is_v4(&c->peer.gid)) {
		const uint8_t *h = g + 20;

		for (i = 0; i < 20; i++)
			if (g[i])
				fail("seq %u: GRH byte %zu is %#x, not 0 (IPv4)", seq, i, g[i]);
		if (h[0] != 0x45 || h[9] != 17)
			fail("seq %u: IPv4 header %#x, protocol %u", seq, h[0], h[9]);
		if ((size_t)(h[2] << 8 | h[3]) != 20 + 8 + wire)
			fail("seq %u: IP total length %u, want %zu", seq, h[2] << 8 | h[3], 28 + wire);
		if (memcmp(h + 12, c->peer.gid.raw + 12, 4) || memcmp(h + 16, c->gid.raw + 12, 4))
			fail("seq %u: IP addresses %u.%u.%u.%u -> %u.%u.%u.%u", seq, h[12], h[13], h[14],
			     h[15], h[16], h[17], h[18], h[19]);
		if (ip_sum(h) != 0xffff)
			fail("seq %u: IP header checksum", seq);
		if (h[8] == 0)
			fail("seq %u: TTL 0", seq);
	} else {
		if (g[0] >> 4 != 6 || g[6] != 17)
			fail("seq %u: IPv6 header %#x, next header %u", seq, g[0], g[6]);
		if ((size_t)(g[4] << 8 | g[5]) != 8 + wire)
			fail("seq %u: IPv6 payload length %u", seq, g[4] << 8 | g[5]);
		if (memcmp(g + 8, c->peer.gid.raw, 16) || memcmp(g + 24, c->gid.raw, 16))
			fail("seq %u: IPv6 addresses", seq);
	}
	*size = n;
	return seq;
}

/* Waits up to `ms` for a receive; its seq (or BYE), or -1 on timeout.
 * Send completions met on the way are checked and counted. */
static int64_t wait_recv(struct ctx *c, int ms, uint32_t expect)
{
	long end = now_ms() + ms;
	struct ibv_wc wc;

	while (now_ms() < end) {
		int n = ibv_poll_cq(c->cq, 1, &wc);

		if (n < 0)
			fail("ibv_poll_cq");
		if (n == 0) {
			usleep(100);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			fail("completion wr_id %llu: %s", (unsigned long long)wc.wr_id,
			     ibv_wc_status_str(wc.status));
		if (wc.wr_id & SEND_WR) {
			if (wc.opcode != IBV_WC_SEND)
				fail("send completion opcode %d", wc.opcode);
			c->sends_out--;
			continue;
		}
		int with_imm;
		size_t size, i;
		uint32_t seq = check_recv(c, &wc, &with_imm, &size);
		const uint8_t *p = slot(c, (int)wc.wr_id) + GRH;
		int inverted = !c->answering;

		if (seq == BYE) {
			post_recv(c, (int)wc.wr_id);
			return BYE;
		}
		/* Requests: an immediate on even seqs; answers: on odd ones. */
		if (with_imm != (c->answering ? seq % 2 == 0 : seq % 2 == 1))
			fail("seq %u: IBV_WC_WITH_IMM %d", seq, with_imm);
		for (i = 4; i < size; i++) {
			uint8_t want = inverted && i % 2 ? (uint8_t)~pattern(i, seq) : pattern(i, seq);

			if (p[i] != want)
				fail("seq %u: byte %zu is %#x, want %#x", seq, i, p[i], want);
		}
		post_recv(c, (int)wc.wr_id);
		if (!c->answering && seq != expect)
			continue; /* an answer to an earlier try */
		c->verified++;
		c->bytes += size;
		return seq;
	}
	return -1;
}

static void drain_sends(struct ctx *c)
{
	long end = now_ms() + 5000;
	struct ibv_wc wc;

	while (c->sends_out > 0 && now_ms() < end) {
		int n = ibv_poll_cq(c->cq, 1, &wc);

		if (n < 0)
			fail("ibv_poll_cq");
		if (n && wc.wr_id & SEND_WR) {
			if (wc.status != IBV_WC_SUCCESS)
				fail("send: %s", ibv_wc_status_str(wc.status));
			c->sends_out--;
		}
	}
}

/* Dual stack: the exchange may come over IPv4 or IPv6. */
static int tcp_server(int port)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	int one = 1, zero = 0, l = socket(AF_INET6, SOCK_STREAM, 0), s;

	if (l < 0)
		fail("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
		fail("listen on %d", port);
	s = accept(l, NULL, NULL);
	if (s < 0)
		fail("accept");
	close(l);
	return s;
}

static int tcp_client(const char *host, int port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char service[16];
	int s, i;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &res))
		fail("address %s", host);
	for (i = 0; i < 100; i++) {
		s = socket(res->ai_family, SOCK_STREAM, 0);
		if (!connect(s, res->ai_addr, res->ai_addrlen)) {
			freeaddrinfo(res);
			return s;
		}
		close(s);
		usleep(100000);
	}
	fail("connect to %s port %d", host, port);
}

int main(int argc, char **argv)
{
	struct ctx c = { 0 };
	int server, s, controlled;

	if (argc < 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    (argv[1][0] == 'c' && argc < 6)) {
		fprintf(stderr, "usage: %s server DEV GID_INDEX TCP_PORT [controlled]\n"
				"       %s client DEV GID_INDEX TCP_PORT SERVER [COUNT [controlled]]\n",
			argv[0], argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(LIMIT_SECONDS);
	server = argv[1][0] == 's';
	controlled = !strcmp(argv[argc - 1], "controlled");
	setup(&c, argv[2], atoi(argv[3]));
	s = server ? tcp_server(atoi(argv[4])) : tcp_client(argv[5], atoi(argv[4]));
	exchange(&c, s);
	make_ah(&c);
	if (server) {
		c.answering = 1;
		for (;;) {
			int64_t seq = wait_recv(&c, 1000 * LIMIT_SECONDS, 0);
			uint32_t q;

			if (seq < 0)
				fail("no request for %d s", LIMIT_SECONDS);
			q = (uint32_t)seq;
			if (q == BYE) {
				send_msg(&c, BYE, SIZES[BYE % NSIZES], 0, QKEY, 0);
				break;
			}
			/* Answer with every other byte inverted. */
			send_msg(&c, q, SIZES[q % NSIZES], q % 2 == 1,
				 controlled && q % 4 == 1 ? CONTROLLED_QKEY : QKEY, 1);
		}
		drain_sends(&c);
		/* Duplicates (resent requests) count: they were verified too. */
		printf("roce_ud_peer server: %lu messages, %lu bytes verified, src_qp %#x\n", c.verified,
		       c.bytes, c.peer.qpn);
	} else {
		unsigned long count = argc > 6 && !(argc == 7 && controlled) ? strtoul(argv[6], NULL, 0) : 100, seq;

		for (seq = 0; seq < count; seq++) {
			size_t size = SIZES[seq % NSIZES];
			uint32_t qkey = controlled && seq % 4 == 3 ? CONTROLLED_QKEY : QKEY;
			int tries;

			send_msg(&c, (uint32_t)seq | WRONG, size, 0, WRONG_QKEY, 0);
			send_to(&c, c.peer.qpn ^ OTHER_QPN, (uint32_t)seq | WRONG, size, 0, QKEY, 0);
			for (tries = 0; tries < TRIES; tries++) {
				if (tries)
					c.resent++;
				send_msg(&c, (uint32_t)seq, size, seq % 2 == 0, qkey, 0);
				if (wait_recv(&c, RESEND_MS, (uint32_t)seq) == (int64_t)seq)
					break;
			}
			if (tries == TRIES)
				fail("seq %lu: no answer after %d tries", seq, TRIES);
		}
		for (int tries = 0; tries < TRIES; tries++) {
			send_msg(&c, BYE, SIZES[BYE % NSIZES], 0, QKEY, 0);
			if (wait_recv(&c, RESEND_MS, BYE) == BYE)
				break;
		}
		drain_sends(&c);
		printf("roce_ud_peer client: %lu messages, %lu bytes verified, %lu resent, src_qp %#x\n",
		       c.verified, c.bytes, c.resent, c.peer.qpn);
	}
	close(s);
	return 0;
}
