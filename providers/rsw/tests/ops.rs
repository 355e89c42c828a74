//! Data-path operations between two connected QPs on rsw_lo.

mod common;

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::time::Duration;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

fn fill(b: &mut Buf, seed: u8) {
    for (i, x) in b.bytes_mut().iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

fn rdma_wr(
    wr_id: u64,
    opcode: ibv_wr_opcode,
    sges: &mut [ibv_sge],
    raddr: u64,
    rkey: u32,
) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, opcode, sges, IBV_SEND_SIGNALED);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: raddr,
        rkey,
    };
    wr
}

#[test]
fn send_recv() {
    let p = Pair::new();
    let mut src = p.buf(256);
    let dst = p.buf(512);
    fill(&mut src, 1);
    assert_eq!(post_recv(p.b, 7, &mut [dst.sge(16, 300)]), 0);
    let mut sg = [src.sge(0, 200)];
    let mut wr = send_wr(9, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);

    let s = wait_wc(p.cq_a);
    assert_eq!(s.status, IBV_WC_SUCCESS);
    assert_eq!(s.wr_id, 9);
    assert_eq!(s.opcode, IBV_WC_SEND);
    assert_eq!(s.qp_num, qpn(p.a));

    let r = wait_wc(p.cq_b);
    assert_eq!(r.status, IBV_WC_SUCCESS);
    assert_eq!(r.wr_id, 7);
    assert_eq!(r.opcode, IBV_WC_RECV);
    assert_eq!(r.byte_len, 200);
    assert_eq!(r.qp_num, qpn(p.b));
    assert_eq!(r.src_qp, qpn(p.a));
    assert_eq!(r.wc_flags & IBV_WC_WITH_IMM, 0);
    let got = dst.snapshot();
    assert_eq!(&got[16..216], &src.bytes()[..200]);
    assert!(got[..16].iter().all(|&b| b == 0));
    assert!(got[216..].iter().all(|&b| b == 0));
}

#[test]
fn send_with_imm() {
    let p = Pair::new();
    let mut src = p.buf(64);
    let dst = p.buf(64);
    fill(&mut src, 2);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 10)];
    let mut wr = send_wr(2, IBV_WR_SEND_WITH_IMM, &mut sg, IBV_SEND_SIGNALED);
    wr.set_imm_data(0x1122_3344u32.to_be());
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!(
        (s.status, s.opcode, s.wr_id),
        (IBV_WC_SUCCESS, IBV_WC_SEND, 2)
    );
    let r = wait_wc(p.cq_b);
    assert_eq!(
        (r.status, r.opcode, r.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_RECV, 10)
    );
    assert_ne!(r.wc_flags & IBV_WC_WITH_IMM, 0);
    assert_eq!(u32::from_be(r.imm_data()), 0x1122_3344);
    assert_eq!(&dst.snapshot()[..10], &src.bytes()[..10]);
}

#[test]
fn zero_length_send() {
    let p = Pair::new();
    let dst = p.buf(16);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 16)]), 0);
    let mut wr = send_wr(3, IBV_WR_SEND, &mut [], IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.byte_len), (IBV_WC_SUCCESS, 0));
}

#[test]
fn rdma_write_touches_only_the_range() {
    let p = Pair::new();
    let mut src = p.buf(1000);
    let dst = p.buf(1000);
    fill(&mut src, 3);
    let mut sg = [src.sge(100, 500)];
    let mut wr = rdma_wr(11, IBV_WR_RDMA_WRITE, &mut sg, dst.addr() + 200, dst.rkey());
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!(
        (s.status, s.opcode, s.wr_id),
        (IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 11)
    );
    let got = dst.snapshot();
    assert_eq!(&got[200..700], &src.bytes()[100..600]);
    assert!(got[..200].iter().chain(&got[700..]).all(|&b| b == 0));
    // A plain WRITE consumes no receive and makes no responder completion.
    assert_no_wc(p.cq_b, Duration::from_millis(20));
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let p = Pair::new();
    let mut src = p.buf(64);
    let dst = p.buf(64);
    let rbuf = p.buf(8);
    fill(&mut src, 4);
    assert_eq!(post_recv(p.b, 77, &mut [rbuf.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 40)];
    let mut wr = rdma_wr(
        12,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        &mut sg,
        dst.addr() + 8,
        dst.rkey(),
    );
    wr.set_imm_data(0xdead_beefu32.to_be());
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.opcode), (IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE));
    let r = wait_wc(p.cq_b);
    assert_eq!(r.status, IBV_WC_SUCCESS);
    assert_eq!(r.wr_id, 77);
    assert_eq!(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_eq!(r.byte_len, 40);
    assert_ne!(r.wc_flags & IBV_WC_WITH_IMM, 0);
    assert_eq!(u32::from_be(r.imm_data()), 0xdead_beef);
    assert_eq!(&dst.snapshot()[8..48], &src.bytes()[..40]);
    // The receive buffer itself is not written.
    assert!(rbuf.snapshot().iter().all(|&b| b == 0));
}

