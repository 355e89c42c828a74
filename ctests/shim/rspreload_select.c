/*
 * rspreload_select.so: preloaded ahead of Debian's (rdma-core 44's)
 * librspreload.so so that a program waiting in select(2) sees its accepted
 * rsockets become ready at all.
 *
 * librspreload's select() hands rpoll() the rsocket numbers of the sets'
 * descriptors, then maps each result back (rpoll_to_select) by walking the
 * descriptors upward from 0 and taking the first one whose fd_getd() equals
 * the entry's rsocket number. fd_getd() of a descriptor that is not one of
 * its sockets is the descriptor itself, and an rsocket's number is a real
 * descriptor (its CM event channel's). With rdma-core's librdmacm as the
 * server, an accepted rsocket's channel is opened by its listen thread when
 * the connection arrives, before accept() opens the application's
 * descriptor for it; so that number is the lower one, the walk meets it
 * first, and the readiness is reported on the rsocket's own number, a
 * descriptor the application never asked about. iperf3 as server then
 * never reads (nor, with -R, writes) its data stream, whatever the client;
 * Debian's client against Debian's server hangs the same way.
 *
 * This select() does the same over librspreload's poll(), which maps each
 * entry back by its index. Nothing else changes: the VM case
 * kcm/iperf3-rxe0-debian-ours runs Debian's server under it (see
 * ctests/vm/guest-tests.sh).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/select.h>

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	   struct timeval *timeout)
{
	static poll_fn next_poll;
	struct pollfd *fds;
	int fd, n = 0, ret, cnt = 0, ms;

	if (!next_poll)
		next_poll = (poll_fn)dlsym(RTLD_NEXT, "poll");
	if (!next_poll) {
		errno = ENOSYS;
		return -1;
	}
	if (nfds < 0 || nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	fds = calloc(nfds ? nfds : 1, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	if (!timeout)
		ms = -1;
	else
		ms = timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000;

	ret = next_poll(fds, n, ms);
	if (ret < 0) {
		int e = errno;

		free(fds);
		errno = e;
		return ret;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	for (int i = 0; i < n && ret > 0; i++) {
		short re = fds[i].revents;

		if (re & POLLNVAL) {
			free(fds);
			errno = EBADF;
			return -1;
		}
		if ((fds[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(fds[i].fd, readfds);
			cnt++;
		}
		if ((fds[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
			FD_SET(fds[i].fd, writefds);
			cnt++;
		}
		if ((fds[i].events & POLLPRI) && (re & POLLPRI)) {
			FD_SET(fds[i].fd, exceptfds);
			cnt++;
		}
	}
	free(fds);
	return cnt;
}
