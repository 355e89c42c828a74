//! Atomics of RC over RoCEv2: the requester's COMPARE_SWAP and FETCH_ADD
//! (an AtomicETH; the ATOMIC ACKNOWLEDGE's original value lands in the
//! WQE's SGE in host order), and the responder's execution of them:
//! R_Key with remote atomic rights, 8-byte alignment, the operation under
//! the process's atomic lock, and a request sent again answered from
//! `Replay` rather than run twice.
//!
//! To the requester's queue an atomic is a READ of one response
//! (`Outstanding::read`): it counts against `max_rd_atomic`, an ACK
//! past it without its response means the response was lost, and going
//! back sends the request again.

use verbs_abi::*;

use super::{
    acks_sent, bth, complete_upto, nak_fatal, reply, scatter, send, Qp, QpInner, NO_CREDITS,
};
use crate::engine::remote_atomic::{self, Operation};
use crate::roce::atomic::{AtomicOp, Done};
use crate::roce::headers::{Aeth, AtomicAckEth, AtomicEth, NakCode, Syndrome};
use crate::roce::opcode::Opcode;
use crate::roce::packet::{Headers, Packet};
use crate::roce::rc::{psn_add, PSN_MASK};
use crate::wire::Op;

pub(super) fn is_atomic(op: Op) -> bool {
    matches!(op, Op::CmpSwap | Op::FetchAdd)
}

// ---- requester ----

/// Sends the request of atomic message `idx`; false when the socket is
/// full.
pub(super) fn send_request(g: &mut QpInner, idx: usize) -> bool {
    let m = g.roce_rc.msgs[idx];
    let w = *g.sq.wqe(m.seq);
    let (op, swap_add, compare) = if w.op == Op::CmpSwap {
        (Opcode::RcCompareSwap, w.swap, w.compare_add)
    } else {
        (Opcode::RcFetchAdd, w.compare_add, 0)
    };
    let mut h = Headers::new(bth(g, op, m.psn));
    h.bth.ack_req = true;
    h.atomic = Some(AtomicEth {
        va: w.remote_addr,
        rkey: w.rkey,
        swap_add,
        compare,
    });
    if !send(g, &h, &[]) {
        return false;
    }
    g.roce_rc.msgs[idx].sent = m.npkts;
    true
}

/// An ATOMIC ACKNOWLEDGE: the oldest message, an atomic at this PSN,
/// completes with the original value stored in its SGE.
pub(super) fn on_response(qp: &Qp, g: &mut QpInner, p: &Packet) {
    let psn = p.hdr.bth.psn;
    let Some(orig) = p.hdr.atomic_ack.map(|a| a.orig) else {
        return;
    };
    if !acks_sent(&g.roce_rc, psn) {
        return;
    }
    // A response acknowledges every request before it.
    complete_upto(qp, g, psn_add(psn, PSN_MASK));
    let Some(m) = g.roce_rc.msgs.front().copied() else {
        return;
    };
    let w = *g.sq.wqe(m.seq);
    if !is_atomic(w.op) || m.psn != psn || m.sent < m.npkts {
        return;
    }
    // Hardware stores the value in host order.
    if scatter(qp, g, m.seq, 0, &orig.to_ne_bytes()).is_err() {
        qp.fail_head(g, IBV_WC_LOC_PROT_ERR);
        return;
    }
    let st = &mut g.roce_rc;
    st.gap_at = None;
    st.retries = 0;
    st.deadline = 0;
    st.msgs.pop_front();
    st.cursor = st.cursor.saturating_sub(1);
    g.sq.retire_oldest();
    qp.complete_send(g, &w, IBV_WC_SUCCESS);
    qp.after_send_completions(g);
}

// ---- responder ----

fn send_response(g: &mut QpInner, d: Done) {
    let mut h = Headers::new(bth(g, Opcode::RcAtomicAck, d.psn));
    h.aeth = Some(Aeth {
        syndrome: Syndrome::Ack {
            credits: NO_CREDITS,
        },
        msn: d.msn,
    });
    h.atomic_ack = Some(AtomicAckEth { orig: d.orig });
    // A lost response is made good by the requester's retry, answered
    // from the replay cache.
    reply(g, &h);
}

/// An atomic request at a PSN already executed: its saved answer again,
/// never a second execution. One too old to be remembered is dropped
/// (the requester gave up on it long ago).
pub(super) fn on_duplicate(qp: &Qp, g: &mut QpInner, psn: u32) {
    match g.roce_rc.replay.find(psn) {
        Some(d) => {
            log::debug!(
                "qp {:#x}: atomic PSN {psn:#x} sent again: its saved result answers",
                qp.qpn
            );
            send_response(g, d);
        }
        None => log::debug!(
            "qp {:#x}: atomic PSN {psn:#x} sent again, not remembered: dropped",
            qp.qpn
        ),
    }
}

/// An atomic request at the expected PSN.
pub(super) fn on_request(qp: &Qp, g: &mut QpInner, p: &Packet) {
    let (Some(eth), psn) = (p.hdr.atomic, p.hdr.bth.psn) else {
        return;
    };
    let op = if p.hdr.bth.opcode == Opcode::RcCompareSwap {
        AtomicOp::CmpSwap
    } else {
        AtomicOp::FetchAdd
    };
    if g.roce_rc.rx.is_some() {
        return nak_fatal(qp, g, NakCode::InvalidRequest, "atomic inside a message");
    }
    // Misaligned: an invalid request, as rxe and NICs answer it.
    if !eth.va.is_multiple_of(8) {
        return nak_fatal(qp, g, NakCode::InvalidRequest, "misaligned atomic");
    }
    let Some(orig) = execute(qp, g, op, &eth) else {
        return nak_fatal(
            qp,
            g,
            NakCode::RemoteAccessError,
            "atomic refused by the R_Key check",
        );
    };
    let st = &mut g.roce_rc;
    st.msn = psn_add(st.msn, 1);
    st.epsn = psn_add(psn, 1);
    let d = Done {
        psn,
        orig,
        msn: st.msn,
    };
    st.replay.record(d);
    send_response(g, d);
}

/// Runs the atomic on our memory; the original value, or None when the
/// QP, the key or the memory refuses it.
fn execute(qp: &Qp, g: &QpInner, op: AtomicOp, eth: &AtomicEth) -> Option<u64> {
    let op = match op {
        AtomicOp::CmpSwap => Operation::CmpSwap {
            compare: eth.compare,
            swap: eth.swap_add,
        },
        AtomicOp::FetchAdd => Operation::FetchAdd(eth.swap_add),
    };
    remote_atomic::run(qp, g, eth.rkey, eth.va, op)
}
