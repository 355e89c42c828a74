//! The extended APIs (`ibv_cq_ex` polling, `ibv_qp_ex` work-request
//! builder) and completion channels.

mod common;

use std::os::raw::c_void;
use std::ptr::null_mut;
use std::time::Instant;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

/// Bounded wait for `ibv_start_poll` to find a completion.
fn start_poll(cq: *mut ibv_cq_ex) {
    let deadline = Instant::now() + WAIT;
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    loop {
        // SAFETY: cq is live.
        let r = unsafe { (*cq).start_poll.unwrap()(cq, &mut attr) };
        if r == 0 {
            return;
        }
        assert_eq!(r, libc::ENOENT);
        assert!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
}

#[test]
fn cq_ex_poll_api() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let flags = (IBV_WC_STANDARD_FLAGS
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) as u64;
    let cqx = c.cq_ex(16, null_mut(), flags);
    let cq = cqx as *mut ibv_cq;
    let a = c.qp(pd, cq, cq);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);

    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    assert_eq!(
        // SAFETY: cqx is live.
        unsafe { (*cqx).start_poll.unwrap()(cqx, &mut attr) },
        libc::ENOENT
    );

    let t0 = rsw_now();
    assert_eq!(post_recv(b, 0xb, &mut [dst.sge(0, 64)]), 0);
    let mut sg = [src.sge(0, 24)];
    let mut w = send_wr(0xa, IBV_WR_SEND_WITH_IMM, &mut sg, IBV_SEND_SIGNALED);
    w.set_imm_data(0x0102_0304u32.to_be());
    assert_eq!(post_send(a, &mut w), 0);

    let mut seen = Vec::new();
    start_poll(cqx);
    let mut last_ts = 0;
    loop {
        // SAFETY: inside a start/end poll section on a live CQ.
        unsafe {
            let x = &*cqx;
            let e = (
                x.wr_id,
                x.status,
                x.read_opcode.unwrap()(cqx),
                x.read_byte_len.unwrap()(cqx),
                x.read_qp_num.unwrap()(cqx),
                x.read_src_qp.unwrap()(cqx),
                x.read_wc_flags.unwrap()(cqx),
                x.read_imm_data.unwrap()(cqx),
            );
            let ts = x.read_completion_ts.unwrap()(cqx);
            assert!(ts >= t0 && ts >= last_ts, "timestamps are monotonic ns");
            last_ts = ts;
            assert!(x.read_completion_wallclock_ns.unwrap()(cqx) > 1_600_000_000_000_000_000);
            assert_eq!(x.read_vendor_err.unwrap()(cqx), 0);
            assert_eq!(x.read_slid.unwrap()(cqx), 0);
            assert_eq!(x.read_sl.unwrap()(cqx), 0);
            seen.push(e);
        }
        if seen.len() == 2 {
            break;
        }
        // SAFETY: inside the poll section.
        let r = unsafe { (*cqx).next_poll.unwrap()(cqx) };
        if r == libc::ENOENT {
            // SAFETY: closes the section; then wait for the other one.
            unsafe { (*cqx).end_poll.unwrap()(cqx) };
            start_poll(cqx);
        } else {
            assert_eq!(r, 0);
        }
    }
    // SAFETY: closes the poll section.
    unsafe { (*cqx).end_poll.unwrap()(cqx) };
    seen.sort_by_key(|e| e.2);
    let s = seen[0];
    assert_eq!(
        (s.0, s.1, s.2, s.4),
        (0xa, IBV_WC_SUCCESS, IBV_WC_SEND, qpn(a))
    );
    let r = seen[1];
    assert_eq!((r.0, r.1, r.2, r.3), (0xb, IBV_WC_SUCCESS, IBV_WC_RECV, 24));
    assert_eq!((r.4, r.5), (qpn(b), qpn(a)));
    assert_ne!(r.6 & IBV_WC_WITH_IMM, 0);
    assert_eq!(u32::from_be(r.7), 0x0102_0304);
}

