//! Completion events as rdma-core and hardware deliver them: every event a
//! CQ raised is handed out by `ibv_get_cq_event`, whatever the CQ holds
//! when the program reads it (a program that polled the completion first,
//! having seen the channel's descriptor readable, must not block), and an
//! armed CQ raises exactly one event per arm: no second one for a
//! completion an event already announced.
//!
//! Every wait is bounded: a blocking `get_cq_event` runs on a helper
//! thread whose answer is awaited for at most `WAIT`.

mod common;

use std::os::raw::c_void;
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use rsw::verbs_rs_provider_v1 as OPS;
use verbs_abi::*;

/// A context with one completion channel, and pairs of RC QPs whose CQs
/// report to it.
struct Env {
    c: Ctx,
    pd: *mut ibv_pd,
    ch: *mut ibv_comp_channel,
}

/// Requester `a` (CQ `cq_a`) connected to responder `b` (CQ `cq_b`); both
/// CQs on the environment's channel.
struct Duo {
    cq_a: *mut ibv_cq,
    cq_b: *mut ibv_cq,
    a: *mut ibv_qp,
    b: *mut ibv_qp,
}

impl Env {
    fn new() -> Env {
        let c = Ctx::open();
        let pd = c.alloc_pd();
        let ch = c.channel();
        Env { c, pd, ch }
    }

    fn duo(&self) -> Duo {
        let cq_a = self.c.cq(16, self.ch);
        let cq_b = self.c.cq(16, self.ch);
        let a = self.c.qp(self.pd, cq_a, cq_a);
        let b = self.c.qp(self.pd, cq_b, cq_b);
        let o = ConnOpts::default();
        connect(a, &o, b, &o);
        Duo { cq_a, cq_b, a, b }
    }

    /// A duo whose requester CQ is an extended CQ (`ibv_cq_ex`), and that
    /// CQ.
    fn duo_ex(&self) -> (*mut ibv_cq_ex, Duo) {
        let cqx = self.c.cq_ex(16, self.ch, IBV_WC_STANDARD_FLAGS as u64);
        let cq_a = cqx as *mut ibv_cq;
        let cq_b = self.c.cq(16, self.ch);
        let a = self.c.qp(self.pd, cq_a, cq_a);
        let b = self.c.qp(self.pd, cq_b, cq_b);
        let o = ConnOpts::default();
        connect(a, &o, b, &o);
        (cqx, Duo { cq_a, cq_b, a, b })
    }

    fn buf(&self, len: usize) -> Buf {
        Buf::new(
            self.pd,
            len,
            IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC,
        )
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is live.
        unsafe { (*self.ch).fd }
    }

    /// Whether the channel's descriptor turns readable within `d`.
    fn readable_within(&self, d: Duration) -> bool {
        let mut pf = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pf, 1, d.as_millis() as i32) };
        assert!(n >= 0, "poll: errno {}", errno());
        n == 1
    }

    /// A blocking `ibv_get_cq_event`, which must return within `WAIT`:
    /// the CQ it names.
    fn get_event(&self) -> *mut ibv_cq {
        let chp = self.ch as usize;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut cq: *mut ibv_cq = null_mut();
            let mut ctx: *mut c_void = null_mut();
            // SAFETY: the channel outlives the test, which waits for this
            // answer (or fails, leaving the thread blocked in read).
            let r = unsafe {
                OPS.get_cq_event.unwrap()(chp as *mut ibv_comp_channel, &mut cq, &mut ctx)
            };
            let _ = tx.send((r, cq as usize, ctx as usize));
        });
        let (r, cq, ctx) = rx
            .recv_timeout(WAIT)
            .expect("ibv_get_cq_event blocked although the channel had an event");
        assert_eq!(r, 0, "get_cq_event: errno {}", errno());
        assert_eq!(ctx, 0x1234, "the CQ's cq_context");
        cq as *mut ibv_cq
    }

    /// No event is waiting: the descriptor stays quiet for a while (an
    /// absence check only) and a non-blocking read finds nothing.
    fn assert_no_event(&self) {
        assert!(
            !self.readable_within(Duration::from_millis(150)),
            "a spurious completion event"
        );
        let fd = self.fd();
        // SAFETY: F_GETFL/F_SETFL on the channel's descriptor.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) };
        let mut cq: *mut ibv_cq = null_mut();
        let mut ctx: *mut c_void = null_mut();
        // SAFETY: the channel is live; out-pointers valid.
        let r = unsafe { OPS.get_cq_event.unwrap()(self.ch, &mut cq, &mut ctx) };
        let e = errno();
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, fl) };
        assert_eq!((r, e), (-1, libc::EAGAIN), "an event nobody raised");
    }

    fn destroy(&self, d: Duo) {
        destroy_qp(d.a);
        destroy_qp(d.b);
        assert_eq!(destroy_cq(d.cq_a), 0);
        assert_eq!(destroy_cq(d.cq_b), 0);
    }
}

