//! RC on a RoCEv2-mode device (`RSW_ROCEV2`): the QP's requests,
//! responses and ACKs are RoCEv2 packets through the device's port 4791
//! (`roce_ud::RocePort`, which hands this engine the RC packets whose
//! destination QPN is ours), so rsw's RC QPs talk to rxe and RoCE NICs.
//!
//! Requester: SEND, SEND with immediate, SEND with invalidate, WRITE,
//! WRITE with immediate, READ and the atomics (`atomic`), cut into
//! packets by the path MTU, PSNs from `sq_psn`, at most [`WINDOW`]
//! packets unacked; AckReq on each message's last packet, every
//! [`ACK_EVERY`] packets and where the window closes (else a message
//! longer than the window would wait for an ACK nobody asked for); binds
//! and local invalidates run at their turn (`keys`).
//! Completer: an ACK completes the messages it covers, in order, and one
//! inside a message marks its packets up to there answered; any advance
//! restarts the timer and the retry counts (IBA). A NAK sequence error
//! goes back to the NAKed PSN (go-back-N); READ responses land where
//! their PSN says, and the READ is asked again from the first missing
//! one when [`REORDER`] came past it (fewer may be reordered, not lost),
//! a later answer shows it lost, or the timer runs out. An RNR NAK waits
//! its timer and retries (`rnr_retry`, 7 forever); the local ACK timeout
//! (`timeout`, 4.096 us * 2^timeout) resends from the first PSN not
//! answered, `retry_cnt` times without progress, then the WR fails with
//! IBV_WC_RETRY_EXC_ERR and the rest flush. A lost NAK (one per gap) or
//! last ACK is the timer's to make good.
//! Responder: PSNs against `rq_psn` (a duplicate is ACKed again, a READ
//! answered again, an atomic answered from its saved result; one NAK per
//! gap), R_Key checks (NAK remote access error, QP to ERR), receives for
//! SENDs (none: RNR NAK with `min_rnr_timer`), WRITE placement, READ
//! responses, atomics (`atomic`), SEND with invalidate (`keys`).
//! UC QPs share the state and the packet helpers (`uc`).
//! What the QP sends is queued (`roce_tx`) and flushed with one
//! `sendmmsg` where the engine's turn ends: after `pump`, the timer, or
//! the port's batch of received packets (whose ACKs coalesce).
//! Not yet: ATOMIC_WRITE, XRC (a WR fails with IBV_WC_LOC_QP_OP_ERR).

use std::collections::{BTreeSet, VecDeque};

use verbs_abi::*;

use super::roce_tx::TxQueue;
use super::ud_recv::write_recv;
use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::progress::engine;
use crate::roce::headers::{Aeth, Bth, ImmDt, NakCode, Reth, Syndrome};
use crate::roce::opcode::{Ext, Opcode, Transport};
use crate::roce::packet::{Headers, Packet};
use crate::roce::rc::{self, psn_add, psn_diff, Kind, Outstanding, Place, PsnCheck, PSN_MASK};
use crate::stats::Counters;
use crate::util::mono_ns;
use crate::wire::Op;
use crate::wq::rnr_timer_ns;
use crate::{guard, mr, place};

mod atomic;
mod keys;
mod uc;

/// Packets sent and not yet acknowledged, at most: the socket buffers
/// and the peer's receive ring take a window, not a whole queue.
const WINDOW: i32 = 128;
/// A long message asks for an ACK this often (besides on its last
/// packet and where the window closes), so that the window slides and a
/// loss costs less than the whole message.
const ACK_EVERY: u32 = 32;
/// READ responses this far ahead of the first missing one mean it was
/// lost, fewer that it may be late (the network reordered them).
const REORDER: i32 = 3;
/// READ responses placed ahead of a missing one, at most.
const MAX_AHEAD: usize = 1024;
/// The largest payload of a packet (IBA's largest MTU).
const MAX_PAYLOAD: usize = 4096;
/// The port's socket was full: sending is tried again this much later.
const RETRY_SOON_NS: u64 = 50_000;
/// READ responses sent in one go: between two bursts the progress thread
/// reads the socket, so that a READ the requester asked again (a gap it
/// saw, maybe only reordering) replaces what was owed rather than adding
/// to it. A burst of all of a long READ's responses, once for each time
/// it was asked again, buried the ACKs behind it for seconds in a slow
/// VM under netem (tests/vm_rsw_rocev2_rc_lossy, roce_bulk_peer).
const READ_BURST: u32 = 64;
/// AETH credits: not counted (what rxe and RoCE NICs send).
const NO_CREDITS: u8 = 31;

/// A message being sent or awaiting its ACK or READ responses.
#[derive(Clone, Copy, Debug)]
struct Msg {
    /// Its WQE.
    seq: u64,
    o: Outstanding,
}

impl std::ops::Deref for Msg {
    type Target = Outstanding;
    fn deref(&self) -> &Outstanding {
        &self.o
    }
}

impl std::ops::DerefMut for Msg {
    fn deref_mut(&mut self) -> &mut Outstanding {
        &mut self.o
    }
}

/// The message the responder is in the middle of.
#[derive(Clone, Copy, Debug)]
struct Rx {
    kind: Kind,
    va: u64,
    rkey: u32,
    len: u64,
    off: u64,
}

