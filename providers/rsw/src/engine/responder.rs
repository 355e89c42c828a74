//! The responder half of an RC QP: the incoming connection from the peer's
//! requester.
//!
//! The progress thread reads requests as a non-blocking state machine:
//! header, then payload received straight into its destination (the posted
//! receive's buffers or the target MR) — one copy, from the socket. Responses
//! go back in request order on the same connection.
//!
//! A SEND (or WRITE with immediate) that finds no posted receive stalls the
//! connection: we stop reading it, so TCP back-pressure holds everything
//! behind it in order, until a receive is posted or the RNR deadline passes.
//! After any NAK the connection is finished (flushed, then closed): the
//! requester has failed, and whatever it sent after the refused request must
//! not be executed.
//!
//! Acknowledgements are ordered against visibility: a WRITE's data never
//! becomes visible before its ACK is in the kernel, nor the ACK transmitted
//! before the data is visible; a SEND's receive completion is written only
//! once its ACK is in the kernel (see `finish_request`) — except on a
//! polling thread, where the ACK may wait for the QP's next request to the
//! peer to carry it (`wire::FLAG_ACK`, see `may_owe_ack`): then it is sent
//! at the latest by the next poll, a 0.5 ms timer, a CQ being armed, or the
//! connection's close (at exit too). Bytes are read ahead by the transport
//! (`Conn::recv_iov`), so a burst of messages is parsed out of one read.

pub(crate) mod info;
mod tm;

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};

use verbs_abi::*;

use super::completer::RNR_NOTICE_NS;
use super::remote_atomic::{self, Operation};
use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::guard;
use crate::mr;
use crate::place;
use crate::progress::{engine, token, Kind};
use crate::stats::Counters;
use crate::transport::{canon_gid, local, Endpoints, MAX_IOV};
use crate::util::{iov, mono_ns};
use crate::wire::{
    Fault, Header, Hello, Op, Syndrome, DOORBELL_DIRECT, FEATURE_ACK_ON_REQUEST, FEATURE_FRAMED,
    FLAG_ACK, FLAG_IMM, FLAG_SOLICITED, FLAG_WAITS, HDR_LEN,
};
use crate::wq::conn::{pending_connections, Counted, InConn, PendingConn, ReadData, Rx, TAIL};
use crate::wq::rnr_timer_ns;

/// Stop reading requests while this many responses wait to be sent, so a
/// peer that sends faster than it reads cannot make us buffer without bound.
/// Connections closed because they did not come from the QP's peer, or
/// arrived when the limits were reached.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// How many incoming connections were refused as foreign or over a limit
/// since the process started (for tests and diagnostics).
pub fn refused_connections() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// At most this many pending connections per QP. A real peer needs one.
const MAX_PENDING_PER_QP: usize = 8;
const SLOT_BITS: u32 = 3;
/// Token ids are this many bits (see `progress::token`).
const ID_BITS: u32 = 14;

/// The slot of the pending connection an event with token id `id` is
/// about, if it is still there.
pub fn pending_slot(g: &QpInner, id: usize) -> Option<usize> {
    let slot = id & ((1 << SLOT_BITS) - 1);
    g.resp
        .pending
        .get(slot)?
        .as_ref()
        .filter(|p| p.id == id)
        .map(|_| slot)
}

/// Process-wide cap on pending connections beyond the one each QP is owed:
/// a quarter of the descriptor limit, so strangers can never take the
/// descriptors the application and its own QPs need.
fn max_pending_total() -> usize {
    (crate::util::nofile_limit() / 4).clamp(4, 4096) as usize
}

/// Counts a refused incoming connection and logs it (warning level) with
/// the QP it asked for, the peer's address and the reason.
fn refuse(qpn: u32, peer: &[u8; 16], why: &dyn core::fmt::Display) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    log::warn!(
        "qp {qpn:#x}: refused a connection from {}: {why}",
        std::net::Ipv6Addr::from(*peer)
    );
}

// ---- accepting ---------------------------------------------------------------

/// How long a listener rests after `accept` failed.
const ACCEPT_PAUSE_NS: u64 = 100_000_000;
/// How long an accepted connection may take to send its hello. A real peer
/// sends it with its first bytes; only strangers and stalled peers wait.
const HELLO_TIMEOUT_NS: u64 = 2_000_000_000;
/// How long a connection with a valid hello is held for a QP that has not
/// reached RTR yet (its peer got there first, the usual case, by moments).
const HELD_TIMEOUT_NS: u64 = 30_000_000_000;

/// How often an RNR wait on another process's XRC SRQ looks for a posted
/// receive (its owner's posts do not reach us).
const REMOTE_SRQ_POLL_NS: u64 = 1_000_000;

/// Whether a connection that arrived at `local` from `peer` can be the
/// QP's peer: it must arrive at one of the device's addresses (a QP of
/// rsw_lo is not reachable from other hosts), and once the peer is known
/// (RTR), come from the peer's address.
fn endpoints_ok(qp: &Qp, g: &QpInner, e: &Endpoints) -> bool {
    let gids = &qp.ctx.dev.gids;
    if !gids.iter().any(|d| canon_gid(d) == e.local) {
        return false;
    }
    match g.remote {
        Some(r) if r.global => canon_gid(&r.gid) == e.peer,
        // LID-only addressing means this host: the peer's address is one
        // of ours.
        Some(_) => e.peer == e.local || gids.iter().any(|d| canon_gid(d) == e.peer),
        None => true,
    }
}

pub fn on_listener(qp: &Qp, g: &mut QpInner) {
    loop {
        let Some(l) = g.resp.listener.as_ref() else {
            return;
        };
        let (conn, ends) = match l.accept() {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(_) => {
                pause_accepting(qp, g);
                return;
            }
        };
        if let Some(why) = refusal(qp, g, &ends) {
            refuse(qp.qpn, &ends.peer, &why);
            continue;
        }
        let Some(slot) = pending_slot_for(qp, g, &ends) else {
            continue;
        };
        match hold_pending(qp, g, slot, conn, ends) {
            Some(true) => on_pending(qp, g, slot),
            Some(false) => continue,
            None => return,
        }
    }
}

/// `accept` failed (out of descriptors or similar).
fn pause_accepting(qp: &Qp, g: &mut QpInner) {
    let Some(l) = g.resp.listener.as_ref() else {
        return;
    };
    // Out of descriptors or similar: the connection stays queued
    // and the listener readable, so watching it now would only
    // spin. Stop watching it and try again a little later.
    let Ok(e) = engine() else { return };
    e.modify(l.fd(), token(qp.serial, Kind::Listener), 0);
    let at = mono_ns() + ACCEPT_PAUSE_NS;
    g.resp.accept_resume = Some(at);
    e.add_timer(at, qp.serial);
}

/// Why a connection just accepted is refused at once, if it is.
fn refusal(qp: &Qp, g: &QpInner, ends: &Endpoints) -> Option<&'static str> {
    // An XRC send QP has no responder: nobody may connect to it.
    if g.state != IBV_QPS_ERR
        && !g.resp.inc_bound
        && g.qp_type != IBV_QPT_XRC_SEND
        && endpoints_ok(qp, g, ends)
    {
        return None;
    }
    Some(if g.state == IBV_QPS_ERR {
        "the QP is in ERR"
    } else if g.resp.inc_bound {
        "the QP already has its peer's connection"
    } else if g.qp_type == IBV_QPT_XRC_SEND {
        "an XRC send QP takes no connections"
    } else {
        "the addresses are not the ones given at RTR (or not this device's)"
    })
}

/// The slot a new connection from `ends` is held in while it is not
/// known, or None if it is refused (the caps).
fn pending_slot_for(qp: &Qp, g: &mut QpInner, ends: &Endpoints) -> Option<usize> {
    // Each QP may always hold one connection, the one its peer is
    // expected to make (it becomes the QP's incoming connection, a
    // descriptor the QP is owed anyway): a program that connects
    // thousands of QPs at once never runs into the cap. Beyond that
    // one, the process-wide cap applies.
    let owed =
        !g.resp.inc_bound && g.resp.inc.is_none() && g.resp.pending.iter().all(Option::is_none);
    if !owed && pending_connections() >= max_pending_total() {
        refuse(
            qp.qpn,
            &ends.peer,
            &format_args!(
                "limit of {} unidentified connections reached",
                max_pending_total()
            ),
        );
        return None;
    }
    Some(match g.resp.pending.iter().position(Option::is_none) {
        Some(s) => s,
        None if g.resp.pending.len() < MAX_PENDING_PER_QP => {
            g.resp.pending.push(None);
            g.resp.pending.len() - 1
        }
        None => {
            // Full. The oldest connection that has not said who it is
            // gives way: a real peer sends its hello with its first
            // bytes, so it is read within moments and then keeps its
            // place, while silent strangers can never lock it out.
            let stale = g
                .resp
                .pending
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
                .filter(|(_, p)| p.hello.is_none())
                .min_by_key(|(_, p)| p.accepted)
                .map(|(i, p)| (i, p.ends.peer));
            match stale {
                Some((s, peer)) => {
                    refuse(
                        qp.qpn,
                        &peer,
                        &"silent, it gave way to a newer connection (queue full)",
                    );
                    g.resp.pending[s] = None;
                    s
                }
                None => {
                    refuse(
                        qp.qpn,
                        &ends.peer,
                        &"the QP's queue of unidentified connections is full",
                    );
                    return None;
                }
            }
        }
    })
}

