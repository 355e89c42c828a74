//! The completer half of an RC QP (rxe's `rxe_comp`): the responses on
//! our outgoing connection (ACK, READ data, atomic results, RNR wait
//! notices, NAK) and the ACKs that ride on the peer's requests complete
//! our send queue in order. The requester calls it to read; it calls
//! nothing of the requester's but its state's methods.

pub(crate) mod info;

use std::io::ErrorKind;

use verbs_abi::*;

use super::requester::info::{broken_by, Broken};
use super::{Qp, QpInner};
use crate::mr;
use crate::stats::Counters;
use crate::transport::{local, shm, Conn, MAX_IOV};
use crate::util::{iov, mono_ns};
use crate::wire::{msn_before, Header, Op, Syndrome, HDR_LEN};
use crate::wq::conn::ReadRx;

/// After an RNR wait notice the peer is known alive for this long.
pub const RNR_NOTICE_GRACE_NS: u64 = 3 * RNR_NOTICE_NS;
/// How often a stalled responder repeats its RNR wait notice.
pub const RNR_NOTICE_NS: u64 = 100_000_000;

/// Whether a thread polling our CQ should read our connection now. Not
/// when nothing is unanswered and nothing waits to go (whatever the peer
/// may still say, a close or a same-host offer, the progress thread
/// reads); and only one poll in [`RIDE_POLL_EVERY`] while the peer's ACKs
/// come on its requests (`acks_ride`) and nothing waits for a READ or
/// atomic response: a syscall a poll is most of a poll's cost.
pub fn wants_poll(g: &mut QpInner) -> bool {
    let Some(out) = g.req.out_ref() else {
        return false;
    };
    if !out.connected
        || out.tx_active
        || out.rx_read.is_some()
        || out.rx_got > 0
        || g.sq.next_to_transmit().is_some()
    {
        return true;
    }
    let Some(head) = g.sq.oldest_in_flight() else {
        return false;
    };
    if !g.comp.acks_ride || g.sq.wqe(head).expects_data() {
        return true;
    }
    g.comp.polls_skipped = g.comp.polls_skipped.wrapping_add(1);
    g.comp.polls_skipped.is_multiple_of(RIDE_POLL_EVERY)
}

/// See [`wants_poll`].
const RIDE_POLL_EVERY: u8 = 8;

/// Reads responses until the socket is empty.
pub fn receive(qp: &Qp, g: &mut QpInner) -> Result<(), Broken> {
    let polling = g.polling;
    if let Ok(out) = g.req.out() {
        // While a message drains through a full socket a polling thread
        // looks before it reads (no socket lock taken; the look also
        // tells the transmit whether there is room): it read an empty
        // socket 116 times a MiB (`ib_send_bw`).
        if polling && out.tx_short {
            out.conn.fresh_probe();
        } else {
            out.conn.fresh();
        }
    }
    loop {
        let out = g.req.out()?;
        if out.rx_read.is_some() {
            if !receive_read_data(qp, g)? {
                return Ok(());
            }
            continue;
        }
        let got = out.rx_got;
        let v = [iov(out.rx_hdr[got..].as_ptr(), HDR_LEN - got)];
        // SAFETY: the iovec covers the unfilled part of our header buffer.
        match unsafe { out.conn.recv_iov(&v) } {
            Ok(0) => return Err(Broken::Lost),
            Ok(k) => out.rx_got += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(broken_by(&e)),
        }
        g.req.answered();
        let out = g.req.out()?;
        if out.rx_got < HDR_LEN {
            continue;
        }
        out.rx_got = 0;
        let h = Header::decode(&out.rx_hdr).map_err(|_| Broken::BadResponse)?;
        on_response(qp, g, &h)?;
        if g.req.out_ref().is_none() {
            return Ok(());
        }
    }
}

/// The head WQE `seq` cannot be acknowledged yet: it failed locally (its
/// error completes it, in order), or it is still being transmitted.
fn unanswerable(g: &QpInner, seq: u64) -> bool {
    g.sq.wqe(seq).local_err != 0
        || g.req
            .out_ref()
            .is_some_and(|o| o.tx_active && o.tx_seq == seq)
}

