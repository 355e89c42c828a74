/*
 * Every RC operation over a loopback-connected QP pair, checked byte for
 * byte and field for field: SEND, SEND_WITH_IMM, RDMA_WRITE,
 * RDMA_WRITE_WITH_IMM, RDMA_READ, the two atomics, scatter/gather, inline
 * data, selective signaling, RC ordering, large and zero-length messages.
 */
#include "common/verbs_util.c"

/* A receive completion: success, its fields, from QP `src`. */
static void check_recv(const struct ibv_wc *wc, uint64_t wr_id,
		       enum ibv_wc_opcode op, uint32_t byte_len,
		       const struct ibv_qp *dst, const struct ibv_qp *src,
		       bool imm, uint32_t imm_host)
{
	CHECK_WC(wc, IBV_WC_SUCCESS, op);
	CHECK_EQ(wc->wr_id, wr_id);
	CHECK_EQ(wc->byte_len, byte_len);
	CHECK_EQ(wc->qp_num, dst->qp_num);
	CHECK_EQ(wc->src_qp, src->qp_num);
	if (imm) {
		CHECKF(wc->wc_flags & IBV_WC_WITH_IMM,
		       "wc_flags 0x%x lacks IBV_WC_WITH_IMM", wc->wc_flags);
		CHECK_EQ(wc->imm_data, htonl(imm_host));
		CHECK_EQ(ntohl(wc->imm_data), imm_host);
	} else {
		CHECKF(!(wc->wc_flags & IBV_WC_WITH_IMM),
		       "wc_flags 0x%x has IBV_WC_WITH_IMM", wc->wc_flags);
	}
}

/* A requester completion: success, opcode, wr_id, our QP. */
static void check_send(const struct ibv_wc *wc, uint64_t wr_id,
		       enum ibv_wc_opcode op, const struct ibv_qp *qp)
{
	CHECK_WC(wc, IBV_WC_SUCCESS, op);
	CHECK_EQ(wc->wr_id, wr_id);
	CHECK_EQ(wc->qp_num, qp->qp_num);
}

static void send_recv(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 1);
	memset(r.p, 0xee, r.len);

	vt_post_recv(p.b, 0xb0b, r.p, 2048, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 1000, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(0xa0a, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);

	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 0xa0a, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 0xb0b, IBV_WC_RECV, 1000, p.b, p.a, false, 0);
	CHECK_MEM(r.p, s.p, 1000);
	CHECK_BYTES(r.p + 1000, 0xee, r.len - 1000);
	CHECK_CQ_EMPTY(p.cq_a);
	CHECK_CQ_EMPTY(p.cq_b);

	/* And back the other way on the same connection. */
	vt_post_recv(p.a, 7, s.p + 2048, 2048, s.mr->lkey);
	sge = vt_sge(r.p, 333, r.mr->lkey);
	wr = vt_send_wr(8, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.b, &wr);
	vt_poll(p.cq_b, &wc, 1);
	check_send(&wc, 8, IBV_WC_SEND, p.b);
	vt_poll(p.cq_a, &wc, 1);
	check_recv(&wc, 7, IBV_WC_RECV, 333, p.a, p.b, false, 0);
	CHECK_MEM(s.p + 2048, r.p, 333);
}

static void send_imm(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 2);

	vt_post_recv(p.b, 11, r.p, 4096, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 77, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(12, IBV_WR_SEND_WITH_IMM, &sge,
					   IBV_SEND_SIGNALED);
	wr.imm_data = htonl(0x12345678);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 12, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 11, IBV_WC_RECV, 77, p.b, p.a, true, 0x12345678);
	CHECK_MEM(r.p, s.p, 77);
}

/* RDMA WRITE lands at the address asked, touches nothing else and does
 * not consume a receive. */
static void rdma_write(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, t, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 8192,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 3);
	memset(t.p, 0x11, t.len);

	vt_post_recv(p.b, 21, r.p, 4096, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 4096, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(22, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)(t.p + 100);
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 22, IBV_WC_RDMA_WRITE, p.a);
	CHECK_MEM(t.p + 100, s.p, 4096);
	CHECK_BYTES(t.p, 0x11, 100);
	CHECK_BYTES(t.p + 4196, 0x11, t.len - 4196);
	CHECK_CQ_EMPTY(p.cq_b);

	/* The receive is still there for the next SEND. */
	sge = vt_sge(s.p, 10, s.mr->lkey);
	wr = vt_send_wr(23, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 23, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 21, IBV_WC_RECV, 10, p.b, p.a, false, 0);
}

static void write_imm(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, t, r;
	struct ibv_wc wc;
	struct ibv_recv_wr rwr, *bad;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 8192,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 4);
	memset(t.p, 0x22, t.len);
	memset(r.p, 0x33, r.len);

	/* The immediate consumes a receive; its buffer stays untouched. */
	vt_post_recv(p.b, 31, r.p, 4096, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 3000, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(32, IBV_WR_RDMA_WRITE_WITH_IMM,
					   &sge, IBV_SEND_SIGNALED);
	wr.imm_data = htonl(0xcafef00d);
	wr.wr.rdma.remote_addr = (uintptr_t)(t.p + 8);
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 32, IBV_WC_RDMA_WRITE, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 31, IBV_WC_RECV_RDMA_WITH_IMM, 3000, p.b, p.a, true,
		   0xcafef00d);
	CHECK_MEM(t.p + 8, s.p, 3000);
	CHECK_BYTES(t.p, 0x22, 8);
	CHECK_BYTES(t.p + 3008, 0x22, t.len - 3008);
	CHECK_BYTES(r.p, 0x33, r.len);

	/* A receive without any scatter entry is enough for it. */
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 33;
	rwr.num_sge = 0;
	CHECK_OK(ibv_post_recv(p.b, &rwr, &bad));
	sge = vt_sge(s.p + 4096, 100, s.mr->lkey);
	wr = vt_send_wr(34, IBV_WR_RDMA_WRITE_WITH_IMM, &sge,
			IBV_SEND_SIGNALED);
	wr.imm_data = htonl(7);
	wr.wr.rdma.remote_addr = (uintptr_t)(t.p + 4096);
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 34, IBV_WC_RDMA_WRITE, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 33, IBV_WC_RECV_RDMA_WITH_IMM, 100, p.b, p.a, true, 7);
	CHECK_MEM(t.p + 4096, s.p + 4096, 100);
}

