//! The same-host path (`transport::local`) inside one process: one-sided
//! operations the target's published table allows go straight to memory;
//! everything else still gets the responder's exact answer over TCP.

mod common;

use common::*;
use rsw::testing::{local, shm};
use verbs_abi::*;

fn on() -> bool {
    shm::enabled()
}

fn write_wr(sg: &mut [ibv_sge], wr_id: u64, addr: u64, rkey: u32) -> ibv_send_wr {
    let mut w = send_wr(wr_id, IBV_WR_RDMA_WRITE, sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: addr,
        rkey,
    };
    w
}

/// The first operation of a connection may go over TCP (the offer comes
/// with the first response); after one round trip the path is up.
fn warm_up(p: &Pair) {
    let src = p.buf(8);
    let dst = p.buf(8);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert_eq!(wait_wc(p.cq_b).status, IBV_WC_SUCCESS);
}

/// The path's counter is process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn allowed_writes_and_reads_go_direct() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let mut src = p.buf(4096);
    let dst = p.buf(4096);
    for (i, b) in src.bytes_mut().iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    let before = local::direct_ops();
    // Two SGEs into the middle of the target.
    let mut sg = [src.sge(0, 1000), src.sge(1000, 2000)];
    let mut w = write_wr(&mut sg, 7, dst.addr() + 100, dst.rkey());
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode),
        (IBV_WC_SUCCESS, 7, IBV_WC_RDMA_WRITE)
    );
    let got = dst.snapshot();
    assert!(got[..100].iter().all(|&b| b == 0));
    assert_eq!(&got[100..3100], &src.snapshot()[..3000]);
    assert!(got[3100..].iter().all(|&b| b == 0));
    // READ it back into a third buffer.
    let back = p.buf(4096);
    let mut sg = [back.sge(0, 3000)];
    let mut r = send_wr(8, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    r.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr() + 100,
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut r), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode, wc.byte_len),
        (IBV_WC_SUCCESS, 8, IBV_WC_RDMA_READ, 3000)
    );
    assert_eq!(&back.snapshot()[..3000], &src.snapshot()[..3000]);
    let n = local::direct_ops() - before;
    if on() {
        assert_eq!(n, 2, "both went over the same-host path");
    } else {
        assert_eq!(n, 0, "RSW_TRANSPORT=tcp keeps everything on TCP");
    }
}

/// An access the table does not allow is left to the responder, which
/// fails it exactly as before: the requester sees IBV_WC_REM_ACCESS_ERR.
fn refused(p: &Pair, mut w: ibv_send_wr) {
    let before = local::direct_ops();
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!(wc.status, IBV_WC_REM_ACCESS_ERR);
    assert_eq!(local::direct_ops(), before, "not taken directly");
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
}

#[test]
fn past_the_end_is_refused() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    let dst = p.buf(64);
    let mut sg = [src.sge(0, 64)];
    refused(&p, write_wr(&mut sg, 1, dst.addr() + 1, dst.rkey()));
}

#[test]
fn unknown_and_deregistered_keys_are_refused() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    let mut dst = p.buf(64);
    let (addr, rkey) = (dst.addr(), dst.rkey());
    dst.dereg();
    let mut sg = [src.sge(0, 8)];
    refused(&p, write_wr(&mut sg, 1, addr, rkey));
}

#[test]
fn missing_rights_are_refused() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    // Registered without remote write: a READ is fine, a WRITE is not.
    let dst = Buf::new(p.pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    let back = p.buf(64);
    let mut sg = [back.sge(0, 8)];
    let mut r = send_wr(1, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    r.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr(),
        rkey: dst.rkey(),
    };
    assert_eq!(post_send(p.a, &mut r), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let mut sg = [src.sge(0, 8)];
    refused(&p, write_wr(&mut sg, 2, dst.addr(), dst.rkey()));
}

#[test]
fn qp_without_remote_write_is_refused() {
    let ob = ConnOpts {
        access: IBV_ACCESS_REMOTE_READ,
        ..ConnOpts::default()
    };
    let _s = serial();
    let p = Pair::with(ConnOpts::default(), ob, |_| {});
    warm_up(&p);
    let src = p.buf(64);
    let dst = p.buf(64);
    let mut sg = [src.sge(0, 8)];
    refused(&p, write_wr(&mut sg, 1, dst.addr(), dst.rkey()));
}

#[test]
fn other_pd_is_refused() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    let pd2 = p.c.alloc_pd();
    let dst = Buf::new(pd2, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    let mut sg = [src.sge(0, 8)];
    refused(&p, write_wr(&mut sg, 1, dst.addr(), dst.rkey()));
}

#[test]
fn target_in_error_is_not_written() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    let dst = p.buf(64);
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_ERR;
    assert_eq!(modify(p.b, &mut a, IBV_QP_STATE), 0);
    let before = local::direct_ops();
    let mut sg = [src.sge(0, 8)];
    let mut w = write_wr(&mut sg, 1, dst.addr(), dst.rkey());
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_ne!(wc.status, IBV_WC_SUCCESS);
    assert_eq!(local::direct_ops(), before);
    assert!(dst.snapshot().iter().all(|&b| b == 0));
}