/// Writes a WRITE packet's payload where its message has reached in the
/// memory the RETH named; false where the key grants no such write or
/// the memory is gone.
fn write_payload(qp: &Qp, g: &QpInner, r: &Rx, payload: &[u8]) -> bool {
    let t = mr::table();
    let dst = t.remote(
        r.rkey,
        r.va.wrapping_add(r.off),
        payload.len() as u64,
        qp.target_pd(g),
        IBV_ACCESS_REMOTE_WRITE,
        qp.qpn,
    );
    dst.is_ok_and(|d| {
        // SAFETY: the MR table (held) checked the payload's length of
        // writable bytes there; a fault is caught.
        unsafe { guard::copy(d, payload.as_ptr(), payload.len()) }.is_ok()
    })
}

/// READ responses to send.
#[derive(Clone, Copy, Debug)]
struct ReadOut {
    psn: u32,
    va: u64,
    rkey: u32,
    len: u64,
    next: u32,
    n: u32,
    msn: u32,
}

/// What the responder owes the requester, in PSN order: READ responses,
/// and the ACKs, NAKs and atomic responses of requests that came while
/// a READ was still being answered. A requester takes a response past a
/// READ it still waits for as a sign the READ's responses were lost and
/// asks again (rxe's completer, and IBA's rule for NICs), so nothing
/// overtakes them.
#[derive(Clone, Copy, Debug)]
enum Owed {
    Read(ReadOut),
    Reply(Headers),
}

impl Owed {
    fn psn(&self) -> u32 {
        match self {
            Owed::Read(r) => r.psn,
            Owed::Reply(h) => h.bth.psn,
        }
    }
}

/// An RC QP's RoCEv2 state (`QpInner::roce_rc`).
#[derive(Default)]
pub struct RcState {
    /// From RTR on: packets flow.
    live: bool,
    next_psn: u32,
    msgs: VecDeque<Msg>,
    /// The first message with packets to (re)send.
    cursor: usize,
    retries: u8,
    rnr_retries: u8,
    /// When the oldest unacknowledged packet is sent again (0: none).
    deadline: u64,
    /// An RNR wait ends then (0: none).
    rnr_until: u64,
    /// A gap went back to this PSN already (once per gap).
    gap_at: Option<u32>,
    /// READ responses of the oldest READ (`ahead_of`: its WQE) placed
    /// ahead of the first missing, by index.
    ahead: BTreeSet<u32>,
    ahead_of: Option<u64>,
    epsn: u32,
    msn: u32,
    /// A NAK (sequence error or RNR) for `epsn` was sent.
    nak_sent: bool,
    rx: Option<Rx>,
    owed: VecDeque<Owed>,
    /// The atomics executed lately, for their requests sent again.
    replay: crate::roce::atomic::Replay,
    /// Packets ready for the port's socket.
    tx: TxQueue,
}

/// Entering RTR: the responder expects `rq_psn`.
pub fn start(g: &mut QpInner) {
    g.roce_rc = RcState {
        live: true,
        epsn: g.attr.rq_psn & PSN_MASK,
        tx: std::mem::take(&mut g.roce_rc.tx),
        ..RcState::default()
    };
}

impl crate::wq::RoceRcState for RcState {
    /// The QP entered ERR: nothing more is sent or taken, but what was
    /// queued still goes (a NAK that refused the request).
    fn on_error(&mut self) {
        let tx = std::mem::take(&mut self.tx);
        *self = RcState {
            tx,
            ..RcState::default()
        };
    }
}

/// Entering RTS from RTR: requests start at `sq_psn`.
pub fn at_rts(g: &mut QpInner) {
    if g.roce_rc.msgs.is_empty() {
        g.roce_rc.next_psn = g.attr.sq_psn & PSN_MASK;
    }
}

fn mtu(g: &QpInner) -> usize {
    rc::mtu_bytes(g.attr.path_mtu)
}

fn bth(g: &QpInner, op: Opcode, psn: u32) -> Bth {
    Bth::new(op, g.attr.dest_qp_num, psn)
}

/// Queues one packet for the peer (`roce_tx`); false when the queue is
/// full and the socket takes none of it (the packet is not queued).
/// Other failures lose it, as a wire would.
fn send(g: &mut QpInner, hdr: &Headers, payload: &[u8]) -> bool {
    if g.roce_rc.tx.is_full() && !flush_queue(g) && g.roce_rc.tx.is_full() {
        return false;
    }
    let (Some(port), Some(r)) = (g.roce.as_ref(), g.remote.as_ref()) else {
        return true;
    };
    let tclass = g.attr.ah_attr.grh.traffic_class;
    match port.queue_ib(&mut g.roce_rc.tx, &r.gid, tclass, hdr, payload) {
        Ok(replaced) => {
            if replaced {
                Counters::bump(&g.stats.roce_acks_coalesced);
            }
        }
        Err(e) => log::debug!("RoCEv2 RC: a packet lost: {e}"),
    }
    true
}

/// Hands what the QP queued to the port's socket, as far as it takes
/// it; true when all went.
fn flush_queue(g: &mut QpInner) -> bool {
    if g.roce_rc.tx.is_empty() {
        return true;
    }
    let Some(port) = g.roce.as_ref() else {
        g.roce_rc.tx = TxQueue::default();
        return true;
    };
    let f = g.roce_rc.tx.flush(&**port);
    let s = &g.stats;
    Counters::add(&s.roce_tx_pkts, f.pkts);
    Counters::add(&s.roce_tx_calls, f.calls);
    Counters::add(&s.roce_tx_batches, f.batches);
    g.roce_rc.tx.is_empty()
}