fn rsw_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn qp_ex_pair() -> (Ctx, *mut ibv_pd, *mut ibv_cq, *mut ibv_qp_ex, *mut ibv_qp) {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(64, null_mut());
    let mut at = c.qp_attr(pd, cq, cq);
    at.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    at.send_ops_flags = (IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_READ
        | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;
    let a = c.create_qp(&mut at);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    (c, pd, cq, a as *mut ibv_qp_ex, b)
}

#[test]
fn qp_ex_builder_ops() {
    let (_c, pd, cq, qx, b) = qp_ex_pair();
    let all = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC;
    let mut src = Buf::new(pd, 256, all);
    let dst = Buf::new(pd, 256, all);
    let remote = Buf::new(pd, 256, all);
    for (i, x) in src.bytes_mut().iter_mut().enumerate() {
        *x = i as u8 ^ 0x5a;
    }
    assert_eq!(post_recv(b, 100, &mut [dst.sge(0, 64)]), 0);
    assert_eq!(post_recv(b, 101, &mut [dst.sge(64, 64)]), 0);
    assert_eq!(post_recv(b, 102, &mut [dst.sge(128, 8)]), 0);
    // SAFETY: qx is a live QP created with send ops; one thread builds.
    unsafe {
        let q = &mut *qx;
        let inline = *b"hello, inline";
        q.wr_start.unwrap()(qx);
        q.wr_id = 1;
        q.wr_flags = IBV_SEND_SIGNALED;
        q.wr_send.unwrap()(qx);
        q.wr_set_sge.unwrap()(qx, src.lkey(), src.addr(), 32);
        q.wr_id = 2;
        q.wr_send_imm.unwrap()(qx, 77u32.to_be());
        let list = [src.sge(32, 10), src.sge(100, 20)];
        q.wr_set_sge_list.unwrap()(qx, 2, list.as_ptr());
        q.wr_id = 3;
        q.wr_rdma_write.unwrap()(qx, remote.rkey(), remote.addr() + 8);
        q.wr_set_inline_data.unwrap()(qx, inline.as_ptr() as *mut c_void, inline.len());
        q.wr_id = 4;
        q.wr_rdma_write_imm.unwrap()(qx, remote.rkey(), remote.addr() + 64, 9u32.to_be());
        let bufs = [
            ibv_data_buf {
                addr: b"ab".as_ptr() as *mut c_void,
                length: 2,
            },
            ibv_data_buf {
                addr: b"cde".as_ptr() as *mut c_void,
                length: 3,
            },
        ];
        q.wr_set_inline_data_list.unwrap()(qx, 2, bufs.as_ptr());
        q.wr_id = 5;
        q.wr_rdma_read.unwrap()(qx, remote.rkey(), remote.addr() + 8);
        q.wr_set_sge.unwrap()(qx, dst.lkey(), dst.addr() + 200, 13);
        q.wr_id = 6;
        q.wr_atomic_fetch_add.unwrap()(qx, remote.rkey(), remote.addr() + 128, 5);
        q.wr_set_sge.unwrap()(qx, dst.lkey(), dst.addr() + 216, 8);
        q.wr_id = 7;
        q.wr_atomic_cmp_swp.unwrap()(qx, remote.rkey(), remote.addr() + 128, 5, 99);
        q.wr_set_sge.unwrap()(qx, dst.lkey(), dst.addr() + 224, 8);
        assert_eq!(q.wr_complete.unwrap()(qx), 0);
    }
    let w = wait_wcs(cq, 10);
    let mut sends: Vec<_> = w
        .iter()
        .filter(|c| c.qp_num == qpn(qx as *mut ibv_qp))
        .collect();
    let mut recvs: Vec<_> = w.iter().filter(|c| c.qp_num == qpn(b)).collect();
    sends.sort_by_key(|c| c.wr_id);
    recvs.sort_by_key(|c| c.wr_id);
    assert_eq!(
        sends.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    assert!(sends
        .iter()
        .chain(&recvs)
        .all(|c| c.status == IBV_WC_SUCCESS));
    assert_eq!(recvs[0].byte_len, 32);
    assert_eq!(
        (recvs[1].byte_len, u32::from_be(recvs[1].imm_data())),
        (30, 77)
    );
    assert_eq!(recvs[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    let d = dst.snapshot();
    let s = src.bytes();
    assert_eq!(&d[..32], &s[..32]);
    assert_eq!(&d[64..74], &s[32..42]);
    assert_eq!(&d[74..94], &s[100..120]);
    let r = remote.snapshot();
    assert_eq!(&r[8..21], b"hello, inline");
    assert_eq!(&r[64..69], b"abcde");
    assert_eq!(&d[200..213], b"hello, inline");
    assert_eq!(u64::from_ne_bytes(d[216..224].try_into().unwrap()), 0);
    assert_eq!(u64::from_ne_bytes(d[224..232].try_into().unwrap()), 5);
    assert_eq!(u64::from_ne_bytes(r[128..136].try_into().unwrap()), 99);
}

#[test]
fn qp_ex_errors_and_abort() {
    let (_c, pd, cq, qx, b) = qp_ex_pair();
    let src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    // SAFETY: qx is a live QP created with send ops.
    unsafe {
        let q = &mut *qx;
        assert!(q.wr_bind_mw.is_some() && q.wr_local_inv.is_some());
        // Unsupported operation: reported by wr_complete, nothing posted.
        q.wr_start.unwrap()(qx);
        q.wr_id = 1;
        q.wr_flags = IBV_SEND_SIGNALED;
        q.wr_send.unwrap()(qx);
        q.wr_set_sge.unwrap()(qx, src.lkey(), src.addr(), 8);
        q.wr_send_tso.unwrap()(qx, std::ptr::null_mut(), 0, 0);
        assert_eq!(q.wr_complete.unwrap()(qx), libc::EOPNOTSUPP);
        // Too much inline data.
        let big = vec![0u8; 4096];
        q.wr_start.unwrap()(qx);
        q.wr_send.unwrap()(qx);
        q.wr_set_inline_data.unwrap()(qx, big.as_ptr() as *mut c_void, big.len());
        assert_eq!(q.wr_complete.unwrap()(qx), libc::EINVAL);
        // Aborted batches post nothing.
        q.wr_start.unwrap()(qx);
        q.wr_send.unwrap()(qx);
        q.wr_set_sge.unwrap()(qx, src.lkey(), src.addr(), 8);
        q.wr_abort.unwrap()(qx);
        // An empty batch is fine.
        q.wr_start.unwrap()(qx);
        assert_eq!(q.wr_complete.unwrap()(qx), 0);
    }
    assert_no_wc(cq, std::time::Duration::from_millis(20));
    // The QP still works afterwards.
    assert_eq!(post_recv(b, 9, &mut [dst.sge(0, 8)]), 0);
    // SAFETY: as above.
    unsafe {
        let q = &mut *qx;
        q.wr_start.unwrap()(qx);
        q.wr_id = 8;
        q.wr_flags = IBV_SEND_SIGNALED;
        q.wr_send.unwrap()(qx);
        q.wr_set_sge.unwrap()(qx, src.lkey(), src.addr(), 8);
        assert_eq!(q.wr_complete.unwrap()(qx), 0);
    }
    let w = wait_wcs(cq, 2);
    assert!(w.iter().all(|c| c.status == IBV_WC_SUCCESS));
}

#[test]
fn qp_without_send_ops_has_no_builder() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(4, null_mut());
    let q = c.qp(pd, cq, cq) as *mut ibv_qp_ex;
    // SAFETY: every QP is an ibv_qp_ex.
    unsafe {
        assert!((*q).wr_start.is_none());
        assert!((*q).wr_complete.is_none());
    }
}

type ChannelPair = (
    Ctx,
    *mut ibv_pd,
    *mut ibv_comp_channel,
    *mut ibv_cq,
    *mut ibv_qp,
    *mut ibv_qp,
);

/// Two QPs connected to each other, sharing one CQ bound to a channel.
fn channel_pair() -> ChannelPair {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let ch = c.channel();
    let cq = c.cq(16, ch);
    let a = c.qp(pd, cq, cq);
    let b = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    (c, pd, ch, cq, a, b)
}

fn channel_pair_destroy(
    a: *mut ibv_qp,
    b: *mut ibv_qp,
    cq: *mut ibv_cq,
    ch: *mut ibv_comp_channel,
) {
    destroy_qp(a);
    destroy_qp(b);
    assert_eq!(destroy_cq(cq), 0);
    // SAFETY: ch is live and unused.
    assert_eq!(unsafe { OPS.destroy_comp_channel.unwrap()(ch) }, 0);
}

#[test]
fn channel_blocking_and_nonblocking() {
    let (c, pd, ch, cq, a, b) = channel_pair();
    let buf = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    // SAFETY: ch is live.
    let fd = unsafe { (*ch).fd };

    // Non-blocking: EAGAIN while nothing happened.
    // SAFETY: fcntl on the channel's descriptor.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) };
    let mut ev_cq: *mut ibv_cq = null_mut();
    let mut ev_ctx: *mut c_void = null_mut();
    assert_eq!(
        // SAFETY: ch is live; out-pointers valid.
        unsafe { OPS.get_cq_event.unwrap()(ch, &mut ev_cq, &mut ev_ctx) },
        -1
    );
    assert_eq!(errno(), libc::EAGAIN);

    // Arm, complete something, poll() the fd, then get the event.
    // SAFETY: cq is live.
    assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq, 0) }, 0);
    assert_eq!(post_recv(b, 1, &mut [buf.sge(0, 8)]), 0);
    let mut sg = [buf.sge(0, 8)];
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    let mut pf = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut pf, 1, 10_000) }, 1);
    assert_eq!(
        // SAFETY: ch is live; out-pointers valid.
        unsafe { OPS.get_cq_event.unwrap()(ch, &mut ev_cq, &mut ev_ctx) },
        0
    );
    assert_eq!(ev_cq, cq);
    assert_eq!(ev_ctx as usize, 0x1234);
    // Exactly one event per arm.
    assert_eq!(
        // SAFETY: as above.
        unsafe { OPS.get_cq_event.unwrap()(ch, &mut ev_cq, &mut ev_ctx) },
        -1
    );
    assert_eq!(errno(), libc::EAGAIN);
    assert_eq!(wait_wcs(cq, 2).len(), 2);
    // SAFETY: cq is live.
    unsafe { OPS.ack_cq_events.unwrap()(cq, 1) };

    // Blocking: a thread waits in get_cq_event until a completion arrives.
    // SAFETY: fcntl on the channel's descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) };
    // SAFETY: cq is live.
    assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq, 0) }, 0);
    let waiter = cq_event_waiter(ch);
    assert_eq!(post_recv(b, 3, &mut [buf.sge(0, 8)]), 0);
    let mut w = send_wr(4, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(a, &mut w), 0);
    let (r, got) = waiter.join().unwrap();
    assert_eq!((r, got), (0, cq as usize));
    assert_eq!(wait_wcs(cq, 2).len(), 2);
    // SAFETY: cq is live.
    unsafe { OPS.ack_cq_events.unwrap()(cq, 1) };

    channel_pair_destroy(a, b, cq, ch);
}

