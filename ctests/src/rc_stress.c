/*
 * rc_stress: checksummed RC traffic between two processes (or hosts), and
 * what a requester sees when its peer vanishes.
 *
 *   rc_stress -s [options]            server (receiver)
 *   rc_stress [options] HOST          client (sender)
 *
 * Options: -p PORT (out-of-band TCP port, 18600), -d DEV (rsw_lo),
 * -g GIDX (0), -q QPS (1), -n MSGS per QP (10000), -S SIZE (256, >= 16),
 * -w WINDOW per QP (16), -t TIMEOUT (14), -r RETRY_CNT (7),
 * -D (the peer is about to vanish: the client expects RETRY_EXC then
 * flush errors, the server, which only receives, its receives flushed).
 *
 * Every message carries (qp, seq, length, checksum) and a payload derived
 * from them. Every 4th message is an RDMA WRITE WITH IMM into a slot of
 * the server's per-QP ring (imm = seq), the others SENDs. The server
 * checks per QP: sequence numbers in order without gaps or duplicates,
 * the checksum, every payload byte, and for WRITEs the bytes in the slot;
 * then both sides compare totals over the out-of-band socket. Exit 0 when
 * everything matched; 1 on any error. With -D the client runs until its
 * first error completion and exits 3 when that was IBV_WC_RETRY_EXC_ERR
 * followed only by flush errors, printing how long after the last success
 * it came; the server exits 3 when its receives flush. The client prints
 * "running" once traffic flows.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* WRITE slots per QP: a slot is written again 'slots' messages later,
 * which the client posts once message (seq + slots - window) completed,
 * i.e. once the server took it, which needed the receive of message
 * (seq + slots - 2 * window): at least 2 x window keeps the server ahead. */
#define SLOTS_MIN 64
static uint32_t slots = SLOTS_MIN;
#define MAX_QPS 8192

struct hdr {
	uint32_t qp, seq, len, sum;
};

struct qp_info {
	uint32_t qpn;
	uint64_t ring;	/* server: address of this QP's WRITE ring */
};

struct info {
	uint8_t gid[16];
	uint32_t rkey;
	uint32_t nqp;
};

static const char *dev_name = "rsw_lo";
static int gidx, nqp = 1, window = 16, port = 18600;
static long nmsg = 10000;
static uint32_t size = 256;
static int timeout_attr = 14, retry_attr = 7;
static bool expect_death;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "rc_stress: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

static uint8_t pbyte(uint32_t qp, uint32_t seq, uint32_t i)
{
	uint32_t x = qp * 2654435761u ^ seq * 40503u ^ i * 2246822519u;

	return (uint8_t)(x ^ x >> 13 ^ x >> 24);
}

static uint32_t fnv(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* Fills a message: header then derived payload; the checksum covers the
 * payload after the header. */
static void fill(uint8_t *m, uint32_t qp, uint32_t seq)
{
	struct hdr h = { qp, seq, size, 0 };

	for (uint32_t i = sizeof(h); i < size; i++)
		m[i] = pbyte(qp, seq, i);
	h.sum = fnv(m + sizeof(h), size - sizeof(h));
	memcpy(m, &h, sizeof(h));
}

/* Checks a message; returns NULL or what is wrong. */
static const char *verify(const uint8_t *m, uint32_t qp, uint32_t seq)
{
	struct hdr h;

	memcpy(&h, m, sizeof(h));
	if (h.qp != qp)
		return "wrong QP";
	if (h.seq != seq)
		return h.seq < seq ? "duplicate or reordered" : "lost message";
	if (h.len != size)
		return "wrong length";
	if (fnv(m + sizeof(h), size - sizeof(h)) != h.sum)
		return "checksum mismatch";
	for (uint32_t i = sizeof(h); i < size; i++)
		if (m[i] != pbyte(qp, seq, i))
			return "payload byte mismatch";
	return NULL;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t k = write(fd, c, n);
		if (k <= 0)
			die("out-of-band write failed: %s", strerror(errno));
		c += k;
		n -= (size_t)k;
	}
}

static void read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n) {
		ssize_t k = read(fd, c, n);
		if (k <= 0)
			die("out-of-band read failed (%s)", k ? strerror(errno) : "EOF");
		c += k;
		n -= (size_t)k;
	}
}

static int oob_server(void)
{
	int one = 1, l = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
		die("cannot listen: %s", strerror(errno));
	int fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(l);
	return fd;
}