/// Sends what the QP queued; what the socket has no room for now goes
/// a little later.
pub fn flush(qp: &Qp, g: &mut QpInner) {
    if !flush_queue(g) {
        retry_soon(qp);
    }
}

fn retry_soon(qp: &Qp) {
    if let Ok(e) = engine() {
        e.add_timer(mono_ns() + RETRY_SOON_NS, qp.serial);
    }
}

/// Copies bytes `range` of send WQE `seq`'s message into `out`.
fn gather(qp: &Qp, g: &QpInner, seq: u64, at: usize, out: &mut [u8]) -> Result<(), ()> {
    if out.is_empty() {
        return Ok(());
    }
    if g.sq.wqe(seq).inline {
        let src = g.sq.inline_data(seq).get(at..at + out.len()).ok_or(())?;
        out.copy_from_slice(src);
        return Ok(());
    }
    mr::table()
        .gather(g.sq.sges(seq), at as u64, qp.pd_id, out)
        .map_err(|_| ())
}

/// Copies a READ response's bytes into send WQE `seq`'s buffers at `at`.
fn scatter(qp: &Qp, g: &QpInner, seq: u64, at: u64, bytes: &[u8]) -> Result<(), ()> {
    if bytes.is_empty() {
        return Ok(());
    }
    mr::table()
        .scatter(g.sq.sges(seq), at, qp.pd_id, bytes)
        .map_err(|_| ())
}

// ---- requester ----

/// What a WQE sends as, or the status it fails with before leaving.
fn kind_of(op: Op) -> Result<Option<Kind>, ibv_wc_status> {
    match op {
        Op::Send => Ok(Some(Kind::Send { imm: false })),
        Op::SendImm => Ok(Some(Kind::Send { imm: true })),
        Op::Write => Ok(Some(Kind::Write { imm: false })),
        Op::WriteImm => Ok(Some(Kind::Write { imm: true })),
        // The invalidate rides on the last packet (`keys`).
        Op::SendInv => Ok(Some(Kind::Send { imm: false })),
        Op::ReadReq | Op::CmpSwap | Op::FetchAdd => Ok(None),
        // ATOMIC_WRITE: not spoken yet; binds run at their turn (`keys`).
        _ => Err(IBV_WC_LOC_QP_OP_ERR),
    }
}

/// Sends packet `msgs[idx].sent` of a message (a READ: its request);
/// false when the socket is full.
fn send_next_packet(qp: &Qp, g: &mut QpInner, idx: usize) -> bool {
    let m = g.roce_rc.msgs[idx];
    let w = *g.sq.wqe(m.seq);
    let mtu = mtu(g);
    if m.read && atomic::is_atomic(w.op) {
        return atomic::send_request(g, idx);
    }
    if m.read {
        let off = m.got as u64 * mtu as u64;
        let mut h = Headers::new(bth(g, Opcode::RcReadRequest, psn_add(m.psn, m.got)));
        h.bth.ack_req = true;
        h.reth = Some(Reth {
            va: w.remote_addr.wrapping_add(off),
            rkey: w.rkey,
            dma_len: (w.len as u64).saturating_sub(off) as u32,
        });
        if !send(g, &h, &[]) {
            return false;
        }
        g.roce_rc.msgs[idx].sent = m.npkts;
        return true;
    }
    let Ok(Some(kind)) = kind_of(w.op) else {
        return true;
    };
    let i = m.sent;
    let seg = rc::segment(w.len as usize, mtu, i);
    let mut data = [0u8; MAX_PAYLOAD];
    let data = &mut data[..seg.len()];
    if gather(qp, g, m.seq, seg.start, data).is_err() {
        qp.fail_head(g, IBV_WC_LOC_PROT_ERR);
        return true;
    }
    let place = Place::of(i, m.npkts);
    let mut h = Headers::new(bth(g, rc::opcode(kind, i, m.npkts), psn_add(m.psn, i)));
    if place.starts() && matches!(kind, Kind::Write { .. }) {
        h.reth = Some(Reth {
            va: w.remote_addr,
            rkey: w.rkey,
            dma_len: w.len,
        });
    }
    // Where the window closes nothing more is sent until an ACK: ask.
    let psn = psn_add(m.psn, i);
    let edge = oldest_unacked(&g.roce_rc).is_some_and(|b| psn_diff(psn, b) >= WINDOW - 1);
    h.bth.ack_req = edge || (i + 1).is_multiple_of(ACK_EVERY);
    if place.ends() {
        h.bth.ack_req = true;
        h.bth.se = w.solicited;
        if matches!(kind, Kind::Send { imm: true } | Kind::Write { imm: true }) {
            // The WQE holds the application's big-endian bytes.
            h.imm = Some(ImmDt {
                imm: u32::from_be(w.imm),
            });
        }
        if w.op == Op::SendInv {
            keys::mark_invalidate(&mut h, w.imm);
        }
    }
    if !send(g, &h, data) {
        return false;
    }
    g.roce_rc.msgs[idx].sent += 1;
    true
}

/// Whether the local memory a WQE names is registered as it needs.
fn local_ok(qp: &Qp, g: &QpInner, seq: u64) -> bool {
    let w = g.sq.wqe(seq);
    if w.inline {
        return true;
    }
    let write = matches!(w.op, Op::ReadReq | Op::CmpSwap | Op::FetchAdd);
    let t = mr::table();
    g.sq.sges(seq).iter().all(|s| {
        t.local(s.lkey, s.addr, s.length as u64, qp.pd_id, write)
            .is_ok()
    })
}