/// An event whose completions were all polled before it was read is still
/// the program's, as rdma-core and hardware deliver it: a blocking waiter
/// gets it at once, also after the CQ was resized in between.
#[test]
fn blocking_waiter_gets_an_event_whose_completions_were_polled() {
    let (c, pd, ch, cq, a, b) = channel_pair();
    let buf = Buf::new(pd, 8, IBV_ACCESS_LOCAL_WRITE);
    // SAFETY: ch is live.
    let fd = unsafe { (*ch).fd };
    let mut sg = [buf.sge(0, 8)];
    assert_eq!(post_recv(b, 1, &mut [buf.sge(0, 8)]), 0);
    let mut w = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);

    // SAFETY: cq is live.
    assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq, 0) }, 0);
    assert_eq!(post_send(a, &mut w), 0);
    let mut ids: Vec<u64> = wait_wcs(cq, 2).iter().map(|wc| wc.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    let mut pf = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut pf, 1, 10_000) }, 1);
    // SAFETY: cq is live.
    assert_eq!(unsafe { OPS.resize_cq.unwrap()(cq, 32) }, 0);

    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = cq_event_waiter(ch);
    std::thread::spawn(move || {
        let _ = tx.send(waiter.join().unwrap());
    });
    let (r, got) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the blocking waiter did not get the event");
    assert_eq!((r, got), (0, cq as usize));
    // SAFETY: cq is live; one event was delivered.
    unsafe { OPS.ack_cq_events.unwrap()(cq, 1) };

    channel_pair_destroy(a, b, cq, ch);
}

#[test]
fn mr_dereg_during_remote_traffic_is_safe() {
    // WRITEs hammer an MR while another thread deregisters and registers it
    // again: each WRITE either succeeds or fails with a remote access error;
    // nothing touches memory outside a live registration.
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(256, null_mut());
    let src = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE);
    let mut statuses = Vec::new();
    for round in 0..20 {
        let a = c.qp(pd, cq, cq);
        let b = c.qp(pd, cq, cq);
        let o = ConnOpts::default();
        connect(a, &o, b, &o);
        let target = Buf::new(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        let (addr, rkey) = (target.addr(), target.rkey());
        let mut sg = [src.sge(0, 4096)];
        let mut w = send_wr(round, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        };
        assert_eq!(post_send(a, &mut w), 0);
        drop(target);
        let wc = wait_wc(cq);
        assert!(
            wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_REM_ACCESS_ERR,
            "status {}",
            wc.status
        );
        statuses.push(wc.status);
        destroy_qp(a);
        destroy_qp(b);
        while poll(cq, &mut [ibv_wc::zeroed(); 8]) > 0 {}
    }
    assert_eq!(statuses.len(), 20);
}
