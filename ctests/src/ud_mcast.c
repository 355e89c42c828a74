/*
 * UD multicast between hosts (ctests/tests/ud_multicast_netns.sh).
 *
 *   ud_mcast recv DEVICE GROUP COUNT   attach a UD QP to GROUP, print
 *                                      "ready", then expect COUNT datagrams
 *   ud_mcast send DEVICE GROUP COUNT   send COUNT datagrams to GROUP
 *
 * GROUP is an IPv4 multicast address. Datagram k carries immediate data k
 * and 256 bytes with byte i = (k + i) & 0xff; the receiver checks both, the
 * GRH (IPv4 header naming the group as destination) and that every
 * datagram came from the same QP. Every wait is bounded (10 s).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x1234567u
#define LEN 256
#define SLOT 4096

static void die(const char *what)
{
	fprintf(stderr, "ud_mcast: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);

	if (!l)
		die("ibv_get_device_list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name)) {
			struct ibv_context *c = ibv_open_device(l[i]);
			if (!c)
				die("ibv_open_device");
			return c;
		}
	fprintf(stderr, "ud_mcast: no device %s\n", name);
	exit(1);
}

/* Polls one completion within 10 s. */
static void poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = now_ms() + 10000;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return;
		if (now_ms() > end) {
			fprintf(stderr, "ud_mcast: no completion within 10 s\n");
			exit(1);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: ud_mcast recv|send DEVICE GROUP COUNT\n");
		return 2;
	}
	int sender = !strcmp(argv[1], "send");
	int count = atoi(argv[4]);
	union ibv_gid grp;
	struct in_addr ga;

	if (inet_pton(AF_INET, argv[3], &ga) != 1) {
		fprintf(stderr, "ud_mcast: bad group %s\n", argv[3]);
		return 2;
	}
	memset(&grp, 0, sizeof(grp));
	grp.raw[10] = grp.raw[11] = 0xff;
	memcpy(&grp.raw[12], &ga, 4);

	struct ibv_context *ctx = open_dev(argv[2]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * count + 8, NULL, NULL, 0);
	uint8_t *buf = aligned_alloc(4096, (size_t)SLOT * (count + 1));
	if (!pd || !cq || !buf)
		die("setup");
	memset(buf, 0, (size_t)SLOT * (count + 1));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)SLOT * (count + 1),
				       IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = count + 1, .max_recv_wr = count + 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = mr ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = QKEY };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					  IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("RTR");
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");

	struct ibv_wc wc;
	if (!sender) {
		if ((errno = ibv_attach_mcast(qp, &grp, 0)))
			die("ibv_attach_mcast");
		for (int k = 0; k < count; k++) {
			struct ibv_sge s = { (uintptr_t)buf + (size_t)k * SLOT,
					     SLOT, mr->lkey };
			struct ibv_recv_wr w = { .wr_id = k, .sg_list = &s,
						 .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &w, &bad))
				die("ibv_post_recv");
		}
		printf("ready qpn %u\n", qp->qp_num);
		fflush(stdout);
		uint32_t src = 0;
		for (int k = 0; k < count; k++) {
			poll_one(cq, &wc);
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
			    !(wc.wc_flags & IBV_WC_GRH) ||
			    !(wc.wc_flags & IBV_WC_WITH_IMM) ||
			    wc.byte_len != 40 + LEN) {
				fprintf(stderr, "ud_mcast: bad completion %d: %s "
					"opcode %d flags %#x len %u\n", k,
					ibv_wc_status_str(wc.status), wc.opcode,
					wc.wc_flags, wc.byte_len);
				return 1;
			}
			uint32_t seq = ntohl(wc.imm_data);
			const uint8_t *p = buf + wc.wr_id * SLOT;
			if (memcmp(p + 36, &ga, 4)) {
				fprintf(stderr, "ud_mcast: GRH destination is not the group\n");
				return 1;
			}
			for (int i = 0; i < LEN; i++)
				if (p[40 + i] != (uint8_t)(seq + i)) {
					fprintf(stderr, "ud_mcast: payload %u byte %d\n", seq, i);
					return 1;
				}
			if (k && wc.src_qp != src) {
				fprintf(stderr, "ud_mcast: two sources\n");
				return 1;
			}
			src = wc.src_qp;
		}
		printf("received %d from qpn %u\n", count, src);
		return 0;
	}

	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	aa.grh.dgid = grp;
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	for (int k = 0; k < count; k++) {
		uint8_t *p = buf + (size_t)k * SLOT;
		for (int i = 0; i < LEN; i++)
			p[i] = (uint8_t)(k + i);
		struct ibv_sge s = { (uintptr_t)p, LEN, mr->lkey };
		struct ibv_send_wr w = { .wr_id = k, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.imm_data = htonl(k);
		w.wr.ud.ah = ah;
		w.wr.ud.remote_qpn = 0xffffff;
		w.wr.ud.remote_qkey = QKEY;
		if (ibv_post_send(qp, &w, &bad))
			die("ibv_post_send");
		poll_one(cq, &wc);
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "ud_mcast: send %d: %s\n", k,
				ibv_wc_status_str(wc.status));
			return 1;
		}
	}
	printf("sent %d from qpn %u\n", count, qp->qp_num);
	return 0;
}
