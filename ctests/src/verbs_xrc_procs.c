/*
 * XRC domains shared between processes: a domain opened by file is the
 * file's in every process of the host (EAGAIN without O_CREAT when no
 * process has it, EINVAL with O_EXCL when another has it); an XRC receive
 * QP of one process delivers SENDs into another process's XRC SRQ (its
 * receive, its memory checked against its keys, its CQ, with the receive
 * QP's number; RNR while it has none; its eventfd rung for a waiting
 * owner); a resized SRQ is refused; SRQ numbers
 * are unique across the processes; ibv_open_qp finds another process's
 * receive QP; a destroyed or dead process's SRQ is an invalid request.
 *
 * The case's own process ("A") holds the XRC receive and send QPs; the
 * SRQ owners ("B") are forked children that open the device themselves
 * and talk to A over a socketpair.
 */
#include "common/verbs_util.c"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define SEED 8
#define NRECV 4
#define SRC_LEN 65536
/* Each receive: two SGEs of SGE_LEN bytes. */
#define SGE_LEN 20000
#define RECV_LEN (2 * SGE_LEN)

/* RSW_TRANSPORT=tcp turns rsw's same-host path off, and with it delivery
 * into another process's SRQ: a SEND naming one is refused as an invalid
 * request (README). */
static int same_host_path(void)
{
	const char *t = getenv("RSW_TRANSPORT");

	return !t || strcmp(t, "tcp") != 0;
}

static struct ibv_srq *xrc_srq(struct vt_env *e, struct ibv_xrcd *xrcd,
			       struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 16;
	a.attr.max_sge = 2;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
		      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = xrcd;
	a.cq = cq;
	a.pd = e->pd;
	return CHECK_PTR(ibv_create_srq_ex(e->ctx, &a));
}

/* A temporary file naming a domain (removed from the directory at once:
 * the domain is named by the inode, which the open descriptors keep). */
static int domain_file(void)
{
	char path[] = "/tmp/rsw-xrcx-XXXXXX";
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	unlink(path);
	return fd;
}

static void send_byte(int fd, char c)
{
	vt_write_all(fd, &c, 1);
}

static void expect_byte(int fd, char want)
{
	char c = 0;

	vt_read_all(fd, &c, 1);
	CHECKF(c == want, "got '%c' from the other process, expected '%c'", c,
	       want);
}

/* Runs `child(sock, dfd)` in a forked process (which inherits the domain
 * file's descriptor); returns its pid and our end of the socketpair. */
static pid_t spawn(int *sock, int dfd, void (*child)(int fd, int dfd))
{
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		vt_alarm(VT_CASE_SECONDS, "SRQ owner process");
		child(sv[1], dfd);
		_exit(0);
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

/* The child must exit 0. */
static void reap(pid_t pid)
{
	int status = 0;

	vt_alarm(VT_POLL_MS / 1000 + 1, "waiting for the SRQ owner to exit");
	CHECK(waitpid(pid, &status, 0) == pid);
	vt_alarm(VT_CASE_SECONDS, NULL);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "SRQ owner process failed (status 0x%x)", status);
}

/* What A tells an SRQ owner about the messages sent to it. */
struct sent {
	uint32_t tgt_qpn, ini_qpn;
};

/* A's side: the receive QP and the send QP, connected. */
struct sender {
	struct vt_env e;
	struct ibv_xrcd *xrcd;
	struct ibv_cq *scq;
	struct ibv_qp *tgt, *ini;
	struct vt_buf s;
};