static void rdma_read(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf l, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &l, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 8192, IBV_ACCESS_REMOTE_READ);
	vt_fill(t.p, t.len, 5);
	memset(l.p, 0x44, l.len);

	struct ibv_sge sge = vt_sge(l.p + 16, 5000, l.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(41, IBV_WR_RDMA_READ, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)(t.p + 1000);
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 41, IBV_WC_RDMA_READ, p.a);
	CHECK_MEM(l.p + 16, t.p + 1000, 5000);
	CHECK_BYTES(l.p, 0x44, 16);
	CHECK_BYTES(l.p + 5016, 0x44, l.len - 5016);
	CHECK_CQ_EMPTY(p.cq_b);
}

static uint64_t *u64_at(struct vt_buf *b, size_t off)
{
	return (uint64_t *)(void *)(b->p + off);
}

static void cmp_swap(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf l, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &l, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 4096,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	memset(t.p, 0x55, t.len);
	*u64_at(&t, 64) = 0x1111222233334444ULL;
	memset(l.p, 0x66, l.len);

	/* Match: swapped, the original comes back. */
	struct ibv_sge sge = vt_sge(l.p + 8, 8, l.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(51, IBV_WR_ATOMIC_CMP_AND_SWP, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.atomic.remote_addr = (uintptr_t)(t.p + 64);
	wr.wr.atomic.rkey = t.mr->rkey;
	wr.wr.atomic.compare_add = 0x1111222233334444ULL;
	wr.wr.atomic.swap = 0xaaaabbbbccccddddULL;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 51, IBV_WC_COMP_SWAP, p.a);
	CHECK_EQ(*u64_at(&l, 8), 0x1111222233334444ULL);
	CHECK_EQ(*u64_at(&t, 64), 0xaaaabbbbccccddddULL);
	CHECK_BYTES(t.p, 0x55, 64);
	CHECK_BYTES(t.p + 72, 0x55, t.len - 72);
	CHECK_BYTES(l.p, 0x66, 8);
	CHECK_BYTES(l.p + 16, 0x66, l.len - 16);

	/* Mismatch: unchanged, the current value comes back. */
	sge = vt_sge(l.p + 24, 8, l.mr->lkey);
	wr = vt_send_wr(52, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, IBV_SEND_SIGNALED);
	wr.wr.atomic.remote_addr = (uintptr_t)(t.p + 64);
	wr.wr.atomic.rkey = t.mr->rkey;
	wr.wr.atomic.compare_add = 0x1111222233334444ULL;
	wr.wr.atomic.swap = 0x9999999999999999ULL;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 52, IBV_WC_COMP_SWAP, p.a);
	CHECK_EQ(*u64_at(&l, 24), 0xaaaabbbbccccddddULL);
	CHECK_EQ(*u64_at(&t, 64), 0xaaaabbbbccccddddULL);
	CHECK_CQ_EMPTY(p.cq_b);
}

static void fetch_add(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf l, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &l, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 4096,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	memset(t.p, 0x77, t.len);
	*u64_at(&t, 128) = 100;

	uint64_t expect = 100;
	static const uint64_t adds[] = { 23, 1, 0xffffffff00000000ULL,
					 0x100000000ULL };
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = vt_sge(l.p + 8 * i, 8, l.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(
			61 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge,
			IBV_SEND_SIGNALED);

		wr.wr.atomic.remote_addr = (uintptr_t)(t.p + 128);
		wr.wr.atomic.rkey = t.mr->rkey;
		wr.wr.atomic.compare_add = adds[i];
		vt_post_send(p.a, &wr);
		vt_poll(p.cq_a, &wc, 1);
		check_send(&wc, 61 + i, IBV_WC_FETCH_ADD, p.a);
		CHECK_EQ(*u64_at(&l, 8 * i), expect);
		expect += adds[i];
		CHECK_EQ(*u64_at(&t, 128), expect);
	}
	/* 64-bit wrap-around: 100+23+1 + (2^64 - 2^32) + 2^32 = 124. */
	CHECK_EQ(*u64_at(&t, 128), 124);
	CHECK_BYTES(t.p, 0x77, 128);
	CHECK_BYTES(t.p + 136, 0x77, t.len - 136);
}

/*
 * Gather from and scatter to max_sge entries of different lengths, spread
 * through the buffers with gaps that must stay untouched.
 */
