//! Error paths: remote and local protection errors, RNR, lost peers,
//! flushing, post-time checks and the QP state machine.

mod common;

use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

fn write_wr(wr_id: u64, sg: &mut [ibv_sge], raddr: u64, rkey: u32) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, IBV_WR_RDMA_WRITE, sg, IBV_SEND_SIGNALED);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: raddr,
        rkey,
    };
    wr
}

/// Posts a remote operation that must fail with IBV_WC_REM_ACCESS_ERR and
/// checks the target bytes are unchanged, the responder went to ERR with a
/// QP_ACCESS_ERR event, and the requester flushes what followed.
fn expect_rem_access(p: &Pair, target: &Buf, wr: ibv_send_wr) {
    expect_remote_error(
        p,
        target,
        wr,
        IBV_WC_REM_ACCESS_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
    );
}

/// As [`expect_rem_access`], for the given requester status and responder
/// event.
fn expect_remote_error(
    p: &Pair,
    target: &Buf,
    mut wr: ibv_send_wr,
    status: ibv_wc_status,
    event: ibv_event_type,
) {
    let before = target.snapshot();
    let src = p.buf(8);
    let mut sg = [src.sge(0, 8)];
    let mut next = send_wr(99, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    wr.next = &mut next;
    assert_eq!(post_send(p.a, &mut wr), 0);
    let e = wait_wc(p.cq_a);
    assert_eq!(e.status, status);
    assert_eq!(e.wr_id, wr.wr_id);
    assert_eq!(e.qp_num, qpn(p.a));
    let f = wait_wc(p.cq_a);
    assert_eq!((f.status, f.wr_id), (IBV_WC_WR_FLUSH_ERR, 99));
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert_eq!(qp_state(p.b), IBV_QPS_ERR);
    let mut ev = get_async(p.c.ctx).expect("async event");
    assert_eq!(ev.event_type, event);
    // SAFETY: QP events carry the QP.
    assert_eq!(unsafe { ev.element.qp }, p.b);
    ack_async(&mut ev);
    assert_eq!(target.snapshot(), before, "target memory must not change");
}

fn patterned(p: &Pair, len: usize, access: u32) -> Buf {
    let mut b = Buf::new(p.pd, len, access);
    for (i, x) in b.bytes_mut().iter_mut().enumerate() {
        *x = 0x40 | (i as u8 & 0x3f);
    }
    b
}

const ALL: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

#[test]
fn write_with_bad_rkey() {
    let p = Pair::new();
    let t = patterned(&p, 64, ALL);
    let src = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    expect_rem_access(&p, &t, write_wr(1, &mut sg, t.addr(), t.rkey() ^ 0x5a5a));
}

#[test]
fn write_out_of_range() {
    let p = Pair::new();
    let t = patterned(&p, 64, ALL);
    let src = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    expect_rem_access(&p, &t, write_wr(2, &mut sg, t.addr() + 56, t.rkey()));
}

#[test]
fn write_without_remote_write_permission() {
    let p = Pair::new();
    let t = patterned(&p, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    let src = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    expect_rem_access(&p, &t, write_wr(3, &mut sg, t.addr(), t.rkey()));
}

#[test]
fn write_refused_by_qp_access_flags() {
    let ob = ConnOpts {
        access: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
        ..ConnOpts::default()
    };
    let p = Pair::with(ConnOpts::default(), ob, |_| {});
    let t = patterned(&p, 64, ALL);
    let src = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    expect_rem_access(&p, &t, write_wr(4, &mut sg, t.addr(), t.rkey()));
}

#[test]
fn read_without_remote_read_permission() {
    let p = Pair::new();
    let t = patterned(&p, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    let local = p.buf(16);
    let mut sg = [local.sge(0, 16)];
    let mut wr = write_wr(5, &mut sg, t.addr(), t.rkey());
    wr.opcode = IBV_WR_RDMA_READ;
    expect_rem_access(&p, &t, wr);
    assert!(local.snapshot().iter().all(|&b| b == 0));
}

#[test]
fn unaligned_atomic() {
    let p = Pair::new();
    let t = patterned(&p, 64, ALL);
    let res = p.buf(8);
    let mut sg = [res.sge(0, 8)];
    let mut wr = send_wr(6, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sg, IBV_SEND_SIGNALED);
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: t.addr() + 4,
        compare_add: 1,
        swap: 0,
        rkey: t.rkey(),
    };
    expect_remote_error(&p, &t, wr, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
}

/// Atomic addresses are in the MR's iova space: an aligned iova does not
/// make the host memory behind it aligned, and an atomic on unaligned host
/// memory is refused like any misaligned one.
#[test]
fn atomic_on_unaligned_host_memory() {
    let p = Pair::new();
    let mut mem = vec![0x4142_4344_4546_4748u64; 9];
    // SAFETY: 4 bytes into a 72-byte allocation, 64 bytes left.
    let host = unsafe { (mem.as_mut_ptr() as *mut u8).add(4) };
    let iova = 0x10_0000u64;
    // SAFETY: pd is ours; the memory outlives the registration.
    let mr = unsafe { OPS.reg_mr.unwrap()(p.pd, host.cast(), 64, iova, ALL) };
    assert!(!mr.is_null(), "reg_mr: errno {}", errno());
    let t = Buf { mem, len: 72, mr };
    let res = p.buf(8);
    let mut sg = [res.sge(0, 8)];
    let mut wr = send_wr(8, IBV_WR_ATOMIC_FETCH_AND_ADD, &mut sg, IBV_SEND_SIGNALED);
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: iova + 8,
        compare_add: 1,
        swap: 0,
        rkey: t.rkey(),
    };
    expect_rem_access(&p, &t, wr);
}

#[test]
fn atomic_without_permission() {
    let p = Pair::new();
    let t = patterned(&p, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    let res = p.buf(8);
    let mut sg = [res.sge(0, 8)];
    let mut wr = send_wr(7, IBV_WR_ATOMIC_CMP_AND_SWP, &mut sg, IBV_SEND_SIGNALED);
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: t.addr(),
        compare_add: 0x4140,
        swap: 7,
        rkey: t.rkey(),
    };
    expect_rem_access(&p, &t, wr);
}

#[test]
fn rkey_from_another_pd() {
    let p = Pair::new();
    let other_pd = p.c.alloc_pd();
    let mut t = Buf::new(other_pd, 64, ALL);
    t.bytes_mut().fill(0x33);
    let src = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    expect_rem_access(&p, &t, write_wr(8, &mut sg, t.addr(), t.rkey()));
}

#[test]
fn receive_too_small() {
    let p = Pair::new();
    let src = p.buf(100);
    let dst = patterned(&p, 100, ALL);
    let before = dst.snapshot();
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 10)]), 0);
    assert_eq!(post_recv(p.b, 2, &mut [dst.sge(10, 90)]), 0);
    let mut sg = [src.sge(0, 50)];
    let mut w = send_wr(3, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    let e = wait_wc(p.cq_a);
    assert_eq!((e.status, e.wr_id), (IBV_WC_REM_INV_REQ_ERR, 3));
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.wr_id), (IBV_WC_LOC_LEN_ERR, 1));
    let f = wait_wc(p.cq_b);
    assert_eq!((f.status, f.wr_id), (IBV_WC_WR_FLUSH_ERR, 2));
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    assert_eq!(qp_state(p.b), IBV_QPS_ERR);
    assert_eq!(dst.snapshot(), before);
}

