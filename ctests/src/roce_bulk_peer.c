/*
 * roce_bulk_peer: RC bulk traffic between two processes over RoCEv2 (rsw
 * in RoCEv2 mode against rsw or the kernel's rxe), every byte checked:
 * the many-packet messages and bursts that rsw sends with one sendmmsg
 * and takes with one recvmmsg (providers/rsw/src/engine/roce_tx.rs).
 *
 *   roce_bulk_peer target DEV GID_INDEX TCP_PORT
 *   roce_bulk_peer initiator DEV GID_INDEX TCP_PORT TARGET_ADDR
 *
 * Over TCP the two exchange QPN, PSN, GID, buffer address and rkey (path
 * MTU 1024). The target fills its READ region, posts NRECV receives and
 * answers; the initiator then
 *  1. WRITEs 1 MiB (1024 packets: past the requester's window);
 *  2. posts 64 WRITEs of 4 KiB at once;
 *  3. READs 1 MiB back (1024 responses) and checks every byte;
 *  4. READs 1 MiB again with 16 WRITEs of 4 KiB posted right behind it
 *     (no fence): their ACKs must not overtake the READ's responses,
 *     which a requester such as rxe's takes for a lost response and
 *     answers by asking again (the script checks rxe's counters);
 *  5. posts 32 SENDs of 3000 bytes and 64 of 8 bytes at once;
 *  and tells the target over TCP it is done. The target checks both
 *  WRITE regions and each receive in order (wr_id, length, bytes).
 * Every completion must succeed, in order.
 *
 * On an rsw device each side then prints its device's counters from its
 * own rsw-stat socket, one "roce_bulk_peer ROLE stat NAME VALUE" line
 * each. Output ends "roce_bulk_peer ROLE: ok" with exit status 0; on
 * any mismatch a line starting "FAIL" and exit status 1. An alarm bounds
 * either side.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define MIB (1u << 20)
#define LEN (4 * MIB)
/* The target's (and the initiator's source) regions. */
#define W1_OFF 0
#define W1_LEN MIB
#define W2_OFF MIB
#define W2_N 64
#define W2_LEN 4096
#define R_OFF (2 * MIB)
#define R_LEN MIB
#define RECV_OFF (3 * MIB)
#define RECV_SLOT 4096
#define BIG_N 32
#define BIG_LEN 3000
#define SMALL_N 64
#define SMALL_LEN 8
#define NRECV (BIG_N + SMALL_N)
/* WRITEs of step 5 (into the step 2 region, the same bytes again). */
#define W3_N 16
#define PSN 0x0fff00

static const char *role;
static const char *dev_name;

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	printf("FAIL %s: ", role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (errno %d %s)\n", e, strerror(e));
	exit(1);
}

/* What each side tells the other. */
struct info {
	uint32_t qpn, psn, rkey, pad;
	uint64_t addr;
	uint8_t gid[16];
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static unsigned char *buf;
static int gid_index;

static void full(int fd, void *p, size_t n, int out)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = out ? write(fd, (char *)p + done, n - done) :
				  read(fd, (char *)p + done, n - done);

		if (r <= 0)
			fail("TCP %s", out ? "write" : "read");
		done += r;
	}
}

/* Byte i of pattern `seed`: no two regions alike, no period of a packet. */
static unsigned char pat(uint32_t seed, uint32_t i)
{
	uint32_t x = (i + 1) * 2654435761u ^ seed * 40503u;

	x ^= x >> 15;
	x *= 2246822519u;
	x ^= x >> 13;
	return (unsigned char)x;
}

static void fill(unsigned char *p, uint32_t n, uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = pat(seed, i);
}

static void check(const unsigned char *p, uint32_t n, uint32_t seed, const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (p[i] != pat(seed, i))
			fail("%s: byte %u is %#x, want %#x", what, i, p[i], pat(seed, i));
}

