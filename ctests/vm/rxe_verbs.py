#!/usr/bin/python3
# Verbs of a kernel RoCE provider that Debian's programs leave out, through
# pyverbs, on one device in one process (RC QPs connected to each other);
# run in the VM by ctests/tests/vm_rxe_verbs.sh:
#   post_list  ibv_post_send of a linked list: inline, two SGEs, WRITE_WITH_IMM
#   wr_api     ibv_wr_*: inline data list, SGE list, RDMA write/read, atomics
#   cq_ex      ibv_start_poll/next_poll/end_poll over many entries, then on
#   cq_resize  ibv_resize_cq up and down with traffic after each
#   srq        ibv_post_srq_recv until full, ibv_modify_srq (resize, limit),
#              ibv_query_srq, traffic through the resized SRQ
# Usage: rxe_verbs.py DEVICE GID_INDEX [CASE...]; prints "ok CASE" or
# "FAIL CASE: why" per case, exits 1 when one failed.
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPEx, QPAttr, QPCap, QPInitAttr, QPInitAttrEx, DataBuffer
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

dev, gidx = sys.argv[1], int(sys.argv[2])
ctx = Context(name=dev)
pd = PD(ctx)
gid = ctx.query_gid(1, gidx)
ACC = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
       e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)
SIG = e.IBV_SEND_SIGNALED


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def qp_attr():
    a = QPAttr(port_num=1)
    a.qp_access_flags = ACC
    return a


def make_qp(cq, srq=None, send_ops=0):
    cap = QPCap(max_send_wr=64, max_recv_wr=0 if srq else 64, max_send_sge=4,
                max_recv_sge=4, max_inline_data=64)
    if send_ops:
        ia = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=cap, pd=pd,
                          comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                          send_ops_flags=send_ops)
        return QPEx(ctx, ia, qp_attr())
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=cap), qp_attr())


def connect(a, b):
    for x, y in ((a, b), (b, a)):
        at = qp_attr()
        at.path_mtu = e.IBV_MTU_1024
        at.dest_qp_num = y.qp_num
        at.rq_psn = at.sq_psn = 0
        at.max_dest_rd_atomic = at.max_rd_atomic = 1
        at.min_rnr_timer, at.rnr_retry, at.retry_cnt, at.timeout = 12, 7, 7, 14
        at.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=gidx))
        x.to_rts(at)


def poll(cq, n, what):
    wcs, end = [], time.time() + 10
    while len(wcs) < n:
        k, got = cq.poll(n - len(wcs))
        wcs += got
        check(time.time() < end, f'{what}: {len(wcs)} of {n} completions in 10 s: '
              f'{[(w.wr_id, w.status, w.opcode, w.byte_len) for w in wcs]}')
    for w in wcs:
        check(w.status == e.IBV_WC_SUCCESS, f'{what}: wr {w.wr_id} status {w.status}')
    return wcs


def recv(qp_or_srq, mr, wr_id, off, length=256):
    qp_or_srq.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(mr.buf + off, length, mr.lkey)]))


def case_post_list():
    cq = CQ(ctx, 64)
    a, b = make_qp(cq), make_qp(cq)
    connect(a, b)
    ma, mb = MR(pd, 8192, ACC), MR(pd, 8192, ACC)
    for i in range(2):
        recv(b, mb, 100 + i, 256 * i)
    ma.write(b'hello world', 11, 0)
    ma.write(b'ABCDE', 5, 1000)
    ma.write(b'fghijkl', 7, 2000)
    ma.write(b'0123456789abcdef', 16, 3000)
    w3 = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1,
                sg=[SGE(ma.buf + 3000, 16, ma.lkey)], imm_data=0x12345678)
    w3.set_wr_rdma(mb.rkey, mb.buf + 4096)
    w2 = SendWR(wr_id=2, num_sge=2, sg=[SGE(ma.buf + 1000, 5, ma.lkey), SGE(ma.buf + 2000, 7, ma.lkey)],
                next_wr=w3)
    w1 = SendWR(wr_id=1, num_sge=1, sg=[SGE(ma.buf, 11, ma.lkey)], send_flags=SIG | e.IBV_SEND_INLINE,
                next_wr=w2)
    recv(b, mb, 102, 512)
    a.post_send(w1)
    sends = poll(cq, 6, 'post_list')
    got = {w.wr_id: w for w in sends}
    check(sorted(got) == [1, 2, 3, 100, 101, 102], f'wr ids {sorted(got)}')
    check(got[100].byte_len == 11 and mb.read(11, 0) == b'hello world', 'inline send')
    check(got[101].byte_len == 12 and mb.read(12, 256) == b'ABCDEfghijkl', 'two-SGE send')
    check(got[102].opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and got[102].wc_flags & e.IBV_WC_WITH_IMM,
          'write with immediate completes a receive')
    check(mb.read(16, 4096) == b'0123456789abcdef', 'written data')


