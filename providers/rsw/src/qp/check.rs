//! The misuse checker's QP checks (`RDMA_CHECK`): what `ibv_post_send`
//! (and `ibv_wr_complete`), `ibv_post_recv` and `ibv_destroy_qp` are
//! asked, read from the QP and its CQ and recorded in the checker's ledger
//! (`crate::check`); and the questions about live QPs that the ledger,
//! below the QPs, asks through the hooks the top layer registers
//! ([`handle_of`], [`sends_naming`]).

use std::collections::HashSet;
use std::sync::Arc;

use verbs_abi::*;
use verbs_rt::check::{report, Obj};

use super::QPS;
use crate::check::{self, sg_list, Posted, Recorded, RecvRec};
use crate::engine::Qp;
use crate::mr::{check_rkey, check_sge};

fn qp_obj(q: &Qp) -> Obj {
    Obj::qp(q.as_ibv() as usize, q.qpn)
}

fn state_name(s: ibv_qp_state) -> &'static str {
    crate::trace::qp_state_name(s)
}

fn is_read_or_atomic(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    )
}

fn names_rkey(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
            | IBV_WR_RDMA_READ
            | IBV_WR_ATOMIC_CMP_AND_SWP
            | IBV_WR_ATOMIC_FETCH_AND_ADD
            | IBV_WR_ATOMIC_WRITE
    )
}

/// Whether a SEND/WRITE reads its buffers until it completes.
fn reads_buffers(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_SEND
            | IBV_WR_SEND_WITH_IMM
            | IBV_WR_SEND_WITH_INV
            | IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
    )
}

/// The checks of `ibv_post_send` (or `ibv_wr_complete`: `verb`) before
/// the post; records the signaled WRs of the list (with the checksums of
/// their buffers), in order.
///
/// # Safety
/// `wr` is the caller's list of send WRs.
pub unsafe fn before_post_send(q: &Qp, mut wr: *mut ibv_send_wr, verb: &str) -> Recorded {
    let call = check::new_call();
    let obj = qp_obj(q);
    let (state, max_rd_atomic, sig_all, qp_type, max_sge) = {
        let g = q.inner.lock();
        (
            g.state,
            g.attr.max_rd_atomic,
            g.sq_sig_all,
            g.qp_type,
            g.sq.max_sge,
        )
    };
    check_post_state(obj, state, verb);
    let mut out = Vec::new();
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        let sges = unsafe { sg_list(w.sg_list, w.num_sge, max_sge) };
        let inline = w.send_flags & IBV_SEND_INLINE != 0;
        let local = !matches!(w.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV);
        let signaled = w.send_flags & IBV_SEND_SIGNALED != 0 || sig_all;
        let mut posted = Posted::new(w.wr_id, call, wr as usize);
        // Inline data is copied at post: its SGEs need no key.
        if local && (!inline || is_read_or_atomic(w.opcode)) {
            for s in sges {
                let host = check_sge(obj, q.pd_id, s, verb);
                if let (Some(h), true) = (host, signaled && reads_buffers(w.opcode)) {
                    posted.sum(h, s.length as usize);
                }
            }
        }
        if names_rkey(w.opcode) && qp_type != IBV_QPT_UD {
            // SAFETY: the rdma/atomic member, as these opcodes fill it.
            let rkey = unsafe {
                if matches!(
                    w.opcode,
                    IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
                ) {
                    w.wr.atomic.rkey
                } else {
                    w.wr.rdma.rkey
                }
            };
            check_rkey(obj, rkey);
        }
        // (UC and UD have no READ/atomic at all: the post refuses them.)
        if is_read_or_atomic(w.opcode)
            && max_rd_atomic == 0
            && state == IBV_QPS_RTS
            && matches!(qp_type, IBV_QPT_RC | IBV_QPT_XRC_SEND)
        {
            report(
                "rd_atomic_exceeded",
                obj,
                "RDMA READ/atomic posted on a QP whose max_rd_atomic is 0: it may never have one outstanding, so the WR can never be issued",
                "ibv_modify_qp(3): max_rd_atomic is the number of outstanding RDMA READ/atomic operations the QP may have as initiator (set with IBV_QP_MAX_QP_RD_ATOMIC for RTS); IB spec 9.4.4/C9-147 forbids exceeding it (hardware stalls the send queue or fails the WR)",
            );
        }
        if signaled {
            out.push(posted);
        }
        wr = w.next;
    }
    check_cq_room(q, out.len());
    let send_cq = q.send_cq.as_ref().map_or(0, |c| c.as_ibv() as usize);
    check::record_sends(q.qpn, q.as_ibv() as usize, send_cq, call, out)
}

