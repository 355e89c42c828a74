//! The requester half of an RC QP: our outgoing connection.
//!
//! It carries our requests to the peer's responder, or has `samehost` do
//! them into a same-host peer; `completer` reads the responses, which
//! complete our send queue in order. Transmission starts on the caller's thread inside
//! `ibv_post_send` (non-blocking); whatever does not fit is finished by the
//! progress thread when the socket becomes writable.

use std::io::ErrorKind;

use verbs_abi::*;

pub(crate) mod info;

use super::completer::receive;
use super::samehost::{direct, rnr_wait, Direct, ATOMIC_BATCH};
use super::{Qp, QpInner};
use crate::faults::Action;
use crate::mr;
use crate::progress::{engine, token, Kind};
use crate::stats::Counters;
use crate::transport::{local, Conn, ConnectError, Connecting, MAX_IOV};
use crate::util::{iov, mono_ns};
use crate::wire::{
    Fault, Header, Hello, Op, Syndrome, DOORBELL_DIRECT, FEATURES, FEATURE_FRAMED, FLAG_ACK,
    FLAG_IMM, FLAG_SOLICITED, FLAG_WAITS, HDR_LEN, REQ_ACK_LATER,
};
use crate::wq::conn::OutConn;
use info::{broken_by, Broken};
use parking_lot::RwLockReadGuard;

/// Marks the hello as what is being transmitted (it belongs to no WQE).
const TX_HELLO: u64 = u64::MAX;
/// Marks a doorbell (`Op::Doorbell`) as what is being transmitted.
const TX_DOORBELL: u64 = u64::MAX - 1;
/// Least time between two attempts to connect again (see [`pump`]).
const RECONNECT_PAUSE_NS: u64 = 10_000_000;

/// Opens the outgoing connection (entering RTR). The hello is queued as the
/// first bytes to send. Fails with an errno only when this host cannot make
/// the connection (out of descriptors, say); a peer that cannot be reached
/// is found out later, as on hardware, by the retry timer.
pub fn start(qp: &Qp, g: &mut QpInner) -> Result<(), i32> {
    g.req.out = None;
    g.req.peer_gone = false;
    g.comp.restart();
    if g.req.faults.is_none() {
        g.req.faults = crate::faults::QpFaults::for_qp(qp.qpn);
    }
    let Some(remote) = g.remote else {
        return Ok(());
    };
    let (mut conn, connected) = match Conn::connect(&remote, &g.local_gid) {
        Ok(Connecting::Ready(c)) => (c, true),
        Ok(Connecting::Pending(c)) => (c, false),
        Err(ConnectError::Local(e)) => return Err(e.raw_os_error().unwrap_or(libc::ENOMEM)),
        Err(ConnectError::Remote(e)) => {
            log::debug!("qp {:#x}: connect: {e}", qp.qpn);
            g.req.peer_gone = true;
            return Ok(());
        }
    };
    // Framed from the first response on, and from our first request on
    // (after the hello, which a peer reads before it knows).
    let framed = crate::transport::tcp::framing_wanted();
    if framed {
        conn.set_framed(HDR_LEN);
    }
    let mut hello = [0u8; HDR_LEN];
    Hello {
        src_gid: g.local_gid,
        src_qpn: qp.qpn,
        dst_qpn: remote.qpn,
        psn: g.attr.sq_psn,
        features: if framed {
            FEATURES | FEATURE_FRAMED
        } else {
            FEATURES
        },
    }
    .encode(&mut hello);
    let events = if connected {
        libc::EPOLLIN as u32
    } else {
        (libc::EPOLLIN | libc::EPOLLOUT) as u32
    };
    let eng = engine().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    eng.add(conn.fd(), token(qp.serial, Kind::Outgoing), events)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    g.req.out = Some(OutConn {
        conn,
        connected,
        events,
        tx_active: true,
        tx_seq: TX_HELLO,
        tx_hdr: hello,
        tx_total: HDR_LEN,
        tx_off: 0,
        tx_was_full: false,
        tx_short: false,
        next_msn: 0,
        rx_hdr: [0; HDR_LEN],
        rx_got: 0,
        rx_read: None,
        direct: None,
        announce: false,
        rnr_since: 0,
        rnr_tick: 0,
        rnr_polls: 0,
        rtr_rung: false,
    });
    apply_timeouts(g);
    pump(qp, g);
    Ok(())
}

/// Gives both connections the retry budget as TCP's own bound (unacked
/// data, keepalive probes), so a peer host that vanishes while nothing is
/// outstanding is noticed too (see `Qp::on_event`). Called when the
/// connections or the attributes change (RTR, RTS, the incoming
/// connection's arrival).
pub fn apply_timeouts(g: &QpInner) {
    let Some(budget) = retry_budget_ns(g) else {
        return;
    };
    // Never below 6 s: the retry timer is the precise bound for
    // outstanding work; this one is the backstop for idle connections, and
    // must not cut a live peer whose kernel is merely slow to answer a
    // keepalive probe (thousands of connections on a loaded machine are).
    let ms = (budget / 1_000_000).clamp(6000, u32::MAX as u64) as u32;
    if let Some(o) = g.req.out.as_ref() {
        o.conn.set_user_timeout(ms);
    }
    if let Some(c) = g.incoming_conn() {
        c.set_user_timeout(ms);
    }
}

/// Whether a connection of the QP died because the peer's host stopped
/// answering.
pub fn outgoing_timed_out(g: &QpInner) -> bool {
    // Reading a socket's error clears it: a connection still being made
    // reports its own outcome in `on_event`, which must see it.
    g.req
        .out
        .as_ref()
        .is_some_and(|o| o.connected && o.conn.timed_out())
}

