/*
 * roce_ud_limits: what an rsw device in RoCEv2 mode (RSW_ROCEV2) refuses,
 * and says so, rather than faking it.
 *
 *   roce_ud_limits DEV          the checks below; exit 0 when all hold
 *   roce_ud_limits second DEV   (run by the first) a UD QP must fail
 *
 * On DEV: RC and UC QPs are created, an XRC send QP fails with EOPNOTSUPP;
 * a UD QP with IBV_QP_CREATE_SOURCE_QPN is created for QPN 1 only, once
 * at a time (EADDRINUSE), and RC with the flag or another QPN fails with
 * EOPNOTSUPP; a UD QP is created,
 * and ibv_attach_mcast on it fails with EOPNOTSUPP; while it exists, a
 * second process's UD QP on DEV fails with EADDRINUSE (one process per
 * address holds UDP port 4791). Then what is dropped, among three UD QPs
 * of this process on DEV (one port, demultiplexed by QPN): a SEND to a
 * QP with no receive posted is dropped, not kept for the next receive
 * (a SEND to a third QP behind it shows the port has taken it), and a
 * SEND with a wrong Q_Key; what arrives has its bytes, immediate,
 * src_qp and GRH. Prints "roce_ud_limits: ok" or a line starting "FAIL".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = NULL;

	for (int i = 0; l && l[i]; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			c = ibv_open_device(l[i]);
	if (!c)
		fail("cannot open %s", name);
	ibv_free_device_list(l);
	return c;
}

static struct ibv_qp *qp_of(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = t,
	};

	errno = 0;
	return ibv_create_qp(pd, &a);
}


#define QKEY 0x11111111u

struct ud {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned char buf[2][64 + 40];
};

static void ud_open(struct ibv_context *c, struct ibv_pd *pd, struct ud *u)
{
	u->cq = ibv_create_cq(c, 8, NULL, NULL, 0);
	if (!u->cq)
		fail("cq");
	u->qp = qp_of(pd, u->cq, IBV_QPT_UD);
	u->mr = ibv_reg_mr(pd, u->buf, sizeof(u->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!u->qp || !u->mr)
		fail("UD QP or MR");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	if (ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		fail("INIT");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(u->qp, &a, IBV_QP_STATE))
		fail("RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	if (ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		fail("RTS");
}

static void ud_recv(struct ud *u)
{
	struct ibv_sge sge = { (uintptr_t)u->buf[1], sizeof(u->buf[1]), u->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;

	memset(u->buf[1], 0xee, sizeof(u->buf[1]));
	if (ibv_post_recv(u->qp, &wr, &bad))
		fail("post_recv");
}

static struct ibv_wc ud_poll(struct ud *u, const char *what)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 5;

	while (time(NULL) < end) {
		int n = ibv_poll_cq(u->cq, 1, &wc);

		if (n < 0)
			fail("poll");
		if (n) {
			if (wc.status != IBV_WC_SUCCESS)
				fail("%s: %s", what, ibv_wc_status_str(wc.status));
			return wc;
		}
	}
	fail("%s: no completion in 5 s", what);
}

/* `from` sends "msg-N" (N = tag) to `to`, with imm tag, Q_Key qkey. */
static void ud_send(struct ud *from, struct ibv_ah *ah, struct ud *to, unsigned tag, uint32_t qkey)
{
	struct ibv_sge sge = { (uintptr_t)from->buf[0], 16, from->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = tag,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(tag),
	}, *bad;

	memset(from->buf[0], 0, 16);
	snprintf((char *)from->buf[0], 16, "msg-%u", tag);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = to->qp->qp_num;
	wr.wr.ud.remote_qkey = qkey;
	if (ibv_post_send(from->qp, &wr, &bad))
		fail("post_send");
	ud_poll(from, "send");
}