#[test]
fn rnr_retry_exceeded() {
    let oa = ConnOpts {
        rnr_retry: 1,
        ..ConnOpts::default()
    };
    let ob = ConnOpts {
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    let p = Pair::with(oa, ob, |_| {});
    let src = p.buf(8);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    let e = wait_wc(p.cq_a);
    assert_eq!((e.status, e.wr_id), (IBV_WC_RNR_RETRY_EXC_ERR, 1));
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    // The responder is not at fault and stays usable.
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
    assert_no_wc(p.cq_b, Duration::from_millis(20));
}

#[test]
fn rnr_write_with_imm_exceeded() {
    let oa = ConnOpts {
        rnr_retry: 0,
        ..ConnOpts::default()
    };
    let ob = ConnOpts {
        min_rnr_timer: 2,
        ..ConnOpts::default()
    };
    let p = Pair::with(oa, ob, |_| {});
    let src = p.buf(8);
    let t = patterned(&p, 8, ALL);
    let before = t.snapshot();
    let mut sg = [src.sge(0, 8)];
    let mut w = write_wr(1, &mut sg, t.addr(), t.rkey());
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_RNR_RETRY_EXC_ERR);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn rnr_succeeds_when_receive_is_posted_late() {
    // rnr_retry 7 waits forever for the receive.
    let p = Pair::new();
    let mut src = p.buf(32);
    let dst = p.buf(32);
    src.bytes_mut().fill(0x77);
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    // Nothing can complete while the responder has no receive.
    assert_no_wc(p.cq_a, Duration::from_millis(50));
    assert_eq!(post_recv(p.b, 5, &mut [dst.sge(0, 32)]), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.wr_id, r.byte_len), (IBV_WC_SUCCESS, 5, 32));
    assert_eq!(dst.snapshot(), src.bytes());
}