// ---- the retry timer ----------------------------------------------------------
//
// InfiniBand's requester retransmits when no acknowledgement comes within the
// local ACK timeout (4.096 us x 2^timeout) and gives up with
// IBV_WC_RETRY_EXC_ERR after retry_cnt retries. TCP does the retransmitting
// here, so what remains of the contract is the bound: while work is
// outstanding, a timer ticks once per ACK timeout, and retry_cnt + 1
// consecutive ticks without any sign of the peer (bytes received from it,
// an ACK riding on its request, room made in a full send buffer, a
// completed connect, or an RNR wait notice) fail the QP. Nothing
// on the post path arms a timer or reads a clock while a QP is busy: the
// tick re-arms itself until the QP has been idle for a whole period.
// A period counts only if it was silent for all of its length with work
// outstanding: not one into which the work was posted, not one shortened
// because the tick waited for the QP, and not before the tick has read
// what the peer sent while this process was not running (`Qp::on_timer`).
// On a loaded machine all of a process's threads stop for tens of
// milliseconds at times, as long as a period of the shortest timeout.

/// Shortest ACK timeout honoured. Below it a busy machine's scheduling
/// delays alone would exhaust the retries of a live peer (timeout 13).
const MIN_ACK_TIMEOUT_NS: u64 = 4096 << 13;

/// One ACK timeout (a "try"), or None for timeout 0 (wait forever).
fn ack_timeout_ns(g: &QpInner) -> Option<u64> {
    match g.attr.timeout {
        0 => None,
        t => Some((4096u64 << t.min(31)).max(MIN_ACK_TIMEOUT_NS)),
    }
}

/// How long a silent peer is given before its requests fail.
fn retry_budget_ns(g: &QpInner) -> Option<u64> {
    ack_timeout_ns(g).map(|t| t * (g.attr.retry_cnt.min(7) as u64 + 1))
}

/// How many retry budgets a QP is given while other QPs of ours hear from
/// the same peer address. Over TCP a peer serves its connections in
/// turns, reading each until it is empty: with many QPs streaming, deep
/// send queues and a message rate far below a NIC's, one QP's turn comes
/// later than a hardware timeout allows (16 QPs of `ib_send_bw` 2 B
/// between two namespaces on a loaded machine, 256 on loopback, failed
/// with RETRY_EXC_ERR). A peer host that stopped serving us altogether
/// is still found within one budget; a dead process beside live ones on
/// that host within this many.
const SERVING_GRACE: u8 = 4;

/// When some QP of ours last heard from each peer address (its tick saw
/// progress): a few entries, touched once per retry period per QP.
static HEARD: parking_lot::Mutex<Vec<([u8; 16], u64)>> = parking_lot::Mutex::new(Vec::new());

/// The most peer addresses remembered; the oldest makes room.
const HEARD_MAX: usize = 64;

fn heard_from(gid: [u8; 16], now: u64) {
    let mut h = HEARD.lock();
    if let Some(e) = h.iter_mut().find(|e| e.0 == gid) {
        e.1 = e.1.max(now);
        return;
    }
    if h.len() == HEARD_MAX {
        if let Some(i) = (0..h.len()).min_by_key(|&i| h[i].1) {
            h.swap_remove(i);
        }
    }
    h.push((gid, now));
}

fn heard_lately(gid: [u8; 16], now: u64, within: u64) -> bool {
    HEARD
        .lock()
        .iter()
        .any(|e| e.0 == gid && e.1 + within >= now)
}

/// Starts the tick if work is outstanding and it is not running.
fn arm_retry_timer(qp: &Qp, g: &mut QpInner) {
    if g.req.tick_at != 0 || !g.outstanding() {
        return;
    }
    let Some(t) = ack_timeout_ns(g) else { return };
    let Ok(e) = engine() else { return };
    g.req.tick_at = mono_ns() + t;
    g.req.idle = 0;
    g.req.progress = false;
    g.req.busy_from_start = true;
    e.add_timer(g.req.tick_at, qp.serial);
}

/// Whether the retry tick due at `now` would count a period without any
/// sign of the peer (see [`on_timer`]).
pub fn tick_finds_silence(g: &QpInner, now: u64) -> bool {
    g.req.tick_at != 0
        && g.req.tick_at <= now
        && !g.req.progress
        && g.outstanding()
        && g.req
            .out
            .as_ref()
            .is_some_and(|o| o.connected && o.rnr_since == 0)
}

/// The retry timer's tick (see above).
pub fn on_timer(qp: &Qp, g: &mut QpInner, now: u64) {
    if g.req.out.as_ref().is_some_and(|o| o.rnr_since != 0)
        || g.req.faults.is_some()
        || g.req.atomics_deferred
        || g.req.burst_held
    {
        pump(qp, g);
    }
    if g.req.tick_at == 0 || g.req.tick_at > now {
        return;
    }
    g.req.tick_at = 0;
    let Some(t) = ack_timeout_ns(g) else { return };
    // A same-host SEND waiting for the peer's receive sees the peer alive
    // in its mailbox, as an RNR NAK would tell it.
    let rnr_direct = g.req.out.as_ref().is_some_and(|o| o.rnr_since != 0);
    let progressed = std::mem::take(&mut g.req.progress) || rnr_direct;
    let peer = g.remote.map(|r| r.gid);
    if progressed {
        if let Some(gid) = peer {
            heard_from(gid, now);
        }
    }
    if !g.outstanding() {
        g.req.idle = 0;
        if !progressed {
            return; // idle for a whole period: the next post re-arms
        }
    } else if progressed || now < g.req.rnr_hold_until || !g.req.busy_from_start {
        // Work posted into a period that began idle has not waited a
        // whole period yet: the next one judges it.
        g.req.idle = 0;
    } else {
        g.req.idle += 1;
        let tries = g.attr.retry_cnt.min(7) + 1;
        let serving = peer.is_some_and(|gid| heard_lately(gid, now, 2 * t));
        if g.req.idle >= tries && (!serving || g.req.idle >= SERVING_GRACE * tries) {
            g.req.idle = 0;
            g.req.out = None;
            g.req.peer_gone = true;
            Counters::bump(&g.stats.local_ack_timeout_err);
            log::error!(
                "qp {:#x}: transport retry count exceeded ({} periods without progress)",
                qp.qpn,
                g.req.idle
            );
            qp.fail_head(g, IBV_WC_RETRY_EXC_ERR);
            return;
        }
    }
    g.req.tick_at = now + t;
    g.req.busy_from_start = g.outstanding();
    if let Ok(e) = engine() {
        e.add_timer(g.req.tick_at, qp.serial);
    }
    // Waiting for a peer that refused us: try it again.
    if g.req.out.is_none() {
        pump(qp, g);
    }
}

