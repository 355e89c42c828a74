/*
 * Shared helpers of the verbs conformance programs; see verbs_util.h for
 * why this file is #included rather than linked.
 */
#include "verbs_util.h"

#include <sched.h>

/* ---------------------------------------------------------------------- */
/* Failure reporting                                                       */
/* ---------------------------------------------------------------------- */

static const char *vt_current_case = "?";

void vt_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s:%d: [%s] ", file, line, vt_current_case);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	/* _exit: the case's objects may be in any state; no teardown. */
	_exit(1);
}

static const char *const vt_wc_opcode_names[] = {
	[IBV_WC_SEND] = "IBV_WC_SEND",
	[IBV_WC_RDMA_WRITE] = "IBV_WC_RDMA_WRITE",
	[IBV_WC_RDMA_READ] = "IBV_WC_RDMA_READ",
	[IBV_WC_COMP_SWAP] = "IBV_WC_COMP_SWAP",
	[IBV_WC_FETCH_ADD] = "IBV_WC_FETCH_ADD",
	[IBV_WC_BIND_MW] = "IBV_WC_BIND_MW",
	[IBV_WC_LOCAL_INV] = "IBV_WC_LOCAL_INV",
};

const char *vt_wc_opcode_name(int opcode)
{
	if (opcode == IBV_WC_RECV)
		return "IBV_WC_RECV";
	if (opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		return "IBV_WC_RECV_RDMA_WITH_IMM";
	if (opcode >= 0 &&
	    (size_t)opcode < sizeof(vt_wc_opcode_names) /
				     sizeof(vt_wc_opcode_names[0]) &&
	    vt_wc_opcode_names[opcode])
		return vt_wc_opcode_names[opcode];
	return "unknown opcode";
}

void vt_check_wc(const char *file, int line, const struct ibv_wc *wc,
		 enum ibv_wc_status status, int opcode, const char *sname,
		 const char *oname)
{
	if (wc->status != status)
		vt_fail(file, line,
			"wc(wr_id %llu): status %d (%s), expected %d (%s) [%s]; "
			"opcode %s, vendor_err %u",
			(unsigned long long)wc->wr_id, wc->status,
			ibv_wc_status_str(wc->status), status,
			ibv_wc_status_str(status), sname,
			vt_wc_opcode_name(wc->opcode), wc->vendor_err);
	if (opcode >= 0 && (int)wc->opcode != opcode)
		vt_fail(file, line,
			"wc(wr_id %llu, %s): opcode %d (%s), expected %d (%s) "
			"[%s]",
			(unsigned long long)wc->wr_id,
			ibv_wc_status_str(wc->status), wc->opcode,
			vt_wc_opcode_name(wc->opcode), opcode,
			vt_wc_opcode_name(opcode), oname);
}

/* ---------------------------------------------------------------------- */
/* Case runner                                                             */
/* ---------------------------------------------------------------------- */

static char vt_alarm_msg[256];

static void vt_on_alarm(int sig)
{
	ssize_t r;

	(void)sig;
	/* write(2) only: we are in a signal handler. */
	r = write(2, vt_alarm_msg, strlen(vt_alarm_msg));
	(void)r;
	_exit(3);
}

void vt_alarm(unsigned seconds, const char *what)
{
	struct sigaction sa;

	if (!seconds) {
		alarm(0);
		return;
	}
	snprintf(vt_alarm_msg, sizeof(vt_alarm_msg),
		 "[%s] TIMEOUT: %s still not done after %u s (alarm)\n",
		 vt_current_case, what ? what : "case", seconds);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = vt_on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	alarm(seconds);
}

static bool vt_selected(int argc, char **argv, const char *name)
{
	if (argc < 2)
		return true;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return true;
	return false;
}

static void vt_run_case_body(const struct vt_case *c)
{
	vt_current_case = c->name;
	vt_alarm(VT_CASE_SECONDS, "case");
	c->fn();
	fflush(stdout);
	fflush(stderr);
}

/* Waits for `pid` up to `seconds`; returns its wait status or -1. */
static int vt_wait_child(pid_t pid, int seconds)
{
	sigset_t set;
	uint64_t deadline = vt_now_ms() + (uint64_t)seconds * 1000;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (;;) {
		int status;
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		uint64_t now = vt_now_ms();
		if (now >= deadline)
			return -1;
		uint64_t left = deadline - now;
		struct timespec ts = { .tv_sec = left / 1000,
				       .tv_nsec = (left % 1000) * 1000000 };
		/* SIGCHLD is blocked: this waits for the child's exit. */
		sigtimedwait(&set, NULL, &ts);
	}
}

int vt_run(int argc, char **argv, const struct vt_case *cases, size_t n)
{
	bool nofork = getenv("VT_NOFORK") && *getenv("VT_NOFORK") == '1';
	uint64_t start = vt_now_ms();
	int failed = 0, passed = 0;
	sigset_t chld, old;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		bool known = false;

		for (size_t k = 0; k < n; k++)
			known |= !strcmp(argv[i], cases[k].name);
		if (!known) {
			fprintf(stderr, "unknown case '%s'; cases:", argv[i]);
			for (size_t k = 0; k < n; k++)
				fprintf(stderr, " %s", cases[k].name);
			fputc('\n', stderr);
			return 2;
		}
	}

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);

	for (size_t k = 0; k < n; k++) {
		const struct vt_case *c = &cases[k];
		char why[160] = "";

		if (!vt_selected(argc, argv, c->name))
			continue;
		if (vt_now_ms() - start > VT_PROGRAM_BUDGET * 1000ULL) {
			printf("FAIL %s (not started: the program's %d s budget "
			       "is used up)\n",
			       c->name, VT_PROGRAM_BUDGET);
			failed++;
			continue;
		}
		if (nofork) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			vt_run_case_body(c);
			vt_alarm(0, NULL);
			printf("ok %s\n", c->name);
			passed++;
			continue;
		}
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			setpgid(0, 0);
			sigprocmask(SIG_SETMASK, &old, NULL);
			vt_run_case_body(c);
			/*
			 * A normal exit runs the libraries' destructors; a
			 * hang there is a failure of this case too.
			 */
			vt_alarm(5, "process exit after the case body");
			exit(0);
		}
		setpgid(pid, pid);
		int status = vt_wait_child(pid, VT_CASE_SECONDS + 10);
		if (status == -1) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			snprintf(why, sizeof(why), "killed after %d s",
				 VT_CASE_SECONDS + 10);
		} else if (WIFEXITED(status)) {
			int rc = WEXITSTATUS(status);

			if (rc == 1)
				snprintf(why, sizeof(why), "check failed");
			else if (rc == 3)
				snprintf(why, sizeof(why), "timed out");
			else if (rc)
				snprintf(why, sizeof(why), "exit status %d",
					 rc);
		} else if (WIFSIGNALED(status)) {
			snprintf(why, sizeof(why), "killed by signal %d (%s)",
				 WTERMSIG(status), strsignal(WTERMSIG(status)));
		}
		/* Leftover helper processes of the case (verbs_2proc). */
		kill(-pid, SIGKILL);
		if (why[0]) {
			printf("FAIL %s (%s)\n", c->name, why);
			failed++;
		} else {
			printf("ok %s\n", c->name);
			passed++;
		}
	}
	printf("# %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

/* ---------------------------------------------------------------------- */
/* Time and memory                                                         */
/* ---------------------------------------------------------------------- */

uint64_t vt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void *vt_alloc(size_t len)
{
	size_t rounded = (len + 4095) & ~(size_t)4095;
	void *p = aligned_alloc(4096, rounded ? rounded : 4096);

	CHECKF(p != NULL, "aligned_alloc(%zu) failed", len);
	memset(p, 0, rounded ? rounded : 4096);
	return p;
}

uint8_t vt_pattern_byte(unsigned seed, size_t off)
{
	uint32_t x = (uint32_t)off * 2654435761u + seed * 40503u + seed;

	return (uint8_t)(x >> 13) ^ (uint8_t)off;
}

void vt_fill(void *p, size_t len, unsigned seed)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = vt_pattern_byte(seed, i);
}

