//! What the requester keeps per QP (rxe's `rxe_req_info`): the outgoing
//! connection, reconnecting, the retry timer, the batching of same-host
//! atomics, injected faults. The QP holds it (`QpInner::req`), so this
//! file names nothing above the objects; only the requester edits its
//! fields, the others go through the methods.

use crate::faults::QpFaults;
use crate::wq::conn::OutConn;

/// Why the outgoing connection cannot go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The peer cannot be reached: like an InfiniBand transport retry
    /// running out.
    Lost,
    /// A response made no sense for the WQE it answers.
    BadResponse,
    /// Our own registered memory could not be read (unmapped since it was
    /// registered) while part of the request was already on the wire.
    LocalFault,
    /// The peer's host stopped answering (TCP's keepalive or unacked-data
    /// timeout ran out): fails the QP even with nothing outstanding.
    Vanished,
}

/// How a socket error ends the connection.
pub fn broken_by(e: &std::io::Error) -> Broken {
    if crate::transport::vanished(e) {
        Broken::Vanished
    } else {
        Broken::Lost
    }
}

#[derive(Default)]
pub struct ReqInfo {
    pub(super) out: Option<OutConn>,
    /// The outgoing connection failed or ended; the next WQE that needs it
    /// completes with IBV_WC_RETRY_EXC_ERR.
    pub(super) peer_gone: bool,
    /// The earliest time we connect to the peer again, and whether the
    /// connection is such a second attempt not yet answered.
    pub(super) reconnect_at: u64,
    pub(super) reconnecting: bool,
    /// The retry timer: when it next ticks (0: not running), whether the
    /// peer showed signs of life since the last tick, whether work was
    /// outstanding when this period began, consecutive ticks without any,
    /// and until when an RNR wait notice vouches for the peer.
    pub(super) tick_at: u64,
    pub(super) progress: bool,
    pub(super) busy_from_start: bool,
    pub(super) idle: u8,
    pub(super) rnr_hold_until: u64,
    /// Inside `ibv_post_send` (atomics may be held back); same-host
    /// atomics held back for a batch, and when the timer that ends the
    /// wait fires; the send CQ's poll count when the last atomic was done
    /// from a post.
    pub(super) posting: bool,
    pub(super) atomics_deferred: bool,
    pub(super) atomic_timer_at: u64,
    pub(super) atomic_polls: Option<u64>,
    /// Requests posted into a full pipe, held for the rest of the
    /// program's burst (`requester::hold_for_burst`), and when the timer
    /// that ends the wait fires.
    pub(super) burst_held: bool,
    pub(super) burst_timer_at: u64,
    /// Injected faults for this QP's requests (`RSW_FAULTS`); None when
    /// none are configured, so the requester pays one branch.
    pub(super) faults: Option<Box<QpFaults>>,
}

impl ReqInfo {
    /// The outgoing connection, which the caller needs: gone means the
    /// peer is lost.
    #[inline]
    pub fn out(&mut self) -> Result<&mut OutConn, Broken> {
        self.out.as_mut().ok_or(Broken::Lost)
    }

    #[inline]
    pub fn out_ref(&self) -> Option<&OutConn> {
        self.out.as_ref()
    }

    /// Drops the outgoing connection (ERR, a reset's `modify_qp`, destroy).
    pub fn disconnect(&mut self) {
        self.out = None;
    }

    /// Drops the outgoing connection as unusable: the next WQE that needs
    /// it fails (or connects again).
    pub fn lose_peer(&mut self) {
        self.out = None;
        self.peer_gone = true;
    }

    /// Back to RESET; the atomics' batching and faults stay.
    pub fn reset(&mut self) {
        self.out = None;
        self.peer_gone = false;
        self.idle = 0;
        self.rnr_hold_until = 0;
        self.reconnecting = false;
    }

    /// Bytes came from the peer on our connection: it is alive, and a
    /// reconnection is answered.
    #[inline]
    pub fn answered(&mut self) {
        self.progress = true;
        self.reconnecting = false;
    }

    /// The peer showed signs of life (for the retry timer).
    #[inline]
    pub fn peer_alive(&mut self) {
        self.progress = true;
    }

    /// An RNR wait notice vouches for the peer until `until`.
    pub fn hold_for_rnr(&mut self, until: u64) {
        self.rnr_hold_until = until;
    }

    /// Marks the `ibv_post_send` call the requester runs in.
    #[inline]
    pub fn set_posting(&mut self, on: bool) {
        self.posting = on;
    }

    /// Same-host atomics wait for a batch.
    #[inline]
    pub fn atomics_deferred(&self) -> bool {
        self.atomics_deferred
    }

    /// A same-host SEND waits for the peer's receive.
    #[inline]
    pub fn rnr_waiting(&self) -> bool {
        self.out.as_ref().is_some_and(|o| o.rnr_since != 0)
    }

    /// The outgoing connection is still being made.
    pub fn connecting(&self) -> Option<&OutConn> {
        self.out.as_ref().filter(|o| !o.connected)
    }
}
