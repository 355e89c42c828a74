//! Events an id reports, and its timers.

use super::*;

impl CmId {
    // -- events ------------------------------------------------------------

    pub(super) fn event(self: &Arc<Self>, kind: rdma_cm_event_type, status: i32) -> Box<EventBox> {
        EventBox::new(self, self, kind, status)
    }

    pub(super) fn queue(&self, st: &IdState, ev: Box<EventBox>) {
        st.chan.push(ev);
    }

    /// Queues an event another CM backend made, unless the id is being
    /// destroyed (its queued events are already gone then).
    pub fn post(&self, ev: Box<EventBox>) -> bool {
        let st = self.st.lock();
        if st.destroyed {
            return false;
        }
        self.queue(&st, ev);
        true
    }

    /// A connection attempt or connection ended with `kind`; the QP goes to
    /// the error state when the application gets the event.
    pub(super) fn fail(self: &Arc<Self>, st: &mut IdState, kind: rdma_cm_event_type, status: i32) {
        log::warn!(
            "id {:p} (to {}) in {:?} fails: {} status {} ({}){}",
            self.raw,
            st.dst.map_or_else(|| "?".to_string(), |a| a.to_string()),
            st.phase,
            crate::channel::event_name(kind),
            status,
            verbs_rt::trace::errno_name(-status),
            if status == -libc::ETIMEDOUT {
                ": timed out"
            } else {
                ""
            },
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        let mut ev = self.event(kind, status);
        // A UD QP has no connection to lose: it keeps working.
        if !self.datagram(st) {
            ev.post = Post::QpToErr;
        }
        self.queue(st, ev);
        self.close_sock(st);
    }

    pub(super) fn rejected(self: &Arc<Self>, st: &mut IdState, reason: u16, pdata: &[u8]) {
        if self.datagram(st) {
            return self.sidr_failed(st, Self::sidr_status_of(reason), pdata);
        }
        log::warn!(
            "id {:p} (to {}) in {:?}: connection rejected, reason {} ({}; {} bytes of private data)",
            self.raw,
            st.dst.map_or_else(|| "?".to_string(), |a| a.to_string()),
            st.phase,
            reason,
            crate::wire::rej_reason_name(reason),
            pdata.len()
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        let mut ev = self.event(RDMA_CM_EVENT_REJECTED, reason as i32);
        ev.set_pdata(pdata, REJ_PDATA);
        ev.post = Post::QpToErr;
        self.queue(st, ev);
        self.close_sock(st);
    }

    pub(super) fn disconnected(self: &Arc<Self>, st: &mut IdState, status: i32) {
        st.phase = Phase::Disconnected;
        let mut ev = self.event(RDMA_CM_EVENT_DISCONNECTED, status);
        ev.post = Post::QpToErr;
        self.queue(st, ev);
        self.arm(st, TimerKind::Proto, TIMEWAIT);
        self.hang_up(st);
    }

    // -- timers --------------------------------------------------------------

    pub(super) fn arm(self: &Arc<Self>, st: &mut IdState, kind: TimerKind, after: Duration) {
        let gen = match kind {
            TimerKind::Proto => {
                st.timer_gen += 1;
                st.timer_gen
            }
            TimerKind::Linger => {
                st.linger_gen += 1;
                st.linger_gen
            }
        };
        // The CM thread hands the cookie back: the generation, and the
        // kind in the low bit.
        let cookie = gen << 1 | kind as u64;
        if let Ok(e) = engine::get() {
            e.arm(after, TimerTarget::Id(self.as_target(), cookie));
        }
    }

    pub fn on_timer(self: &Arc<Self>, cookie: u64) {
        let (gen, kind) = (cookie >> 1, TimerKind::from_bit(cookie & 1));
        let mut st = self.st.lock();
        if st.destroyed {
            return;
        }
        match kind {
            TimerKind::Linger if Self::is_mad(&st) => {
                if gen == st.linger_gen {
                    self.mad_timer(&mut st);
                }
            }
            TimerKind::Linger => {
                if gen == st.linger_gen {
                    self.close_sock(&mut st);
                }
            }
            TimerKind::Proto => {
                if gen != st.timer_gen {
                    return;
                }
                match st.phase {
                    Phase::Connecting if st.retry.is_some() => self.retry_connect(&mut st),
                    Phase::Connecting | Phase::ReqSent | Phase::RepSent => {
                        self.fail(&mut st, RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT)
                    }
                    Phase::DreqSent => {
                        self.disconnected(&mut st, -libc::ETIMEDOUT);
                        self.close_sock(&mut st);
                    }
                    Phase::Disconnected => {
                        let ev = self.event(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
                        self.queue(&st, ev);
                    }
                    Phase::Listening => self.watch_listener(&mut st, true),
                    _ => {}
                }
            }
        }
    }
}