static int oob_client(const char *host)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char p[16];

	snprintf(p, sizeof(p), "%d", port);
	if (getaddrinfo(host, p, &hints, &res))
		die("cannot resolve %s", host);
	for (int tries = 0; tries < 200; tries++) {
		int fd = socket(res->ai_family, SOCK_STREAM, 0);
		if (!connect(fd, res->ai_addr, res->ai_addrlen)) {
			freeaddrinfo(res);
			return fd;
		}
		close(fd);
		usleep(50000); /* the server may not listen yet: bounded retry */
	}
	die("cannot connect to %s", host);
	return -1;
}

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp **qp;
	uint8_t *buf;		/* client: send slots; server: recv slots */
	uint8_t *ring;		/* server: WRITE rings, slots x size per QP */
	struct ibv_mr *mr, *ring_mr;
	union ibv_gid gid;
	int cqe;
};

static void open_side(struct side *s)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);

	for (int i = 0; l && i < n && !s->ctx; i++)
		if (!strcmp(ibv_get_device_name(l[i]), dev_name))
			s->ctx = ibv_open_device(l[i]);
	if (!s->ctx)
		die("no device %s", dev_name);
	ibv_free_device_list(l);
	if (ibv_query_gid(s->ctx, 1, gidx, &s->gid))
		die("no GID index on %s", dev_name);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cqe = nqp * (window * 2 + 2);
	s->cq = ibv_create_cq(s->ctx, s->cqe, NULL, NULL, 0);
	if (!s->pd || !s->cq)
		die("PD/CQ: %s", strerror(errno));
	s->qp = calloc((size_t)nqp, sizeof(*s->qp));
	size_t len = (size_t)nqp * (size_t)window * size;
	s->buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE);
	size_t rlen = (size_t)nqp * slots * size;
	s->ring = aligned_alloc(4096, (rlen + 4095) / 4096 * 4096);
	memset(s->ring, 0, rlen);
	s->ring_mr = ibv_reg_mr(s->pd, s->ring, rlen,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->buf || !s->mr || !s->ring || !s->ring_mr)
		die("buffers: %s", strerror(errno));
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = (uint32_t)window, .max_recv_wr = (uint32_t)window,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		s->qp[i] = ibv_create_qp(s->pd, &a);
		if (!s->qp[i])
			die("create QP: %s", strerror(errno));
		struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
		if (ibv_modify_qp(s->qp[i], &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("INIT: %s", strerror(errno));
	}
}

static void connect_qp(struct side *s, int i, uint32_t dqpn, const uint8_t *dgid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dqpn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .sgid_index = (uint8_t)gidx, .hop_limit = 64 } },
	};

	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	if (ibv_modify_qp(s->qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)timeout_attr;
	a.retry_cnt = (uint8_t)retry_attr;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS: %s", strerror(errno));
}

/* Swaps device info and QP numbers, then connects every QP. */
static void exchange(struct side *s, int fd, uint64_t *peer_rings, uint32_t *peer_rkey)
{
	struct info me = { .rkey = s->ring_mr->rkey, .nqp = (uint32_t)nqp }, peer;
	struct qp_info *mine = calloc((size_t)nqp, sizeof(*mine));
	struct qp_info *theirs = calloc((size_t)nqp, sizeof(*theirs));

	memcpy(me.gid, s->gid.raw, 16);
	for (int i = 0; i < nqp; i++) {
		mine[i].qpn = s->qp[i]->qp_num;
		mine[i].ring = (uintptr_t)(s->ring + (size_t)i * slots * size);
	}
	write_all(fd, &me, sizeof(me));
	write_all(fd, mine, sizeof(*mine) * (size_t)nqp);
	read_all(fd, &peer, sizeof(peer));
	if (peer.nqp != (uint32_t)nqp)
		die("the peer has another QP count%s", "");
	read_all(fd, theirs, sizeof(*theirs) * (size_t)nqp);
	for (int i = 0; i < nqp; i++) {
		connect_qp(s, i, theirs[i].qpn, peer.gid);
		if (peer_rings)
			peer_rings[i] = theirs[i].ring;
	}
	if (peer_rkey)
		*peer_rkey = peer.rkey;
	/* Both sides are in RTS before anything is sent. */
	char c = 'c';
	write_all(fd, &c, 1);
	read_all(fd, &c, 1);
	free(mine);
	free(theirs);
}

static void post_recv(struct side *s, int q, int slot)
{
	uint8_t *p = s->buf + ((size_t)q * (size_t)window + (size_t)slot) * size;
	struct ibv_sge sg = { (uintptr_t)p, size, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)q << 32 | (uint32_t)slot,
				  .sg_list = &sg, .num_sge = 1 }, *bad;

	if (ibv_post_recv(s->qp[q], &wr, &bad))
		die("post_recv: %s", strerror(errno));
}