/// Sends what may go: packets to resend, then new messages, within the
/// window; then READ responses owed.
pub fn pump(qp: &Qp, g: &mut QpInner) {
    pump_queueing(qp, g);
    flush(qp, g);
}

/// `pump`, leaving what it sends queued for the caller to flush.
fn pump_queueing(qp: &Qp, g: &mut QpInner) {
    if !g.roce_rc.live {
        return;
    }
    if g.qp_type == IBV_QPT_UC {
        return uc::pump(qp, g);
    }
    if !send_read_responses(qp, g) {
        return;
    }
    if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) || g.roce_rc.rnr_until != 0 {
        return;
    }
    loop {
        let st = &g.roce_rc;
        let base = oldest_unacked(st);
        if st.cursor < st.msgs.len() {
            let m = st.msgs[st.cursor];
            if m.sent >= m.npkts {
                g.roce_rc.cursor += 1;
                continue;
            }
            let psn = psn_add(m.psn, m.sent);
            if base.is_some_and(|b| psn_diff(psn, b) >= WINDOW) {
                break;
            }
            if !send_next_packet(qp, g, st_cursor(g)) {
                retry_soon(qp);
                break;
            }
            if g.state == IBV_QPS_ERR {
                return;
            }
            continue;
        }
        if g.state != IBV_QPS_RTS || g.tx_blocked {
            break;
        }
        let Some(seq) = g.sq.next_to_transmit() else {
            break;
        };
        if base.is_some_and(|b| psn_diff(st.next_psn, b) >= WINDOW) {
            break;
        }
        let w = *g.sq.wqe(seq);
        if keys::is_local(w.op) && w.local_err == 0 {
            // At its turn: once every message before it has completed.
            if !g.roce_rc.msgs.is_empty() {
                break;
            }
            keys::run_local(qp, g, seq);
            continue;
        }
        let st = &g.roce_rc;
        // An atomic is a READ of one response to the queue (`atomic`).
        let read = matches!(w.op, Op::ReadReq | Op::CmpSwap | Op::FetchAdd);
        let reads = st.msgs.iter().filter(|m| m.read).count();
        if read && reads >= (g.attr.max_rd_atomic as usize).max(1) {
            break;
        }
        let err = match kind_of(w.op) {
            _ if w.local_err != 0 => w.local_err,
            Err(status) => status,
            // Its SGE holds exactly the 8 bytes it returns.
            Ok(_) if atomic::is_atomic(w.op) && w.len != 8 => IBV_WC_LOC_LEN_ERR,
            Ok(_) if !local_ok(qp, g, seq) => IBV_WC_LOC_PROT_ERR,
            Ok(_) => 0,
        };
        if err != 0 {
            // It fails once every earlier WQE has completed; nothing after
            // it leaves (`after_send_completions`).
            if w.op != Op::BindMw && w.op != Op::LocalInv && kind_of(w.op).is_err() {
                log::warn!(
                    "qp {:#x}: RSW_ROCEV2 RC does not carry {:?} yet",
                    qp.qpn,
                    w.op
                );
            }
            g.sq.wqe_mut(seq).local_err = err;
            g.sq.transmitted();
            g.tx_blocked = true;
            if g.roce_rc.msgs.is_empty() {
                qp.after_send_completions(g);
                return;
            }
            break;
        }
        let npkts = rc::packets(w.len as usize, mtu(g));
        let st = &mut g.roce_rc;
        st.msgs.push_back(Msg {
            seq,
            o: Outstanding {
                psn: st.next_psn,
                npkts,
                sent: 0,
                read,
                got: 0,
            },
        });
        st.next_psn = psn_add(st.next_psn, npkts);
        g.sq.transmitted();
    }
    arm_retry(qp, g);
}

fn st_cursor(g: &QpInner) -> usize {
    g.roce_rc.cursor
}

/// Arms the local ACK timeout while messages await their answer.
fn arm_retry(qp: &Qp, g: &mut QpInner) {
    let timeout = rc::ack_timeout_ns(g.attr.timeout);
    let st = &mut g.roce_rc;
    if st.msgs.is_empty() || st.rnr_until != 0 {
        st.deadline = 0;
        return;
    }
    if st.deadline == 0 {
        if let Some(t) = timeout {
            st.deadline = mono_ns() + t;
            if let Ok(e) = engine() {
                e.add_timer(st.deadline, qp.serial);
            }
        }
    }
}

/// Everything from PSN `p` on is sent again.
fn rewind(st: &mut RcState, p: u32) {
    let n = st.msgs.len();
    st.cursor = rc::rewind(st.msgs.iter_mut().map(|m| &mut m.o), p).unwrap_or(n);
}

/// The oldest PSN not acknowledged.
fn oldest_unacked(st: &RcState) -> Option<u32> {
    st.msgs.front().map(|m| m.o.unanswered())
}

/// Completes the messages an acknowledgement of PSN `p` covers; true if
/// it advanced (IBA: the retry counts start over and the timer anew).
fn complete_upto(qp: &Qp, g: &mut QpInner, p: u32) -> bool {
    let mut completed = false;
    while let Some(m) = g.roce_rc.msgs.front().copied() {
        if !rc::acked(&m, p) {
            break;
        }
        if m.read {
            // Acknowledged past a READ whose responses did not all come:
            // they were lost; ask again (once for this gap).
            let want = psn_add(m.psn, m.got);
            if g.roce_rc.gap_at != Some(want) {
                g.roce_rc.gap_at = Some(want);
                rewind(&mut g.roce_rc, want);
            }
            break;
        }
        let st = &mut g.roce_rc;
        st.msgs.pop_front();
        st.cursor = st.cursor.saturating_sub(1);
        let w = *g.sq.wqe(m.seq);
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
        completed = true;
    }
    // Inside the oldest message: its packets up to `p` need no resend.
    let partial = g
        .roce_rc
        .msgs
        .front_mut()
        .is_some_and(|f| f.o.acknowledge(p));
    if completed || partial {
        let st = &mut g.roce_rc;
        st.retries = 0;
        st.rnr_retries = 0;
        st.deadline = 0;
    }
    if completed {
        qp.after_send_completions(g);
    }
    completed || partial
}

