# Posts the RC, UC and UD operations Debian's tools never send between
# rxeA and rxeB (capture.sh), so the capture holds them: immediates, SEND
# with invalidate, an RNR NAK, a remote access NAK, UC WRITEs, UD with
# immediate. Usage: ops.py GID_INDEX_A GID_INDEX_B rc|rnr|nak|uc|ud
import sys, time
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QPInitAttr, QPCap, QP, QPAttr
from pyverbs.mr import MR
from pyverbs.addr import AHAttr, GlobalRoute, AH
from pyverbs.wr import SGE, SendWR, RecvWR
import pyverbs.enums as e

gA, gB = int(sys.argv[1]), int(sys.argv[2])
ACC = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
       e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)

class Side:
    def __init__(s, dev, gidx, qpt):
        s.ctx = Context(name=dev)
        s.pd = PD(s.ctx)
        s.cq = CQ(s.ctx, 64)
        s.mr = MR(s.pd, 4096, ACC)
        s.gidx = gidx
        s.gid = s.ctx.query_gid(1, gidx)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        s.qp = QP(s.pd, QPInitAttr(qp_type=qpt, scq=s.cq, rcq=s.cq, cap=cap))
        s.qpt = qpt

    def ah_attr(s, peer):
        gr = GlobalRoute(dgid=peer.gid, sgid_index=s.gidx, hop_limit=64)
        return AHAttr(port_num=1, is_global=1, gr=gr)

    def connect(s, peer, psn, peer_psn, rnr_retry=7):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = 1
        if s.qpt == e.IBV_QPT_UD:
            a.qkey = 0x11111111
            s.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
            a = QPAttr(); a.qp_state = e.IBV_QPS_RTR
            s.qp.modify(a, e.IBV_QP_STATE)
            a = QPAttr(); a.qp_state = e.IBV_QPS_RTS; a.sq_psn = psn
            s.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
            return
        a.qp_access_flags = ACC if s.qpt == e.IBV_QPT_RC else e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE
        s.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        a.path_mtu = e.IBV_MTU_256
        a.dest_qp_num = peer.qp.qp_num
        a.rq_psn = peer_psn
        a.ah_attr = s.ah_attr(peer)
        m = e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
        if s.qpt == e.IBV_QPT_RC:
            a.max_dest_rd_atomic = 1
            a.min_rnr_timer = 14
            m |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
        s.qp.modify(a, m)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.sq_psn = psn
        m = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
        if s.qpt == e.IBV_QPT_RC:
            a.timeout = 14; a.retry_cnt = 1; a.rnr_retry = rnr_retry; a.max_rd_atomic = 1
            m |= e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC
        s.qp.modify(a, m)

    def recv(s, n=1, off=2048, length=1024):
        for i in range(n):
            s.qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[SGE(s.mr.buf + off, length, s.mr.lkey)]))

    def wait(s, what, n=1, secs=5):
        end = time.time() + secs
        got = []
        while len(got) < n and time.time() < end:
            k, wcs = s.cq.poll()
            if k > 0:
                got += wcs
        print(what, [(w.wr_id, w.status, w.opcode) for w in got], flush=True)
        return got

def post(side, op, length=37, imm=0, rkey=None, addr=None, atomic=None, ud=None):
    wr = SendWR(wr_id=op, opcode=op, num_sge=1, sg=[SGE(side.mr.buf, length, side.mr.lkey)], imm_data=imm)
    if atomic is not None:
        wr.set_wr_atomic(rkey, addr, atomic[0], atomic[1])
    elif rkey is not None:
        wr.set_wr_rdma(rkey, addr)
    if ud is not None:
        wr.set_wr_ud(*ud)
    side.qp.post_send(wr)

which = sys.argv[3]
if which == "rc":
    a, b = Side("rxeA", gA, e.IBV_QPT_RC), Side("rxeB", gB, e.IBV_QPT_RC)
    a.connect(b, 0x100, 0x200); b.connect(a, 0x200, 0x100)
    a.mr.write(bytes(range(256)) * 16, 4096)
    b.recv(3)
    post(a, e.IBV_WR_SEND_WITH_IMM, 37, imm=0x12345678); a.wait("send_imm"); b.wait("recv", 1)
    post(a, e.IBV_WR_SEND_WITH_IMM, 600, imm=0x0a0b0c0d); a.wait("send_imm_seg"); b.wait("recv", 1)
    post(a, e.IBV_WR_RDMA_WRITE_WITH_IMM, 37, imm=0x01020304, rkey=b.mr.rkey, addr=b.mr.buf + 64); a.wait("write_imm"); b.wait("recv", 1)
    b.recv(1)
    post(a, e.IBV_WR_RDMA_WRITE_WITH_IMM, 600, imm=0x05060708, rkey=b.mr.rkey, addr=b.mr.buf + 64); a.wait("write_imm_seg"); b.wait("recv", 1)
    b.recv(1)
    # rxe ACKs this but fails the receive (a plain MR cannot be
    # invalidated) and moves its QP to ERR: nothing answers after it.
    post(a, e.IBV_WR_SEND_WITH_INV, 37, imm=b.mr.rkey); a.wait("send_inv"); b.wait("recv", 1)
    post(a, e.IBV_WR_RDMA_WRITE, 8, rkey=(b.mr.rkey ^ 0x5a00), addr=b.mr.buf); a.wait("write_unanswered")
elif which == "nak":
    a, b = Side("rxeA", gA, e.IBV_QPT_RC), Side("rxeB", gB, e.IBV_QPT_RC)
    a.connect(b, 0x900, 0xa00); b.connect(a, 0xa00, 0x900)
    post(a, e.IBV_WR_RDMA_WRITE, 8, rkey=(b.mr.rkey ^ 0x5a00), addr=b.mr.buf); a.wait("write_badkey")
elif which == "uc":
    a, b = Side("rxeA", gA, e.IBV_QPT_UC), Side("rxeB", gB, e.IBV_QPT_UC)
    a.connect(b, 0x700, 0x800); b.connect(a, 0x800, 0x700)
    a.mr.write(bytes(range(256)) * 16, 4096)
    b.recv(2)
    post(a, e.IBV_WR_RDMA_WRITE_WITH_IMM, 600, imm=0x11223344, rkey=b.mr.rkey, addr=b.mr.buf + 128); a.wait("uc_write_imm_seg"); b.wait("recv", 1)
    post(a, e.IBV_WR_RDMA_WRITE, 8, rkey=b.mr.rkey, addr=b.mr.buf); a.wait("uc_write")
    post(a, e.IBV_WR_SEND_WITH_IMM, 37, imm=0x55667788); a.wait("uc_send_imm"); b.wait("recv", 1)
elif which == "rnr":
    a, b = Side("rxeA", gA, e.IBV_QPT_RC), Side("rxeB", gB, e.IBV_QPT_RC)
    a.connect(b, 0x300, 0x400, rnr_retry=0); b.connect(a, 0x400, 0x300)
    post(a, e.IBV_WR_SEND, 5); a.wait("send_rnr")
elif which == "ud":
    a, b = Side("rxeA", gA, e.IBV_QPT_UD), Side("rxeB", gB, e.IBV_QPT_UD)
    a.connect(b, 0x500, 0); b.connect(a, 0x600, 0)
    b.recv(2)
    ah = AH(a.pd, attr=a.ah_attr(b))
    post(a, e.IBV_WR_SEND_WITH_IMM, 21, imm=0x7f000001, ud=(ah, b.qp.qp_num, 0x11111111)); a.wait("ud_send_imm"); b.wait("recv", 1)
