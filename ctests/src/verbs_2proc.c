/*
 * Two processes: one-sided operations complete while the target process
 * makes no verbs call at all (blocked in read(), or spinning on its own
 * memory), as they do on RDMA hardware.
 *
 * The processes fork before either opens the device and swap their QP
 * number, GID and buffer (address, rkey) over a socketpair.
 */
#include "common/verbs_util.c"

#include <sys/socket.h>

struct peer_info {
	uint32_t qpn;
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
};

struct side {
	struct vt_env e;
	struct vt_qp_opts o;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vt_buf buf;
	struct peer_info peer;
};

/* Device, QP and a registered buffer; swaps info with the other process
 * and connects. */
static void side_setup(struct side *s, int fd, size_t len)
{
	struct peer_info me;
	union ibv_gid g;

	vt_env_open(&s->e);
	vt_default_opts(&s->o);
	s->cq = CHECK_PTR(ibv_create_cq(s->e.ctx, 64, NULL, NULL, 0));
	s->qp = vt_create_qp(s->e.pd, s->cq, s->cq, &s->o, NULL);
	vt_buf_reg(&s->e, &s->buf, len, VT_ACCESS_ALL);
	memset(&me, 0, sizeof(me));
	me.qpn = s->qp->qp_num;
	memcpy(me.gid, s->e.gid.raw, 16);
	me.addr = (uintptr_t)s->buf.p;
	me.rkey = s->buf.mr->rkey;
	vt_write_all(fd, &me, sizeof(me));
	vt_read_all(fd, &s->peer, sizeof(s->peer));
	memcpy(g.raw, s->peer.gid, 16);
	vt_qp_connect(s->qp, s->peer.qpn, &g, &s->o);
}

static void expect_byte(int fd, char want)
{
	char c = 0;

	vt_read_all(fd, &c, 1);
	CHECKF(c == want, "got '%c' from the other process, expected '%c'", c,
	       want);
}

static void send_byte(int fd, char c)
{
	vt_write_all(fd, &c, 1);
}

/* Runs `target` in a child process; returns its pid. */
static pid_t spawn(int sv[2], void (*target)(int fd))
{
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		vt_alarm(VT_CASE_SECONDS, "target process");
		target(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	return pid;
}

/* The target must exit 0 within VT_POLL_MS. */
static void reap(pid_t pid)
{
	uint64_t deadline = vt_now_ms() + VT_POLL_MS;
	int status = 0;
	pid_t r;

	while ((r = waitpid(pid, &status, WNOHANG)) == 0 &&
	       vt_now_ms() < deadline) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);	/* polling for the exit, bounded */
	}
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		CHECKF(0, "target process still running after %d ms",
		       VT_POLL_MS);
	}
	CHECK(r == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "target process failed (status 0x%x)", status);
}

static void poll_ok(struct side *s, uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;

	vt_poll(s->cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, op);
	CHECK_EQ(wc.wr_id, wr_id);
	CHECK_EQ(wc.qp_num, s->qp->qp_num);
}

/* ---------------------------------------------------------------------- */

enum {
	BLK_LEN = 64 * 1024,
	W_OFF = 0, W_LEN = 16 * 1024,		/* written by the initiator */
	R_OFF = 32 * 1024, R_LEN = 16 * 1024,	/* read by the initiator */
	CAS_OFF = 48 * 1024, FAA_OFF = 48 * 1024 + 8,
};

static void blocked_target(int fd)
{
	struct side s;

	side_setup(&s, fd, BLK_LEN);
	uint8_t *p = s.buf.p;
	memset(p, 0, BLK_LEN);
	vt_fill(p + R_OFF, R_LEN, 21);
	*(uint64_t *)(void *)(p + CAS_OFF) = 0x1000;
	*(uint64_t *)(void *)(p + FAA_OFF) = 7;
	send_byte(fd, 'R');

	/* No verbs from here until the initiator says it is done. */
	expect_byte(fd, 'D');

	uint8_t *want = vt_alloc(W_LEN);
	vt_fill(want, W_LEN, 22);
	CHECK_MEM(p + W_OFF, want, W_LEN);
	CHECK_BYTES(p + W_OFF + W_LEN, 0, R_OFF - W_LEN);
	vt_fill(want, R_LEN, 21);
	CHECK_MEM(p + R_OFF, want, R_LEN);
	CHECK_EQ(*(uint64_t *)(void *)(p + CAS_OFF), 0x2000);
	CHECK_EQ(*(uint64_t *)(void *)(p + FAA_OFF), 17);
	CHECK_BYTES(p + FAA_OFF + 8, 0, BLK_LEN - FAA_OFF - 8);
	send_byte(fd, 'V');
}