static void multi_sge(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	int n = e.dev.max_sge;
	o.max_send_sge = o.max_recv_sge = (uint32_t)n;
	vt_pair_create(&e, &p, &o, 0);
	CHECK_GE(p.cap_a.max_send_sge, n);
	CHECK_GE(p.cap_b.max_recv_sge, n);

	vt_buf_reg(&e, &s, 64 * 1024, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 64 * 1024, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 6);
	memset(r.p, 0xee, r.len);

	struct ibv_sge *ssg = vt_alloc(sizeof(*ssg) * (size_t)n);
	struct ibv_sge *rsg = vt_alloc(sizeof(*rsg) * (size_t)n);
	uint8_t *expect = vt_alloc(64 * 1024);
	uint32_t total = 0, soff = 0, roff = 0;
	for (int i = 0; i < n; i++) {
		uint32_t len = 1 + (uint32_t)(i * 37 % 300);

		ssg[i] = vt_sge(s.p + soff, len, s.mr->lkey);
		memcpy(expect + total, s.p + soff, len);
		total += len;
		soff += len + 13;
	}
	/* Receive entries of other sizes, one byte more in all. */
	uint32_t rtotal = 0;
	for (int i = 0; i < n; i++) {
		uint32_t len = total / (uint32_t)n + (i == 0 ? total % (uint32_t)n + 1 : 0);

		rsg[i] = vt_sge(r.p + roff, len, r.mr->lkey);
		rtotal += len;
		roff += len + 7;
	}
	CHECK_EQ(rtotal, total + 1);

	struct ibv_recv_wr rwr = { .wr_id = 71, .sg_list = rsg, .num_sge = n };
	struct ibv_recv_wr *rbad;
	CHECK_OK(ibv_post_recv(p.b, &rwr, &rbad));
	struct ibv_send_wr wr = vt_send_wr(72, IBV_WR_SEND, NULL,
					   IBV_SEND_SIGNALED);
	wr.sg_list = ssg;
	wr.num_sge = n;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 72, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 71, IBV_WC_RECV, total, p.b, p.a, false, 0);

	/* Scatter order and the gaps between entries. */
	uint32_t done = 0;
	roff = 0;
	for (int i = 0; i < n; i++) {
		uint32_t take = rsg[i].length;

		if (take > total - done)
			take = total - done;
		CHECK_MEM(r.p + roff, expect + done, take);
		CHECK_BYTES(r.p + roff + take, 0xee, rsg[i].length - take + 7);
		done += take;
		roff += rsg[i].length + 7;
	}
	CHECK_EQ(done, total);
	CHECK_BYTES(r.p + roff, 0xee, r.len - roff);

	/* RDMA WRITE gathers the same way into contiguous remote memory. */
	struct vt_buf t;
	vt_buf_reg(&e, &t, 64 * 1024,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ);
	memset(t.p, 0xdd, t.len);
	wr = vt_send_wr(73, IBV_WR_RDMA_WRITE, NULL, IBV_SEND_SIGNALED);
	wr.sg_list = ssg;
	wr.num_sge = n;
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 1;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 73, IBV_WC_RDMA_WRITE, p.a);
	CHECK_BYTES(t.p, 0xdd, 1);
	CHECK_MEM(t.p + 1, expect, total);
	CHECK_BYTES(t.p + 1 + total, 0xdd, t.len - 1 - total);

	/* RDMA READ scatters into up to max_sge_rd local entries. */
	int nr = e.dev.max_sge_rd < n ? e.dev.max_sge_rd : n;
	memset(r.p, 0xee, r.len);
	uint32_t want = 0;
	roff = 0;
	for (int i = 0; i < nr; i++) {
		rsg[i] = vt_sge(r.p + roff, 50 + (uint32_t)i, r.mr->lkey);
		want += rsg[i].length;
		roff += rsg[i].length + 5;
	}
	CHECKF(want <= total, "max_sge %d too small for this case", n);
	wr = vt_send_wr(74, IBV_WR_RDMA_READ, NULL, IBV_SEND_SIGNALED);
	wr.sg_list = rsg;
	wr.num_sge = nr;
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 1;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 74, IBV_WC_RDMA_READ, p.a);
	done = 0;
	for (int i = 0; i < nr; i++) {
		CHECK_MEM((uint8_t *)(uintptr_t)rsg[i].addr, expect + done,
			  rsg[i].length);
		CHECK_BYTES((uint8_t *)(uintptr_t)rsg[i].addr + rsg[i].length,
			    0xee, 5);
		done += rsg[i].length;
	}
	CHECK_EQ(done, want);
}

/* Inline data is copied at post time: the buffer needs no MR and may be
 * reused as soon as ibv_post_send returns. */