#[test]
fn rereg_to_a_new_address_moves_the_target() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let mut src = p.buf(64);
    src.bytes_mut().fill(0x77);
    let old = p.buf(64);
    let new = p.buf(64);
    // The MR of `old` now describes `new`'s memory.
    // SAFETY: both buffers are live; the MR is `old`'s.
    let rc = unsafe {
        rsw::verbs_rs_provider_v1.rereg_mr.unwrap()(
            old.mr,
            IBV_REREG_MR_CHANGE_TRANSLATION as i32,
            std::ptr::null_mut(),
            new.addr() as *mut _,
            64,
            0,
        )
    };
    assert_eq!(rc, 0);
    let mut sg = [src.sge(0, 64)];
    let mut w = write_wr(&mut sg, 1, new.addr(), old.rkey());
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert!(new.snapshot().iter().all(|&b| b == 0x77));
    assert!(old.snapshot().iter().all(|&b| b == 0));
}

fn send_to_b(
    _p: &Pair,
    op: ibv_wr_opcode,
    sg: &mut [ibv_sge],
    wr_id: u64,
    imm: u32,
) -> ibv_send_wr {
    let mut w = send_wr(wr_id, op, sg, IBV_SEND_SIGNALED);
    w.set_imm_data(imm.to_be());
    w
}

#[test]
fn sends_land_in_the_posted_receive() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let mut src = p.buf(256);
    for (i, b) in src.bytes_mut().iter_mut().enumerate() {
        *b = i as u8 ^ 0xa5;
    }
    let dst = p.buf(256);
    let before = local::direct_ops();
    // A SEND over two SGEs into a receive of two SGEs.
    assert_eq!(
        post_recv(p.b, 10, &mut [dst.sge(0, 50), dst.sge(100, 100)]),
        0
    );
    let mut sg = [src.sge(0, 30), src.sge(30, 90)];
    let mut w = send_to_b(&p, IBV_WR_SEND, &mut sg, 1, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.src_qp, r.wc_flags),
        (10, IBV_WC_SUCCESS, IBV_WC_RECV, 120, qpn(p.a), 0)
    );
    let got = dst.snapshot();
    let want = src.snapshot();
    assert_eq!(&got[..50], &want[..50]);
    assert!(got[50..100].iter().all(|&b| b == 0));
    assert_eq!(&got[100..170], &want[50..120]);
    // SEND_WITH_IMM.
    assert_eq!(post_recv(p.b, 11, &mut [dst.sge(0, 256)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_to_b(&p, IBV_WR_SEND_WITH_IMM, &mut sg, 2, 0xdead_beef);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.wc_flags & IBV_WC_WITH_IMM),
        (11, IBV_WC_RECV, 8, IBV_WC_WITH_IMM)
    );
    assert_eq!(u32::from_be(r.imm_data()), 0xdead_beef);
    // Small enough to travel inside the completion: the bytes are placed
    // when the receiver polls.
    assert_eq!(&dst.snapshot()[..8], &src.snapshot()[..8]);
    // WRITE_WITH_IMM: the data goes where the rkey says, the receive only
    // reports it.
    let target = p.buf(64);
    assert_eq!(post_recv(p.b, 12, &mut [dst.sge(0, 4)]), 0);
    let mut sg = [src.sge(0, 64)];
    let mut w = send_to_b(&p, IBV_WR_RDMA_WRITE_WITH_IMM, &mut sg, 3, 7);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: target.addr(),
        rkey: target.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, u32::from_be(r.imm_data())),
        (12, IBV_WC_RECV_RDMA_WITH_IMM, 64, 7)
    );
    assert_eq!(target.snapshot(), src.snapshot()[..64].to_vec());
    let n = local::direct_ops() - before;
    assert_eq!(n, if on() { 3 } else { 0 });
}

