/*
 * rsw-stat [PID...]
 *
 * Prints the rsw provider's counters of running processes: per device
 * (every QP the process had on it, destroyed ones included) and per live
 * QP, one "name value" line each (see providers/rsw/src/stats.rs for the
 * names). The process answers on the abstract Unix socket
 * "@rsw-stat.<pid>", opened by its progress thread when it opens its first
 * rsw device; nothing is computed or written while nobody asks.
 *
 * Without a PID, every process of this network namespace that answers is
 * shown, each report starting with its "pid N" line.
 *
 * Exit status: 0 when every PID answered, 1 when one did not (not running,
 * no rsw device open, or another user's), 2 for bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static int show(unsigned long pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rsw-stat.%lu", pid);
	socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 + n;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { .tv_sec = 5 };
	char buf[65536];
	ssize_t k;

	if (fd < 0) {
		perror("rsw-stat: socket");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		fprintf(stderr, "rsw-stat: process %lu does not answer (%s): "
			"not running, no rsw device open, or in another network namespace\n",
			pid, strerror(errno));
		close(fd);
		return 1;
	}
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)k, stdout);
	if (k < 0) {
		fprintf(stderr, "rsw-stat: process %lu: %s\n", pid, strerror(errno));
		close(fd);
		return 1;
	}
	close(fd);
	return 0;
}

/* Every "@rsw-stat.<pid>" listener in /proc/net/unix. */
static int show_all(void)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	int rc = 0, any = 0;

	if (!f) {
		perror("rsw-stat: /proc/net/unix");
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, " @rsw-stat.");
		char *end;
		unsigned long pid;

		if (!p)
			continue;
		pid = strtoul(p + strlen(" @rsw-stat."), &end, 10);
		if (end == p + strlen(" @rsw-stat.") || (*end != '\n' && *end != '\0'))
			continue;
		/* Listening sockets only (state 01 with the listen flag). */
		if (!strstr(line, " 00010000 "))
			continue;
		any = 1;
		rc |= show(pid);
	}
	fclose(f);
	if (!any)
		fprintf(stderr, "rsw-stat: no process has an rsw device open\n");
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: rsw-stat [PID...]\n"
		       "Prints the rsw counters of the given processes (default: all).\n");
		return 0;
	}
	if (argc == 1)
		return show_all();
	for (int i = 1; i < argc; i++) {
		char *end;
		unsigned long pid = strtoul(argv[i], &end, 10);

		if (!*argv[i] || *end || pid == 0) {
			fprintf(stderr, "rsw-stat: `%s` is not a process id\n", argv[i]);
			return 2;
		}
		rc |= show(pid);
	}
	return rc;
}