static void inline_send(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf r, t;
	struct ibv_wc wc;
	uint8_t *src = vt_alloc(4096);	/* not registered */
	uint8_t *orig = vt_alloc(4096);

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_inline_data = 256;
	vt_pair_create(&e, &p, &o, 0);
	CHECK_GE(p.cap_a.max_inline_data, 256);
	uint32_t len = p.cap_a.max_inline_data;
	if (len > 4096)
		len = 4096;
	vt_buf_reg(&e, &r, 8192, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 8192,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	vt_fill(src, len, 8);
	memcpy(orig, src, len);
	vt_post_recv(p.b, 81, r.p, 8192, r.mr->lkey);
	struct ibv_sge sge = vt_sge(src, len, 0xdeadbeef);
	struct ibv_send_wr wr = vt_send_wr(82, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	vt_post_send(p.a, &wr);
	memset(src, 0, len);	/* reused at once */
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 82, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 81, IBV_WC_RECV, len, p.b, p.a, false, 0);
	CHECK_MEM(r.p, orig, len);

	/* Inline RDMA WRITE, two gather entries. */
	vt_fill(src, 200, 9);
	memcpy(orig, src, 200);
	struct ibv_sge sg2[2] = { vt_sge(src, 120, 0), vt_sge(src + 120, 80, 0) };
	wr = vt_send_wr(83, IBV_WR_RDMA_WRITE, NULL,
			IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	wr.sg_list = sg2;
	wr.num_sge = 2;
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 10;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	memset(src, 0xff, 200);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 83, IBV_WC_RDMA_WRITE, p.a);
	CHECK_MEM(t.p + 10, orig, 200);
	CHECK_BYTES(t.p, 0, 10);
	CHECK_BYTES(t.p + 210, 0, 100);
}

/* Only signaled WRs complete; unsignaled ones still free their slots. */
static void unsignaled(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_wc wc[40];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_send_wr = 8;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, 40 * 32, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 40 * 32, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 10);
	for (int i = 0; i < 40; i++)
		vt_post_recv(p.b, 1000 + i, r.p + 32 * i, 32, r.mr->lkey);

	/* 10 rounds of 4: three unsignaled, the fourth signaled. More WRs in
	 * all than the queue holds. */
	for (int round = 0; round < 10; round++) {
		struct ibv_sge sge[4];
		struct ibv_send_wr wr[4];

		for (int k = 0; k < 4; k++) {
			int i = round * 4 + k;

			sge[k] = vt_sge(s.p + 32 * i, 32, s.mr->lkey);
			wr[k] = vt_send_wr(2000 + i, IBV_WR_SEND, &sge[k],
					   k == 3 ? IBV_SEND_SIGNALED : 0);
			wr[k].next = k < 3 ? &wr[k + 1] : NULL;
		}
		vt_post_send(p.a, wr);
		vt_poll(p.cq_a, wc, 1);
		check_send(&wc[0], 2000 + round * 4 + 3, IBV_WC_SEND, p.a);
		CHECK_CQ_EMPTY(p.cq_a);
	}
	vt_poll(p.cq_b, wc, 40);
	for (int i = 0; i < 40; i++)
		check_recv(&wc[i], 1000 + i, IBV_WC_RECV, 32, p.b, p.a, false,
			   0);
	CHECK_MEM(r.p, s.p, 40 * 32);
	CHECK_CQ_EMPTY(p.cq_a);
}

static void sq_sig_all(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_wc wc[3];
	struct ibv_sge sge[3];
	struct ibv_send_wr wr[3];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.sq_sig_all = 1;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 3; i++) {
		vt_post_recv(p.b, 90 + i, r.p + 100 * i, 100, r.mr->lkey);
		sge[i] = vt_sge(s.p, 10, s.mr->lkey);
		wr[i] = vt_send_wr(95 + i, IBV_WR_SEND, &sge[i], 0);
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	vt_post_send(p.a, wr);
	vt_poll(p.cq_a, wc, 3);
	for (int i = 0; i < 3; i++)
		check_send(&wc[i], 95 + i, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, wc, 3);
	CHECK_CQ_EMPTY(p.cq_a);
}

/*
 * RC ordering: many unsignaled RDMA WRITEs, then a SEND. Once the SEND's
 * receive completes, every written byte is in place.
 */
static void ordering(void)
{
	enum { CHUNK = 16 * 1024, N = 64 };
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, t, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_send_wr = 128;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &s, CHUNK * N, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, CHUNK * N,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	vt_buf_reg(&e, &r, 64, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 11);
	vt_post_recv(p.b, 1, r.p, 64, r.mr->lkey);

	struct ibv_sge *sge = vt_alloc(sizeof(*sge) * (N + 1));
	struct ibv_send_wr *wr = vt_alloc(sizeof(*wr) * (N + 1));
	for (int i = 0; i < N; i++) {
		/* Out of address order, so ordering is not an accident. */
		int c = (i * 7) % N;

		sge[i] = vt_sge(s.p + (size_t)c * CHUNK, CHUNK, s.mr->lkey);
		wr[i] = vt_send_wr(100 + i, IBV_WR_RDMA_WRITE, &sge[i], 0);
		wr[i].wr.rdma.remote_addr = (uintptr_t)t.p + (size_t)c * CHUNK;
		wr[i].wr.rdma.rkey = t.mr->rkey;
		wr[i].next = &wr[i + 1];
	}
	sge[N] = vt_sge(s.p, 8, s.mr->lkey);
	wr[N] = vt_send_wr(999, IBV_WR_SEND, &sge[N], IBV_SEND_SIGNALED);
	vt_post_send(p.a, wr);

	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 1, IBV_WC_RECV, 8, p.b, p.a, false, 0);
	/* Checked before the sender's completion is even looked at. */
	CHECK_MEM(t.p, s.p, (size_t)CHUNK * N);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 999, IBV_WC_SEND, p.a);
	CHECK_CQ_EMPTY(p.cq_a);
}

static void large(void)
{
	enum { MB = 1 << 20 };
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, t, l, r;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, MB, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, MB + 8192, VT_ACCESS_ALL);
	vt_buf_reg(&e, &l, MB, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, MB, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, MB, 12);
	memset(t.p, 0x5a, t.len);

	/* 1 MiB WRITE ... */
	struct ibv_sge sge = vt_sge(s.p, MB, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_RDMA_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 4096;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 1, IBV_WC_RDMA_WRITE, p.a);
	CHECK_MEM(t.p + 4096, s.p, MB);
	CHECK_BYTES(t.p, 0x5a, 4096);
	CHECK_BYTES(t.p + 4096 + MB, 0x5a, 4096);

	/* ... read back ... */
	sge = vt_sge(l.p, MB, l.mr->lkey);
	wr = vt_send_wr(2, IBV_WR_RDMA_READ, &sge, IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 4096;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 2, IBV_WC_RDMA_READ, p.a);
	CHECK_MEM(l.p, s.p, MB);

	/* ... and sent. */
	vt_post_recv(p.b, 3, r.p, MB, r.mr->lkey);
	sge = vt_sge(s.p, MB, s.mr->lkey);
	wr = vt_send_wr(4, IBV_WR_SEND, &sge, IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 4, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 3, IBV_WC_RECV, MB, p.b, p.a, false, 0);
	CHECK_MEM(r.p, s.p, MB);
}