/// Holds the connection in `slot` until it says who it is: Some(true)
/// when held, Some(false) when it could not be watched, None without a
/// progress engine.
fn hold_pending(
    qp: &Qp,
    g: &mut QpInner,
    slot: usize,
    conn: crate::transport::Conn,
    ends: Endpoints,
) -> Option<bool> {
    g.resp.pending_seq = g.resp.pending_seq.wrapping_add(1);
    let id = ((g.resp.pending_seq << SLOT_BITS) | slot) & ((1 << ID_BITS) - 1);
    let Ok(eng) = engine() else { return None };
    if eng
        .add(
            conn.fd(),
            token(qp.serial, Kind::Pending(id)),
            libc::EPOLLIN as u32,
        )
        .is_err()
    {
        return Some(false);
    }
    let deadline = mono_ns() + HELLO_TIMEOUT_NS;
    eng.add_timer(deadline, qp.serial);
    g.resp.pending[slot] = Some(PendingConn {
        conn,
        id,
        ends,
        buf: [0; HDR_LEN],
        got: 0,
        hello: None,
        accepted: mono_ns(),
        _counted: Counted::new(),
        deadline,
    });
    Some(true)
}

pub fn on_pending(qp: &Qp, g: &mut QpInner, slot: usize) {
    let Some(Some(p)) = g.resp.pending.get_mut(slot) else {
        return;
    };
    if p.hello.is_none() {
        p.conn.fresh();
        while p.got < HDR_LEN {
            let v = [iov(p.buf[p.got..].as_ptr(), HDR_LEN - p.got)];
            // SAFETY: the iovec covers the unfilled part of our buffer.
            match unsafe { p.conn.recv_iov(&v) } {
                Ok(0) => {
                    g.resp.pending[slot] = None;
                    return;
                }
                Ok(k) => p.got += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    g.resp.pending[slot] = None;
                    return;
                }
            }
        }
        match Hello::decode(&p.buf) {
            Ok(h) if h.dst_qpn == qp.qpn => {
                // Whatever follows the hello is framed if it says so.
                if h.features & FEATURE_FRAMED != 0 {
                    p.conn.set_framed(0);
                }
                p.hello = Some(h);
            }
            h => {
                let peer = p.ends.peer;
                g.resp.pending[slot] = None;
                match h {
                    Ok(h) => refuse(
                        qp.qpn,
                        &peer,
                        &format_args!("its hello names QP {:#x}", h.dst_qpn),
                    ),
                    Err(_) => refuse(qp.qpn, &peer, &"its hello is malformed"),
                }
                return;
            }
        }
    }
    try_promote(qp, g, slot);
}

/// Turns a pending connection with a valid hello into the incoming
/// connection once we know our peer, holds it before that, and drops it if
/// it comes from someone else.
fn try_promote(qp: &Qp, g: &mut QpInner, slot: usize) {
    let Some(Some(p)) = g.resp.pending.get(slot) else {
        return;
    };
    let Some(hello) = p.hello else { return };
    match g.state {
        IBV_QPS_RESET | IBV_QPS_INIT => {
            // Not reading it until RTR is what holds it, for a while.
            let deadline = mono_ns() + HELD_TIMEOUT_NS;
            if let Ok(e) = engine() {
                e.modify(p.conn.fd(), token(qp.serial, Kind::Pending(p.id)), 0);
                e.add_timer(deadline, qp.serial);
            }
            if let Some(Some(p)) = g.resp.pending.get_mut(slot) {
                p.deadline = deadline;
            }
        }
        IBV_QPS_ERR => g.resp.pending[slot] = None,
        _ => {
            let Some(remote) = g.remote else { return };
            let Some(p) = g.resp.pending[slot].take() else {
                return;
            };
            // Bound to the pair given at RTR: the peer's QPN, GID and
            // address, and only one connection per RTR, so nobody can take
            // over a live connection by claiming to be the peer.
            let gid_ok = !remote.global || canon_gid(&hello.src_gid) == canon_gid(&remote.gid);
            if hello.src_qpn != remote.qpn
                || !gid_ok
                || !endpoints_ok(qp, g, &p.ends)
                || g.resp.inc_bound
            {
                let why = if hello.src_qpn != remote.qpn {
                    format!(
                        "forged peer: it claims QP {:#x}, RTR named {:#x}",
                        hello.src_qpn, remote.qpn
                    )
                } else if !gid_ok {
                    "forged peer: its GID is not the one given at RTR".to_string()
                } else if g.resp.inc_bound {
                    "the QP already has its peer's connection".to_string()
                } else {
                    "forged peer: its address is not the one given at RTR".to_string()
                };
                refuse(qp.qpn, &p.ends.peer, &why);
                return;
            }
            g.resp.inc_bound = true;
            let events = libc::EPOLLIN as u32;
            let p_ends = p.ends;
            let conn = p.conn;
            if let Ok(e) = engine() {
                e.modify(conn.fd(), token(qp.serial, Kind::Incoming), events);
            }
            g.resp.inc = Some(InConn {
                conn,
                peer_qpn: hello.src_qpn,
                events,
                rx_hdr: [0; HDR_LEN],
                rx_got: 0,
                rx: Rx::Header,
                resp: VecDeque::new(),
                read_bytes: 0,
                closing: false,
                rnr_deadline: None,
                rnr_notice_at: 0,
                tail: [0; TAIL as usize],
                peer_direct: false,
                peer_takes_acks: hello.features & FEATURE_ACK_ON_REQUEST != 0,
                ack_owed: false,
                ack_lazy: false,
                last_lone: false,
                read_since_post: false,
                answering: false,
            });
            offer_local(qp, g, &p_ends);
            super::requester::apply_timeouts(g);
            pump(qp, g);
        }
    }
}

/// Offers our published table (`transport::local`) to a requester on
/// this host, as the first response on its connection: from then on its
/// one-sided requests may reach our memory without us.
fn offer_local(qp: &Qp, g: &mut QpInner, ends: &Endpoints) {
    if !matches!(g.qp_type, IBV_QPT_RC | IBV_QPT_UC) {
        return;
    }
    let ours = |a: &[u8; 16]| qp.ctx.dev.gids.iter().any(|d| canon_gid(d) == *a);
    if ends.peer != ends.local && !ours(&ends.peer) {
        return;
    }
    let Some((pid, fd, token)) = local::offer() else {
        return;
    };
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    let mut h = Header::new(Op::Offer, 0);
    h.remote_addr = pid;
    h.rkey = fd;
    h.compare_add = token;
    inc.push_resp(&h, None);
}

/// Entering RTR: connections that arrived early may now be used.
pub fn promote_pending(qp: &Qp, g: &mut QpInner) {
    for slot in 0..g.resp.pending.len() {
        try_promote(qp, g, slot);
    }
}

// ---- requests -----------------------------------------------------------------

enum Step {
    More,
    Blocked,
    Closed,
    /// The connection is gone already: the pass ends at once.
    Gone,
    /// The peer's host stopped answering (keepalive timed out).
    Vanished,
}

/// How a socket error ends the incoming connection.
fn closed_by(e: &std::io::Error) -> Step {
    if crate::transport::vanished(e) {
        Step::Vanished
    } else {
        Step::Closed
    }
}

/// Accepts the peer's connection and reads its hello now, on a polling
/// thread (`Qp::drive_setup`), rather than waiting for the progress thread.
pub fn accept_now(qp: &Qp, g: &mut QpInner) {
    on_listener(qp, g);
    for slot in 0..g.resp.pending.len() {
        if g.resp.inc.is_some() {
            break;
        }
        on_pending(qp, g, slot);
    }
}

/// [`pump`] on a polling thread, which comes back soon: a SEND's ACK may
/// wait for our next request to carry it (see `may_owe_ack`).
pub fn pump_deferring_acks(qp: &Qp, g: &mut QpInner) {
    g.resp.defer_acks = true;
    pump(qp, g);
    g.resp.defer_acks = false;
}

/// Runs the incoming connection as far as it goes without blocking.
pub fn pump(qp: &Qp, g: &mut QpInner) {
    run(qp, g);
    // Normally settled already; here if the connection ended on the way
    // (its data did arrive: the receives complete).
    if !g.resp.acked_later.is_empty() {
        settle_acks(qp, g);
    }
}

