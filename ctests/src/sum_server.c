/*
 * sum_server: the passive half of the "sum" example of the rdma_cm flow.
 *
 *   sum_server [port]            (default port 20079)
 *
 * Waits for one client. Before accepting it posts a receive for the
 * client's second number and hands the client, as accept private data, the
 * address (64-bit, big-endian) and rkey (32-bit, big-endian) of a buffer the
 * client RDMA-writes its first number into. When the SEND with the second
 * number arrives, both numbers are in the buffer; the server sends their
 * sum back and waits for the client to disconnect.
 *
 * Every wait is bounded (poll with a timeout, plus an alarm for the whole
 * run). Exit status 0 on success.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define WAIT_MS 10000

/* What the server tells the client about its buffer (all big-endian). */
struct sum_pdata {
	uint64_t buf_va;
	uint32_t buf_rkey;
} __attribute__((packed));

static int die(const char *what)
{
	fprintf(stderr, "sum_server: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* Next CM event, which must be of type `want`. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, WAIT_MS) != 1) {
		fprintf(stderr, "sum_server: no %s within %d ms\n",
			rdma_event_str(want), WAIT_MS);
		exit(1);
	}
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "sum_server: got %s (status %d), wanted %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

/* One completion, waited for on the completion channel. */
static void wait_completion(struct ibv_comp_channel *cc, struct ibv_cq *cq,
			    struct ibv_wc *wc, unsigned *events)
{
	struct pollfd pfd = { .fd = cc->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			break;
		if (poll(&pfd, 1, WAIT_MS) != 1) {
			fprintf(stderr, "sum_server: no completion within %d ms\n", WAIT_MS);
			exit(1);
		}
		if (ibv_get_cq_event(cc, &ev_cq, &ev_ctx))
			die("ibv_get_cq_event");
		(*events)++;
		if (ibv_req_notify_cq(cq, 0))
			die("ibv_req_notify_cq");
	}
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "sum_server: completion status %s\n",
			ibv_wc_status_str(wc->status));
		exit(1);
	}
}

int main(int argc, char *argv[])
{
	struct rdma_conn_param conn_param = { 0 };
	struct ibv_qp_init_attr qp_attr = { 0 };
	struct ibv_send_wr send_wr = { 0 }, *bad_send_wr;
	struct ibv_recv_wr recv_wr = { 0 }, *bad_recv_wr;
	struct rdma_event_channel *cm_channel;
	struct rdma_cm_id *listen_id, *cm_id;
	struct rdma_cm_event *event;
	struct ibv_comp_channel *comp_chan;
	struct sum_pdata rep_pdata;
	struct sockaddr_in sin;
	unsigned cq_events = 0;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint32_t *buf, sum;
	int port = argc > 1 ? atoi(argv[1]) : 20079;

	alarm(60);

	cm_channel = rdma_create_event_channel();
	if (!cm_channel)
		die("rdma_create_event_channel");
	if (rdma_create_id(cm_channel, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	sin.sin_addr.s_addr = htonl(INADDR_ANY);
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&sin))
		die("rdma_bind_addr");
	if (rdma_listen(listen_id, 1))
		die("rdma_listen");
	printf("sum_server: listening on port %d\n", ntohs(rdma_get_src_port(listen_id)));
	fflush(stdout);

	event = expect_event(cm_channel, RDMA_CM_EVENT_CONNECT_REQUEST);
	cm_id = event->id;
	if (event->listen_id != listen_id) {
		fprintf(stderr, "sum_server: listen_id is not the listener\n");
		return 1;
	}
	rdma_ack_cm_event(event);

	/* The verbs objects go on the device the request arrived on. */
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
	mr = ibv_reg_mr(pd, buf, 2 * sizeof(uint32_t),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	qp_attr.cap.max_send_wr = 1;
	qp_attr.cap.max_send_sge = 1;
	qp_attr.cap.max_recv_wr = 1;
	qp_attr.cap.max_recv_sge = 1;
	qp_attr.send_cq = cq;
	qp_attr.recv_cq = cq;
	qp_attr.qp_type = IBV_QPT_RC;
	if (rdma_create_qp(cm_id, pd, &qp_attr))
		die("rdma_create_qp");

	/* The second number arrives by SEND into buf[1]. */
	sge.addr = (uintptr_t)(buf + 1);
	sge.length = sizeof(uint32_t);
	sge.lkey = mr->lkey;
	recv_wr.sg_list = &sge;
	recv_wr.num_sge = 1;
	if (ibv_post_recv(cm_id->qp, &recv_wr, &bad_recv_wr))
		die("ibv_post_recv");

	/* The first one is RDMA-written into buf[0]: tell the client where. */
	rep_pdata.buf_va = htobe64((uint64_t)(uintptr_t)buf);
	rep_pdata.buf_rkey = htonl(mr->rkey);
	conn_param.responder_resources = 1;
	conn_param.private_data = &rep_pdata;
	conn_param.private_data_len = sizeof(rep_pdata);
	if (rdma_accept(cm_id, &conn_param))
		die("rdma_accept");
	event = expect_event(cm_channel, RDMA_CM_EVENT_ESTABLISHED);
	rdma_ack_cm_event(event);

	wait_completion(comp_chan, cq, &wc, &cq_events);
	if (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(uint32_t)) {
		fprintf(stderr, "sum_server: unexpected completion opcode %d len %u\n",
			wc.opcode, wc.byte_len);
		return 1;
	}

	/* RC ordering: the WRITE landed before the SEND that followed it. */
	sum = ntohl(buf[0]) + ntohl(buf[1]);
	printf("sum_server: %u + %u = %u\n", ntohl(buf[0]), ntohl(buf[1]), sum);
	buf[0] = htonl(sum);

	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(uint32_t);
	sge.lkey = mr->lkey;
	send_wr.opcode = IBV_WR_SEND;
	send_wr.send_flags = IBV_SEND_SIGNALED;
	send_wr.sg_list = &sge;
	send_wr.num_sge = 1;
	if (ibv_post_send(cm_id->qp, &send_wr, &bad_send_wr))
		die("ibv_post_send");
	wait_completion(comp_chan, cq, &wc, &cq_events);
	if (wc.opcode != IBV_WC_SEND) {
		fprintf(stderr, "sum_server: unexpected completion opcode %d\n", wc.opcode);
		return 1;
	}

	/* The client disconnects once it has checked the sum. */
	event = expect_event(cm_channel, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(event);

	ibv_ack_cq_events(cq, cq_events);
	rdma_destroy_qp(cm_id);
	rdma_destroy_id(cm_id);
	rdma_destroy_id(listen_id);
	ibv_dereg_mr(mr);
	free(buf);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(comp_chan);
	ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(cm_channel);
	printf("sum_server: done\n");
	return 0;
}
