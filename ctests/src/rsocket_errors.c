/*
 * rsocket_errors: stream rsockets over our librdmacm, end to end on
 * loopback (127.0.0.1), with every call's errors.
 *
 *   rsocket_errors [case...]      run the named cases (default: all)
 *   rsocket_errors -l             list the cases
 *
 * Each case runs in a child process forked before any librdmacm call, with
 * an alarm as a backstop; the parent prints "ok <case>" or "FAIL <case>"
 * and exits 0 only if every case passed. Two-sided cases fork again before
 * touching the library: the parent is the server, the child the client, and
 * they pace each other through a pair of pipes (never by sleeping).
 *
 * What is asserted: bytes delivered end to end (a position-dependent
 * pattern, both directions, through rsend/rwrite/rwritev/rsendmsg and
 * rrecv/rread/rreadv/rrecvmsg, MSG_PEEK and MSG_WAITALL), EAGAIN on
 * non-blocking calls with nothing to read or no room to write, EINPROGRESS
 * and completion through rpoll for a non-blocking rconnect, rpoll as
 * `rstream -T a` uses it (a non-blocking listener and connects, 40 rounds:
 * never -1, errno left as it was by every call that succeeds), ECONNREFUSED
 * connecting to a port nobody listens on (blocking, and via SO_ERROR),
 * EOF after the peer's SHUT_WR while the other direction keeps working,
 * EPIPE writing after the peer closed, EINVAL for bad arguments,
 * EBADF/ENOTSOCK for descriptors that are no rsocket, ENOPROTOOPT for
 * unknown options, riomap/riowrite landing in the peer's memory in order
 * with the stream, rpoll/rselect over rsockets and pipes together, and
 * datagram rsockets (bytes, sender addresses, truncation, EDESTADDRREQ,
 * EMSGSIZE, EOPNOTSUPP for the stream-only calls), and their wire format,
 * rdma-core 44's, against a plain UDP socket and a UD QP of the test's own
 * (dgram_wire).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rsocket.h>

#define CASE_SECONDS 40
#define BIG (1 << 20)		/* bytes each way in the transfer case */

static const char *case_name = "?";

static void failf(int line, const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fprintf(stderr, "%s:%d [pid %d]: ", case_name, line, getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d %s)\n", e, strerror(e));
	exit(1);
}