static int server(void)
{
	struct side s = { 0 };
	int fd = oob_server();

	open_side(&s);
	for (int q = 0; q < nqp; q++)
		for (int i = 0; i < window; i++)
			post_recv(&s, q, i);
	exchange(&s, fd, NULL, NULL);
	uint32_t *next = calloc((size_t)nqp, sizeof(*next));
	long total = (long)nqp * nmsg, got = 0, errors = 0;
	struct ibv_wc wc[64];
	uint64_t last = now_ms();

	while (got < total) {
		int n = ibv_poll_cq(s.cq, 64, wc);
		if (n < 0)
			die("poll_cq failed%s", "");
		if (n == 0) {
			if (now_ms() - last > 30000) {
				fprintf(stderr, "rc_stress: server: no completion for 30 s (%ld of %ld)\n",
					got, total);
				return 1;
			}
			continue;
		}
		last = now_ms();
		for (int k = 0; k < n; k++) {
			int q = (int)(wc[k].wr_id >> 32), slot = (int)(uint32_t)wc[k].wr_id;
			if (wc[k].status != IBV_WC_SUCCESS) {
				uint64_t gap = now_ms() - last;
				fprintf(stderr, "rc_stress: server: QP %d: %s (%d)\n", q,
					ibv_wc_status_str(wc[k].status), wc[k].status);
				/* A receiver with nothing outstanding learns of a
				 * vanished peer by its receives flushing. */
				if (expect_death && wc[k].status == IBV_WC_WR_FLUSH_ERR) {
					printf("server: peer-death: receives flushed %" PRIu64
					       " ms after the last completion\n", gap);
					return 3;
				}
				return 1;
			}
			uint32_t seq = next[q]++;
			const uint8_t *m;
			const char *bad;
			if (wc[k].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				uint32_t imm = ntohl(wc[k].imm_data);
				if (imm != seq) {
					fprintf(stderr, "rc_stress: QP %d: WRITE imm %u, expected %u\n",
						q, imm, seq);
					errors++;
				}
				m = s.ring + ((size_t)q * slots + seq % slots) * size;
			} else if (wc[k].opcode == IBV_WC_RECV) {
				if (wc[k].byte_len != size) {
					fprintf(stderr, "rc_stress: QP %d: byte_len %u\n", q, wc[k].byte_len);
					errors++;
				}
				m = s.buf + ((size_t)q * (size_t)window + (size_t)slot) * size;
			} else {
				fprintf(stderr, "rc_stress: unexpected opcode %d\n", wc[k].opcode);
				return 1;
			}
			if ((bad = verify(m, (uint32_t)q, seq))) {
				fprintf(stderr, "rc_stress: QP %d message %u: %s\n", q, seq, bad);
				errors++;
			}
			got++;
			post_recv(&s, q, slot);
		}
	}
	long counts[2] = { got, errors }, theirs[2];
	write_all(fd, counts, sizeof(counts));
	read_all(fd, theirs, sizeof(theirs));
	printf("server: %ld messages over %d QPs verified, %ld errors; client sent %ld\n",
	       got, nqp, errors, theirs[0]);
	return errors || theirs[0] != got ? 1 : 0;
}

