//! Which check comes first when a request is wrong on both sides, as
//! hardware (ConnectX) orders them: a READ's or an atomic's local SGE is
//! only touched when the response is scattered into it, so the responder's
//! checks come first and an atomic runs at the target even when its result
//! cannot be stored; an atomic's SGE must be exactly 8 bytes (a local length
//! error, nothing sent); a WRITE_WITH_IMM with a bad rkey completes the
//! responder's receive in error (LOC_ACCESS_ERR) rather than flushing it.
//! `make test` runs this file over the same-host path and over TCP.

mod common;
use common::*;
use verbs_abi::*;

fn bad_sge(b: &Buf) -> ibv_sge {
    ibv_sge {
        addr: b.addr(),
        length: 8,
        lkey: b.lkey() ^ 0x5a,
    }
}

fn word(b: &Buf) -> u64 {
    u64::from_ne_bytes(b.snapshot()[..8].try_into().unwrap())
}

/// The send queue fails at `wr_id` with `status`; the WR behind it flushes.
fn expect_fail_then_flush(cq: *mut ibv_cq, wr_id: u64, status: ibv_wc_status) {
    let c = wait_wc(cq);
    assert_eq!((c.wr_id, c.status), (wr_id, status), "first completion");
    let c = wait_wc(cq);
    assert_eq!((c.wr_id, c.status), (wr_id + 1, IBV_WC_WR_FLUSH_ERR));
}

/// A SEND queued behind the WR under test, so a failure shows as a flush.
fn trailing_send(p: &Pair, src: &Buf, wr_id: u64) {
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(wr_id, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
}

#[test]
fn read_with_bad_lkey_and_bad_rkey_is_a_remote_access_error() {
    let p = Pair::new();
    let local = p.buf(64);
    let remote = p.buf(64);
    let mut sg = [bad_sge(&local)];
    let mut w = send_wr(1, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: remote.addr(),
        rkey: remote.rkey() ^ 0x5a,
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    trailing_send(&p, &local, 2);
    expect_fail_then_flush(p.cq_a, 1, IBV_WC_REM_ACCESS_ERR);
}

#[test]
fn read_with_bad_lkey_alone_is_a_local_protection_error() {
    let p = Pair::new();
    let mut local = p.buf(64);
    local.bytes_mut().fill(0xee);
    let mut remote = p.buf(64);
    remote.bytes_mut().fill(0x11);
    let mut sg = [bad_sge(&local)];
    let mut w = send_wr(1, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    trailing_send(&p, &local, 2);
    expect_fail_then_flush(p.cq_a, 1, IBV_WC_LOC_PROT_ERR);
    assert!(local.snapshot().iter().all(|&b| b == 0xee));
}

#[test]
fn atomic_with_bad_lkey_and_bad_rkey_is_a_remote_access_error() {
    for op in [IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD] {
        let p = Pair::new();
        let local = p.buf(8);
        let target = p.buf(8);
        let mut sg = [bad_sge(&local)];
        let mut w = atomic_wr(1, op, &mut sg, target.addr(), target.rkey() ^ 0x5a, 0, 7);
        assert_eq!(post_send(p.a, &mut w), 0);
        trailing_send(&p, &local, 2);
        expect_fail_then_flush(p.cq_a, 1, IBV_WC_REM_ACCESS_ERR);
        assert_eq!(word(&target), 0);
    }
}

#[test]
fn unaligned_atomic_with_bad_lkey_is_a_remote_invalid_request() {
    let p = Pair::new();
    let local = p.buf(8);
    let target = p.buf(16);
    let mut sg = [bad_sge(&local)];
    let mut w = atomic_wr(
        1,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        target.addr() + 4,
        target.rkey(),
        1,
        0,
    );
    assert_eq!(post_send(p.a, &mut w), 0);
    trailing_send(&p, &local, 2);
    expect_fail_then_flush(p.cq_a, 1, IBV_WC_REM_INV_REQ_ERR);
    assert!(target.snapshot().iter().all(|&b| b == 0));
}

#[test]
fn atomic_with_bad_lkey_still_runs_at_the_target() {
    for (op, cmp_add, swap, after) in [
        (IBV_WR_ATOMIC_CMP_AND_SWP, 5u64, 9u64, 9u64),
        (IBV_WR_ATOMIC_FETCH_AND_ADD, 3, 0, 8),
    ] {
        let p = Pair::new();
        let mut local = p.buf(8);
        local.bytes_mut().fill(0xee);
        let mut target = p.buf(8);
        target.bytes_mut().copy_from_slice(&5u64.to_ne_bytes());
        let mut sg = [bad_sge(&local)];
        let mut w = atomic_wr(1, op, &mut sg, target.addr(), target.rkey(), cmp_add, swap);
        assert_eq!(post_send(p.a, &mut w), 0);
        trailing_send(&p, &local, 2);
        expect_fail_then_flush(p.cq_a, 1, IBV_WC_LOC_PROT_ERR);
        assert_eq!(word(&target), after, "opcode {op}: the remote word");
        assert!(local.snapshot().iter().all(|&b| b == 0xee));
    }
}

#[test]
fn atomic_sge_not_8_bytes_is_a_local_length_error() {
    for len in [4u32, 16] {
        for op in [IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD] {
            let p = Pair::new();
            let mut local = p.buf(16);
            local.bytes_mut().fill(0xee);
            let mut target = p.buf(8);
            target.bytes_mut().copy_from_slice(&5u64.to_ne_bytes());
            let mut sg = [local.sge(0, len)];
            let mut w = atomic_wr(1, op, &mut sg, target.addr(), target.rkey(), 5, 9);
            assert_eq!(post_send(p.a, &mut w), 0, "the post is accepted");
            trailing_send(&p, &local, 2);
            expect_fail_then_flush(p.cq_a, 1, IBV_WC_LOC_LEN_ERR);
            assert_eq!(word(&target), 5, "len {len} opcode {op}: target untouched");
            assert!(local.snapshot().iter().all(|&b| b == 0xee));
        }
    }
}

#[test]
fn write_with_imm_and_bad_rkey_fails_the_responders_receive() {
    let p = Pair::new();
    let src = p.buf(32);
    let dst = p.buf(32);
    let rbuf = p.buf(32);
    assert_eq!(post_recv(p.b, 70, &mut [rbuf.sge(0, 32)]), 0);
    assert_eq!(post_recv(p.b, 71, &mut [rbuf.sge(0, 32)]), 0);
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &mut sg, IBV_SEND_SIGNALED);
    w.set_imm_data(0x1234);
    w.wr.rdma = ibv_send_wr_rdma {
        remote_addr: dst.addr(),
        rkey: dst.rkey() ^ 0x5a,
    };
    assert_eq!(post_send(p.a, &mut w), 0);
    let c = wait_wc(p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, IBV_WC_REM_ACCESS_ERR));
    let r = wait_wc(p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.qp_num),
        (70, IBV_WC_LOC_ACCESS_ERR, qpn(p.b)),
        "the receive the WRITE_WITH_IMM took"
    );
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status), (71, IBV_WC_WR_FLUSH_ERR));
    assert_eq!(qp_state(p.b), IBV_QPS_ERR);
    assert!(dst.snapshot().iter().all(|&b| b == 0));
}
