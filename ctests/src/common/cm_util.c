/*
 * Shared by the librdmacm C tests (#included, like verbs_util.c): failure
 * reports naming the case and line, the CHECK macros, and waiting for CM
 * events with a bound. The includer defines EVENT_MS (the longest wait for
 * one expected event) before including this file.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <rdma/rdma_cma.h>

#ifndef EVENT_MS
#error "define EVENT_MS before including cm_util.c"
#endif

static const char *case_name = "?";

static void failf(int line, const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fprintf(stderr, "  %s: line %d: ", case_name, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d: %s)\n", e, strerror(e));
	exit(1);
}

#define CHECK(cond) \
	do { if (!(cond)) failf(__LINE__, "check failed: %s", #cond); } while (0)
#define CHECK_EQ(a, b) \
	do { long long _a = (long long)(a), _b = (long long)(b); \
	     if (_a != _b) failf(__LINE__, "%s == %lld, expected %s == %lld", #a, _a, #b, _b); \
	} while (0)
/* A call that must fail with -1 and the given errno. */
#define CHECK_ERR(call, err) \
	do { errno = 0; int _r = (call); \
	     if (_r != -1 || errno != (err)) \
		failf(__LINE__, "%s returned %d errno %d, expected -1 errno %d (%s)", \
		      #call, _r, errno, (err), strerror(err)); \
	} while (0)
#define CHECK_OK(call) \
	do { errno = 0; int _r = (call); \
	     if (_r != 0) failf(__LINE__, "%s returned %d", #call, _r); } while (0)

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* ---- CM helpers ---------------------------------------------------------- */

/* The next event within `ms`, or NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;

	if (poll(&pfd, 1, ms) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

static struct rdma_cm_event *expect_at(int line, struct rdma_event_channel *ch,
				       enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch, EVENT_MS);

	if (!ev)
		failf(line, "no %s within %d ms", rdma_event_str(want), EVENT_MS);
	if (ev->event != want)
		failf(line, "got %s (status %d), expected %s", rdma_event_str(ev->event),
		      ev->status, rdma_event_str(want));
	return ev;
}
#define expect(ch, want) expect_at(__LINE__, ch, want)
#define expect_ack(ch, want) CHECK_OK(rdma_ack_cm_event(expect(ch, want)))

/* True if nothing is readable on the channel for `ms`. */
static int channel_quiet(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };

	return poll(&pfd, 1, ms) == 0;
}

/* ---- the case runner ----------------------------------------------------- */

#ifndef CASE_SECONDS
#error "define CASE_SECONDS before including cm_util.c"
#endif

struct cm_case {
	const char *name;
	void (*fn)(void);
};

static int selected(int argc, char **argv, const char *name)
{
	if (argc < 2)
		return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

/* Runs the cases named on the command line (all without any; `-l` lists
 * them), each in a child process of its own with an alarm. */
static int run_cases(const struct cm_case *cases, unsigned n, int argc, char **argv)
{
	int failed = 0, ran = 0;

	if (argc == 2 && !strcmp(argv[1], "-l")) {
		for (unsigned i = 0; i < n; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (unsigned i = 0; i < n; i++) {
		int st;
		pid_t pid;

		if (!selected(argc, argv, cases[i].name))
			continue;
		ran++;
		fflush(stdout);
		fflush(stderr);
		pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			/* Our own process group, so a stuck grandchild dies with us. */
			setpgid(0, 0);
			case_name = cases[i].name;
			alarm(CASE_SECONDS);
			cases[i].fn();
			exit(0);
		}
		if (waitpid(pid, &st, 0) != pid) {
			perror("waitpid");
			return 1;
		}
		kill(-pid, SIGKILL);	/* leftovers of a failed two-process case */
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			printf("ok %s\n", cases[i].name);
		} else {
			failed++;
			if (WIFSIGNALED(st))
				printf("FAIL %s (killed by signal %d%s)\n", cases[i].name,
				       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? ": timed out" : "");
			else
				printf("FAIL %s (exit status %d)\n", cases[i].name, WEXITSTATUS(st));
		}
	}
	if (!ran) {
		fprintf(stderr, "no such case\n");
		return 2;
	}
	printf("%d of %d cases passed\n", ran - failed, ran);
	return failed ? 1 : 0;
}