#[test]
fn rdma_read() {
    let p = Pair::new();
    let mut remote = p.buf(4096);
    let local = p.buf(4096);
    fill(&mut remote, 5);
    let mut sg = [local.sge(10, 3000)];
    let mut wr = rdma_wr(
        13,
        IBV_WR_RDMA_READ,
        &mut sg,
        remote.addr() + 50,
        remote.rkey(),
    );
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!(
        (s.status, s.opcode, s.wr_id),
        (IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 13)
    );
    assert_eq!(s.byte_len, 3000);
    let got = local.snapshot();
    assert_eq!(&got[10..3010], &remote.bytes()[50..3050]);
    assert!(got[..10].iter().chain(&got[3010..]).all(|&b| b == 0));
    assert_no_wc(p.cq_b, Duration::from_millis(20));
}

#[test]
fn atomics() {
    let p = Pair::new();
    let mut target = p.buf(64);
    let res = p.buf(16);
    let t = target.addr() + 16;
    // SAFETY: in bounds and aligned.
    unsafe { *(target.bytes_mut().as_mut_ptr().add(16) as *mut u64) = 100 };

    // Compare-and-swap that matches.
    let mut sg = [res.sge(0, 8)];
    let mut wr = atomic_wr(
        1,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        &mut sg,
        t,
        target.rkey(),
        100,
        555,
    );
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!(
        (s.status, s.opcode, s.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, 8)
    );
    let read_u64 =
        |b: &Buf, off: usize| u64::from_ne_bytes(b.snapshot()[off..off + 8].try_into().unwrap());
    assert_eq!(read_u64(&res, 0), 100);
    assert_eq!(read_u64(&target, 16), 555);

    // Compare-and-swap that does not match leaves memory alone.
    let mut sg = [res.sge(8, 8)];
    let mut wr = atomic_wr(
        2,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        &mut sg,
        t,
        target.rkey(),
        1,
        2,
    );
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert_eq!(read_u64(&res, 8), 555);
    assert_eq!(read_u64(&target, 16), 555);

    // Fetch-and-add.
    let mut sg = [res.sge(0, 8)];
    let mut wr = atomic_wr(
        3,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        t,
        target.rkey(),
        45,
        0,
    );
    assert_eq!(post_send(p.a, &mut wr), 0);
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.opcode), (IBV_WC_SUCCESS, IBV_WC_FETCH_ADD));
    assert_eq!(read_u64(&res, 0), 555);
    assert_eq!(read_u64(&target, 16), 600);
    let got = target.snapshot();
    assert!(got[..16].iter().chain(&got[24..]).all(|&b| b == 0));
}

#[test]
fn multi_sge_gather_and_scatter() {
    let p = Pair::new();
    let mut src = p.buf(300);
    let dst = p.buf(300);
    fill(&mut src, 6);
    // Receive scattered over three pieces with gaps between them.
    let mut rs = [dst.sge(0, 50), dst.sge(100, 70), dst.sge(200, 90)];
    assert_eq!(post_recv(p.b, 1, &mut rs), 0);
    // Send gathered from three pieces: 30 + 60 + 110 = 200 bytes.
    let mut ss = [src.sge(0, 30), src.sge(40, 60), src.sge(150, 110)];
    let mut wr = send_wr(2, IBV_WR_SEND, &mut ss, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.byte_len), (IBV_WC_SUCCESS, 200));
    let mut sent = Vec::new();
    sent.extend_from_slice(&src.bytes()[0..30]);
    sent.extend_from_slice(&src.bytes()[40..100]);
    sent.extend_from_slice(&src.bytes()[150..260]);
    let got = dst.snapshot();
    let mut placed = Vec::new();
    placed.extend_from_slice(&got[0..50]);
    placed.extend_from_slice(&got[100..170]);
    placed.extend_from_slice(&got[200..280]);
    assert_eq!(placed, sent);
    assert!(got[50..100]
        .iter()
        .chain(&got[170..200])
        .chain(&got[280..])
        .all(|&b| b == 0));

    // RDMA READ scattering into several local pieces.
    let mut ls = [dst.sge(0, 20), dst.sge(60, 20)];
    let mut wr = rdma_wr(3, IBV_WR_RDMA_READ, &mut ls, src.addr(), src.rkey());
    assert_eq!(post_send(p.a, &mut wr), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let got = dst.snapshot();
    assert_eq!(&got[0..20], &src.bytes()[0..20]);
    assert_eq!(&got[60..80], &src.bytes()[20..40]);
}

