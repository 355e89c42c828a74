/*
 * roce_ops_peer: RC atomics and SEND with invalidate between two verbs
 * implementations (rsw in RoCEv2 mode and the kernel's rxe, one per
 * process), values and memory checked at both ends.
 *
 *   roce_ops_peer target DEV GID_INDEX TCP_PORT
 *   roce_ops_peer initiator DEV GID_INDEX TCP_PORT TARGET_ADDR
 *
 * Over TCP the two exchange QPN, PSN and GID; the target adds the address
 * and rkey of its buffer and the rkey of a type 2 memory window it bound
 * on its QP over bytes 1024..2047. The initiator then:
 *  1. FETCH_AND_ADD 5 on the target's word (1000): returns 1000;
 *  2. CMP_AND_SWP 1005 -> 77: returns 1005; CMP_AND_SWP 1 -> 2: returns 77;
 *  3. 32 FETCH_AND_ADDs of 1 posted at once (max_rd_atomic 4): the i-th
 *     returns 77 + i (RC runs them in order);
 *  4. WRITEs "window" through the window; SEND_WITH_INV of its rkey;
 *     a WRITE through it then fails with IBV_WC_REM_ACCESS_ERR;
 *  and tells the target over TCP it is done. The target checks its word
 *  is 109, the SEND's receive (IBV_WC_WITH_INV, invalidated_rkey the
 *  window's, its bytes), the first WRITE's bytes and that the last did
 *  not land. rxe (Linux 6.1) flags that receive with the kernel's
 *  IB_WC_WITH_INVALIDATE (1 << 2), which is IBV_WC_IP_CSUM_OK in
 *  libibverbs' numbering: a target on a device not named rsw* may show
 *  either bit.
 *
 * Output: "roce_ops_peer initiator|target: ok" and exit status 0; on any
 * mismatch a line starting "FAIL" and exit status 1. An alarm bounds
 * either side.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define LEN 4096
#define WIN_OFF 1024
#define WIN_LEN 1024
#define BURST 32
#define PSN 0x123456

static const char *role;

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
	uint32_t qpn, psn, rkey, mw_rkey;
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
/* The receive flags that say "invalidated" on this device. */
static unsigned int inv_flags = IBV_WC_WITH_INV;

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

static void open_dev(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 64, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	for (int i = 0; l && l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	if (!ctx)
		fail("cannot open %s", name);
	if (strncmp(name, "rsw", 3))
		inv_flags |= 1 << 2;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
	if (!pd || !cq || posix_memalign((void **)&buf, 4096, LEN))
		fail("pd, cq or buffer");
	memset(buf, 0, LEN);
	a.send_cq = a.recv_cq = cq;
	qp = ibv_create_qp(pd, &a);
	mr = ibv_reg_mr(pd, buf, LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
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
						    IBV_ACCESS_REMOTE_ATOMIC };

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
		if (t.tv_sec - t0.tv_sec > 20)
			fail("%s: no completion in 20 s", what);
	}
}

static void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_status st, const char *what)
{
	if (wc.wr_id != wr_id || wc.status != st)
		fail("%s: wr_id %llu status %s, want %llu %s", what, (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status), (unsigned long long)wr_id,
		     ibv_wc_status_str(st));
}

static uint64_t word(uint32_t off)
{
	uint64_t v;

	memcpy(&v, buf + off, 8);
	return v;
}

static void post(struct ibv_send_wr *wr, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)buf + off, len, mr->lkey };
	struct ibv_send_wr *bad;

	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(qp, wr, &bad))
		fail("post_send %llu", (unsigned long long)wr->wr_id);
}

static void atomic(uint64_t id, enum ibv_wr_opcode op, uint32_t off, const struct info *t,
		   uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op };

	wr.wr.atomic.remote_addr = t->addr;
	wr.wr.atomic.rkey = t->rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	post(&wr, off, 8);
}

static void write_window(uint64_t id, uint32_t at, const struct info *t)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = IBV_WR_RDMA_WRITE };

	wr.wr.rdma.remote_addr = t->addr + WIN_OFF + at;
	wr.wr.rdma.rkey = t->mw_rkey;
	post(&wr, 0, 6);
}

