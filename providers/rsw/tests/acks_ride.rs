//! Over TCP, a SEND's acknowledgement rides on the next request the other
//! way (`wire::FLAG_ACK`) when the target polls, instead of a message of
//! its own; and it is still sent when nothing carries it: the target
//! polls again, stops polling, arms its CQ, or exits.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::null_mut;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

const ROLE: &str = "RSW_ACKS_CHILD";

/// Every test here is about the connection's own ACKs: no same-host path.
fn tcp() {
    std::env::set_var("RSW_TRANSPORT", "tcp");
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k * 7) as u8).collect()
}

/// Posts one SEND of `src[off..off + len]` with `wr_id`.
fn send(q: *mut ibv_qp, src: &Buf, off: usize, len: u32, wr_id: u64) {
    let mut sg = [src.sge(off, len)];
    let mut w = send_wr(wr_id, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED);
    assert_eq!(post_send(q, &mut w), 0);
}

/// Polls `cq` until it holds completions for every wr_id in `want` (any
/// order); checks each one's status and opcode, and returns the byte
/// lengths in `want`'s order.
fn collect(cq: *mut ibv_cq, want: &[(u64, ibv_wc_opcode)]) -> Vec<u32> {
    let mut got: Vec<Option<u32>> = vec![None; want.len()];
    while got.iter().any(Option::is_none) {
        let wc = wait_wc(cq);
        let i = want
            .iter()
            .position(|&(id, _)| id == wc.wr_id)
            .unwrap_or_else(|| panic!("unexpected completion {:#x}", wc.wr_id));
        assert_eq!(
            (wc.status, wc.opcode),
            (IBV_WC_SUCCESS, want[i].1),
            "completion {:#x}",
            wc.wr_id
        );
        assert!(got[i].is_none(), "completion {:#x} twice", wc.wr_id);
        got[i] = Some(wc.byte_len);
    }
    got.into_iter().map(Option::unwrap).collect()
}

/// `n` SENDs from `a` to `b`, each received (wr_id 100 + i) and
/// acknowledged before the next: both sides have polled their CQs.
fn warm_up(
    a: *mut ibv_qp,
    cq_a: *mut ibv_cq,
    b: *mut ibv_qp,
    cq_b: *mut ibv_cq,
    src: &Buf,
    dst: &Buf,
    n: u64,
) {
    for i in 0..n {
        let mut r = [dst.sge(0, 64)];
        assert_eq!(post_recv(b, 100 + i, &mut r), 0);
        send(a, src, 0, 16, i);
        collect(cq_b, &[(100 + i, IBV_WC_RECV)]);
        collect(cq_a, &[(i, IBV_WC_SEND)]);
    }
}

/// A ping-pong of SENDs, both sides polling: every ACK rides on the reply,
/// so neither responder writes to its connection (it wrote one ACK per
/// message before).
#[test]
fn a_ping_pong_sends_no_ack_messages() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    const N: usize = 300;
    const LEN: u32 = 40;
    let p = Pair::new();
    let mut src_a = p.buf(LEN as usize);
    let mut src_b = p.buf(LEN as usize);
    let dst_a = p.buf(LEN as usize);
    let dst_b = p.buf(LEN as usize);
    let writes = |q| rsw::testing::socket_calls(q).unwrap()[0].1;
    let (wa, wb) = (writes(p.a), writes(p.b));
    for i in 0..N {
        let mut r = [dst_b.sge(0, LEN)];
        assert_eq!(post_recv(p.b, 2000 + i as u64, &mut r), 0);
        let mut r = [dst_a.sge(0, LEN)];
        assert_eq!(post_recv(p.a, 3000 + i as u64, &mut r), 0);
        let (ping, pong) = (payload(i, LEN as usize), payload(i + 1000, LEN as usize));
        src_a.bytes_mut().copy_from_slice(&ping);
        src_b.bytes_mut().copy_from_slice(&pong);
        send(p.a, &src_a, 0, LEN, i as u64);
        // B: the ping, and B's previous pong acknowledged by this ping.
        let mut want = vec![(2000 + i as u64, IBV_WC_RECV)];
        if i > 0 {
            want.push((1000 + i as u64 - 1, IBV_WC_SEND));
        }
        assert_eq!(collect(p.cq_b, &want)[0], LEN);
        assert_eq!(dst_b.snapshot(), ping, "ping {i}");
        send(p.b, &src_b, 0, LEN, 1000 + i as u64);
        // A: its ping acknowledged, and the pong.
        let got = collect(
            p.cq_a,
            &[(i as u64, IBV_WC_SEND), (3000 + i as u64, IBV_WC_RECV)],
        );
        assert_eq!(got[1], LEN);
        assert_eq!(dst_a.snapshot(), pong, "pong {i}");
    }
    // The last pong's ACK comes when A polls again (nothing to carry it).
    let wc = wait_wc(p.cq_b);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (IBV_WC_SUCCESS, IBV_WC_SEND, 1000 + N as u64 - 1)
    );
    let (da, db) = (writes(p.a) - wa, writes(p.b) - wb);
    // The progress thread may answer a few itself (before a side is
    // found polling); one per message without the ride.
    // 2N before (every message acknowledged on its own); a loaded machine
    // that deschedules this thread for a millisecond brings the progress
    // thread back in, which answers at once.
    assert!(
        da + db < N as u64,
        "{da} + {db} ACK writes for {N} round trips"
    );
}