def case_wr_api():
    cq = CQ(ctx, 64)
    ops = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE |
           e.IBV_QP_EX_WITH_RDMA_READ | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
           e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
    a, b = make_qp(cq, send_ops=ops), make_qp(cq, send_ops=ops)
    connect(a, b)
    ma, mb = MR(pd, 8192, ACC), MR(pd, 8192, ACC)
    for i in range(2):
        recv(b, mb, 100 + i, 256 * i)
    ma.write(b'abc', 3, 0)
    ma.write(b'defg', 4, 100)
    ma.write(b'hijkl', 5, 200)
    ma.write(b'XYZ', 3, 300)
    ma.write(b'123456789', 9, 400)
    ma.write(b'remote write', 12, 500)
    mb.write(b'remote read!', 12, 2048)
    mb.write((40).to_bytes(8, 'little'), 8, 4096)
    mb.write((7).to_bytes(8, 'little'), 8, 4104)
    a.wr_start()
    a.wr_id, a.wr_flags = 1, SIG
    a.wr_send()
    a.wr_set_inline_data_list(3, [DataBuffer(ma.buf, 3), DataBuffer(ma.buf + 100, 4),
                                  DataBuffer(ma.buf + 200, 5)])
    a.wr_id = 2
    a.wr_send_imm(77)
    a.wr_set_sge_list(2, [SGE(ma.buf + 300, 3, ma.lkey), SGE(ma.buf + 400, 9, ma.lkey)])
    a.wr_id = 3
    a.wr_rdma_write(mb.rkey, mb.buf + 1024)
    a.wr_set_sge(SGE(ma.buf + 500, 12, ma.lkey))
    a.wr_id = 4
    a.wr_rdma_read(mb.rkey, mb.buf + 2048)
    a.wr_set_sge(SGE(ma.buf + 600, 12, ma.lkey))
    a.wr_id = 5
    a.wr_atomic_fetch_add(mb.rkey, mb.buf + 4096, 2)
    a.wr_set_sge(SGE(ma.buf + 1000, 8, ma.lkey))
    a.wr_id = 6
    a.wr_atomic_cmp_swp(mb.rkey, mb.buf + 4104, 7, 99)
    a.wr_set_sge(SGE(ma.buf + 1008, 8, ma.lkey))
    a.wr_complete()
    got = {w.wr_id: w for w in poll(cq, 8, 'wr_api')}
    check(got[100].byte_len == 12 and mb.read(12, 0) == b'abcdefghijkl',
          f'inline data list: {got[100].byte_len} bytes {mb.read(12, 0)!r}')
    check(got[101].byte_len == 12 and mb.read(12, 256) == b'XYZ123456789',
          f'SGE list: {got[101].byte_len} bytes {mb.read(12, 256)!r}')
    check(mb.read(12, 1024) == b'remote write', 'RDMA write')
    check(ma.read(12, 600) == b'remote read!', 'RDMA read')
    check(int.from_bytes(ma.read(8, 1000), 'little') == 40 and
          int.from_bytes(mb.read(8, 4096), 'little') == 42, 'fetch and add')
    check(int.from_bytes(ma.read(8, 1008), 'little') == 7 and
          int.from_bytes(mb.read(8, 4104), 'little') == 99, 'compare and swap')
    # A batch that is aborted posts nothing; the next one still works.
    a.wr_start()
    a.wr_id = 9
    a.wr_send()
    a.wr_set_sge(SGE(ma.buf, 3, ma.lkey))
    a.wr_abort()
    recv(b, mb, 103, 512)
    a.wr_start()
    a.wr_id = 10
    a.wr_send()
    a.wr_set_sge(SGE(ma.buf + 100, 4, ma.lkey))
    a.wr_complete()
    got = [w.wr_id for w in poll(cq, 2, 'after abort')]
    check(sorted(got) == [10, 103] and mb.read(4, 512) == b'defg', f'after abort: {got}')


