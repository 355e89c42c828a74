/*
 * sum_client: the active half of the "sum" example of the rdma_cm flow.
 *
 *   sum_client <server> <val1> <val2> [port]      (default port 20079)
 *
 * Resolves the server's address and route, connects, and takes the
 * server's buffer address and rkey from the accept's private data. It then
 * RDMA-writes val1 into that buffer, SENDs val2, and waits for the server's
 * reply, which must be val1 + val2 (all numbers travel big-endian).
 *
 * Every wait is bounded. Exit status 0 only if the sum is right.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define RESOLVE_TIMEOUT_MS 5000
#define WAIT_MS 10000

struct sum_pdata {
	uint64_t buf_va;
	uint32_t buf_rkey;
} __attribute__((packed));

static int die(const char *what)
{
	fprintf(stderr, "sum_client: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, WAIT_MS) != 1) {
		fprintf(stderr, "sum_client: no %s within %d ms\n",
			rdma_event_str(want), WAIT_MS);
		exit(1);
	}
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "sum_client: got %s (status %d), wanted %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

int main(int argc, char *argv[])
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct rdma_conn_param conn_param = { 0 };
	struct ibv_qp_init_attr qp_attr = { 0 };
	struct ibv_send_wr send_wr = { 0 }, *bad_send_wr;
	struct ibv_recv_wr recv_wr = { 0 }, *bad_recv_wr;
	struct rdma_event_channel *cm_channel;
	struct rdma_cm_id *cm_id;
	struct rdma_cm_event *event;
	struct ibv_comp_channel *comp_chan;
	struct sum_pdata server_pdata;
	struct addrinfo *res, *t;
	unsigned cq_events = 0;
	uint32_t val1, val2, got;
	struct ibv_cq *cq, *evt_cq;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	void *cq_context;
	uint32_t *buf;
	int err, n, done = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: %s <server> <val1> <val2> [port]\n", argv[0]);
		return 2;
	}
	val1 = strtoul(argv[2], NULL, 0);
	val2 = strtoul(argv[3], NULL, 0);
	alarm(60);

	cm_channel = rdma_create_event_channel();
	if (!cm_channel)
		die("rdma_create_event_channel");
	if (rdma_create_id(cm_channel, &cm_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");

	n = getaddrinfo(argv[1], argc > 4 ? argv[4] : "20079", &hints, &res);
	if (n) {
		fprintf(stderr, "sum_client: getaddrinfo: %s\n", gai_strerror(n));
		return 1;
	}
	err = -1;
	for (t = res; t; t = t->ai_next) {
		err = rdma_resolve_addr(cm_id, NULL, t->ai_addr, RESOLVE_TIMEOUT_MS);
		if (!err)
			break;
	}
	if (err)
		die("rdma_resolve_addr");
	freeaddrinfo(res);
	event = expect_event(cm_channel, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(event);
	if (rdma_resolve_route(cm_id, RESOLVE_TIMEOUT_MS))
		die("rdma_resolve_route");
	event = expect_event(cm_channel, RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(event);

	/* Address resolution picked the device: make the verbs objects on it. */
	pd = ibv_alloc_pd(cm_id->verbs);
	if (!pd)
		die("ibv_alloc_pd");
	comp_chan = ibv_create_comp_channel(cm_id->verbs);
	if (!comp_chan)
		die("ibv_create_comp_channel");
	cq = ibv_create_cq(cm_id->verbs, 2, NULL, comp_chan, 0);
	if (!cq)
		die("ibv_create_cq");
	if (ibv_req_notify_cq(cq, 0))
		die("ibv_req_notify_cq");

	buf = calloc(2, sizeof(uint32_t));
	if (!buf)
		die("calloc");
	mr = ibv_reg_mr(pd, buf, 2 * sizeof(uint32_t), IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	qp_attr.cap.max_send_wr = 2;
	qp_attr.cap.max_send_sge = 1;
	qp_attr.cap.max_recv_wr = 1;
	qp_attr.cap.max_recv_sge = 1;
	qp_attr.send_cq = cq;
	qp_attr.recv_cq = cq;
	qp_attr.qp_type = IBV_QPT_RC;
	if (rdma_create_qp(cm_id, pd, &qp_attr))
		die("rdma_create_qp");

	conn_param.initiator_depth = 1;
	conn_param.retry_count = 7;
	if (rdma_connect(cm_id, &conn_param))
		die("rdma_connect");
	event = expect_event(cm_channel, RDMA_CM_EVENT_ESTABLISHED);
	if (!event->param.conn.private_data ||
	    event->param.conn.private_data_len < sizeof(server_pdata)) {
		fprintf(stderr, "sum_client: accept carried %u bytes of private data\n",
			event->param.conn.private_data_len);
		return 1;
	}
	memcpy(&server_pdata, event->param.conn.private_data, sizeof(server_pdata));
	rdma_ack_cm_event(event);

	/* The reply (the sum) lands in buf[0]. */
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(uint32_t);
	sge.lkey = mr->lkey;
	recv_wr.wr_id = 0;
	recv_wr.sg_list = &sge;
	recv_wr.num_sge = 1;
	if (ibv_post_recv(cm_id->qp, &recv_wr, &bad_recv_wr))
		die("ibv_post_recv");

	printf("%u + %u = ", val1, val2);
	fflush(stdout);
	buf[0] = htonl(val1);
	buf[1] = htonl(val2);

	/* val1 by RDMA WRITE straight into the server's buffer (unsignaled)... */
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(uint32_t);
	sge.lkey = mr->lkey;
	send_wr.wr_id = 1;
	send_wr.opcode = IBV_WR_RDMA_WRITE;
	send_wr.sg_list = &sge;
	send_wr.num_sge = 1;
	send_wr.wr.rdma.rkey = ntohl(server_pdata.buf_rkey);
	send_wr.wr.rdma.remote_addr = be64toh(server_pdata.buf_va);
	if (ibv_post_send(cm_id->qp, &send_wr, &bad_send_wr))
		die("ibv_post_send (write)");

	/* ...then val2 by SEND, which tells the server both are there. */
	sge.addr = (uintptr_t)(buf + 1);
	sge.length = sizeof(uint32_t);
	sge.lkey = mr->lkey;
	send_wr.wr_id = 2;
	send_wr.opcode = IBV_WR_SEND;
	send_wr.send_flags = IBV_SEND_SIGNALED;
	send_wr.sg_list = &sge;
	send_wr.num_sge = 1;
	if (ibv_post_send(cm_id->qp, &send_wr, &bad_send_wr))
		die("ibv_post_send (send)");

	/* Wait for the receive completion that carries the sum. */
	while (!done) {
		struct pollfd pfd = { .fd = comp_chan->fd, .events = POLLIN };

		if (poll(&pfd, 1, WAIT_MS) != 1) {
			fprintf(stderr, "sum_client: no completion within %d ms\n", WAIT_MS);
			return 1;
		}
		if (ibv_get_cq_event(comp_chan, &evt_cq, &cq_context))
			die("ibv_get_cq_event");
		cq_events++;
		if (ibv_req_notify_cq(cq, 0))
			die("ibv_req_notify_cq");
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "sum_client: wr %llu completed with %s\n",
					(unsigned long long)wc.wr_id,
					ibv_wc_status_str(wc.status));
				return 1;
			}
			if (wc.wr_id == 0)
				done = 1;
		}
		if (n < 0)
			die("ibv_poll_cq");
	}

	got = ntohl(buf[0]);
	printf("%u\n", got);
	if (got != val1 + val2) {
		fprintf(stderr, "sum_client: wrong sum %u, expected %u\n", got, val1 + val2);
		return 1;
	}

	if (rdma_disconnect(cm_id))
		die("rdma_disconnect");
	event = expect_event(cm_channel, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(event);

	ibv_ack_cq_events(cq, cq_events);
	rdma_destroy_qp(cm_id);
	ibv_dereg_mr(mr);
	free(buf);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(comp_chan);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(cm_id);
	rdma_destroy_event_channel(cm_channel);
	return 0;
}