#define CHECK(c) do { if (!(c)) failf(__LINE__, "check failed: %s", #c); } while (0)
#define CHECK_EQ(a, b) \
	do { long long _a = (long long)(a), _b = (long long)(b); \
	     if (_a != _b) failf(__LINE__, "%s == %lld, expected %s == %lld", #a, _a, #b, _b); \
	} while (0)
#define CHECK_ERR(call, err) \
	do { errno = 0; long long _r = (long long)(call); \
	     if (_r != -1 || errno != (err)) \
		failf(__LINE__, "%s returned %lld errno %d, expected -1 errno %d (%s)", \
		      #call, _r, errno, (err), strerror(err)); \
	} while (0)
#define CHECK_OK(call) \
	do { errno = 0; long long _r = (long long)(call); \
	     if (_r != 0) failf(__LINE__, "%s returned %lld", #call, _r); } while (0)

static uint8_t pattern(size_t i, int salt)
{
	return (uint8_t)(i * 7 + (i >> 9) + salt);
}

static struct sockaddr_in loop4(uint16_t port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof(s));
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	s.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return s;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* --- the two processes of a two-sided case ------------------------------ */

static int to_child[2], to_parent[2];
static pid_t peer_pid;

/* Forks the client; returns 1 in the parent (server), 0 in the child. */
static int split(void)
{
	CHECK_OK(pipe(to_child));
	CHECK_OK(pipe(to_parent));
	peer_pid = fork();
	CHECK(peer_pid >= 0);
	if (peer_pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		return 0;
	}
	close(to_child[0]);
	close(to_parent[1]);
	return 1;
}

static void tell(int v)
{
	int fd = peer_pid ? to_child[1] : to_parent[1];

	CHECK_EQ(write(fd, &v, sizeof(v)), sizeof(v));
}

static int hear(void)
{
	int fd = peer_pid ? to_parent[0] : to_child[0], v;

	CHECK_EQ(read(fd, &v, sizeof(v)), sizeof(v));
	return v;
}

/* The parent waits for the client and fails if it did. */
static void join(void)
{
	int st;

	CHECK_EQ(waitpid(peer_pid, &st, 0), peer_pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		failf(__LINE__, "the client failed (status 0x%x)", st);
}

/* A listener on 127.0.0.1, its port. */
static int listener(int *port)
{
	struct sockaddr_in sin = loop4(0);
	socklen_t len = sizeof(sin);
	int one = 1, l;

	l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0);
	CHECK_OK(rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	CHECK_OK(rbind(l, (struct sockaddr *)&sin, sizeof(sin)));
	CHECK_OK(rlisten(l, 4));
	CHECK_OK(rgetsockname(l, (struct sockaddr *)&sin, &len));
	CHECK_EQ(len, sizeof(sin));
	CHECK(sin.sin_port != 0);
	*port = ntohs(sin.sin_port);
	return l;
}

static int connect_to(int port)
{
	struct sockaddr_in sin = loop4(port);
	int s = rsocket(AF_INET, SOCK_STREAM, 0);

	CHECK(s >= 0);
	CHECK_OK(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)));
	return s;
}

/* Sends all of buf (blocking). */
static void send_all(int s, const uint8_t *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = rsend(s, buf + off, len - off, 0);
		CHECK(n > 0);
		off += n;
	}
}

static void recv_all(int s, uint8_t *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = rrecv(s, buf + off, len - off, 0);
		if (n <= 0)
			failf(__LINE__, "rrecv returned %zd after %zu of %zu bytes", n, off, len);
		off += n;
	}
}

/* --- cases ---------------------------------------------------------------- */

/* rsocket's arguments, and descriptors that are no rsocket. */
static void case_create(void)
{
	int p[2], s, dead, hole;
	struct rlimit lim;
	char c = 0;
	struct sockaddr_in sin = loop4(0);

	CHECK_ERR(rsocket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_ERR(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), EPROTONOSUPPORT);
	CHECK_ERR(rsocket(AF_INET, SOCK_RAW, 0), ESOCKTNOSUPPORT);

	/* An rsocket is numbered by a descriptor of its own. */
	s = rsocket(AF_INET6, SOCK_STREAM, 0);
	CHECK(s >= 0);
	CHECK(fcntl(s, F_GETFD) >= 0);
	CHECK(rfcntl(s, F_GETFD) & FD_CLOEXEC);
	CHECK_OK(rclose(s));

	/* Not an rsocket: EBADF with nothing open there, ENOTSOCK otherwise.
	 * A closed rsocket's number is free for the kernel to hand out again,
	 * and any thread of the process may open a file meanwhile (rsw's
	 * progress thread once did, as it started), so once closed it may
	 * name a file: either error is right, acting on the old rsocket is
	 * not. EBADF exactly is checked on numbers no open can be given:
	 * negative, and at or over the descriptor limit. */
	dead = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(dead >= 0);
	CHECK_OK(rclose(dead));
	errno = 0;
	CHECK(rclose(dead) == -1 && (errno == EBADF || errno == ENOTSOCK));
	errno = 0;
	CHECK(rbind(dead, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
	      (errno == EBADF || errno == ENOTSOCK));
	CHECK_OK(getrlimit(RLIMIT_NOFILE, &lim));
	hole = lim.rlim_cur > INT_MAX ? INT_MAX : (int)lim.rlim_cur;
	CHECK_ERR(rsend(-1, &c, 1, 0), EBADF);
	CHECK_ERR(rclose(hole), EBADF);
	CHECK_ERR(rbind(hole, (struct sockaddr *)&sin, sizeof(sin)), EBADF);
	CHECK_ERR(rrecv(hole, &c, 1, 0), EBADF);
	CHECK_OK(pipe(p));
	CHECK_ERR(rsend(p[1], &c, 1, 0), ENOTSOCK);
	CHECK_ERR(rrecv(p[0], &c, 1, 0), ENOTSOCK);
	CHECK_ERR(rlisten(p[0], 1), ENOTSOCK);
	CHECK_ERR(rshutdown(p[0], SHUT_RDWR), ENOTSOCK);
	CHECK_ERR(rfcntl(p[0], F_GETFL), ENOTSOCK);
	CHECK_ERR(rclose(p[0]), ENOTSOCK);
	close(p[0]);
	close(p[1]);
}

/* Options: set, read back, refused ones. */
static void case_options(void)
{
	int s = rsocket(AF_INET, SOCK_STREAM, 0), v;
	socklen_t len;
	struct linger lg = { 1, 3 }, lg2;
	char small = 1;

	CHECK(s >= 0);
#define ROUND(level, name, val) do { \
		v = (val); CHECK_OK(rsetsockopt(s, level, name, &v, sizeof(v))); \
		v = -1; len = sizeof(v); \
		CHECK_OK(rgetsockopt(s, level, name, &v, &len)); \
		CHECK_EQ(len, sizeof(v)); CHECK_EQ(v, (val)); } while (0)
	ROUND(SOL_SOCKET, SO_RCVBUF, 1 << 19);
	ROUND(SOL_SOCKET, SO_SNDBUF, 1 << 18);
	ROUND(SOL_SOCKET, SO_REUSEADDR, 1);
	ROUND(SOL_SOCKET, SO_KEEPALIVE, 1);
	ROUND(IPPROTO_TCP, TCP_NODELAY, 1);
	ROUND(IPPROTO_TCP, TCP_MAXSEG, 1400);
	ROUND(SOL_RDMA, RDMA_SQSIZE, 64);
	ROUND(SOL_RDMA, RDMA_RQSIZE, 32);
	ROUND(SOL_RDMA, RDMA_INLINE, 128);
	ROUND(SOL_RDMA, RDMA_IOMAPSIZE, 2);
#undef ROUND
	CHECK_OK(rsetsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	len = sizeof(lg2);
	CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_LINGER, &lg2, &len));
	CHECK_EQ(lg2.l_onoff, 1);
	CHECK_EQ(lg2.l_linger, 3);
	len = sizeof(v);
	CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len));
	CHECK_EQ(v, 0);
	CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len));
	CHECK_EQ(v, SOCK_STREAM);

	/* Bad arguments. */
	CHECK_ERR(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, 1), EINVAL);
	v = -5;
	CHECK_ERR(rsetsockopt(s, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)), EINVAL);
	v = 0;
	CHECK_ERR(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)), EINVAL);
	CHECK_ERR(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &v, sizeof(v)), ENOPROTOOPT);
	CHECK_ERR(rsetsockopt(s, 12345, 1, &v, sizeof(v)), ENOPROTOOPT);
	len = sizeof(v);
	CHECK_ERR(rgetsockopt(s, SOL_RDMA, 99, &v, &len), ENOPROTOOPT);
	len = 1;
	CHECK_ERR(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len), EINVAL);

	/* rfcntl: O_NONBLOCK is the rsocket's. */
	CHECK_EQ(rfcntl(s, F_GETFL) & O_NONBLOCK, 0);
	CHECK_OK(rfcntl(s, F_SETFL, O_NONBLOCK));
	CHECK(rfcntl(s, F_GETFL) & O_NONBLOCK);
	CHECK_ERR(rfcntl(s, F_GETLK, NULL), EOPNOTSUPP);

	/* Calls that need a connection. */
	CHECK_ERR(rsend(s, &small, 1, 0), ENOTCONN);
	CHECK_ERR(rrecv(s, &small, 1, 0), ENOTCONN);
	CHECK_ERR(rshutdown(s, SHUT_WR), ENOTCONN);
	len = sizeof(v);
	CHECK_ERR(rgetpeername(s, NULL, &len), ENOTCONN);
	CHECK_ERR(riomap(s, &v, sizeof(v), PROT_WRITE, 0, -1), EINVAL);
	CHECK_ERR(rlisten(s, 1), EINVAL);	/* not bound */
	CHECK_OK(rclose(s));
}