/// An ACK that rides past a READ still waiting for its data: the SEND
/// behind the READ completes after it, in order, once the data is in.
#[test]
fn a_ride_waits_for_an_earlier_read() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    const LEN: usize = 8 << 10;
    let p = Pair::new();
    let mut src = p.buf(LEN);
    let dst = p.buf(LEN);
    let msg = p.buf(64);
    let rx = p.buf(64);
    for round in 0..50usize {
        let data = payload(round, LEN);
        src.bytes_mut().copy_from_slice(&data);
        let mut r = [rx.sge(0, 64)];
        assert_eq!(post_recv(p.b, 50, &mut r), 0);
        let mut r = [rx.sge(0, 64)];
        assert_eq!(post_recv(p.a, 60, &mut r), 0);
        // A: a READ of B's memory, then a SEND behind it.
        let mut sg = [dst.sge(0, LEN as u32)];
        let mut rd = send_wr(10, IBV_WR_RDMA_READ, &mut sg, IBV_SEND_SIGNALED);
        rd.wr.rdma.remote_addr = src.addr();
        rd.wr.rdma.rkey = src.rkey();
        assert_eq!(post_send(p.a, &mut rd), 0);
        send(p.a, &msg, 0, 8, 11);
        // B receives the SEND (its READ response already out), answers
        // with a SEND of its own, which carries the ACK.
        let mut want = vec![(50, IBV_WC_RECV)];
        if round > 0 {
            want.push((70, IBV_WC_SEND));
        }
        collect(p.cq_b, &want);
        send(p.b, &msg, 0, 8, 70);
        // A: READ, then SEND, in posting order, then the RECV.
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let wc = wait_wc(p.cq_a);
            assert_eq!(wc.status, IBV_WC_SUCCESS, "completion {:#x}", wc.wr_id);
            seen.push((wc.wr_id, wc.opcode));
        }
        let sends: Vec<_> = seen.iter().filter(|w| w.0 != 60).copied().collect();
        assert_eq!(
            sends,
            [(10, IBV_WC_RDMA_READ), (11, IBV_WC_SEND)],
            "round {round}"
        );
        assert!(seen.contains(&(60, IBV_WC_RECV)));
        assert_eq!(dst.snapshot(), data, "READ data, round {round}");
    }
}

/// The target receives by polling, then never polls again: the ACK it
/// held for a request to carry is sent anyway, by the progress thread.
#[test]
fn a_target_that_stops_polling_still_acknowledges() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    let p = Pair::new();
    let src = p.buf(64);
    let dst = p.buf(64);
    warm_up(p.a, p.cq_a, p.b, p.cq_b, &src, &dst, 5);
    let mut r = [dst.sge(0, 64)];
    assert_eq!(post_recv(p.b, 200, &mut r), 0);
    send(p.a, &src, 0, 16, 9);
    collect(p.cq_b, &[(200, IBV_WC_RECV)]);
    // B is not polled from here on.
    collect(p.cq_a, &[(9, IBV_WC_SEND)]);
}