pub fn on_event(qp: &Qp, g: &mut QpInner, events: u32) {
    let Some(out) = g.req.out.as_mut() else {
        return;
    };
    if !out.connected {
        if events & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
            return;
        }
        if let Err(e) = out.conn.finish_connect() {
            fail(qp, g, broken_by(&e));
            return;
        }
        out.connected = true;
        // A connection made again to a peer that once refused us proves
        // nothing (its kernel accepts for a QP that may close it at once):
        // only bytes from the peer count then.
        if !g.req.reconnecting {
            g.req.progress = true;
        }
    }
    if let Err(b) = receive(qp, g) {
        fail(qp, g, b);
        return;
    }
    pump(qp, g);
}

/// Runs the transmit side as far as it goes without blocking, and settles
/// WQEs that can no longer reach the peer.
pub fn pump(qp: &Qp, g: &mut QpInner) {
    if g.req.out.is_none() {
        if matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) && g.req.peer_gone && g.sq.has_work() {
            // The connection ended with nothing unanswered on it (the peer
            // was reset and connected again, or was not ready when we
            // reached RTR): connect again, as hardware simply sends to the
            // peer's new incarnation. Paced, and bounded by the retry
            // timer like any silence.
            let now = mono_ns();
            if g.state == IBV_QPS_RTS && !g.sq.in_flight() && now >= g.req.reconnect_at {
                g.req.reconnect_at = now + RECONNECT_PAUSE_NS;
                g.req.reconnecting = true;
                if start(qp, g).is_ok() && g.req.out.is_some() {
                    return;
                }
            }
            lost_with_work(qp, g);
        }
        return;
    }
    if !g.req.posting {
        g.req.burst_held = false;
    }
    // From RTR on the hello goes out; requests only start in RTS.
    if let Err(b) = transmit(qp, g) {
        // A responder that refused a request closes with our later requests
        // unread, which resets the connection under our feet; the NAK that
        // explains why is already in our receive queue, so read it first.
        let b = receive(qp, g).err().unwrap_or(b);
        fail(qp, g, b);
        return;
    }
    // After transmitting: what the same-host path completed at once needs
    // no timer.
    arm_retry_timer(qp, g);
    update_interest(qp, g);
}

fn update_interest(qp: &Qp, g: &mut QpInner) {
    let Some(out) = g.req.out.as_mut() else {
        return;
    };
    let mut want = libc::EPOLLIN as u32;
    if !out.connected || out.tx_active {
        want |= libc::EPOLLOUT as u32;
    }
    if want != out.events {
        out.events = want;
        if let Ok(e) = engine() {
            e.modify(out.conn.fd(), token(qp.serial, Kind::Outgoing), want);
        }
    }
}

/// The connection is unusable. A lost peer fails the WQE at the head (if
/// any) with IBV_WC_RETRY_EXC_ERR, or else the next one posted; a
/// nonsensical response fails the head with IBV_WC_BAD_RESP_ERR and the QP
/// at once.
fn fail(qp: &Qp, g: &mut QpInner, why: Broken) {
    g.req.out = None;
    g.req.peer_gone = true;
    if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) {
        return;
    }
    if why == Broken::Lost {
        log::info!("qp {:#x}: connection to the peer lost", qp.qpn);
    } else {
        log::error!("qp {:#x}: connection to the peer ended: {why:?}", qp.qpn);
    }
    match why {
        Broken::Lost if g.sq.has_work() => lost_with_work(qp, g),
        Broken::Lost => {}
        Broken::Vanished => qp.peer_vanished(g),
        Broken::BadResponse => qp.fail_head(g, IBV_WC_BAD_RESP_ERR),
        Broken::LocalFault => qp.fail_head(g, IBV_WC_LOC_PROT_ERR),
    }
}

/// The peer is unreachable (it closed or refused the connection) while
/// requests wait for it. Hardware cannot tell a dead peer from a slow one:
/// it retransmits until the retry timer runs out, and only then fails the
/// head with IBV_WC_RETRY_EXC_ERR. Programs rely on that delay: a peer that
/// exits once it has what it needs (ibv_srq_pingpong's client, with
/// the server's last extra sends unanswered) does not fail a requester that
/// is about to finish too. So the timer decides here as well; only with
/// `timeout` 0 (wait forever on hardware, a hang here) does it fail at once.
fn lost_with_work(qp: &Qp, g: &mut QpInner) {
    if !g.reliable() {
        // UC: what cannot reach the peer is lost on the wire, and the
        // sender never knows.
        while let Some(seq) = g.sq.oldest() {
            let w = *g.sq.wqe(seq);
            g.sq.retire_oldest();
            qp.complete_send(g, &w, IBV_WC_SUCCESS);
        }
        return;
    }
    if ack_timeout_ns(g).is_none() {
        qp.fail_head(g, IBV_WC_RETRY_EXC_ERR);
    } else {
        arm_retry_timer(qp, g);
    }
}