/// A post in a state that does not take one as the spec says.
fn check_post_state(obj: Obj, state: ibv_qp_state, verb: &str) {
    match state {
        IBV_QPS_RESET => report(
            "post_state",
            obj,
            &format!("{verb} on a QP in RESET: the post fails"),
            "ibv_post_send(3), IB spec 10.8.2 / 11.4.1.1: send WRs may be posted only in RTS (or SQD); a QP in RESET refuses them",
        ),
        IBV_QPS_INIT | IBV_QPS_RTR => report(
            "post_state",
            obj,
            &format!(
                "{verb} on a QP in {}: accepted here, the WR waits for RTS",
                state_name(state)
            ),
            "ibv_post_send(3), IB spec 10.8.2 / 11.4.1.1: send WRs may be posted only in RTS (or SQD); in INIT and RTR the spec refuses the post, and so do hns, bnxt_re and efa (EINVAL), where mlx5 and irdma take it and rxe says EINVAL yet runs it at RTS",
        ),
        IBV_QPS_ERR => report(
            "post_state",
            obj,
            &format!("{verb} on a QP in ERR: the WR will complete with IBV_WC_WR_FLUSH_ERR"),
            "IB spec 10.3.1 (Error state): WRs posted to a QP in ERR are completed in error (flushed) without being executed",
        ),
        _ => {}
    }
}

/// The send CQ can hold what is due on it with `more` signaled WRs.
fn check_cq_room(q: &Qp, more: usize) {
    if let Some(cq) = &q.send_cq {
        // SAFETY: plain data in the CQ's allocation.
        let cap =
            unsafe { std::ptr::read_volatile(&raw const (*cq.ibv.get()).cqe) }.max(0) as usize;
        let handle = cq.as_ibv() as usize;
        let due = check::due_on(handle) + more;
        if due > cap {
            report(
                "cq_overrun",
                Obj::new("cq", handle),
                &format!(
                    "{due} signaled send WRs outstanding on a CQ of {cap} entries: its completions will certainly overrun it"
                ),
                "ibv_create_cq(3)/ibv_poll_cq(3): the CQ must be large enough for every completion that can be outstanding; an overrun is a CQ error (IBV_EVENT_CQ_ERR) and puts its QPs in error",
            );
        }
    }
}

/// The WRs of a refused post's list at `head` that went in: those before
/// `bad` (none, when `bad` is NULL).
///
/// # Safety
/// `head` is the caller's list, as posted; `next` reads a WR's link.
unsafe fn accepted<T>(
    head: *mut T,
    bad: *mut T,
    next: impl Fn(*mut T) -> *mut T,
) -> HashSet<usize> {
    let mut accepted = HashSet::new();
    let mut p = head;
    while !bad.is_null() && !p.is_null() && p != bad {
        accepted.insert(p as usize);
        p = next(p);
    }
    accepted
}

/// After `ibv_post_send` of the list at `head`: a refused post takes back
/// what it recorded from `bad` on (everything, when `bad` is NULL).
///
/// # Safety
/// `head` is the caller's list, as posted.
pub unsafe fn after_post_send(
    q: &Qp,
    rec: Recorded,
    rc: i32,
    head: *mut ibv_send_wr,
    bad: *mut ibv_send_wr,
) {
    if rc == 0 || rec.none() {
        return;
    }
    // SAFETY: the caller's list, as posted.
    let accepted = unsafe { accepted(head, bad, |p| (*p).next) };
    check::take_back_sends(q.qpn, rec, &accepted);
}