/// A ping-pong of SENDs longer than the retry budget (one ACK timeout, no
/// retries), both sides polling: the ACKs ride, and the riding ones count
/// as the peer's sign of life (`requester::acked_by_peer`), so no SEND
/// fails for want of bytes on the requester's own connection.
#[test]
fn riding_acks_keep_the_retry_timer_content() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    let o = ConnOpts {
        timeout: 13,
        retry_cnt: 0,
        ..ConnOpts::default()
    };
    let p = Pair::with(o, o, |_| {});
    let (mut src_a, mut src_b) = (p.buf(32), p.buf(32));
    let (dst_a, dst_b) = (p.buf(32), p.buf(32));
    // 33.5 ms a timeout: three of them with something in flight almost
    // all along.
    let end = std::time::Instant::now() + std::time::Duration::from_millis(120);
    let mut i = 0u64;
    while std::time::Instant::now() < end || i < 50 {
        assert_eq!(post_recv(p.b, 20_000 + i, &mut [dst_b.sge(0, 32)]), 0);
        assert_eq!(post_recv(p.a, 30_000 + i, &mut [dst_a.sge(0, 32)]), 0);
        let (ping, pong) = (payload(i as usize, 32), payload(i as usize + 7, 32));
        src_a.bytes_mut().copy_from_slice(&ping);
        src_b.bytes_mut().copy_from_slice(&pong);
        send(p.a, &src_a, 0, 32, i);
        let mut want = vec![(20_000 + i, IBV_WC_RECV)];
        if i > 0 {
            want.push((10_000 + i - 1, IBV_WC_SEND));
        }
        collect(p.cq_b, &want);
        assert_eq!(dst_b.snapshot(), ping, "ping {i}");
        send(p.b, &src_b, 0, 32, 10_000 + i);
        collect(p.cq_a, &[(i, IBV_WC_SEND), (30_000 + i, IBV_WC_RECV)]);
        assert_eq!(dst_a.snapshot(), pong, "pong {i}");
        i += 1;
    }
    collect(p.cq_b, &[(10_000 + i - 1, IBV_WC_SEND)]);
}

/// The target read its connection by polling, then stops polling: the
/// progress thread serves the connection, so a WRITE to it, which needs
/// no receive, completes (a poller that took the connection from the
/// progress thread's watch would have to hand it back).
#[test]
fn a_target_that_stops_polling_serves_writes() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    let p = Pair::new();
    let mut src = p.buf(64);
    let dst = p.buf(64);
    warm_up(p.a, p.cq_a, p.b, p.cq_b, &src, &dst, 20);
    // B is not polled from here on.
    for round in 1..=3u8 {
        src.bytes_mut().fill(round);
        let mut sg = [src.sge(0, 64)];
        let mut w = send_wr(
            500 + round as u64,
            IBV_WR_RDMA_WRITE,
            &mut sg,
            IBV_SEND_SIGNALED,
        );
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: dst.addr(),
            rkey: dst.rkey(),
        };
        assert_eq!(post_send(p.a, &mut w), 0);
        collect(p.cq_a, &[(500 + round as u64, IBV_WC_RDMA_WRITE)]);
        assert!(dst.snapshot().iter().all(|&b| b == round), "round {round}");
    }
}