/// Runs a bind or a local invalidate when it reaches the wire's turn (so
/// after every earlier request went out, as hardware orders them).
fn run_local(qp: &Qp, g: &QpInner, seq: u64) -> Result<(), ibv_wc_status> {
    let w = g.sq.wqe(seq);
    match w.op {
        Op::BindMw => {
            let b = w.bind;
            mr::bind_window(
                b.mw_rkey, b.new_rkey, b.mr_key, b.addr, b.len, b.access, qp.pd_id, qp.qpn,
            )
            .map_err(|_| IBV_WC_MW_BIND_ERR)
        }
        // A window bound to another QP is a bind error, as hardware
        // reports it; a key that names no valid window, a local QP
        // operation error (as rxe).
        Op::LocalInv => mr::invalidate_window(w.rkey, qp.pd_id, qp.qpn).map_err(|e| match e {
            mr::InvalidateError::OtherQp => IBV_WC_MW_BIND_ERR,
            mr::InvalidateError::NotValid => IBV_WC_LOC_QP_OP_ERR,
        }),
        _ => Ok(()),
    }
}

/// Checks the local buffers a WQE gathers from before it goes out. A READ's
/// or an atomic's buffers are only written when the response is scattered
/// into them, and checked then: hardware sends the request first, so the
/// responder's verdict (an rkey, a misaligned atomic) comes before a local
/// one, and an atomic runs at the target even when its result cannot be
/// stored.
fn local_ok(t: &mr::MrTable, qp: &Qp, g: &QpInner, seq: u64) -> bool {
    let w = g.sq.wqe(seq);
    if w.inline || w.expects_data() {
        return true;
    }
    g.sq.sges(seq).iter().all(|s| {
        t.local(s.lkey, s.addr, s.length as u64, qp.pd_id, false)
            .is_ok()
    })
}

/// How long atomics held back for a batch wait at most, for a program
/// that neither posts more nor polls (rare: the timer costs a wake-up of
/// the progress thread, so not much shorter).
const ATOMIC_DEFER_NS: u64 = 500_000;

/// Whether to hold back a same-host atomic being posted, to do it with
/// the ones the program is about to post: an atomic costs two syscalls
/// whether done alone or with fifteen others. Only in a burst: the last
/// one was done from a post and the send CQ was not polled since (a
/// program that polls between posts waits for each: it runs at once).
/// Never when something other than an atomic is queued behind, when the
/// send queue is full, or when the program waits for completion events.
/// The held atomics run when the batch fills, when the send CQ is polled
/// (`Qp::drive_now`), or at the latest after [`ATOMIC_DEFER_NS`].
fn defer_atomic(qp: &Qp, g: &mut QpInner, seq: u64) -> bool {
    if !g.req.posting || g.sq.in_flight() {
        return false;
    }
    if g.req.out.as_ref().is_none_or(|o| o.direct.is_none()) {
        return false;
    }
    let end = g.sq.outstanding().end;
    if end - seq >= ATOMIC_BATCH as u64 || g.sq.room() == 0 {
        return false;
    }
    if !(seq..end).all(|s| matches!(g.sq.wqe(s).op, Op::CmpSwap | Op::FetchAdd)) {
        return false;
    }
    let Some(cq) = qp.send_cq.as_ref() else {
        return false;
    };
    if g.req.atomic_polls != Some(cq.polls()) || cq.is_armed() {
        return false;
    }
    if !g.req.atomics_deferred {
        g.req.atomics_deferred = true;
        if let Ok(e) = engine() {
            e.add_timer_once(&mut g.req.atomic_timer_at, ATOMIC_DEFER_NS, qp.serial);
        }
    }
    true
}

/// Requests awaiting answers from which a post may wait for the rest of
/// the program's burst.
const HOLD_AWAITING: u64 = 16;

/// How long a held post waits at most, for a program that neither posts
/// more nor polls (the timer costs a wake-up of the progress thread).
const HOLD_NS: u64 = 200_000;

/// Whether to hold back a request being posted over the connection, to
/// send it in one `sendmsg` with the ones the program posts next. Only
/// when the pipe is full enough that its answers keep coming (a stream's
/// pace is set by them, so a post waiting for the next poll costs no
/// rate; a ping-pong never has this many awaiting): the program's next
/// poll of its CQ, an answer the progress thread reads, a gather's worth
/// queued, or the timer sends them. Never for a program that waits for
/// completion events.
fn hold_for_burst(qp: &Qp, g: &mut QpInner, seq: u64) -> bool {
    if !g.req.posting || g.req.faults.is_some() || g.sq.awaiting() < HOLD_AWAITING {
        return false;
    }
    if g.req
        .out
        .as_ref()
        .is_none_or(|o| o.direct.is_some() || o.tx_active)
    {
        return false;
    }
    if g.sq.outstanding().end - seq > MAX_TX_GATHER as u64 || g.sq.room() == 0 {
        return false;
    }
    if qp.send_cq.as_ref().is_none_or(|c| c.is_armed()) {
        return false;
    }
    if !g.req.burst_held {
        g.req.burst_held = true;
        if let Ok(e) = engine() {
            e.add_timer_once(&mut g.req.burst_timer_at, HOLD_NS, qp.serial);
        }
    }
    true
}

// ---- injected faults ------------------------------------------------------------

/// What an injected fault (`faults`) lets happen to the request about to go out.
enum Gate {
    /// Transmit it, carrying this mark for the responder.
    Go(Fault, u8),
    /// Not yet (delayed, or the port is down): a timer comes back.
    Hold,
    /// It was dealt with here (failed locally, or the connection killed).
    Done,
}

/// How often a request held back by a downed port looks again.
const PORT_RECHECK_NS: u64 = 1_000_000;

