//! Posting before the QP is ready, as programs written on mlx5 do: from
//! INIT on, `ibv_post_send` and `ibv_post_recv` are taken. Receives posted
//! in INIT wait for the messages to come; sends posted in INIT or RTR wait
//! in the send queue and go, in order, when the QP reaches RTS. A move to
//! ERR flushes what waits; a move to RESET discards it. RESET itself
//! refuses both (the spec, rxe, rdma-core's own tests).

mod common;

use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use verbs_abi::*;

fn filled(pd: *mut ibv_pd, len: usize, seed: u8) -> Buf {
    let mut b = Buf::new(pd, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for (i, x) in b.bytes_mut().iter_mut().enumerate() {
        *x = seed.wrapping_add((i * 11) as u8);
    }
    b
}

fn zeroed(pd: *mut ibv_pd, len: usize) -> Buf {
    Buf::new(pd, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
}

/// Sends posted in INIT and RTR, receives posted in INIT: nothing moves
/// before RTS, then everything completes in order with its payload.
/// RESET refuses both.
#[test]
fn work_posted_before_rts_runs_at_rts() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let (cq_a, cq_b) = (c.cq(16, null_mut()), c.cq(16, null_mut()));
    let (a, b) = (c.qp(pd, cq_a, cq_a), c.qp(pd, cq_b, cq_b));
    let src = filled(pd, 256, 1);
    let (dst, target) = (zeroed(pd, 256), zeroed(pd, 64));
    let o = ConnOpts::default();

    // RESET: no queue takes anything.
    assert_eq!(qp_state(b), IBV_QPS_RESET);
    assert_eq!(post_recv(b, 99, &mut [dst.sge(0, 64)]), libc::EINVAL);
    let mut sg1 = [src.sge(0, 48)];
    let mut w1 = send_wr(1, IBV_WR_SEND, &mut sg1, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w1), libc::EINVAL);

    // INIT: two receives on b, a SEND and a WRITE on a.
    to_init(a, o.access);
    to_init(b, o.access);
    assert_eq!(post_recv(b, 100, &mut [dst.sge(0, 64)]), 0);
    assert_eq!(post_recv(b, 101, &mut [dst.sge(64, 64)]), 0);
    assert_eq!(post_send(a, &mut w1), 0);
    let mut sg2 = [src.sge(64, 64)];
    let mut w2 = send_wr(2, IBV_WR_RDMA_WRITE, &mut sg2, IBV_SEND_SIGNALED);
    w2.wr.rdma.remote_addr = target.addr();
    w2.wr.rdma.rkey = target.rkey();
    assert_eq!(post_send(a, &mut w2), 0);

    // RTR: a second SEND.
    to_rtr(a, qpn(b), &o);
    to_rtr(b, qpn(a), &o);
    let mut sg3 = [src.sge(128, 20)];
    let mut w3 = send_wr(3, IBV_WR_SEND, &mut sg3, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w3), 0);
    // Nothing before RTS (an absence check only).
    assert_no_wc(cq_a, Duration::from_millis(100));
    assert_no_wc(cq_b, Duration::from_millis(10));
    assert_eq!(target.bytes(), [0u8; 64]);

    to_rts(b, &o);
    to_rts(a, &o);
    let wcs = wait_wcs(cq_a, 3);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, IBV_WC_SUCCESS, IBV_WC_SEND),
            (2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE),
            (3, IBV_WC_SUCCESS, IBV_WC_SEND),
        ]
    );
    let wcs = wait_wcs(cq_b, 2);
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    assert_eq!(
        got,
        [
            (100, IBV_WC_SUCCESS, IBV_WC_RECV, 48),
            (101, IBV_WC_SUCCESS, IBV_WC_RECV, 20),
        ]
    );
    assert_eq!(dst.bytes()[..48], src.bytes()[..48]);
    assert_eq!(dst.bytes()[64..84], src.bytes()[128..148]);
    assert_eq!(target.bytes(), &src.bytes()[64..128]);
    destroy_qp(a);
    destroy_qp(b);
}

/// Work waiting for RTS when the QP is moved to ERR: every request
/// completes flushed, in order.
#[test]
fn work_waiting_for_rts_is_flushed_by_err() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let buf = filled(pd, 64, 3);
    to_init(q, ConnOpts::default().access);
    assert_eq!(post_recv(q, 10, &mut [buf.sge(0, 64)]), 0);
    let mut sg = [buf.sge(0, 8)];
    let mut w = send_wr(11, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
    let mut w = send_wr(12, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);

    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_ERR;
    assert_eq!(modify(q, &mut a, IBV_QP_STATE), 0);
    let mut got: Vec<_> = wait_wcs(cq, 3)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            (10, IBV_WC_WR_FLUSH_ERR),
            (11, IBV_WC_WR_FLUSH_ERR),
            (12, IBV_WC_WR_FLUSH_ERR),
        ]
    );
    destroy_qp(q);
}

/// Work waiting for RTS when the QP is moved back to RESET is discarded:
/// no completion, and the QP, connected afresh, carries only what is
/// posted after.
#[test]
fn work_waiting_for_rts_is_discarded_by_reset() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let (cq_a, cq_b) = (c.cq(16, null_mut()), c.cq(16, null_mut()));
    let (a, b) = (c.qp(pd, cq_a, cq_a), c.qp(pd, cq_b, cq_b));
    let src = filled(pd, 64, 7);
    let dst = zeroed(pd, 64);
    let o = ConnOpts::default();
    to_init(a, o.access);
    to_init(b, o.access);
    assert_eq!(post_recv(b, 20, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 16)];
    let mut w = send_wr(21, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    reset(a);
    reset(b);
    assert_no_wc(cq_a, Duration::from_millis(50));
    assert_no_wc(cq_b, Duration::from_millis(10));

    connect(a, &o, b, &o);
    assert_eq!(post_recv(b, 22, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(16, 24)];
    let mut w = send_wr(23, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    let wc = wait_wc(cq_a);
    assert_eq!((wc.wr_id, wc.status), (23, IBV_WC_SUCCESS));
    let wc = wait_wc(cq_b);
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (22, IBV_WC_SUCCESS, 24));
    assert_eq!(dst.bytes()[..24], src.bytes()[16..40]);
    assert_no_wc(cq_a, Duration::from_millis(20));
    assert_no_wc(cq_b, Duration::from_millis(20));
    destroy_qp(a);
    destroy_qp(b);
}