static void sender_open(struct sender *a, int dfd, int oflags)
{
	struct ibv_qp_init_attr_ex q;

	vt_env_open(&a->e);
	a->xrcd = CHECK_PTR(vt_open_xrcd(a->e.ctx, dfd, oflags));
	a->scq = CHECK_PTR(ibv_create_cq(a->e.ctx, 32, NULL, NULL, 0));
	memset(&q, 0, sizeof(q));
	q.qp_type = IBV_QPT_XRC_RECV;
	q.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	q.xrcd = a->xrcd;
	a->tgt = CHECK_PTR(ibv_create_qp_ex(a->e.ctx, &q));
	memset(&q, 0, sizeof(q));
	q.qp_type = IBV_QPT_XRC_SEND;
	q.send_cq = a->scq;
	q.cap.max_send_wr = 16;
	q.cap.max_send_sge = 1;
	q.comp_mask = IBV_QP_INIT_ATTR_PD;
	q.pd = a->e.pd;
	a->ini = CHECK_PTR(ibv_create_qp_ex(a->e.ctx, &q));
	vt_xrc_modify(a->tgt, a->ini->qp_num, &a->e, 1);
	vt_xrc_modify(a->ini, a->tgt->qp_num, &a->e, 0);
	vt_buf_reg(&a->e, &a->s, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(a->s.p, SRC_LEN, SEED);
}

static void xsend(struct sender *a, uint64_t id, uint32_t srqn, size_t off,
		  uint32_t len, int imm)
{
	struct ibv_sge sge = vt_sge(a->s.p + off, len, a->s.mr->lkey);
	struct ibv_send_wr w =
		vt_send_wr(id, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, &sge,
			   IBV_SEND_SIGNALED);

	w.qp_type.xrc.remote_srqn = srqn;
	w.imm_data = htobe32(0x5100 + (uint32_t)id);
	vt_post_send(a->ini, &w);
}

static void xsend_ok(struct sender *a, uint64_t id, uint32_t srqn, size_t off,
		     uint32_t len, int imm)
{
	struct ibv_wc wc;

	xsend(a, id, srqn, off, len, imm);
	vt_poll(a->scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, id);
}

/* The messages A sends an SRQ owner: (source offset, length, imm). A
 * message may span both SGEs of its receive. */
static const struct {
	uint32_t off, len;
	int imm;
} msgs[NRECV] = {
	{ 0, 300, 0 }, { 512, 200, 1 }, { 1000, 30000, 1 }, { 40000, 8, 0 },
};

/* B's side: the domain, an XRC SRQ with its CQ and posted receives. */
struct owner {
	struct vt_env e;
	struct ibv_xrcd *xrcd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint32_t srqn;
	struct vt_buf r;
};

static void owner_open(struct owner *b, int dfd, int oflags, int channel)
{
	vt_env_open(&b->e);
	b->xrcd = CHECK_PTR(vt_open_xrcd(b->e.ctx, dfd, oflags));
	b->ch = channel ? CHECK_PTR(ibv_create_comp_channel(b->e.ctx)) : NULL;
	b->cq = CHECK_PTR(ibv_create_cq(b->e.ctx, 32, NULL, b->ch, 0));
	b->srq = xrc_srq(&b->e, b->xrcd, b->cq);
	CHECK_OK(ibv_get_srq_num(b->srq, &b->srqn));
	vt_buf_reg(&b->e, &b->r, NRECV * RECV_LEN, IBV_ACCESS_LOCAL_WRITE);
}

static void owner_post(struct owner *b, int i)
{
	struct ibv_sge sge[2] = {
		vt_sge(b->r.p + i * RECV_LEN, SGE_LEN, b->r.mr->lkey),
		vt_sge(b->r.p + i * RECV_LEN + SGE_LEN, SGE_LEN, b->r.mr->lkey),
	};
	struct ibv_recv_wr w = { .wr_id = 100 + i, .sg_list = sge, .num_sge = 2 };
	struct ibv_recv_wr *bad;

	CHECK_OK(ibv_post_srq_recv(b->srq, &w, &bad));
}

/* Receive i's completion and bytes, as A sent them. */
static void owner_check(struct owner *b, const struct ibv_wc *wc, int i,
			const struct sent *s)
{
	uint8_t *want = vt_alloc(SRC_LEN);

	vt_fill(want, SRC_LEN, SEED);
	CHECK_WC(wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc->wr_id, 100 + i);
	CHECK_EQ(wc->byte_len, msgs[i].len);
	CHECK_EQ(wc->qp_num, s->tgt_qpn);
	CHECK_EQ(wc->src_qp, s->ini_qpn);
	if (msgs[i].imm) {
		CHECK(wc->wc_flags & IBV_WC_WITH_IMM);
		CHECK_EQ(be32toh(wc->imm_data), 0x5100 + 100 + i);
	} else {
		CHECK(!(wc->wc_flags & IBV_WC_WITH_IMM));
	}
	CHECK_MEM(b->r.p + i * RECV_LEN, want + msgs[i].off, msgs[i].len);
	/* Nothing past the message was written. */
	CHECK_BYTES(b->r.p + i * RECV_LEN + msgs[i].len, 0,
		    RECV_LEN - msgs[i].len);
}

/* ---------------------------------------------------------------------- */

/*
 * B makes the domain, an XRC SRQ and receives; A, another process, opens
 * the same file without O_CREAT and its XRC receive QP delivers into B's
 * SRQ. B also opens A's receive QP by number. Then B destroys the SRQ and
 * A's next SEND to its number is an invalid request.
 */
static void delivering_owner(int fd, int dfd)
{
	struct owner b;
	struct sent s;
	struct ibv_wc wc;

	owner_open(&b, dfd, O_CREAT, 0);
	for (int i = 0; i < NRECV; i++)
		owner_post(&b, i);
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	vt_read_all(fd, &s, sizeof(s));
	for (int i = 0; i < NRECV && same_host_path(); i++) {
		vt_poll(b.cq, &wc, 1);
		owner_check(&b, &wc, i, &s);
	}
	CHECK_CQ_EMPTY(b.cq);

	/* A's receive QP, opened here: query works, modify is refused,
	 * destroy closes the handle only. */
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			     IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = s.tgt_qpn ^ 0x4000, .xrcd = b.xrcd,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	CHECK_NULL_ERRNO(ibv_open_qp(b.e.ctx, &oa), EINVAL);
	oa.qp_num = s.tgt_qpn;
	struct ibv_qp *h = CHECK_PTR(ibv_open_qp(b.e.ctx, &oa));
	CHECK_EQ(h->qp_num, s.tgt_qpn);
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
	/* (Over TCP only, A's refused SEND moved it to ERR.) */
	CHECK_EQ(at.qp_state, same_host_path() ? IBV_QPS_RTS : IBV_QPS_ERR);
	CHECK_EQ(ia.qp_type, IBV_QPT_XRC_RECV);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_ERR;
	CHECK_RET(ibv_modify_qp(h, &at, IBV_QP_STATE), EOPNOTSUPP);
	CHECK_OK(ibv_destroy_qp(h));

	/* The SRQ goes; its number is then no SRQ of the domain. */
	owner_post(&b, 0);
	CHECK_OK(ibv_destroy_srq(b.srq));
	send_byte(fd, 'd');
	expect_byte(fd, 'q');
}

static void xrc_srq_of_another_process(void)
{
	struct sender a;
	struct sent s;
	struct ibv_wc wc;
	uint32_t srqn;
	int sock, dfd = domain_file();

	pid_t pid = spawn(&sock, dfd, delivering_owner);
	vt_read_all(sock, &srqn, sizeof(srqn));
	/* B has the domain: no O_CREAT needed. */
	sender_open(&a, dfd, 0);
	for (int i = 0; i < NRECV && same_host_path(); i++)
		xsend_ok(&a, 100 + i, srqn, msgs[i].off, msgs[i].len,
			 msgs[i].imm);
	if (!same_host_path()) {
		xsend(&a, 100, srqn, 0, 64, 0);
		vt_poll(a.scq, &wc, 1);
		CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
	}
	s.tgt_qpn = a.tgt->qp_num;
	s.ini_qpn = a.ini->qp_num;
	vt_write_all(sock, &s, sizeof(s));
	expect_byte(sock, 'd');
	if (same_host_path()) {
		xsend(&a, 200, srqn, 0, 64, 0);
		vt_poll(a.scq, &wc, 1);
		CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
		CHECK_EQ(wc.wr_id, 200);
	}
	send_byte(sock, 'q');
	reap(pid);
	close(sock);
}

/* ---------------------------------------------------------------------- */

/*
 * B's SRQ has no receive when A's SEND arrives: the SEND waits (RNR) until
 * B posts one. B waits for the completion in ibv_get_cq_event: A's
 * delivery rings it.
 */
static void waiting_owner(int fd, int dfd)
{
	struct owner b;
	struct sent s;
	struct ibv_wc wc;
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	owner_open(&b, dfd, O_CREAT, 1);
	CHECK_OK(ibv_req_notify_cq(b.cq, 0));
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	vt_read_all(fd, &s, sizeof(s));
	if (!same_host_path()) {
		send_byte(fd, 'k');
		return;
	}
	owner_post(&b, 2);
	vt_alarm(VT_POLL_MS / 1000, "blocking ibv_get_cq_event (SRQ owner)");
	CHECK_OK(ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx));
	vt_alarm(VT_CASE_SECONDS, "SRQ owner process");
	CHECK(ev_cq == b.cq);
	ibv_ack_cq_events(b.cq, 1);
	CHECK_EQ(ibv_poll_cq(b.cq, 1, &wc), 1);
	owner_check(&b, &wc, 2, &s);
	send_byte(fd, 'k');
}