/// Decides and applies the fault for send-queue entry `seq`. Each is the
/// real thing: a local error completes the WQE as a failed local check
/// does; a remote status is marked for the peer's responder, which takes
/// its own error path (the NAK, the RNR waits, or silence for the retry
/// timer to run out); a killed connection leaves the retry timer to fail
/// the request, as a cut cable does.
fn inject(qp: &Qp, g: &mut QpInner, seq: u64) -> Gate {
    if qp.ctx.port_held.load(std::sync::atomic::Ordering::Relaxed) {
        // A downed port sends nothing; the retry timer runs meanwhile.
        if let Ok(e) = engine() {
            e.add_timer(mono_ns() + PORT_RECHECK_NS, qp.serial);
        }
        return Gate::Hold;
    }
    let op = g.sq.wqe(seq).op;
    let req = crate::faults::Req {
        takes_recv: matches!(op, Op::Send | Op::SendImm | Op::SendInv | Op::WriteImm),
        uses_rkey: matches!(
            op,
            Op::Write | Op::WriteImm | Op::ReadReq | Op::CmpSwap | Op::FetchAdd | Op::AtomicWrite
        ),
        unreliable: !g.reliable(),
    };
    let Some(f) = g.req.faults.as_mut() else {
        return Gate::Go(Fault::None, 0);
    };
    let fresh = f.decided.is_none_or(|(s, _)| s != seq);
    let action = f.decide(seq, req);
    if fresh && action.is_some() {
        Counters::bump(&g.stats.faults_injected);
        log::info!("qp {:#x}: injecting {action:?}", qp.qpn);
    }
    match action {
        None => Gate::Go(Fault::None, 0),
        Some(Action::Delay(ns)) => {
            let now = mono_ns();
            if f.hold_until == 0 {
                f.hold_until = now + ns;
                if let Ok(e) = engine() {
                    e.add_timer(f.hold_until, qp.serial);
                }
            }
            if now < f.hold_until {
                return Gate::Hold;
            }
            f.hold_until = 0;
            f.decided = Some((seq, None));
            Gate::Go(Fault::None, 0)
        }
        Some(Action::Rnr(n)) => Gate::Go(Fault::Rnr, n),
        Some(Action::Fail(st)) if crate::faults::is_local(st) => {
            g.sq.wqe_mut(seq).local_err = st;
            g.sq.transmitted();
            g.tx_blocked = true;
            qp.after_send_completions(g);
            Gate::Done
        }
        Some(Action::Fail(IBV_WC_RETRY_EXC_ERR)) => Gate::Go(Fault::Drop, 0),
        Some(Action::Fail(IBV_WC_RNR_RETRY_EXC_ERR)) => Gate::Go(Fault::Rnr, 255),
        Some(Action::Fail(st)) => {
            let syn = match st {
                IBV_WC_REM_ACCESS_ERR => Syndrome::RemAccess,
                IBV_WC_REM_INV_REQ_ERR => Syndrome::RemInvReq,
                _ => Syndrome::RemOp,
            };
            Gate::Go(Fault::Nak, syn as u8)
        }
        Some(Action::Kill) => {
            // Gone into a dead link: in flight, never answered.
            g.sq.transmitted();
            g.req.lose_peer();
            g.resp.drop_incoming();
            g.resp.drop_pending();
            log::info!("qp {:#x}: connection killed (injected)", qp.qpn);
            lost_with_work(qp, g);
            Gate::Done
        }
    }
}

fn transmit(qp: &Qp, g: &mut QpInner) -> Result<(), Broken> {
    loop {
        let out = g.req.out()?;
        if !out.connected {
            return Ok(());
        }
        // A request going out on the connection is checked and sent
        // under one look at the key table (each look is two locked
        // instructions on the latency path).
        let mut held = None;
        if !out.tx_active {
            if out.announce {
                out.announce = false;
                let mut h = Header::new(Op::Doorbell, 0);
                h.flags = DOORBELL_DIRECT;
                out.start_tx(&h, TX_DOORBELL, 0);
                continue;
            }
            match next_request(qp, g)? {
                Step::Idle => return Ok(()),
                Step::Again => continue,
                Step::Queued(table) => held = table,
            }
        }
        if !send_some(qp, g, held)? {
            return Ok(());
        }
    }
}

