//! The protocol engines, below the QP verbs and above the transports:
//! `requester` (our requests on the outgoing connection), `samehost` (the
//! requests it does itself into a same-host peer), `completer` (the
//! responses to our requests), `responder` (the peer's requests on the
//! incoming connection, our responses), `datagram` (UD), `roce_ud` (UD
//! on a RoCEv2-mode device) and `raw` (raw packet QPs); each RC
//! engine keeps its per-QP state in its `info`, which the QP holds
//! (`wq::QpInner`, generic over [`Tasks`] so that it names no engine). Calls go requester -> samehost, completer;
//! responder -> requester, completer. They act on a QP's state (`wq`) under
//! its lock; here is how the progress thread, a CQ being polled and the
//! timers reach them.

pub(crate) mod completer;
pub(crate) mod datagram;
pub(crate) mod raw;
pub(crate) mod remote_atomic;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod rndv;
pub(crate) mod roce_faults;
pub(crate) mod roce_rc;
pub(crate) mod roce_tx;
pub(crate) mod roce_ud;
pub(crate) mod samehost;
pub(crate) mod ud_recv;

use crate::cq::Producer;
use crate::progress::{engine, Kind, Target};
use crate::util::mono_ns;
use verbs_abi::{IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD};

use crate::wq::{conn::InConn, Engines, ReqState, RespState};
use completer::info::CompInfo;
use requester::info::ReqInfo;
use responder::info::RespInfo;

/// The engines as the QP layer below sees them (`wq::Engines`).
pub enum Tasks {}

/// A QP whose engines are these; every layer from here up names this one.
pub type Qp = crate::wq::Qp<Tasks>;
pub type QpInner = crate::wq::QpInner<Tasks>;

impl Engines for Tasks {
    type Req = ReqInfo;
    type Resp = RespInfo;
    type Comp = CompInfo;
    type Roce = roce_ud::RocePort;
    type RoceRc = roce_rc::RcState;

    fn close_incoming(qp: &Qp, g: &mut QpInner) {
        responder::close_after_flush(qp, g);
    }

    fn send_responses(qp: &Qp, g: &mut QpInner) {
        responder::pump(qp, g);
    }
}

impl ReqState for ReqInfo {
    fn disconnect(&mut self) {
        ReqInfo::disconnect(self);
    }

    fn lose_peer(&mut self) {
        ReqInfo::lose_peer(self);
    }

    fn reset(&mut self) {
        ReqInfo::reset(self);
    }
}

impl RespState for RespInfo {
    fn new(listener: Option<crate::transport::Listener>) -> RespInfo {
        RespInfo::new(listener)
    }

    fn inc(&self) -> Option<&InConn> {
        RespInfo::inc(self)
    }

    fn inc_mut(&mut self) -> Option<&mut InConn> {
        RespInfo::inc_mut(self)
    }

    fn drop_pending(&mut self) {
        RespInfo::drop_pending(self);
    }

    fn reset(&mut self) {
        RespInfo::reset(self);
    }
}

/// What a CQ calls on the QPs that complete into it.
impl Producer for Qp {
    fn drive(&self) {
        self.drive_now();
    }

    fn kick(&self) {
        if let Ok(e) = engine() {
            e.kick(self.serial);
        }
    }

    fn armed(&self) {
        // Peers ring the doorbell from now on; what they left before is
        // moved by the progress thread (this thread may hold the QP).
        if let Some(m) = self.mailbox() {
            m.set_want_kick(true);
            if m.has_completions() {
                self.kick();
                return;
            }
        }
        // The program waits for events now, not polling: an ACK held back
        // for its next request is sent by the progress thread (a kick; sent
        // also when the QP is busy elsewhere, where it costs little).
        let kick = self
            .inner
            .try_lock()
            .is_none_or(|g| g.resp.inc().is_some_and(|i| i.ack_owed && !i.ack_lazy));
        if kick {
            self.kick();
        }
    }
}