static void initiator(int fd)
{
	struct info me = { 0 }, t;

	local_info(&me);
	full(fd, &me, sizeof(me), 1);
	full(fd, &t, sizeof(t), 0);
	bring_up(&t);

	atomic(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, &t, 5, 0);
	expect(poll1("FETCH_AND_ADD"), 1, IBV_WC_SUCCESS, "FETCH_AND_ADD");
	if (word(0) != 1000)
		fail("FETCH_AND_ADD 5 on 1000 returned %llu", (unsigned long long)word(0));
	atomic(2, IBV_WR_ATOMIC_CMP_AND_SWP, 8, &t, 1005, 77);
	expect(poll1("CMP_AND_SWP"), 2, IBV_WC_SUCCESS, "CMP_AND_SWP");
	atomic(3, IBV_WR_ATOMIC_CMP_AND_SWP, 16, &t, 1, 2);
	expect(poll1("CMP_AND_SWP"), 3, IBV_WC_SUCCESS, "CMP_AND_SWP no match");
	if (word(8) != 1005 || word(16) != 77)
		fail("CMP_AND_SWP returned %llu (want 1005), then %llu (want 77)",
		     (unsigned long long)word(8), (unsigned long long)word(16));
	for (int i = 0; i < BURST; i++)
		atomic(100 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, 64 + 8 * i, &t, 1, 0);
	for (int i = 0; i < BURST; i++)
		expect(poll1("burst"), 100 + i, IBV_WC_SUCCESS, "FETCH_AND_ADD burst");
	for (int i = 0; i < BURST; i++)
		if (word(64 + 8 * i) != 77 + (uint64_t)i)
			fail("FETCH_AND_ADD %d of the burst returned %llu, want %d", i,
			     (unsigned long long)word(64 + 8 * i), 77 + i);

	memcpy(buf, "window", 6);
	write_window(4, 0, &t);
	expect(poll1("WRITE through the window"), 4, IBV_WC_SUCCESS, "WRITE through the window");
	memcpy(buf + 512, "invalidate", 10);
	struct ibv_send_wr si = { .wr_id = 5, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = t.mw_rkey };
	post(&si, 512, 10);
	expect(poll1("SEND_WITH_INV"), 5, IBV_WC_SUCCESS, "SEND_WITH_INV");
	write_window(6, 100, &t);
	expect(poll1("WRITE through the invalidated window"), 6, IBV_WC_REM_ACCESS_ERR,
	       "WRITE through the invalidated window");
	full(fd, "done", 4, 1);
}

static void target(int fd)
{
	struct info me = { 0 }, t;
	struct ibv_mw *mw;
	struct ibv_recv_wr rwr = { .wr_id = 9 }, *rbad;
	struct ibv_sge rsge = { (uintptr_t)buf + 2048, 256, 0 };
	char done[4];

	local_info(&me);
	uint64_t start = 1000;

	memcpy(buf, &start, 8);
	full(fd, &t, sizeof(t), 0);
	bring_up(&t);
	rsge.lkey = mr->lkey;
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;
	if (ibv_post_recv(qp, &rwr, &rbad))
		fail("post_recv");
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw)
		fail("alloc_mw type 2");
	struct ibv_send_wr bind = { .wr_id = 50, .opcode = IBV_WR_BIND_MW,
				    .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	bind.bind_mw.mw = mw;
	bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	bind.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = mr, .addr = (uintptr_t)buf + WIN_OFF, .length = WIN_LEN,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE
	};
	if (ibv_post_send(qp, &bind, &bad))
		fail("post bind");
	expect(poll1("bind"), 50, IBV_WC_SUCCESS, "bind of a type 2 window");
	me.mw_rkey = bind.bind_mw.rkey;
	full(fd, &me, sizeof(me), 1);

	struct ibv_wc wc = poll1("SEND_WITH_INV's receive");

	expect(wc, 9, IBV_WC_SUCCESS, "SEND_WITH_INV's receive");
	if (wc.opcode != IBV_WC_RECV || wc.byte_len != 10 || !(wc.wc_flags & inv_flags) ||
	    wc.invalidated_rkey != me.mw_rkey || memcmp(buf + 2048, "invalidate", 10))
		fail("SEND_WITH_INV's receive: opcode %d len %u flags %#x rkey %#x (want %#x)",
		     wc.opcode, wc.byte_len, wc.wc_flags, wc.invalidated_rkey, me.mw_rkey);
	full(fd, done, 4, 0);
	if (word(0) != 77 + BURST)
		fail("the word is %llu after the atomics, want %d", (unsigned long long)word(0),
		     77 + BURST);
	if (memcmp(buf + WIN_OFF, "window", 6))
		fail("the WRITE through the window did not land");
	for (int i = 0; i < 6; i++)
		if (buf[WIN_OFF + 100 + i])
			fail("a WRITE through the invalidated window landed");
}

int main(int argc, char **argv)
{
	int fd, one = 1;

	if (argc < 5 || (strcmp(argv[1], "target") && strcmp(argv[1], "initiator")) ||
	    (!strcmp(argv[1], "initiator") && argc != 6)) {
		fprintf(stderr, "usage: roce_ops_peer target|initiator DEV GID_INDEX PORT [ADDR]\n");
		return 2;
	}
	role = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(60);
	gid_index = atoi(argv[3]);
	open_dev(argv[2]);
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
	printf("roce_ops_peer %s: ok\n", role);
	return 0;
}