long vt_find_not(const void *p, size_t len, uint8_t c)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != c)
			return (long)i;
	return -1;
}

void vt_check_mem(const char *file, int line, const void *p, const void *q,
		  size_t len, const char *pn, const char *qn)
{
	const uint8_t *a = p, *b = q;

	for (size_t i = 0; i < len; i++)
		if (a[i] != b[i])
			vt_fail(file, line,
				"%s and %s differ at byte %zu of %zu: 0x%02x != "
				"0x%02x",
				pn, qn, i, len, a[i], b[i]);
}

void vt_check_bytes(const char *file, int line, const void *p, uint8_t c,
		    size_t len, const char *pn)
{
	long i = vt_find_not(p, len, c);

	if (i >= 0)
		vt_fail(file, line,
			"%s: byte %ld of %zu is 0x%02x, expected 0x%02x "
			"(memory changed)",
			pn, i, len, ((const uint8_t *)p)[i], c);
}

/* ---------------------------------------------------------------------- */
/* Devices, QPs, connections                                               */
/* ---------------------------------------------------------------------- */

struct ibv_device *vt_find_device(struct ibv_device **list, int n)
{
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);

		if (name && !strcmp(name, VT_DEVICE))
			return list[i];
	}
	vt_fail(__FILE__, __LINE__, "device %s not in the list of %d devices",
		VT_DEVICE, n);
}