#[test]
fn rnr_wakes_without_polling_the_responder() {
    // The receive is posted while nobody polls B's CQ: the progress thread
    // must be woken by the post itself.
    let o = ConnOpts::default();
    let p = Pair::with(o, o, |_| {});
    let src = p.buf(0x10);
    let dst = p.buf(0x10);
    let mut sg = [src.sge(0, 0x10)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_no_wc(p.cq_a, Duration::from_millis(30));
    assert_eq!(post_recv(p.b, 5, &mut [dst.sge(0, 0x10)]), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
}

#[test]
fn peer_destroyed_gives_retry_exceeded() {
    let p = Pair::new();
    let src = p.buf(8);
    destroy_qp(p.b);
    let mut sg = [src.sge(0, 8)];
    let mut w1 = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    let mut w2 = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    w1.next = &mut w2;
    assert_eq!(post_send(p.a, &mut w1), 0);
    let e = wait_wc(p.cq_a);
    assert_eq!((e.status, e.wr_id), (IBV_WC_RETRY_EXC_ERR, 1));
    let f = wait_wc(p.cq_a);
    assert_eq!((f.status, f.wr_id), (IBV_WC_WR_FLUSH_ERR, 2));
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
}

#[test]
fn peer_that_never_existed() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(8, null_mut());
    let a = c.qp(pd, cq, cq);
    // Take a QP number, then free it, so nothing listens there.
    let gone = c.qp(pd, cq, cq);
    let dead = qpn(gone);
    destroy_qp(gone);
    let o = ConnOpts::default();
    to_init(a, o.access);
    to_rtr(a, dead, &o);
    to_rts(a, &o);
    let src = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    assert_eq!(wait_wc(cq).status, IBV_WC_RETRY_EXC_ERR);
}

#[test]
fn bad_lkey_is_a_local_protection_error() {
    let p = Pair::new();
    let src = p.buf(8);
    let dst = p.buf(8);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 8)]), 0);
    let mut good = [src.sge(0, 8)];
    let mut bad = [ibv_sge {
        addr: src.addr(),
        length: 8,
        lkey: src.lkey() ^ 1,
    }];
    let mut w1 = send_wr(1, IBV_WR_SEND, &mut good, IBV_SEND_SIGNALED);
    let mut w2 = send_wr(2, IBV_WR_SEND, &mut bad, IBV_SEND_SIGNALED);
    let mut w3 = send_wr(3, IBV_WR_SEND, &mut good, IBV_SEND_SIGNALED);
    // Linked back to front so no WR is written after a pointer to it exists.
    w2.next = &mut w3;
    w1.next = &mut w2;
    assert_eq!(post_send(p.a, &mut w1), 0);
    let c1 = wait_wc(p.cq_a);
    assert_eq!((c1.status, c1.wr_id), (IBV_WC_SUCCESS, 1));
    let c2 = wait_wc(p.cq_a);
    assert_eq!((c2.status, c2.wr_id), (IBV_WC_LOC_PROT_ERR, 2));
    let c3 = wait_wc(p.cq_a);
    assert_eq!((c3.status, c3.wr_id), (IBV_WC_WR_FLUSH_ERR, 3));
    assert_eq!(wait_wc(p.cq_b).status, IBV_WC_SUCCESS);

    // Out of the MR's range, and a READ into memory without local write.
    let q = Pair::new();
    let src = q.buf(8);
    let mut sg = [src.sge(4, 8)];
    let mut w = send_wr(4, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q.a, &mut w), 0);
    assert_eq!(wait_wc(q.cq_a).status, IBV_WC_LOC_PROT_ERR);

    let r = Pair::new();
    let ro = Buf::new(r.pd, 8, IBV_ACCESS_REMOTE_READ);
    let remote = r.buf(8);
    let mut sg = [ro.sge(0, 8)];
    let mut w = write_wr(5, &mut sg, remote.addr(), remote.rkey());
    w.opcode = IBV_WR_RDMA_READ;
    assert_eq!(post_send(r.a, &mut w), 0);
    assert_eq!(wait_wc(r.cq_a).status, IBV_WC_LOC_PROT_ERR);
}