/// Whether `p` acknowledges something sent.
fn acks_sent(st: &RcState, p: u32) -> bool {
    rc::answers_sent(st.msgs.front().map(|m| m.o.psn), st.next_psn, p)
}

fn on_ack(qp: &Qp, g: &mut QpInner, psn: u32, aeth: Aeth) {
    if !acks_sent(&g.roce_rc, psn) {
        log::debug!(
            "qp {:#x}: {aeth:?} for PSN {psn:#x} outside what was sent",
            qp.qpn
        );
        return;
    }
    let before = psn_add(psn, PSN_MASK);
    match aeth.syndrome {
        Syndrome::Ack { .. } => {
            complete_upto(qp, g, psn);
        }
        Syndrome::RnrNak { timer } => {
            complete_upto(qp, g, before);
            if g.state == IBV_QPS_ERR {
                return;
            }
            let st = &mut g.roce_rc;
            st.rnr_retries = st.rnr_retries.saturating_add(1);
            if g.attr.rnr_retry != 7 && st.rnr_retries > g.attr.rnr_retry {
                qp.fail_head(g, IBV_WC_RNR_RETRY_EXC_ERR);
                return;
            }
            rewind(st, psn);
            st.deadline = 0;
            st.rnr_until = mono_ns() + rnr_timer_ns(timer);
            if let Ok(e) = engine() {
                e.add_timer(st.rnr_until, qp.serial);
            }
        }
        Syndrome::Nak(NakCode::PsnSequenceError) => {
            complete_upto(qp, g, before);
            let st = &mut g.roce_rc;
            if g.state != IBV_QPS_ERR && st.rnr_until == 0 {
                rewind(st, psn);
            }
        }
        Syndrome::Nak(code) => {
            complete_upto(qp, g, before);
            if g.state == IBV_QPS_ERR {
                return;
            }
            let status = match code {
                NakCode::RemoteAccessError => IBV_WC_REM_ACCESS_ERR,
                NakCode::RemoteOperationalError => IBV_WC_REM_OP_ERR,
                NakCode::InvalidRdRequest => IBV_WC_REM_INV_RD_REQ_ERR,
                _ => IBV_WC_REM_INV_REQ_ERR,
            };
            qp.fail_head(g, status);
        }
    }
}

fn on_read_response(qp: &Qp, g: &mut QpInner, p: &Packet) {
    let psn = p.hdr.bth.psn;
    if !acks_sent(&g.roce_rc, psn) {
        return;
    }
    // A response acknowledges every request before it.
    complete_upto(qp, g, psn_add(psn, PSN_MASK));
    let Some(m) = g.roce_rc.msgs.front().copied() else {
        return;
    };
    if !m.read || m.sent < m.npkts {
        return;
    }
    let want = psn_add(m.psn, m.got);
    let d = psn_diff(psn, want);
    if d < 0 {
        return;
    }
    let idx = m.got + d as u32;
    if idx >= m.npkts {
        return;
    }
    let st = &mut g.roce_rc;
    if st.ahead_of != Some(m.seq) {
        st.ahead_of = Some(m.seq);
        st.ahead.clear();
    }
    if d > 0 && (st.ahead.contains(&idx) || st.ahead.len() >= MAX_AHEAD) {
        return;
    }
    let w = *g.sq.wqe(m.seq);
    let seg = rc::segment(w.len as usize, mtu(g), idx);
    if p.payload.len() != seg.len() {
        return;
    }
    if scatter(qp, g, m.seq, seg.start as u64, p.payload).is_err() {
        qp.fail_head(g, IBV_WC_LOC_PROT_ERR);
        return;
    }
    let st = &mut g.roce_rc;
    if d > 0 {
        // Placed (its PSN says where), but ahead of one missing: a few
        // behind it may only be late (reordered); more mean it was
        // lost: ask again from the first missing, once.
        st.ahead.insert(idx);
        if d >= REORDER && st.gap_at != Some(want) {
            st.gap_at = Some(want);
            rewind(st, want);
        }
        return;
    }
    st.gap_at = None;
    st.retries = 0;
    st.deadline = 0;
    let f = st.msgs.front_mut().expect("checked above");
    f.got += 1;
    while st.ahead.remove(&f.got) {
        f.got += 1;
    }
    if f.got == f.npkts {
        st.msgs.pop_front();
        st.cursor = st.cursor.saturating_sub(1);
        st.ahead.clear();
        st.ahead_of = None;
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
        qp.after_send_completions(g);
    }
}

/// The local ACK timeout, an RNR wait's end, or room in the socket.
pub fn on_timer(qp: &Qp, g: &mut QpInner, now: u64) {
    timer_queueing(qp, g, now);
    flush(qp, g);
}