static void target_blocked_in_read(void)
{
	int sv[2];
	pid_t pid = spawn(sv, blocked_target);
	int fd = sv[0];
	struct side s;

	side_setup(&s, fd, BLK_LEN);
	expect_byte(fd, 'R');
	uint8_t *l = s.buf.p;
	uint64_t raddr = s.peer.addr;
	uint32_t rkey = s.peer.rkey;

	vt_fill(l, W_LEN, 22);
	struct ibv_sge sge = vt_sge(l, W_LEN, s.buf.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = raddr + W_OFF;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(s.qp, &wr);
	poll_ok(&s, 1, IBV_WC_RDMA_WRITE);

	memset(l + R_OFF, 0xee, R_LEN);
	sge = vt_sge(l + R_OFF, R_LEN, s.buf.mr->lkey);
	wr = vt_send_wr(2, IBV_WR_RDMA_READ, &sge, IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = raddr + R_OFF;
	wr.wr.rdma.rkey = rkey;
	vt_post_send(s.qp, &wr);
	poll_ok(&s, 2, IBV_WC_RDMA_READ);
	uint8_t *want = vt_alloc(R_LEN);
	vt_fill(want, R_LEN, 21);
	CHECK_MEM(l + R_OFF, want, R_LEN);

	uint64_t *res = (uint64_t *)(void *)(l + CAS_OFF);
	sge = vt_sge(res, 8, s.buf.mr->lkey);
	wr = vt_send_wr(3, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, IBV_SEND_SIGNALED);
	wr.wr.atomic.remote_addr = raddr + CAS_OFF;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = 0x1000;
	wr.wr.atomic.swap = 0x2000;
	vt_post_send(s.qp, &wr);
	poll_ok(&s, 3, IBV_WC_COMP_SWAP);
	CHECK_EQ(*res, 0x1000);

	for (int i = 0; i < 2; i++) {
		sge = vt_sge(res, 8, s.buf.mr->lkey);
		wr = vt_send_wr(4 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge,
				IBV_SEND_SIGNALED);
		wr.wr.atomic.remote_addr = raddr + FAA_OFF;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
		vt_post_send(s.qp, &wr);
		poll_ok(&s, 4 + i, IBV_WC_FETCH_ADD);
		CHECK_EQ(*res, 7 + 5 * (uint64_t)i);
	}

	send_byte(fd, 'D');
	expect_byte(fd, 'V');
	reap(pid);
}

/* ---------------------------------------------------------------------- */

enum { SPIN_LEN = 8192, SPIN_DATA = 4096, SPIN_FLAG = 4096 };

static void spinning_target(int fd)
{
	struct side s;

	side_setup(&s, fd, SPIN_LEN);
	volatile uint8_t *flag = s.buf.p + SPIN_FLAG;
	memset(s.buf.p, 0, SPIN_LEN);
	send_byte(fd, 'R');

	/* Spin on our own memory: no verbs, no system calls but the clock. */
	uint64_t deadline = vt_now_ms() + VT_POLL_MS;
	while (*flag != 0x7f) {
		CHECKF(vt_now_ms() < deadline,
		       "flag not written within %d ms", VT_POLL_MS);
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	/* Written by an earlier WRITE on the same QP: already in place. */
	uint8_t *want = vt_alloc(SPIN_DATA);
	vt_fill(want, SPIN_DATA, 23);
	CHECK_MEM(s.buf.p, want, SPIN_DATA);
	send_byte(fd, 'V');
}

static void target_spinning(void)
{
	int sv[2];
	pid_t pid = spawn(sv, spinning_target);
	int fd = sv[0];
	struct side s;

	side_setup(&s, fd, SPIN_LEN);
	expect_byte(fd, 'R');
	vt_fill(s.buf.p, SPIN_DATA, 23);
	s.buf.p[SPIN_FLAG] = 0x7f;

	struct ibv_sge sge[2] = {
		vt_sge(s.buf.p, SPIN_DATA, s.buf.mr->lkey),
		vt_sge(s.buf.p + SPIN_FLAG, 1, s.buf.mr->lkey),
	};
	struct ibv_send_wr wr[2] = {
		vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge[0], 0),
		vt_send_wr(2, IBV_WR_RDMA_WRITE, &sge[1], IBV_SEND_SIGNALED),
	};
	wr[0].wr.rdma.remote_addr = s.peer.addr;
	wr[0].wr.rdma.rkey = s.peer.rkey;
	wr[1].wr.rdma.remote_addr = s.peer.addr + SPIN_FLAG;
	wr[1].wr.rdma.rkey = s.peer.rkey;
	wr[0].next = &wr[1];
	vt_post_send(s.qp, wr);
	poll_ok(&s, 2, IBV_WC_RDMA_WRITE);
	expect_byte(fd, 'V');
	reap(pid);
}

/* ---------------------------------------------------------------------- */

/* SEND between processes; the receiver waits in ibv_get_cq_event. */
static void channel_receiver(int fd)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct peer_info me, peer;
	union ibv_gid g;
	struct vt_buf r;
	struct ibv_wc wc;
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	vt_env_open(&e);
	vt_default_opts(&o);
	struct ibv_comp_channel *ch = CHECK_PTR(ibv_create_comp_channel(e.ctx));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, &r, ch, 0));
	struct ibv_qp *qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	memset(&me, 0, sizeof(me));
	me.qpn = qp->qp_num;
	memcpy(me.gid, e.gid.raw, 16);
	vt_write_all(fd, &me, sizeof(me));
	vt_read_all(fd, &peer, sizeof(peer));
	memcpy(g.raw, peer.gid, 16);
	vt_qp_connect(qp, peer.qpn, &g, &o);
	vt_post_recv(qp, 9, r.p, 4096, r.mr->lkey);
	CHECK_OK(ibv_req_notify_cq(cq, 0));
	send_byte(fd, 'R');

	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_cq_event (receiver)");
	CHECK_OK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx));
	vt_alarm(VT_CASE_SECONDS, "target process");
	CHECK(ev_cq == cq);
	CHECK(ev_ctx == &r);
	ibv_ack_cq_events(ev_cq, 1);
	vt_poll(cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 9);
	CHECK_EQ(wc.byte_len, 1234);
	CHECK_EQ(wc.src_qp, peer.qpn);
	CHECKF(wc.wc_flags & IBV_WC_WITH_IMM, "wc_flags 0x%x", wc.wc_flags);
	CHECK_EQ(ntohl(wc.imm_data), 0xfeedbeef);
	uint8_t *want = vt_alloc(1234);
	vt_fill(want, 1234, 24);
	CHECK_MEM(r.p, want, 1234);
	send_byte(fd, 'V');
}

