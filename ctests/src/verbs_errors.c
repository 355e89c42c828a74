/*
 * Error paths: remote access violations (target memory and a guard region
 * around it never change), local protection and length errors, RNR, a
 * vanished peer, the flush that follows every error, and WRs refused at
 * post time with bad_wr pointing at the culprit.
 */
#include "common/verbs_util.c"

#define PAGE 4096
#define GUARD_BYTE 0xaa
#define LOCAL_BYTE 0x5c

/* Target memory: three pages filled with GUARD_BYTE, the MR is the middle
 * one. Anything that touches any of the three pages is a failure. */
struct target {
	uint8_t *area;
	uint8_t *mr_start;
	struct ibv_mr *mr;
};

static void target_reg(struct ibv_pd *pd, struct target *t, int access)
{
	t->area = vt_alloc(3 * PAGE);
	memset(t->area, GUARD_BYTE, 3 * PAGE);
	t->mr_start = t->area + PAGE;
	t->mr = CHECK_PTR(ibv_reg_mr(pd, t->mr_start, PAGE, access));
}

/* An rkey that no MR of this process has. */
static uint32_t bogus_key(struct ibv_mr **mrs, int n)
{
	for (uint32_t x = 0x80000000u;; x = x >> 1 | 0x40000000u) {
		uint32_t k = mrs[0]->rkey ^ x;
		bool used = false;

		for (int i = 0; i < n; i++)
			used |= k == mrs[i]->rkey || k == mrs[i]->lkey;
		if (!used)
			return k;
	}
}

enum key_mode { KEY_VALID, KEY_BOGUS, KEY_OTHER_PD };

/*
 * Posts [op on the target, SEND, SEND] from a fresh pair's `a` (the peer
 * has no receive posted) and expects: the op completes with `expect`, the
 * two SENDs flush, `a` ends in ERR, the target's three pages and the local
 * buffer are untouched.
 */
static void remote_error(enum ibv_wr_opcode op, int access, enum key_mode km,
			 long off, uint32_t len, enum ibv_wc_status expect)
{
	struct vt_env e;
	struct vt_pair p;
	struct target t;
	struct vt_buf l;
	struct ibv_wc wc[3];
	struct ibv_pd *pd2 = NULL;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	if (km == KEY_OTHER_PD)
		pd2 = CHECK_PTR(ibv_alloc_pd(e.ctx));
	target_reg(pd2 ? pd2 : e.pd, &t, access);
	vt_buf_reg(&e, &l, PAGE, IBV_ACCESS_LOCAL_WRITE);
	memset(l.p, LOCAL_BYTE, l.len);

	struct ibv_mr *mrs[] = { t.mr, l.mr };
	uint32_t rkey = km == KEY_BOGUS ? bogus_key(mrs, 2) : t.mr->rkey;
	uint64_t raddr = (uint64_t)(uintptr_t)t.mr_start + (uint64_t)off;

	struct ibv_sge sge[3] = { vt_sge(l.p, len, l.mr->lkey),
				  vt_sge(l.p, 16, l.mr->lkey),
				  vt_sge(l.p, 16, l.mr->lkey) };
	struct ibv_send_wr wr[3];
	wr[0] = vt_send_wr(1, op, &sge[0], IBV_SEND_SIGNALED);
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr[0].wr.atomic.remote_addr = raddr;
		wr[0].wr.atomic.rkey = rkey;
		wr[0].wr.atomic.compare_add = 0xaaaaaaaaaaaaaaaaULL;
		wr[0].wr.atomic.swap = 1;
	} else {
		wr[0].wr.rdma.remote_addr = raddr;
		wr[0].wr.rdma.rkey = rkey;
	}
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr[0].imm_data = htonl(5);
	wr[1] = vt_send_wr(2, IBV_WR_SEND, &sge[1], IBV_SEND_SIGNALED);
	wr[2] = vt_send_wr(3, IBV_WR_SEND, &sge[2], IBV_SEND_SIGNALED);
	wr[0].next = &wr[1];
	wr[1].next = &wr[2];
	vt_post_send(p.a, wr);

	vt_poll(p.cq_a, wc, 3);
	CHECK_WC_STATUS(&wc[0], expect);
	CHECK_EQ(wc[0].wr_id, 1);
	CHECK_EQ(wc[0].qp_num, p.a->qp_num);
	for (int i = 1; i < 3; i++) {
		CHECK_WC_STATUS(&wc[i], IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(wc[i].wr_id, 1 + i);
		CHECK_EQ(wc[i].qp_num, p.a->qp_num);
	}
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECK_BYTES(t.area, GUARD_BYTE, 3 * PAGE);
	CHECK_BYTES(l.p, LOCAL_BYTE, l.len);
	/* Nothing reached the responder's receive queue. */
	CHECK_CQ_EMPTY(p.cq_b);
}