/* `u` received message `tag` from `from`, its GRH naming DEV's address. */
static void ud_check(struct ud *u, struct ud *from, unsigned tag, const union ibv_gid *gid)
{
	struct ibv_wc wc = ud_poll(u, "receive");
	char want[16] = { 0 };
	const unsigned char *h = u->buf[1] + 20;

	snprintf(want, sizeof(want), "msg-%u", tag);
	if (wc.byte_len != 40 + 16 || memcmp(u->buf[1] + 40, want, 16))
		fail("received %u bytes \"%.16s\", want \"%s\"", wc.byte_len, u->buf[1] + 40, want);
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != tag)
		fail("%s: imm %#x", want, ntohl(wc.imm_data));
	if (!(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != from->qp->qp_num)
		fail("%s: flags %#x src_qp %#x", want, wc.wc_flags, wc.src_qp);
	/* IPv4 GRH: our address both ways, UDP, 20+8+12+8+4+16+4 bytes. */
	if (h[0] != 0x45 || h[9] != 17 || (h[2] << 8 | h[3]) != 72 ||
	    memcmp(h + 12, gid->raw + 12, 4) || memcmp(h + 16, gid->raw + 12, 4))
		fail("%s: GRH", want);
}

static void drops(struct ibv_context *c, struct ibv_pd *pd)
{
	struct ud a, b, d;
	union ibv_gid gid;

	if (ibv_query_gid(c, 1, 0, &gid))
		fail("query_gid");
	ud_open(c, pd, &a);
	ud_open(c, pd, &b);
	ud_open(c, pd, &d);
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 64 },
		.port_num = 1,
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		fail("create_ah");
	/* B has no receive: message 1 is dropped. D's message 2 went out
	 * behind it on the same port, so once D has it, 1 was handled. */
	ud_recv(&d);
	ud_send(&a, ah, &b, 1, QKEY);
	ud_send(&a, ah, &d, 2, QKEY);
	ud_check(&d, &a, 2, &gid);
	/* Now B has a receive: a wrong Q_Key (3) is dropped, 4 arrives. */
	ud_recv(&b);
	ud_send(&a, ah, &b, 3, 0x22222222u);
	ud_send(&a, ah, &b, 4, QKEY);
	ud_check(&b, &a, 4, &gid);
	/* Controlled Q_Key: the sender's own (the same QKEY). */
	ud_recv(&b);
	ud_send(&a, ah, &b, 5, 0x80000000u);
	ud_check(&b, &a, 5, &gid);
	ibv_destroy_ah(ah);
	struct ud *all[] = { &a, &b, &d };
	for (int i = 0; i < 3; i++)
		if (ibv_destroy_qp(all[i]->qp) || ibv_dereg_mr(all[i]->mr) || ibv_destroy_cq(all[i]->cq))
			fail("teardown");
	printf("roce_ud_limits: dropped without a receive and with a wrong Q_Key\n");
}

/* A UD QP with IBV_QP_CREATE_SOURCE_QPN: only QP1 (librdmacm's GSI),
 * one at a time, and the number free again once it is destroyed; RC
 * with the flag, or another number, EOPNOTSUPP. */
static struct ibv_qp *with_source(struct ibv_context *c, struct ibv_pd *pd, struct ibv_cq *cq,
				  enum ibv_qp_type type, uint32_t n)
{
	struct ibv_qp_init_attr_ex x = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
		.pd = pd,
		.create_flags = IBV_QP_CREATE_SOURCE_QPN,
		.source_qpn = n,
	};
	errno = 0;
	return ibv_create_qp_ex(c, &x);
}

