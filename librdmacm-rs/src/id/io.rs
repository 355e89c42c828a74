//! The connection to the peer CM: framing, reading and writing messages.

use super::*;

impl CmId {
    // -- socket I/O ----------------------------------------------------------

    pub(super) fn close_sock(&self, st: &mut IdState) {
        self.mad_close(st);
        if let Some(fd) = st.sock.take() {
            if st.token != 0 {
                if let Ok(e) = engine::get() {
                    e.deregister(fd.as_raw_fd(), st.token);
                }
            }
        }
        st.token = 0;
        st.inbuf.clear();
        st.outbuf.clear();
        st.out_armed = false;
        st.close_after_flush = false;
        st.linger_gen += 1;
    }

    /// Ends the connection once our last message is out. The active side
    /// closes first, so TCP's TIME_WAIT lands on its ephemeral port and not
    /// on the listener's; the passive side waits (bounded) for that close.
    pub(super) fn hang_up(self: &Arc<Self>, st: &mut IdState) {
        if st.passive {
            self.flush(st);
            self.arm(st, TimerKind::Linger, cm_timeout());
        } else {
            st.close_after_flush = true;
            self.flush(st);
        }
    }

    pub(super) fn register(self: &Arc<Self>, st: &mut IdState, events: u32) -> Res<()> {
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?.as_raw_fd();
        let e = engine::get()?;
        st.token = e.register(fd, Entry::Conn(self.as_target()), events)?;
        st.out_armed = events & EV_OUT != 0;
        Ok(())
    }

    pub(super) fn send(self: &Arc<Self>, st: &mut IdState, msg: &Msg) {
        if Self::is_mad(st) {
            return self.mad_send(st, msg);
        }
        if st.sock.is_none() {
            return;
        }
        if st.outbuf.len() > OUTBUF_LIMIT {
            // A peer that keeps sending (DREQ after DREQ) but reads nothing
            // must not grow the buffer without end; it misses only answers
            // it does not read.
            trace!("id {:p}: peer not reading, {:?} dropped", self.raw, msg);
            return;
        }
        msg.encode(&mut st.outbuf);
        if st.phase != Phase::Connecting {
            self.flush(st);
        }
    }

    pub(super) fn flush(&self, st: &mut IdState) {
        let Some(fd) = st.sock.as_ref() else { return };
        while !st.outbuf.is_empty() {
            match sock::write(fd, &st.outbuf) {
                Ok(n) => {
                    st.outbuf.drain(..n);
                }
                Err(libc::EINTR) => {}
                Err(libc::EAGAIN) => break,
                // The error shows up as end-of-stream on the read side.
                Err(_) => {
                    st.outbuf.clear();
                    break;
                }
            }
        }
        let want_out = !st.outbuf.is_empty();
        if want_out != st.out_armed && st.token != 0 {
            if let Ok(e) = engine::get() {
                e.modify(
                    fd.as_raw_fd(),
                    st.token,
                    EV_IN | if want_out { EV_OUT } else { 0 },
                );
            }
            st.out_armed = want_out;
        }
        if !want_out && st.close_after_flush {
            self.close_sock(st);
        }
    }

    /// Called by the CM thread when the id's connection is ready.
    pub fn on_io(self: &Arc<Self>, token: u64, events: u32) {
        let mut st = self.st.lock();
        if st.destroyed || st.token != token || st.sock.is_none() {
            return;
        }
        if events & EV_OUT != 0 {
            if st.phase == Phase::Connecting {
                self.finish_connect(&mut st);
            } else {
                self.flush(&mut st);
            }
        }
        if st.sock.is_some() && events & !EV_OUT != 0 {
            self.read_all(&mut st);
        }
    }

    pub(super) fn read_all(self: &Arc<Self>, st: &mut IdState) {
        let Some(fd) = st.sock.as_ref() else { return };
        let eof = sock::read_into(fd, &mut st.inbuf, MAX_FRAME);
        self.process(st, eof);
    }