static void zero_length(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf r, t;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 4096,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(r.p, 0x42, r.len);
	memset(t.p, 0x43, t.len);

	/* SEND without gather entries. */
	vt_post_recv(p.b, 1, r.p, 64, r.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, NULL,
					   IBV_SEND_SIGNALED);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 2, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 1, IBV_WC_RECV, 0, p.b, p.a, false, 0);

	/* SEND_WITH_IMM of nothing: the immediate alone. */
	vt_post_recv(p.b, 3, r.p, 64, r.mr->lkey);
	wr = vt_send_wr(4, IBV_WR_SEND_WITH_IMM, NULL, IBV_SEND_SIGNALED);
	wr.imm_data = htonl(0x01020304);
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 4, IBV_WC_SEND, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 3, IBV_WC_RECV, 0, p.b, p.a, true, 0x01020304);

	/* Zero-length RDMA WRITE and WRITE_WITH_IMM. */
	wr = vt_send_wr(5, IBV_WR_RDMA_WRITE, NULL, IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 5, IBV_WC_RDMA_WRITE, p.a);
	vt_post_recv(p.b, 6, r.p, 64, r.mr->lkey);
	wr = vt_send_wr(7, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, IBV_SEND_SIGNALED);
	wr.imm_data = htonl(99);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	check_send(&wc, 7, IBV_WC_RDMA_WRITE, p.a);
	vt_poll(p.cq_b, &wc, 1);
	check_recv(&wc, 6, IBV_WC_RECV_RDMA_WITH_IMM, 0, p.b, p.a, true, 99);
	CHECK_BYTES(r.p, 0x42, r.len);
	CHECK_BYTES(t.p, 0x43, t.len);
}

/* A QP connected to itself (its own QPN as destination) works. */
static void self_connected(void)
{
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc[2];

	vt_env_open(&e);
	vt_default_opts(&o);
	cq = CHECK_PTR(ibv_create_cq(e.ctx, 16, NULL, NULL, 0));
	qp = vt_create_qp(e.pd, cq, cq, &o, NULL);
	vt_qp_connect(qp, qp->qp_num, &e.gid, &o);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, 100, 13);
	vt_post_recv(qp, 1, r.p, 4096, r.mr->lkey);
	struct ibv_sge sge = vt_sge(s.p, 100, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(2, IBV_WR_SEND, &sge,
					   IBV_SEND_SIGNALED);
	vt_post_send(qp, &wr);
	vt_poll(cq, wc, 2);
	/* Either order; one is the send, one the receive. */
	struct ibv_wc *sw = wc[0].opcode == IBV_WC_SEND ? &wc[0] : &wc[1];
	struct ibv_wc *rw = sw == &wc[0] ? &wc[1] : &wc[0];
	check_send(sw, 2, IBV_WC_SEND, qp);
	check_recv(rw, 1, IBV_WC_RECV, 100, qp, qp, false, 0);
	CHECK_MEM(r.p, s.p, 100);
}

/* Many READs in flight at once, more than max_rd_atomic: all complete in
 * order with the right bytes. */
static void many_reads(void)
{
	enum { N = 48, LEN = 4096 };
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf l, t;
	struct ibv_wc wc[N];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_send_wr = 64;
	vt_pair_create(&e, &p, &o, 0);
	vt_buf_reg(&e, &l, (size_t)N * LEN, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, (size_t)N * LEN, IBV_ACCESS_REMOTE_READ);
	vt_fill(t.p, t.len, 14);
	memset(l.p, 0, l.len);

	struct ibv_sge *sge = vt_alloc(sizeof(*sge) * N);
	struct ibv_send_wr *wr = vt_alloc(sizeof(*wr) * N);
	for (int i = 0; i < N; i++) {
		/* Read chunk N-1-i into local slot i. */
		sge[i] = vt_sge(l.p + (size_t)i * LEN, LEN, l.mr->lkey);
		wr[i] = vt_send_wr(300 + i, IBV_WR_RDMA_READ, &sge[i],
				   IBV_SEND_SIGNALED);
		wr[i].wr.rdma.remote_addr =
			(uintptr_t)t.p + (size_t)(N - 1 - i) * LEN;
		wr[i].wr.rdma.rkey = t.mr->rkey;
		wr[i].next = i + 1 < N ? &wr[i + 1] : NULL;
	}
	vt_post_send(p.a, wr);
	vt_poll(p.cq_a, wc, N);
	for (int i = 0; i < N; i++) {
		check_send(&wc[i], 300 + i, IBV_WC_RDMA_READ, p.a);
		CHECK_MEM(l.p + (size_t)i * LEN, t.p + (size_t)(N - 1 - i) * LEN,
			  LEN);
	}
}