#[test]
fn bad_receive_lkey() {
    let p = Pair::new();
    let src = p.buf(8);
    let dst = p.buf(8);
    let mut rs = [ibv_sge {
        addr: dst.addr(),
        length: 8,
        lkey: dst.lkey() ^ 1,
    }];
    assert_eq!(post_recv(p.b, 1, &mut rs), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_REM_OP_ERR);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.wr_id), (IBV_WC_LOC_PROT_ERR, 1));
}

#[test]
fn modify_to_error_flushes_everything() {
    let p = Pair::new();
    let dst = p.buf(8);
    for i in 0..3 {
        assert_eq!(post_recv(p.b, 10 + i, &mut [dst.sge(0, 8)]), 0);
    }
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_ERR;
    assert_eq!(modify(p.b, &mut a, IBV_QP_STATE), 0);
    // SAFETY: qp is live.
    assert_eq!(unsafe { (*p.b).state }, IBV_QPS_ERR);
    let w = wait_wcs(p.cq_b, 3);
    for (i, c) in w.iter().enumerate() {
        assert_eq!(
            (c.status, c.wr_id, c.qp_num),
            (IBV_WC_WR_FLUSH_ERR, 10 + i as u64, qpn(p.b))
        );
    }
    // Posting in ERR is accepted and flushed at once, sends and receives.
    assert_eq!(post_recv(p.b, 20, &mut [dst.sge(0, 8)]), 0);
    let c = wait_wc(p.cq_b);
    assert_eq!((c.status, c.wr_id), (IBV_WC_WR_FLUSH_ERR, 20));
    let mut sg = [dst.sge(0, 8)];
    let mut w = send_wr(21, IBV_WR_SEND, &mut sg, 0);
    assert_eq!(post_send(p.b, &mut w), 0);
    let c = wait_wc(p.cq_b);
    assert_eq!((c.status, c.wr_id), (IBV_WC_WR_FLUSH_ERR, 21));
}

#[test]
fn post_time_checks() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(64, null_mut());
    let mut at = c.qp_attr(pd, cq, cq);
    at.cap.max_send_wr = 2;
    at.cap.max_send_sge = 2;
    at.cap.max_recv_wr = 1;
    let a = c.create_qp(&mut at);
    let b = c.qp(pd, cq, cq);
    let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let mut sg = [buf.sge(0, 8), buf.sge(8, 8), buf.sge(16, 8)];

    // RESET refuses sends and receives; from INIT on both are taken
    // (tests/post_before_rts.rs), within the queues' depth.
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg[..1], 0);
    assert_eq!(post_send(a, &mut w), libc::EINVAL);
    assert_eq!(post_recv(a, 1, &mut sg[..1]), libc::EINVAL);
    let o = ConnOpts::default();
    to_init(a, o.access);
    assert_eq!(post_recv(a, 1, &mut sg[..1]), 0);
    assert_eq!(post_recv(a, 2, &mut sg[..1]), libc::ENOMEM);
    to_init(b, o.access);
    to_rtr(a, qpn(b), &o);
    to_rtr(b, qpn(a), &o);
    to_rts(a, &o);

    // Too many SGEs: EINVAL and bad_wr names the culprit; earlier WRs stay
    // posted.
    let mut ok = send_wr(2, IBV_WR_RDMA_WRITE, &mut [], IBV_SEND_SIGNALED);
    let mut too_many = send_wr(3, IBV_WR_SEND, &mut sg, 0);
    ok.next = &mut too_many;
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: live QP, valid list.
    let r = unsafe { (*c.ctx).ops.post_send.unwrap()(a, &mut ok, &mut bad) };
    assert_eq!(r, libc::EINVAL);
    assert_eq!(bad, &mut too_many as *mut _);
    let c2 = wait_wc(cq);
    assert_eq!((c2.status, c2.wr_id), (IBV_WC_SUCCESS, 2));

    // Unsupported opcode.
    let mut w = send_wr(4, IBV_WR_TSO, &mut sg[..1], 0);
    assert_eq!(post_send(a, &mut w), libc::EINVAL);
    // (An atomic whose SGE is not 8 bytes is taken, as hardware takes it,
    // and fails at completion: tests/check_order.rs.)

    // Full queue: b has no receive posted and a retries RNR forever, so the
    // first SEND stays outstanding and the two-deep queue fills up.
    let mut w = send_wr(6, IBV_WR_SEND, &mut sg[..1], 0);
    assert_eq!(post_send(a, &mut w), 0);
    assert_eq!(post_send(a, &mut w), 0);
    assert_eq!(post_send(a, &mut w), libc::ENOMEM);
    assert_eq!(qp_state(a), IBV_QPS_RTS);
}