/// The checks of `ibv_post_recv` before the post; records the receives.
///
/// # Safety
/// `wr` is the caller's list of receive WRs.
pub unsafe fn before_post_recv(q: &Qp, mut wr: *mut ibv_recv_wr) -> Recorded {
    let call = check::new_call();
    let obj = qp_obj(q);
    let (state, max_sge) = {
        let g = q.inner.lock();
        (g.state, g.rq.max_sge)
    };
    match state {
        IBV_QPS_RESET => report(
            "post_state",
            obj,
            "ibv_post_recv on a QP in RESET: the post fails",
            "ibv_post_recv(3), IB spec 10.8.2: receive WRs may be posted from INIT on; a QP in RESET refuses them",
        ),
        IBV_QPS_ERR => report(
            "post_state",
            obj,
            "ibv_post_recv on a QP in ERR: the WR will complete with IBV_WC_WR_FLUSH_ERR",
            "IB spec 10.3.1 (Error state): WRs posted to a QP in ERR are completed in error (flushed)",
        ),
        _ => {}
    }
    let mut out = Vec::new();
    if q.srq.is_some() {
        return check::record_recvs(q.qpn, q.as_ibv() as usize, call, Vec::new());
    }
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        let sges = unsafe { sg_list(w.sg_list, w.num_sge, max_sge) };
        for s in sges {
            check_sge(obj, q.pd_id, s, "ibv_post_recv");
        }
        out.push(RecvRec::new(w.wr_id, sges, call, wr as usize));
        wr = w.next;
    }
    check::record_recvs(q.qpn, q.as_ibv() as usize, call, out)
}

/// After `ibv_post_recv` of the list at `head`: a refused post takes
/// back what it recorded from `bad` on (everything, when `bad` is NULL).
///
/// # Safety
/// `head` is the caller's list, as posted.
pub unsafe fn after_post_recv(
    q: &Qp,
    rec: Recorded,
    rc: i32,
    head: *mut ibv_recv_wr,
    bad: *mut ibv_recv_wr,
) {
    if rc == 0 || rec.none() {
        return;
    }
    // SAFETY: the caller's list, as posted.
    let accepted = unsafe { accepted(head, bad, |p| (*p).next) };
    check::take_back_recvs(q.qpn, rec, &accepted);
}

/// `ibv_destroy_qp`: send WRs still in flight (discarded without a
/// completion), async events not acknowledged (Err(EBUSY), as for CQs).
pub fn qp_destroy(q: &Arc<Qp>) -> Result<(), i32> {
    let obj = qp_obj(q);
    let (state, in_flight) = {
        let g = q.inner.lock();
        let r = g.sq.outstanding();
        (g.state, r.end - r.start)
    };
    if in_flight > 0 && matches!(state, IBV_QPS_RTS | IBV_QPS_SQD) {
        report(
            "destroy_busy",
            obj,
            &format!("ibv_destroy_qp with {in_flight} send WR(s) posted and not completed: they are discarded without completions"),
            "ibv_destroy_qp(3)/IB spec 10.2.4.4: destroying a QP discards its outstanding WRs without completing them; move it to ERR and poll the flushed completions first, or wait for them",
        );
    }
    check::async_unacked(obj, "ibv_destroy_qp", &q.async_events)?;
    check::qp_gone(q.qpn);
    verbs_rt::check::forget(q.as_ibv() as usize);
    Ok(())
}

/// The application's handle of the live QP numbered `qpn`, or 0 (the
/// ledger's [`check::Above::qp_handle`]).
pub(crate) fn handle_of(qpn: u32) -> usize {
    QPS.entries()
        .into_iter()
        .find(|(_, w)| w.upgrade().is_some_and(|q| q.qpn == qpn))
        .map_or(0, |(h, _)| h)
}

/// Send WRs posted and not completed, on live QPs in RTS or SQD, that
/// name `lkey` (the ledger's [`check::Above::sends_naming`]).
pub(crate) fn sends_naming(lkey: u32) -> usize {
    let mut sends = 0usize;
    for (_, w) in QPS.entries() {
        let Some(q) = w.upgrade() else { continue };
        let g = q.inner.lock();
        if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) {
            continue;
        }
        for seq in g.sq.outstanding() {
            if g.sq.sges(seq).iter().any(|s| s.lkey == lkey) {
                sends += 1;
            }
        }
    }
    sends
}