static void open_dev(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 128, .max_recv_wr = NRECV, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	for (int i = 0; l && l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	if (!ctx)
		fail("cannot open %s", name);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!pd || !cq || posix_memalign((void **)&buf, 4096, LEN))
		fail("pd, cq or buffer");
	memset(buf, 0, LEN);
	a.send_cq = a.recv_cq = cq;
	qp = ibv_create_qp(pd, &a);
	mr = ibv_reg_mr(pd, buf, LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!qp || !mr)
		fail("qp or mr");
}

static void local_info(struct info *me)
{
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, gid_index, &gid))
		fail("query_gid %d", gid_index);
	memcpy(me->gid, gid.raw, 16);
	me->qpn = qp->qp_num;
	me->psn = PSN;
	me->addr = (uintptr_t)buf;
	me->rkey = mr->rkey;
}

static void bring_up(const struct info *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };

	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("INIT");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .sgid_index = gid_index, .hop_limit = 64 } },
	};
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		fail("RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = PSN, .timeout = 14,
				  .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4 };
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		fail("RTS");
}

static struct ibv_wc poll1(const char *what)
{
	struct ibv_wc wc;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			fail("poll");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30)
			fail("%s: no completion in 30 s", what);
	}
}

static void expect(uint64_t wr_id, const char *what)
{
	struct ibv_wc wc = poll1(what);

	if (wc.wr_id != wr_id || wc.status != IBV_WC_SUCCESS)
		fail("%s: wr_id %llu status %s, want %llu success", what,
		     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
		     (unsigned long long)wr_id);
}

static void post(uint64_t id, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		 const struct info *t, uint32_t remote_off)
{
	struct ibv_sge sge = { (uintptr_t)buf + off, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op, .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	wr.wr.rdma.remote_addr = t->addr + remote_off;
	wr.wr.rdma.rkey = t->rkey;
	if (ibv_post_send(qp, &wr, &bad))
		fail("post_send %llu", (unsigned long long)id);
}

/* Where SEND i of step 5 comes from (initiator) and lands (target). */
static uint32_t send_len(int i)
{
	return i < BIG_N ? BIG_LEN : SMALL_LEN;
}

static void initiator(int fd)
{
	struct info me = { 0 }, t;

	local_info(&me);
	full(fd, &me, sizeof(me), 1);
	full(fd, &t, sizeof(t), 0);
	bring_up(&t);

	fill(buf + W1_OFF, W1_LEN, 1);
	post(1, IBV_WR_RDMA_WRITE, W1_OFF, W1_LEN, &t, W1_OFF);
	expect(1, "WRITE 1 MiB");

	fill(buf + W2_OFF, W2_N * W2_LEN, 2);
	for (int i = 0; i < W2_N; i++)
		post(100 + i, IBV_WR_RDMA_WRITE, W2_OFF + i * W2_LEN, W2_LEN, &t,
		     W2_OFF + i * W2_LEN);
	for (int i = 0; i < W2_N; i++)
		expect(100 + i, "a 4 KiB WRITE of the burst");

	post(2, IBV_WR_RDMA_READ, R_OFF, R_LEN, &t, R_OFF);
	expect(2, "READ 1 MiB");
	check(buf + R_OFF, R_LEN, 3, "READ 1 MiB");

	/* Step 4: WRITEs right behind a long READ, no fence: their ACKs
	 * must not pass the READ's responses. */
	memset(buf + R_OFF, 0, R_LEN);
	post(3, IBV_WR_RDMA_READ, R_OFF, R_LEN, &t, R_OFF);
	for (int i = 0; i < W3_N; i++)
		post(400 + i, IBV_WR_RDMA_WRITE, W2_OFF + i * W2_LEN, W2_LEN, &t,
		     W2_OFF + i * W2_LEN);
	expect(3, "READ 1 MiB with WRITEs behind it");
	for (int i = 0; i < W3_N; i++)
		expect(400 + i, "a 4 KiB WRITE behind the READ");
	check(buf + R_OFF, R_LEN, 3, "READ 1 MiB with WRITEs behind it");

	for (int i = 0; i < NRECV; i++) {
		fill(buf + RECV_OFF + i * RECV_SLOT, send_len(i), 10 + i);
		post(200 + i, IBV_WR_SEND, RECV_OFF + i * RECV_SLOT, send_len(i), &t, 0);
	}
	for (int i = 0; i < NRECV; i++)
		expect(200 + i, "a SEND of the burst");
	full(fd, "done", 4, 1);
}

static void target(int fd)
{
	struct info me = { 0 }, t;
	char done[4];

	local_info(&me);
	full(fd, &t, sizeof(t), 0);
	bring_up(&t);
	fill(buf + R_OFF, R_LEN, 3);
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + RECV_OFF + i * RECV_SLOT, RECV_SLOT,
				       mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 300 + i, .sg_list = &sge, .num_sge = 1 },
				   *bad;

		if (ibv_post_recv(qp, &wr, &bad))
			fail("post_recv %d", i);
	}
	full(fd, &me, sizeof(me), 1);
	for (int i = 0; i < NRECV; i++) {
		struct ibv_wc wc = poll1("a receive");

		if (wc.wr_id != 300 + (uint64_t)i || wc.status != IBV_WC_SUCCESS ||
		    wc.opcode != IBV_WC_RECV || wc.byte_len != send_len(i))
			fail("receive %d: wr_id %llu status %s opcode %d length %u, want %d "
			     "success RECV %u",
			     i, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			     wc.opcode, wc.byte_len, 300 + i, send_len(i));
		check(buf + RECV_OFF + i * RECV_SLOT, send_len(i), 10 + i, "a SEND's receive");
	}
	full(fd, done, 4, 0);
	check(buf + W1_OFF, W1_LEN, 1, "WRITE 1 MiB");
	check(buf + W2_OFF, W2_N * W2_LEN, 2, "the 4 KiB WRITEs");
}