/* Connecting to a port nobody listens on. */
static void case_refused(void)
{
	struct sockaddr_in sin = loop4(0);
	socklen_t len = sizeof(sin);
	struct pollfd pfd;
	int s, port, err, r;
	double t0;

	/* A port that was free a moment ago: bind one, note it, close it. */
	s = listener(&port);
	CHECK_OK(rclose(s));
	sin = loop4(port);

	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0);
	CHECK_ERR(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), ECONNREFUSED);
	CHECK_OK(rclose(s));

	/* Non-blocking: EINPROGRESS, then rpoll says so and SO_ERROR why. */
	s = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	CHECK(s >= 0);
	CHECK_ERR(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), EINPROGRESS);
	CHECK_ERR(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), EALREADY);
	pfd.fd = s;
	pfd.events = POLLOUT;
	t0 = now();
	do {
		errno = EDOM;
		r = rpoll(&pfd, 1, 5000);
		CHECK(r >= 0);
		CHECK_EQ(errno, EDOM);	/* untouched by a call that succeeds */
	} while (r == 0 && now() - t0 < 10);
	CHECK_EQ(r, 1);
	/* As rdma-core: POLLERR with the POLLOUT asked for, no POLLHUP. */
	CHECK_EQ(pfd.revents, POLLOUT | POLLERR);
	len = sizeof(err);
	CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len));
	CHECK_EQ(err, ECONNREFUSED);
	CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len));
	CHECK_EQ(err, 0);	/* read once */
	CHECK_OK(rclose(s));

	/* Bad addresses. */
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK_ERR(rconnect(s, (struct sockaddr *)&sin, 4), EINVAL);
	CHECK_ERR(rconnect(s, NULL, sizeof(sin)), EFAULT);
	CHECK_ERR(rbind(s, (struct sockaddr *)&sin, 2), EINVAL);
	CHECK_OK(rclose(s));
}

/* Bytes both ways through every send and receive call, non-blocking
 * EAGAIN both ways, peek, waitall, names. */
static void case_transfer(void)
{
	uint8_t *buf = malloc(BIG), *in = malloc(BIG);
	int port, l, s;

	CHECK(buf && in);
	for (size_t i = 0; i < BIG; i++)
		buf[i] = pattern(i, 1);
	if (split()) {
		struct sockaddr_in peer, me;
		socklen_t plen = sizeof(peer), mlen = sizeof(me);
		struct iovec iov[3];
		struct msghdr msg;
		uint8_t tmp[64];
		size_t got;
		ssize_t n;

		l = listener(&port);
		tell(port);
		s = raccept(l, (struct sockaddr *)&peer, &plen);
		CHECK(s >= 0);
		CHECK_EQ(plen, sizeof(peer));
		CHECK_EQ(peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
		CHECK_OK(rgetsockname(s, (struct sockaddr *)&me, &mlen));
		CHECK_EQ(ntohs(me.sin_port), port);
		/* The client tells us its local port; the names agree. */
		CHECK_EQ(hear(), ntohs(peer.sin_port));

		/* Nothing sent yet: EAGAIN without waiting. */
		CHECK_ERR(rrecv(s, tmp, sizeof(tmp), MSG_DONTWAIT), EAGAIN);
		tell(1);

		/* 1 MiB in through rrecv, rread, rreadv and rrecvmsg. */
		got = 0;
		while (got < BIG) {
			size_t want = BIG - got, part = want < 70000 ? want : 70000;
			switch ((got / 70000) % 4) {
			case 0:
				n = rrecv(s, in + got, part, 0);
				break;
			case 1:
				n = rread(s, in + got, part);
				break;
			case 2:
				iov[0].iov_base = in + got;
				iov[0].iov_len = part / 3;
				iov[1].iov_base = in + got + part / 3;
				iov[1].iov_len = part - part / 3;
				n = rreadv(s, iov, 2);
				break;
			default:
				memset(&msg, 0, sizeof(msg));
				iov[0].iov_base = in + got;
				iov[0].iov_len = part;
				msg.msg_iov = iov;
				msg.msg_iovlen = 1;
				n = rrecvmsg(s, &msg, 0);
				break;
			}
			CHECK(n > 0);
			got += n;
		}
		CHECK_EQ(memcmp(in, buf, BIG), 0);

		/* Peek leaves the bytes; WAITALL waits for all of them. */
		CHECK_EQ(hear(), 2);
		n = rrecv(s, tmp, 10, MSG_PEEK | MSG_WAITALL);
		CHECK(n > 0 && n <= 10);
		CHECK_EQ(tmp[0], 'A');
		CHECK_EQ(rrecv(s, tmp, 40, MSG_WAITALL), 40);
		for (int i = 0; i < 40; i++)
			CHECK_EQ(tmp[i], 'A' + i % 26);

		/* The other way, while the client is not reading: a
		 * non-blocking writer runs out of room (EAGAIN), then the
		 * client drains and all of it arrives. */
		CHECK_OK(rfcntl(s, F_SETFL, O_NONBLOCK));
		got = 0;
		for (;;) {
			n = rsend(s, buf + got, BIG - got, 0);
			if (n < 0) {
				CHECK_EQ(errno, EAGAIN);
				break;
			}
			got += n;
			CHECK(got < BIG);	/* far more than any buffer here */
		}
		struct pollfd pfd = { .fd = s, .events = POLLOUT };
		CHECK_EQ(rpoll(&pfd, 1, 0), 0);
		tell((int)got);
		CHECK_OK(rfcntl(s, F_SETFL, 0));
		send_all(s, buf + got, BIG - got);
		CHECK_EQ(hear(), 3);
		CHECK_OK(rclose(s));
		CHECK_OK(rclose(l));
		join();
	} else {
		struct sockaddr_in me, peer;
		socklen_t mlen = sizeof(me), plen = sizeof(peer);
		struct iovec iov[3];
		struct msghdr msg;
		uint8_t abc[40];
		size_t sent, got, early;
		ssize_t n;

		port = hear();
		s = connect_to(port);
		me = loop4(port);
		CHECK_ERR(rconnect(s, (struct sockaddr *)&me, sizeof(me)), EISCONN);
		CHECK_OK(rgetsockname(s, (struct sockaddr *)&me, &mlen));
		CHECK_OK(rgetpeername(s, (struct sockaddr *)&peer, &plen));
		CHECK_EQ(ntohs(peer.sin_port), port);
		tell(ntohs(me.sin_port));
		CHECK_EQ(hear(), 1);

		/* 1 MiB out through rsend, rwrite, rwritev and rsendmsg. */
		sent = 0;
		while (sent < BIG) {
			size_t want = BIG - sent, part = want < 50000 ? want : 50000;
			switch ((sent / 50000) % 4) {
			case 0:
				n = rsend(s, buf + sent, part, 0);
				break;
			case 1:
				n = rwrite(s, buf + sent, part);
				break;
			case 2:
				iov[0].iov_base = buf + sent;
				iov[0].iov_len = 1;
				iov[1].iov_base = buf + sent + 1;
				iov[1].iov_len = part / 2;
				iov[2].iov_base = buf + sent + 1 + part / 2;
				iov[2].iov_len = part - 1 - part / 2;
				n = rwritev(s, iov, 3);
				break;
			default:
				memset(&msg, 0, sizeof(msg));
				iov[0].iov_base = buf + sent;
				iov[0].iov_len = part;
				msg.msg_iov = iov;
				msg.msg_iovlen = 1;
				n = rsendmsg(s, &msg, 0);
				break;
			}
			CHECK_EQ(n, part);	/* blocking: all of it */
			sent += n;
		}
		for (int i = 0; i < 40; i++)
			abc[i] = 'A' + i % 26;
		send_all(s, abc, 20);
		tell(2);
		send_all(s, abc + 20, 20);
		CHECK_ERR(rsendto(s, abc, 1, 0, (struct sockaddr *)&peer, sizeof(peer)), EISCONN);
		CHECK_ERR(rsend(s, NULL, 1, 0), EFAULT);
		CHECK_ERR(rreadv(s, NULL, -1), EINVAL);

		/* The server fills us up; then read everything. */
		early = hear();
		CHECK(early > 0 && early < BIG);
		recv_all(s, in, BIG);
		CHECK_EQ(memcmp(in, buf, BIG), 0);
		(void)got;
		tell(3);
		/* The server closed: EOF. */
		CHECK_EQ(rrecv(s, abc, 1, 0), 0);
		CHECK_OK(rclose(s));
		exit(0);
	}
	free(buf);
	free(in);
}

/* SHUT_WR: the peer reads EOF while the other direction still works;
 * after the peer closes, writes fail with EPIPE. */
static void case_shutdown(void)
{
	uint8_t b[100];
	int port, l, s;

	if (split()) {
		l = listener(&port);
		tell(port);
		s = raccept(l, NULL, NULL);
		CHECK(s >= 0);
		recv_all(s, b, 5);
		CHECK_EQ(memcmp(b, "hello", 5), 0);
		CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);	/* the client's SHUT_WR */
		CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);	/* and again */
		struct pollfd pfd = { .fd = s, .events = POLLIN };
		CHECK_EQ(rpoll(&pfd, 1, 0), 1);		/* EOF is readable */
		send_all(s, (const uint8_t *)"world", 5);
		CHECK_EQ(hear(), 1);
		CHECK_OK(rclose(s));
		tell(2);
		CHECK_OK(rclose(l));
		join();
	} else {
		port = hear();
		s = connect_to(port);
		CHECK_ERR(rshutdown(s, 77), EINVAL);
		send_all(s, (const uint8_t *)"hello", 5);
		CHECK_OK(rshutdown(s, SHUT_WR));
		CHECK_ERR(rsend(s, b, 1, 0), EPIPE);
		recv_all(s, b, 5);
		CHECK_EQ(memcmp(b, "world", 5), 0);
		tell(1);
		CHECK_EQ(hear(), 2);
		CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);
		CHECK_OK(rclose(s));

		/* A fresh connection whose peer closes: EOF, then EPIPE. */
		exit(0);
	}
}