fn timer_queueing(qp: &Qp, g: &mut QpInner, now: u64) {
    if !g.roce_rc.live {
        return;
    }
    let st = &mut g.roce_rc;
    if st.rnr_until != 0 && now >= st.rnr_until {
        st.rnr_until = 0;
    }
    if st.deadline != 0 && now >= st.deadline {
        st.deadline = 0;
        if let Some(p) = oldest_unacked(st) {
            log::debug!(
                "qp {:#x}: ACK timeout {} at PSN {p:#x} (next {:#x}, {} messages)",
                qp.qpn,
                st.retries + 1,
                st.next_psn,
                st.msgs.len()
            );
            st.retries = st.retries.saturating_add(1);
            if st.retries > g.attr.retry_cnt {
                qp.fail_head(g, IBV_WC_RETRY_EXC_ERR);
                return;
            }
            st.gap_at = None;
            rewind(st, p);
        }
    }
    pump_queueing(qp, g);
}

// ---- responder ----

fn send_ack(g: &mut QpInner, psn: u32, syndrome: Syndrome) {
    let mut h = Headers::new(bth(g, Opcode::RcAck, psn));
    h.aeth = Some(Aeth {
        syndrome,
        msn: g.roce_rc.msn,
    });
    reply(g, &h);
}

/// Sends a response without payload (an ACK, a NAK, an atomic's),
/// behind READ responses still owed (`Owed`).
fn reply(g: &mut QpInner, h: &Headers) {
    if g.roce_rc.owed.is_empty() {
        // A lost response is made good by the requester's retry.
        let _ = send(g, h, &[]);
    } else {
        g.roce_rc.owed.push_back(Owed::Reply(*h));
        Counters::bump(&g.stats.roce_replies_held);
    }
}

/// Refuses the request at `epsn` for good: NAK with `code`, QP to ERR.
/// What was owed is dropped (the QP answers nothing more), so the NAK
/// goes at once.
fn nak_fatal(qp: &Qp, g: &mut QpInner, code: NakCode, why: &str) {
    g.roce_rc.owed.clear();
    send_ack(g, g.roce_rc.epsn, Syndrome::Nak(code));
    qp.fail_claimed(g, IBV_WC_REM_INV_REQ_ERR);
    qp.enter_error(g, &format_args!("RoCEv2 RC: {why}"));
}

/// Sends the responses owed (`Owed`), [`READ_BURST`] at most, the rest
/// from the progress thread once it has read what came meanwhile (a READ
/// asked again cuts short what was owed: `on_read_request`); false when
/// the socket is full.
fn send_read_responses(qp: &Qp, g: &mut QpInner) -> bool {
    let mtu = mtu(g);
    let pd = qp.target_pd(g);
    let mut burst = 0;
    while let Some(o) = g.roce_rc.owed.front().copied() {
        if burst == READ_BURST {
            if let Ok(e) = engine() {
                e.add_timer(mono_ns(), qp.serial);
            }
            return true;
        }
        burst += 1;
        let r = match o {
            Owed::Read(r) => r,
            Owed::Reply(h) => {
                if !send(g, &h, &[]) {
                    retry_soon(qp);
                    return false;
                }
                g.roce_rc.owed.pop_front();
                continue;
            }
        };
        let seg = rc::segment(r.len as usize, mtu, r.next);
        let op = rc::opcode(Kind::ReadResponse, r.next, r.n);
        let mut h = Headers::new(bth(g, op, psn_add(r.psn, r.next)));
        if op.has(Ext::Aeth) {
            h.aeth = Some(Aeth {
                syndrome: Syndrome::Ack {
                    credits: NO_CREDITS,
                },
                msn: r.msn,
            });
        }
        let mut data = [0u8; MAX_PAYLOAD];
        let data = &mut data[..seg.len()];
        let ok = {
            let t = mr::table();
            match t.remote(
                r.rkey,
                r.va.wrapping_add(seg.start as u64),
                seg.len() as u64,
                pd,
                IBV_ACCESS_REMOTE_READ,
                qp.qpn,
            ) {
                Ok(_) if data.is_empty() => true,
                Ok(src) => {
                    // SAFETY: the MR table (held) checked `seg.len()`
                    // bytes readable there; a fault is caught.
                    let r = unsafe { guard::copy(data.as_mut_ptr(), src, data.len()) };
                    r.is_ok()
                }
                Err(_) => false,
            }
        };
        if !ok {
            nak_fatal(qp, g, NakCode::RemoteAccessError, "READ of memory gone");
            return true;
        }
        if !send(g, &h, data) {
            retry_soon(qp);
            return false;
        }
        let done = match g.roce_rc.owed.front_mut() {
            Some(Owed::Read(f)) => {
                f.next += 1;
                f.next == f.n
            }
            _ => false,
        };
        if done {
            g.roce_rc.owed.pop_front();
        }
    }
    true
}