/// The progress engine's entry points.
impl Target for Qp {
    fn on_event(&self, kind: Kind, events: u32) {
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        // Error and hang-up are reported even for descriptors we are not
        // reading on purpose (a held or RNR-stalled connection), so they
        // must end the connection here or they would fire forever.
        let dead = events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
        match kind {
            Kind::Datagram if g.raw.is_some() => raw::on_event(self, &mut g, events),
            Kind::Datagram => datagram::on_event(self, &mut g, events),
            Kind::Group(id) => datagram::receive_group(self, &mut g, id),
            Kind::Listener => responder::on_listener(self, &mut g),
            Kind::Pending(id) => match responder::pending_slot(&g, id) {
                Some(slot) if dead => g.resp.drop_pending_slot(slot),
                Some(slot) => responder::on_pending(self, &mut g, slot),
                None => {}
            },
            Kind::Incoming if dead => {
                let vanished = g.incoming_conn().is_some_and(|c| c.timed_out());
                g.resp.drop_incoming();
                if vanished {
                    self.peer_vanished(&mut g);
                }
            }
            Kind::Incoming => responder::pump(self, &mut g),
            Kind::Outgoing if dead && requester::outgoing_timed_out(&g) => {
                self.peer_vanished(&mut g)
            }
            Kind::Outgoing => requester::on_event(self, &mut g, events),
        }
    }

    fn on_kick(&self) {
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        self.check_cq_overrun(&mut g);
        self.drain_mailbox(&mut g);
        // A receive was posted to our SRQ while a same-host peer waited.
        self.wake_waiting_peer(&mut g);
        if g.dgram.is_some() {
            datagram::pump(self, &mut g);
            datagram::receive_all(self, &mut g);
            return;
        }
        if g.raw.is_some() {
            raw::pump(self, &mut g);
            raw::receive(self, &mut g);
            return;
        }
        if g.roce.is_some() {
            roce_rc::pump(self, &mut g);
            return;
        }
        responder::pump(self, &mut g);
        requester::pump(self, &mut g);
    }

    fn on_timer(&self, _due: u64) {
        // RoCEv2 RC: what arrived is read before silence is judged (the
        // timer may come due while the ACK waits in the port's socket).
        let port = {
            let g = self.inner.lock();
            g.roce.clone().filter(|_| g.dgram.is_none())
        };
        if let Some(p) = port {
            p.receive();
        }
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        // The engine read its clock before the wait for the QP, which a
        // descheduled polling thread may hold for longer than a retry
        // period: re-armed from that reading, the next tick would be due
        // at once, a period with no time in it for the peer to answer.
        let now = mono_ns();
        if g.roce.is_some() {
            roce_rc::on_timer(self, &mut g, now);
            return;
        }
        responder::on_timer(self, &mut g, now);
        if requester::tick_finds_silence(&g, now) {
            // A loaded machine stops all of this process's threads for tens
            // of milliseconds at a time; the tick that came due meanwhile
            // runs first when they run again, while what the peer said
            // waits unread in our sockets (its ACK on our connection, or
            // riding on its request on the incoming one). Silence we did
            // not listen to is not the peer's: read before judging.
            responder::pump(self, &mut g);
            requester::on_event(self, &mut g, libc::EPOLLIN as u32);
        }
        requester::on_timer(self, &mut g, now);
    }

    fn at_exit(&self) {
        if let Some(mut g) = self.inner.try_lock_for(crate::progress::AT_EXIT_WAIT) {
            if let Some(inc) = g.resp.inc_mut() {
                inc.send_owed_ack();
            }
        }
    }
}

/// An RC packet the device's RoCEv2 port received for `qp`
/// (`roce_ud::RocePort` finds the QP, `roce_rc` speaks RC).
pub(crate) fn roce_rc_packet(
    qp: &Qp,
    g: &mut QpInner,
    p: &crate::roce::packet::Packet,
    src: &[u8; 16],
) {
    roce_rc::receive(qp, g, p, src);
}

/// Sends what the packets `roce_rc_packet` gave `qp` made it queue.
pub(crate) fn roce_rc_flush(qp: &Qp, g: &mut QpInner) {
    roce_rc::flush(qp, g);
}

/// Watches a UD or raw packet QP's socket (`fd`) for room while sends
/// wait for it; `events` is what the progress engine watches now.
fn watch_datagram_socket(serial: u64, fd: std::os::fd::RawFd, events: &mut u32, want_out: bool) {
    let mut want = libc::EPOLLIN as u32;
    if want_out {
        want |= libc::EPOLLOUT as u32;
    }
    if want != *events {
        *events = want;
        if let Ok(e) = engine() {
            e.modify(fd, crate::progress::token(serial, Kind::Datagram), want);
        }
    }
}