/* The peer closes its rsocket: EOF for the reader, EPIPE for the writer,
 * POLLHUP in rpoll; rshutdown(SHUT_RD) makes reads return 0 at once. */
static void case_peer_close(void)
{
	uint8_t b[16];
	int port, l, s;

	if (split()) {
		l = listener(&port);
		tell(port);
		s = raccept(l, NULL, NULL);
		CHECK(s >= 0);
		send_all(s, (const uint8_t *)"bye", 3);
		CHECK_OK(rclose(s));
		CHECK_OK(rclose(l));
		join();
	} else {
		struct pollfd pfd;

		port = hear();
		s = connect_to(port);
		recv_all(s, b, 3);
		CHECK_EQ(memcmp(b, "bye", 3), 0);
		CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);
		CHECK_ERR(rsend(s, b, 1, 0), EPIPE);
		CHECK_ERR(rwrite(s, b, 1), EPIPE);
		pfd.fd = s;
		pfd.events = POLLIN | POLLOUT;
		CHECK_EQ(rpoll(&pfd, 1, 1000), 1);
		CHECK(pfd.revents & POLLHUP);
		CHECK_OK(rshutdown(s, SHUT_RD));
		CHECK_EQ(rrecv(s, b, sizeof(b), MSG_DONTWAIT), 0);
		CHECK_OK(rclose(s));
		exit(0);
	}
}

/* The client is killed (SIGKILL) while the server blocks in rrecv: the
 * read ends with EOF, later writes fail with EPIPE, nothing hangs. */
static void case_peer_killed(void)
{
	uint8_t b[16];
	int port, l, s;

	if (split()) {
		int st;

		l = listener(&port);
		tell(port);
		s = raccept(l, NULL, NULL);
		CHECK(s >= 0);
		recv_all(s, b, 2);
		CHECK_EQ(memcmp(b, "hi", 2), 0);
		CHECK_EQ(hear(), 1);
		CHECK_OK(kill(peer_pid, SIGKILL));
		CHECK_EQ(waitpid(peer_pid, &st, 0), peer_pid);
		CHECK(WIFSIGNALED(st));
		CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);
		CHECK_ERR(rsend(s, b, 1, 0), EPIPE);
		CHECK_OK(rclose(s));
		CHECK_OK(rclose(l));
	} else {
		port = hear();
		s = connect_to(port);
		send_all(s, (const uint8_t *)"hi", 2);
		tell(1);
		for (;;)
			pause();
	}
}

/* rpoll blocks until data arrives, on rsockets and pipes together, and
 * honours its timeout; rselect too. A non-blocking rconnect completes
 * through rpoll. */
