//! What the responder keeps per QP (rxe's `rxe_resp_info`): the
//! listener, the connections accepted and not yet known, the incoming
//! connection, and the ACKs it holds back. The QP holds it
//! (`QpInner::resp`), so this file names nothing above the objects; only
//! the responder edits its fields, the others go through the methods.

use crate::cq::Cqe;
use crate::transport::Listener;
use crate::wq::conn::{InConn, PendingConn};

pub struct RespInfo {
    pub(super) listener: Option<Listener>,
    pub(super) inc: Option<InConn>,
    pub(super) pending: Vec<Option<PendingConn>>,
    /// Counts connections put in `pending`, for their token ids.
    pub(super) pending_seq: usize,
    /// `accept` failed (e.g. EMFILE); the listener is not watched until
    /// this monotonic time.
    pub(super) accept_resume: Option<u64>,
    /// An incoming connection was accepted since RTR; no other may be.
    pub(super) inc_bound: bool,
    /// Receive completions of SENDs whose (cumulative) ACK is queued but
    /// not yet handed to the kernel: written once it is (`settle_acks`),
    /// within the same pass.
    pub(super) acked_later: Vec<Cqe>,
    /// The responder runs on the polling thread, which comes back soon: a
    /// SEND's ACK may wait for our next request to carry it (`owe_ack`);
    /// when the timer that sends it anyway fires.
    pub(super) defer_acks: bool,
    pub(super) ack_timer_at: u64,
    /// The QP's CQ poll count when the progress thread last served one of
    /// the peer's requests (`served_by_progress`).
    pub(super) served_polls: u64,
}

impl RespInfo {
    pub fn new(listener: Option<Listener>) -> RespInfo {
        RespInfo {
            listener,
            inc: None,
            pending: Vec::new(),
            pending_seq: 0,
            accept_resume: None,
            inc_bound: false,
            acked_later: Vec::new(),
            defer_acks: false,
            ack_timer_at: 0,
            served_polls: u64::MAX,
        }
    }

    #[inline]
    pub fn inc(&self) -> Option<&InConn> {
        self.inc.as_ref()
    }

    #[inline]
    pub fn inc_mut(&mut self) -> Option<&mut InConn> {
        self.inc.as_mut()
    }

    /// Drops the incoming connection (dead, or killed by a fault).
    pub fn drop_incoming(&mut self) {
        self.inc = None;
    }

    /// Drops the connections not yet known to be the peer's.
    pub fn drop_pending(&mut self) {
        self.pending.clear();
    }

    /// Drops pending connection `slot` (it hung up).
    pub fn drop_pending_slot(&mut self, slot: usize) {
        self.pending[slot] = None;
    }

    /// Pending connections held.
    pub fn pending_count(&self) -> usize {
        self.pending.iter().filter(|p| p.is_some()).count()
    }

    /// Back to RESET: no connection; another may be accepted.
    pub fn reset(&mut self) {
        self.inc = None;
        self.pending.clear();
        self.inc_bound = false;
    }

    /// RTR again: the next incoming connection may be accepted.
    pub fn unbind(&mut self) {
        self.inc_bound = false;
    }

    /// Destroyed: every connection and the listener go.
    pub fn shut(&mut self) {
        self.inc = None;
        self.pending.clear();
        self.listener = None;
    }

    /// The peer's connection is neither here nor refused for now:
    /// accepting it is still to come (if there is a listener).
    pub fn awaiting_peer(&self) -> bool {
        self.inc.is_none() && !self.inc_bound && self.accept_resume.is_none()
    }

    pub fn has_listener(&self) -> bool {
        self.listener.is_some()
    }
}
