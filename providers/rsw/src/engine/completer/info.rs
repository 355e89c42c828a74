//! What the completer keeps per QP (rxe's `rxe_comp_info`): the ACKs
//! that came on the peer's requests and how often polling reads our
//! connection meanwhile, and the RNR notices counted. The QP holds it
//! (`QpInner::comp`); only the completer edits it.

#[derive(Default)]
pub struct CompInfo {
    /// The peer acknowledged up to this MSN on one of its requests
    /// (`wire::FLAG_ACK`), past a READ or atomic still waiting for its
    /// response: the rest is completed once that response is in.
    pub(super) acked_upto: Option<u32>,
    /// The peer's last ACK that completed anything came on a request of
    /// its own, not on our connection: polling reads our connection only
    /// now and then (`completer::wants_poll`), counting with
    /// `polls_skipped`.
    pub(super) acks_ride: bool,
    pub(super) polls_skipped: u8,
    /// The message the last RNR wait notice was about, so repeated
    /// notices count once.
    pub(super) rnr_counted: Option<u32>,
}

impl CompInfo {
    /// A new outgoing connection: the ACKs that rode on the old one's
    /// peer are void.
    pub fn restart(&mut self) {
        self.acked_upto = None;
    }
}