/// Whether a connection of the QP is still being made: ours not yet
/// connected, or the peer's not yet accepted, in a state that takes it.
fn setting_up(g: &QpInner) -> bool {
    if !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) {
        return false;
    }
    g.req.connecting().is_some() || (g.resp.awaiting_peer() && g.resp.has_listener())
}

/// Polls between two looks at a connection being made, after the first
/// few: each look is a syscall or two, and a peer that never connects
/// must not make every poll pay for them.
const SETUP_POLL_EVERY: u32 = 16;
const SETUP_POLLS_EAGER: u32 = 1024;

impl Qp {
    /// Makes the QP's connections from a polling thread: completes our
    /// connect, accepts the peer's and reads its hello. Otherwise only the
    /// progress thread would, and on a machine with as many polling
    /// threads as cores it may not run for milliseconds (a 1000-message
    /// `ib_send_bw` took 2-15 ms to start, both programs spinning).
    fn drive_setup(&self, g: &mut QpInner) {
        g.setup_polls = g.setup_polls.wrapping_add(1);
        if g.setup_polls > SETUP_POLLS_EAGER && !g.setup_polls.is_multiple_of(SETUP_POLL_EVERY) {
            return;
        }
        let ev = g.req.connecting().map_or(0, |o| o.conn.connect_events());
        if ev != 0 {
            requester::on_event(self, g, ev);
        }
        if g.resp.awaiting_peer() {
            responder::accept_now(self, g);
        }
    }

    /// Before the QP goes: requests the peer sent that have already
    /// arrived are taken and acknowledged, as a NIC acknowledges on
    /// arrival, so the peer's work requests complete rather than time
    /// out (`ibv_srq_pingpong` over TCP failed now and then: each side
    /// posts a few SENDs past its count and destroys its QPs once the
    /// count is reached, with the other's last SENDs in its socket).
    pub fn take_arrived(&self, g: &mut QpInner) {
        if g.dgram.is_none()
            && g.raw.is_none()
            && g.resp.inc().is_some()
            && matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD)
        {
            responder::pump(self, g);
        }
    }

    /// One non-blocking progress step on the calling thread (from
    /// `poll_cq`); does nothing if another thread holds the QP.
    pub fn drive_now(&self) {
        let Some(mut g) = self.inner.try_lock() else {
            return;
        };
        if g.destroyed {
            return;
        }
        if g.dgram.is_some() {
            datagram::receive_all(self, &mut g);
            return;
        }
        if g.raw.is_some() {
            raw::receive(self, &mut g);
            return;
        }
        // RoCEv2 RC: the device's port is read here too, so that a
        // program polling does not wait for the progress thread (on a
        // busy machine it may not run for a retry period); without our
        // lock, which the packets for us take.
        if let Some(port) = g.roce.clone() {
            drop(g);
            port.poll();
            return;
        }
        g.polling = true;
        self.drive_polled(&mut g);
        g.polling = false;
    }

    /// `drive_now`'s work, with the QP held.
    fn drive_polled(&self, g: &mut QpInner) {
        self.drain_mailbox(g);
        if setting_up(g) {
            self.drive_setup(g);
        }
        // Connections the same-host path replaced carry little; reading
        // them here would cost two syscalls a poll, so the progress thread
        // serves them. Not for a QP on an SRQ that does not share its
        // ring (XRC, or resized): its SENDs still travel the connection,
        // and a program polling for them must not wait for the progress
        // thread.
        let srq_private = g.xrc_srq.is_some()
            || self
                .srq
                .as_ref()
                .is_some_and(|s| !s.sharing.load(std::sync::atomic::Ordering::Relaxed));
        if g.resp.inc().is_some_and(|i| !i.peer_direct || srq_private) {
            // An ACK held back since the last poll, which no request of
            // ours carried: now it goes.
            responder::send_owed_ack(self, g);
            responder::pump_deferring_acks(self, g);
        }
        let quiet = g.req.out_ref().is_some_and(|o| {
            o.direct.is_some() && !o.announce && !o.tx_active && !g.sq.in_flight()
        });
        if quiet {
            // A SEND waiting for the peer's receive is retried here, and
            // atomics held back for a batch run.
            if g.req.rnr_waiting() || g.req.atomics_deferred() {
                requester::pump(self, g);
            }
        } else if completer::wants_poll(g) {
            requester::on_event(self, g, libc::EPOLLIN as u32);
        }
    }
}