static void send_to_waiting_process(void)
{
	int sv[2];
	pid_t pid = spawn(sv, channel_receiver);
	int fd = sv[0];
	struct side s;

	side_setup(&s, fd, 4096);
	expect_byte(fd, 'R');
	vt_fill(s.buf.p, 1234, 24);
	struct ibv_sge sge = vt_sge(s.buf.p, 1234, s.buf.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_SEND_WITH_IMM, &sge,
					   IBV_SEND_SIGNALED);
	wr.imm_data = htonl(0xfeedbeef);
	vt_post_send(s.qp, &wr);
	poll_ok(&s, 1, IBV_WC_SEND);
	expect_byte(fd, 'V');
	reap(pid);
}

/* ---------------------------------------------------------------------- */

enum { BURST = 48, BURST_LEN = 8 };

/* Receives the burst in order, byte for byte, and says so. */
static void burst_receiver(int fd)
{
	struct side s;
	struct ibv_wc wc;

	side_setup(&s, fd, BURST * BURST_LEN);
	for (int i = 0; i < BURST; i++)
		vt_post_recv(s.qp, 100 + i, s.buf.p + i * BURST_LEN, BURST_LEN,
			     s.buf.mr->lkey);
	send_byte(fd, 'R');
	for (int i = 0; i < BURST; i++) {
		vt_poll(s.cq, &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.wr_id, 100 + i);
		CHECK_EQ(wc.byte_len, BURST_LEN);
		uint8_t want[BURST_LEN];
		vt_fill(want, BURST_LEN, 40 + i);
		CHECK_MEM(s.buf.p + i * BURST_LEN, want, BURST_LEN);
	}
	send_byte(fd, 'V');
	/* As a program ends (atexit runs): over TCP the ACK of the last SEND
	 * may still be owed, waiting for a request of ours to carry it; an
	 * _exit right after the last poll would lose it (README, limits). */
	exit(0);
}

