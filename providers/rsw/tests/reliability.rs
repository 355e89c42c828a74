//! The RC retry contract and connection binding (issue: bounded errors when
//! a peer vanishes, no takeover of a connection).
//!
//! A "silent peer" is a plain TCP listener whose port is the QPN the victim
//! is told of: the kernel completes the connection from its backlog, takes
//! the bytes, and nothing ever answers, as with a host that vanished behind
//! a dead link or a process that cannot accept.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use rsw::testing::refused_connections;
use rsw::wire::{Header, Op, HDR_LEN};
use verbs_abi::*;

/// The refused-connection counter is process-wide: tests that read it run
/// one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A QP in RTS whose peer is a listener that never answers.
struct Silent {
    _c: Ctx,
    _l: TcpListener,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    buf: Buf,
}

impl Silent {
    fn new(timeout: u8, retry_cnt: u8) -> Silent {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port() as u32;
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let cq = c.cq(16, null_mut());
        let qp = c.qp(pd, cq, cq);
        let o = ConnOpts {
            timeout,
            retry_cnt,
            ..ConnOpts::default()
        };
        to_init(qp, o.access);
        to_rtr(qp, port, &o);
        to_rts(qp, &o);
        let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
        Silent {
            _c: c,
            _l: l,
            cq,
            qp,
            buf,
        }
    }

    /// Posts two SENDs; returns when they were posted.
    fn post_two(&self) -> Instant {
        let mut sg = [self.buf.sge(0, 16)];
        let mut w2 = send_wr(2, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
        let mut sg1 = [self.buf.sge(16, 16)];
        let mut w1 = send_wr(1, IBV_WR_SEND, &mut sg1, IBV_SEND_SIGNALED);
        w1.next = &mut w2;
        let t = Instant::now();
        assert_eq!(post_send(self.qp, &mut w1), 0);
        t
    }

    /// The first SEND fails with RETRY_EXC_ERR, the second flushes, the QP
    /// is in ERR; returns how long the first took.
    fn expect_retry_exceeded(&self, posted: Instant) -> Duration {
        let w = wait_wc(self.cq);
        let took = posted.elapsed();
        assert_eq!((w.wr_id, w.status), (1, IBV_WC_RETRY_EXC_ERR));
        assert_eq!(w.qp_num, qpn(self.qp));
        let f = wait_wc(self.cq);
        assert_eq!((f.wr_id, f.status), (2, IBV_WC_WR_FLUSH_ERR));
        assert_eq!(qp_state(self.qp), IBV_QPS_ERR);
        took
    }
}

/// timeout 14 (67 ms per try) and retry_cnt 7: about 0.55 s, as hardware.
#[test]
fn silent_peer_gives_retry_exceeded_in_bounded_time() {
    let s = Silent::new(14, 7);
    let took = s.expect_retry_exceeded(s.post_two());
    let budget = Duration::from_nanos((4096u64 << 14) * 8);
    assert!(took >= budget, "gave up after {took:?}, before {budget:?}");
    assert!(took < budget * 3, "gave up only after {took:?}");
}

/// The budget scales with timeout and retry_cnt: 268 ms x 3.
#[test]
fn retry_budget_follows_the_attributes() {
    let s = Silent::new(16, 2);
    let took = s.expect_retry_exceeded(s.post_two());
    let budget = Duration::from_nanos((4096u64 << 16) * 3);
    assert!(took >= budget, "gave up after {took:?}, before {budget:?}");
    assert!(took < budget * 3, "gave up only after {took:?}");
}

/// Very short timeouts are raised to timeout 13 (33.5 ms per try), so a
/// busy machine's scheduling cannot fail a live peer; still bounded.
#[test]
fn tiny_timeouts_are_floored() {
    let s = Silent::new(1, 0);
    let took = s.expect_retry_exceeded(s.post_two());
    assert!(took >= Duration::from_millis(33), "gave up after {took:?}");
    assert!(took < Duration::from_secs(1), "gave up only after {took:?}");
}

/// timeout 0 means wait forever, as on hardware.
#[test]
fn timeout_zero_waits_forever() {
    let s = Silent::new(0, 7);
    s.post_two();
    assert_no_wc(s.cq, Duration::from_millis(1500));
    assert_eq!(qp_state(s.qp), IBV_QPS_RTS);
}

/// A responder waiting for a receive (RNR, rnr_retry 7) is alive: the
/// requester's retry timer (here 134 ms in all) must not fail it, however
/// long the wait.
#[test]
fn rnr_wait_does_not_exhaust_retries() {
    let oa = ConnOpts {
        timeout: 14,
        retry_cnt: 1,
        rnr_retry: 7,
        ..ConnOpts::default()
    };
    let p = Pair::with(oa, ConnOpts::default(), |_| {});
    let mut src = p.buf(16);
    src.bytes_mut().copy_from_slice(b"after a long rnr");
    let dst = p.buf(16);
    let mut sg = [src.sge(0, 16)];
    let mut w = send_wr(7, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(p.a, &mut w), 0);
    assert_no_wc(p.cq_a, Duration::from_millis(800));
    assert_eq!(qp_state(p.a), IBV_QPS_RTS);
    assert_eq!(post_recv(p.b, 8, &mut [dst.sge(0, 16)]), 0);
    let r = wait_wc(p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (8, IBV_WC_SUCCESS, 16));
    let s = wait_wc(p.cq_a);
    assert_eq!((s.wr_id, s.status), (7, IBV_WC_SUCCESS));
    assert_eq!(dst.snapshot(), b"after a long rnr");
}

/// The provider closes the connection at once (bounded by the timeout).
fn expect_closed(mut s: TcpStream) {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 256];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("a refused connection got {n} bytes"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("connection not closed: {e}"),
    }
}