static int client(const char *host)
{
	struct side s = { 0 };
	int fd = oob_client(host);

	open_side(&s);
	uint64_t *rings = calloc((size_t)nqp, sizeof(*rings));
	uint32_t rkey;
	exchange(&s, fd, rings, &rkey);
	uint32_t *sent = calloc((size_t)nqp, sizeof(*sent));
	int *inflight = calloc((size_t)nqp, sizeof(*inflight));
	long total = (long)nqp * nmsg, done = 0, posted = 0;
	struct ibv_wc wc[64];
	uint64_t start = now_ms(), last = start;
	bool running = false;

	while (done < total || expect_death) {
		/* Fill every QP's window. */
		for (int q = 0; q < nqp; q++) {
			while (inflight[q] < window && (sent[q] < nmsg || expect_death)) {
				uint32_t seq = sent[q];
				int slot = (int)(seq % (uint32_t)window);
				uint8_t *m = s.buf + ((size_t)q * (size_t)window + (size_t)slot) * size;
				fill(m, (uint32_t)q, seq);
				struct ibv_sge sg = { (uintptr_t)m, size, s.mr->lkey };
				struct ibv_send_wr wr = { .wr_id = (uint64_t)q << 32 | seq,
					.sg_list = &sg, .num_sge = 1,
					.send_flags = IBV_SEND_SIGNALED }, *bad;
				if (seq % 4 == 3) {
					wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
					wr.imm_data = htonl(seq);
					wr.wr.rdma.remote_addr = rings[q] + (uint64_t)(seq % slots) * size;
					wr.wr.rdma.rkey = rkey;
				} else {
					wr.opcode = IBV_WR_SEND;
				}
				if (ibv_post_send(s.qp[q], &wr, &bad))
					die("post_send: %s", strerror(errno));
				sent[q]++;
				inflight[q]++;
				posted++;
			}
		}
		int n = ibv_poll_cq(s.cq, 64, wc);
		if (n < 0)
			die("poll_cq failed%s", "");
		if (n == 0) {
			if (now_ms() - last > 60000) {
				fprintf(stderr, "rc_stress: client: no completion for 60 s (%ld of %ld)\n",
					done, total);
				return 1;
			}
			continue;
		}
		for (int k = 0; k < n; k++) {
			int q = (int)(wc[k].wr_id >> 32);
			if (wc[k].status != IBV_WC_SUCCESS) {
				uint64_t gap = now_ms() - last;
				printf("client: QP %d: %s (%d) %" PRIu64 " ms after the last success\n",
				       q, ibv_wc_status_str(wc[k].status), wc[k].status, gap);
				if (!expect_death)
					return 1;
				if (wc[k].status != IBV_WC_RETRY_EXC_ERR) {
					printf("client: expected IBV_WC_RETRY_EXC_ERR first\n");
					return 1;
				}
				/* Everything else still outstanding on that QP flushes:
				 * the rest of this batch first, then what follows. */
				int left = inflight[q] - 1, flushed = 0;
				uint64_t until = now_ms() + 10000;
				int bi = k + 1, bn = n;
				while (flushed < left && now_ms() < until) {
					struct ibv_wc w;
					if (bi < bn) {
						w = wc[bi++];
					} else {
						int m = ibv_poll_cq(s.cq, 1, &w);
						if (m < 0)
							return 1;
						if (m == 0)
							continue;
					}
					if ((int)(w.wr_id >> 32) != q)
						continue;
					if (w.status != IBV_WC_WR_FLUSH_ERR) {
						printf("client: then %s, not a flush\n",
						       ibv_wc_status_str(w.status));
						return 1;
					}
					flushed++;
				}
				printf("client: peer-death: RETRY_EXC_ERR after %" PRIu64
				       " ms, then %d of %d flushed\n", gap, flushed, left);
				return flushed == left ? 3 : 1;
			}
			inflight[q]--;
			done++;
			last = now_ms();
		}
		if (!running && done >= nqp * (long)window) {
			printf("running\n");
			fflush(stdout);
			running = true;
		}
	}
	long counts[2] = { done, 0 }, theirs[2];
	read_all(fd, theirs, sizeof(theirs));
	write_all(fd, counts, sizeof(counts));
	uint64_t ms = now_ms() - start;
	printf("client: %ld messages of %u bytes over %d QPs in %" PRIu64 " ms (%.0f msg/s); "
	       "server verified %ld with %ld errors\n",
	       done, size, nqp, ms, ms ? done * 1000.0 / (double)ms : 0.0, theirs[0], theirs[1]);
	return theirs[1] || theirs[0] != done ? 1 : 0;
}

int main(int argc, char **argv)
{
	bool srv = false;
	int c;

	while ((c = getopt(argc, argv, "sp:d:g:q:n:S:w:t:r:D")) != -1) {
		switch (c) {
		case 's': srv = true; break;
		case 'p': port = atoi(optarg); break;
		case 'd': dev_name = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'q': nqp = atoi(optarg); break;
		case 'n': nmsg = atol(optarg); break;
		case 'S': size = (uint32_t)atoi(optarg); break;
		case 'w': window = atoi(optarg); break;
		case 't': timeout_attr = atoi(optarg); break;
		case 'r': retry_attr = atoi(optarg); break;
		case 'D': expect_death = true; break;
		default: return 2;
		}
	}
	if (size < sizeof(struct hdr) || nqp < 1 || nqp > MAX_QPS || window < 1 || nmsg < 1)
		die("bad options%s", "");
	if ((uint32_t)window * 2 > slots)
		slots = (uint32_t)window * 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (srv)
		return server();
	if (optind >= argc)
		die("client needs the server's host%s", "");
	return client(argv[optind]);
}