#[test]
fn inline_send_copies_at_post_time() {
    let p = Pair::new();
    let dst = p.buf(64);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 64)]), 0);
    // Inline data needs no registration: lkey 0 on plain memory.
    let mut data = *b"inline payload!!";
    let mut sg = [ibv_sge {
        addr: data.as_mut_ptr() as u64,
        length: data.len() as u32,
        lkey: 0,
    }];
    let mut wr = send_wr(5, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    assert_eq!(post_send(p.a, &mut wr), 0);
    // The buffer may be reused as soon as post returns.
    data.fill(b'x');
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!(r.byte_len, 16);
    assert_eq!(&dst.snapshot()[..16], b"inline payload!!");

    // More than max_inline_data is refused at post time.
    let big = vec![0u8; 4096];
    let mut sg = [ibv_sge {
        addr: big.as_ptr() as u64,
        length: 4096,
        lkey: 0,
    }];
    let mut wr = send_wr(6, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    assert_eq!(post_send(p.a, &mut wr), libc::EINVAL);
}

#[test]
fn unsignaled_and_sq_sig_all() {
    let p = Pair::new();
    let src = p.buf(8);
    let dst = p.buf(64);
    for i in 0..3 {
        assert_eq!(post_recv(p.b, i, &mut [dst.sge(0, 64)]), 0);
    }
    let mut sg = [src.sge(0, 8)];
    let mut w1 = send_wr(1, IBV_WR_SEND, &mut sg, 0);
    let mut w2 = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w1), 0);
    assert_eq!(post_send(p.a, &mut w2), 0);
    // Only the signaled WR completes, and its slot and the unsignaled one's
    // are both freed.
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, 2));
    assert_eq!(
        wait_wcs(p.cq_b, 2)
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        [0, 1]
    );
    assert_no_wc(p.cq_a, Duration::from_millis(20));

    // With sq_sig_all every WR completes.
    let q = Pair::with(ConnOpts::default(), ConnOpts::default(), |a| {
        a.sq_sig_all = 1
    });
    let src = q.buf(8);
    let dst = q.buf(8);
    assert_eq!(post_recv(q.b, 9, &mut [dst.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(4, IBV_WR_SEND, &mut sg, 0);
    assert_eq!(post_send(q.a, &mut w), 0);
    let s = wait_wc(q.cq_a);
    assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, 4));
}

#[test]
fn many_pipelined_sends_complete_in_order() {
    let p = Pair::new();
    let mut src = p.buf(64 * 16);
    let dst = p.buf(64 * 200);
    fill(&mut src, 7);
    let mut next_recv = 0u64;
    let mut sent = 0u64;
    let mut done = 0u64;
    let n = 200u64;
    // Keep the 16-deep send queue full.
    while done < n {
        while next_recv < n && next_recv - done < 16 {
            let off = (next_recv * 64) as usize;
            assert_eq!(post_recv(p.b, next_recv, &mut [dst.sge(off, 64)]), 0);
            next_recv += 1;
        }
        while sent < next_recv && sent - done < 16 {
            let off = ((sent % 16) * 64) as usize;
            let mut sg = [src.sge(off, 64)];
            let mut w = send_wr(sent, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
            assert_eq!(post_send(p.a, &mut w), 0);
            sent += 1;
        }
        let s = wait_wc(p.cq_a);
        assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, done));
        let r = wait_wc(p.cq_b);
        assert_eq!((r.status, r.wr_id, r.byte_len), (IBV_WC_SUCCESS, done, 64));
        done += 1;
    }
    let got = dst.snapshot();
    for i in 0..n as usize {
        let s = (i % 16) * 64;
        assert_eq!(
            &got[i * 64..i * 64 + 64],
            &src.bytes()[s..s + 64],
            "message {i}"
        );
    }
}

#[test]
fn large_messages() {
    let p = Pair::new();
    const N: usize = 4 << 20;
    let mut src = p.buf(N);
    let dst = p.buf(N);
    let back = p.buf(N);
    fill(&mut src, 8);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, N as u32)]), 0);
    let mut sg = [src.sge(0, N as u32)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.status, r.byte_len), (IBV_WC_SUCCESS, N as u32));
    assert!(dst.snapshot() == src.bytes());
    let mut sg = [back.sge(0, N as u32)];
    let mut w = rdma_wr(2, IBV_WR_RDMA_READ, &mut sg, dst.addr(), dst.rkey());
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert!(back.snapshot() == src.bytes());
}