fn dial_from(src: Option<&str>, port: u32) -> TcpStream {
    let dst: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let Some(src) = src else {
        return TcpStream::connect(dst).unwrap();
    };
    // std has no bind-before-connect; do it by hand.
    // SAFETY: plain socket creation; checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh socket we own.
    let s: TcpStream = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let ip: std::net::Ipv4Addr = src.parse().unwrap();
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    assert_eq!(
        // SAFETY: sa is a valid sockaddr_in of `len` bytes.
        unsafe { libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len) },
        0
    );
    sa.sin_port = (port as u16).to_be();
    sa.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
    assert_eq!(
        // SAFETY: as above.
        unsafe { libc::connect(fd, &sa as *const _ as *const libc::sockaddr, len) },
        0
    );
    s
}

/// Waits (bounded) until the refused counter passes `n`.
fn refused_past(n: u64) {
    assert!(
        wait_until(|| refused_connections() > n),
        "connection not refused (count {})",
        refused_connections()
    );
}

/// Claiming to be the peer of an established pair (its QPN, GID and
/// address: everything but being first) is refused; the pair is unharmed.
#[test]
fn a_second_hello_cannot_take_over() {
    let _s = serial();
    let p = Pair::new();
    healthy_pair(&p, 1);
    let before = refused_connections();
    let mut s = dial_from(None, qpn(p.b));
    s.write_all(&hello_from(lo_gid(), qpn(p.a), qpn(p.b)))
        .unwrap();
    let mut h = [0u8; HDR_LEN];
    let mut wr = Header::new(Op::Write, 0);
    wr.length = 0;
    wr.encode(&mut h);
    let _ = s.write_all(&h);
    expect_closed(s);
    refused_past(before);
    healthy_pair(&p, 2);
    assert_eq!(qp_state(p.a), IBV_QPS_RTS);
    assert_eq!(qp_state(p.b), IBV_QPS_RTS);
}

/// Before the real peer connects: a hello claiming the right QPN but
/// another GID, or coming from another address, or arriving at an address
/// that is not the device's, is refused; the real peer then gets in.
#[test]
fn hellos_must_match_the_rtr_peer() {
    let _s = serial();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    let o = ConnOpts::default();
    to_init(q, o.access);
    const PEER: u32 = 4411;
    to_rtr(q, PEER, &o);
    let recv = Buf::new(pd, 16, IBV_ACCESS_LOCAL_WRITE);
    assert_eq!(post_recv(q, 3, &mut [recv.sge(0, 16)]), 0);

    let mut outsider = [0u8; 16];
    outsider[10] = 0xff;
    outsider[11] = 0xff;
    outsider[12..].copy_from_slice(&[8, 8, 8, 8]);
    // Wrong GID claimed.
    let before = refused_connections();
    let mut s = dial_from(None, qpn(q));
    s.write_all(&hello_from(outsider, PEER, qpn(q))).unwrap();
    expect_closed(s);
    refused_past(before);
    // Right claims, wrong source address.
    let before = refused_connections();
    let mut s = dial_from(Some("127.0.0.2"), qpn(q));
    let _ = s.write_all(&hello_from(lo_gid(), PEER, qpn(q)));
    expect_closed(s);
    refused_past(before);
    // Right claims, but arriving at an address rsw_lo does not have.
    let before = refused_connections();
    let mut s = TcpStream::connect(("127.0.0.3", qpn(q) as u16)).unwrap();
    let _ = s.write_all(&hello_from(lo_gid(), PEER, qpn(q)));
    expect_closed(s);
    refused_past(before);
    assert_no_wc(cq, Duration::from_millis(10));
    assert_eq!(qp_state(q), IBV_QPS_RTR);

    // The real peer.
    let mut s = dial_from(None, qpn(q));
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(&hello_from(lo_gid(), PEER, qpn(q))).unwrap();
    let mut h = [0u8; HDR_LEN];
    let mut r = Header::new(Op::Send, 0);
    r.length = 5;
    r.encode(&mut h);
    s.write_all(&h).unwrap();
    s.write_all(b"peer!").unwrap();
    let w = wait_wc(cq);
    assert_eq!((w.wr_id, w.status, w.byte_len), (3, IBV_WC_SUCCESS, 5));
    assert_eq!(&recv.snapshot()[..5], b"peer!");
    let a = read_response(&mut s);
    assert_eq!((a.op, a.msn), (Op::Ack, 0));
}