fn run(qp: &Qp, g: &mut QpInner) {
    // A polling thread probes; the progress thread was told the socket is
    // readable.
    let polling = g.polling;
    if let Some(inc) = g.resp.inc.as_mut() {
        if polling {
            inc.conn.fresh_probe();
        } else {
            inc.conn.fresh();
        }
    }
    loop {
        let Some(inc) = g.resp.inc.as_mut() else {
            return;
        };
        if inc.closing {
            break;
        }
        if inc.backlogged() {
            match make_room(qp, g) {
                Step::More => continue,
                Step::Blocked => break,
                _ => return,
            }
        }
        let Some(inc) = g.resp.inc.as_mut() else {
            return;
        };
        let step = match inc.rx {
            Rx::Stalled(h) => resume_stalled(qp, g, h),
            Rx::Held {
                h,
                until,
                rnr_exceeded,
            } => resume_held(qp, g, h, until, rnr_exceeded),
            Rx::Payload(..) => receive_payload(qp, g),
            Rx::Tmh(h) => tm::receive_header(qp, g, h),
            Rx::Discard(left) => discard_more(inc, left),
            Rx::Header => receive_header(qp, g),
        };
        match step {
            Step::More => continue,
            Step::Blocked => break,
            Step::Gone => return,
            Step::Closed => {
                settle_acks(qp, g);
                g.resp.inc = None;
                return;
            }
            Step::Vanished => {
                settle_acks(qp, g);
                g.resp.inc = None;
                qp.peer_vanished(g);
                return;
            }
        }
    }
    // An ACK held back is not flushed here (`owe_ack`).
    let held = g.resp.acked_later.is_empty() && owe_ack(qp, g);
    if !held && !settle_acks(qp, g) {
        g.resp.inc = None;
        return;
    }
    settle(qp, g);
}

/// Too many responses wait: make room by sending, then read on (`More`)
/// if that helped.
fn make_room(qp: &Qp, g: &mut QpInner) -> Step {
    if !flush(qp, g) {
        g.resp.inc = None;
        return Step::Gone;
    }
    match g.resp.inc.as_ref() {
        Some(i) if !i.backlogged() => Step::More,
        Some(_) => Step::Blocked,
        None => Step::Gone,
    }
}

/// A request stalled for want of a receive (RNR) goes on once one is
/// posted.
fn resume_stalled(qp: &Qp, g: &mut QpInner, h: Header) -> Step {
    if !qp.claim_recv(g) {
        return Step::Blocked;
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return Step::Gone;
    };
    inc.rx = Rx::Header;
    inc.rnr_deadline = None;
    inc.rnr_notice_at = 0;
    on_request(qp, g, h);
    Step::More
}

/// A request an injected fault holds goes on, or is NAKed, when its time
/// comes.
fn resume_held(qp: &Qp, g: &mut QpInner, h: Header, until: u64, rnr_exceeded: bool) -> Step {
    let Some(inc) = g.resp.inc.as_mut() else {
        return Step::Gone;
    };
    if mono_ns() < until {
        Step::Blocked
    } else if rnr_exceeded {
        inc.nak(h.msn, Syndrome::RnrRetryExc);
        Step::More
    } else {
        inc.rx = Rx::Header;
        inc.rnr_notice_at = 0;
        on_request(qp, g, h);
        Step::More
    }
}