#[test]
fn mixed_ops_keep_order() {
    let p = Pair::new();
    let mut src = p.buf(64);
    let remote = p.buf(64);
    let local = p.buf(64);
    fill(&mut src, 9);
    // WRITE then READ of the same bytes: RC ordering makes the READ see it.
    let mut s1 = [src.sge(0, 32)];
    let mut w1 = rdma_wr(1, IBV_WR_RDMA_WRITE, &mut s1, remote.addr(), remote.rkey());
    w1.send_flags = 0;
    let mut s2 = [local.sge(0, 32)];
    let mut w2 = rdma_wr(2, IBV_WR_RDMA_READ, &mut s2, remote.addr(), remote.rkey());
    w1.next = &mut w2;
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: a valid two-element list on a live QP.
    let r = unsafe { ops_post(p.a, &mut w1, &mut bad) };
    assert_eq!(r, 0);
    let s = wait_wc(p.cq_a);
    assert_eq!((s.status, s.wr_id), (IBV_WC_SUCCESS, 2));
    assert_eq!(&local.snapshot()[..32], &src.bytes()[..32]);
}

/// ibv_post_send through the context's ops, as verbs.h does.
///
/// # Safety
/// `qp` must be live and `wr` a valid list.
unsafe fn ops_post(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { (*(*qp).context).ops.post_send.unwrap()(qp, wr, bad) }
}

#[test]
fn solicited_only_notification() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let ch = c.channel();
    let cq_a = c.cq(16, null_mut());
    let cq_b = c.cq(16, ch);
    let a = c.qp(pd, cq_a, cq_a);
    let b = c.qp(pd, cq_b, cq_b);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let src = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    for i in 0..2 {
        assert_eq!(post_recv(b, i, &mut [dst.sge(0, 8)]), 0);
    }
    // SAFETY: cq_b is live.
    assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq_b, 1) }, 0);
    // SAFETY: ch is live.
    let fd = unsafe { (*ch).fd };
    let readable = |ms: c_int| {
        let mut pf = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pf, 1, ms) == 1 }
    };

    // An unsolicited SEND completes but raises no event.
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(1, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    assert_eq!(wait_wc(cq_a).status, IBV_WC_SUCCESS);
    let r = wait_wc(cq_b);
    assert_eq!((r.status, r.wr_id), (IBV_WC_SUCCESS, 0));
    assert!(!readable(0));

    // A solicited one does.
    let mut w = send_wr(
        2,
        IBV_WR_SEND,
        &mut sg,
        IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
    );
    assert_eq!(post_send(a, &mut w), 0);
    assert!(readable(10_000));
    let mut ev_cq: *mut ibv_cq = null_mut();
    let mut ev_ctx: *mut std::os::raw::c_void = null_mut();
    assert_eq!(
        // SAFETY: ch is live; out-pointers valid.
        unsafe { OPS.get_cq_event.unwrap()(ch, &mut ev_cq, &mut ev_ctx) },
        0
    );
    assert_eq!(ev_cq, cq_b);
    assert_eq!(ev_ctx as usize, 0x1234);
    let r = wait_wc(cq_b);
    assert_eq!((r.status, r.wr_id), (IBV_WC_SUCCESS, 1));
    // SAFETY: cq_b is live.
    unsafe { OPS.ack_cq_events.unwrap()(cq_b, 1) };
    // SAFETY: as above.
    assert_eq!(unsafe { (*cq_b).comp_events_completed }, 1);

    destroy_qp(a);
    destroy_qp(b);
    assert_eq!(destroy_cq(cq_a), 0);
    assert_eq!(
        // SAFETY: ch is live and still has cq_b.
        unsafe { OPS.destroy_comp_channel.unwrap()(ch) },
        libc::EBUSY
    );
    assert_eq!(destroy_cq(cq_b), 0);
    // SAFETY: ch is live and now unused.
    assert_eq!(unsafe { OPS.destroy_comp_channel.unwrap()(ch) }, 0);
}

#[test]
fn qp_connected_to_itself() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, qpn(q), &o);
    to_rts(q, &o);
    let mut src = Buf::new(pd, 32, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 32, IBV_ACCESS_LOCAL_WRITE);
    fill(&mut src, 10);
    assert_eq!(post_recv(q, 1, &mut [dst.sge(0, 32)]), 0);
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
    let mut wcs = wait_wcs(cq, 2);
    wcs.sort_by_key(|w| w.opcode);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (IBV_WC_SEND, IBV_WC_SUCCESS)
    );
    assert_eq!((wcs[1].opcode, wcs[1].src_qp), (IBV_WC_RECV, qpn(q)));
    assert_eq!(dst.snapshot(), src.bytes());
}

#[test]
fn non_global_address_uses_this_host() {
    let o = ConnOpts {
        global: false,
        ..ConnOpts::default()
    };
    let p = Pair::with(o, o, |_| {});
    let src = p.buf(8);
    let dst = p.buf(8);
    assert_eq!(post_recv(p.b, 1, &mut [dst.sge(0, 8)]), 0);
    let mut sg = [src.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_eq!(wait_wc(p.cq_a).status, IBV_WC_SUCCESS);
    assert_eq!(wait_wc(p.cq_b).status, IBV_WC_SUCCESS);
}