/// Connections naming a QP that is not in RTR yet are held, but only a few
/// per QP: a flood of valid-looking hellos cannot pile up descriptors.
#[test]
fn held_connections_are_capped_per_qp() {
    let _s = serial();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, null_mut());
    let q = c.qp(pd, cq, cq);
    to_init(q, ConnOpts::default().access);
    let before = refused_connections();
    let pending_before = rsw::testing::pending_connections();
    const N: u64 = 40;
    let conns: Vec<TcpStream> = (0..N)
        .map(|i| {
            let mut s = dial_from(None, qpn(q));
            s.write_all(&hello_from(lo_gid(), 5000 + i as u32, qpn(q)))
                .unwrap();
            s
        })
        .collect();
    // All but the per-QP cap (8) are closed.
    assert!(
        wait_until(|| refused_connections() - before >= N - 8),
        "only {} of {N} refused",
        refused_connections() - before
    );
    // This QP holds the cap (the process-wide count also moves with
    // other tests' connections: only an upper bound holds there).
    assert_eq!(rsw::testing::held_connections(q), Some(8));
    let pending = rsw::testing::pending_connections();
    assert!(pending >= 8, "{pending} pending, {pending_before} before");
    drop(conns);
}

/// A CQ that overruns puts its QPs in ERR with IBV_EVENT_QP_FATAL (and
/// itself in error with IBV_EVENT_CQ_ERR).
#[test]
fn cq_overrun_fails_its_qps() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let small = c.cq(2, null_mut());
    // SAFETY: small is a live CQ.
    let cqe = unsafe { (*small).cqe } as usize;
    let other = c.cq(64, null_mut());
    let mut aa = c.qp_attr(pd, small, small);
    aa.cap.max_send_wr = 64;
    let a = c.create_qp(&mut aa);
    let b = c.qp(pd, other, other);
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let buf = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for i in 0..cqe + 2 {
        let mut sg = [buf.sge(0, 8)];
        let mut w = send_wr(i as u64, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: buf.addr() + 32,
            rkey: buf.rkey(),
        };
        assert_eq!(post_send(a, &mut w), 0);
    }
    let mut seen_cq_err = false;
    let mut seen_fatal = false;
    while !(seen_cq_err && seen_fatal) {
        let mut ev = get_async(c.ctx).expect("async event");
        match ev.event_type {
            IBV_EVENT_CQ_ERR => {
                // SAFETY: CQ events carry the CQ.
                assert_eq!(unsafe { ev.element.cq }, small);
                seen_cq_err = true;
            }
            IBV_EVENT_QP_FATAL => {
                // SAFETY: QP events carry the QP.
                assert_eq!(unsafe { ev.element.qp }, a);
                seen_fatal = true;
            }
            t => panic!("unexpected event {t}"),
        }
        ack_async(&mut ev);
    }
    assert_eq!(qp_state(a), IBV_QPS_ERR);
}

/// A destination QP that exists but belongs to another connection (its
/// number reused, say): it refuses our connection, as a QP drops packets
/// from a stranger, and the request fails with RETRY_EXC_ERR, never a
/// bare flush.
#[test]
fn destination_qp_of_another_pair_gives_retry_exceeded() {
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(16, std::ptr::null_mut());
    let o = ConnOpts {
        timeout: 8,
        retry_cnt: 2,
        ..ConnOpts::default()
    };
    // The other pair's QP: in RTR, its peer is QP 4321.
    let other = c.qp(pd, cq, cq);
    to_init(other, o.access);
    to_rtr(other, 4321, &o);
    let qp = c.qp(pd, cq, cq);
    to_init(qp, o.access);
    to_rtr(qp, qpn(other), &o);
    to_rts(qp, &o);
    let b = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let mut sg = [b.sge(0, 32)];
    let mut w = send_wr(5, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(qp, &mut w), 0);
    let wc = wait_wc(cq);
    assert_eq!((wc.wr_id, wc.status), (5, IBV_WC_RETRY_EXC_ERR));
    assert_eq!(qp_state(qp), IBV_QPS_ERR);
    assert_eq!(qp_state(other), IBV_QPS_RTR);
}