static void case_poll(void)
{
	int port, l, s;
	uint8_t b[8];

	if (split()) {
		struct pollfd pfd[2];
		int p[2];
		double t0;

		CHECK_OK(pipe(p));
		l = listener(&port);
		tell(port);
		/* The listener turns readable when a connection waits. */
		pfd[0].fd = l;
		pfd[0].events = POLLIN;
		CHECK_EQ(rpoll(pfd, 1, 10000), 1);
		CHECK(pfd[0].revents & POLLIN);
		CHECK_OK(rfcntl(l, F_SETFL, O_NONBLOCK));
		s = raccept(l, NULL, NULL);
		CHECK(s >= 0);
		CHECK_ERR(raccept(l, NULL, NULL), EAGAIN);

		/* Nothing to read: rpoll waits out its timeout. */
		pfd[0].fd = s;
		pfd[0].events = POLLIN;
		pfd[1].fd = p[0];
		pfd[1].events = POLLIN;
		t0 = now();
		CHECK_EQ(rpoll(pfd, 2, 300), 0);
		CHECK(now() - t0 >= 0.25);
		/* The pipe alone wakes it. */
		CHECK_EQ(write(p[1], "x", 1), 1);
		CHECK_EQ(rpoll(pfd, 2, 5000), 1);
		CHECK_EQ(pfd[0].revents, 0);
		CHECK(pfd[1].revents & POLLIN);
		CHECK_EQ(read(p[0], b, 1), 1);
		/* The rsocket alone wakes it: the client sends when told. */
		tell(1);
		t0 = now();
		CHECK_EQ(rpoll(pfd, 2, 10000), 1);
		CHECK(pfd[0].revents & POLLIN);
		CHECK_EQ(pfd[1].revents, 0);
		recv_all(s, b, 4);
		CHECK_EQ(memcmp(b, "ping", 4), 0);

		/* rselect. */
		fd_set rd;
		struct timeval tv = { 0, 200000 };
		FD_ZERO(&rd);
		FD_SET(s, &rd);
		CHECK_EQ(rselect(s + 1, &rd, NULL, NULL, &tv), 0);
		tell(2);
		FD_ZERO(&rd);
		FD_SET(s, &rd);
		tv.tv_sec = 10;
		CHECK_EQ(rselect(s + 1, &rd, NULL, NULL, &tv), 1);
		CHECK(FD_ISSET(s, &rd));
		recv_all(s, b, 4);
		CHECK_EQ(memcmp(b, "pong", 4), 0);
		tv.tv_sec = -1;
		CHECK_ERR(rselect(s + 1, &rd, NULL, NULL, &tv), EINVAL);
		CHECK_EQ(hear(), 3);
		CHECK_OK(rclose(s));
		CHECK_OK(rclose(l));
		close(p[0]);
		close(p[1]);
		join();
	} else {
		struct sockaddr_in sin;
		struct pollfd pfd;
		int err, r;
		socklen_t len = sizeof(err);
		double t0;

		port = hear();
		sin = loop4(port);
		s = rsocket(AF_INET, SOCK_STREAM, 0);
		CHECK(s >= 0);
		CHECK_OK(rfcntl(s, F_SETFL, O_NONBLOCK));
		CHECK_ERR(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), EINPROGRESS);
		pfd.fd = s;
		pfd.events = POLLOUT;
		t0 = now();
		do {
			r = rpoll(&pfd, 1, 5000);
		} while (r == 0 && now() - t0 < 10);
		CHECK_EQ(r, 1);
		CHECK_EQ(pfd.revents & (POLLERR | POLLHUP), 0);
		CHECK(pfd.revents & POLLOUT);
		CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len));
		CHECK_EQ(err, 0);
		CHECK_OK(rfcntl(s, F_SETFL, 0));
		CHECK_EQ(hear(), 1);
		send_all(s, (const uint8_t *)"ping", 4);
		CHECK_EQ(hear(), 2);
		send_all(s, (const uint8_t *)"pong", 4);
		tell(3);
		CHECK_EQ(rrecv(s, b, 1, 0), 0);
		CHECK_OK(rclose(s));
		exit(0);
	}
}

/* riomap/riowrite: the client writes into the server's mapped buffer;
 * the stream message sent after it finds the bytes there. */
static void case_iomap(void)
{
	enum { MAP = 100000 };
	int port, l, s, one = 1;
	uint8_t *region = malloc(MAP), *src = malloc(MAP), b[4];

	CHECK(region && src);
	for (int i = 0; i < MAP; i++)
		src[i] = pattern(i, 9);
	if (split()) {
		off_t off;

		l = listener(&port);
		CHECK_OK(rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)));
		tell(port);
		s = raccept(l, NULL, NULL);
		CHECK(s >= 0);
		memset(region, 0, MAP);
		CHECK_ERR(riomap(s, region, MAP, PROT_READ, 0, 0), EINVAL);
		off = riomap(s, region, MAP, PROT_WRITE, 0, 4096);
		CHECK_EQ(off, 4096);
		/* One map was allowed (the client's RDMA_IOMAPSIZE). */
		CHECK_ERR(riomap(s, src, 16, PROT_WRITE, 0, 0), ENOMEM);
		send_all(s, (const uint8_t *)"map!", 4);
		recv_all(s, b, 4);
		CHECK_EQ(memcmp(b, "done", 4), 0);
		CHECK_EQ(memcmp(region, src, MAP), 0);
		CHECK_ERR(riounmap(s, src, MAP), EINVAL);
		CHECK_OK(riounmap(s, region, MAP));
		tell(1);
		CHECK_EQ(rrecv(s, b, 1, 0), 0);
		CHECK_OK(rclose(s));
		CHECK_OK(rclose(l));
		join();
	} else {
		struct sockaddr_in sin = loop4(0);

		port = hear();
		sin = loop4(port);
		s = rsocket(AF_INET, SOCK_STREAM, 0);
		CHECK(s >= 0);
		CHECK_OK(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)));
		CHECK_OK(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)));
		recv_all(s, b, 4);
		CHECK_EQ(memcmp(b, "map!", 4), 0);
		/* Outside the mapping: EINVAL; inside: all of it, in pieces. */
		CHECK_EQ(riowrite(s, src, 10, 0, 0), (size_t)-1);
		CHECK_EQ(errno, EINVAL);
		CHECK_EQ(riowrite(s, src, 50, 4096, 0), 50);
		CHECK_EQ(riowrite(s, src + 50, MAP - 50, 4096 + 50, 0), MAP - 50);
		send_all(s, (const uint8_t *)"done", 4);
		CHECK_EQ(hear(), 1);
		CHECK_OK(rclose(s));
		exit(0);
	}
}

/* Datagram rsockets: UD sends between rsockets of this process and of
 * another one, the sender's address, truncation, and the calls that do
 * not apply. */
