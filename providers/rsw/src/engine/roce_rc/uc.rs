//! UC on a RoCEv2-mode device: SEND, SEND with immediate, WRITE and WRITE
//! with immediate as UC packets (RC's opcodes moved to UC's, IBA 9.8)
//! through the device's port 4791, sharing RC's state (`RcState`).
//!
//! Requester: a message's packets go out in order at the path MTU, no
//! AckReq, nothing kept: the WQE completes once its last packet has left.
//! Responder: no ACKs, no NAKs. A packet whose PSN is not the next
//! expected one means packets were lost: the message in progress is
//! dropped, and so is every middle or last packet until a first or only
//! one starts the next message. A message that cannot be taken (no
//! receive posted, an R_Key refused, a packet out of its message) is
//! dropped silently too; only a SEND larger than its receive completes
//! that receive with IBV_WC_LOC_LEN_ERR (the QP goes to ERR).

use verbs_abi::*;

use super::{
    bth, gather, local_ok, mtu, retry_soon, send, write_payload, Msg, Qp, QpInner, Rx, MAX_PAYLOAD,
};
use crate::cq::Cqe;
use crate::engine::ud_recv::write_recv;
use crate::mr;
use crate::place;
use crate::roce::headers::ImmDt;
use crate::roce::packet::{Headers, Packet};
use crate::roce::rc::{self, psn_add, Kind, Outstanding, Place};
use crate::wire::Op;

/// What a WQE sends as on UC, or the status it fails with.
fn kind_of(op: Op) -> Result<Kind, ibv_wc_status> {
    match op {
        Op::Send => Ok(Kind::Send { imm: false }),
        Op::SendImm => Ok(Kind::Send { imm: true }),
        Op::Write => Ok(Kind::Write { imm: false }),
        Op::WriteImm => Ok(Kind::Write { imm: true }),
        _ => Err(IBV_WC_LOC_QP_OP_ERR),
    }
}

// ---- requester ----

/// Sends packet `sent` of the message in progress; false when the socket
/// is full.
fn send_packet(qp: &Qp, g: &mut QpInner, m: Msg) -> bool {
    let w = *g.sq.wqe(m.seq);
    // Only WQEs of these kinds are queued (`pump`).
    let Ok(kind) = kind_of(w.op) else {
        qp.fail_head(g, IBV_WC_LOC_QP_OP_ERR);
        return true;
    };
    let mtu = mtu(g);
    let i = m.sent;
    let seg = rc::segment(w.len as usize, mtu, i);
    let mut data = [0u8; MAX_PAYLOAD];
    let data = &mut data[..seg.len()];
    if gather(qp, g, m.seq, seg.start, data).is_err() {
        qp.fail_head(g, IBV_WC_LOC_PROT_ERR);
        return true;
    }
    let place = Place::of(i, m.npkts);
    let op = rc::to_uc(rc::opcode(kind, i, m.npkts)).expect("SENDs and WRITEs have UC opcodes");
    let mut h = Headers::new(bth(g, op, psn_add(m.psn, i)));
    if place.starts() && matches!(kind, Kind::Write { .. }) {
        h.reth = Some(crate::roce::headers::Reth {
            va: w.remote_addr,
            rkey: w.rkey,
            dma_len: w.len,
        });
    }
    if place.ends() {
        h.bth.se = w.solicited;
        if matches!(kind, Kind::Send { imm: true } | Kind::Write { imm: true }) {
            // The WQE holds the application's big-endian bytes.
            h.imm = Some(ImmDt {
                imm: u32::from_be(w.imm),
            });
        }
    }
    if !send(g, &h, data) {
        return false;
    }
    if let Some(f) = g.roce_rc.msgs.front_mut() {
        f.sent += 1;
    }
    true
}

/// Sends what may go: the message in progress, then the next ones; each
/// completes as its last packet leaves.
pub(super) fn pump(qp: &Qp, g: &mut QpInner) {
    if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) {
        return;
    }
    loop {
        if let Some(m) = g.roce_rc.msgs.front().copied() {
            if m.sent < m.npkts {
                if !send_packet(qp, g, m) {
                    retry_soon(qp);
                    return;
                }
                if g.state == IBV_QPS_ERR {
                    return;
                }
                continue;
            }
            g.roce_rc.msgs.pop_front();
            let w = *g.sq.wqe(m.seq);
            g.sq.retire_oldest();
            qp.complete_send(g, &w, IBV_WC_SUCCESS);
            qp.after_send_completions(g);
            continue;
        }
        if g.state != IBV_QPS_RTS || g.tx_blocked {
            return;
        }
        let Some(seq) = g.sq.next_to_transmit() else {
            return;
        };
        let w = *g.sq.wqe(seq);
        if super::keys::is_local(w.op) && w.local_err == 0 {
            super::keys::run_local(qp, g, seq);
            continue;
        }
        let err = match kind_of(w.op) {
            _ if w.local_err != 0 => w.local_err,
            Err(status) => status,
            Ok(_) if !local_ok(qp, g, seq) => IBV_WC_LOC_PROT_ERR,
            Ok(_) => 0,
        };
        if err != 0 {
            g.sq.wqe_mut(seq).local_err = err;
            g.sq.transmitted();
            g.tx_blocked = true;
            qp.after_send_completions(g);
            return;
        }
        let npkts = rc::packets(w.len as usize, mtu(g));
        let st = &mut g.roce_rc;
        st.msgs.push_back(Msg {
            seq,
            o: Outstanding {
                psn: st.next_psn,
                npkts,
                sent: 0,
                read: false,
                got: 0,
            },
        });
        st.next_psn = psn_add(st.next_psn, npkts);
        g.sq.transmitted();
    }
}

