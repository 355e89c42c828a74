/*
 * Fault-tolerant access to registered memory, for the progress engine.
 *
 * Real hardware pins registered pages, so a peer's WRITE, atomic or SEND
 * can never crash the target; here the memory stays the application's,
 * which can unmap it (or never had it mapped). The kernel already turns a
 * bad address in recvmsg/sendmsg into EFAULT; the few accesses made in
 * user space (the tail of a message, atomics, atomic results) go through
 * these functions, which return -1 instead of dying on SIGSEGV/SIGBUS.
 *
 * How: a per-thread jump buffer is armed around the access, and a
 * SIGSEGV/SIGBUS handler jumps back when the faulting thread has one
 * armed. Any other fault goes to the handler that was installed before
 * ours, or to the default action, as if we were not there. No system call
 * on the fast path: sigsetjmp does not save the signal mask, and the
 * handler runs with SA_NODEFER so jumping out leaves the mask as it was.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Static TLS: the handler may read it on any thread without allocating. */
static __thread sigjmp_buf *armed __attribute__((tls_model("initial-exec")));
static struct sigaction prev_segv, prev_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define BARRIER() __asm__ __volatile__("" ::: "memory")

static void pass_on(int sig, siginfo_t *si, void *uc)
{
	struct sigaction *p = sig == SIGSEGV ? &prev_segv : &prev_bus;

	if (p->sa_flags & SA_SIGINFO) {
		p->sa_sigaction(sig, si, uc);
		return;
	}
	if (p->sa_handler == SIG_DFL || p->sa_handler == SIG_IGN) {
		/* The faulting instruction runs again and takes the default
		 * action (a synchronous fault cannot be ignored). */
		signal(sig, SIG_DFL);
		return;
	}
	p->sa_handler(sig);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = armed;

	if (jb && si->si_code > 0) {
		armed = NULL;
		siglongjmp(*jb, 1);
	}
	pass_on(sig, si, uc);
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &prev_segv);
	sigaction(SIGBUS, &sa, &prev_bus);
}

HIDDEN void rsw_guard_install(void)
{
	pthread_once(&once, install);
}

HIDDEN int rsw_guard_copy(void *dst, const void *src, size_t n)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 0))
		return -1;
	armed = &jb;
	BARRIER();
	memcpy(dst, src, n);
	BARRIER();
	armed = NULL;
	return 0;
}

HIDDEN int rsw_guard_cas64(uint64_t *p, uint64_t cmp, uint64_t swap, uint64_t *orig)
{
	sigjmp_buf jb;
	uint64_t seen = cmp;

	if (sigsetjmp(jb, 0))
		return -1;
	armed = &jb;
	BARRIER();
	__atomic_compare_exchange_n(p, &seen, swap, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	BARRIER();
	armed = NULL;
	*orig = seen;
	return 0;
}

HIDDEN int rsw_guard_fadd64(uint64_t *p, uint64_t add, uint64_t *orig)
{
	sigjmp_buf jb;
	uint64_t seen;

	if (sigsetjmp(jb, 0))
		return -1;
	armed = &jb;
	BARRIER();
	seen = __atomic_fetch_add(p, add, __ATOMIC_SEQ_CST);
	BARRIER();
	armed = NULL;
	*orig = seen;
	return 0;
}

/* Reads one byte of every page of [p, p + n): whether all of it is mapped
 * and readable, without copying it. */
HIDDEN int rsw_guard_touch(const void *p, size_t n)
{
	sigjmp_buf jb;
	const volatile unsigned char *b = p;
	size_t off;

	if (n == 0)
		return 0;
	if (sigsetjmp(jb, 0))
		return -1;
	armed = &jb;
	BARRIER();
	(void)b[0];
	for (off = 4096 - ((uintptr_t)p & 4095); off < n; off += 4096)
		(void)b[off];
	(void)b[n - 1];
	BARRIER();
	armed = NULL;
	return 0;
}
