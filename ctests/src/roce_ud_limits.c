/*
 * roce_ud_limits: what an rsw device in RoCEv2 mode (RSW_ROCEV2) refuses,
 * and says so, rather than faking it.
 *
 *   roce_ud_limits DEV          the checks below; exit 0 when all hold
 *   roce_ud_limits second DEV   (run by the first) a UD QP must fail
 *
 * On DEV: an RC and a UC QP fail with EOPNOTSUPP; a UD QP is created,
 * and ibv_attach_mcast on it fails with EOPNOTSUPP; while it exists, a
 * second process's UD QP on DEV fails with EADDRINUSE (one process per
 * address holds UDP port 4791). Prints "roce_ud_limits: ok" or a line
 * starting "FAIL".
 */
#define _GNU_SOURCE
#include <errno.h>
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
	qp = qp_of(pd, cq, IBV_QPT_RC);
	if (qp || errno != EOPNOTSUPP)
		fail("RC QP on %s: %s, want EOPNOTSUPP", name, qp ? "created" : "refused");
	qp = qp_of(pd, cq, IBV_QPT_UC);
	if (qp || errno != EOPNOTSUPP)
		fail("UC QP on %s: %s, want EOPNOTSUPP", name, qp ? "created" : "refused");
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
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(c))
		fail("teardown");
	printf("roce_ud_limits: ok\n");
	return 0;
}