static void bad_rkey(void)
{
	remote_error(IBV_WR_RDMA_WRITE, VT_ACCESS_ALL, KEY_BOGUS, 0, 100,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_READ, VT_ACCESS_ALL, KEY_BOGUS, 0, 100,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_WRITE_WITH_IMM, VT_ACCESS_ALL, KEY_BOGUS, 0,
		     100, IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_ATOMIC_FETCH_AND_ADD, VT_ACCESS_ALL, KEY_BOGUS, 0,
		     8, IBV_WC_REM_ACCESS_ERR);
}

/* An MR of another PD than the responder QP's is as good as unknown. */
static void rkey_other_pd(void)
{
	remote_error(IBV_WR_RDMA_WRITE, VT_ACCESS_ALL, KEY_OTHER_PD, 0, 100,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_READ, VT_ACCESS_ALL, KEY_OTHER_PD, 0, 100,
		     IBV_WC_REM_ACCESS_ERR);
}

static void out_of_range(void)
{
	/* Crossing the end, starting before the start, just past the end. */
	remote_error(IBV_WR_RDMA_WRITE, VT_ACCESS_ALL, KEY_VALID, PAGE - 10,
		     20, IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_WRITE, VT_ACCESS_ALL, KEY_VALID, -4, 8,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_WRITE, VT_ACCESS_ALL, KEY_VALID, PAGE, 1,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_READ, VT_ACCESS_ALL, KEY_VALID, PAGE - 10,
		     20, IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_READ, VT_ACCESS_ALL, KEY_VALID, -8, 8,
		     IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_ATOMIC_CMP_AND_SWP, VT_ACCESS_ALL, KEY_VALID,
		     PAGE, 8, IBV_WC_REM_ACCESS_ERR);
}

static void no_remote_write(void)
{
	remote_error(IBV_WR_RDMA_WRITE,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC,
		     KEY_VALID, 0, 100, IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_RDMA_WRITE_WITH_IMM,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
		     KEY_VALID, 0, 100, IBV_WC_REM_ACCESS_ERR);
}

static void no_remote_read(void)
{
	remote_error(IBV_WR_RDMA_READ,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_ATOMIC,
		     KEY_VALID, 0, 100, IBV_WC_REM_ACCESS_ERR);
}

static void no_remote_atomic(void)
{
	remote_error(IBV_WR_ATOMIC_CMP_AND_SWP,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ,
		     KEY_VALID, 0, 8, IBV_WC_REM_ACCESS_ERR);
	remote_error(IBV_WR_ATOMIC_FETCH_AND_ADD,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ,
		     KEY_VALID, 0, 8, IBV_WC_REM_ACCESS_ERR);
}

/*
 * An atomic on an address that is not 8-byte aligned fails: refused at
 * post time (EINVAL, as rxe does) or completed in error (remote access or
 * invalid request). The target never changes.
 */
