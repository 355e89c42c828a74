/*
 * cm_flows: how the RDMA CM reports a connection or a resolution that
 * cannot succeed, one line per step, so two runs (over Debian's librdmacm
 * and over ours, on a kernel device) can be compared line by line.
 *
 *   cm_flows no_listener SRC DST PORT       connect to a port nobody listens on
 *   cm_flows unreachable SRC DST TIMEOUT_MS resolve an address nobody answers
 *
 * Prints "step: EVENT status N" or "step: errno NAME". Every wait is
 * bounded; the exit status is 0 when the flow ended the way the CM
 * documents for that case (REJECTED or UNREACHABLE, or ECONNREFUSED from
 * rdma_connect itself on iWARP; ADDR_ERROR within the
 * given timeout plus a grace period), 1 otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>

/* The kernel may round a resolution timeout up; TCG slows it down. */
#define GRACE_MS 5000

static struct rdma_event_channel *ch;

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void addr(struct sockaddr_in *sin, const char *ip, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &sin->sin_addr) != 1) {
		fprintf(stderr, "cm_flows: bad address %s\n", ip);
		exit(2);
	}
}

/* The next event within ms, printed as "step: EVENT status N"; -1 if none. */
static int next_event(const char *step, int ms, int *status)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int type;

	if (poll(&pfd, 1, ms) != 1) {
		printf("%s: no event within %d ms\n", step, ms);
		return -1;
	}
	if (rdma_get_cm_event(ch, &ev)) {
		printf("%s: rdma_get_cm_event errno %s\n", step, strerrorname_np(errno));
		return -1;
	}
	type = ev->event;
	*status = ev->status;
	printf("%s: %s status %d\n", step, rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return type;
}

static int failed_call(const char *step, int ret)
{
	int err = errno;

	if (!ret)
		return 0;
	printf("%s: errno %s\n", step, strerrorname_np(err));
	errno = err;
	return 1;
}

static int no_listener(struct rdma_cm_id *id, const char *dst, int port)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7 };
	/* iWARP's CM connects a QP: the connect needs a real one. */
	struct ibv_qp_init_attr qp = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct sockaddr_in to;
	int type, status, ret;

	addr(&to, dst, port);
	if (failed_call("resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&to, 5000)))
		return 1;
	if (next_event("resolve_addr", 15000, &status) != RDMA_CM_EVENT_ADDR_RESOLVED)
		return 1;
	if (failed_call("resolve_route", rdma_resolve_route(id, 5000)))
		return 1;
	if (next_event("resolve_route", 15000, &status) != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return 1;
	if (failed_call("create_qp", rdma_create_qp(id, NULL, &qp)))
		return 1;
	ret = failed_call("connect", rdma_connect(id, &param));
	/* iWARP connects the TCP stream inside the call: refused at once. */
	if (ret && errno == ECONNREFUSED)
		ret = 0;
	else if (!ret) {
		type = next_event("connect", 30000, &status);
		ret = !((type == RDMA_CM_EVENT_REJECTED || type == RDMA_CM_EVENT_UNREACHABLE) && status);
	}
	rdma_destroy_qp(id);
	return ret;
}

static int unreachable(struct rdma_cm_id *id, const char *dst, int timeout_ms)
{
	struct sockaddr_in to;
	int type, status;
	double t0 = now_ms(), took;

	addr(&to, dst, 0);
	if (failed_call("resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&to, timeout_ms)))
		return 0; /* refused at once: bounded too */
	type = next_event("resolve_addr", timeout_ms + GRACE_MS, &status);
	took = now_ms() - t0;
	fprintf(stderr, "cm_flows: the event came after %.0f ms (timeout %d ms)\n", took, timeout_ms);
	return !(type == RDMA_CM_EVENT_ADDR_ERROR && status);
}

int main(int argc, char *argv[])
{
	struct rdma_cm_id *id;
	struct sockaddr_in src;
	int ret;

	if (argc != 5) {
		fprintf(stderr, "usage: %s no_listener|unreachable SRC DST PORT|TIMEOUT_MS\n", argv[0]);
		return 2;
	}
	ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		return 1;
	}
	addr(&src, argv[2], 0);
	if (failed_call("bind", rdma_bind_addr(id, (struct sockaddr *)&src)))
		return 1;
	if (!strcmp(argv[1], "no_listener"))
		ret = no_listener(id, argv[3], atoi(argv[4]));
	else if (!strcmp(argv[1], "unreachable"))
		ret = unreachable(id, argv[3], atoi(argv[4]));
	else
		return 2;
	if (rdma_destroy_id(id))
		printf("destroy_id: errno %s\n", strerrorname_np(errno));
	rdma_destroy_event_channel(ch);
	return ret;
}