/// Completes the WQEs before `msn` (or up to and including it) that a
/// later response implicitly acknowledges.
fn ack(qp: &Qp, g: &mut QpInner, msn: u32, inclusive: bool) -> Result<(), Broken> {
    while let Some(seq) = g.sq.oldest_in_flight() {
        let w = *g.sq.wqe(seq);
        if unanswerable(g, seq) {
            break;
        }
        // A bind or invalidate done locally is acknowledged by nobody.
        if w.local_ok {
            g.sq.retire_oldest();
            qp.complete_send(g, &w, IBV_WC_SUCCESS);
            continue;
        }
        let covered = if inclusive {
            !msn_before(msn, w.msn)
        } else {
            msn_before(w.msn, msn)
        };
        if !covered {
            break;
        }
        // A READ or atomic cannot be acknowledged without its own response.
        if w.expects_data() {
            return Err(Broken::BadResponse);
        }
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
        g.sq.retire_oldest();
    }
    Ok(())
}

/// The peer's responder acknowledged up to `msn` on a request of its own
/// (`wire::FLAG_ACK`). That ACK did not come in order with the responses
/// on our connection, so a READ or atomic before `msn` may still wait for
/// its response: completion stops there and goes on when it is in.
pub fn acked_by_peer(qp: &Qp, g: &mut QpInner, msn: u32) {
    if g.req.out_ref().is_none() || !g.reliable() {
        return;
    }
    // The peer is alive (see the retry timer): in a ping-pong whose ACKs
    // all ride, nothing else arrives on our connection.
    g.req.peer_alive();
    if g.comp.acked_upto.is_none_or(|m| msn_before(m, msn)) {
        g.comp.acked_upto = Some(msn);
    }
    complete_acked(qp, g);
}

/// Completes what [`acked_by_peer`] acknowledged, up to the first WQE
/// still waiting for its own response.
fn complete_acked(qp: &Qp, g: &mut QpInner) {
    let Some(msn) = g.comp.acked_upto else { return };
    let mut done = true;
    while let Some(seq) = g.sq.oldest_in_flight() {
        let w = *g.sq.wqe(seq);
        if unanswerable(g, seq) {
            done = false;
            break;
        }
        if w.local_ok {
            g.sq.retire_oldest();
            qp.complete_send(g, &w, IBV_WC_SUCCESS);
            continue;
        }
        if msn_before(msn, w.msn) {
            break;
        }
        if w.expects_data() {
            done = false;
            break;
        }
        g.sq.retire_oldest();
        qp.complete_send(g, &w, IBV_WC_SUCCESS);
        g.comp.acks_ride = true;
    }
    if done {
        g.comp.acked_upto = None;
    }
    qp.after_send_completions(g);
}

/// The head WQE, which a response for `msn` must be about.
fn head_for(g: &QpInner, msn: u32) -> Result<u64, Broken> {
    let seq = g.sq.oldest_in_flight().ok_or(Broken::BadResponse)?;
    if g.sq.wqe(seq).msn != msn || g.sq.wqe(seq).local_err != 0 {
        return Err(Broken::BadResponse);
    }
    Ok(seq)
}

fn on_response(qp: &Qp, g: &mut QpInner, h: &Header) -> Result<(), Broken> {
    match h.op {
        Op::Ack => {
            if g.sq
                .oldest_in_flight()
                .is_some_and(|s| !msn_before(h.msn, g.sq.wqe(s).msn))
            {
                g.comp.acks_ride = false;
            }
            ack(qp, g, h.msn, true)?;
            qp.after_send_completions(g);
        }
        Op::ReadResp => on_read_response(qp, g, h)?,
        Op::AtomicResp => on_atomic_response(qp, g, h)?,
        Op::RnrWait => on_rnr_wait(qp, g, h)?,
        // The same-host peer posted a receive we wait for: `pump` follows.
        Op::Doorbell => {}
        Op::Offer => {
            let out = g.req.out()?;
            if shm::enabled() && out.direct.is_none() {
                match local::Peer::open(h.remote_addr, h.rkey, h.compare_add) {
                    Ok(p) => {
                        out.direct = Some(p);
                        out.announce = true;
                    }
                    Err(why) => shm::fell_back(qp.qpn, &why),
                }
            }
        }
        Op::Nak => on_nak(qp, g, h)?,
        _ => return Err(Broken::BadResponse),
    }
    Ok(())
}