def poll_ex(cq, want, what):
    """All of `want` completions through start/next/end_poll, in batches."""
    seen, end = [], time.time() + 10
    while len(seen) < want:
        check(time.time() < end, f'{what}: {len(seen)} of {want} in 10 s')
        if cq.start_poll(PollCqAttr()) != 0:
            continue
        while True:
            check(cq.status == e.IBV_WC_SUCCESS, f'{what}: status {cq.status}')
            seen.append((cq.wr_id, cq.read_opcode(), cq.read_byte_len()))
            if cq.poll_next() != 0:
                break
        cq.end_poll()
    return seen


def case_cq_ex():
    cq = CQEX(ctx, CqInitAttrEx(cqe=32, wc_flags=e.IBV_WC_STANDARD_FLAGS))
    a, b = make_qp(cq), make_qp(cq)
    connect(a, b)
    ma, mb = MR(pd, 8192, ACC), MR(pd, 8192, ACC)
    # Many rounds through a small CQ: a consumer index left wrong by
    # end_poll would overflow it within a few.
    for r in range(12):
        for i in range(4):
            recv(b, mb, 100 + i, 256 * i)
        for i in range(4):
            a.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(ma.buf, 10 + i, ma.lkey)]))
        seen = poll_ex(cq, 8, f'cq_ex round {r}')
        recvs = sorted((w, n) for w, op, n in seen if op == e.IBV_WC_RECV)
        check(recvs == [(100 + i, 10 + i) for i in range(4)], f'round {r}: {seen}')


def case_cq_resize():
    cq = CQ(ctx, 8)
    a, b = make_qp(cq), make_qp(cq)
    connect(a, b)
    ma, mb = MR(pd, 8192, ACC), MR(pd, 8192, ACC)
    for size, n in ((64, 24), (12, 4), (100, 40)):
        cq.resize(size)
        check(cq.cqe >= size, f'resize to {size}: cqe {cq.cqe}')
        for i in range(n // 2):
            recv(b, mb, 1000 + i, 16 * i, 16)
        for i in range(n // 2):
            a.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(ma.buf, 16, ma.lkey)]))
        poll(cq, n, f'after resize to {size}')


def case_srq():
    cq = CQ(ctx, 256)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
    first = srq.query().max_wr
    a, b = make_qp(cq), make_qp(cq, srq=srq)
    connect(a, b)
    ma, mb = MR(pd, 65536, ACC), MR(pd, 65536, ACC)
    posted = 0
    try:
        for i in range(first + 8):
            recv(srq, mb, i, 256 * i)
            posted += 1
    except Exception:
        pass
    check(posted == first, f'SRQ of {first} took {posted} receives')
    srq.modify(SrqAttr(max_wr=100), e.IBV_SRQ_MAX_WR)
    q = srq.query()
    check(q.max_wr >= 100, f'resized SRQ max_wr {q.max_wr}')
    # The receives posted before the resize are still there (the kernel
    # copies them into the new ring); add more, then use them all.
    for i in range(posted, 60):
        recv(srq, mb, i, 256 * i)
    srq.modify(SrqAttr(srq_limit=4), e.IBV_SRQ_LIMIT)
    check(srq.query().srq_limit == 4, 'SRQ limit')
    for i in range(60):
        ma.write(i.to_bytes(4, 'little'), 4, 4 * i)
        a.post_send(SendWR(wr_id=i, num_sge=1, sg=[SGE(ma.buf + 4 * i, 4, ma.lkey)]))
        if i % 20 == 19:
            poll(cq, 40, f'srq batch {i // 20}')
    for i in range(60):
        check(int.from_bytes(mb.read(4, 256 * i), 'little') == i, f'message {i}')


CASES = {n[5:]: f for n, f in sorted(globals().items()) if n.startswith('case_')}
failed = 0
for name in sys.argv[3:] or CASES:
    try:
        CASES[name]()
        print(f'ok {name}', flush=True)
    except Exception as ex:
        failed += 1
        print(f'FAIL {name}: {type(ex).__name__}: {ex}', flush=True)
sys.exit(1 if failed else 0)
