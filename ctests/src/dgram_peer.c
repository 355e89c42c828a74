/*
 * dgram_peer: datagram rsockets, every byte checked at both ends, so that
 * two builds of librdmacm (ours and rdma-core's) can be run against each
 * other, one per process.
 *
 *   dgram_peer server ADDR PORT           echo until the client says bye
 *   dgram_peer client ADDR PORT [COUNT]   COUNT datagrams (default 200)
 *
 * The client rconnects to the server and sends one datagram at a time
 * (rsend), resending it every 500 ms until its answer comes (UD is lossy,
 * and the first datagrams go through the UDP sockets). A request is:
 *   bytes 0-3   sequence number, big-endian (0xffffffff: bye)
 *   bytes 4-5   the client's port as the client sees it (rgetsockname)
 *   bytes 6-    pattern(i, seq)
 * with sizes cycling through SIZES. The server checks every byte and that
 * the sender address rrecvfrom gives is the client's (same address as the
 * server's, since both run on one host, and the port of bytes 4-5), and
 * answers with rsendto: the same sequence number, the port it saw, and
 * every other byte inverted. The client checks every byte of the answer
 * and that rrecvfrom names the server's address and port.
 *
 * Output: one "dgram_peer client: N datagrams, B bytes echoed and
 * verified, R resent" or "dgram_peer server: N datagrams, B bytes verified
 * from ADDR port P, D duplicates" line, exit status 0; on any mismatch a
 * line starting "FAIL" and exit status 1. After its bye the server lingers
 * until a second passes with nothing to answer (a lost answer to bye is
 * resent), then exits. An alarm bounds either side.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#define LIMIT_SECONDS 90
#define RESEND_MS 500
#define TRIES 40
#define BYE 0xffffffffu
#define HDR 6
#define MAXLEN 1000

/* Up to 1000 bytes: rxe's 1024-byte MTU less rdma-core's 8-byte header. */
static const size_t SIZES[] = { 6, 7, 100, 255, 256, 511, 900, 1000 };

static uint8_t pattern(size_t i, uint32_t seq)
{
	return (uint8_t)(i * 13 + (seq * 7) + (i >> 8));
}

__attribute__((format(printf, 1, 2), noreturn))
static void fail(const char *fmt, ...)
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

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint16_t port_of(const struct sockaddr_storage *s)
{
	if (s->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)s)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)s)->sin6_port);
}

/* Same family and IP address (the port aside). */
static int same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return 0;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

static const char *ip_str(const struct sockaddr_storage *s, char *buf, size_t len)
{
	const void *a = s->ss_family == AF_INET ? (const void *)&((const struct sockaddr_in *)s)->sin_addr
						: (const void *)&((const struct sockaddr_in6 *)s)->sin6_addr;

	return inet_ntop(s->ss_family, a, buf, len) ? buf : "?";
}

/* Waits up to `ms` for a datagram; its length, or -1 when none came. */
static ssize_t recv_within(int s, uint8_t *buf, size_t len, int ms, struct sockaddr_storage *from)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	socklen_t flen = sizeof(*from);
	ssize_t n;
	int r;

	r = rpoll(&p, 1, ms);
	if (r < 0)
		fail("rpoll returned %d", r);
	if (r == 0)
		return -1;
	memset(from, 0, sizeof(*from));
	n = rrecvfrom(s, buf, len, MSG_DONTWAIT, (struct sockaddr *)from, &flen);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -1;
	if (n < 0)
		fail("rrecvfrom returned %zd", n);
	return n;
}

static int server(const struct sockaddr_storage *me, socklen_t melen)
{
	uint8_t in[2048], out[MAXLEN];
	struct sockaddr_storage from, client;
	uint32_t next = 0, seq;
	unsigned long bytes = 0, dups = 0;
	int s, bye = 0;
	char ip[64];
	ssize_t n;

	s = rsocket(me->ss_family, SOCK_DGRAM, 0);
	if (s < 0)
		fail("rsocket returned %d", s);
	if (rbind(s, (const struct sockaddr *)me, melen))
		fail("rbind failed");
	printf("dgram_peer server: bound to port %u\n", port_of(me));
	fflush(stdout);
	memset(&client, 0, sizeof(client));
	for (;;) {
		n = recv_within(s, in, sizeof(in), bye ? 1000 : 5000, &from);
		if (n < 0) {
			if (bye)
				break;
			continue;
		}
		if (n < HDR || n > MAXLEN)
			fail("server: a datagram of %zd bytes", n);
		if (!same_ip(&from, me))
			fail("server: a datagram from %s", ip_str(&from, ip, sizeof(ip)));
		if (port_of(&from) != ((in[4] << 8) | in[5]))
			fail("server: sender port %u, the client says %u", port_of(&from),
			     (in[4] << 8) | in[5]);
		if (client.ss_family && port_of(&from) != port_of(&client))
			fail("server: sender port %u, earlier %u", port_of(&from), port_of(&client));
		client = from;
		seq = get32(in);
		if (seq == BYE) {
			bye = 1;
		} else if (seq == next) {
			for (ssize_t i = HDR; i < n; i++)
				if (in[i] != pattern(i, seq))
					fail("server: byte %zd of datagram %u differs", i, seq);
			if ((size_t)n != SIZES[seq % (sizeof(SIZES) / sizeof(SIZES[0]))])
				fail("server: datagram %u has %zd bytes", seq, n);
			next++;
			bytes += n;
		} else if (seq < next) {
			dups++;
		} else {
			fail("server: datagram %u while %u was due", seq, next);
		}
		memcpy(out, in, 4);
		out[4] = port_of(&from) >> 8;
		out[5] = port_of(&from) & 0xff;
		for (ssize_t i = HDR; i < n; i++)
			out[i] = ~in[i];
		if (rsendto(s, out, n, 0, (struct sockaddr *)&from,
			    from.ss_family == AF_INET ? sizeof(struct sockaddr_in)
						      : sizeof(struct sockaddr_in6)) != n)
			fail("server: rsendto of %zd bytes failed", n);
	}
	rclose(s);
	printf("dgram_peer server: %u datagrams, %lu bytes verified from %s port %u, %lu duplicates\n",
	       next, bytes, ip_str(&client, ip, sizeof(ip)), port_of(&client), dups);
	return 0;
}