fn arm(cq: *mut ibv_cq, solicited_only: bool) {
    // SAFETY: cq is live.
    let r = unsafe { (*(*cq).context).ops.req_notify_cq.unwrap()(cq, solicited_only as i32) };
    assert_eq!(r, 0);
}

fn ack(cq: *mut ibv_cq, n: u32) {
    // SAFETY: cq is live; n events of it were delivered.
    unsafe { OPS.ack_cq_events.unwrap()(cq, n) };
}

/// Posts a signaled RDMA WRITE of 64 bytes from `src` into `dst`.
fn write(d: &Duo, src: &Buf, dst: &Buf, wr_id: u64) {
    let mut sg = [src.sge(0, 64)];
    let mut w = send_wr(wr_id, IBV_WR_RDMA_WRITE, &mut sg, IBV_SEND_SIGNALED);
    w.wr.rdma.remote_addr = dst.addr();
    w.wr.rdma.rkey = dst.rkey();
    assert_eq!(post_send(d.a, &mut w), 0);
}

/// Posts a receive on `b` and a SEND of 32 bytes from `a` (`flags` added).
fn send(d: &Duo, src: &Buf, dst: &Buf, wr_id: u64, flags: u32) {
    assert_eq!(post_recv(d.b, wr_id + 1000, &mut [dst.sge(0, 256)]), 0);
    let mut sg = [src.sge(0, 32)];
    let mut w = send_wr(wr_id, IBV_WR_SEND, &mut sg, IBV_SEND_SIGNALED | flags);
    assert_eq!(post_send(d.a, &mut w), 0);
}

fn expect(wc: &ibv_wc, wr_id: u64, opcode: ibv_wc_opcode, byte_len: Option<u32>) {
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode),
        (IBV_WC_SUCCESS, wr_id, opcode),
        "completion"
    );
    if let Some(n) = byte_len {
        assert_eq!(wc.byte_len, n);
    }
}

fn filled(e: &Env, len: usize, seed: u8) -> Buf {
    let mut b = e.buf(len);
    for (i, x) in b.bytes_mut().iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u8);
    }
    b
}

