/*
 * Shared helpers of the verbs conformance programs (ctests/src/verbs_*.c).
 *
 * The Makefile turns every ctests/src/<name>.c into its own program, so the
 * helpers live here, below common/, and each program is one translation
 * unit that starts with
 *
 *	#include "common/verbs_util.c"
 *
 * Case runner: every case runs in a child process of its own (fork before
 * any verb is called), so a crash, a hang or a failed CHECK in one case is
 * reported as that case's failure and the remaining cases still run. The
 * parent prints "ok <case>" or "FAIL <case> (...)" and exits 0 only when
 * every selected case passed. Arguments select cases by name; VT_NOFORK=1
 * runs the cases in-process (for a debugger; the first failure ends the
 * program).
 *
 * Every wait is bounded: completions are polled against a deadline
 * (VT_POLL_MS), a case has VT_CASE_SECONDS before its alarm fires, and the
 * program stops starting cases after VT_PROGRAM_BUDGET seconds so that it
 * reports before the 60 s limit of ctests/tests/verbs_conformance.sh.
 *
 * Memory that a peer can write (MRs, receive buffers) is always taken from
 * the heap, never the stack: after a failure nothing must land in a frame
 * that has been reused.
 */
#ifndef VERBS_UTIL_H
#define VERBS_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VT_DEVICE "rsw_lo"
#define VT_PORT 1
/* Longest wait for one expected completion or event. */
#define VT_POLL_MS 5000
/* Backstop for one case; a case that needs longer is broken. */
#define VT_CASE_SECONDS 20
/* Cases are not started after this many seconds of the program's life. */
#define VT_PROGRAM_BUDGET 50

/* ---------------------------------------------------------------------- */
/* Failure reporting                                                       */
/* ---------------------------------------------------------------------- */

/* Prints "file:line: message" and ends the case (exit status 1). */
void vt_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			vt_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond); \
	} while (0)

/* CHECK with an explanation: CHECKF(cond, "fmt", args...). */
#define CHECKF(cond, ...)                                                      \
	do {                                                                   \
		if (!(cond))                                                   \
			vt_fail(__FILE__, __LINE__, __VA_ARGS__);              \
	} while (0)

/* Integer equality; prints both values (decimal and hex). */
#define CHECK_EQ(a, b)                                                         \
	do {                                                                   \
		unsigned long long va_ = (unsigned long long)(a);              \
		unsigned long long vb_ = (unsigned long long)(b);              \
		if (va_ != vb_)                                                \
			vt_fail(__FILE__, __LINE__,                            \
				"CHECK_EQ(%s, %s) failed: %lld (0x%llx) != "   \
				"%lld (0x%llx)",                               \
				#a, #b, (long long)va_, va_, (long long)vb_,   \
				vb_);                                          \
	} while (0)