static void xrc_rnr_and_event_across_processes(void)
{
	struct sender a;
	struct sent s;
	struct ibv_wc wc;
	uint32_t srqn;
	int sock, dfd = domain_file();

	pid_t pid = spawn(&sock, dfd, waiting_owner);
	vt_read_all(sock, &srqn, sizeof(srqn));
	sender_open(&a, dfd, 0);
	xsend(&a, 102, srqn, msgs[2].off, msgs[2].len, msgs[2].imm);
	s.tgt_qpn = a.tgt->qp_num;
	s.ini_qpn = a.ini->qp_num;
	if (!same_host_path()) {
		vt_poll(a.scq, &wc, 1);
		CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
		vt_write_all(sock, &s, sizeof(s));
		expect_byte(sock, 'k');
		reap(pid);
		close(sock);
		return;
	}
	/* No receive yet: the SEND does not complete. */
	CHECK_NO_WC_FOR(a.scq, 50);
	vt_write_all(sock, &s, sizeof(s));
	vt_poll(a.scq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 102);
	expect_byte(sock, 'k');
	reap(pid);
	close(sock);
}

/* ---------------------------------------------------------------------- */

/* ibv_open_xrcd's errno values answer for every process of the host. */
static void opener(int fd, int dfd)
{
	struct vt_env e;

	vt_env_open(&e);
	/* No process has the file's domain. */
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, dfd, 0), EAGAIN);
	send_byte(fd, '1');
	expect_byte(fd, '2');
	/* A has it now: O_EXCL refuses, plain opening joins. */
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, dfd, O_CREAT | O_EXCL), EINVAL);
	struct ibv_xrcd *x = CHECK_PTR(vt_open_xrcd(e.ctx, dfd, 0));
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 4, NULL, NULL, 0));
	struct ibv_srq *srq = xrc_srq(&e, x, cq);
	uint32_t n;
	CHECK_OK(ibv_get_srq_num(srq, &n));
	vt_write_all(fd, &n, sizeof(n));
	expect_byte(fd, '3');
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_close_xrcd(x));
	send_byte(fd, '4');
	expect_byte(fd, '5');
	/* Every process closed it: gone. */
	CHECK_NULL_ERRNO(vt_open_xrcd(e.ctx, dfd, 0), EAGAIN);
	struct ibv_xrcd *y = CHECK_PTR(vt_open_xrcd(e.ctx, dfd, O_CREAT | O_EXCL));
	CHECK_OK(ibv_close_xrcd(y));
	send_byte(fd, '6');
}