/// The target receives by polling (holding its ACKs), then waits for
/// completion events: the ACK goes at once (arming kicks the progress
/// thread), and the next message raises its event.
#[test]
fn a_polled_target_that_arms_gets_its_event() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let ch = c.channel();
    let cq_a = c.cq(64, null_mut());
    let cq_b = c.cq(64, ch);
    let a = c.create_qp(&mut c.qp_attr(pd, cq_a, cq_a));
    let b = c.create_qp(&mut c.qp_attr(pd, cq_b, cq_b));
    let o = ConnOpts::default();
    connect(a, &o, b, &o);
    let access = IBV_ACCESS_LOCAL_WRITE;
    let mut src = Buf::new(pd, 64, access);
    let dst = Buf::new(pd, 64, access);
    warm_up(a, cq_a, b, cq_b, &src, &dst, 20);
    // SAFETY: cq_b is live.
    assert_eq!(unsafe { (*c.ctx).ops.req_notify_cq.unwrap()(cq_b, 0) }, 0);
    let waiter = cq_event_waiter(ch);
    let mut r = [dst.sge(0, 64)];
    assert_eq!(post_recv(b, 300, &mut r), 0);
    let data = payload(3, 16);
    src.bytes_mut()[..16].copy_from_slice(&data);
    send(a, &src, 0, 16, 30);
    let (rc, ev_cq) = waiter.join().unwrap();
    assert_eq!((rc, ev_cq), (0, cq_b as usize));
    // SAFETY: one event was returned for cq_b.
    unsafe { OPS.ack_cq_events.unwrap()(cq_b, 1) };
    let wc = wait_wc(cq_b);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id, wc.byte_len),
        (IBV_WC_SUCCESS, IBV_WC_RECV, 300, 16)
    );
    assert_eq!(&dst.snapshot()[..16], &data[..]);
    collect(cq_a, &[(30, IBV_WC_SEND)]);
}

/// The target (another process) polls, takes the last message and exits
/// at once, destroying nothing: the ACK it held is sent on the way out,
/// so the SEND, which was delivered, does not fail.
#[test]
fn an_exiting_target_still_acknowledges() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    tcp();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        .env("RSW_TRANSPORT", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let mut peer = None;
    let mut l = String::new();
    while peer.is_none() {
        l.clear();
        assert!(
            from_child.read_line(&mut l).unwrap() > 0,
            "child exited early"
        );
        peer = l
            .find("CHILD ")
            .map(|i| l[i + 6..].trim().parse::<u32>().unwrap());
    }
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(64, null_mut());
    let q = c.qp(pd, cq, cq);
    let src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    writeln!(to_child, "{}", qpn(q)).unwrap();
    let o = ConnOpts::default();
    to_init(q, o.access);
    to_rtr(q, peer.unwrap(), &o);
    to_rts(q, &o);
    // A ping-pong, so the child holds its ACKs for its replies; then the
    // last message, which the child answers by exiting.
    for i in 0..20u64 {
        let mut r = [dst.sge(0, 64)];
        assert_eq!(post_recv(q, 100 + i, &mut r), 0);
        send(q, &src, 0, 8, i);
        collect(cq, &[(i, IBV_WC_SEND), (100 + i, IBV_WC_RECV)]);
    }
    send(q, &src, 0, 8, 99);
    let wc = wait_wc(cq);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (IBV_WC_SUCCESS, IBV_WC_SEND, 99),
        "the last SEND was delivered"
    );
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not exit");
        }
        std::thread::yield_now();
    };
    assert!(status.success(), "the child exits cleanly: {status}");
}

/// The target of `an_exiting_target_still_acknowledges`.
#[test]
fn child_role() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let c = Ctx::open();
    let pd = c.alloc_pd();
    let cq = c.cq(64, null_mut());
    let q = c.qp(pd, cq, cq);
    let src = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    let dst = Buf::new(pd, 64, IBV_ACCESS_LOCAL_WRITE);
    println!("CHILD {}", qpn(q));
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let peer: u32 = line.trim().parse().unwrap();
    let o = ConnOpts::default();
    to_init(q, o.access);
    let mut r = [dst.sge(0, 64)];
    assert_eq!(post_recv(q, 100, &mut r), 0);
    to_rtr(q, peer, &o);
    to_rts(q, &o);
    for i in 0..=20u64 {
        let mut want = vec![(100 + i, IBV_WC_RECV)];
        if i > 0 {
            want.push((i - 1, IBV_WC_SEND));
        }
        collect(cq, &want);
        if i < 20 {
            let mut r = [dst.sge(0, 64)];
            assert_eq!(post_recv(q, 101 + i, &mut r), 0);
            send(q, &src, 0, 8, i);
        }
    }
    std::process::exit(0);
}