static void case_dgram(void)
{
	struct sockaddr_in a_name = loop4(0), b_name, from, peer;
	socklen_t len = sizeof(a_name), flen;
	uint8_t out[1000], in[1200], hdr[3];
	static uint8_t big[5000];
	struct pollfd pfd;
	struct iovec iov[2];
	int a, b, v;

	CHECK_ERR(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), EPROTONOSUPPORT);
	a = rsocket(AF_INET, SOCK_DGRAM, 0);
	b = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(a >= 0 && b >= 0);
	CHECK_OK(rbind(a, (struct sockaddr *)&a_name, sizeof(a_name)));
	CHECK_OK(rgetsockname(a, (struct sockaddr *)&a_name, &len));
	CHECK(a_name.sin_port != 0);
	len = sizeof(v);
	CHECK_OK(rgetsockopt(a, SOL_SOCKET, SO_TYPE, &v, &len));
	CHECK_EQ(v, SOCK_DGRAM);

	/* What a datagram rsocket does not do. */
	CHECK_ERR(rsend(b, out, 10, 0), EDESTADDRREQ);
	/* Not bound yet: no receive, blocking or not (as rdma-core 44). */
	CHECK_ERR(rrecv(b, in, sizeof(in), 0), EINVAL);
	CHECK_ERR(rrecv(b, in, sizeof(in), MSG_DONTWAIT), EINVAL);
	CHECK_ERR(rsendto(b, big, sizeof(big), 0, (struct sockaddr *)&a_name, sizeof(a_name)),
		  EMSGSIZE);
	CHECK_ERR(rlisten(a, 1), EOPNOTSUPP);
	CHECK_ERR(raccept(a, NULL, NULL), EOPNOTSUPP);
	CHECK_ERR(rshutdown(a, SHUT_RDWR), EOPNOTSUPP);
	CHECK_ERR(riomap(a, out, sizeof(out), PROT_WRITE, 0, -1), EOPNOTSUPP);
	CHECK_ERR(rrecv(a, in, sizeof(in), MSG_DONTWAIT), EAGAIN);
	pfd.fd = a;
	pfd.events = POLLIN;
	CHECK_EQ(rpoll(&pfd, 1, 0), 0);

	/* b -> a: the bytes and b's address. */
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = pattern(i, 3);
	CHECK_EQ(rsendto(b, out, sizeof(out), 0, (struct sockaddr *)&a_name, sizeof(a_name)),
		 sizeof(out));
	len = sizeof(b_name);
	CHECK_OK(rgetsockname(b, (struct sockaddr *)&b_name, &len));
	CHECK_EQ(rpoll(&pfd, 1, 5000), 1);
	CHECK(pfd.revents & POLLIN);
	flen = sizeof(from);
	CHECK_EQ(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen), sizeof(out));
	CHECK_EQ(memcmp(in, out, sizeof(out)), 0);
	CHECK_EQ(flen, sizeof(from));
	CHECK_EQ(from.sin_port, b_name.sin_port);
	CHECK_EQ(from.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

	/* a -> b, to the address a was given; b reads it with rreadv. */
	CHECK_EQ(rsendto(a, "reply", 5, 0, (struct sockaddr *)&from, flen), 5);
	iov[0].iov_base = hdr;
	iov[0].iov_len = 3;
	iov[1].iov_base = in;
	iov[1].iov_len = 10;
	CHECK_EQ(rreadv(b, iov, 2), 5);
	CHECK_EQ(memcmp(hdr, "rep", 3), 0);
	CHECK_EQ(memcmp(in, "ly", 2), 0);

	/* Connected: rsend goes to the peer; a short buffer truncates the
	 * datagram and the rest is gone, as with UDP. */
	CHECK_OK(rconnect(b, (struct sockaddr *)&a_name, sizeof(a_name)));
	len = sizeof(peer);
	CHECK_OK(rgetpeername(b, (struct sockaddr *)&peer, &len));
	CHECK_EQ(peer.sin_port, a_name.sin_port);
	iov[0].iov_base = out;
	iov[0].iov_len = 40;
	iov[1].iov_base = out + 40;
	iov[1].iov_len = 60;
	CHECK_EQ(rwritev(b, iov, 2), 100);
	CHECK_EQ(rrecv(a, in, 10, 0), 10);
	CHECK_EQ(memcmp(in, out, 10), 0);
	CHECK_ERR(rrecv(a, in, sizeof(in), MSG_DONTWAIT), EAGAIN);
	CHECK_OK(rclose(a));
	CHECK_OK(rclose(b));

	/* Another process: 50 numbered datagrams, all there, in order. */
	if (split()) {
		int port;

		a = rsocket(AF_INET, SOCK_DGRAM, 0);
		a_name = loop4(0);
		CHECK_OK(rbind(a, (struct sockaddr *)&a_name, sizeof(a_name)));
		len = sizeof(a_name);
		CHECK_OK(rgetsockname(a, (struct sockaddr *)&a_name, &len));
		port = ntohs(a_name.sin_port);
		tell(port);
		for (int i = 0; i < 50; i++) {
			flen = sizeof(from);
			CHECK_EQ(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen), 500);
			CHECK_EQ(in[0], i);
			for (int k = 1; k < 500; k++)
				CHECK_EQ(in[k], pattern(k, i));
		}
		CHECK_EQ(rsendto(a, "done", 4, 0, (struct sockaddr *)&from, flen), 4);
		CHECK_OK(rclose(a));
		join();
	} else {
		int port = hear();

		a_name = loop4(port);
		b = rsocket(AF_INET, SOCK_DGRAM, 0);
		CHECK_OK(rconnect(b, (struct sockaddr *)&a_name, sizeof(a_name)));
		for (int i = 0; i < 50; i++) {
			out[0] = i;
			for (int k = 1; k < 500; k++)
				out[k] = pattern(k, i);
			CHECK_EQ(rsend(b, out, 500, 0), 500);
		}
		CHECK_EQ(rrecv(b, in, sizeof(in), 0), 4);
		CHECK_EQ(memcmp(in, "done", 4), 0);
		CHECK_OK(rclose(b));
		exit(0);
	}
}

/* rdma-core 44's datagram protocol on the wire, against a datagram rsocket:
 * this test plays rdma-core's side with a plain UDP socket and a UD QP of
 * its own on the device of 127.0.0.1. A struct ds_udp_header (tag
 * 0x55555555, version 4, op DATA, length 16, our QP number, our address)
 * in front of a datagram on the rsocket's UDP port delivers the datagram
 * from the UDP socket's address and is answered with op CTRL naming the
 * rsocket's QP; after that the rsocket sends to our QP over UD, Q_Key
 * RDMA_UDP_QKEY, behind a struct ds_header (version 4, length 8, its port
 * and address), and takes our UD datagrams behind the same header. */