/// A READ response's header: its payload follows (`receive_read_data`).
fn on_read_response(qp: &Qp, g: &mut QpInner, h: &Header) -> Result<(), Broken> {
    ack(qp, g, h.msn, false)?;
    let seq = head_for(g, h.msn)?;
    let w = *g.sq.wqe(seq);
    if w.op != Op::ReadReq || h.length != w.len {
        return Err(Broken::BadResponse);
    }
    let out = g.req.out()?;
    out.rx_read = Some(ReadRx {
        seq,
        left: h.length,
        done: 0,
        status: IBV_WC_SUCCESS,
    });
    if h.length == 0 {
        finish_read(qp, g);
    }
    Ok(())
}

/// An atomic's original value, stored into its WQE's SGE.
fn on_atomic_response(qp: &Qp, g: &mut QpInner, h: &Header) -> Result<(), Broken> {
    ack(qp, g, h.msn, false)?;
    let seq = head_for(g, h.msn)?;
    let w = *g.sq.wqe(seq);
    if !matches!(w.op, Op::CmpSwap | Op::FetchAdd) {
        return Err(Broken::BadResponse);
    }
    let s = g.sq.sges(seq)[0];
    let status = {
        let t = mr::table();
        match t.local(s.lkey, s.addr, 8, qp.pd_id, true) {
            Ok(p) => {
                let v = h.compare_add.to_ne_bytes();
                // SAFETY: p is 8 bytes of registered, locally writable
                // memory (checked under the table lock, still held); it
                // need not be aligned; a fault (memory unmapped since) is
                // caught.
                match unsafe { crate::guard::copy(p, v.as_ptr(), 8) } {
                    Ok(()) => IBV_WC_SUCCESS,
                    Err(_) => IBV_WC_LOC_PROT_ERR,
                }
            }
            Err(_) => IBV_WC_LOC_PROT_ERR,
        }
    };
    g.sq.retire_oldest();
    qp.complete_send(g, &w, status);
    if status != IBV_WC_SUCCESS {
        qp.enter_error(
            g,
            &format_args!(
                "work request {:#x} failed with {}",
                w.wr_id,
                crate::trace::wc_status_name(status)
            ),
        );
    } else {
        qp.after_send_completions(g);
        complete_acked(qp, g);
    }
    Ok(())
}

/// The responder is alive and waiting for a receive: not a reason to
/// give up, however long it takes.
fn on_rnr_wait(qp: &Qp, g: &mut QpInner, h: &Header) -> Result<(), Broken> {
    ack(qp, g, h.msn, false)?;
    // A notice sent before the message's ACK can arrive after it when
    // that ACK rode on the peer's request (the other connection, read
    // first): stale, nothing to do.
    let stale =
        g.sq.oldest_in_flight()
            .is_none_or(|s| msn_before(h.msn, g.sq.wqe(s).msn));
    if stale {
        return Ok(());
    }
    head_for(g, h.msn)?;
    if g.comp.rnr_counted != Some(h.msn) {
        g.comp.rnr_counted = Some(h.msn);
        Counters::bump(&g.stats.rcvd_rnr_err);
    }
    g.req.hold_for_rnr(mono_ns() + RNR_NOTICE_GRACE_NS);
    qp.after_send_completions(g);
    Ok(())
}

