//! Memory keys on an RC QP of a RoCEv2-mode device: binds and local
//! invalidates run by the requester at their turn, and SEND with
//! invalidate, whose last packet carries the rkey (IETH) the responder
//! invalidates before the receive completes (as the TCP transport's
//! `Op::SendInv`: a type 2 window of the QP's PD).

use verbs_abi::*;

use super::{nak_fatal, Qp, QpInner};
use crate::mr;
use crate::roce::headers::{Ieth, NakCode};
use crate::roce::opcode::Opcode;
use crate::roce::packet::Headers;
use crate::wire::Op;

/// A WQE that never goes on the wire.
pub(super) fn is_local(op: Op) -> bool {
    matches!(op, Op::BindMw | Op::LocalInv)
}

/// Runs bind or local invalidate `seq` once every message before it has
/// completed (the caller waits for that), so it completes in order.
pub(super) fn run_local(qp: &Qp, g: &mut QpInner, seq: u64) {
    let w = *g.sq.wqe(seq);
    let r = match w.op {
        Op::BindMw => {
            let b = w.bind;
            mr::bind_window(
                b.mw_rkey, b.new_rkey, b.mr_key, b.addr, b.len, b.access, qp.pd_id, qp.qpn,
            )
            .map_err(|_| IBV_WC_MW_BIND_ERR)
        }
        // As the TCP transport: a window bound to another QP is a bind
        // error, a key that names no valid window a local QP operation
        // error (as rxe).
        _ => mr::invalidate_window(w.rkey, qp.pd_id, qp.qpn).map_err(|e| match e {
            mr::InvalidateError::OtherQp => IBV_WC_MW_BIND_ERR,
            mr::InvalidateError::NotValid => IBV_WC_LOC_QP_OP_ERR,
        }),
    };
    match r {
        Ok(()) => g.sq.wqe_mut(seq).local_ok = true,
        Err(st) => {
            g.sq.wqe_mut(seq).local_err = st;
            g.tx_blocked = true;
        }
    }
    g.sq.transmitted();
    qp.after_send_completions(g);
}

/// Makes the last packet of a SEND with invalidate carry `rkey`.
pub(super) fn mark_invalidate(h: &mut Headers, rkey: u32) {
    h.bth.opcode = match h.bth.opcode {
        Opcode::RcSendOnly => Opcode::RcSendOnlyInv,
        _ => Opcode::RcSendLastInv,
    };
    h.ieth = Some(Ieth { rkey });
}

/// The last packet of a SEND with invalidate arrived: its rkey is
/// invalidated; false (NAK invalid request, QP to ERR) when it names no
/// window this QP may invalidate.
pub(super) fn invalidate(qp: &Qp, g: &mut QpInner, rkey: u32) -> bool {
    if mr::invalidate_window(rkey, qp.target_pd(g), qp.qpn).is_ok() {
        return true;
    }
    nak_fatal(
        qp,
        g,
        NakCode::InvalidRequest,
        "SEND with invalidate of a key that names no window of ours",
    );
    false
}