#define WIRE_QKEY 0x01234567u

struct wire_ud {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[2 * 2088];
	int gid_index;
	union ibv_gid gid;
};

static void wire_ud_open(struct wire_ud *w)
{
	static const uint8_t lo[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 };
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;

	CHECK(list);
	w->ctx = NULL;
	for (int d = 0; list[d] && !w->ctx; d++) {
		struct ibv_context *c = ibv_open_device(list[d]);

		if (!c)
			continue;
		for (int i = 0; i < 16; i++) {
			if (!ibv_query_gid(c, 1, i, &w->gid) && !memcmp(w->gid.raw, lo, 16)) {
				w->ctx = c;
				w->gid_index = i;
				break;
			}
		}
		if (!w->ctx)
			ibv_close_device(c);
	}
	ibv_free_device_list(list);
	if (!w->ctx)
		failf(__LINE__, "no device with the GID of 127.0.0.1");
	CHECK(w->pd = ibv_alloc_pd(w->ctx));
	CHECK(w->cq = ibv_create_cq(w->ctx, 8, NULL, NULL, 0));
	CHECK(w->mr = ibv_reg_mr(w->pd, w->buf, sizeof(w->buf), IBV_ACCESS_LOCAL_WRITE));
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = w->cq;
	ia.qp_type = IBV_QPT_UD;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 2;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	CHECK(w->qp = ibv_create_qp(w->pd, &ia));
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	qa.qkey = WIRE_QKEY;
	CHECK_OK(ibv_modify_qp(w->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
	qa.qp_state = IBV_QPS_RTR;
	CHECK_OK(ibv_modify_qp(w->qp, &qa, IBV_QP_STATE));
	qa.qp_state = IBV_QPS_RTS;
	qa.sq_psn = 0;
	CHECK_OK(ibv_modify_qp(w->qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

/* One completion, waited for with a bound (the CQ is polled: a condition,
 * not a timed sleep). */
static struct ibv_wc wire_ud_wait(struct wire_ud *w)
{
	struct ibv_wc wc;
	double t0 = now();
	int n;

	while ((n = ibv_poll_cq(w->cq, 1, &wc)) == 0) {
		if (now() - t0 > 10)
			failf(__LINE__, "no completion in 10 s");
		sched_yield();
	}
	CHECK_EQ(n, 1);
	if (wc.status != IBV_WC_SUCCESS)
		failf(__LINE__, "completion status %d", wc.status);
	return wc;
}

static void case_dgram_wire(void)
{
	struct sockaddr_in a_name = loop4(0), u_name = loop4(0), from;
	socklen_t len = sizeof(a_name), flen;
	uint8_t msg[64], in[64];
	struct wire_ud w;
	struct pollfd pfd;
	uint32_t a_qpn;
	int a, u;

	wire_ud_open(&w);
	a = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(a >= 0);
	CHECK_OK(rbind(a, (struct sockaddr *)&a_name, sizeof(a_name)));
	CHECK_OK(rgetsockname(a, (struct sockaddr *)&a_name, &len));
	u = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(u >= 0);
	CHECK_OK(bind(u, (struct sockaddr *)&u_name, sizeof(u_name)));
	len = sizeof(u_name);
	CHECK_OK(getsockname(u, (struct sockaddr *)&u_name, &len));

	/* Garbage on the rsocket's port is dropped. */
	CHECK_EQ(sendto(u, "junk-not-a-header", 17, 0, (struct sockaddr *)&a_name, sizeof(a_name)), 17);

	/* DATA: the datagram arrives from our UDP address... */
	memset(msg, 0, sizeof(msg));
	memcpy(msg, "\x55\x55\x55\x55\x04\x00\x10\x00", 8);
	msg[8] = 0;
	msg[9] = (w.qp->qp_num >> 16) & 0xff;
	msg[10] = (w.qp->qp_num >> 8) & 0xff;
	msg[11] = w.qp->qp_num & 0xff;
	memcpy(msg + 12, "\x7f\x00\x00\x01", 4);
	memcpy(msg + 16, "hello", 5);
	CHECK_EQ(sendto(u, msg, 21, 0, (struct sockaddr *)&a_name, sizeof(a_name)), 21);
	flen = sizeof(from);
	CHECK_EQ(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen), 5);
	CHECK_EQ(memcmp(in, "hello", 5), 0);
	CHECK_EQ(from.sin_port, u_name.sin_port);
	CHECK_EQ(from.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

	/* ...and is answered with CTRL naming the rsocket's QP. */
	pfd.fd = u;
	pfd.events = POLLIN;
	CHECK_EQ(poll(&pfd, 1, 10000), 1);
	flen = sizeof(from);
	CHECK_EQ(recvfrom(u, in, sizeof(in), 0, (struct sockaddr *)&from, &flen), 16);
	CHECK_EQ(from.sin_port, a_name.sin_port);
	CHECK_EQ(memcmp(in, "\x55\x55\x55\x55\x04\x07\x10\x00", 8), 0);
	a_qpn = ((uint32_t)in[8] << 24) | (in[9] << 16) | (in[10] << 8) | in[11];
	CHECK(a_qpn != 0 && a_qpn <= 0xffffff);
	CHECK_EQ(memcmp(in + 12, "\x7f\x00\x00\x01", 4), 0);

	/* The rsocket sends to our QP over UD now, behind a ds_header. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)w.buf, .length = 2088, .lkey = w.mr->lkey,
	};
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad;
	CHECK_OK(ibv_post_recv(w.qp, &rwr, &rbad));
	CHECK_EQ(rsendto(a, "back", 4, 0, (struct sockaddr *)&u_name, sizeof(u_name)), 4);
	struct ibv_wc wc = wire_ud_wait(&w);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(wc.byte_len, 40 + 8 + 4);
	CHECK_EQ(wc.src_qp, a_qpn);
	CHECK_EQ(memcmp(w.buf + 40, "\x04\x08", 2), 0);
	CHECK_EQ(memcmp(w.buf + 42, &a_name.sin_port, 2), 0);
	CHECK_EQ(memcmp(w.buf + 44, "\x7f\x00\x00\x01" "back", 8), 0);

	/* And takes ours: the sender is the address in our ds_header. */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = w.gid;
	aa.grh.sgid_index = w.gid_index;
	aa.grh.hop_limit = 64;
	struct ibv_ah *ah = ibv_create_ah(w.pd, &aa);
	CHECK(ah);
	uint8_t *out = w.buf + 2088;
	memcpy(out, "\x04\x08", 2);
	memcpy(out + 2, &u_name.sin_port, 2);
	memcpy(out + 4, "\x7f\x00\x00\x01" "ud-in", 9);
	struct ibv_sge ssge = { .addr = (uintptr_t)out, .length = 13, .lkey = w.mr->lkey };
	struct ibv_send_wr swr, *sbad;
	memset(&swr, 0, sizeof(swr));
	swr.wr_id = 2;
	swr.sg_list = &ssge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = a_qpn;
	swr.wr.ud.remote_qkey = WIRE_QKEY;
	CHECK_OK(ibv_post_send(w.qp, &swr, &sbad));
	CHECK_EQ(wire_ud_wait(&w).wr_id, 2);
	flen = sizeof(from);
	CHECK_EQ(rrecvfrom(a, in, sizeof(in), 0, (struct sockaddr *)&from, &flen), 5);
	CHECK_EQ(memcmp(in, "ud-in", 5), 0);
	CHECK_EQ(from.sin_port, u_name.sin_port);
	CHECK_EQ(from.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

	CHECK_OK(rclose(a));
	close(u);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(w.qp);
	ibv_dereg_mr(w.mr);
	ibv_destroy_cq(w.cq);
	ibv_dealloc_pd(w.pd);
	ibv_close_device(w.ctx);
}

/* rpoll as `rstream -T a` uses it: a non-blocking listener and
 * non-blocking connects, every wait an rpoll. rpoll never fails here, and a
 * call that succeeds leaves errno as the caller set it (rstream prints
 * errno after an rpoll that reported POLLERR/POLLHUP: a stale EAGAIN from
 * inside rpoll read as "rpoll: Resource temporarily unavailable"). */
#define ASYNC_ROUNDS 40
#define SENTINEL EDOM

/* Waits for `events` on `fd` through rpoll; its revents. */
static short await_poll(int line, int fd, short events)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	double t0 = now();
	int r;

	do {
		pfd.revents = 0;
		errno = SENTINEL;
		r = rpoll(&pfd, 1, 1000);
		if (r < 0)
			failf(line, "rpoll returned %d", r);
		if (errno != SENTINEL)
			failf(line, "rpoll returned %d and changed errno to %d", r, errno);
	} while (r == 0 && now() - t0 < 15);
	if (r != 1)
		failf(line, "rpoll returned %d after 15 s", r);
	if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))
		failf(line, "rpoll revents 0x%x", pfd.revents);
	return pfd.revents;
}

static void async_send(int s, const char *m)
{
	size_t off = 0;

	while (off < 4) {
		await_poll(__LINE__, s, POLLOUT);
		ssize_t n = rsend(s, m + off, 4 - off, 0);
		if (n < 0 && errno != EAGAIN)
			failf(__LINE__, "rsend");
		if (n > 0)
			off += n;
	}
}

static void async_recv(int s, const char *m)
{
	char b[4];
	size_t off = 0;

	while (off < 4) {
		await_poll(__LINE__, s, POLLIN);
		ssize_t n = rrecv(s, b + off, 4 - off, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			failf(__LINE__, "rrecv returned %zd after %zu bytes", n, off);
		if (n > 0)
			off += n;
	}
	CHECK_EQ(memcmp(b, m, 4), 0);
}

static void case_async(void)
{
	int port, l, s, i;

	if (split()) {
		l = listener(&port);
		CHECK_OK(rfcntl(l, F_SETFL, O_NONBLOCK));
		tell(port);
		for (i = 0; i < ASYNC_ROUNDS; i++) {
			do {
				await_poll(__LINE__, l, POLLIN);
				s = raccept(l, NULL, NULL);
				if (s < 0 && errno != EAGAIN)
					failf(__LINE__, "raccept");
			} while (s < 0);
			CHECK_OK(rfcntl(s, F_SETFL, O_NONBLOCK));
			async_recv(s, "ping");
			async_send(s, "pong");
			async_recv(s, "done");
			CHECK_OK(rclose(s));
		}
		CHECK_OK(rclose(l));
		join();
	} else {
		struct sockaddr_in sin;
		socklen_t len;
		int err, r;

		port = hear();
		sin = loop4(port);
		for (i = 0; i < ASYNC_ROUNDS; i++) {
			s = rsocket(AF_INET, SOCK_STREAM, 0);
			CHECK(s >= 0);
			CHECK_OK(rfcntl(s, F_SETFL, O_NONBLOCK));
			errno = 0;
			r = rconnect(s, (struct sockaddr *)&sin, sizeof(sin));
			if (r != 0 && errno != EINPROGRESS)
				failf(__LINE__, "rconnect returned %d", r);
			await_poll(__LINE__, s, POLLOUT);
			len = sizeof(err);
			CHECK_OK(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len));
			CHECK_EQ(err, 0);
			async_send(s, "ping");
			async_recv(s, "pong");
			async_send(s, "done");
			CHECK_OK(rclose(s));
		}
		exit(0);
	}
}

struct tcase {
	const char *name;
	void (*fn)(void);
};

static const struct tcase cases[] = {
	{ "create", case_create },
	{ "options", case_options },
	{ "refused", case_refused },
	{ "transfer", case_transfer },
	{ "shutdown", case_shutdown },
	{ "peer_close", case_peer_close },
	{ "peer_killed", case_peer_killed },
	{ "poll", case_poll },
	{ "async", case_async },
	{ "iomap", case_iomap },
	{ "dgram", case_dgram },
	{ "dgram_wire", case_dgram_wire },
};

static int run(const struct tcase *c)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		case_name = c->name;
		alarm(CASE_SECONDS);
		c->fn();
		exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("ok %s\n", c->name);
		return 0;
	}
	printf("FAIL %s (status 0x%x)\n", c->name, st);
	return 1;
}

int main(int argc, char **argv)
{
	size_t n = sizeof(cases) / sizeof(cases[0]);
	int failed = 0;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "-l")) {
		for (size_t i = 0; i < n; i++)
			puts(cases[i].name);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		int chosen = argc == 1;

		for (int a = 1; a < argc; a++)
			chosen |= !strcmp(argv[a], cases[i].name);
		if (chosen)
			failed += run(&cases[i]);
	}
	return failed ? 1 : 0;
}