/// What [`next_request`] did.
enum Step {
    /// Nothing more goes out now.
    Idle,
    /// A WQE was settled without the connection: look at the next.
    Again,
    /// A request is queued on the connection, checked under this look at
    /// the key table when it is held.
    Queued(Option<RwLockReadGuard<'static, mr::MrTable>>),
}

/// Takes the next WQE to transmit in RTS: runs a local one, lets an
/// injected fault act, checks its local buffers, tries the same-host
/// path, and otherwise queues its request on the connection.
fn next_request(qp: &Qp, g: &mut QpInner) -> Result<Step, Broken> {
    if g.state != IBV_QPS_RTS || g.tx_blocked {
        return Ok(Step::Idle);
    }
    let Some(seq) = g.sq.next_to_transmit() else {
        return Ok(Step::Idle);
    };
    if hold_for_burst(qp, g, seq) {
        return Ok(Step::Idle);
    }
    // A rendezvous FIN waits for its READ (`engine::rndv`).
    if g.sq.wqe(seq).tm == crate::ring::TM_FIN && g.sq.in_flight() {
        return Ok(Step::Idle);
    }
    if g.sq.wqe(seq).op.is_local() {
        do_local(qp, g, seq);
        return Ok(Step::Again);
    }
    let mut mark = (Fault::None, 0);
    if g.req.faults.is_some() {
        match inject(qp, g, seq) {
            Gate::Go(f, arg) => mark = (f, arg),
            Gate::Hold => return Ok(Step::Idle),
            Gate::Done if g.req.out.is_none() => return Ok(Step::Idle),
            Gate::Done => return Ok(Step::Again),
        }
    }
    // Over the connection (no same-host path): nothing between the check
    // and the send completes work, so the look is held.
    let plain = g.req.out.as_ref().is_some_and(|o| o.direct.is_none());
    let table = mr::table();
    if let Some(st) = local_error(&table, qp, g, seq) {
        drop(table);
        g.sq.wqe_mut(seq).local_err = st;
        g.sq.transmitted();
        g.tx_blocked = true;
        qp.after_send_completions(g);
        return Ok(Step::Idle);
    }
    let (held, d) = if plain {
        (Some(table), Direct::No)
    } else {
        drop(table);
        if defer_atomic(qp, g, seq) {
            return Ok(Step::Idle);
        }
        let d = match direct(qp, g, seq) {
            Direct::Wait => rnr_wait(qp, g),
            d => d,
        };
        (None, d)
    };
    if let Some(out) = g.req.out.as_mut() {
        if !matches!(d, Direct::Wait | Direct::Hold | Direct::Retry) {
            out.rnr_since = 0;
        }
    }
    match d {
        Direct::No => {}
        Direct::Retry => return Ok(Step::Again),
        Direct::Wait | Direct::Hold => return Ok(Step::Idle),
        Direct::Done { ring, rtr, more } => {
            done_directly(qp, g, seq, ring, rtr, more)?;
            return Ok(Step::Again);
        }
        Direct::Failed(status) => {
            g.sq.transmitted();
            qp.fail_head(g, status);
            return Ok(Step::Idle);
        }
    }
    queue_request(g, seq, mark)?;
    Ok(Step::Queued(held))
}

/// Runs a local WQE (bind, invalidate); it completes in order once it is
/// the oldest, and one that failed blocks what follows.
fn do_local(qp: &Qp, g: &mut QpInner, seq: u64) {
    match run_local(qp, g, seq) {
        Ok(()) => g.sq.wqe_mut(seq).local_ok = true,
        Err(st) => {
            g.sq.wqe_mut(seq).local_err = st;
            g.tx_blocked = true;
        }
    }
    g.sq.transmitted();
    qp.after_send_completions(g);
}

/// The local error a WQE meets before anything goes out, if any.
fn local_error(t: &mr::MrTable, qp: &Qp, g: &QpInner, seq: u64) -> Option<ibv_wc_status> {
    if g.sq.wqe(seq).op.is_atomic() && g.sq.wqe(seq).len != 8 {
        // An atomic's SGE holds exactly the 8 bytes it returns; found
        // when the WQE is read, so nothing goes out.
        Some(IBV_WC_LOC_LEN_ERR)
    } else if !local_ok(t, qp, g, seq) {
        Some(IBV_WC_LOC_PROT_ERR)
    } else {
        None
    }
}

/// The same-host path did `seq` (and `more` atomics behind it): they
/// complete now; `ring` queues a doorbell for the peer.
fn done_directly(
    qp: &Qp,
    g: &mut QpInner,
    seq: u64,
    ring: bool,
    rtr: bool,
    more: u32,
) -> Result<(), Broken> {
    if matches!(g.sq.wqe(seq).op, Op::CmpSwap | Op::FetchAdd) {
        g.req.atomics_deferred = false;
        if g.req.posting {
            g.req.atomic_polls = qp.send_cq.as_ref().map(|c| c.polls());
        }
    }
    // A peer in RTR learns from its first request that the connection is
    // established, polling or not: ring it, once.
    let out = g.req.out()?;
    let ring = ring || (rtr && !out.rtr_rung);
    out.rtr_rung |= rtr;
    for s in seq..=seq + more as u64 {
        local::count_direct();
        g.sq.transmitted();
        let w = *g.sq.wqe(s);
        Counters::bump(&g.stats.sent_pkts);
        Counters::add(&g.stats.sent_bytes, w.len as u64);
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
    }
    qp.after_send_completions(g);
    if ring {
        local::count_doorbell();
        g.req
            .out()?
            .start_tx(&Header::new(Op::Doorbell, 0), TX_DOORBELL, 0);
    }
    Ok(())
}

/// Queues `seq`'s request on the connection, with the fault `mark` an
/// injected fault asks the responder to act out.
fn queue_request(g: &mut QpInner, seq: u64, mark: (Fault, u8)) -> Result<(), Broken> {
    let msn = g.req.out()?.next_msn;
    let (mut h, payload) = request_header(g, seq, msn);
    if mark.0 != Fault::None {
        h.fault = mark.0 as u8;
        h.syndrome = mark.1;
    }
    let alone = !g.sq.in_flight();
    // A one-sided request alone in flight: we wait for its answer.
    if alone
        && matches!(
            h.op,
            Op::Write | Op::AtomicWrite | Op::ReadReq | Op::CmpSwap | Op::FetchAdd
        )
    {
        h.flags |= FLAG_WAITS;
    }
    // The ACK our responder owes the peer rides along, if nothing of ours
    // is unanswered (so the peer has read all before this request and
    // reads this header next, whatever it waits for).
    if alone && h.op.carries_ack() {
        let owed = g
            .resp
            .inc_mut()
            .filter(|i| i.peer_takes_acks)
            .and_then(|i| {
                i.note_request_sent();
                i.take_owed_ack()
            });
        if let Some(a) = owed {
            h.flags |= FLAG_ACK;
            h.compare_add = a as u64;
        }
    }
    g.sq.wqe_mut(seq).msn = msn;
    Counters::bump(&g.stats.sent_pkts);
    Counters::add(&g.stats.sent_bytes, payload as u64);
    let out = g.req.out()?;
    out.next_msn = msn.wrapping_add(1);
    out.start_tx(&h, seq, payload);
    g.sq.transmitted();
    Ok(())
}

/// The wire header of request `seq` as message `msn`, and its payload
/// length.
fn request_header(g: &QpInner, seq: u64, msn: u32) -> (Header, usize) {
    let w = g.sq.wqe(seq);
    let mut h = Header::new(w.op, msn);
    h.length = w.len;
    h.rkey = w.rkey;
    h.remote_addr = w.remote_addr;
    h.compare_add = w.compare_add;
    h.swap = w.swap;
    h.xrc_srqn = w.xrc_srqn;
    if matches!(w.op, Op::SendImm | Op::WriteImm) {
        h.flags |= FLAG_IMM;
        h.imm = w.imm;
    }
    // The rkey to invalidate travels where the immediate would.
    if w.op == Op::SendInv {
        h.imm = w.imm;
    }
    if w.solicited {
        h.flags |= FLAG_SOLICITED;
    }
    if ack_later(g, w, msn) {
        h.syndrome |= REQ_ACK_LATER;
    }
    h.set_rnr_retry(g.attr.rnr_retry);
    let payload = if w.op.request_has_payload() {
        w.len as usize
    } else {
        0
    };
    (h, payload)
}

/// Whether `w` (message `msn`) may go without asking for an ACK
/// ([`REQ_ACK_LATER`]): an unsignaled WRITE on RC. Its responder then
/// sends no ACK of its own, and no syscall, for it. Slots are freed by
/// ACKs, so once half the send queue awaits them every [`ACK_EVERY`]th
/// request asks, and each of the last few before it fills. (Unsignaled
/// SENDs asking for none halved `ib_send_bw`'s 2 B message rate, not yet
/// understood: they still ask.)
fn ack_later(g: &QpInner, w: &crate::ring::SendWqe, msn: u32) -> bool {
    if g.qp_type != IBV_QPT_RC
        || w.signaled
        || g.sq_sig_all
        || !matches!(w.op, Op::Write | Op::WriteImm)
    {
        return false;
    }
    let (waiting, cap) = (g.sq.awaiting() + 1, g.sq.cap as u64);
    2 * waiting < cap || (!msn.is_multiple_of(ACK_EVERY) && waiting + u64::from(ACK_EVERY) < cap)
}

/// Of the requests sent while half the send queue awaits answers, one in
/// this many asks for an ACK.
const ACK_EVERY: u32 = 16;

/// Requests queued behind the one in progress that may join its
/// `sendmsg`.
const MAX_TX_GATHER: usize = 8;

/// A queued request put in a `sendmsg` beside the one in progress; it
/// becomes transmitted (its message number, the ring's cursor) only if
/// some of it went.
struct Gathered {
    seq: u64,
    msn: u32,
    hdr: [u8; HDR_LEN],
    total: usize,
    payload: usize,
}

/// Whether requests queued behind the one in progress may go in the same
/// `sendmsg`: plain requests on the connection, none of the per-request
/// decisions `transmit` makes (injected faults, the same-host path, local
/// operations) in the way.
fn may_gather(g: &QpInner) -> bool {
    g.state == IBV_QPS_RTS
        && !g.tx_blocked
        && g.req.faults.is_none()
        && g.req
            .out
            .as_ref()
            .is_some_and(|o| o.direct.is_none() && !o.announce)
}

/// Sends more of the message in progress, and the plain requests queued
/// behind it in the same call; false when the socket is full.
fn send_some(
    qp: &Qp,
    g: &mut QpInner,
    held: Option<RwLockReadGuard<'static, mr::MrTable>>,
) -> Result<bool, Broken> {
    // One look at the key table for the whole call: `transmit`'s, if it
    // holds one (a second read lock on this thread would deadlock against
    // a waiting `dereg_mr`).
    // A full socket is tried again once the kernel reports room (half of
    // what it holds drained), not at each poll: a polling thread sending
    // as the peer drains made 38 `sendmsg` of 27 KiB a MiB, each beside a
    // poll and a read, on the cores the receiver needs.
    if g.req
        .out_ref()
        .is_some_and(|o| o.tx_short && !o.conn.writable_now())
    {
        return Ok(false);
    }
    let table = held.unwrap_or_else(mr::table);
    let mut more: [Option<Gathered>; MAX_TX_GATHER] = Default::default();
    let m = if may_gather(g) {
        gather_more(qp, g, &table, &mut more)?
    } else {
        0
    };
    // A lone message with a few gather entries (a ping-pong's) fits an
    // array that costs nothing to set up; the full one is a kilobyte of
    // empty iovecs written per call (with the transport's own, 10-20 ns of
    // a TCP ping-pong's turnaround, measured within this VM's noise).
    let lone = m == 0 && {
        let out = g.req.out.as_ref().ok_or(Broken::Lost)?;
        out.tx_total == HDR_LEN
            || g.sq.wqe(out.tx_seq).inline
            || g.sq.sges(out.tx_seq).len() < FEW_IOV
    };
    let (r, m) = if lone {
        gather_and_send::<FEW_IOV>(qp, g, &table, &[])?
    } else {
        gather_and_send::<{ MAX_IOV * 2 }>(qp, g, &table, &more[..m])?
    };
    drop(table);
    match r {
        Ok(k) => {
            sent(qp, g, k, &more[..m])?;
            let out = g.req.out()?;
            out.tx_short = out.tx_active;
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            if let Some(out) = g.req.out.as_mut() {
                out.tx_was_full = true;
                out.tx_short = true;
            }
            Ok(false)
        }
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(Broken::LocalFault),
        Err(e) => Err(broken_by(&e)),
    }
}

/// Requests queued behind the one in progress, gathered into the same
/// `sendmsg` (headers encoded, MSNs given, local buffers checked under
/// `table`); how many.
fn gather_more(
    qp: &Qp,
    g: &QpInner,
    table: &mr::MrTable,
    more: &mut [Option<Gathered>; MAX_TX_GATHER],
) -> Result<usize, Broken> {
    let mut m = 0;
    let out = g.req.out.as_ref().ok_or(Broken::Lost)?;
    let mut msn = out.next_msn;
    let mut seq = g.sq.next_to_transmit();
    while let Some(s) = seq.filter(|_| m < MAX_TX_GATHER) {
        // What fails locally is left for `transmit` to fail alone.
        let w = g.sq.wqe(s);
        if w.op.is_local() || (w.op.is_atomic() && w.len != 8) || !local_ok(table, qp, g, s) {
            break;
        }
        // A rendezvous FIN waits for its READ (`engine::rndv`).
        if w.tm == crate::ring::TM_FIN {
            break;
        }
        let (h, payload) = request_header(g, s, msn);
        let mut hdr = [0u8; HDR_LEN];
        h.encode(&mut hdr);
        more[m] = Some(Gathered {
            seq: s,
            msn,
            hdr,
            total: HDR_LEN + payload,
            payload,
        });
        m += 1;
        msn = msn.wrapping_add(1);
        seq = g.sq.queued_after(s);
    }
    Ok(m)
}

/// `k` bytes went out: the request in progress and the gathered ones
/// (`more`) advance, in order; the one cut short is in progress now.
fn sent(qp: &Qp, g: &mut QpInner, mut k: usize, more: &[Option<Gathered>]) -> Result<(), Broken> {
    let out = g.req.out()?;
    if out.tx_was_full && k > 0 {
        out.tx_was_full = false;
        g.req.progress = true;
    }
    let reliable = g.reliable();
    let out = g.req.out()?;
    let first = k.min(out.tx_total - out.tx_off);
    out.tx_off += first;
    k -= first;
    if out.tx_off == out.tx_total {
        out.tx_active = false;
        if !reliable && out.tx_seq != TX_HELLO && out.tx_seq != TX_DOORBELL {
            sent_unacked(qp, g);
        }
    }
    // Gathered requests that went, wholly or in part, are
    // transmitted now, in order; the one cut short is the message
    // in progress.
    for x in more.iter().flatten() {
        if k == 0 {
            break;
        }
        g.sq.wqe_mut(x.seq).msn = x.msn;
        g.sq.transmitted();
        Counters::bump(&g.stats.sent_pkts);
        Counters::add(&g.stats.sent_bytes, x.payload as u64);
        let out = g.req.out()?;
        out.next_msn = x.msn.wrapping_add(1);
        if k >= x.total {
            k -= x.total;
            if !reliable {
                sent_unacked(qp, g);
            }
        } else {
            out.tx_hdr = x.hdr;
            out.tx_active = true;
            out.tx_seq = x.seq;
            out.tx_off = k;
            out.tx_total = x.total;
            k = 0;
        }
    }
    // The answer takes a round trip: the time to let the kernel
    // acknowledge what came in, rather than inside the next read.
    if let Some(inc) = g.resp.inc_mut() {
        inc.conn.ack_early();
    }
    Ok(())
}

/// Iovecs enough for a lone message of a few gather entries.
const FEW_IOV: usize = 8;

/// `send_some`'s `sendmsg`: the message in progress and as many of the
/// gathered requests as fit in `N` iovecs with their memory still
/// registered. Returns the send's outcome and how many of `more` joined.
fn gather_and_send<const N: usize>(
    qp: &Qp,
    g: &QpInner,
    table: &mr::MrTable,
    more: &[Option<Gathered>],
) -> Result<(std::io::Result<usize>, usize), Broken> {
    let out = g.req.out.as_ref().ok_or(Broken::Lost)?;
    let mut v = [iov(std::ptr::null(), 0); N];
    let mut n = 0;
    if out.tx_off < HDR_LEN {
        v[n] = iov(out.tx_hdr[out.tx_off..].as_ptr(), HDR_LEN - out.tx_off);
        n += 1;
    }
    let skip = out.tx_off.saturating_sub(HDR_LEN);
    let payload_left = out.tx_total - HDR_LEN - skip;
    if payload_left > 0 {
        let seq = out.tx_seq;
        let w = g.sq.wqe(seq);
        if w.inline {
            let d = g.sq.inline_data(seq);
            v[n] = iov(d[skip..].as_ptr(), d.len() - skip);
            n += 1;
        } else {
            // The MR may have been deregistered since the WQE started: with
            // part of the message on the wire there is no clean way back, so
            // the connection is given up.
            n += table
                .sge_iovs(
                    g.sq.sges(seq),
                    skip as u64,
                    payload_left,
                    qp.pd_id,
                    false,
                    &mut v[n..],
                )
                .map_err(|_| Broken::Lost)?;
        }
    }
    // The gathered requests' iovecs, as long as they fit and their memory
    // is still registered.
    let mut joined = 0;
    for x in more.iter().flatten() {
        if n + 1 + crate::device::MAX_SGE as usize > v.len() {
            break;
        }
        let at = n;
        v[n] = iov(x.hdr.as_ptr(), HDR_LEN);
        n += 1;
        if x.payload > 0 {
            if g.sq.wqe(x.seq).inline {
                let d = g.sq.inline_data(x.seq);
                v[n] = iov(d.as_ptr(), d.len());
                n += 1;
            } else {
                match table.sge_iovs(g.sq.sges(x.seq), 0, x.payload, qp.pd_id, false, &mut v[n..]) {
                    Ok(c) => n += c,
                    Err(_) => {
                        n = at;
                        break;
                    }
                }
            }
        }
        joined += 1;
    }
    // SAFETY: every iovec points into our header buffers, the WQEs' inline
    // buffers, or registered memory validated under the MR table lock, which
    // is held across the call.
    let r = unsafe { out.conn.send_iov(&v[..n]) };
    Ok((r, joined))
}

/// UC: a message is complete once it is on the wire (no acknowledgement
/// will come); it is the oldest one outstanding, since each completes as
/// it goes out.
fn sent_unacked(qp: &Qp, g: &mut QpInner) {
    if let Some(seq) = g.sq.oldest_in_flight() {
        let w = *g.sq.wqe(seq);
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
        qp.after_send_completions(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_heard_lately_is_serving() {
        let a = [0xa1; 16];
        let b = [0xb2; 16];
        heard_from(a, 1_000);
        assert!(heard_lately(a, 1_500, 500));
        assert!(!heard_lately(a, 1_501, 500), "too long ago");
        assert!(!heard_lately(b, 1_000, 500), "another address");
        // An older report never moves the time back.
        heard_from(a, 900);
        assert!(heard_lately(a, 1_500, 500));
        // A full table drops its oldest address, not the newest.
        for i in 0..HEARD_MAX as u64 {
            let mut g = [0u8; 16];
            g[..8].copy_from_slice(&(i + 1).to_le_bytes());
            g[15] = 0x77;
            heard_from(g, 2_000 + i);
        }
        assert!(!heard_lately(a, 2_000, 5_000), "the oldest went");
        let mut last = [0u8; 16];
        last[..8].copy_from_slice(&(HEARD_MAX as u64).to_le_bytes());
        last[15] = 0x77;
        assert!(heard_lately(last, 2_100, 100));
    }
}