/* Every operation in one posted list: completions in posting order. */
static void mixed_batch(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf s, l, t, r;
	struct ibv_wc wc[6];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &l, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 8192, VT_ACCESS_ALL);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_fill(s.p, s.len, 15);
	vt_fill(t.p + 4096, 4096, 16);
	*u64_at(&t, 0) = 5;
	vt_post_recv(p.b, 1, r.p, 1024, r.mr->lkey);
	vt_post_recv(p.b, 2, r.p + 1024, 1024, r.mr->lkey);

	struct ibv_sge sg[6] = {
		vt_sge(s.p, 100, s.mr->lkey),	     /* write */
		vt_sge(l.p, 200, l.mr->lkey),	     /* read of what was written */
		vt_sge(l.p + 512, 8, l.mr->lkey),    /* fetch-add */
		vt_sge(s.p + 200, 50, s.mr->lkey),   /* send */
		vt_sge(l.p + 520, 8, l.mr->lkey),    /* cmp-swap */
		vt_sge(s.p + 300, 60, s.mr->lkey),   /* write-imm */
	};
	struct ibv_send_wr wr[6];
	wr[0] = vt_send_wr(10, IBV_WR_RDMA_WRITE, &sg[0], IBV_SEND_SIGNALED);
	wr[0].wr.rdma.remote_addr = (uintptr_t)t.p + 4096;
	wr[0].wr.rdma.rkey = t.mr->rkey;
	wr[1] = vt_send_wr(11, IBV_WR_RDMA_READ, &sg[1], IBV_SEND_SIGNALED);
	wr[1].wr.rdma.remote_addr = (uintptr_t)t.p + 4096;
	wr[1].wr.rdma.rkey = t.mr->rkey;
	wr[2] = vt_send_wr(12, IBV_WR_ATOMIC_FETCH_AND_ADD, &sg[2],
			   IBV_SEND_SIGNALED);
	wr[2].wr.atomic.remote_addr = (uintptr_t)t.p;
	wr[2].wr.atomic.rkey = t.mr->rkey;
	wr[2].wr.atomic.compare_add = 10;
	wr[3] = vt_send_wr(13, IBV_WR_SEND, &sg[3], IBV_SEND_SIGNALED);
	wr[4] = vt_send_wr(14, IBV_WR_ATOMIC_CMP_AND_SWP, &sg[4],
			   IBV_SEND_SIGNALED);
	wr[4].wr.atomic.remote_addr = (uintptr_t)t.p;
	wr[4].wr.atomic.rkey = t.mr->rkey;
	wr[4].wr.atomic.compare_add = 15;
	wr[4].wr.atomic.swap = 99;
	wr[5] = vt_send_wr(15, IBV_WR_RDMA_WRITE_WITH_IMM, &sg[5],
			   IBV_SEND_SIGNALED);
	wr[5].imm_data = htonl(42);
	wr[5].wr.rdma.remote_addr = (uintptr_t)t.p + 6000;
	wr[5].wr.rdma.rkey = t.mr->rkey;
	for (int i = 0; i < 5; i++)
		wr[i].next = &wr[i + 1];
	vt_post_send(p.a, wr);

	static const enum ibv_wc_opcode ops[6] = {
		IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
		IBV_WC_SEND,	   IBV_WC_COMP_SWAP, IBV_WC_RDMA_WRITE,
	};
	vt_poll(p.cq_a, wc, 6);
	for (int i = 0; i < 6; i++)
		check_send(&wc[i], 10 + i, ops[i], p.a);
	/* The READ after the WRITE sees the written bytes, then the old. */
	CHECK_MEM(l.p, s.p, 100);
	CHECK_MEM(l.p + 100, t.p + 4196, 100);
	CHECK_EQ(*u64_at(&l, 512), 5);
	CHECK_EQ(*u64_at(&l, 520), 15);
	CHECK_EQ(*u64_at(&t, 0), 99);
	CHECK_MEM(t.p + 6000, s.p + 300, 60);
	vt_poll(p.cq_b, wc, 2);
	check_recv(&wc[0], 1, IBV_WC_RECV, 50, p.b, p.a, false, 0);
	check_recv(&wc[1], 2, IBV_WC_RECV_RDMA_WITH_IMM, 60, p.b, p.a, true,
		   42);
	CHECK_MEM(r.p, s.p + 200, 50);
}

/*
 * Both directions at once, 8 MiB each way: a WRITEs sa into b's tb while b
 * WRITEs the even chunks of sb into a's ta and READs the odd chunks of a's
 * sa into sb. Nothing may deadlock.
 */
static void bidirectional(void)
{
	enum { LEN = 8 << 20, CHUNK = 1 << 20, N = LEN / CHUNK };
	struct vt_env e;
	struct vt_pair p;
	struct vt_buf sa, ta, sb, tb;
	struct ibv_wc wc[N];
	struct ibv_sge ga[N], gb[N];
	struct ibv_send_wr wa[N], wb[N];

	vt_env_open(&e);
	vt_pair_create(&e, &p, NULL, 0);
	vt_buf_reg(&e, &sa, LEN, VT_ACCESS_ALL);
	vt_buf_reg(&e, &ta, LEN, VT_ACCESS_ALL);
	vt_buf_reg(&e, &sb, LEN, VT_ACCESS_ALL);
	vt_buf_reg(&e, &tb, LEN, VT_ACCESS_ALL);
	vt_fill(sa.p, LEN, 17);
	vt_fill(sb.p, LEN, 18);

	for (int i = 0; i < N; i++) {
		size_t off = (size_t)i * CHUNK;

		ga[i] = vt_sge(sa.p + off, CHUNK, sa.mr->lkey);
		wa[i] = vt_send_wr(i, IBV_WR_RDMA_WRITE, &ga[i],
				   IBV_SEND_SIGNALED);
		wa[i].wr.rdma.remote_addr = (uintptr_t)tb.p + off;
		wa[i].wr.rdma.rkey = tb.mr->rkey;
		wa[i].next = i + 1 < N ? &wa[i + 1] : NULL;

		gb[i] = vt_sge(sb.p + off, CHUNK, sb.mr->lkey);
		if (i % 2 == 0) {
			wb[i] = vt_send_wr(100 + i, IBV_WR_RDMA_WRITE, &gb[i],
					   IBV_SEND_SIGNALED);
			wb[i].wr.rdma.remote_addr = (uintptr_t)ta.p + off;
			wb[i].wr.rdma.rkey = ta.mr->rkey;
		} else {
			wb[i] = vt_send_wr(100 + i, IBV_WR_RDMA_READ, &gb[i],
					   IBV_SEND_SIGNALED);
			wb[i].wr.rdma.remote_addr = (uintptr_t)sa.p + off;
			wb[i].wr.rdma.rkey = sa.mr->rkey;
		}
		wb[i].next = i + 1 < N ? &wb[i + 1] : NULL;
	}
	vt_post_send(p.a, wa);
	vt_post_send(p.b, wb);
	vt_poll(p.cq_a, wc, N);
	for (int i = 0; i < N; i++)
		check_send(&wc[i], i, IBV_WC_RDMA_WRITE, p.a);
	vt_poll(p.cq_b, wc, N);
	for (int i = 0; i < N; i++)
		check_send(&wc[i], 100 + i,
			   i % 2 ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE, p.b);
	CHECK_MEM(tb.p, sa.p, LEN);
	uint8_t *orig_sb = vt_alloc(LEN);
	vt_fill(orig_sb, LEN, 18);
	for (int i = 0; i < N; i++) {
		size_t off = (size_t)i * CHUNK;

		if (i % 2 == 0) {
			CHECK_MEM(ta.p + off, orig_sb + off, CHUNK);
			CHECK_MEM(sb.p + off, orig_sb + off, CHUNK);
		} else {
			CHECK_BYTES(ta.p + off, 0, CHUNK);
			CHECK_MEM(sb.p + off, sa.p + off, CHUNK);
		}
	}
}