#define CHECK_GE(a, b)                                                         \
	do {                                                                   \
		long long va_ = (long long)(a), vb_ = (long long)(b);          \
		if (!(va_ >= vb_))                                             \
			vt_fail(__FILE__, __LINE__,                            \
				"CHECK_GE(%s, %s) failed: %lld < %lld", #a,    \
				#b, va_, vb_);                                 \
	} while (0)

/* An int verb that must succeed (0). */
#define CHECK_OK(expr)                                                         \
	do {                                                                   \
		errno = 0;                                                     \
		int r_ = (expr);                                               \
		if (r_ != 0)                                                   \
			vt_fail(__FILE__, __LINE__,                            \
				"%s returned %d (%s), errno %d (%s)", #expr,   \
				r_, r_ > 0 ? strerror(r_) : "-", errno,        \
				strerror(errno));                              \
	} while (0)

/* An int verb that must fail with the positive errno `err` as its value. */
#define CHECK_RET(expr, err)                                                   \
	do {                                                                   \
		int r_ = (expr);                                               \
		if (r_ != (err))                                               \
			vt_fail(__FILE__, __LINE__,                            \
				"%s returned %d (%s), expected %d (%s)",       \
				#expr, r_, r_ > 0 ? strerror(r_) : "-",        \
				(err), strerror(err));                         \
	} while (0)

/* A constructor that must fail: NULL with errno == err. */
#define CHECK_NULL_ERRNO(expr, err)                                            \
	do {                                                                   \
		errno = 0;                                                     \
		const void *p_ = (const void *)(expr);                         \
		int e_ = errno;                                                \
		if (p_ != NULL)                                                \
			vt_fail(__FILE__, __LINE__,                            \
				"%s returned %p, expected NULL with errno %s", \
				#expr, p_, strerror(err));                     \
		if (e_ != (err))                                               \
			vt_fail(__FILE__, __LINE__,                            \
				"%s: NULL with errno %d (%s), expected %d "    \
				"(%s)",                                        \
				#expr, e_, strerror(e_), (err),                \
				strerror(err));                                \
	} while (0)

/* A pointer that must not be NULL; prints errno otherwise. */
#define CHECK_PTR(expr)                                                        \
	({                                                                     \
		errno = 0;                                                     \
		__typeof__(expr) p_ = (expr);                                  \
		if (p_ == NULL)                                                \
			vt_fail(__FILE__, __LINE__,                            \
				"%s returned NULL, errno %d (%s)", #expr,      \
				errno, strerror(errno));                       \
		p_;                                                            \
	})

/* A work completion with the given status and opcode. */
#define CHECK_WC(wc, st, op)                                                   \
	vt_check_wc(__FILE__, __LINE__, (wc), (st), (op), #st, #op)
/* A work completion with the given status; opcode not checked. */
#define CHECK_WC_STATUS(wc, st)                                                \
	vt_check_wc(__FILE__, __LINE__, (wc), (st), -1, #st, "-")

void vt_check_wc(const char *file, int line, const struct ibv_wc *wc,
		 enum ibv_wc_status status, int opcode, const char *sname,
		 const char *oname);
const char *vt_wc_opcode_name(int opcode);

/* ---------------------------------------------------------------------- */
/* Case runner                                                             */
/* ---------------------------------------------------------------------- */

struct vt_case {
	const char *name;
	void (*fn)(void);
};
#define VT_CASE(f) { #f, f }

int vt_run(int argc, char **argv, const struct vt_case *cases, size_t n);
#define VT_MAIN(cases)                                                         \
	int main(int argc, char **argv)                                        \
	{                                                                      \
		return vt_run(argc, argv, cases,                               \
			      sizeof(cases) / sizeof((cases)[0]));             \
	}

/*
 * Arms the alarm that ends the calling process after `seconds`, printing
 * `what`. A forked grandchild must call it itself (alarms are not
 * inherited). vt_alarm(0, NULL) disarms.
 */
void vt_alarm(unsigned seconds, const char *what);

/* ---------------------------------------------------------------------- */
/* Time and memory                                                         */
/* ---------------------------------------------------------------------- */

uint64_t vt_now_ms(void);
/* Page-aligned, zeroed heap memory; ends the case on failure. */
void *vt_alloc(size_t len);
/* Fills with a pattern that depends on `seed` and the offset. */
void vt_fill(void *p, size_t len, unsigned seed);
/* The byte vt_fill(_, _, seed) puts at offset `off`. */
uint8_t vt_pattern_byte(unsigned seed, size_t off);
/* Index of the first byte that differs from `c`, or -1. */
long vt_find_not(const void *p, size_t len, uint8_t c);
/* Fails the case when p[0..len) differs from q[0..len), naming the offset. */
#define CHECK_MEM(p, q, len)                                                   \
	vt_check_mem(__FILE__, __LINE__, (p), (q), (len), #p, #q)
/* Fails the case when some byte of p[0..len) is not c. */
#define CHECK_BYTES(p, c, len)                                                 \
	vt_check_bytes(__FILE__, __LINE__, (p), (c), (len), #p)
void vt_check_mem(const char *file, int line, const void *p, const void *q,
		  size_t len, const char *pn, const char *qn);
void vt_check_bytes(const char *file, int line, const void *p, uint8_t c,
		    size_t len, const char *pn);

/* ---------------------------------------------------------------------- */
/* Devices, QPs, connections                                               */
/* ---------------------------------------------------------------------- */

/* The loopback device, GID index 0 (::ffff:127.0.0.1). */
struct vt_env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	struct ibv_device_attr dev;
};

/* Finds VT_DEVICE in the device list; ends the case when it is absent. */
struct ibv_device *vt_find_device(struct ibv_device **list, int n);
struct ibv_context *vt_open_lo(void);
void vt_env_open(struct vt_env *e);

struct vt_qp_opts {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
	uint32_t max_inline_data;
	int sq_sig_all;
	int access;		/* qp_access_flags at RESET->INIT */
	uint8_t min_rnr_timer;	/* responder side, at INIT->RTR */
	uint8_t rnr_retry;	/* requester side, at RTR->RTS */
	uint8_t retry_cnt;
	uint8_t timeout;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint32_t psn;		/* our sq_psn and the peer's rq_psn */
	enum ibv_mtu path_mtu;
	/* nonzero: created by ibv_create_qp_ex with SEND_OPS_FLAGS */
	uint64_t send_ops_flags;
};
void vt_default_opts(struct vt_qp_opts *o);

/* An RC QP in RESET; `cap` (optional) receives the capabilities granted. */
struct ibv_xrcd *vt_open_xrcd(struct ibv_context *ctx, int fd, int oflags);
void vt_xrc_modify(struct ibv_qp *qp, uint32_t dest, struct vt_env *e,
		   int tgt);
struct ibv_qp *vt_create_qp(struct ibv_pd *pd, struct ibv_cq *scq,
			    struct ibv_cq *rcq, const struct vt_qp_opts *o,
			    struct ibv_qp_cap *cap);
void vt_qp_to_init(struct ibv_qp *qp, const struct vt_qp_opts *o);
void vt_qp_to_rtr(struct ibv_qp *qp, uint32_t dest_qpn,
		  const union ibv_gid *dgid, const struct vt_qp_opts *o);
void vt_qp_to_rts(struct ibv_qp *qp, const struct vt_qp_opts *o);
/* RESET -> INIT -> RTR -> RTS towards (dgid, dest_qpn). */
void vt_qp_connect(struct ibv_qp *qp, uint32_t dest_qpn,
		   const union ibv_gid *dgid, const struct vt_qp_opts *o);
enum ibv_qp_state vt_qp_state(struct ibv_qp *qp);

/*
 * Two RC QPs of one process connected to each other on the loopback
 * device: `a` is normally the requester, `b` the responder. Each QP has one
 * CQ for both of its queues (cq_a, cq_b).
 */
struct vt_pair {
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	struct ibv_qp_cap cap_a, cap_b;
};
/* `o` may be NULL (defaults); cqe 0 means 256. */
void vt_pair_create(struct vt_env *e, struct vt_pair *p,
		    const struct vt_qp_opts *o, int cqe);

/* A registered buffer from vt_alloc. */
struct vt_buf {
	uint8_t *p;
	size_t len;
	struct ibv_mr *mr;
};
void vt_buf_reg(struct vt_env *e, struct vt_buf *b, size_t len, int access);
#define VT_ACCESS_ALL                                                          \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ---------------------------------------------------------------------- */
/* Posting and polling                                                     */
/* ---------------------------------------------------------------------- */

struct ibv_sge vt_sge(const void *addr, uint32_t len, uint32_t lkey);
/* A send WR with one (or no, when sge is NULL) gather element. */
struct ibv_send_wr vt_send_wr(uint64_t wr_id, enum ibv_wr_opcode op,
			      struct ibv_sge *sge, unsigned flags);
/* Posts one WR list; the post must succeed. */
void vt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr);
void vt_post_recv(struct ibv_qp *qp, uint64_t wr_id, const void *addr,
		  uint32_t len, uint32_t lkey);

/* Collects up to n completions until the deadline; returns how many. */
int vt_poll_cq_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms);
/* Exactly n completions within VT_POLL_MS (ends the case otherwise). */
#define vt_poll(cq, wc, n) vt_poll_at(__FILE__, __LINE__, (cq), (wc), (n))
void vt_poll_at(const char *file, int line, struct ibv_cq *cq,
		struct ibv_wc *wc, int n);
/* The CQ holds no completion right now. */
#define CHECK_CQ_EMPTY(cq) vt_check_cq_empty(__FILE__, __LINE__, (cq), #cq)
void vt_check_cq_empty(const char *file, int line, struct ibv_cq *cq,
		       const char *name);
/* No completion arrives within `ms` (a bounded wait for an absence). */
#define CHECK_NO_WC_FOR(cq, ms)                                                \
	vt_check_no_wc_for(__FILE__, __LINE__, (cq), (ms), #cq)
void vt_check_no_wc_for(const char *file, int line, struct ibv_cq *cq, int ms,
			const char *name);

/* Writes/reads exactly len bytes (pipes between processes). */
void vt_write_all(int fd, const void *p, size_t len);
void vt_read_all(int fd, void *p, size_t len);

#endif