static void source_qpn(struct ibv_context *c, struct ibv_pd *pd, struct ibv_cq *cq,
		       const char *name)
{
	struct ibv_qp *a, *b;

	a = with_source(c, pd, cq, IBV_QPT_UD, 2);
	if (a || errno != EOPNOTSUPP)
		fail("UD QP with source QPN 2 on %s: %s, errno %d, want EOPNOTSUPP", name,
		     a ? "created" : "refused", errno);
	a = with_source(c, pd, cq, IBV_QPT_RC, 1);
	if (a || errno != EOPNOTSUPP)
		fail("RC QP with source QPN 1 on %s: %s, errno %d, want EOPNOTSUPP", name,
		     a ? "created" : "refused", errno);
	a = with_source(c, pd, cq, IBV_QPT_UD, 1);
	if (!a)
		fail("UD QP with source QPN 1 on %s: errno %d", name, errno);
	b = with_source(c, pd, cq, IBV_QPT_UD, 1);
	if (b || errno != EADDRINUSE)
		fail("a second QP1 on %s: %s, errno %d, want EADDRINUSE", name,
		     b ? "created" : "refused", errno);
	if (ibv_destroy_qp(a))
		fail("destroy QP1");
	a = with_source(c, pd, cq, IBV_QPT_UD, 1);
	if (!a)
		fail("QP1 again on %s: errno %d", name, errno);
	if (ibv_destroy_qp(a))
		fail("destroy QP1 again");
	printf("roce_ud_limits: source QPN 1 only, one at a time\n");
}

int main(int argc, char **argv)
{
	int second = argc == 3 && !strcmp(argv[1], "second");
	const char *name = argv[argc - 1];
	struct ibv_context *c;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;

	if (argc != 2 && !second) {
		fprintf(stderr, "usage: %s DEV | %s second DEV\n", argv[0], argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(30);
	c = open_dev(name);
	pd = ibv_alloc_pd(c);
	cq = ibv_create_cq(c, 4, NULL, NULL, 0);
	if (!pd || !cq)
		fail("pd/cq");
	if (second) {
		qp = qp_of(pd, cq, IBV_QPT_UD);
		if (qp || errno != EADDRINUSE)
			fail("a second process's UD QP on %s: %s, errno %d, want EADDRINUSE", name,
			     qp ? "created" : "refused", errno);
		printf("roce_ud_limits second: EADDRINUSE\n");
		return 0;
	}
	/* RC speaks RoCEv2 (engine/roce_rc.rs): created. */
	qp = qp_of(pd, cq, IBV_QPT_RC);
	if (!qp)
		fail("RC QP on %s: refused", name);
	if (ibv_destroy_qp(qp))
		fail("destroy the RC QP");
	/* So does UC (engine/roce_rc/uc.rs). */
	qp = qp_of(pd, cq, IBV_QPT_UC);
	if (!qp)
		fail("UC QP on %s: refused", name);
	if (ibv_destroy_qp(qp))
		fail("destroy the UC QP");
	struct ibv_qp_init_attr_ex x = {
		.send_cq = cq,
		.cap = { .max_send_wr = 1, .max_send_sge = 1 },
		.qp_type = IBV_QPT_XRC_SEND,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	errno = 0;
	qp = ibv_create_qp_ex(c, &x);
	if (qp || errno != EOPNOTSUPP)
		fail("XRC_SEND QP on %s: %s, want EOPNOTSUPP", name, qp ? "created" : "refused");
	source_qpn(c, pd, cq, name);
	qp = qp_of(pd, cq, IBV_QPT_UD);
	if (!qp)
		fail("UD QP on %s", name);
	union ibv_gid group = { .raw = { 0xff, 0x0e, [15] = 1 } };
	int r = ibv_attach_mcast(qp, &group, 0);
	if (r != EOPNOTSUPP)
		fail("ibv_attach_mcast returned %d, want EOPNOTSUPP", r);
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "'%s' second '%s'", argv[0], name);
	r = system(cmd);
	if (r == -1 || !WIFEXITED(r) || WEXITSTATUS(r) != 0)
		fail("the second process failed (status %#x)", r);
	drops(c, pd);
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(c))
		fail("teardown");
	printf("roce_ud_limits: ok\n");
	return 0;
}