fn on_read_request(qp: &Qp, g: &mut QpInner, psn: u32, reth: Reth, dup: bool) {
    let n = rc::packets(reth.dma_len as usize, mtu(g));
    if !dup {
        if g.roce_rc.rx.is_some() {
            return nak_fatal(qp, g, NakCode::InvalidRequest, "READ inside a message");
        }
        let allowed = g.attr.qp_access_flags & IBV_ACCESS_REMOTE_READ != 0
            && mr::table()
                .remote(
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    qp.target_pd(g),
                    IBV_ACCESS_REMOTE_READ,
                    qp.qpn,
                )
                .is_ok();
        if !allowed {
            return nak_fatal(
                qp,
                g,
                NakCode::RemoteAccessError,
                "READ refused by the R_Key check",
            );
        }
        let st = &mut g.roce_rc;
        st.msn = psn_add(st.msn, 1);
        st.epsn = psn_add(psn, n);
    }
    if dup {
        // The requester went back to `psn`: responses queued from there
        // on would only repeat what it asks for again (on a slow link
        // the stale ones pile up ahead of what it waits for), and it
        // sends the requests after it again, answered again.
        g.roce_rc.owed.retain_mut(|o| {
            let d = psn_diff(psn, o.psn());
            if d <= 0 {
                return false;
            }
            match o {
                Owed::Read(r) => {
                    r.n = r.n.min(d as u32).max(r.next);
                    r.next < r.n
                }
                Owed::Reply(_) => true,
            }
        });
    }
    let msn = g.roce_rc.msn;
    g.roce_rc.owed.push_back(Owed::Read(ReadOut {
        psn,
        va: reth.va,
        rkey: reth.rkey,
        len: reth.dma_len as u64,
        next: 0,
        n,
        msn,
    }));
    send_read_responses(qp, g);
}

/// A SEND or WRITE packet at the expected PSN; false when it was not
/// taken (RNR, or refused).
fn on_data(qp: &Qp, g: &mut QpInner, p: &Packet, kind: Kind, place: Place) -> bool {
    let h = p.hdr;
    let len = p.payload.len() as u64;
    let current = g.roce_rc.rx.map(|r| r.kind);
    if !rc::continues(current, kind, place)
        || p.payload.len() > mtu(g)
        || (!place.ends() && p.payload.len() != mtu(g))
    {
        nak_fatal(qp, g, NakCode::InvalidRequest, "packet out of its message");
        return false;
    }
    match kind {
        Kind::Send { imm } => {
            if place.starts() {
                if !qp.claim_recv(g) {
                    send_rnr(g);
                    return false;
                }
                g.roce_rc.rx = Some(Rx {
                    kind,
                    va: 0,
                    rkey: 0,
                    len: 0,
                    off: 0,
                });
            }
            let off = g.roce_rc.rx.map_or(0, |r| r.off);
            if off + len > g.recv.room() {
                qp.fail_claimed(g, IBV_WC_LOC_LEN_ERR);
                nak_fatal(
                    qp,
                    g,
                    NakCode::InvalidRequest,
                    "SEND larger than its receive",
                );
                return false;
            }
            if write_recv(g, off, p.payload).is_err() {
                qp.fail_claimed(g, IBV_WC_LOC_PROT_ERR);
                nak_fatal(
                    qp,
                    g,
                    NakCode::RemoteOperationalError,
                    "receive not writable",
                );
                return false;
            }
            if let Some(r) = g.roce_rc.rx.as_mut() {
                r.off += len;
            }
            if place.ends() {
                let inv = h.ieth.map(|i| i.rkey);
                if inv.is_some_and(|rkey| !keys::invalidate(qp, g, rkey)) {
                    return false;
                }
                g.roce_rc.rx = None;
                g.roce_rc.msn = psn_add(g.roce_rc.msn, 1);
                let op = match (inv, imm) {
                    (Some(_), _) => Op::SendInv,
                    (None, true) => Op::SendImm,
                    (None, false) => Op::Send,
                };
                // A SEND with invalidate's completion carries the rkey.
                let raw_imm = inv.unwrap_or(h.imm.map_or(0, |i| i.imm.to_be()));
                let (Some(wr_id), Some(e)) = (
                    qp.take_claimed(g),
                    place::recv_cqe(op, imm, raw_imm, h.bth.se),
                ) else {
                    return true;
                };
                let src_qp = g.attr.dest_qp_num;
                qp.complete_recv(
                    g,
                    Cqe {
                        wr_id,
                        byte_len: (off + len) as u32,
                        src_qp,
                        ..e
                    },
                );
            }
        }
        Kind::Write { imm } => {
            if place.starts() {
                let Some(reth) = h.reth else { return false };
                let allowed = g.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE != 0
                    && mr::table()
                        .remote(
                            reth.rkey,
                            reth.va,
                            reth.dma_len as u64,
                            qp.target_pd(g),
                            IBV_ACCESS_REMOTE_WRITE,
                            qp.qpn,
                        )
                        .is_ok();
                if !allowed {
                    nak_fatal(
                        qp,
                        g,
                        NakCode::RemoteAccessError,
                        "WRITE refused by the R_Key check",
                    );
                    return false;
                }
                g.roce_rc.rx = Some(Rx {
                    kind,
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.dma_len as u64,
                    off: 0,
                });
            }
            let Some(r) = g.roce_rc.rx else { return false };
            if r.off + len > r.len || (place.ends() && r.off + len != r.len) {
                nak_fatal(qp, g, NakCode::InvalidRequest, "WRITE longer than its RETH");
                return false;
            }
            if place.ends() && imm && !qp.claim_recv(g) {
                send_rnr(g);
                return false;
            }
            if len > 0 && !write_payload(qp, g, &r, p.payload) {
                nak_fatal(qp, g, NakCode::RemoteAccessError, "WRITE's memory gone");
                return false;
            }
            if let Some(r) = g.roce_rc.rx.as_mut() {
                r.off += len;
            }
            if place.ends() {
                g.roce_rc.rx = None;
                g.roce_rc.msn = psn_add(g.roce_rc.msn, 1);
                if imm {
                    let raw_imm = h.imm.map_or(0, |i| i.imm.to_be());
                    let (Some(wr_id), Some(e)) = (
                        qp.take_claimed(g),
                        place::recv_cqe(Op::WriteImm, true, raw_imm, h.bth.se),
                    ) else {
                        return true;
                    };
                    let src_qp = g.attr.dest_qp_num;
                    qp.complete_recv(
                        g,
                        Cqe {
                            wr_id,
                            byte_len: r.len as u32,
                            src_qp,
                            ..e
                        },
                    );
                }
            }
        }
        Kind::ReadResponse => return false,
    }
    true
}