struct ibv_context *vt_open_lo(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	CHECKF(list != NULL, "ibv_get_device_list: errno %d (%s)", errno,
	       strerror(errno));
	struct ibv_context *ctx = CHECK_PTR(ibv_open_device(vt_find_device(list, n)));
	ibv_free_device_list(list);
	return ctx;
}

void vt_env_open(struct vt_env *e)
{
	memset(e, 0, sizeof(*e));
	e->ctx = vt_open_lo();
	e->pd = CHECK_PTR(ibv_alloc_pd(e->ctx));
	CHECK_OK(ibv_query_gid(e->ctx, VT_PORT, 0, &e->gid));
	CHECK_OK(ibv_query_device(e->ctx, &e->dev));
}

void vt_default_opts(struct vt_qp_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_send_wr = 64;
	o->max_recv_wr = 64;
	o->max_send_sge = 4;
	o->max_recv_sge = 4;
	o->max_inline_data = 0;
	o->sq_sig_all = 0;
	o->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	o->min_rnr_timer = 12;	/* 0.64 ms */
	o->rnr_retry = 7;	/* infinite */
	o->retry_cnt = 7;
	o->timeout = 14;	/* 67 ms */
	o->max_rd_atomic = 1;
	o->max_dest_rd_atomic = 1;
	o->psn = 0x1234;
	o->path_mtu = IBV_MTU_1024;
}

struct ibv_qp *vt_create_qp(struct ibv_pd *pd, struct ibv_cq *scq,
			    struct ibv_cq *rcq, const struct vt_qp_opts *o,
			    struct ibv_qp_cap *cap)
{
	struct ibv_qp *qp;
	struct ibv_qp_cap req = {
		.max_send_wr = o->max_send_wr,
		.max_recv_wr = o->max_recv_wr,
		.max_send_sge = o->max_send_sge,
		.max_recv_sge = o->max_recv_sge,
		.max_inline_data = o->max_inline_data,
	};

	if (o->send_ops_flags) {
		struct ibv_qp_init_attr_ex ax;

		memset(&ax, 0, sizeof(ax));
		ax.send_cq = scq;
		ax.recv_cq = rcq;
		ax.cap = req;
		ax.qp_type = IBV_QPT_RC;
		ax.sq_sig_all = o->sq_sig_all;
		ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ax.pd = pd;
		ax.send_ops_flags = o->send_ops_flags;
		qp = CHECK_PTR(ibv_create_qp_ex(pd->context, &ax));
		if (cap)
			*cap = ax.cap;
	} else {
		struct ibv_qp_init_attr ia;

		memset(&ia, 0, sizeof(ia));
		ia.send_cq = scq;
		ia.recv_cq = rcq;
		ia.cap = req;
		ia.qp_type = IBV_QPT_RC;
		ia.sq_sig_all = o->sq_sig_all;
		qp = CHECK_PTR(ibv_create_qp(pd, &ia));
		if (cap)
			*cap = ia.cap;
	}
	return qp;
}