/// Any-completion arm, RDMA WRITE: the completion is polled out, the
/// descriptor is readable, and the event is there.
#[test]
fn write_completion_polled_before_the_event() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 7), e.buf(64));
    arm(d.cq_a, false);
    write(&d, &src, &dst, 1);
    expect(&wait_wc(d.cq_a), 1, IBV_WC_RDMA_WRITE, None);
    assert_eq!(dst.bytes(), src.bytes());
    assert!(e.readable_within(WAIT), "no event for the WRITE");
    assert_eq!(e.get_event(), d.cq_a);
    ack(d.cq_a, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// Any-completion arm, fetch-and-add: as for the WRITE.
#[test]
fn atomic_completion_polled_before_the_event() {
    let e = Env::new();
    let d = e.duo();
    let (res, mut target) = (e.buf(8), e.buf(8));
    target.bytes_mut().copy_from_slice(&40u64.to_ne_bytes());
    arm(d.cq_a, false);
    let mut sg = [res.sge(0, 8)];
    let mut w = atomic_wr(
        2,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        &mut sg,
        target.addr(),
        target.rkey(),
        2,
        0,
    );
    assert_eq!(post_send(d.a, &mut w), 0);
    expect(&wait_wc(d.cq_a), 2, IBV_WC_FETCH_ADD, Some(8));
    assert_eq!(res.bytes(), 40u64.to_ne_bytes());
    assert_eq!(target.bytes(), 42u64.to_ne_bytes());
    assert!(e.readable_within(WAIT), "no event for the atomic");
    assert_eq!(e.get_event(), d.cq_a);
    ack(d.cq_a, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// Any-completion arm on the receiver, SEND: the receive is polled out
/// before the event is read.
#[test]
fn send_completion_polled_before_the_event() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 32, 3), e.buf(256));
    arm(d.cq_b, false);
    send(&d, &src, &dst, 3, 0);
    expect(&wait_wc(d.cq_a), 3, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1003, IBV_WC_RECV, Some(32));
    assert_eq!(&dst.bytes()[..32], src.bytes());
    assert!(e.readable_within(WAIT), "no event for the SEND");
    assert_eq!(e.get_event(), d.cq_b);
    ack(d.cq_b, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// Solicited-only arm: a solicited SEND raises the event, which survives
/// the receive being polled first; a successful WRITE's completion
/// (nothing solicited about it) raises none.
#[test]
fn solicited_arm_event_survives_polling() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 9), e.buf(256));
    arm(d.cq_a, true);
    write(&d, &src, &dst, 4);
    expect(&wait_wc(d.cq_a), 4, IBV_WC_RDMA_WRITE, None);
    e.assert_no_event();

    arm(d.cq_b, true);
    send(&d, &src, &dst, 5, IBV_SEND_SOLICITED);
    expect(&wait_wc(d.cq_a), 5, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1005, IBV_WC_RECV, Some(32));
    assert_eq!(&dst.bytes()[..32], &src.bytes()[..32]);
    assert!(e.readable_within(WAIT));
    assert_eq!(e.get_event(), d.cq_b);
    ack(d.cq_b, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// Solicited-only, then any: the upgraded arm fires for an unsolicited
/// SEND, and the event is delivered after the receive was polled.
#[test]
fn arm_upgraded_from_solicited_to_any() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 32, 11), e.buf(256));
    arm(d.cq_b, true);
    arm(d.cq_b, false);
    send(&d, &src, &dst, 6, 0);
    expect(&wait_wc(d.cq_a), 6, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1006, IBV_WC_RECV, Some(32));
    assert!(e.readable_within(WAIT));
    assert_eq!(e.get_event(), d.cq_b);
    ack(d.cq_b, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// Two CQs on one channel, both armed, both polled empty: two events,
/// one for each, then none.
#[test]
fn two_cqs_on_one_channel() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 32, 13), e.buf(256));
    arm(d.cq_a, false);
    arm(d.cq_b, false);
    send(&d, &src, &dst, 7, 0);
    expect(&wait_wc(d.cq_a), 7, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1007, IBV_WC_RECV, Some(32));
    let mut got = [e.get_event() as usize, e.get_event() as usize];
    got.sort_unstable();
    let mut want = [d.cq_a as usize, d.cq_b as usize];
    want.sort_unstable();
    assert_eq!(got, want, "one event for each CQ");
    ack(d.cq_a, 1);
    ack(d.cq_b, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// A CQ destroyed with an event read and not acknowledged: the destroy
/// waits for the acknowledgement. One destroyed with an event never read:
/// the destroy does not wait, and the channel goes on delivering the
/// events of other CQs.
#[test]
fn destroy_with_unacknowledged_and_unread_events() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 17), e.buf(256));
    arm(d.cq_b, false);
    send(&d, &src, &dst, 8, 0);
    expect(&wait_wc(d.cq_a), 8, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1008, IBV_WC_RECV, Some(32));
    assert_eq!(e.get_event(), d.cq_b);
    destroy_qp(d.a);
    destroy_qp(d.b);
    assert_eq!(destroy_cq(d.cq_a), 0);
    let cqp = d.cq_b as usize;
    let destroyer = std::thread::spawn(move || destroy_cq(cqp as *mut ibv_cq));
    // Absence only: the destroy must still be waiting for the ack.
    std::thread::sleep(Duration::from_millis(150));
    assert!(!destroyer.is_finished(), "destroy did not wait for the ack");
    ack(d.cq_b, 1);
    assert_eq!(destroyer.join().unwrap(), 0);

    // An event nobody read: its CQ goes at once.
    let d = e.duo();
    arm(d.cq_b, false);
    send(&d, &src, &dst, 9, 0);
    expect(&wait_wc(d.cq_a), 9, IBV_WC_SEND, None);
    expect(&wait_wc(d.cq_b), 1009, IBV_WC_RECV, Some(32));
    assert!(e.readable_within(WAIT));
    e.destroy(d);
    // The next CQ's event is delivered, not the dead one's.
    let d = e.duo();
    arm(d.cq_a, false);
    write(&d, &src, &dst, 10);
    expect(&wait_wc(d.cq_a), 10, IBV_WC_RDMA_WRITE, None);
    assert_eq!(e.get_event(), d.cq_a);
    ack(d.cq_a, 1);
    e.assert_no_event();
    e.destroy(d);
}

/// The usual loop (wait, acknowledge, re-arm, then poll): re-arming while
/// the completion the event announced is still in the CQ raises no second
/// event, round after round.
#[test]
fn no_spurious_event_on_rearm() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 19), e.buf(64));
    arm(d.cq_a, false);
    for round in 0..5u64 {
        write(&d, &src, &dst, 20 + round);
        assert_eq!(e.get_event(), d.cq_a);
        ack(d.cq_a, 1);
        arm(d.cq_a, false);
        expect(&wait_wc(d.cq_a), 20 + round, IBV_WC_RDMA_WRITE, None);
        e.assert_no_event();
    }
    e.destroy(d);
}

