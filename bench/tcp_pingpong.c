/*
 * The kernel-TCP floor of rsw's wire layout: a ping-pong over two one-way
 * TCP connections (one per direction, as an rsw QP pair uses), each
 * message framed as rsw frames it (a 4-byte length, a 48-byte header, the
 * payload, one pad byte the reader leaves in the socket until the next
 * message), read by a busy-polling reader that asks poll(2) before recv,
 * as a polling rsw thread does, and that takes the pad alone right after
 * its own send once 320 bytes came since it last did (so the kernel's ACK
 * goes while it waits, as rsw's `TcpConn::ack_early`). Nothing else: no verbs, no locks, no
 * completions. Beside sockperf (one two-way connection) it tells whether
 * the layout costs anything; beside ib_send_lat it leaves what our
 * user-space path costs.
 *
 *   tcp_pingpong server PORT SIZE
 *   tcp_pingpong client ADDR PORT SIZE ITERS   -> one-way median in us
 *
 * The client connects to PORT (its requests), then the server connects
 * back to the port the client announces (its replies).
 */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR 48
#define MAXSZ 4096

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void tune(int fd)
{
	int one = 1, lowat = 2;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A lone pad byte is not "readable". */
	setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void write_all(int fd, const void *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k <= 0)
			die("send");
		p = (const char *)p + k;
		n -= (size_t)k;
	}
}

static void read_all(int fd, void *p, size_t n)
{
	while (n > 0) {
		ssize_t k = recv(fd, p, n, 0);

		if (k <= 0)
			die("recv");
		p = (char *)p + k;
		n -= (size_t)k;
	}
}

static char hdr[HDR], payload[MAXSZ], rbuf[MAXSZ + HDR + 16];

static void send_msg(int fd, uint32_t size)
{
	uint32_t len = HDR + size;
	char pad = 0;
	struct iovec v[4] = {
		{ &len, 4 }, { hdr, HDR }, { payload, size }, { &pad, 1 },
	};
	struct msghdr m = { .msg_iov = v, .msg_iovlen = 4 };
	size_t total = 4 + HDR + size + 1;

	if (sendmsg(fd, &m, MSG_NOSIGNAL) != (ssize_t)total)
		die("sendmsg");
}

#define ACK_EARLY 320

/* Bytes read since the pad was last taken alone, and whether the pad of
 * the last message is gone. */
static size_t unacked;
static int pad_taken;

/* After our send: the pad of the message we answered, alone, once
 * ACK_EARLY bytes came (see the top). */
static void ack_early(int fd)
{
	char c;

	if (unacked < ACK_EARLY)
		return;
	if (recv(fd, &c, 1, MSG_DONTWAIT) == 1) {
		pad_taken = 1;
		unacked = 0;
	}
}

/* One message: the previous message's pad (none before the first, or if
 * taken already), the length, header and payload; the new pad stays in
 * the socket. Returns -1 at the end of the stream. */
static int recv_msg(int fd, uint32_t size, int first)
{
	size_t want = (first || pad_taken ? 0 : 1) + 4 + HDR + size, got = 0;

	pad_taken = 0;
	unacked += want;

	while (got < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&p, 1, 0) != 1)
			continue;
		k = recv(fd, rbuf + got, want - got, MSG_DONTWAIT);
		if (k > 0)
			got += (size_t)k;
		else if (k == 0)
			return -1;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int server = argc == 4 && !strcmp(argv[1], "server");
	int client = argc == 6 && !strcmp(argv[1], "client");
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	uint32_t size;
	int one = 1, req, rep;

	if (!server && !client) {
		fprintf(stderr, "usage: %s server PORT SIZE | client ADDR PORT SIZE ITERS\n", argv[0]);
		return 2;
	}
	size = (uint32_t)atoi(argv[server ? 3 : 4]);
	if (size > MAXSZ)
		size = MAXSZ;
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		uint16_t back;

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		a.sin_port = htons((uint16_t)atoi(argv[2]));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
			die("listen");
		req = accept(l, (struct sockaddr *)&a, &al);
		if (req < 0)
			die("accept");
		read_all(req, &back, sizeof(back));
		a.sin_port = back;
		rep = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(rep, (struct sockaddr *)&a, sizeof(a)))
			die("connect back");
		tune(req);
		tune(rep);
		/* Until the client closes. */
		for (int i = 0; recv_msg(req, size, i == 0) == 0; i++) {
			send_msg(rep, size);
			ack_early(req);
		}
	} else {
		long iters = atol(argv[5]), warm = iters / 10;
		uint64_t *t = malloc(sizeof(*t) * (size_t)iters);
		int l = socket(AF_INET, SOCK_STREAM, 0);
		uint16_t port;

		if (!t || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al))
			die("client listen");
		port = a.sin_port;
		a.sin_port = htons((uint16_t)atoi(argv[3]));
		if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
			die("address");
		req = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(req, (struct sockaddr *)&a, sizeof(a)))
			die("connect");
		write_all(req, &port, sizeof(port));
		rep = accept(l, NULL, NULL);
		if (rep < 0)
			die("accept back");
		tune(req);
		tune(rep);
		for (long i = -warm; i < iters; i++) {
			uint64_t t0 = now_ns();

			send_msg(req, size);
			if (i > -warm)
				ack_early(rep);
			if (recv_msg(rep, size, i == -warm))
				die("the server closed");
			if (i >= 0)
				t[i] = now_ns() - t0;
		}
		qsort(t, (size_t)iters, sizeof(*t), cmp);
		printf("%.3f\n", (double)t[iters / 2] / 2000.0);
	}
	return 0;
}