/* A burst posted into a full pipe (which the requester may hold back for
 * the program's next posts or poll) reaches the peer while the sender
 * never polls its CQ; polled afterwards, every SEND completes in order. */
static void burst_without_polling(void)
{
	int sv[2];
	pid_t pid = spawn(sv, burst_receiver);
	int fd = sv[0];
	struct side s;

	side_setup(&s, fd, BURST * BURST_LEN);
	expect_byte(fd, 'R');
	for (int i = 0; i < BURST; i++) {
		uint8_t *p = s.buf.p + i * BURST_LEN;

		vt_fill(p, BURST_LEN, 40 + i);
		struct ibv_sge sge = vt_sge(p, BURST_LEN, s.buf.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(i, IBV_WR_SEND, &sge,
						   IBV_SEND_SIGNALED);
		vt_post_send(s.qp, &wr);
	}
	expect_byte(fd, 'V');
	for (int i = 0; i < BURST; i++)
		poll_ok(&s, i, IBV_WC_SEND);
	reap(pid);
}

/* ---------------------------------------------------------------------- */

enum { PP_ROUNDS = 400, PP_LEN = 256, PP_IN = 0, PP_OUT = 4096, PP_BUF = 8192 };

/* Round r's bytes from the parent (seed r) or the child (seed 5000 + r),
 * ending in r itself: the word the other side spins on. */
static void pp_fill(uint8_t *p, uint32_t seed, uint32_t r)
{
	vt_fill(p, PP_LEN - 4, seed);
	memcpy(p + PP_LEN - 4, &r, 4);
}

/* Spins on our own memory until round r's word lands, then checks every
 * byte; no verbs call while waiting. */
static void pp_await(struct side *s, uint32_t seed, uint32_t r)
{
	volatile uint32_t *word = (volatile uint32_t *)(s->buf.p + PP_IN +
							PP_LEN - 4);
	uint64_t deadline = vt_now_ms() + VT_POLL_MS;

	while (*word != r)
		CHECKF(vt_now_ms() < deadline, "round %u not written within %d ms (word %u)",
		       r, VT_POLL_MS, *word);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	uint8_t want[PP_LEN];
	pp_fill(want, seed, r);
	CHECK_MEM(s->buf.p + PP_IN, want, PP_LEN);
}

static void pp_write(struct side *s, uint32_t seed, uint32_t r)
{
	pp_fill(s->buf.p + PP_OUT, seed, r);
	struct ibv_sge sge = vt_sge(s->buf.p + PP_OUT, PP_LEN, s->buf.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(r, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = s->peer.addr + PP_IN;
	wr.wr.rdma.rkey = s->peer.rkey;
	vt_post_send(s->qp, &wr);
	poll_ok(s, r, IBV_WC_RDMA_WRITE);
}

/* Answers each of the parent's WRITEs with one of its own; on sight of
 * the last one it ends at once, answering nothing. */
static void pp_child(int fd)
{
	struct side s;

	side_setup(&s, fd, PP_BUF);
	memset(s.buf.p, 0, PP_BUF);
	send_byte(fd, 'R');
	for (uint32_t r = 1; r <= PP_ROUNDS; r++) {
		pp_await(&s, r, r);
		if (r == PP_ROUNDS)
			exit(0);
		pp_write(&s, 5000 + r, r);
	}
}

/* A WRITE ping-pong where each side waits on its memory, as ib_write_lat
 * does: every byte of every round arrives, every WRITE completes
 * successfully in order, the last one too, although the target ends
 * (by exit) the moment it sees that one's bytes. Over TCP the target's
 * ACKs ride on its answers (README): this is where one could be lost. */
static void write_ping_pong(void)
{
	int sv[2];
	pid_t pid = spawn(sv, pp_child);
	int fd = sv[0];
	struct side s;

	side_setup(&s, fd, PP_BUF);
	memset(s.buf.p, 0, PP_BUF);
	expect_byte(fd, 'R');
	for (uint32_t r = 1; r <= PP_ROUNDS; r++) {
		pp_write(&s, r, r);
		if (r < PP_ROUNDS)
			pp_await(&s, 5000 + r, r);
	}
	reap(pid);
}

static const struct vt_case cases[] = {
	VT_CASE(target_blocked_in_read),
	VT_CASE(target_spinning),
	VT_CASE(send_to_waiting_process),
	VT_CASE(burst_without_polling),
	VT_CASE(write_ping_pong),
};
VT_MAIN(cases)