/// Small SENDs (inside the completion) keep their order and bytes, up to
/// and past the inline size, into receives of one and of two SGEs.
#[test]
fn small_sends_in_order() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let mut src = p.buf(4096);
    for (i, b) in src.bytes_mut().iter_mut().enumerate() {
        *b = (i * 13) as u8;
    }
    let dst = p.buf(4096);
    let sizes = [1usize, 2, 7, 63, 64, 79, 80, 81, 100, 0, 80];
    for k in 0..sizes.len() {
        let off = 256 * k;
        // Odd rounds: a first SGE too short for the message.
        let r = if k % 2 == 1 {
            post_recv(p.b, k as u64, &mut [dst.sge(off, 3), dst.sge(off + 3, 200)])
        } else {
            post_recv(p.b, k as u64, &mut [dst.sge(off, 200)])
        };
        assert_eq!(r, 0);
    }
    for (k, &n) in sizes.iter().enumerate() {
        let mut sg = [src.sge(16 * k, n as u32)];
        let mut w = send_to_b(&p, IBV_WR_SEND, &mut sg, 100 + k as u64, 0);
        assert_eq!(post_send(p.a, &mut w), 0);
    }
    let sent = wait_wcs(p.cq_a, sizes.len());
    assert!(sent.iter().all(|w| w.status == IBV_WC_SUCCESS));
    let got = wait_wcs(p.cq_b, sizes.len());
    let d = dst.snapshot();
    let s = src.snapshot();
    for (k, &n) in sizes.iter().enumerate() {
        assert_eq!(
            (got[k].wr_id, got[k].status, got[k].byte_len),
            (k as u64, IBV_WC_SUCCESS, n as u32),
            "receive {k}"
        );
        assert_eq!(
            &d[256 * k..256 * k + n],
            &s[16 * k..16 * k + n],
            "bytes of {k}"
        );
    }
}

/// A receive too small for the SEND is the responder's to refuse: the
/// same statuses as over TCP.
#[test]
fn small_receive_keeps_tcp_statuses() {
    let _s = serial();
    let p = Pair::new();
    warm_up(&p);
    let src = p.buf(64);
    let dst = p.buf(64);
    let before = local::direct_ops();
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 16)]), 0);
    let mut sg = [src.sge(0, 64)];
    let mut w = send_to_b(&p, IBV_WR_SEND, &mut sg, 2, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_REM_INV_REQ_ERR);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status), (1, IBV_WC_LOC_LEN_ERR));
    assert_eq!(local::direct_ops(), before);
}

/// No receive posted: the SEND waits as an RNR NAK makes it wait, then
/// fails with RNR_RETRY_EXC_ERR; a receive posted in time lets it land.
#[test]
fn rnr_waits_then_fails() {
    let _s = serial();
    let oa = ConnOpts {
        rnr_retry: 1,
        ..ConnOpts::default()
    };
    let ob = ConnOpts {
        min_rnr_timer: 1, // 10 us
        ..ConnOpts::default()
    };
    let p = Pair::with(oa, ob, |_| {});
    warm_up(&p);
    let src = p.buf(8);
    let dst = p.buf(8);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_to_b(&p, IBV_WR_SEND, &mut sg, 1, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.wr_id, wc.status), (1, IBV_WC_RNR_RETRY_EXC_ERR));
    assert_eq!(qp_state(p.a), IBV_QPS_ERR);
    // The receiver is unharmed.
    assert_ne!(qp_state(p.b), IBV_QPS_ERR);
    let _ = dst;
}

#[test]
fn rnr_wait_ends_when_a_receive_is_posted() {
    let _s = serial();
    let p = Pair::new(); // rnr_retry 7: waits for ever
    warm_up(&p);
    let mut src = p.buf(8);
    src.bytes_mut().fill(9);
    let dst = p.buf(8);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_to_b(&p, IBV_WR_SEND, &mut sg, 1, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    // Nobody polls the sender's CQ for a while: only the progress
    // thread and the peer's doorbell can finish it.
    assert_no_wc(p.cq_b, std::time::Duration::from_millis(30));
    assert_eq!(post_recv(p.b, 5, &mut [dst.sge(0, 8)]), 0);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (5, IBV_WC_SUCCESS, 8));
    assert_eq!(dst.snapshot(), vec![9u8; 8]);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
}

