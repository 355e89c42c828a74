//! The passive side: listening ids and the connection requests they take.

use super::*;

impl CmId {
    // -- passive side --------------------------------------------------------

    /// The listener accepts one pending TCP connection, if any.
    pub fn accept_one(self: &Arc<Self>) -> Option<OwnedFd> {
        let mut st = self.st.lock();
        if st.destroyed || st.phase != Phase::Listening {
            return None;
        }
        match sock::accept(st.sock.as_ref()?) {
            Ok(fd) => fd,
            Err(e) => {
                // Out of descriptors or memory: the connection stays queued
                // and the socket readable, so epoll would report it again
                // at once. Stop watching it for a moment instead of
                // spinning the CM thread.
                trace!("id {:p}: accept failed: errno {}", self.raw, e);
                self.watch_listener(&mut st, false);
                self.arm(&mut st, TimerKind::Proto, ACCEPT_RETRY);
                None
            }
        }
    }

    pub(super) fn watch_listener(&self, st: &mut IdState, on: bool) {
        if let (Some(fd), Ok(e)) = (st.sock.as_ref(), engine::get()) {
            e.modify(fd.as_raw_fd(), st.token, if on { EV_IN } else { 0 });
        }
    }

    /// A REQ arrived on a connection accepted by `listener`: make the new
    /// id and queue RDMA_CM_EVENT_CONNECT_REQUEST on the listener's channel.
    pub fn on_request(
        listener: &Arc<CmId>,
        fd: OwnedFd,
        token: u64,
        info: ConnInfo,
        rest: Vec<u8>,
    ) {
        let Ok(eng) = engine::get() else { return };
        let ls = listener.st.lock();
        let new = match Self::admit(listener, &ls, &fd, &info) {
            Ok(new) => new,
            Err(reason) => {
                drop(ls);
                eng.refuse(token, fd, reason);
                return;
            }
        };
        new.ece.lock().remote = info.ece;
        {
            let mut ns = new.st.lock();
            ns.sock = Some(fd);
            ns.token = token;
            ns.inbuf = rest;
            eng.set_entry(token, Entry::Conn(new.as_target()));
            new.send(&mut ns, &Msg::Mra);
        }
        let mut ev = EventBox::new(listener, &new, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        ev.ev.listen_id = listener.c();
        report_conn(&mut ev, &info, REQ_PDATA);
        ev.conn().retry_count = info.retry_count;
        ev.post = Post::ConnectRequest;
        listener.pending_reqs.fetch_add(1, Ordering::Relaxed);
        listener.queue(&ls, ev);
        // Whatever came right behind the REQ (the peer may already have
        // given up) is handled now that the request is queued before it.
        let mut ns = new.st.lock();
        if !ns.inbuf.is_empty() {
            new.process(&mut ns, false);
        }
    }

    /// Makes the id that answers a REQ on `fd` (connection not attached
    /// yet), or gives the reason to refuse the REQ with.
    pub(super) fn admit(
        listener: &Arc<CmId>,
        ls: &IdState,
        fd: &OwnedFd,
        info: &ConnInfo,
    ) -> Result<Arc<CmId>, u16> {
        let (Ok(local), Ok(peer)) = (sock::local_addr(fd), sock::peer_addr(fd)) else {
            return Err(REJ_CONSUMER_DEFINED);
        };
        Self::admit_at(listener, ls, local, peer, info)
    }

    /// `admit` between the addresses given (a TCP connection's, or those
    /// a MAD's header names).
    pub(super) fn admit_at(
        listener: &Arc<CmId>,
        ls: &IdState,
        local: SocketAddr,
        peer: SocketAddr,
        info: &ConnInfo,
    ) -> Result<Arc<CmId>, u16> {
        let new = Self::admit_new(listener, ls, local, peer, info.port_space, false, info.gid)?;
        let mut ns = new.st.lock();
        // As seen from here: the peer's initiator depth is what we must
        // answer, its responder resources what we may use.
        ns.rr = info.initiator_depth;
        ns.idepth = info.responder_resources;
        ns.retry_count = info.retry_count.min(7);
        ns.rnr_retry = info.rnr_retry_count.min(7);
        ns.path_mtu = info.path_mtu.min(Self::port_mtu(&ns)).max(1);
        ns.peer = Some(info.clone());
        drop(ns);
        Ok(new)
    }

    /// The part of `admit` that connection and datagram requests share: a
    /// request of port space `ps` (a datagram one if `datagram`) from the
    /// peer with GID `gid`, between `local` and `peer`, checked against
    /// the listener.
    pub(super) fn admit_new(
        listener: &Arc<CmId>,
        ls: &IdState,
        local: SocketAddr,
        peer: SocketAddr,
        ps: u16,
        datagram: bool,
        gid: [u8; 16],
    ) -> Result<Arc<CmId>, u16> {
        // SAFETY: the listener's C struct is live while we hold its lock.
        let (context, qp_type) = unsafe { ((*listener.c()).context, (*listener.c()).qp_type) };
        if ls.destroyed
            || ls.phase != Phase::Listening
            || u32::from(ps) != ls.ps
            || (qp_type == IBV_QPT_UD) != datagram
        {
            return Err(REJ_INVALID_SERVICE_ID);
        }
        if listener.pending_reqs.load(Ordering::Relaxed) >= ls.backlog {
            return Err(REJ_CONSUMER_DEFINED);
        }
        let loc = device::find_local(local.ip()).ok_or(REJ_INVALID_SERVICE_ID)?;
        let chan = if ls.sync {
            Channel::create().map_err(|_| REJ_CONSUMER_DEFINED)?
        } else {
            ls.chan.clone()
        };
        let new = CmId::new(ls.ps, chan, ls.sync, context);
        let mut ns = new.st.lock();
        if new.set_device(&mut ns, loc).is_err() {
            drop(ns);
            new.forget();
            return Err(REJ_CONSUMER_DEFINED);
        }
        new.cs(&mut ns).qp_type = qp_type;
        ns.passive = true;
        ns.cm_started = true;
        ns.phase = Phase::ReqReceived;
        new.set_addrs(&mut ns, local, peer, gid);
        new.set_path(&mut ns);
        ns.tos = ls.tos;
        ns.ack_timeout = ls.ack_timeout;
        drop(ns);
        Ok(new)
    }

    /// Drops a half-made id that was never shown to the application.
    pub(super) fn forget(self: &Arc<Self>) {
        IDS.remove(self.raw as *const c_void);
        let st = self.st.lock();
        if st.sync {
            st.chan.destroy();
        }
        drop(st);
        // SAFETY: the id was never shown to anyone: no event, no engine
        // entry and (just removed) no registry entry refers to it.
        drop(unsafe { Box::from_raw(self.raw) });
    }
}