/* Sends `len` bytes of `out` until an answer to its sequence number comes;
 * checks that answer against `out`. */
static void exchange(int s, const uint8_t *out, size_t len, const struct sockaddr_storage *srv,
		     unsigned long *resent)
{
	uint32_t seq = get32(out);
	struct sockaddr_storage from;
	uint8_t in[2048];
	ssize_t n;

	for (int t = 0; t < TRIES; t++) {
		if (t)
			(*resent)++;
		if (rsend(s, out, len, 0) != (ssize_t)len)
			fail("client: rsend of datagram %u failed", seq);
		while ((n = recv_within(s, in, sizeof(in), RESEND_MS, &from)) >= 0) {
			if (n >= 4 && get32(in) != seq)
				continue; /* a late answer to a resent datagram */
			if ((size_t)n != len)
				fail("client: answer to %u has %zd bytes", seq, n);
			if (!same_ip(&from, srv) || port_of(&from) != port_of(srv))
				fail("client: answer to %u from port %u", seq, port_of(&from));
			if (in[4] != out[4] || in[5] != out[5])
				fail("client: the server saw port %u, ours is %u",
				     (in[4] << 8) | in[5], (out[4] << 8) | out[5]);
			for (size_t i = HDR; i < len; i++)
				if (in[i] != (uint8_t)~out[i])
					fail("client: byte %zu of answer %u differs", i, seq);
			return;
		}
	}
	fail("client: no answer to datagram %u after %d sends", seq, TRIES);
}

static int client(const struct sockaddr_storage *srv, socklen_t srvlen, unsigned count)
{
	struct sockaddr_storage me;
	socklen_t melen = sizeof(me);
	unsigned long bytes = 0, resent = 0;
	uint8_t out[MAXLEN];
	uint16_t port;
	int s;

	s = rsocket(srv->ss_family, SOCK_DGRAM, 0);
	if (s < 0)
		fail("rsocket returned %d", s);
	if (rconnect(s, (const struct sockaddr *)srv, srvlen))
		fail("rconnect failed");
	if (rgetsockname(s, (struct sockaddr *)&me, &melen))
		fail("rgetsockname failed");
	port = port_of(&me);
	if (!port)
		fail("client: no port after rconnect");
	for (unsigned seq = 0; seq < count; seq++) {
		size_t len = SIZES[seq % (sizeof(SIZES) / sizeof(SIZES[0]))];

		put32(out, seq);
		out[4] = port >> 8;
		out[5] = port & 0xff;
		for (size_t i = HDR; i < len; i++)
			out[i] = pattern(i, seq);
		exchange(s, out, len, srv, &resent);
		bytes += len;
	}
	put32(out, BYE);
	out[4] = port >> 8;
	out[5] = port & 0xff;
	exchange(s, out, HDR, srv, &resent);
	rclose(s);
	printf("dgram_peer client: %u datagrams, %lu bytes echoed and verified, %lu resent\n", count,
	       bytes, resent);
	return 0;
}

int main(int argc, char **argv)
{
	struct addrinfo hints, *ai;
	struct sockaddr_storage a;
	unsigned count = 200;
	socklen_t alen;

	if (argc < 4 || argc > 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client ADDR PORT [COUNT]\n", argv[0]);
		return 2;
	}
	if (argc == 5)
		count = strtoul(argv[4], NULL, 0);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_DGRAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	if (getaddrinfo(argv[2], argv[3], &hints, &ai) || ai->ai_addrlen > sizeof(a)) {
		fprintf(stderr, "%s: bad address %s port %s\n", argv[0], argv[2], argv[3]);
		return 2;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, ai->ai_addr, ai->ai_addrlen);
	alen = ai->ai_addrlen;
	freeaddrinfo(ai);
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(LIMIT_SECONDS);
	return argv[1][0] == 's' ? server(&a, alen) : client(&a, alen, count);
}