static void atomic_unaligned(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct target t;
	struct vt_buf l;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	target_reg(e.pd, &t, VT_ACCESS_ALL);
	vt_buf_reg(&e, &l, PAGE, IBV_ACCESS_LOCAL_WRITE);
	memset(l.p, LOCAL_BYTE, l.len);

	struct ibv_sge sge = vt_sge(l.p, 8, l.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_ATOMIC_CMP_AND_SWP, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.atomic.remote_addr = (uintptr_t)t.mr_start + 68;
	wr.wr.atomic.rkey = t.mr->rkey;
	wr.wr.atomic.compare_add = 0xaaaaaaaaaaaaaaaaULL;
	wr.wr.atomic.swap = 0;
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(p.a, &wr, &bad);
	if (r) {
		CHECK_EQ(r, EINVAL);
		CHECK(bad == &wr);
		CHECK_CQ_EMPTY(p.cq_a);
	} else {
		vt_poll(p.cq_a, &wc, 1);
		CHECKF(wc.status == IBV_WC_REM_ACCESS_ERR ||
			       wc.status == IBV_WC_REM_INV_REQ_ERR,
		       "unaligned atomic completed with %s",
		       ibv_wc_status_str(wc.status));
		CHECK_EQ(wc.wr_id, 1);
		CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	}
	CHECK_BYTES(t.area, GUARD_BYTE, 3 * PAGE);
	CHECK_BYTES(l.p, LOCAL_BYTE, l.len);
}

/* Receive too small: responder LOC_LEN_ERR, requester REM_INV_REQ_ERR,
 * both QPs in ERR and their other WRs flushed. */
static void recv_too_small(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc[2];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 1);
	vt_post_recv(p.b, 11, r.p, 16, r.mr->lkey);
	vt_post_recv(p.b, 12, r.p + 1024, 1024, r.mr->lkey);
	vt_post_recv(p.a, 13, s.p + 2048, 1024, s.mr->lkey);

	struct ibv_sge sge = vt_sge(s.p, 100, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(14, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);

	vt_poll(p.cq_b, wc, 2);
	CHECK_WC(&wc[0], IBV_WC_LOC_LEN_ERR, IBV_WC_RECV);
	CHECK_EQ(wc[0].wr_id, 11);
	CHECK_EQ(wc[0].qp_num, p.b->qp_num);
	CHECK_WC(&wc[1], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
	CHECK_EQ(wc[1].wr_id, 12);
	CHECK_EQ(vt_qp_state(p.b), IBV_QPS_ERR);

	vt_poll(p.cq_a, wc, 2);
	CHECK_WC(&wc[0], IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND);
	CHECK_EQ(wc[0].wr_id, 14);
	CHECK_EQ(wc[0].qp_num, p.a->qp_num);
	CHECK_WC(&wc[1], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
	CHECK_EQ(wc[1].wr_id, 13);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_CQ_EMPTY(p.cq_b);
}

/* Bad lkey: LOC_PROT_ERR for that WR; the rest of the queue (sends and
 * receives) flushes; the QP is in ERR; nothing reached the peer. */
static void bad_lkey(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc[4];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);
	memset(r.p, 0x21, r.len);
	vt_post_recv(p.b, 20, r.p, 1024, r.mr->lkey);
	vt_post_recv(p.b, 21, r.p + 1024, 1024, r.mr->lkey);
	vt_post_recv(p.a, 22, s.p + 2048, 1024, s.mr->lkey);

	struct ibv_mr *mrs[] = { s.mr, r.mr };
	struct ibv_sge sge[3] = { vt_sge(s.p, 64, bogus_key(mrs, 2)),
				  vt_sge(s.p, 64, s.mr->lkey),
				  vt_sge(s.p, 64, s.mr->lkey) };
	struct ibv_send_wr wr[3];
	for (int i = 0; i < 3; i++) {
		wr[i] = vt_send_wr(30 + i, IBV_WR_SEND, &sge[i],
				   IBV_SEND_SIGNALED);
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	vt_post_send(p.a, wr);

	vt_poll(p.cq_a, wc, 4);
	/* The send queue's completions in order; the flushed receive may
	 * come anywhere among them. */
	int si = 0;
	bool saw_recv = false;
	for (int i = 0; i < 4; i++) {
		if (wc[i].wr_id == 22) {
			CHECK_WC(&wc[i], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
			saw_recv = true;
			continue;
		}
		CHECK_EQ(wc[i].wr_id, 30 + si);
		CHECK_WC(&wc[i], si == 0 ? IBV_WC_LOC_PROT_ERR :
					   IBV_WC_WR_FLUSH_ERR,
			 IBV_WC_SEND);
		CHECK_EQ(wc[i].qp_num, p.a->qp_num);
		si++;
	}
	CHECK(saw_recv);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_NO_WC_FOR(p.cq_b, 100);
	CHECK_BYTES(r.p, 0x21, r.len);
}

/* A valid lkey with a range past the MR's end is a protection error too. */
static void lkey_out_of_range(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 2 * PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);
	/* Re-register only the first page of s. */
	struct ibv_mr *small = CHECK_PTR(ibv_reg_mr(e.pd, s.p, PAGE,
						    IBV_ACCESS_LOCAL_WRITE));
	vt_post_recv(p.b, 1, r.p, PAGE, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p + PAGE - 10, 20, small->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 2);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECK_NO_WC_FOR(p.cq_b, 100);
}

/* The local destination of a READ needs IBV_ACCESS_LOCAL_WRITE. */
static void read_into_readonly_mr(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf l, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &l, PAGE, 0);
	vt_buf_reg(&e, &t, PAGE, IBV_ACCESS_REMOTE_READ);
	memset(l.p, LOCAL_BYTE, l.len);
	vt_fill(t.p, t.len, 3);

	struct ibv_sge sge = vt_sge(l.p, 100, l.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_READ, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_BYTES(l.p, LOCAL_BYTE, l.len);
}

/* A responder with max_dest_rd_atomic 0 has no resources for READs or
 * atomics: each is an invalid request (IBV_WC_REM_INV_REQ_ERR, as rxe and
 * hardware answer), the responder QP goes to ERR, and neither the local
 * buffer nor the target memory changes. */
static void no_responder_resources(void)
{
	static const enum ibv_wr_opcode ops[] = { IBV_WR_RDMA_READ,
						  IBV_WR_ATOMIC_FETCH_AND_ADD };

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct vt_env e;
		struct vt_pair p;
		struct vt_qp_opts o;
		struct vt_buf l, t;
		struct ibv_wc wc;

		vt_env_open(&e);
		vt_default_opts(&o);
		o.max_dest_rd_atomic = 0;
		vt_pair_create(&e, &p, &o, 0);
		vt_buf_reg(&e, &l, PAGE, IBV_ACCESS_LOCAL_WRITE);
		vt_buf_reg(&e, &t, PAGE, VT_ACCESS_ALL);
		memset(l.p, LOCAL_BYTE, l.len);
		vt_fill(t.p, t.len, 9);

		struct ibv_sge sge = vt_sge(l.p, 8, l.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(40 + i, ops[i], &sge,
						   IBV_SEND_SIGNALED);
		if (ops[i] == IBV_WR_RDMA_READ) {
			wr.wr.rdma.remote_addr = (uintptr_t)t.p;
			wr.wr.rdma.rkey = t.mr->rkey;
		} else {
			wr.wr.atomic.remote_addr = (uintptr_t)t.p;
			wr.wr.atomic.rkey = t.mr->rkey;
			wr.wr.atomic.compare_add = 1;
		}
		vt_post_send(p.a, &wr);
		vt_poll(p.cq_a, &wc, 1);
		CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);
		CHECK_EQ(wc.wr_id, 40 + i);
		CHECK_EQ(wc.qp_num, p.a->qp_num);
		CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
		CHECK_BYTES(l.p, LOCAL_BYTE, l.len);
		uint8_t *want = vt_alloc(PAGE);
		vt_fill(want, PAGE, 9);
		CHECK_MEM(t.p, want, PAGE);
		uint64_t deadline = vt_now_ms() + VT_POLL_MS;
		while (vt_qp_state(p.b) != IBV_QPS_ERR)
			CHECKF(vt_now_ms() < deadline,
			       "responder not in ERR after %d ms", VT_POLL_MS);
	}
}

/* No receive posted, rnr_retry 1, tiny min_rnr_timer: RNR retry exceeded. */
static void rnr_exceeded(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s;
	struct ibv_wc wc[2];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.rnr_retry = 1;
	o.min_rnr_timer = 1;	/* 0.01 ms */
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);

	struct ibv_sge sge = vt_sge(s.p, 64, s.mr->lkey);
	struct ibv_send_wr wr[2] = {
		vt_send_wr(1, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED),
		vt_send_wr(2, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED),
	};
	wr[0].next = &wr[1];
	uint64_t t0 = vt_now_ms();
	vt_post_send(p.a, wr);
	vt_poll(p.cq_a, wc, 2);
	CHECK_WC(&wc[0], IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SEND);
	CHECK_EQ(wc[0].wr_id, 1);
	CHECK_EQ(wc[0].qp_num, p.a->qp_num);
	CHECK_WC(&wc[1], IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND);
	CHECK_EQ(wc[1].wr_id, 2);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECKF(vt_now_ms() - t0 < 2000, "RNR error took %llu ms",
	       (unsigned long long)(vt_now_ms() - t0));
	/* The responder never completed anything. */
	CHECK_CQ_EMPTY(p.cq_b);
}

/* RDMA WRITE with immediate needs a receive as much as a SEND does. */
static void rnr_write_imm(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.rnr_retry = 1;
	o.min_rnr_timer = 1;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, PAGE,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = vt_sge(s.p, 64, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &sge,
					   IBV_SEND_SIGNALED);
	wr.imm_data = htonl(1);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_RDMA_WRITE);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
	CHECK_CQ_EMPTY(p.cq_b);
}