/// A receiver that waits on its completion channel is woken by what a
/// same-host sender leaves in its mailbox.
#[test]
fn armed_receiver_gets_its_event() {
    let _s = serial();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let ch = c.channel();
    let cq_b = c.cq(16, ch);
    let cq_a = c.cq(16, std::ptr::null_mut());
    let a = c.qp(pd, cq_a, cq_a);
    let b = c.qp(pd, cq_b, cq_b);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    for round in 0..20u64 {
        assert_eq!(post_recv(b, round, &mut [buf.sge(0, 8)]), 0);
        // SAFETY: cq_b is live.
        assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq_b, 0) }, 0);
        let waiter = cq_event_waiter(ch);
        let mut sg = [buf.sge(8, 8)];
        let mut w = send_wr(100 + round, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
        assert_eq!(post_send(a, &mut w), 0);
        assert_eq!(wait_wc(cq_a).status, IBV_WC_SUCCESS);
        assert!(
            wait_until(|| waiter.is_finished()),
            "no event in round {round}"
        );
        let (r, got) = waiter.join().unwrap();
        assert_eq!((r, got), (0, cq_b as usize));
        let wc = wait_wc(cq_b);
        assert_eq!((wc.wr_id, wc.status), (round, IBV_WC_SUCCESS));
        ack_one(cq_b);
    }
}

fn ack_one(cq: *mut ibv_cq) {
    // SAFETY: the caller's CQ is live.
    unsafe { rsw::verbs_rs_provider_v1.ack_cq_events.unwrap()(cq, 1) };
}

// ---- a receiver on a shared receive queue ---------------------------------------

fn create_srq(c: &Ctx, pd: *mut ibv_pd, max_wr: u32) -> *mut ibv_srq {
    let mut a = ibv_srq_init_attr_ex {
        srq_context: std::ptr::null_mut(),
        attr: ibv_srq_attr {
            max_wr,
            max_sge: 2,
            srq_limit: 0,
        },
        comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
        srq_type: IBV_SRQT_BASIC,
        pd,
        xrcd: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        tm_cap: ibv_tm_cap {
            max_num_tags: 0,
            max_ops: 0,
        },
    };
    // SAFETY: ctx is open; a is valid.
    let s = unsafe { c.vctx().create_srq_ex.unwrap()(c.ctx, &mut a) };
    assert!(!s.is_null(), "create_srq_ex: errno {}", errno());
    s
}

fn post_srq(s: *mut ibv_srq, wr_id: u64, sges: &mut [ibv_sge]) -> i32 {
    let mut wr = ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: sges.as_mut_ptr(),
        num_sge: sges.len() as i32,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: s is live; wr is valid.
    unsafe { (*(*s).context).ops.post_srq_recv.unwrap()(s, &mut wr, &mut bad) }
}

fn modify_srq(s: *mut ibv_srq, attr: ibv_srq_attr, mask: u32) -> i32 {
    let mut a = attr;
    // SAFETY: s is live; a is valid.
    unsafe { rsw::verbs_rs_provider_v1.modify_srq.unwrap()(s, &mut a, mask as i32) }
}

/// A sender and a receiver on an SRQ (its own receive queue: none).
struct SrqPair {
    p: Pair,
    srq: *mut ibv_srq,
    b: *mut ibv_qp,
}

fn srq_pair(max_wr: u32) -> SrqPair {
    let p = Pair::new();
    let srq = create_srq(&p.c, p.pd, max_wr);
    let mut ab = p.c.qp_attr(p.pd, p.cq_b, p.cq_b);
    ab.srq = srq;
    let b = p.c.create_qp(&mut ab);
    // Re-pair: the sender talks to the SRQ QP from now on.
    let a = p.c.create_qp(&mut p.c.qp_attr(p.pd, p.cq_a, p.cq_a));
    connect(a, &ConnOpts::default(), b, &ConnOpts::default());
    let mut p = p;
    p.a = a;
    SrqPair { p, srq, b }
}

fn send_from_a(p: &Pair, wr_id: u64, op: ibv_wr_opcode, sg: &mut [ibv_sge], imm: u32) {
    let mut w = send_to_b(p, op, sg, wr_id, imm);
    assert_eq!(post_send(p.a, &mut w), 0);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.wr_id, wc.status), (wr_id, IBV_WC_SUCCESS));
}