static void xrcd_errno_across_processes(void)
{
	struct vt_env e;
	uint32_t theirs, mine;
	int sock, dfd = domain_file();

	vt_env_open(&e);
	pid_t pid = spawn(&sock, dfd, opener);
	expect_byte(sock, '1');
	struct ibv_xrcd *x = CHECK_PTR(vt_open_xrcd(e.ctx, dfd, O_CREAT | O_EXCL));
	send_byte(sock, '2');
	vt_read_all(sock, &theirs, sizeof(theirs));
	/* SRQ numbers are the domain's: ours differs from B's. */
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 4, NULL, NULL, 0));
	struct ibv_srq *srq = xrc_srq(&e, x, cq);
	CHECK_OK(ibv_get_srq_num(srq, &mine));
	CHECKF(mine != theirs, "both processes' SRQs are number %#x", mine);
	send_byte(sock, '3');
	expect_byte(sock, '4');
	/* B left; A still has the domain. */
	struct ibv_xrcd *x2 = CHECK_PTR(vt_open_xrcd(e.ctx, dfd, 0));
	CHECK_OK(ibv_close_xrcd(x2));
	CHECK_OK(ibv_destroy_srq(srq));
	CHECK_OK(ibv_close_xrcd(x));
	send_byte(sock, '5');
	expect_byte(sock, '6');
	reap(pid);
	close(sock);
}

/* ---------------------------------------------------------------------- */

/* An SRQ owner that waits to be killed (or told to check receive 1). */
static void killed_owner(int fd, int dfd)
{
	struct owner b;
	struct sent s;
	struct ibv_wc wc;

	owner_open(&b, dfd, O_CREAT, 0);
	for (int i = 0; i < NRECV; i++)
		owner_post(&b, i);
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	vt_read_all(fd, &s, sizeof(s));
	if (same_host_path()) {
		vt_poll(b.cq, &wc, 1);
		owner_check(&b, &wc, 0, &s);
	}
	send_byte(fd, 'k');
	/* Killed here (or told to go). */
	expect_byte(fd, 'q');
}