/// Reads and drops more of a message UC drops (`left` bytes to go).
fn discard_more(inc: &mut InConn, left: u32) -> Step {
    match super::completer::discard(&mut inc.conn, left as usize) {
        Ok(0) => Step::Closed,
        Ok(k) => {
            let left = left - k as u32;
            inc.rx = if left == 0 {
                Rx::Header
            } else {
                Rx::Discard(left)
            };
            Step::More
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => Step::Blocked,
        Err(e) => closed_by(&e),
    }
}

/// How long an ACK waits for a request of ours to carry it, at most (the
/// program stopped polling and posting): then the progress thread sends it.
const ACK_DEFER_NS: u64 = 500_000;

/// Whether a SEND's ACK may wait for our next request to carry it: on the
/// polling thread, which comes back within moments (to poll again, which
/// sends it, or to post, which carries it), to a peer that takes ACKs on
/// requests, with our connection to it up. A ping-pong then costs one
/// message each way, not two. The receive completion is written at once,
/// before the ACK is in the kernel; the ACK is still sent when the
/// connection closes (`InConn`'s drop, at exit too).
///
/// The progress thread holds back too, when the request was lone and our
/// program answers each request with one of its own (`InConn::answering`,
/// cleared when the timer has to send an ACK). Otherwise a program that
/// waits on its memory (`ib_write_lat`) has its peer's ACK arrive alone,
/// early, and each side's next request found by a woken progress thread:
/// 33 us per message on loopback instead of one message each way.
fn may_owe_ack(g: &QpInner) -> bool {
    (g.resp.defer_acks || answering(g))
        && g.qp_type == IBV_QPT_RC
        && g.resp
            .inc
            .as_ref()
            .is_some_and(|i| i.peer_takes_acks && !i.closing)
        && g.req
            .out_ref()
            .is_some_and(|o| o.connected && o.direct.is_none())
}

/// The last request was lone and our program answers each with one of
/// its own (see [`may_owe_ack`]).
fn answering(g: &QpInner) -> bool {
    g.resp
        .inc
        .as_ref()
        .is_some_and(|i| i.answering && i.last_lone)
}

/// At the end of a pass: holds back the ACK if it is all there is to send
/// (see [`may_owe_ack`]), with a timer as the backstop; true if held.
fn owe_ack(qp: &Qp, g: &mut QpInner) -> bool {
    let riding = may_owe_ack(g);
    let Some(inc) = g.resp.inc.as_mut() else {
        return false;
    };
    if !riding && (!inc.ack_lazy || inc.closing) {
        return false;
    }
    if inc.resp.len() != 1 || inc.resp[0].op != Op::Ack || inc.resp[0].off != 0 {
        return false;
    }
    inc.ack_owed = true;
    // A QP in a ping-pong owes an ACK most of the time.
    if let Ok(e) = engine() {
        e.add_timer_once(&mut g.resp.ack_timer_at, ACK_DEFER_NS, qp.serial);
    }
    true
}

/// Sends an ACK held back for a request to carry (the program polls
/// again: it posted nothing that took it). An ACK owed only to requests
/// that asked for none now waits for the timer instead.
pub fn send_owed_ack(qp: &Qp, g: &mut QpInner) {
    if g.resp
        .inc
        .as_ref()
        .is_some_and(|i| i.ack_owed && !i.ack_lazy)
    {
        send_any_owed_ack(qp, g);
    }
}

/// Sends the ACK held back, whoever it answers (the timer came).
fn send_any_owed_ack(qp: &Qp, g: &mut QpInner) {
    if g.resp.inc.as_ref().is_some_and(|i| i.ack_owed) {
        if !flush(qp, g) {
            g.resp.inc = None;
            return;
        }
        settle(qp, g);
    }
}

/// Closes a finished connection or updates what it is polled for.
fn settle(qp: &Qp, g: &mut QpInner) {
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    if inc.closing && inc.resp.is_empty() {
        g.resp.inc = None;
        return;
    }
    let mut want = 0u32;
    if !inc.closing && !inc.backlogged() && !matches!(inc.rx, Rx::Stalled(_) | Rx::Held { .. }) {
        want |= libc::EPOLLIN as u32;
    }
    // An ACK held back waits for a request or the timer, not for room.
    if !inc.resp.is_empty() && !inc.ack_owed {
        want |= libc::EPOLLOUT as u32;
    }
    if want != inc.events {
        inc.events = want;
        if let Ok(e) = engine() {
            e.modify(inc.conn.fd(), token(qp.serial, Kind::Incoming), want);
        }
    }
}

/// The QP entered ERR: read no more requests, send what is queued (a NAK
/// explaining the error, typically), then close.
pub fn close_after_flush(qp: &Qp, g: &mut QpInner) {
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    inc.closing = true;
    inc.rx = Rx::Header;
    inc.rnr_deadline = None;
    inc.rnr_notice_at = 0;
    if !flush(qp, g) {
        g.resp.inc = None;
        return;
    }
    settle(qp, g);
}

pub fn on_timer(qp: &Qp, g: &mut QpInner, now: u64) {
    if g.resp.ack_timer_at != 0 && g.resp.ack_timer_at <= now {
        g.resp.ack_timer_at = 0;
        if let Some(inc) = g.resp.inc.as_mut().filter(|i| i.ack_owed) {
            inc.answering = false;
        }
        send_any_owed_ack(qp, g);
    }
    expire_pending(qp, g, now);
    if g.resp.accept_resume.is_some_and(|d| d <= now) {
        resume_accepting(qp, g);
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    if let Rx::Held { h, until, .. } = inc.rx {
        // An injected RNR keeps telling the requester it waits, as a
        // stalled responder does; a lost request says nothing.
        if until != u64::MAX && inc.rnr_notice_at != 0 && inc.rnr_notice_at <= now {
            inc.push_resp(&Header::new(Op::RnrWait, h.msn), None);
            inc.rnr_notice_at = now + RNR_NOTICE_NS;
            if let Ok(e) = engine() {
                e.add_timer(inc.rnr_notice_at, qp.serial);
            }
        }
        if until <= now || !inc.resp.is_empty() {
            pump(qp, g);
        }
        return;
    }
    let Rx::Stalled(h) = inc.rx else { return };
    if g.xrc_remote.is_some() {
        if qp.claim_recv(g) {
            pump(qp, g);
            return;
        }
        if let Ok(e) = engine() {
            e.add_timer(now + REMOTE_SRQ_POLL_NS, qp.serial);
        }
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    if inc.rnr_notice_at != 0 && inc.rnr_notice_at <= now && !inc.closing {
        inc.push_resp(&Header::new(Op::RnrWait, h.msn), None);
        inc.rnr_notice_at = now + RNR_NOTICE_NS;
        if let Ok(e) = engine() {
            e.add_timer(inc.rnr_notice_at, qp.serial);
        }
        pump(qp, g);
        let Some(inc) = g.resp.inc.as_mut() else {
            return;
        };
        let Rx::Stalled(_) = inc.rx else { return };
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    match inc.rnr_deadline {
        Some(d) if d <= now => {}
        _ => return,
    }
    if !qp.claim_recv(g) {
        // Only the requester fails; this QP stays usable.
        if let Some(inc) = g.resp.inc.as_mut() {
            inc.nak(h.msn, Syndrome::RnrRetryExc);
        }
    }
    pump(qp, g);
}

/// Pending connections that said nothing in time go.
fn expire_pending(qp: &Qp, g: &mut QpInner, now: u64) {
    for p in g.resp.pending.iter_mut() {
        if p.as_ref().is_some_and(|c| c.deadline <= now) {
            let peer = p.as_ref().map_or([0; 16], |c| c.ends.peer);
            *p = None;
            refuse(qp.qpn, &peer, &"it sent no hello in time");
        }
    }
}

/// The pause after a failed `accept` is over: the listener is watched
/// again.
fn resume_accepting(qp: &Qp, g: &mut QpInner) {
    g.resp.accept_resume = None;
    if let (Some(l), Ok(e)) = (g.resp.listener.as_ref(), engine()) {
        e.modify(
            l.fd(),
            token(qp.serial, Kind::Listener),
            libc::EPOLLIN as u32,
        );
    }
    on_listener(qp, g);
}

fn receive_header(qp: &Qp, g: &mut QpInner) -> Step {
    let Some(inc) = g.resp.inc.as_mut() else {
        return Step::Closed;
    };
    let got = inc.rx_got;
    let v = [iov(inc.rx_hdr[got..].as_ptr(), HDR_LEN - got)];
    // SAFETY: the iovec covers the unfilled part of our header buffer.
    match unsafe { inc.conn.recv_iov(&v) } {
        Ok(0) => return Step::Closed,
        Ok(k) => inc.rx_got += k,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Blocked,
        Err(e) => return closed_by(&e),
    }
    if inc.rx_got < HDR_LEN {
        return Step::More;
    }
    inc.rx_got = 0;
    match Header::decode(&inc.rx_hdr) {
        Ok(h) if h.op.is_request() => {
            inc.last_lone = h.flags & FLAG_WAITS != 0;
            inc.read_since_post = true;
            // A lone one-sided request (the flag is only ever set on
            // those): a program may wait for its data without polling. A
            // stream of them gets no boost, which would take the core
            // from the requester's threads (TCP `ib_read_bw` with the
            // boost on every one-sided request: a fifth less in
            // alternating runs, within this VM's noise, so not certain).
            if !g.polling {
                crate::progress::served(h.flags & FLAG_WAITS != 0);
            }
            // The flag is the peer's word; only a READ or an atomic earns
            // the look.
            if !g.polling
                && h.flags & FLAG_WAITS != 0
                && matches!(h.op, Op::ReadReq | Op::CmpSwap | Op::FetchAdd)
            {
                served_by_progress(qp, g);
            }
            // Applied as the header is read, before the request may wait
            // for a receive (RNR): the peer may wait for this ACK to post
            // the receive that request needs.
            if h.flags & FLAG_ACK != 0 && h.op.carries_ack() {
                super::completer::acked_by_peer(qp, g, h.compare_add as u32);
            }
            on_request(qp, g, h);
            Step::More
        }
        _ => {
            // Not a request: the peer is broken. InfiniBand calls this an
            // invalid request on the responder's work queue.
            settle_acks(qp, g);
            qp.async_event(IBV_EVENT_QP_REQ_ERR);
            qp.enter_error(g, &"the peer sent a header that is not a request");
            Step::Closed
        }
    }
}

/// The progress thread serves a READ or an atomic whose requester waits
/// for it, with nothing else unanswered (`wire::FLAG_WAITS`). If the
/// program has not polled the QP's CQs since the one before, it is not
/// looking (the passive side of one-sided operations, or a program
/// waiting for events), so nothing but this thread serves the next one
/// either: it keeps looking for a moment instead of sleeping
/// (`progress::keep_looking`). A thread woken from `epoll` cost a READ's
/// round trip about 15 us on two cores (22 -> 7.5 us between two
/// namespaces). Not for a stream of requests, or SENDs and WRITEs, whose
/// requesters do not wait for each answer: looking took a core from the
/// peer's threads on two cores (`ib_atomic_bw` between two namespaces
/// lost a third, qperf `rc_bw` a tenth).
fn served_by_progress(qp: &Qp, g: &mut QpInner) {
    let polls = qp.cq_polls();
    if std::mem::replace(&mut g.resp.served_polls, polls) == polls {
        crate::progress::keep_looking();
    }
}

/// Checks a remote access against the QP's access flags and the MR.
fn remote_ok(qp: &Qp, g: &QpInner, h: &Header, len: u64, need: u32) -> bool {
    if len == 0 {
        return true;
    }
    g.attr.qp_access_flags & need == need
        && mr::table()
            .remote(h.rkey, h.remote_addr, len, qp.target_pd(g), need, qp.qpn)
            .is_ok()
}

/// A request named memory it may not touch: NAK it, and the responder QP
/// fails with an access error (InfiniBand class C responder error).
fn access_error(qp: &Qp, g: &mut QpInner, msn: u32) {
    settle_acks(qp, g);
    Counters::bump(&g.stats.resp_remote_access_errors);
    if let Some(inc) = g.resp.inc.as_mut() {
        inc.nak(msn, Syndrome::RemAccess);
    }
    qp.async_event(IBV_EVENT_QP_ACCESS_ERR);
    qp.enter_error(
        g,
        &format_args!("remote access error (message {msn}): the request's rkey/range/rights are not ours to grant; NAK sent"),
    );
}

/// As [`access_error`] for a request that took a receive (WRITE_WITH_IMM):
/// the receive completes with `IBV_WC_LOC_ACCESS_ERR`, as the spec's
/// responder class C error and ConnectX report it (rxe reports
/// `IBV_WC_REM_ACCESS_ERR` there), and the rest are flushed.
fn access_error_on_recv(qp: &Qp, g: &mut QpInner, msn: u32) {
    Counters::bump(&g.stats.resp_remote_access_errors);
    qp.async_event(IBV_EVENT_QP_ACCESS_ERR);
    fail_recv(qp, g, msn, IBV_WC_LOC_ACCESS_ERR, Syndrome::RemAccess);
}

/// A request that is malformed for its operation (a misaligned atomic):
/// NAK it as an invalid request; the responder QP fails (InfiniBand class
/// B/C responder error, `IBV_EVENT_QP_REQ_ERR`).
fn inv_request(qp: &Qp, g: &mut QpInner, msn: u32) {
    settle_acks(qp, g);
    Counters::bump(&g.stats.resp_remote_invalid_request);
    if let Some(inc) = g.resp.inc.as_mut() {
        inc.nak(msn, Syndrome::RemInvReq);
    }
    qp.async_event(IBV_EVENT_QP_REQ_ERR);
    qp.enter_error(
        g,
        &format_args!("invalid request (message {msn}); NAK sent"),
    );
}

/// A request carrying a fault its requester's process injected
/// (`faults`): this responder takes the path it would take if the fault
/// were real.
fn injected(qp: &Qp, g: &mut QpInner, h: Header) {
    let clean = Header {
        fault: 0,
        syndrome: 0,
        ..h
    };
    match Fault::from_u8(h.fault) {
        Fault::Nak => match Syndrome::from_u8(h.syndrome) {
            Some(Syndrome::RemAccess) => access_error(qp, g, h.msn),
            Some(Syndrome::RemInvReq) => inv_request(qp, g, h.msn),
            _ => {
                // A responder failing on its own: the receive the message
                // would land in (if any) completes with a protection error.
                if matches!(h.op, Op::Send | Op::SendImm | Op::SendInv | Op::WriteImm) {
                    qp.claim_recv(g);
                }
                fail_recv(qp, g, h.msn, IBV_WC_LOC_PROT_ERR, Syndrome::RemOp);
            }
        },
        Fault::Rnr => {
            // As if no receive were posted for `n` RNR timer periods:
            // with fewer retries than that, the requester's RNR retry
            // count runs out first (7: retry forever).
            Counters::bump(&g.stats.send_rnr_err);
            let n = h.syndrome as u64;
            let retries = h.rnr_retry() as u64;
            let period = rnr_timer_ns(g.attr.min_rnr_timer);
            let exceeded = retries < 7 && n > retries;
            let until = if exceeded {
                mono_ns() + period * (retries + 1)
            } else if n == 255 {
                // RNR every time against a requester that retries forever:
                // it waits forever, as on hardware (kept apart from a lost
                // request's u64::MAX, which sends no RNR notices).
                u64::MAX - 1
            } else {
                mono_ns() + period * n
            };
            hold(qp, g, clean, until, exceeded);
        }
        // Lost: nothing is read or answered any more.
        Fault::Drop => hold(qp, g, clean, u64::MAX, false),
        Fault::None => on_request(qp, g, clean),
    }
}

fn hold(qp: &Qp, g: &mut QpInner, h: Header, until: u64, rnr_exceeded: bool) {
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    inc.rx = Rx::Held {
        h,
        until,
        rnr_exceeded,
    };
    if until == u64::MAX {
        return;
    }
    inc.push_resp(&Header::new(Op::RnrWait, h.msn), None);
    inc.rnr_notice_at = mono_ns() + RNR_NOTICE_NS;
    if let Ok(e) = engine() {
        e.add_timer(inc.rnr_notice_at, qp.serial);
        if until < u64::MAX - 1 {
            e.add_timer(until, qp.serial);
        }
    }
}

fn stall(qp: &Qp, g: &mut QpInner, h: Header) {
    settle_acks(qp, g);
    Counters::bump(&g.stats.send_rnr_err);
    let min_rnr = g.attr.min_rnr_timer;
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    inc.rx = Rx::Stalled(h);
    // Tell the requester we are alive and waiting, now and every
    // RNR_NOTICE_NS, so its retry timer does not count the wait.
    inc.push_resp(&Header::new(Op::RnrWait, h.msn), None);
    inc.rnr_notice_at = mono_ns() + RNR_NOTICE_NS;
    if let Ok(e) = engine() {
        e.add_timer(inc.rnr_notice_at, qp.serial);
    }
    let retries = h.rnr_retry();
    // Another process's SRQ does not wake us when a receive is posted:
    // look again shortly.
    if g.xrc_remote.is_some() {
        if let Ok(e) = engine() {
            e.add_timer(mono_ns() + REMOTE_SRQ_POLL_NS, qp.serial);
        }
    }
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    // 7 means retry forever.
    if retries < 7 {
        let d = mono_ns() + rnr_timer_ns(min_rnr) * (retries as u64 + 1);
        inc.rnr_deadline = Some(d);
        if let Ok(e) = engine() {
            e.add_timer(d, qp.serial);
        }
    }
}

fn on_request(qp: &Qp, g: &mut QpInner, h: Header) {
    // Not a request: the same-host requester left completions in our
    // mailbox while our CQ is armed.
    if h.op == Op::Doorbell {
        on_doorbell(qp, g, &h);
        return;
    }
    if g.state == IBV_QPS_RTR && !g.comm_est_sent {
        g.comm_est_sent = true;
        qp.async_event(IBV_EVENT_COMM_EST);
    }
    // Only a run of SENDs shares one ACK; anything else may answer,
    // complete or fail, and must come after what was acknowledged. A
    // WRITE joins an ACK held back instead (its own ACK takes it over, a
    // NAK queues behind it), and a READ or an atomic queues its response
    // behind what is queued (a stream of them leaves in one `sendmsg`),
    // unless receive completions wait for it.
    let plain = h.fault == Fault::None as u8;
    let plain_send = plain && matches!(h.op, Op::Send | Op::SendImm | Op::SendInv);
    let joins = plain
        && matches!(
            h.op,
            Op::Write | Op::WriteImm | Op::ReadReq | Op::CmpSwap | Op::FetchAdd
        )
        && g.resp.acked_later.is_empty();
    if !plain_send && !joins && !settle_acks(qp, g) {
        g.resp.inc = None;
        return;
    }
    if h.fault != Fault::None as u8 {
        injected(qp, g, h);
        return;
    }
    count_request(g, &h);
    if g.qp_type == IBV_QPT_XRC_RECV && !check_xrc_srq(qp, g, &h) {
        return;
    }
    execute(qp, g, h);
}

fn on_doorbell(qp: &Qp, g: &mut QpInner, h: &Header) {
    if !settle_acks(qp, g) {
        g.resp.inc = None;
        return;
    }
    if h.flags & DOORBELL_DIRECT != 0 {
        if let Some(inc) = g.resp.inc.as_mut() {
            inc.peer_direct = true;
        }
    } else if g.state == IBV_QPS_RTR && !g.comm_est_sent {
        // A request reached us through memory.
        g.comm_est_sent = true;
        qp.async_event(IBV_EVENT_COMM_EST);
    }
    qp.drain_mailbox(g);
}

fn count_request(g: &QpInner, h: &Header) {
    Counters::bump(&g.stats.rcvd_pkts);
    if h.op.request_has_payload() {
        Counters::add(&g.stats.rcvd_bytes, h.length as u64);
    }
    match h.op {
        Op::Write | Op::WriteImm | Op::AtomicWrite => Counters::bump(&g.stats.rx_write_requests),
        Op::ReadReq => Counters::bump(&g.stats.rx_read_requests),
        Op::CmpSwap | Op::FetchAdd => Counters::bump(&g.stats.rx_atomic_requests),
        _ => {}
    }
}

/// An XRC request names the SRQ (in this QP's domain) it lands in, and so
/// the PD its keys are checked against: found here, or the request is
/// refused (false).
fn check_xrc_srq(qp: &Qp, g: &mut QpInner, h: &Header) -> bool {
    let srq = qp
        .xrcd
        .as_ref()
        .and_then(|d| crate::srq::by_number(d, h.xrc_srqn));
    g.xrc_remote = None;
    match srq {
        Some(s) => g.xrc_srq = Some(s),
        None => {
            g.xrc_srq = None;
            // Another process's SRQ in the domain (`remote_srq`):
            // SENDs only.
            let remote = qp.xrcd.as_ref().and_then(|d| d.remote_srq(h.xrc_srqn));
            match remote {
                // Resized (or being destroyed): its receives are out
                // of reach.
                Some(r) if r.closed() => {
                    log::warn!(
                        "qp {:#x}: xrc srq {:#x} of another process no longer shares its queue (resized?): request refused",
                        qp.qpn,
                        r.entry.num
                    );
                    inv_request(qp, g, h.msn);
                    return false;
                }
                Some(r) if matches!(h.op, Op::Send | Op::SendImm) => g.xrc_remote = Some(r),
                Some(r) => {
                    log::warn!(
                        "qp {:#x}: {:?} into xrc srq {:#x} of another process is not supported",
                        qp.qpn,
                        h.op,
                        r.entry.num
                    );
                    inv_request(qp, g, h.msn);
                    return false;
                }
                None => {
                    inv_request(qp, g, h.msn);
                    return false;
                }
            }
        }
    }
    true
}

/// Runs a checked request of the peer's: one step per op.
fn execute(qp: &Qp, g: &mut QpInner, h: Header) {
    let reliable = g.reliable();
    match h.op {
        Op::Send | Op::SendImm | Op::SendInv => on_send(qp, g, h, reliable),
        Op::Write | Op::WriteImm => on_write(qp, g, h, reliable),
        // UC carries no READ or atomics; a peer that sends them anyway is
        // ignored.
        _ if !reliable => drop_message(g, &h),
        // No responder resources for them (rxe and hardware NAK these).
        Op::ReadReq | Op::CmpSwap | Op::FetchAdd if g.attr.max_dest_rd_atomic == 0 => {
            inv_request(qp, g, h.msn)
        }
        // Placed atomically when its 8 bytes are in (`finish_request`).
        Op::AtomicWrite => on_atomic_write(qp, g, h),
        Op::ReadReq => on_read(qp, g, &h),
        Op::CmpSwap | Op::FetchAdd => on_atomic(qp, g, &h),
        _ => {}
    }
}

fn on_send(qp: &Qp, g: &mut QpInner, h: Header, reliable: bool) {
    // A tag-matching SRQ's messages are matched once their header is in.
    if qp.srq.as_ref().is_some_and(|s| s.tm.is_some()) {
        tm::on_send(qp, g, h, reliable);
        return;
    }
    // UC has no RNR: a message with no receive to land in is dropped.
    if !qp.claim_recv(g) {
        if reliable {
            stall(qp, g, h);
        } else {
            drop_message(g, &h);
        }
        return;
    }
    if h.length as u64 > g.recv.room() {
        fail_recv(qp, g, h.msn, IBV_WC_LOC_LEN_ERR, Syndrome::RemInvReq);
        return;
    }
    // Another process's receive: its keys, checked now, while a
    // NAK can still say why.
    if g.xrc_remote
        .as_ref()
        .is_some_and(|r| !r.check(&g.recv, h.length as u64))
    {
        fail_recv(qp, g, h.msn, IBV_WC_LOC_PROT_ERR, Syndrome::RemOp);
        return;
    }
    if g.xrc_remote.is_some() {
        // (The receive's room bounds it.)
        g.xrc_bounce
            .resize(h.length as usize, std::cell::Cell::new(0));
    }
    // SEND_WITH_INV invalidates a type 2 window of this QP's PD
    // bound to this QP; an rkey that names none is an invalid
    // request.
    if h.op == Op::SendInv && mr::invalidate_window(h.imm, qp.target_pd(g), qp.qpn).is_err() {
        if reliable {
            inv_request(qp, g, h.msn);
        } else {
            drop_message(g, &h);
        }
        return;
    }
    start_payload(qp, g, h);
}

fn on_write(qp: &Qp, g: &mut QpInner, h: Header, reliable: bool) {
    let ok = remote_ok(qp, g, &h, h.length as u64, IBV_ACCESS_REMOTE_WRITE);
    if !ok && !reliable {
        // UC: a bad R_Key or range drops the message silently.
        drop_message(g, &h);
        return;
    }
    // A WRITE_WITH_IMM with a bad rkey completes the receive it
    // would have consumed in error rather than leaving it to be
    // flushed; with none posted it is NAKed at once, as a plain
    // WRITE (no RNR wait for a request that cannot succeed).
    if !ok {
        if h.op == Op::WriteImm && qp.claim_recv(g) {
            access_error_on_recv(qp, g, h.msn);
        } else {
            access_error(qp, g, h.msn);
        }
        return;
    }
    if h.op == Op::WriteImm && !qp.claim_recv(g) {
        if reliable {
            stall(qp, g, h);
        } else {
            drop_message(g, &h);
        }
        return;
    }
    start_payload(qp, g, h);
}

fn on_atomic_write(qp: &Qp, g: &mut QpInner, h: Header) {
    if h.length != 8 || !h.remote_addr.is_multiple_of(8) {
        inv_request(qp, g, h.msn);
        return;
    }
    if !remote_ok(qp, g, &h, 8, IBV_ACCESS_REMOTE_WRITE) {
        access_error(qp, g, h.msn);
        return;
    }
    start_payload(qp, g, h);
}

fn on_read(qp: &Qp, g: &mut QpInner, h: &Header) {
    if !remote_ok(qp, g, h, h.length as u64, IBV_ACCESS_REMOTE_READ) {
        access_error(qp, g, h.msn);
        return;
    }
    let pd = qp.target_pd(g);
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    let mut r = Header::new(Op::ReadResp, h.msn);
    r.length = h.length;
    inc.push_resp(
        &r,
        Some(ReadData {
            rkey: h.rkey,
            addr: h.remote_addr,
            len: h.length,
            sent: 0,
            pd,
        }),
    );
}

fn on_atomic(qp: &Qp, g: &mut QpInner, h: &Header) {
    // A misaligned atomic is an invalid request (as rdma-core's
    // soft devices answer it), not an access violation.
    if !h.remote_addr.is_multiple_of(8) {
        inv_request(qp, g, h.msn);
        return;
    }
    let Some(orig) = run_atomic(qp, g, h) else {
        access_error(qp, g, h.msn);
        return;
    };
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    let mut r = Header::new(Op::AtomicResp, h.msn);
    r.compare_add = orig;
    inc.push_resp(&r, None);
    // The target may already see the new value: get the response out
    // before it can act on it (see TAIL). In a stream (another request
    // already read ahead), the end of this pass sends them all in one
    // call instead, moments later: one `sendmsg` per atomic held
    // `ib_atomic_bw` to a fifth of the kernel's message rate.
    let stream = h.flags & FLAG_WAITS == 0 && !inc.backlogged() && inc.conn.staged() >= HDR_LEN;
    if !stream && !flush(qp, g) {
        g.resp.inc = None;
    }
}

/// Runs a compare-and-swap or fetch-and-add on our memory; its original
/// value, or None when the QP, the key or the memory refuses it.
fn run_atomic(qp: &Qp, g: &QpInner, h: &Header) -> Option<u64> {
    let op = if h.op == Op::CmpSwap {
        Operation::CmpSwap {
            compare: h.compare_add,
            swap: h.swap,
        }
    } else {
        Operation::FetchAdd(h.compare_add)
    };
    remote_atomic::run(qp, g, h.rkey, h.remote_addr, op)
}

/// UC: skips a message (its payload is read and thrown away).
fn drop_message(g: &mut QpInner, h: &Header) {
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    if h.op.request_has_payload() && h.length > 0 {
        inc.rx = Rx::Discard(h.length);
    }
}

fn start_payload(qp: &Qp, g: &mut QpInner, h: Header) {
    let Some(inc) = g.resp.inc.as_mut() else {
        return;
    };
    if h.length == 0 {
        finish_request(qp, g, h);
    } else {
        inc.rx = Rx::Payload(h, 0);
    }
}

/// Where payload bytes go was found unusable.
enum DestError {
    /// Our posted receive buffer (its lkey or range).
    Local,
    /// The MR a WRITE targets (e.g. deregistered meanwhile).
    Remote,
}

/// Fills `v` with host iovecs for payload bytes `[off, off + len)` of
/// request `h`: the front receive's scatter list, or the target MR.
fn dest_iov(
    qp: &Qp,
    g: &QpInner,
    h: &Header,
    off: u32,
    len: usize,
    t: &mr::MrTable,
    v: &mut [libc::iovec; MAX_IOV],
) -> Result<usize, DestError> {
    if len == 0 {
        return Ok(0);
    }
    if matches!(h.op, Op::Send | Op::SendImm | Op::SendInv) {
        if !g.claimed {
            return Err(DestError::Local);
        }
        if g.bouncing() {
            // Into our bounce buffer (sized to the message at its header).
            let end = (off as usize).checked_add(len).ok_or(DestError::Local)?;
            let b = g
                .xrc_bounce
                .get(off as usize..end)
                .ok_or(DestError::Local)?;
            v[0] = iov(b.as_ptr() as *const u8, len);
            return Ok(1);
        }
        place::scatter(t, g.recv.sges(), off as u64, len, g.recv.pd_id, v)
            .map(|(n, _)| n)
            .ok_or(DestError::Local)
    } else {
        let p = t
            .remote(
                h.rkey,
                h.remote_addr.wrapping_add(off as u64),
                len as u64,
                qp.target_pd(g),
                IBV_ACCESS_REMOTE_WRITE,
                qp.qpn,
            )
            .map_err(|_| DestError::Remote)?;
        v[0] = iov(p, len);
        Ok(1)
    }
}

fn dest_error(qp: &Qp, g: &mut QpInner, h: &Header, e: DestError, left: u32) {
    settle_acks(qp, g);
    match e {
        // UC: the target MR went away mid-message; the rest is dropped.
        DestError::Remote if !g.reliable() => {
            if let Some(inc) = g.resp.inc.as_mut() {
                inc.rx = if left == 0 {
                    Rx::Header
                } else {
                    Rx::Discard(left)
                };
            }
        }
        // The MR went away while the WRITE was arriving.
        DestError::Remote => access_error(qp, g, h.msn),
        // Our own receive buffer is unusable: the receive completes with a
        // protection error and the requester learns of a remote failure.
        DestError::Local => fail_recv(qp, g, h.msn, IBV_WC_LOC_PROT_ERR, Syndrome::RemOp),
    }
}

/// The receive a request lands in cannot take it: the receive completes
/// with `status`, the requester is told `syn`, and the QP fails.
fn fail_recv(qp: &Qp, g: &mut QpInner, msn: u32, status: ibv_wc_status, syn: Syndrome) {
    settle_acks(qp, g);
    if g.reliable() {
        if let Some(inc) = g.resp.inc.as_mut() {
            inc.nak(msn, syn);
        }
        // The NAK goes out before the receive completes: an application
        // that exits on seeing that completion would take it along.
        if !flush(qp, g) {
            g.resp.inc = None;
        }
    }
    qp.fail_claimed(g, status);
    qp.enter_error(
        g,
        &format_args!(
            "receive for message {msn} failed with {}; NAK {syn:?} sent",
            crate::trace::wc_status_name(status)
        ),
    );
}

fn receive_payload(qp: &Qp, g: &mut QpInner) -> Step {
    let Some(inc) = g.resp.inc.as_mut() else {
        return Step::Closed;
    };
    let Rx::Payload(h, done) = inc.rx else {
        return Step::More;
    };
    let tail = h.length.min(TAIL);
    let bulk = h.length - tail;
    let r = if done < bulk {
        let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
        let table = mr::table();
        let n = match dest_iov(qp, g, &h, done, (bulk - done) as usize, &table, &mut v) {
            Ok(n) => n,
            Err(e) => {
                drop(table);
                dest_error(qp, g, &h, e, h.length - done);
                return Step::More;
            }
        };
        let Some(inc) = g.resp.inc.as_mut() else {
            return Step::Closed;
        };
        // SAFETY: the iovecs cover registered memory with the needed
        // rights, checked under the MR table lock, held across the call.
        unsafe { inc.conn.recv_iov(&v[..n]) }
    } else {
        let off = (done - bulk) as usize;
        let v = [iov(inc.tail[off..].as_mut_ptr(), tail as usize - off)];
        // SAFETY: the iovec covers the unfilled part of our tail buffer.
        unsafe { inc.conn.recv_iov(&v) }
    };
    let k = match r {
        Ok(0) => return Step::Closed,
        Ok(k) => k as u32,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Blocked,
        // The destination is registered but no longer mapped.
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
            let e = if matches!(h.op, Op::Send | Op::SendImm | Op::SendInv) {
                DestError::Local
            } else {
                DestError::Remote
            };
            dest_error(qp, g, &h, e, h.length - done);
            return Step::More;
        }
        Err(e) => return closed_by(&e),
    };
    let Some(inc) = g.resp.inc.as_mut() else {
        return Step::Closed;
    };
    if done + k == h.length {
        inc.rx = Rx::Header;
        finish_request(qp, g, h);
    } else {
        inc.rx = Rx::Payload(h, done + k);
    }
    Step::More
}

/// A request's payload is in. Two orders must hold at once: the requester
/// may only learn of success once the data (and the receive completion) is
/// visible here, and once it is visible the acknowledgement must already be
/// in the kernel, so even a target process that exits on sight cannot lose
/// it (see [`TAIL`]). So the ACK is queued in the socket but held back, the
/// last bytes are placed and the receive completed, and only then is the
/// ACK released. (A ping-pong's WRITE is the exception, below.)
fn finish_request(qp: &Qp, g: &mut QpInner, h: Header) {
    let tail = h.length.min(TAIL);
    let bulk = h.length - tail;
    let mut tail_bytes = [0u8; TAIL as usize];
    if let Some(inc) = g.resp.inc.as_ref() {
        tail_bytes[..tail as usize].copy_from_slice(&inc.tail[..tail as usize]);
    }
    let send = matches!(h.op, Op::Send | Op::SendImm | Op::SendInv);
    let Some(placed) = check_tail(qp, g, &h, bulk, &tail_bytes) else {
        return;
    };
    // Another process's receive: the message goes there now, so a failure
    // (its memory unmapped since, the process gone) can still be NAKed.
    if let Some(r) = g.xrc_remote.clone().filter(|_| g.claimed && h.length > 0) {
        if !place_remote(g, &r, bulk, tail, &tail_bytes) {
            dest_error(qp, g, &h, DestError::Local, 0);
            return;
        }
        g.xrc_placed = true;
    }
    // Tag matching: the message goes where its header matched.
    if send && g.tm.decision.is_some() && !tm::place(qp, g, bulk, tail, &tail_bytes) {
        dest_error(qp, g, &h, DestError::Local, 0);
        return;
    }
    let imm = h.flags & FLAG_IMM != 0;
    let peer = g.resp.inc.as_ref().map(|i| i.peer_qpn).unwrap_or(0);
    let reliable = g.reliable();
    // What a SEND brings is the application's to see only through its
    // receive completion, which follows the ACK here: its tail may be
    // placed first, and the ACK go out at once, with no cork to release.
    // A WRITE's bytes are seen the moment they land (programs poll the
    // last byte), and a program may exit on sight: so its ACK goes to the
    // kernel before the tail, into a corked socket, and leaves as the
    // tail has landed (or the requester could complete it before the bytes
    // are there). Not at the end of the pass: a program that exits sends
    // an RST (its socket holds our framing pad unread), which discards
    // what is corked. A program polling the last byte posts while this
    // thread still holds the QP: its post spins for the lock rather than
    // sleep (`Qp::lock_for_post`).
    // A request that asked for no ACK now (`REQ_ACK_LATER`) gets none of
    // its own: a later one's covers it, or the ACK timer (`owe_ack`).
    let lazy = reliable && h.ack_later();
    if let Some(inc) = g.resp.inc.as_mut() {
        inc.rx = Rx::Header;
        if reliable {
            inc.ack(h.msn, lazy);
        }
    }
    // SENDs whose successors are already read ahead share one ACK, sent
    // when the run ends; their completions wait for it (`acked_later`).
    // Not across XRC requests: each names its SRQ, whose CQ its
    // completion goes to.
    // Unless the ACK waits for a request of ours to carry it: then the
    // completion is written at once (`may_owe_ack`).
    let acked = send && reliable && !lazy && !may_owe_ack(g);
    let later = acked
        && g.qp_type != IBV_QPT_XRC_RECV
        && g.resp.acked_later.len() < MAX_ACKED_LATER
        && g.resp
            .inc
            .as_ref()
            .is_some_and(|i| i.conn.staged() >= HDR_LEN);
    let mut cqe = place::recv_cqe(h.op, imm, h.imm, h.flags & FLAG_SOLICITED != 0);
    let alive = if send {
        if !placed {
            place_tail(qp, g, &h, &tail_bytes);
        }
        true
    } else if lazy || (imm || answering(g)) && may_owe_ack(g) {
        // No ACK now: a later one carries it, or our answer (`owe_ack`),
        // or `exit()`. A WRITE_WITH_IMM's as a SEND's: the program learns
        // of it by polling. A plain WRITE's in a ping-pong only, where an
        // ACK sent now costs the peer a progress-thread wake-up per
        // message; a process that `_exit`s on sight of the bytes then
        // loses it (README).
        place_tail(qp, g, &h, &tail_bytes);
        true
    } else {
        // Nothing waits in `acked_later`: the WRITE's header settled it.
        let cork = |g: &QpInner, on: bool| {
            if let Some(inc) = g.resp.inc.as_ref().filter(|_| reliable) {
                inc.conn.cork(on);
            }
        };
        cork(g, true);
        let alive = send_responses(qp, g);
        place_tail(qp, g, &h, &tail_bytes);
        // A WRITE_WITH_IMM completes before its ACK leaves: once the ACK
        // is out, a same-host peer may place its next SEND in our
        // mailbox, which must come after this.
        if let Some(cqe) = cqe.take() {
            complete_request(qp, g, &h, cqe, peer, acked);
        }
        cork(g, false);
        alive
    };
    if let Some(cqe) = cqe {
        complete_request(qp, g, &h, cqe, peer, acked);
    }
    let alive = if acked && !later {
        settle_acks(qp, g)
    } else {
        alive
    };
    if !alive {
        g.resp.inc = None;
    }
}

/// Refuses the request now, while a NAK can still say why (None: done).
/// A SEND's tail is placed here too, under the same look at the key
/// table: the application sees it only through the receive completion,
/// which comes later (another process's receive takes the message whole,
/// `place_remote`); true when placed.
fn check_tail(
    qp: &Qp,
    g: &mut QpInner,
    h: &Header,
    bulk: u32,
    tail_bytes: &[u8; TAIL as usize],
) -> Option<bool> {
    let send = matches!(h.op, Op::Send | Op::SendImm | Op::SendInv);
    let tail = h.length.min(TAIL);
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let table = mr::table();
    let r = dest_iov(qp, g, h, bulk, tail as usize, &table, &mut v).and_then(|n| {
        if !send || g.bouncing() {
            return Ok(false);
        }
        // SAFETY: the iovecs cover registered memory with the needed
        // rights, checked under the key table's lock (held); the source
        // is our copy of the tail; a fault is caught.
        unsafe { copy_out(&v[..n], tail_bytes) }
            .map(|()| true)
            .map_err(|_| DestError::Local)
    });
    drop(table);
    match r {
        Ok(placed) => Some(placed),
        Err(e) => {
            dest_error(qp, g, h, e, 0);
            None
        }
    }
}

/// Adds a message's tail to the bounce buffer that holds its first `bulk`
/// bytes; false if the buffer is shorter than the message.
fn bounce_tail(g: &QpInner, bulk: u32, tail: u32, tail_bytes: &[u8; TAIL as usize]) -> bool {
    let end = (bulk + tail) as usize;
    let Some(b) = g.xrc_bounce.get(bulk as usize..end) else {
        return false;
    };
    for (c, v) in b.iter().zip(&tail_bytes[..tail as usize]) {
        c.set(*v);
    }
    true
}

/// Writes the message (in our bounce buffer, its tail added now) into
/// another process's receive; false if it could not be written.
fn place_remote(
    g: &QpInner,
    r: &crate::remote_srq::RemoteSrq,
    bulk: u32,
    tail: u32,
    tail_bytes: &[u8; TAIL as usize],
) -> bool {
    let end = (bulk + tail) as usize;
    bounce_tail(g, bulk, tail, tail_bytes)
        // SAFETY: the bounce buffer holds the message's `end` bytes.
        && unsafe { r.write(&g.recv, g.xrc_bounce.as_ptr() as *const u8, end) }
}

/// The receive the request consumed completes, at once or after the ACK
/// it waits for (`acked`, see `settle_acks`).
fn complete_request(qp: &Qp, g: &mut QpInner, h: &Header, cqe: Cqe, peer: u32, acked: bool) {
    if let Some(wr_id) = qp.take_claimed(g) {
        let cqe = Cqe {
            wr_id,
            byte_len: h.length,
            src_qp: peer,
            ..cqe
        };
        let cqe = tm::completion(qp, g, cqe);
        if acked {
            if g.resp.acked_later.capacity() == 0 {
                g.resp.acked_later.reserve_exact(MAX_ACKED_LATER);
            }
            g.resp.acked_later.push(cqe);
        } else {
            qp.complete_recv(g, cqe);
        }
    }
}

/// SENDs that may share one ACK.
const MAX_ACKED_LATER: usize = 32;

/// Hands the queued responses (the ACK of a run of SENDs) to the kernel,
/// then writes the receive completions that waited for it, in order; false
/// if the connection failed. With the socket full the ACK stays queued and
/// the completions are written anyway, as a lone SEND's would be.
fn settle_acks(qp: &Qp, g: &mut QpInner) -> bool {
    if g.resp.acked_later.is_empty() {
        return flush(qp, g);
    }
    // What a same-host peer placed before our ACK came first; what it
    // places once it has the ACK comes after (`complete_recv_drained`).
    qp.drain_mailbox(g);
    let alive = flush(qp, g);
    {
        let done = std::mem::take(&mut g.resp.acked_later);
        for &e in &done {
            qp.complete_recv_drained(g, e);
        }
        // Keep the reserved room for the next run.
        g.resp.acked_later = done;
        g.resp.acked_later.clear();
    }
    alive
}

/// Places the last bytes of a request's payload (see [`TAIL`]).
fn place_tail(qp: &Qp, g: &QpInner, h: &Header, tail_bytes: &[u8; TAIL as usize]) {
    let tail = h.length.min(TAIL);
    let bulk = h.length - tail;
    {
        let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
        let table = mr::table();
        // Checked above; only an MR deregistered in between (a program bug)
        // makes this fail, and then the tail is not placed. Nor is it when
        // the application unmapped the memory: the request was accepted
        // at its header, as hardware accepts one into pages it had pinned.
        if let Ok(n) = dest_iov(qp, g, h, bulk, tail as usize, &table, &mut v) {
            // An atomic write's 8 bytes land at once (the target is one
            // aligned piece: checked at the request's header).
            if h.op == Op::AtomicWrite && n == 1 && (v[0].iov_base as usize).is_multiple_of(8) {
                let mut b = [0u8; 8];
                b.copy_from_slice(&tail_bytes[..8]);
                // SAFETY: 8 aligned bytes of registered memory with remote
                // write rights, checked under the MR table lock (held); a
                // fault is caught.
                let _ = unsafe { guard::store64(v[0].iov_base as *mut u64, u64::from_ne_bytes(b)) };
            } else {
                // SAFETY: the destination is registered memory with the
                // needed rights, checked under the MR table lock (held).
                let _ = unsafe { copy_out(&v[..n], tail_bytes) };
            }
        }
    }
}

/// Copies the first bytes of `src` into the pieces `v` describes, in
/// order; stops at the first fault.
///
/// # Safety
/// Every piece must be writable memory that stays mapped or faults (the
/// copy is guarded), and together they must not exceed `src`.
unsafe fn copy_out(v: &[libc::iovec], src: &[u8]) -> Result<(), guard::Fault> {
    let mut off = 0;
    for piece in v {
        debug_assert!(off + piece.iov_len <= src.len());
        // SAFETY: per the contract; the source range is within `src`.
        unsafe {
            guard::copy(
                piece.iov_base as *mut u8,
                src.as_ptr().add(off),
                piece.iov_len,
            )?
        };
        off += piece.iov_len;
    }
    Ok(())
}

// ---- responses ----------------------------------------------------------------

/// Sends queued responses until done or the socket is full; false if the
/// connection failed.
fn flush(qp: &Qp, g: &mut QpInner) -> bool {
    send_responses(qp, g)
}

/// Responses gathered into one `sendmsg` at most.
const MAX_GATHER: usize = 8;

/// As [`flush`]. Queued responses go out together, several in one
/// `sendmsg`.
fn send_responses(qp: &Qp, g: &mut QpInner) -> bool {
    loop {
        let Some(inc) = g.resp.inc.as_mut() else {
            return true;
        };
        if inc.resp.is_empty() {
            return true;
        }
        inc.ack_owed = false;
        let mut v = [iov(std::ptr::null(), 0); 2 * MAX_GATHER];
        let table = mr::table();
        let Some(n) = gather_responses(qp, inc, &table, &mut v) else {
            return false;
        };
        // SAFETY: the iovecs cover our header buffers and registered memory
        // with remote read rights, checked under the MR table lock (held).
        let res = unsafe { inc.conn.send_iov(&v[..n]) };
        drop(table);
        let k = match res {
            Ok(k) => k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            // A READ's source is registered but no longer mapped. Part of
            // the response may be out, so no NAK can follow it: the
            // connection ends (the requester's READ fails) and this QP
            // reports the access error.
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                g.resp.inc = None;
                qp.async_event(IBV_EVENT_QP_ACCESS_ERR);
                qp.enter_error(
                    g,
                    &"local protection: a READ's source memory is no longer mapped",
                );
                return true;
            }
            Err(_) => return false,
        };
        retire_sent(inc, k);
    }
}

/// The iovecs of the first queued responses (headers, READ data checked
/// under the key table `table`); None when a READ's memory went away
/// under the first one (the connection must end).
fn gather_responses(
    qp: &Qp,
    inc: &InConn,
    table: &mr::MrTable,
    v: &mut [libc::iovec; 2 * MAX_GATHER],
) -> Option<usize> {
    let mut n = 0;
    for r in inc.resp.iter().take(MAX_GATHER) {
        let before = n;
        if r.off < HDR_LEN {
            v[n] = iov(r.hdr[r.off..].as_ptr(), HDR_LEN - r.off);
            n += 1;
        }
        if let Some(d) = &r.read {
            let left = d.len - d.sent;
            if left > 0 {
                match table.remote(
                    d.rkey,
                    d.addr.wrapping_add(d.sent as u64),
                    left as u64,
                    d.pd,
                    IBV_ACCESS_REMOTE_READ,
                    qp.qpn,
                ) {
                    Ok(p) => {
                        v[n] = iov(p, left as usize);
                        n += 1;
                    }
                    // The MR was deregistered mid-response: the
                    // requester cannot be told cleanly any more; drop
                    // the connection.
                    Err(_) if before == 0 => return None,
                    // Send the responses before it first.
                    Err(_) => {
                        n = before;
                        break;
                    }
                }
            }
        }
    }
    Some(n)
}

/// Retires the `k` bytes that went out, in order; the first response not
/// finished keeps its progress.
fn retire_sent(inc: &mut InConn, mut k: usize) {
    while let Some(r) = inc.resp.front_mut() {
        let h = (HDR_LEN - r.off.min(HDR_LEN)).min(k);
        r.off += h;
        k -= h;
        let mut done = r.off == HDR_LEN;
        if let Some(d) = r.read.as_mut() {
            let m = ((d.len - d.sent) as usize).min(k);
            d.sent += m as u32;
            k -= m;
            done = done && d.sent == d.len;
        }
        if !done {
            break;
        }
        if let Some(d) = &r.read {
            inc.read_bytes -= d.len as u64;
        }
        inc.resp.pop_front();
    }
}