#[test]
fn sends_take_the_srq_receives() {
    let _s = serial();
    let s = srq_pair(64);
    let p = &s.p;
    // The first exchange may travel TCP (the offer comes with it).
    let dst0 = p.buf(8);
    assert_eq!(post_srq(s.srq, 1, &mut [dst0.sge(0, 8)]), 0);
    let src = {
        let mut b = p.buf(512);
        for (i, x) in b.bytes_mut().iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31) ^ 0x5a;
        }
        b
    };
    send_from_a(p, 100, IBV_WR_SEND, &mut [src.sge(0, 8)], 0);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (1, IBV_WC_SUCCESS, 8));

    let before = local::direct_ops();
    let dst = p.buf(1024);
    assert_eq!(post_srq(s.srq, 10, &mut [dst.sge(0, 16)]), 0);
    assert_eq!(
        post_srq(s.srq, 11, &mut [dst.sge(100, 100), dst.sge(300, 300)]),
        0
    );
    assert_eq!(post_srq(s.srq, 12, &mut [dst.sge(700, 64)]), 0);
    // Small (inside the completion), over two SGEs, and with immediate.
    send_from_a(p, 101, IBV_WR_SEND, &mut [src.sge(0, 16)], 0);
    send_from_a(p, 102, IBV_WR_SEND, &mut [src.sge(16, 250)], 0);
    send_from_a(
        p,
        103,
        IBV_WR_SEND_WITH_IMM,
        &mut [src.sge(0, 40)],
        0x1234_5678,
    );
    let want = [(10, 16, 0), (11, 250, 0), (12, 40, IBV_WC_WITH_IMM)];
    for (id, len, flags) in want {
        let r = wait_wc(p.cq_b);
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.byte_len, r.qp_num, r.src_qp),
            (id, IBV_WC_SUCCESS, IBV_WC_RECV, len, qpn(s.b), qpn(p.a))
        );
        assert_eq!(r.wc_flags & IBV_WC_WITH_IMM, flags);
    }
    let got = dst.snapshot();
    let sb = src.snapshot();
    assert_eq!(&got[..16], &sb[..16]);
    assert_eq!(&got[100..200], &sb[16..116]);
    assert_eq!(&got[300..450], &sb[116..266]);
    assert_eq!(&got[700..740], &sb[..40]);
    let n = local::direct_ops() - before;
    assert_eq!(n, if on() { 3 } else { 0 });
}

/// Receives same-host peers take count for the SRQ limit: the event fires
/// when the receiver moves their completions.
#[test]
fn peers_taking_srq_receives_arm_the_limit() {
    let _s = serial();
    let s = srq_pair(64);
    let p = &s.p;
    let src = p.buf(64);
    let dst = p.buf(64 * 8);
    for i in 0..6u64 {
        assert_eq!(post_srq(s.srq, i, &mut [dst.sge(64 * i as usize, 64)]), 0);
    }
    let limit = ibv_srq_attr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: 4,
    };
    assert_eq!(modify_srq(s.srq, limit, IBV_SRQ_LIMIT), 0);
    for i in 0..3u64 {
        send_from_a(p, 100 + i, IBV_WR_SEND, &mut [src.sge(0, 8)], 0);
        let r = wait_wc(p.cq_b);
        assert_eq!((r.wr_id, r.status), (i, IBV_WC_SUCCESS));
    }
    let mut ev = get_async(p.c.ctx).expect("SRQ_LIMIT_REACHED");
    assert_eq!(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    // SAFETY: SRQ events carry the SRQ.
    assert_eq!(unsafe { ev.element.srq }, s.srq);
    ack_async(&mut ev);
}

/// After a resize the SRQ's ring is private: what was posted moves with
/// it and SENDs travel the connection, in order.
#[test]
fn resized_srq_keeps_its_receives() {
    let _s = serial();
    let s = srq_pair(16);
    let p = &s.p;
    let mut src = p.buf(64);
    src.bytes_mut().fill(0x42);
    let dst = p.buf(64 * 4);
    for i in 0..4u64 {
        assert_eq!(post_srq(s.srq, i, &mut [dst.sge(64 * i as usize, 64)]), 0);
    }
    send_from_a(p, 100, IBV_WR_SEND, &mut [src.sge(0, 8)], 0);
    assert_eq!(wait_wc(p.cq_b).wr_id, 0);
    let grow = ibv_srq_attr {
        max_wr: 64,
        max_sge: 0,
        srq_limit: 0,
    };
    assert_eq!(modify_srq(s.srq, grow, IBV_SRQ_MAX_WR), 0);
    let before = local::direct_ops();
    for i in 1..4u64 {
        send_from_a(p, 100 + i, IBV_WR_SEND, &mut [src.sge(0, 8 + i as u32)], 0);
        let r = wait_wc(p.cq_b);
        assert_eq!(
            (r.wr_id, r.status, r.byte_len),
            (i, IBV_WC_SUCCESS, 8 + i as u32)
        );
    }
    assert_eq!(local::direct_ops(), before);
    assert!(dst.snapshot()[64..64 + 9].iter().all(|&b| b == 0x42));
}