void vt_qp_to_init(struct ibv_qp *qp, const struct vt_qp_opts *o)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = VT_PORT;
	a.qp_access_flags = o->access;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS));
}

void vt_qp_to_rtr(struct ibv_qp *qp, uint32_t dest_qpn,
		  const union ibv_gid *dgid, const struct vt_qp_opts *o)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = o->path_mtu;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = o->psn;
	a.max_dest_rd_atomic = o->max_dest_rd_atomic;
	a.min_rnr_timer = o->min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.dlid = 0;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = VT_PORT;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER));
}

void vt_qp_to_rts(struct ibv_qp *qp, const struct vt_qp_opts *o)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = o->psn;
	a.timeout = o->timeout;
	a.retry_cnt = o->retry_cnt;
	a.rnr_retry = o->rnr_retry;
	a.max_rd_atomic = o->max_rd_atomic;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_MAX_QP_RD_ATOMIC));
}

void vt_qp_connect(struct ibv_qp *qp, uint32_t dest_qpn,
		   const union ibv_gid *dgid, const struct vt_qp_opts *o)
{
	vt_qp_to_init(qp, o);
	vt_qp_to_rtr(qp, dest_qpn, dgid, o);
	vt_qp_to_rts(qp, o);
}

enum ibv_qp_state vt_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

void vt_pair_create(struct vt_env *e, struct vt_pair *p,
		    const struct vt_qp_opts *o, int cqe)
{
	struct vt_qp_opts def;

	if (!o) {
		vt_default_opts(&def);
		o = &def;
	}
	if (!cqe)
		cqe = 256;
	memset(p, 0, sizeof(*p));
	p->cq_a = CHECK_PTR(ibv_create_cq(e->ctx, cqe, NULL, NULL, 0));
	p->cq_b = CHECK_PTR(ibv_create_cq(e->ctx, cqe, NULL, NULL, 0));
	p->a = vt_create_qp(e->pd, p->cq_a, p->cq_a, o, &p->cap_a);
	p->b = vt_create_qp(e->pd, p->cq_b, p->cq_b, o, &p->cap_b);
	vt_qp_connect(p->a, p->b->qp_num, &e->gid, o);
	vt_qp_connect(p->b, p->a->qp_num, &e->gid, o);
}

void vt_buf_reg(struct vt_env *e, struct vt_buf *b, size_t len, int access)
{
	b->p = vt_alloc(len);
	b->len = len;
	b->mr = CHECK_PTR(ibv_reg_mr(e->pd, b->p, len, access));
}

/* ---------------------------------------------------------------------- */
/* Posting and polling                                                     */
/* ---------------------------------------------------------------------- */

struct ibv_sge vt_sge(const void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = {
		.addr = (uintptr_t)addr, .length = len, .lkey = lkey
	};

	return s;
}

struct ibv_send_wr vt_send_wr(uint64_t wr_id, enum ibv_wr_opcode op,
			      struct ibv_sge *sge, unsigned flags)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = sge;
	wr.num_sge = sge ? 1 : 0;
	wr.send_flags = flags;
	return wr;
}

void vt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(qp, wr, &bad);

	CHECKF(r == 0, "ibv_post_send(wr_id %llu) returned %d (%s), bad_wr %p",
	       (unsigned long long)wr->wr_id, r, strerror(r), (void *)bad);
}

void vt_post_recv(struct ibv_qp *qp, uint64_t wr_id, const void *addr,
		  uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = vt_sge(addr, len, lkey);
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	int r = ibv_post_recv(qp, &wr, &bad);
	CHECKF(r == 0, "ibv_post_recv(wr_id %llu) returned %d (%s)",
	       (unsigned long long)wr_id, r, strerror(r));
}