struct poster {
	struct ibv_qp *qp;
	struct vt_buf *s;
	int id;
};

enum { POSTERS = 4, PER_POSTER = 100 };

static void *post_many(void *arg)
{
	struct poster *ps = arg;

	for (int k = 0; k < PER_POSTER; k++) {
		uint8_t *slot = ps->s->p + ((size_t)ps->id * PER_POSTER + k) * 8;
		struct ibv_sge sge = vt_sge(slot, 8, ps->s->mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(
			(uint64_t)ps->id << 32 | (uint64_t)k, IBV_WR_SEND, &sge,
			IBV_SEND_SIGNALED);
		struct ibv_send_wr *bad;
		int r;

		slot[0] = (uint8_t)ps->id;
		slot[1] = (uint8_t)k;
		/* The queue may be momentarily full: retry, bounded. */
		uint64_t deadline = vt_now_ms() + VT_POLL_MS;
		while ((r = ibv_post_send(ps->qp, &wr, &bad)) == ENOMEM &&
		       vt_now_ms() < deadline)
			sched_yield();
		CHECKF(r == 0, "thread %d: ibv_post_send returned %d", ps->id, r);
	}
	return NULL;
}

/* Several threads post on one QP: every message arrives once and each
 * thread's messages keep their order. */
static void concurrent_posters(void)
{
	enum { TOTAL = POSTERS * PER_POSTER };
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	pthread_t th[POSTERS];
	struct poster ps[POSTERS];

	vt_env_open(&e);
	vt_default_opts(&o);
	o.max_send_wr = TOTAL;
	o.max_recv_wr = TOTAL;
	vt_pair_create(&e, &p, &o, 2 * TOTAL);
	vt_buf_reg(&e, &s, TOTAL * 8, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, TOTAL * 8, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < TOTAL; i++)
		vt_post_recv(p.b, i, r.p + 8 * i, 8, r.mr->lkey);
	for (int t = 0; t < POSTERS; t++) {
		ps[t] = (struct poster){ p.a, &s, t };
		CHECK_OK(pthread_create(&th[t], NULL, post_many, &ps[t]));
	}
	for (int t = 0; t < POSTERS; t++)
		CHECK_OK(pthread_join(th[t], NULL));

	struct ibv_wc *wc = vt_alloc(sizeof(*wc) * TOTAL);
	vt_poll(p.cq_a, wc, TOTAL);
	int next_a[POSTERS] = { 0 };
	for (int i = 0; i < TOTAL; i++) {
		CHECK_WC(&wc[i], IBV_WC_SUCCESS, IBV_WC_SEND);
		int t = (int)(wc[i].wr_id >> 32), k = (int)(wc[i].wr_id & 0xffffffff);
		CHECKF(t < POSTERS && k == next_a[t], "send completion %d: thread "
		       "%d seq %d, expected seq %d", i, t, k,
		       t < POSTERS ? next_a[t] : -1);
		next_a[t]++;
	}
	vt_poll(p.cq_b, wc, TOTAL);
	int next_b[POSTERS] = { 0 };
	for (int i = 0; i < TOTAL; i++) {
		check_recv(&wc[i], i, IBV_WC_RECV, 8, p.b, p.a, false, 0);
		int t = r.p[8 * i], k = r.p[8 * i + 1];
		CHECKF(t < POSTERS && k == (uint8_t)next_b[t], "message %d: thread "
		       "%d seq %d", i, t, k);
		next_b[t]++;
	}
	CHECK_CQ_EMPTY(p.cq_a);
}

/* One CQ for several QPs: each completion names its QP. */
static void shared_cq(void)
{
	enum { PAIRS = 3 };
	struct vt_env e;
	struct vt_qp_opts o;
	struct vt_buf s, r;
	struct ibv_qp *a[PAIRS], *b[PAIRS];
	struct ibv_wc wc[2 * PAIRS];

	vt_env_open(&e);
	vt_default_opts(&o);
	struct ibv_cq *cq = CHECK_PTR(ibv_create_cq(e.ctx, 64, NULL, NULL, 0));
	vt_buf_reg(&e, &s, 4096, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &r, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < PAIRS; i++) {
		a[i] = vt_create_qp(e.pd, cq, cq, &o, NULL);
		b[i] = vt_create_qp(e.pd, cq, cq, &o, NULL);
	}
	for (int i = 0; i < PAIRS; i++) {
		vt_qp_connect(a[i], b[i]->qp_num, &e.gid, &o);
		vt_qp_connect(b[i], a[i]->qp_num, &e.gid, &o);
		vt_post_recv(b[i], 100 + i, r.p + 256 * i, 256, r.mr->lkey);
	}
	for (int i = 0; i < PAIRS; i++) {
		struct ibv_sge sge = vt_sge(s.p, 10 + (uint32_t)i, s.mr->lkey);
		struct ibv_send_wr wr = vt_send_wr(200 + i, IBV_WR_SEND, &sge,
						   IBV_SEND_SIGNALED);
		vt_post_send(a[i], &wr);
	}
	vt_poll(cq, wc, 2 * PAIRS);
	int seen = 0;
	for (int k = 0; k < 2 * PAIRS; k++) {
		int i = (int)(wc[k].wr_id % 100);

		CHECK(i < PAIRS);
		if (wc[k].wr_id >= 200) {
			check_send(&wc[k], 200 + i, IBV_WC_SEND, a[i]);
		} else {
			check_recv(&wc[k], 100 + i, IBV_WC_RECV, 10 + i, b[i],
				   a[i], false, 0);
		}
		CHECKF(!(seen & 1 << (wc[k].wr_id >= 200 ? i + PAIRS : i)),
		       "completion wr_id %llu twice",
		       (unsigned long long)wc[k].wr_id);
		seen |= 1 << (wc[k].wr_id >= 200 ? i + PAIRS : i);
	}
	CHECK_CQ_EMPTY(cq);
}

/*
 * IBV_WR_ATOMIC_WRITE: 8 bytes stored at once at an aligned remote address
 * (IBV_WC_ATOMIC_WRITE); misaligned is an invalid request, no remote write
 * right an access error, another length EINVAL at post; ibv_wr_atomic_write
 * on an extended QP.
 */
static void atomic_write(void)
{
	struct vt_env e;
	struct vt_pair p;
	struct vt_qp_opts o;
	struct ibv_wc wc;

	vt_env_open(&e);
	vt_default_opts(&o);
	o.access = VT_ACCESS_ALL;
	o.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_SEND;
	vt_pair_create(&e, &p, &o, 0);
	struct vt_buf s, t, ro;
	vt_buf_reg(&e, &s, 64, IBV_ACCESS_LOCAL_WRITE);
	vt_buf_reg(&e, &t, 64, VT_ACCESS_ALL);
	vt_buf_reg(&e, &ro, 64, IBV_ACCESS_REMOTE_READ);
	uint64_t v = 0x1122334455667788ull;
	memcpy(s.p, &v, 8);
	memset(t.p, 0xee, 64);

	struct ibv_sge sge = vt_sge(s.p, 8, s.mr->lkey);
	struct ibv_send_wr wr = vt_send_wr(1, IBV_WR_ATOMIC_WRITE, &sge,
					   IBV_SEND_SIGNALED);
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 16;
	wr.wr.rdma.rkey = t.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
	uint64_t got;
	memcpy(&got, t.p + 16, 8);
	CHECK_EQ(got, v);
	CHECK_BYTES(t.p, 0xee, 16);
	CHECK_BYTES(t.p + 24, 0xee, 40);

	/* The extended API carries the value itself. */
	struct ibv_qp_ex *qx = CHECK_PTR(ibv_qp_to_qp_ex(p.a));
	uint64_t w2 = 0xa5a5a5a5deadbeefull;
	ibv_wr_start(qx);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, t.mr->rkey, (uintptr_t)t.p + 32, &w2);
	CHECK_OK(ibv_wr_complete(qx));
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC(&wc, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
	memcpy(&got, t.p + 32, 8);
	CHECK_EQ(got, w2);

	/* Not 8 bytes: refused at post. */
	struct ibv_send_wr *bad;
	sge.length = 4;
	CHECK_RET(ibv_post_send(p.a, &wr, &bad), EINVAL);
	sge.length = 8;

	/* Misaligned: an invalid request. */
	wr.wr.rdma.remote_addr = (uintptr_t)t.p + 4;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_INV_REQ_ERR);

	/* No remote write right: an access error, target untouched. */
	vt_pair_create(&e, &p, &o, 0);
	memset(ro.p, 0x11, 64);
	wr.wr.rdma.remote_addr = (uintptr_t)ro.p;
	wr.wr.rdma.rkey = ro.mr->rkey;
	vt_post_send(p.a, &wr);
	vt_poll(p.cq_a, &wc, 1);
	CHECK_WC_STATUS(&wc, IBV_WC_REM_ACCESS_ERR);
	CHECK_BYTES(ro.p, 0x11, 64);
}

static const struct vt_case cases[] = {
	VT_CASE(atomic_write),
	VT_CASE(send_recv),   VT_CASE(send_imm),    VT_CASE(rdma_write),
	VT_CASE(write_imm),   VT_CASE(rdma_read),   VT_CASE(cmp_swap),
	VT_CASE(fetch_add),   VT_CASE(multi_sge),   VT_CASE(inline_send),
	VT_CASE(unsignaled),  VT_CASE(sq_sig_all),  VT_CASE(ordering),
	VT_CASE(large),	      VT_CASE(zero_length), VT_CASE(self_connected),
	VT_CASE(many_reads),  VT_CASE(mixed_batch), VT_CASE(bidirectional),
	VT_CASE(concurrent_posters), VT_CASE(shared_cq),
};
VT_MAIN(cases)