/* The device's counters from our own rsw-stat socket (providers/rsw/src/stats.rs). */
static void print_counters(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rsw-stat.%d", getpid());
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	static char rep[1 << 16];
	size_t got = 0;
	char want[128], *line, *save;
	int in_dev = 0;

	if (fd < 0 ||
	    connect(fd, (struct sockaddr *)&sa, offsetof(struct sockaddr_un, sun_path) + 1 + n))
		fail("the rsw-stat socket");
	for (ssize_t r; got < sizeof(rep) - 1 && (r = read(fd, rep + got, sizeof(rep) - 1 - got));
	     got += r)
		if (r < 0)
			fail("reading the rsw-stat socket");
	close(fd);
	rep[got] = 0;
	snprintf(want, sizeof(want), "device %s", dev_name);
	for (line = strtok_r(rep, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != ' ')
			in_dev = !strcmp(line, want);
		else if (in_dev)
			printf("roce_bulk_peer %s stat %s\n", role, line + 2);
	}
}

int main(int argc, char **argv)
{
	int fd, one = 1;

	if (argc < 5 || (strcmp(argv[1], "target") && strcmp(argv[1], "initiator")) ||
	    (!strcmp(argv[1], "initiator") && argc != 6)) {
		fprintf(stderr, "usage: roce_bulk_peer target|initiator DEV GID_INDEX PORT [ADDR]\n");
		return 2;
	}
	role = argv[1];
	dev_name = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(90);
	gid_index = atoi(argv[3]);
	open_dev(dev_name);
	if (!strcmp(role, "target")) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons(atoi(argv[4])) };
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
			fail("listen");
		fd = accept(l, NULL, NULL);
		if (fd < 0)
			fail("accept");
		target(fd);
	} else {
		struct addrinfo *ai, hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };

		if (getaddrinfo(argv[5], argv[4], &hints, &ai))
			fail("getaddrinfo %s", argv[5]);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
			fail("connect");
		initiator(fd);
	}
	if (!strncmp(dev_name, "rsw", 3))
		print_counters();
	printf("roce_bulk_peer %s: ok\n", role);
	return 0;
}