#[test]
fn state_machine_masks() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(8, null_mut());
    let q = c.qp(pd, cq, cq);
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    // Missing PKEY_INDEX.
    assert_eq!(
        modify(q, &mut a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        libc::EINVAL
    );
    // An attribute not allowed in RESET->INIT.
    assert_eq!(
        modify(
            q,
            &mut a,
            IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_SQ_PSN
        ),
        libc::EINVAL
    );
    // Bad values.
    a.port_num = 2;
    assert_eq!(
        modify(
            q,
            &mut a,
            IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX
        ),
        libc::EINVAL
    );
    a.port_num = 1;
    // Illegal transition.
    let mut r = ibv_qp_attr::zeroed();
    r.qp_state = IBV_QPS_RTS;
    assert_eq!(modify(q, &mut r, IBV_QP_STATE), libc::EINVAL);
    assert_eq!(qp_state(q), IBV_QPS_RESET);
    // CUR_STATE that does not match.
    let mut x = a;
    x.cur_qp_state = IBV_QPS_RTR;
    assert_eq!(
        modify(
            q,
            &mut x,
            IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX
        ),
        libc::EINVAL
    );
    assert_eq!(
        modify(
            q,
            &mut a,
            IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX
        ),
        0
    );
    // SAFETY: qp is live.
    assert_eq!(unsafe { (*q).state }, IBV_QPS_INIT);

    // INIT->RTR without DEST_QPN.
    let o = ConnOpts::default();
    let mut r = ibv_qp_attr::zeroed();
    r.qp_state = IBV_QPS_RTR;
    r.path_mtu = IBV_MTU_2048;
    r.dest_qp_num = qpn(q);
    r.rq_psn = 0x1234;
    r.max_dest_rd_atomic = 4;
    r.min_rnr_timer = 5;
    r.ah_attr.port_num = 1;
    let full = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    assert_eq!(modify(q, &mut r, full & !IBV_QP_DEST_QPN), libc::EINVAL);
    r.min_rnr_timer = 40;
    assert_eq!(modify(q, &mut r, full), libc::EINVAL);
    r.min_rnr_timer = 5;
    assert_eq!(modify(q, &mut r, full), 0);
    // RTR->RTS without RNR_RETRY.
    let mut s = ibv_qp_attr::zeroed();
    s.qp_state = IBV_QPS_RTS;
    s.sq_psn = 0x4321;
    s.timeout = 10;
    s.retry_cnt = 6;
    s.rnr_retry = 3;
    s.max_rd_atomic = 2;
    let full = IBV_QP_STATE
        | IBV_QP_SQ_PSN
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_MAX_QP_RD_ATOMIC;
    assert_eq!(modify(q, &mut s, full & !IBV_QP_RNR_RETRY), libc::EINVAL);
    assert_eq!(modify(q, &mut s, full), 0);

    // Query returns what was set.
    let (g, _) = query(q);
    assert_eq!(g.qp_state, IBV_QPS_RTS);
    assert_eq!(g.qp_access_flags, IBV_ACCESS_REMOTE_WRITE);
    assert_eq!(g.path_mtu, IBV_MTU_2048);
    assert_eq!(g.dest_qp_num, qpn(q));
    assert_eq!((g.rq_psn, g.sq_psn), (0x1234, 0x4321));
    assert_eq!((g.max_dest_rd_atomic, g.max_rd_atomic), (4, 2));
    assert_eq!(
        (g.min_rnr_timer, g.timeout, g.retry_cnt, g.rnr_retry),
        (5, 10, 6, 3)
    );
    assert_eq!(g.port_num, 1);

    // RTS->RTS may change a few things only.
    let mut t = ibv_qp_attr::zeroed();
    t.min_rnr_timer = 7;
    assert_eq!(modify(q, &mut t, IBV_QP_MIN_RNR_TIMER), 0);
    assert_eq!(query(q).0.min_rnr_timer, 7);
    assert_eq!(modify(q, &mut t, IBV_QP_PATH_MTU), libc::EINVAL);

    // Back to RESET clears queues; the QP can be brought up again.
    let buf = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 1, &mut [buf.sge(0, 8)]), 0);
    let mut z = ibv_qp_attr::zeroed();
    z.qp_state = IBV_QPS_RESET;
    assert_eq!(modify(q, &mut z, IBV_QP_STATE), 0);
    assert_eq!(qp_state(q), IBV_QPS_RESET);
    assert_no_wc(cq, Duration::from_millis(10));
    to_init(q, o.access);
    to_rtr(q, qpn(q), &o);
    to_rts(q, &o);
    let mut sg = [buf.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_recv(q, 3, &mut [buf.sge(0, 8)]), 0);
    assert_eq!(post_send(q, &mut w), 0);
    let mut ids: Vec<u64> = wait_wcs(cq, 2).iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, [2, 3], "the receive posted before RESET is gone");
}