/// No receive for the SEND at `epsn`: RNR NAK; what follows it is
/// dropped without a sequence NAK until it comes again.
fn send_rnr(g: &mut QpInner) {
    let timer = g.attr.min_rnr_timer;
    send_ack(g, g.roce_rc.epsn, Syndrome::RnrNak { timer });
    g.roce_rc.nak_sent = true;
}

fn on_request(qp: &Qp, g: &mut QpInner, p: &Packet) {
    let h = p.hdr;
    let psn = h.bth.psn;
    let op = h.bth.opcode;
    match rc::check_psn(psn, g.roce_rc.epsn) {
        PsnCheck::Duplicate => {
            if let (Opcode::RcReadRequest, Some(reth)) = (op, h.reth) {
                on_read_request(qp, g, psn, reth, true);
            } else if matches!(op, Opcode::RcCompareSwap | Opcode::RcFetchAdd) {
                atomic::on_duplicate(qp, g, psn);
            } else if h.bth.ack_req {
                send_ack(
                    g,
                    psn_add(g.roce_rc.epsn, PSN_MASK),
                    Syndrome::Ack {
                        credits: NO_CREDITS,
                    },
                );
            }
            return;
        }
        PsnCheck::OutOfSequence => {
            log::debug!(
                "qp {:#x}: PSN {psn:#x} ahead of {:#x}{}",
                qp.qpn,
                g.roce_rc.epsn,
                if g.roce_rc.nak_sent { "" } else { ": NAK" }
            );
            if !g.roce_rc.nak_sent {
                g.roce_rc.nak_sent = true;
                send_ack(g, g.roce_rc.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        PsnCheck::Expected => g.roce_rc.nak_sent = false,
    }
    // No responder resources for READs and atomics: as rxe and hardware.
    let rd_atomic = matches!(
        op,
        Opcode::RcReadRequest | Opcode::RcCompareSwap | Opcode::RcFetchAdd
    );
    if rd_atomic && g.attr.max_dest_rd_atomic == 0 {
        return nak_fatal(
            qp,
            g,
            NakCode::InvalidRequest,
            "READ or atomic with max_dest_rd_atomic 0",
        );
    }
    if op == Opcode::RcReadRequest {
        if let Some(reth) = h.reth {
            on_read_request(qp, g, psn, reth, false);
        }
        return;
    }
    if matches!(op, Opcode::RcCompareSwap | Opcode::RcFetchAdd) {
        return atomic::on_request(qp, g, p);
    }
    let Some((kind, place)) = rc::classify(op) else {
        return nak_fatal(qp, g, NakCode::InvalidRequest, "not a request opcode");
    };
    if !on_data(qp, g, p, kind, place) {
        return;
    }
    g.roce_rc.epsn = psn_add(psn, 1);
    if h.bth.ack_req {
        send_ack(
            g,
            psn,
            Syndrome::Ack {
                credits: NO_CREDITS,
            },
        );
    }
}

/// A packet of RC for this QP, from `src` (a GID), ICRC checked. What it
/// sends stays queued: the port calls [`flush`] after the packets it
/// took in one go, so that their ACKs coalesce and leave together.
pub fn receive(qp: &Qp, g: &mut QpInner, p: &Packet, src: &[u8; 16]) {
    let transport = match g.qp_type {
        IBV_QPT_RC => Transport::Rc,
        _ => Transport::Uc,
    };
    if g.destroyed
        || !matches!(g.qp_type, IBV_QPT_RC | IBV_QPT_UC)
        || p.hdr.bth.opcode.transport() != transport
        || !g.roce_rc.live
        || !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD)
        || g.remote.as_ref().is_none_or(|r| &r.gid != src)
    {
        log::debug!(
            "qp {:#x}: RoCEv2 {:?} PSN {:#x} dropped (state {}, live {})",
            qp.qpn,
            p.hdr.bth.opcode,
            p.hdr.bth.psn,
            g.state,
            g.roce_rc.live
        );
        return;
    }
    if transport == Transport::Uc {
        return uc::receive(qp, g, p);
    }
    match p.hdr.bth.opcode {
        Opcode::RcAtomicAck
            if p.hdr
                .aeth
                .is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. })) =>
        {
            atomic::on_response(qp, g, p);
        }
        Opcode::RcAck | Opcode::RcAtomicAck => {
            if let Some(a) = p.hdr.aeth {
                on_ack(qp, g, p.hdr.bth.psn, a);
            }
        }
        Opcode::RcReadResponseFirst
        | Opcode::RcReadResponseMiddle
        | Opcode::RcReadResponseLast
        | Opcode::RcReadResponseOnly => {
            if let Some(a) = p.hdr.aeth {
                if !matches!(a.syndrome, Syndrome::Ack { .. }) {
                    on_ack(qp, g, p.hdr.bth.psn, a);
                    return;
                }
            }
            on_read_response(qp, g, p);
        }
        _ => on_request(qp, g, p),
    }
    if g.state != IBV_QPS_ERR {
        pump_queueing(qp, g);
    }
}