struct late_recv {
	struct ibv_qp *qp;
	struct vt_buf *r;
};

static void *post_late_recv(void *arg)
{
	struct late_recv *lr = arg;

	vt_post_recv(lr->qp, 77, lr->r->p, PAGE, lr->r->mr->lkey);
	return NULL;
}

/* rnr_retry 7 (infinite): a receive posted late, from another thread,
 * still gets the message. */
static void rnr_success(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_wc wc;
	pthread_t th;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.rnr_retry = 7;
	o.min_rnr_timer = 1;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 4);

	struct ibv_sge sge = vt_sge(s.p, 500, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(78, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	/* Without a receive the send cannot complete, however long. */
	CHECK_NO_WC_FOR(p.cq_a, 150);
	CHECK_CQ_EMPTY(p.cq_b);

	struct late_recv lr = { p.b, &r };
	CHECK_OK(pthread_create(&th, NULL, post_late_recv, &lr));
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 78);
	CHECK_OK(pthread_join(th, NULL));
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 77);
	CHECK_EQ(wc.byte_len, 500);
	CHECK_MEM(r.p, s.p, 500);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_RTS);
}

/* The peer QP is destroyed: the next send ends in RETRY_EXC_ERR. */
static void peer_destroyed(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_wc wc[2];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.timeout = 8;		/* ~1 ms */
	o.retry_cnt = 2;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);

	/* First prove the connection works. */
	vt_post_recv(p.b, 1, r.p, PAGE, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 32, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, wc, 1);
	CHECK_WC(&wc[0], IBV_WC_SUCCESS, IBV_WC_SEND);
	vt_poll(p.cq_b, wc, 1);
	CHECK_WC(&wc[0], IBV_WC_SUCCESS, IBV_WC_RECV);

	CHECK_OK(ibv_destroy_qp(p.b));

	struct ibv_send_wr w2[2] = {
		vt_send_wr(3, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED),
		vt_send_wr(4, IBV_WR_RDMA_WRITE, &sge, IBV_SEND_SIGNALED),
	};
	w2[1].wr.rdma.remote_addr = (uintptr_t)r.p;
	w2[1].wr.rdma.rkey = r.mr->rkey;
	w2[0].next = &w2[1];
	vt_post_send(p.a, w2);
	vt_poll(p.cq_a, wc, 2);
	CHECK_WC(&wc[0], IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND);
	CHECK_EQ(wc[0].wr_id, 3);
	CHECK_EQ(wc[0].qp_num, p.a->qp_num);
	CHECK_WC(&wc[1], IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_WRITE);
	CHECK_EQ(wc[1].wr_id, 4);
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_ERR);
}