int vt_poll_cq_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	uint64_t deadline = vt_now_ms() + (uint64_t)timeout_ms;
	unsigned idle = 0;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		CHECKF(r >= 0, "ibv_poll_cq returned %d", r);
		if (r > 0) {
			got += r;
			idle = 0;
			continue;
		}
		if (vt_now_ms() >= deadline)
			break;
		/*
		 * Give the CPU to the provider's progress thread: the machine
		 * may have only two cores.
		 */
		if (++idle < 200) {
			sched_yield();
		} else {
			struct timespec ts = { 0, 50000 };

			nanosleep(&ts, NULL);
		}
	}
	return got;
}

void vt_poll_at(const char *file, int line, struct ibv_cq *cq,
		struct ibv_wc *wc, int n)
{
	int got = vt_poll_cq_n(cq, wc, n, VT_POLL_MS);

	if (got != n) {
		for (int i = 0; i < got; i++)
			fprintf(stderr,
				"  got wc %d: wr_id %llu status %s opcode %s\n",
				i, (unsigned long long)wc[i].wr_id,
				ibv_wc_status_str(wc[i].status),
				vt_wc_opcode_name(wc[i].opcode));
		vt_fail(file, line,
			"expected %d completion(s) within %d ms, got %d", n,
			VT_POLL_MS, got);
	}
}

void vt_check_cq_empty(const char *file, int line, struct ibv_cq *cq,
		       const char *name)
{
	struct ibv_wc wc;
	int r = ibv_poll_cq(cq, 1, &wc);

	if (r != 0)
		vt_fail(file, line,
			"%s: expected no completion, ibv_poll_cq returned %d "
			"(wr_id %llu, status %s, opcode %s)",
			name, r, r > 0 ? (unsigned long long)wc.wr_id : 0ULL,
			r > 0 ? ibv_wc_status_str(wc.status) : "-",
			r > 0 ? vt_wc_opcode_name(wc.opcode) : "-");
}

void vt_check_no_wc_for(const char *file, int line, struct ibv_cq *cq, int ms,
			const char *name)
{
	struct ibv_wc wc;
	int got = vt_poll_cq_n(cq, &wc, 1, ms);

	if (got)
		vt_fail(file, line,
			"%s: expected no completion for %d ms, got wr_id %llu "
			"status %s opcode %s",
			name, ms, (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status),
			vt_wc_opcode_name(wc.opcode));
}

void vt_write_all(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len) {
		ssize_t r = write(fd, b, len);

		if (r < 0 && errno == EINTR)
			continue;
		CHECKF(r > 0, "write(fd %d): %s", fd, strerror(errno));
		b += r;
		len -= (size_t)r;
	}
}

void vt_read_all(int fd, void *p, size_t len)
{
	uint8_t *b = p;

	while (len) {
		ssize_t r = read(fd, b, len);

		if (r < 0 && errno == EINTR)
			continue;
		CHECKF(r > 0, "read(fd %d): %s", fd,
		       r == 0 ? "end of file (peer process gone)" :
				strerror(errno));
		b += r;
		len -= (size_t)r;
	}
}

/* An XRC domain (fd -1: unnamed) with the given open flags. */
struct ibv_xrcd *vt_open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a;

	memset(&a, 0, sizeof(a));
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	a.fd = fd;
	a.oflags = oflags;
	return ibv_open_xrcd(ctx, &a);
}

/* Moves an XRC QP to RTS towards dest: the receive (target) side when
 * tgt, else the send side, each with the attributes its type takes. */
void vt_xrc_modify(struct ibv_qp *qp, uint32_t dest, struct vt_env *e,
		       int tgt)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = VT_PORT;
	a.qp_access_flags = tgt ? VT_ACCESS_ALL : 0;
	CHECK_OK(ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = dest;
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 12;
	a.max_dest_rd_atomic = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = e->gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = VT_PORT;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
		   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (tgt)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!tgt)
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK_OK(ibv_modify_qp(qp, &a, mask));
}