    /// Handles every complete message received so far, then the end of
    /// the stream if `eof`.
    pub(super) fn process(self: &Arc<Self>, st: &mut IdState, mut eof: bool) {
        loop {
            match Msg::decode(&st.inbuf) {
                Ok(Some((msg, used))) => {
                    st.inbuf.drain(..used);
                    self.handle(st, msg);
                    if st.sock.is_none() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // Garbage from the peer: the connection is useless.
                    eof = true;
                    st.inbuf.clear();
                    break;
                }
            }
        }
        if eof {
            self.on_eof(st);
        }
    }

    pub(super) fn on_eof(self: &Arc<Self>, st: &mut IdState) {
        trace!("id {:p} in {:?}: connection closed", self.raw, st.phase);
        if self.datagram(st) {
            return self.sidr_eof(st);
        }
        match st.phase {
            Phase::ReqSent | Phase::ReqReceived | Phase::RepSent => {
                self.fail(st, RDMA_CM_EVENT_CONNECT_ERROR, -libc::ECONNRESET)
            }
            Phase::RepReceived | Phase::Established | Phase::DreqSent => self.disconnected(st, 0),
            _ => {}
        }
        self.close_sock(st);
    }

    pub(super) fn finish_connect(self: &Arc<Self>, st: &mut IdState) {
        let err = st.sock.as_ref().map(sock::so_error).unwrap_or(libc::EBADF);
        match err {
            0 => {
                st.phase = Phase::ReqSent;
                self.flush(st);
            }
            libc::ECONNREFUSED => self.refused(st),
            e => self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        }
    }

    pub(super) fn handle(self: &Arc<Self>, st: &mut IdState, msg: Msg) {
        use Phase::*;
        trace!("id {:p} in {:?} got {:?}", self.raw, st.phase, msg);
        if self.datagram(st) {
            return self.sidr_handle(st, msg);
        }
        match (st.phase, msg) {
            (ReqSent, Msg::Mra) if !st.mra_seen => {
                st.mra_seen = true;
                self.arm(st, TimerKind::Proto, cm_timeout() * 6)
            }
            (ReqSent, Msg::Rep(info)) => self.got_rep(st, info),
            (ReqSent | RepReceived | ReqReceived | RepSent, Msg::Rej { reason, pdata }) => {
                self.rejected(st, reason, &pdata)
            }
            (RepSent, Msg::Rtu) => {
                st.phase = Established;
                st.timer_gen += 1;
                let ev = self.event(RDMA_CM_EVENT_ESTABLISHED, 0);
                self.queue(st, ev);
            }
            (Established | RepReceived | RepSent | DreqSent, Msg::Dreq) => {
                // Unlike the IB CM we answer at once instead of waiting for
                // the application's rdma_disconnect: the initiator gets its
                // DISCONNECTED promptly either way.
                self.send(st, &Msg::Drep);
                self.disconnected(st, 0);
            }
            (Disconnected, Msg::Dreq) => self.send(st, &Msg::Drep),
            (DreqSent, Msg::Drep) => self.disconnected(st, 0),
            // Duplicates and stragglers after a state change.
            _ => {}
        }
    }

    pub(super) fn got_rep(self: &Arc<Self>, st: &mut IdState, info: ConnInfo) {
        self.ece.lock().remote = info.ece;
        st.phase = Phase::RepReceived;
        st.timer_gen += 1;
        // The peer's initiator depth is how many reads we must answer, and
        // its responder resources how many we may have outstanding.
        st.rr = info.initiator_depth;
        st.idepth = info.responder_resources;
        // Kept within what the IB CM's wire fields can carry and our port
        // (whose MTU `connect` put in `path_mtu`) can do, whatever the peer
        // claims.
        st.rnr_retry = info.rnr_retry_count.min(7);
        st.path_mtu = info.path_mtu.min(st.path_mtu).max(1);
        let mut ev = self.event(RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        report_conn(&mut ev, &info, REP_PDATA);
        ev.post = Post::ConnectReply;
        st.peer = Some(info);
        self.queue(st, ev);
    }
}