/// The responder refused the head request: it fails with the status the
/// syndrome names, and the QP with it.
fn on_nak(qp: &Qp, g: &mut QpInner, h: &Header) -> Result<(), Broken> {
    ack(qp, g, h.msn, false)?;
    head_for(g, h.msn)?;
    let status = match Syndrome::from_u8(h.syndrome) {
        Some(Syndrome::RemAccess) => IBV_WC_REM_ACCESS_ERR,
        Some(Syndrome::RemInvReq) => IBV_WC_REM_INV_REQ_ERR,
        Some(Syndrome::RnrRetryExc) => IBV_WC_RNR_RETRY_EXC_ERR,
        Some(Syndrome::RemOp) | None => IBV_WC_REM_OP_ERR,
    };
    Counters::bump(match status {
        IBV_WC_REM_ACCESS_ERR => &g.stats.req_remote_access_errors,
        IBV_WC_REM_INV_REQ_ERR => &g.stats.req_remote_invalid_request,
        IBV_WC_RNR_RETRY_EXC_ERR => &g.stats.rnr_nak_retry_err,
        _ => &g.stats.req_remote_operation_errors,
    });
    log::error!(
        "qp {:#x}: NAK from the responder for message {}, syndrome {:?} ({})",
        qp.qpn,
        h.msn,
        Syndrome::from_u8(h.syndrome),
        h.syndrome
    );
    qp.fail_head(g, status);
    Ok(())
}

/// Receives READ response payload straight into the WQE's buffers; false
/// when the socket is empty.
fn receive_read_data(qp: &Qp, g: &mut QpInner) -> Result<bool, Broken> {
    let out = g.req.out()?;
    let rd = out.rx_read.as_ref().ok_or(Broken::Lost)?;
    let (seq, done, left) = (rd.seq, rd.done as u64, rd.left as usize);
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let table = mr::table();
    let dest = if rd.status == IBV_WC_SUCCESS {
        table
            .sge_iovs(g.sq.sges(seq), done, left, qp.pd_id, true, &mut v)
            .ok()
    } else {
        None
    };
    let bad = dest.is_none();
    let r = match dest {
        // SAFETY: the iovecs cover registered, locally writable memory
        // checked under the MR table lock, held across the call.
        Some(n) => unsafe { out.conn.recv_iov(&v[..n]) },
        None => discard(&mut out.conn, left),
    };
    // Released before completing: what follows may end in enter_error,
    // which takes the table again, and a recursive read lock deadlocks
    // once a dereg_mr is waiting for the write lock.
    drop(table);
    let k = match r {
        Ok(0) => return Err(Broken::Lost),
        Ok(k) => k,
        Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
        // Our buffer is registered but no longer mapped: the READ fails
        // locally and the rest of its data is read and dropped.
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) && !bad => {
            if let Some(rd) = g.req.out().ok().and_then(|o| o.rx_read.as_mut()) {
                rd.status = IBV_WC_LOC_PROT_ERR;
            }
            return Ok(true);
        }
        Err(e) => return Err(broken_by(&e)),
    };
    g.req.peer_alive();
    let out = g.req.out()?;
    let rd = out.rx_read.as_mut().ok_or(Broken::Lost)?;
    if bad {
        rd.status = IBV_WC_LOC_PROT_ERR;
    }
    rd.done += k as u32;
    rd.left -= k as u32;
    if rd.left == 0 {
        finish_read(qp, g);
    }
    Ok(true)
}

fn finish_read(qp: &Qp, g: &mut QpInner) {
    let Some(rd) = g.req.out().ok().and_then(|o| o.rx_read.take()) else {
        return;
    };
    let w = *g.sq.wqe(rd.seq);
    g.sq.retire_oldest();
    qp.complete_send(g, &w, rd.status);
    if rd.status != IBV_WC_SUCCESS {
        qp.enter_error(
            g,
            &format_args!(
                "READ {:#x} failed with {}",
                w.wr_id,
                crate::trace::wc_status_name(rd.status)
            ),
        );
    } else {
        qp.after_send_completions(g);
        complete_acked(qp, g);
    }
}

/// Reads and drops up to `len` bytes (payload bound for memory we may not
/// touch).
pub fn discard(conn: &mut Conn, len: usize) -> std::io::Result<usize> {
    let mut buf = [0u8; 4096];
    let take = len.min(buf.len());
    let v = [iov(buf.as_mut_ptr(), take)];
    // SAFETY: the iovec covers our stack buffer.
    unsafe { conn.recv_iov(&v) }
}