/// Completions that arrive together, taken one per event (wait, re-arm,
/// poll one): each arm with completions no event announced fires at once,
/// so the loop never strands one, and no event is left over at the end.
#[test]
fn one_completion_per_event_never_strands() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 23), e.buf(64));
    // Three WRITEs complete before anyone waits.
    for i in 0..3u64 {
        write(&d, &src, &dst, 30 + i);
    }
    assert!(wait_until(|| backlog(d.cq_a) == 3));
    arm(d.cq_a, false);
    for i in 0..3u64 {
        assert_eq!(e.get_event(), d.cq_a);
        ack(d.cq_a, 1);
        arm(d.cq_a, false);
        let mut wc = [ibv_wc::zeroed()];
        assert_eq!(poll(d.cq_a, &mut wc), 1);
        expect(&wc[0], 30 + i, IBV_WC_RDMA_WRITE, None);
    }
    e.assert_no_event();
    e.destroy(d);
}

/// How many completions a CQ holds, without taking any.
fn backlog(cq: *mut ibv_cq) -> usize {
    // SAFETY: cq is a live CQ of the provider.
    unsafe { rsw::testing::cq_backlog(cq) }
}

/// Re-armed right after an event was taken, and then polled empty (the
/// loop of `ibv_rc_pingpong -e -t`, two completions an event): no event
/// is left for completions the program took itself, so its next wait
/// lasts until the next completion; through `ibv_poll_cq` and through the
/// extended poll alike.
#[test]
fn rearm_then_take_all_leaves_no_event() {
    let e = Env::new();
    let d = e.duo();
    let (src, dst) = (filled(&e, 64, 29), e.buf(64));
    arm(d.cq_a, false);
    write(&d, &src, &dst, 40);
    write(&d, &src, &dst, 41);
    assert!(wait_until(|| backlog(d.cq_a) == 2));
    assert_eq!(e.get_event(), d.cq_a);
    ack(d.cq_a, 1);
    arm(d.cq_a, false);
    let mut wc = [ibv_wc::zeroed(); 4];
    assert_eq!(poll(d.cq_a, &mut wc), 2);
    expect(&wc[0], 40, IBV_WC_RDMA_WRITE, None);
    expect(&wc[1], 41, IBV_WC_RDMA_WRITE, None);
    e.assert_no_event();
    // Still armed: the next completion raises the event.
    write(&d, &src, &dst, 42);
    assert_eq!(e.get_event(), d.cq_a);
    ack(d.cq_a, 1);
    expect(&wait_wc(d.cq_a), 42, IBV_WC_RDMA_WRITE, None);
    e.destroy(d);

    // The extended poll: start, next, end.
    let (cqx, d) = e.duo_ex();
    let cq = d.cq_a;
    arm(cq, false);
    write(&d, &src, &dst, 43);
    write(&d, &src, &dst, 44);
    assert!(wait_until(|| backlog(cq) == 2));
    assert_eq!(e.get_event(), cq);
    ack(cq, 1);
    arm(cq, false);
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    // SAFETY: cqx is live; start/next/end as the API orders them.
    unsafe {
        assert_eq!((*cqx).start_poll.unwrap()(cqx, &mut attr), 0);
        assert_eq!(((*cqx).wr_id, (*cqx).status), (43, IBV_WC_SUCCESS));
        assert_eq!((*cqx).next_poll.unwrap()(cqx), 0);
        assert_eq!(((*cqx).wr_id, (*cqx).status), (44, IBV_WC_SUCCESS));
        (*cqx).end_poll.unwrap()(cqx);
    }
    e.assert_no_event();
    e.destroy(d);
}

/// Re-armed right after an event, then one completion taken an event
/// through the extended poll (start, end): each arm still raises an event
/// for the completions left, and none is left over.
#[test]
fn one_completion_per_event_through_the_extended_poll() {
    let e = Env::new();
    let (cqx, d) = e.duo_ex();
    let cq = d.cq_a;
    let (src, dst) = (filled(&e, 64, 31), e.buf(64));
    arm(cq, false);
    for i in 0..3u64 {
        write(&d, &src, &dst, 50 + i);
    }
    assert!(wait_until(|| backlog(cq) == 3));
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    for i in 0..3u64 {
        assert_eq!(e.get_event(), cq);
        ack(cq, 1);
        arm(cq, false);
        // SAFETY: cqx is live; start/end as the API orders them.
        unsafe {
            assert_eq!((*cqx).start_poll.unwrap()(cqx, &mut attr), 0);
            assert_eq!(((*cqx).wr_id, (*cqx).status), (50 + i, IBV_WC_SUCCESS));
            (*cqx).end_poll.unwrap()(cqx);
        }
    }
    e.assert_no_event();
    e.destroy(d);
}