/* A destination QPN that no QP has: RETRY_EXC_ERR as well. */
static void peer_never_existed(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf s;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *gone;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.timeout = 8;
	o.retry_cnt = 2;
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	gone = vt_create_qp(e.pd, cq, cq, &o, NULL);
	uint32_t dead_qpn = gone->qp_num;
	CHECK_OK(ibv_destroy_qp(gone));
	qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	CHECK(qp->qp_num != dead_qpn);
	vt_qp_connect(qp, dead_qpn, &e.gid, &o);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = vt_sge(s.p, 32, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(5, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(qp, &wr);
	vt_poll(cq, &wc, 1);
	CHECK_WC(&wc, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 5);
	CHECK_EQ(vt_qp_state(qp), IBV_QPS_ERR);
}

/* Too many gather entries: EINVAL, bad_wr at that WR; the WRs before it
 * were posted, those after it were not. */
static void post_too_many_sge(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_post_recv(p.b, 1, r.p, 1024, r.mr->lkey);
	vt_post_recv(p.b, 2, r.p + 1024, 1024, r.mr->lkey);

	uint32_t n = p.cap_a.max_send_sge + 1;
	struct ibv_sge *many = vt_alloc(sizeof(*many) * n);
	for (uint32_t i = 0; i < n; i++)
		many[i] = vt_sge(s.p + i, 1, s.mr->lkey);
	struct ibv_sge one = vt_sge(s.p, 8, s.mr->lkey);
	struct ibv_send_wr wr[3] = {
		vt_send_wr(10, IBV_WR_SEND, &one, IBV_SEND_SIGNALED),
		vt_send_wr(11, IBV_WR_SEND, NULL, IBV_SEND_SIGNALED),
		vt_send_wr(12, IBV_WR_SEND, &one, IBV_SEND_SIGNALED),
	};
	wr[1].sg_list = many;
	wr[1].num_sge = (int)n;
	wr[0].next = &wr[1];
	wr[1].next = &wr[2];
	struct ibv_send_wr *bad = NULL;
	CHECK_RET(ibv_post_send(p.a, wr, &bad), EINVAL);
	CHECK(bad == &wr[1]);

	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK_EQ(wc.wr_id, 10);
	vt_poll(p.cq_b, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_NO_WC_FOR(p.cq_a, 100);
	CHECK_CQ_EMPTY(p.cq_b);
	/* The QP is unharmed. */
	CHECK_EQ(vt_qp_state(p.a), IBV_QPS_RTS);

	/* Same on the receive side. */
	uint32_t rn = p.cap_b.max_recv_sge + 1;
	struct ibv_sge *rmany = vt_alloc(sizeof(*rmany) * rn);
	for (uint32_t i = 0; i < rn; i++)
		rmany[i] = vt_sge(r.p + 2048 + i, 1, r.mr->lkey);
	struct ibv_recv_wr rw[2] = {
		{ .wr_id = 20, .sg_list = rmany, .num_sge = (int)rn },
		{ .wr_id = 21, .sg_list = rmany, .num_sge = 1 },
	};
	rw[0].next = &rw[1];
	struct ibv_recv_wr *rbad = NULL;
	CHECK_RET(ibv_post_recv(p.b, rw, &rbad), EINVAL);
	CHECK(rbad == &rw[0]);
}

/* Inline data beyond max_inline_data: EINVAL with bad_wr. */
static void post_inline_too_large(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_inline_data = 64;
	vt_pair_create(&e, &p, &o, 0);
	uint32_t len = p.cap_a.max_inline_data + 1;
	uint8_t *buf = vt_alloc(len);
	struct ibv_sge sge = vt_sge(buf, len, 0);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	struct ibv_send_wr *bad = NULL;
	CHECK_RET(ibv_post_send(p.a, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	CHECK_NO_WC_FOR(p.cq_a, 50);
}

/* A full queue: ENOMEM at the first WR that does not fit. */
static void post_queue_full(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_send_wr = 16;
	o.max_recv_wr = 64;
	o.rnr_retry = 7;	/* the sends wait for receives forever */
	vt_pair_create(&e, &p, &o, 1024);
	uint32_t cap = p.cap_a.max_send_wr;
	CHECKF(cap <= 1000 && cap <= p.cap_b.max_recv_wr,
	       "send queue of %u entries, receive queue %u", cap,
	       p.cap_b.max_recv_wr);
	vt_buf_reg(&e, &s, PAGE, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 64 * (size_t)cap, IBV_ACCESS_LOCAL_WRITE);

	/* Nothing completes while the peer has no receive: the queue fills. */
	struct ibv_sge sge = vt_sge(s.p, 16, s.mr->lkey);
	struct ibv_send_wr *wr = vt_alloc(sizeof(*wr) * (cap + 2));
	for (uint32_t i = 0; i < cap + 2; i++) {
		wr[i] = vt_send_wr(100 + i, IBV_WR_SEND, &sge,
				   IBV_SEND_SIGNALED);
		wr[i].next = i + 1 < cap + 2 ? &wr[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	CHECK_RET(ibv_post_send(p.a, wr, &bad), ENOMEM);
	CHECK(bad == &wr[cap]);

	/* Receives let the posted ones through, in order. */
	struct ibv_wc *wc = vt_alloc(sizeof(*wc) * cap);
	for (uint32_t i = 0; i < cap; i++)
		vt_post_recv(p.b, i, r.p + 64 * i, 64, r.mr->lkey);
	vt_poll(p.cq_a, wc, (int)cap);
	for (uint32_t i = 0; i < cap; i++) {
		CHECK_WC(&wc[i], IBV_WC_SUCCESS, IBV_WC_SEND);
		CHECK_EQ(wc[i].wr_id, 100 + i);
	}
	vt_poll(p.cq_b, wc, (int)cap);
	CHECK_NO_WC_FOR(p.cq_a, 50);

	/* The receive queue overflows the same way. */
	uint32_t rcap = p.cap_b.max_recv_wr;
	struct ibv_sge rsge = vt_sge(r.p, 16, r.mr->lkey);
	struct ibv_recv_wr *rw = vt_alloc(sizeof(*rw) * (rcap + 1));
	for (uint32_t i = 0; i < rcap + 1; i++) {
		rw[i].wr_id = i;
		rw[i].sg_list = &rsge;
		rw[i].num_sge = 1;
		rw[i].next = i < rcap ? &rw[i + 1] : NULL;
	}
	struct ibv_recv_wr *rbad = NULL;
	CHECK_RET(ibv_post_recv(p.b, rw, &rbad), ENOMEM);
	CHECK(rbad == &rw[rcap]);
}

static const struct vt_case cases[] = {
	VT_CASE(bad_rkey),
	VT_CASE(rkey_other_pd),
	VT_CASE(out_of_range),
	VT_CASE(no_remote_write),
	VT_CASE(no_remote_read),
	VT_CASE(no_remote_atomic),
	VT_CASE(atomic_unaligned),
	VT_CASE(recv_too_small),
	VT_CASE(bad_lkey),
	VT_CASE(lkey_out_of_range),
	VT_CASE(read_into_readonly_mr),
	VT_CASE(rnr_exceeded),
	VT_CASE(rnr_write_imm),
	VT_CASE(rnr_success),
	VT_CASE(peer_destroyed),
	VT_CASE(peer_never_existed),
	VT_CASE(post_too_many_sge),
	VT_CASE(post_inline_too_large),
	VT_CASE(post_queue_full),
	VT_CASE(no_responder_resources),
};
VT_MAIN(cases)