/// A receiver left in RTR (perftest's ib_send_bw server does that) needs
/// one doorbell for its `IBV_EVENT_COMM_EST`, not one per SEND: each costs
/// a syscall at both ends.
#[test]
fn receiver_in_rtr_is_rung_once() {
    let _s = serial();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq_a = c.cq(64, std::ptr::null_mut());
    let cq_b = c.cq(64, std::ptr::null_mut());
    let a = c.qp(pd, cq_a, cq_a);
    let b = c.qp(pd, cq_b, cq_b);
    let o = ConnOpts::default();
    to_init(a, o.access);
    to_init(b, o.access);
    to_rtr(a, qpn(b), &o);
    to_rtr(b, qpn(a), &o);
    to_rts(a, &o);
    let mut src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    src.bytes_mut().fill(0x3c);
    let dst = Buf::new(pd, 64 * 32, IBV_ACCESS_LOCAL_WRITE);
    let send = |id: u64| {
        let mut sg = [src.sge(0, 8)];
        let mut w = send_wr(id, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
        assert_eq!(post_send(a, &mut w), 0);
        assert_eq!(wait_wc(cq_a).status, IBV_WC_SUCCESS);
        let r = wait_wc(cq_b);
        assert_eq!((r.wr_id, r.status, r.byte_len), (id, IBV_WC_SUCCESS, 8));
    };
    assert_eq!(post_recv(b, 0, &mut [dst.sge(0, 64)]), 0);
    send(0);
    let mut ev = get_async(c.ctx).expect("COMM_EST");
    assert_eq!(ev.event_type, IBV_EVENT_COMM_EST);
    ack_async(&mut ev);
    let (direct, rung) = (local::direct_ops(), local::doorbells());
    for i in 1..32u64 {
        assert_eq!(post_recv(b, i, &mut [dst.sge(64 * i as usize, 64)]), 0);
        send(i);
    }
    assert_eq!(qp_state(b), IBV_QPS_RTR);
    assert!(dst.snapshot()[64..64 * 32]
        .chunks(64)
        .all(|c| c[..8] == [0x3c; 8]));
    if on() {
        assert_eq!(local::direct_ops() - direct, 31);
        let extra = local::doorbells() - rung;
        assert!(extra <= 1, "{extra} doorbells for 31 SENDs to a QP in RTR");
    }
}

/// A SEND that found the SRQ empty waits (RNR); the SRQ's next receive
/// rings the sender, whose CQ nobody polls meanwhile.
#[test]
fn srq_rnr_wait_ends_when_a_receive_is_posted() {
    let _s = serial();
    let s = srq_pair(16);
    let p = &s.p;
    let mut src = p.buf(16);
    src.bytes_mut().fill(7);
    let dst = p.buf(64);
    // The path up first (the first exchange may travel TCP).
    assert_eq!(post_srq(s.srq, 1, &mut [dst.sge(0, 16)]), 0);
    send_from_a(p, 100, IBV_WR_SEND, &mut [src.sge(0, 16)], 0);
    assert_eq!(wait_wc(p.cq_b).wr_id, 1);
    let mut sg = [src.sge(0, 16)];
    let mut w = send_to_b(p, IBV_WR_SEND, &mut sg, 101, 0);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_no_wc(p.cq_b, std::time::Duration::from_millis(30));
    assert_eq!(post_srq(s.srq, 2, &mut [dst.sge(16, 16)]), 0);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (2, IBV_WC_SUCCESS, 16));
    assert_eq!(&dst.snapshot()[16..32], &[7u8; 16]);
    let wc = wait_wc(p.cq_a);
    assert_eq!((wc.wr_id, wc.status), (101, IBV_WC_SUCCESS));
}
