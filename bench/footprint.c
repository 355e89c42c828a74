/*
 * What a connected RC QP and a registered MR cost: resident memory and
 * file descriptors, measured in this process around creating NQP QPs
 * (connected in pairs on one device, each pair having moved one SEND)
 * and NMR MRs of 4 KiB.
 *
 *   footprint [DEVICE [NQP [NMR]]]      (rsw_lo, 1000, 1000)
 *
 * Prints "qp RSS_BYTES FDS" and "mr RSS_BYTES FDS" per object.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <infiniband/verbs.h>

static void die(const char *what)
{
	fprintf(stderr, "footprint: %s failed\n", what);
	exit(1);
}

static long rss_bytes(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2)
		die("reading /proc/self/statm");
	fclose(f);
	return resident * sysconf(_SC_PAGESIZE);
}

static long fds(void)
{
	long n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		die("opendir /proc/self/fd");
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static void wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	for (long spins = 0; spins < 2000000000L; spins++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS))
			die("completion");
		if (n == 1)
			return;
	}
	die("waiting for a completion");
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "rsw_lo";
	int nqp = argc > 2 ? atoi(argv[2]) : 1000;
	int nmr = argc > 3 ? atoi(argv[3]) : 1000;
	struct rlimit rl;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("opening the device");
	nqp &= ~1;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * nqp + 16, NULL, NULL, 0);
	union ibv_gid gid;
	char *buf = aligned_alloc(4096, 4096 * (size_t)(nmr + 1));
	struct ibv_qp **qps = calloc((size_t)nqp, sizeof(*qps));
	struct ibv_mr **mrs = calloc((size_t)nmr, sizeof(*mrs));

	if (!pd || !cq || !buf || !qps || !mrs || ibv_query_gid(ctx, 1, 0, &gid))
		die("setting up");
	memset(buf, 1, 4096 * (size_t)(nmr + 1));
	struct ibv_mr *msg = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!msg)
		die("ibv_reg_mr");

	long rss0 = rss_bytes(), fd0 = fds();
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		qps[i] = ibv_create_qp(pd, &a);
		if (!qps[i])
			die("ibv_create_qp");
	}
	for (int i = 0; i < nqp; i += 2) {
		to_rts(qps[i], qps[i + 1]->qp_num, &gid);
		to_rts(qps[i + 1], qps[i]->qp_num, &gid);
	}
	for (int i = 0; i < nqp; i += 2) {
		struct ibv_sge s = { (uintptr_t)buf, 8, msg->lkey };
		struct ibv_recv_wr r = { .wr_id = 1, .sg_list = &s, .num_sge = 1 }, *br;
		struct ibv_send_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bw;
		if (ibv_post_recv(qps[i + 1], &r, &br) || ibv_post_send(qps[i], &w, &bw))
			die("posting");
		wait_one(cq);
		wait_one(cq);
	}
	long rss1 = rss_bytes(), fd1 = fds();
	for (int i = 0; i < nmr; i++) {
		mrs[i] = ibv_reg_mr(pd, buf + 4096 * (size_t)(i + 1), 4096,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!mrs[i])
			die("ibv_reg_mr");
	}
	long rss2 = rss_bytes(), fd2 = fds();
	printf("qp %ld %.2f\n", (rss1 - rss0) / nqp, (double)(fd1 - fd0) / nqp);
	printf("mr %ld %.2f\n", (rss2 - rss1) / nmr, (double)(fd2 - fd1) / nmr);
	return 0;
}
