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
#include <time.h>

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
