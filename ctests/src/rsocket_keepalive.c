/*
 * rsocket keepalive against a peer that stops answering: the client sends
 * its pid and then waits; the server freezes it (SIGSTOP: its host stays up
 * and its kernel keeps acknowledging TCP, but nothing answers RDMA), checks
 * that without keepalives its idle read notices nothing, then turns
 * SO_KEEPALIVE on with a TCP_KEEPIDLE of 1 s and expects the connection to
 * fail: rpoll reports POLLERR, rrecv the end (or ECONNRESET), rsend fails.
 * Run between two hosts (network namespaces), where the frozen peer's RC
 * acknowledgements stop too.
 *
 *   rsocket_keepalive -s ADDR PORT     server: prints "ok ..." and exits 0
 *   rsocket_keepalive -c ADDR PORT     client: sends its pid, then waits
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rsocket.h>

static pid_t frozen;

static void fail(int line, const char *what)
{
	fprintf(stderr, "rsocket_keepalive:%d: %s (errno %d %s)\n", line, what, errno,
		strerror(errno));
	if (frozen > 0)
		kill(frozen, SIGKILL);
	exit(1);
}

#define CHECK(c) do { if (!(c)) fail(__LINE__, #c); } while (0)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct sockaddr_in address(const char *ip, const char *port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(atoi(port));
	CHECK(inet_pton(AF_INET, ip, &sin.sin_addr) == 1);
	return sin;
}

/* Whether `pid` is stopped (state T in /proc/PID/stat). */
static int stopped(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'T';
}

static int server(struct sockaddr_in sin)
{
	int l, s, v, one = 1, i;
	socklen_t len = sizeof(v);
	struct pollfd pfd;
	int32_t pid;
	uint8_t b[16];
	ssize_t n;
	double t0, dt;

	l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0);
	CHECK(rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	CHECK(rbind(l, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	CHECK(rlisten(l, 1) == 0);
	printf("listening\n");
	fflush(stdout);
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0);
	for (len = 0; len < sizeof(pid);) {
		ssize_t n = rrecv(s, (char *)&pid + len, sizeof(pid) - len, 0);

		CHECK(n > 0);
		len += n;
	}
	CHECK(pid > 1);

	/* TCP_KEEPIDLE reads 0 until keepalives are on, and refuses 0. */
	v = -1;
	len = sizeof(v);
	CHECK(rgetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len) == 0);
	CHECK(v == 0);
	v = 0;
	CHECK(rsetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)) == -1 && errno == EINVAL);

	frozen = pid;
	CHECK(kill(pid, SIGSTOP) == 0);
	for (i = 0; i < 200 && !stopped(pid); i++)
		usleep(10000);	/* polling a condition with a bound */
	CHECK(stopped(pid));

	/* Without keepalives an idle reader learns nothing. */
	pfd.fd = s;
	pfd.events = POLLIN;
	CHECK(rpoll(&pfd, 1, 1500) == 0);

	v = 1;
	CHECK(rsetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)) == 0);
	CHECK(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)) == 0);
	v = 0;
	len = sizeof(v);
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, &len) == 0 && v == 1);
	CHECK(rgetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len) == 0 && v == 1);
	t0 = now();
	pfd.revents = 0;
	CHECK(rpoll(&pfd, 1, 30000) == 1);
	dt = now() - t0;
	CHECK(pfd.revents & POLLERR);
	/* Not before the first keepalive could go out. */
	CHECK(dt >= 0.9);
	/* The connection is over: end of stream, as rdma-core reports it, or
	 * ECONNRESET when the failed write is seen before the flushed
	 * receives; and sends fail. */
	n = rrecv(s, b, sizeof(b), 0);
	CHECK(n == 0 || (n == -1 && errno == ECONNRESET));
	CHECK(rsend(s, b, 1, 0) == -1);
	CHECK(errno == ECONNRESET || errno == EPIPE);
	kill(pid, SIGKILL);
	CHECK(rclose(s) == 0);
	CHECK(rclose(l) == 0);
	printf("ok keepalive: the frozen peer failed the connection %.1f s after keepalives began\n",
	       dt);
	return 0;
}

static int client(struct sockaddr_in sin)
{
	int32_t pid = getpid();
	int s = rsocket(AF_INET, SOCK_STREAM, 0);

	CHECK(s >= 0);
	CHECK(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	CHECK(rsend(s, &pid, sizeof(pid), 0) == sizeof(pid));
	printf("connected\n");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c"))) {
		fprintf(stderr, "usage: %s -s|-c ADDR PORT\n", argv[0]);
		return 2;
	}
	alarm(60);
	if (!strcmp(argv[1], "-s"))
		return server(address(argv[2], argv[3]));
	return client(address(argv[2], argv[3]));
}
