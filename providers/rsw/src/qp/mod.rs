//! The QP verbs: `create` (creation, `ibv_open_qp`, destruction),
//! `modify` (the state machine, query), `post` (post send and receive),
//! `mcast` (attach, detach) and `ex` (the `ibv_wr_*` builder). They check
//! what the application asks and hand the QP's state (`wq`) to the engines
//! (`engine`) below.

pub(crate) mod check;
mod create;
pub(crate) mod ex;
mod flow;
mod mcast;
mod modify;
mod post;

pub use crate::engine::Qp;
pub(crate) use create::{create_qp_ex, destroy_qp, open_qp};
pub(crate) use flow::{create_flow, destroy_flow};
pub(crate) use mcast::{attach_mcast, detach_mcast};
pub(crate) use modify::{modify_qp, query_qp};
pub(crate) use post::{bind_mw, post_recv, post_send};

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use verbs_abi::*;

use verbs_rt::{ForkFresh, Handles};

/// The QPs handed out and not destroyed.
pub static QPS: Handles<Weak<Qp>> = Handles::new();

/// QPs created and not destroyed (handles `ibv_open_qp` made are not QPs
/// of their own, as in the kernel): `ibv_query_device`'s `max_qp` holds
/// them.
static CREATED: ForkFresh<AtomicU32> = ForkFresh::new(|| AtomicU32::new(0));

/// One QP's place under the device's limit, given back when dropped
/// unless the QP came to be ([`Place::keep`]).
pub(crate) struct Place(());

impl Place {
    /// Takes a place, or ENOMEM when `max_qp` QPs exist (the device's
    /// pool is exhausted, as on hardware; rxe answers EINVAL, README).
    pub(crate) fn take() -> Result<Place, std::os::raw::c_int> {
        let max = crate::device::qp_limit();
        let n = CREATED.get();
        let taken = n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            (c < max).then_some(c + 1)
        });
        if taken.is_err() {
            crate::util::limit("qp", max, Err(libc::ENOMEM))?;
        }
        Ok(Place(()))
    }

    /// The QP exists: its place is given back by [`release`].
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        release();
    }
}

/// A QP [`Place::take`] counted is destroyed.
pub(crate) fn release() {
    CREATED.get().fetch_sub(1, Ordering::AcqRel);
}

/// The live QP behind an application pointer, if it is one of ours. The
/// control verbs look a QP up instead of trusting the pointer: librdmacm
/// moves an id's QP to ERR when the application retrieves DISCONNECTED, and
/// programs such as rping destroy that QP with `ibv_destroy_qp` first, so a
/// stale pointer must fail with EINVAL rather than touch freed memory. The
/// lookup also keeps the QP alive for the call.
fn live(qp: *mut ibv_qp) -> Option<Arc<Qp>> {
    QPS.get(qp).and_then(|w| w.upgrade())
}

/// Socket calls that moved bytes on a QP's connections so far:
/// `(reads, writes)` of the incoming (responder) and outgoing (requester)
/// ones; `None` for a pointer that is not a live QP of ours. For tests and
/// diagnostics of the TCP path's batching.
pub fn socket_calls(qp: *mut ibv_qp) -> Option<[(u64, u64); 2]> {
    let q = live(qp)?;
    let g = q.inner.lock();
    let inc = g.incoming_conn().map_or((0, 0), |c| c.calls());
    let out = g.req.out_ref().map_or((0, 0), |o| o.conn.calls());
    Some([inc, out])
}

/// Connections a QP holds before knowing they are its peer's (accepted,
/// not yet promoted); `None` for a pointer that is not a live QP of ours.
/// For tests of the per-QP cap (the process-wide count moves with other
/// tests' connections).
pub fn held_connections(qp: *mut ibv_qp) -> Option<usize> {
    let q = live(qp)?;
    let g = q.inner.lock();
    Some(g.resp.pending_count())
}

/// The live QP behind `qp` whose public struct still names it: EINVAL
/// for what is no QP of ours, `unknown` for one whose context or handle
/// was overwritten (what the kernel answers for the verb,
/// `handles::UNKNOWN_BY_IOCTL` or `UNKNOWN_BY_WRITE`).
fn checked(qp: *mut ibv_qp, unknown: std::os::raw::c_int) -> Result<Arc<Qp>, std::os::raw::c_int> {
    let q = live(qp).ok_or(libc::EINVAL)?;
    if q.names_itself() {
        Ok(q)
    } else {
        Err(unknown)
    }
}

/// The QP a control verb acts on: the QP itself, or the one an opened
/// handle stands for; checked as [`checked`] checks it.
fn checked_target(
    qp: *mut ibv_qp,
    unknown: std::os::raw::c_int,
) -> Result<Arc<Qp>, std::os::raw::c_int> {
    checked(qp, unknown).map(|q| q.opened_from.clone().unwrap_or(q))
}

/// The counters report `rsw-stat` reads (`stats`): every live QP's.
pub(crate) fn stats_report() -> String {
    let qps: Vec<crate::stats::QpReport> = QPS
        .values()
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .filter(|q| q.opened_from.is_none())
        .map(|q| {
            let g = q.inner.lock();
            crate::stats::QpReport {
                device: q.ctx.dev.name.clone(),
                qpn: q.qpn,
                kind: match g.qp_type {
                    IBV_QPT_RC => "RC",
                    IBV_QPT_UC => "UC",
                    IBV_QPT_UD => "UD",
                    IBV_QPT_RAW_PACKET => "RAW_PACKET",
                    IBV_QPT_XRC_SEND => "XRC_SEND",
                    IBV_QPT_XRC_RECV => "XRC_RECV",
                    _ => "other",
                },
                state: crate::trace::qp_state_name(g.state),
                counters: g.stats.snapshot(),
            }
        })
        .collect();
    let mut qps = qps;
    qps.sort_by_key(|q| q.qpn);
    let ports = crate::engine::roce_ud::port_counters();
    crate::stats::render(std::process::id(), &qps, &ports)
}