/*
 * Two SRQ owners; one is killed without closing anything. The domain and
 * the other owner's SRQ keep working for A, and the dead owner's SRQ
 * number is an invalid request.
 */
static void xrc_owner_killed(void)
{
	struct sender a;
	struct sent s;
	struct ibv_wc wc;
	uint32_t n1, n2;
	int sock1, sock2, dfd = domain_file();

	pid_t p1 = spawn(&sock1, dfd, killed_owner);
	vt_read_all(sock1, &n1, sizeof(n1));
	pid_t p2 = spawn(&sock2, dfd, killed_owner);
	vt_read_all(sock2, &n2, sizeof(n2));
	CHECK(n1 != n2);
	sender_open(&a, dfd, 0);
	s.tgt_qpn = a.tgt->qp_num;
	s.ini_qpn = a.ini->qp_num;
	if (same_host_path())
		xsend_ok(&a, 100, n1, msgs[0].off, msgs[0].len, msgs[0].imm);
	vt_write_all(sock1, &s, sizeof(s));
	expect_byte(sock1, 'k');
	CHECK(kill(p1, SIGKILL) == 0);
	int status;
	CHECK(waitpid(p1, &status, 0) == p1);
	CHECK(WIFSIGNALED(status));
	close(sock1);

	/* The other owner's SRQ still receives. */
	if (same_host_path())
		xsend_ok(&a, 100, n2, msgs[0].off, msgs[0].len, msgs[0].imm);
	vt_write_all(sock2, &s, sizeof(s));
	expect_byte(sock2, 'k');
	/* A opens the domain again without O_CREAT: it is still there. */
	struct ibv_xrcd *again = CHECK_PTR(vt_open_xrcd(a.e.ctx, dfd, 0));
	CHECK_OK(ibv_close_xrcd(again));
	/* The dead owner's SRQ is absent. */
	xsend(&a, 300, n1, 0, 16, 0);
	vt_poll(a.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
	send_byte(sock2, 'q');
	reap(p2);
	close(sock2);
}

/* ---------------------------------------------------------------------- */

/* An SRQ resized with ibv_modify_srq keeps its receives to itself (README):
 * another process's SEND naming it is an invalid request. */
static void resizing_owner(int fd, int dfd)
{
	struct owner b;
	struct ibv_srq_attr at = { .max_wr = 32 };

	owner_open(&b, dfd, O_CREAT, 0);
	owner_post(&b, 0);
	CHECK_OK(ibv_modify_srq(b.srq, &at, IBV_SRQ_MAX_WR));
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	expect_byte(fd, 'q');
	CHECK_CQ_EMPTY(b.cq);
}

static void xrc_resized_srq_refused(void)
{
	struct sender a;
	struct ibv_wc wc;
	uint32_t srqn;
	int sock, dfd = domain_file();

	pid_t pid = spawn(&sock, dfd, resizing_owner);
	vt_read_all(sock, &srqn, sizeof(srqn));
	sender_open(&a, dfd, 0);
	xsend(&a, 400, srqn, 0, 64, 0);
	vt_poll(a.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
	send_byte(sock, 'q');
	reap(pid);
	close(sock);
}

/* ---------------------------------------------------------------------- */

/* The owner's receive names memory of another PD than the SRQ's: checked
 * against the owner's keys, it completes there with a protection error,
 * and the sender learns of a remote operation error. */
static void bad_key_owner(int fd, int dfd)
{
	struct owner b;
	struct sent s;
	struct ibv_wc wc;

	owner_open(&b, dfd, O_CREAT, 0);
	struct ibv_pd *pd2 = CHECK_PTR(ibv_alloc_pd(b.e.ctx));
	void *p = vt_alloc(4096);
	struct ibv_mr *mr = CHECK_PTR(
		ibv_reg_mr(pd2, p, 4096, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_sge sge = vt_sge(p, 4096, mr->lkey);
	struct ibv_recv_wr w = { .wr_id = 77, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	CHECK_OK(ibv_post_srq_recv(b.srq, &w, &bad));
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	vt_read_all(fd, &s, sizeof(s));
	vt_poll(b.cq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.qp_num, s.tgt_qpn);
	CHECK_BYTES(p, 0, 4096);
	send_byte(fd, 'k');
	vt_read_all(fd, &s, sizeof(s));

	/* A buffer registered, then unmapped: the copy into it fails, the
	 * receive completes with a protection error, the sender is told. */
	void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED);
	struct ibv_mr *gmr = CHECK_PTR(
		ibv_reg_mr(b.e.pd, gone, 8192, IBV_ACCESS_LOCAL_WRITE));
	CHECK(munmap(gone, 8192) == 0);
	sge = vt_sge(gone, 8192, gmr->lkey);
	w.wr_id = 78;
	CHECK_OK(ibv_post_srq_recv(b.srq, &w, &bad));
	vt_write_all(fd, &b.srqn, sizeof(b.srqn));
	vt_poll(b.cq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(wc.wr_id, 78);
	CHECK_EQ(wc.qp_num, s.tgt_qpn);
	send_byte(fd, 'u');
}

static void xrc_owner_keys_checked(void)
{
	struct sender a;
	struct sent s;
	struct ibv_wc wc;
	uint32_t srqn;
	int sock, dfd = domain_file();

	if (!same_host_path())
		return;
	pid_t pid = spawn(&sock, dfd, bad_key_owner);
	vt_read_all(sock, &srqn, sizeof(srqn));
	sender_open(&a, dfd, 0);
	s.tgt_qpn = a.tgt->qp_num;
	s.ini_qpn = a.ini->qp_num;
	xsend(&a, 500, srqn, 0, 100, 0);
	vt_poll(a.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_OP_ERR);
	vt_write_all(sock, &s, sizeof(s));
	expect_byte(sock, 'k');
	/* (The failure moved both QPs to ERR: a fresh pair.) */
	struct sender a2;
	sender_open(&a2, dfd, 0);
	s.tgt_qpn = a2.tgt->qp_num;
	s.ini_qpn = a2.ini->qp_num;
	vt_write_all(sock, &s, sizeof(s));
	vt_read_all(sock, &srqn, sizeof(srqn));
	xsend(&a2, 501, srqn, 0, 5000, 0);
	vt_poll(a2.scq, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_OP_ERR);
	expect_byte(sock, 'u');
	reap(pid);
	close(sock);
}

/* ---------------------------------------------------------------------- */

/* Two domains named by two files in one process: each receive QP delivers
 * into its own domain's SRQ, whatever numbers the domains gave them. */
static void xrc_two_named_domains_in_one_process(void)
{
	struct sender a[2];
	struct ibv_cq *cq[2];
	struct ibv_srq *srq[2];
	struct vt_buf r[2];
	uint32_t n[2];
	struct ibv_wc wc;

	for (int i = 0; i < 2; i++) {
		sender_open(&a[i], domain_file(), O_CREAT);
		cq[i] = CHECK_PTR(ibv_create_cq(a[i].e.ctx, 8, NULL, NULL, 0));
		srq[i] = xrc_srq(&a[i].e, a[i].xrcd, cq[i]);
		CHECK_OK(ibv_get_srq_num(srq[i], &n[i]));
		vt_buf_reg(&a[i].e, &r[i], 4096, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = vt_sge(r[i].p, 4096, r[i].mr->lkey);
		struct ibv_recv_wr w = { .wr_id = 10 + i, .sg_list = &sge,
					 .num_sge = 1 };
		struct ibv_recv_wr *bad;
		CHECK_OK(ibv_post_srq_recv(srq[i], &w, &bad));
	}
	for (int i = 0; i < 2; i++) {
		xsend_ok(&a[i], 20 + i, n[i], 100 * i, 64 + i, 0);
		vt_poll(cq[i], &wc, 1);
		CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(wc.wr_id, 10 + i);
		CHECK_EQ(wc.byte_len, 64 + i);
		CHECK_EQ(wc.qp_num, a[i].tgt->qp_num);
		CHECK_MEM(r[i].p, a[i].s.p + 100 * i, 64 + i);
	}
	CHECK_CQ_EMPTY(cq[0]);
	CHECK_CQ_EMPTY(cq[1]);
}

static const struct vt_case cases[] = {
	VT_CASE(xrc_two_named_domains_in_one_process),
	VT_CASE(xrc_owner_keys_checked),
	VT_CASE(xrc_resized_srq_refused),
	VT_CASE(xrc_srq_of_another_process),
	VT_CASE(xrc_rnr_and_event_across_processes),
	VT_CASE(xrcd_errno_across_processes),
	VT_CASE(xrc_owner_killed),
};
VT_MAIN(cases)