// ---- responder ----

/// A UC packet for this QP (state and source checked).
pub(super) fn receive(qp: &Qp, g: &mut QpInner, p: &Packet) {
    let h = p.hdr;
    let Some((kind, place)) = rc::from_uc(h.bth.opcode).and_then(rc::classify) else {
        return;
    };
    let st = &mut g.roce_rc;
    if h.bth.psn != st.epsn && st.rx.take().is_some() {
        log::debug!(
            "qp {:#x}: UC PSN {:#x}, {:#x} expected: the message in progress is dropped",
            qp.qpn,
            h.bth.psn,
            st.epsn
        );
    }
    st.epsn = psn_add(h.bth.psn, 1);
    // A first or only packet ends what was in progress (its last packet
    // was lost); a middle or last with nothing in progress belongs to a
    // message dropped.
    if place.starts() {
        st.rx = None;
    } else if !st
        .rx
        .is_some_and(|r| rc::continues(Some(r.kind), kind, place))
    {
        st.rx = None;
        return;
    }
    if let Err(why) = take(qp, g, p, kind, place) {
        log::debug!("qp {:#x}: UC message dropped: {why}", qp.qpn);
        g.roce_rc.rx = None;
    }
}

/// Places a packet of the message in progress (or starting); Err when
/// the message is dropped.
fn take(
    qp: &Qp,
    g: &mut QpInner,
    p: &Packet,
    kind: Kind,
    place: Place,
) -> Result<(), &'static str> {
    let h = p.hdr;
    let len = p.payload.len() as u64;
    let mtu = mtu(g);
    if p.payload.len() > mtu || (!place.ends() && p.payload.len() != mtu) {
        return Err("packet length off the path MTU");
    }
    if place.starts() {
        let (va, rkey, total) = match (kind, h.reth) {
            (Kind::Send { .. }, _) => {
                // The receive claimed for a message dropped stays claimed
                // for the next.
                if !qp.claim_recv(g) {
                    return Err("no receive posted");
                }
                (0, 0, 0)
            }
            (Kind::Write { .. }, Some(r)) => {
                let ok = g.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE != 0
                    && mr::table()
                        .remote(
                            r.rkey,
                            r.va,
                            r.dma_len as u64,
                            qp.target_pd(g),
                            IBV_ACCESS_REMOTE_WRITE,
                            qp.qpn,
                        )
                        .is_ok();
                if !ok {
                    return Err("WRITE refused by the R_Key check");
                }
                (r.va, r.rkey, r.dma_len as u64)
            }
            _ => return Err("WRITE without its RETH"),
        };
        g.roce_rc.rx = Some(Rx {
            kind,
            va,
            rkey,
            len: total,
            off: 0,
        });
    }
    let Some(r) = g.roce_rc.rx else {
        return Err("nothing in progress");
    };
    match kind {
        Kind::Send { .. } => {
            if r.off + len > g.recv.room() {
                qp.fail_claimed(g, IBV_WC_LOC_LEN_ERR);
                qp.enter_error(g, &"RoCEv2 UC: SEND larger than its receive");
                return Err("SEND larger than its receive");
            }
            if write_recv(g, r.off, p.payload).is_err() {
                qp.fail_claimed(g, IBV_WC_LOC_PROT_ERR);
                qp.enter_error(g, &"RoCEv2 UC: receive not writable");
                return Err("receive not writable");
            }
        }
        Kind::Write { .. } => {
            if r.off + len > r.len || (place.ends() && r.off + len != r.len) {
                return Err("WRITE longer or shorter than its RETH");
            }
            if len > 0 && !write_payload(qp, g, &r, p.payload) {
                return Err("WRITE's memory gone");
            }
        }
        Kind::ReadResponse => return Err("not a request"),
    }
    let off = r.off + len;
    if let Some(r) = g.roce_rc.rx.as_mut() {
        r.off = off;
    }
    if !place.ends() {
        return Ok(());
    }
    g.roce_rc.rx = None;
    let (op, imm) = match kind {
        Kind::Send { imm } => (if imm { Op::SendImm } else { Op::Send }, imm),
        Kind::Write { imm: true } => {
            if !qp.claim_recv(g) {
                return Err("no receive posted for the immediate");
            }
            (Op::WriteImm, true)
        }
        _ => return Ok(()),
    };
    let raw_imm = h.imm.map_or(0, |i| i.imm.to_be());
    let (Some(wr_id), Some(e)) = (
        qp.take_claimed(g),
        place::recv_cqe(op, imm, raw_imm, h.bth.se),
    ) else {
        return Ok(());
    };
    let src_qp = g.attr.dest_qp_num;
    qp.complete_recv(
        g,
        Cqe {
            wr_id,
            byte_len: off as u32,
            src_qp,
            ..e
        },
    );
    Ok(())
}