#[test]
fn sq_drain_event() {
    let p = Pair::new();
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 1;
    assert_eq!(
        modify(p.a, &mut a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY),
        0
    );
    let mut ev = get_async(p.c.ctx).expect("SQ drained event");
    assert_eq!(ev.event_type, IBV_EVENT_SQ_DRAINED);
    // SAFETY: QP events carry the QP.
    assert_eq!(unsafe { ev.element.qp }, p.a);
    ack_async(&mut ev);
    assert_eq!(qp_state(p.a), IBV_QPS_SQD);
    // Sends queue in SQD and go out after SQD->RTS.
    let src = p.buf(8);
    let dst = p.buf(8);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_no_wc(p.cq_a, Duration::from_millis(20));
    let mut r = ibv_qp_attr::zeroed();
    r.qp_state = IBV_QPS_RTS;
    assert_eq!(modify(p.a, &mut r, IBV_QP_STATE), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
}

#[test]
fn comm_established_event() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(8, null_mut());
    let a = c.qp(pd, cq, cq);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(a, o.access);
    to_init(b, o.access);
    to_rtr(a, qpn(b), &o);
    to_rtr(b, qpn(a), &o);
    to_rts(a, &o);
    // b stays in RTR: the first request it receives establishes it.
    let buf = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(b, 1, &mut [buf.sge(0, 8)]), 0);
    let mut sg = [buf.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    let mut ev = get_async(c.ctx).expect("COMM_EST");
    assert_eq!(ev.event_type, IBV_EVENT_COMM_EST);
    // SAFETY: QP events carry the QP.
    assert_eq!(unsafe { ev.element.qp }, b);
    ack_async(&mut ev);
    assert_eq!(wait_wcs(cq, 2).len(), 2);
}

#[test]
fn cq_overrun_raises_cq_err() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let small = c.cq(2, null_mut());
    let q = c.qp(pd, small, small);
    let buf = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    to_init(q, ConnOpts::default().access);
    for i in 0..3 {
        assert_eq!(post_recv(q, i, &mut [buf.sge(0, 8)]), 0);
    }
    // Flushing three receives into a two-entry CQ overruns it.
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_ERR;
    assert_eq!(modify(q, &mut a, IBV_QP_STATE), 0);
    let mut ev = get_async(c.ctx).expect("CQ_ERR");
    assert_eq!(ev.event_type, IBV_EVENT_CQ_ERR);
    // SAFETY: CQ events carry the CQ.
    assert_eq!(unsafe { ev.element.cq }, small);
    ack_async(&mut ev);
    // The completions that fit are still there; then the CQ reports its
    // error.
    let mut wc = [ibv_wc::zeroed(); 4];
    assert_eq!(poll(small, &mut wc), 2);
    assert!(poll(small, &mut wc) < 0);
    destroy_qp(q);
    assert_eq!(destroy_cq(small), 0);
}

#[test]
fn async_fd_nonblocking() {
    let c = Ctx::open();
    // SAFETY: ctx is open.
    let fd = unsafe { (*c.ctx).async_fd };
    // SAFETY: fcntl on the context's descriptor.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        )
    };
    let mut ev = ibv_async_event::zeroed();
    // SAFETY: ctx is open; ev is valid.
    let r = unsafe { rsw::verbs_rs_provider_v1.get_async_event.unwrap()(c.ctx, &mut ev) };
    assert_eq!(r, -1);
    assert_eq!(errno(), libc::EAGAIN);
}
