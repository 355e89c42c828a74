//! What the `rdma_*` entry points call: the id's half of each verb.

use super::*;
use crate::faults;

impl CmId {
    // -- the API ---------------------------------------------------------------

    pub fn bind(&self, a: SocketAddr) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::Idle {
            return Err(libc::EINVAL);
        }
        self.bind_locked(&mut st, a)
    }

    pub fn resolve_addr(self: &Arc<Self>, src: Option<SocketAddr>, dst: SocketAddr) -> Res<()> {
        let mut st = self.st.lock();
        match st.phase {
            Phase::Idle => {
                if let Some(s) = src {
                    self.bind_locked(&mut st, s)?;
                }
            }
            Phase::Bound | Phase::AddrResolved => {}
            _ => return Err(libc::EINVAL),
        }
        let dst = addr::any_to_loopback(dst);
        if let Some(s) = st.src {
            if !family_matches(&s, &dst) {
                return Err(libc::EINVAL);
            }
        }
        let fallback = if st.sock.is_some() {
            Phase::Bound
        } else {
            Phase::Idle
        };
        if let Some(faults::Outcome::Event(kind, status)) = faults::strike(faults::Step::Addr)? {
            st.phase = fallback;
            let ev = self.event(kind, status);
            self.queue(&st, ev);
            return Ok(());
        }
        let bound_ip = st.src.map(|s| s.ip()).filter(|ip| !ip.is_unspecified());
        let src_ip = match bound_ip {
            Some(ip) => ip,
            None => match sock::route_source(&dst) {
                Ok(ip) => ip,
                Err(e) => {
                    st.phase = fallback;
                    let ev = self.event(RDMA_CM_EVENT_ADDR_ERROR, -e);
                    self.queue(&st, ev);
                    return Ok(());
                }
            },
        };
        let Some(loc) = device::find_local(src_ip) else {
            st.phase = fallback;
            let ev = self.event(RDMA_CM_EVENT_ADDR_ERROR, -libc::ENODEV);
            self.queue(&st, ev);
            return Ok(());
        };
        if st.sock.is_none() {
            let fd = sock::tcp_socket(&dst)?;
            sock::bind(&fd, &SocketAddr::new(src_ip, 0))?;
            let bound = sock::local_addr(&fd)?;
            st.sock = Some(fd);
            self.write_src(&mut st, bound);
        } else if let Some(s) = st.src {
            self.write_src(&mut st, SocketAddr::new(src_ip, s.port()));
        }
        self.set_device(&mut st, loc)?;
        let src_now = st.src.ok_or(libc::EINVAL)?;
        self.set_addrs(&mut st, src_now, dst, addr::gid_of(dst.ip()));
        st.phase = Phase::AddrResolved;
        let ev = self.event(RDMA_CM_EVENT_ADDR_RESOLVED, 0);
        self.queue(&st, ev);
        Ok(())
    }

    pub fn resolve_route(self: &Arc<Self>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::AddrResolved {
            return Err(libc::EINVAL);
        }
        if let Some(faults::Outcome::Event(kind, status)) = faults::strike(faults::Step::Route)? {
            let ev = self.event(kind, status);
            self.queue(&st, ev);
            return Ok(());
        }
        self.set_path(&mut st);
        st.phase = Phase::RouteResolved;
        let ev = self.event(RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        self.queue(&st, ev);
        Ok(())
    }

    pub fn listen(self: &Arc<Self>, backlog: i32) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase == Phase::Idle {
            self.bind_locked(
                &mut st,
                SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            )?;
        }
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        // The kernel's limit on connect requests awaiting retrieval.
        st.backlog = if backlog > 0 && backlog < 1024 {
            backlog as u32
        } else {
            1024
        };
        self.claim_for_listen(&mut st)?;
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?;
        sock::listen(fd, 1024)?;
        let raw = fd.as_raw_fd();
        st.token = engine::get()?.register(raw, Entry::Listener(self.as_target()), EV_IN)?;
        st.phase = Phase::Listening;
        self.mad_listen(&mut st);
        Ok(())
    }

    /// Checks connection parameters against the device, as librdmacm does.
    pub(super) fn valid_param(&self, st: &mut IdState, p: Option<&rdma_conn_param>) -> Res<()> {
        if st.ps != RDMA_PS_TCP {
            return Ok(());
        }
        let Some(p) = p else {
            return if self.qp(st).is_null() {
                Err(libc::EINVAL)
            } else {
                Ok(())
            };
        };
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        if p.responder_resources != RDMA_MAX_RESP_RES
            && p.responder_resources > dev.max_responder_resources
        {
            return Err(libc::EINVAL);
        }
        if p.initiator_depth != RDMA_MAX_INIT_DEPTH && p.initiator_depth > dev.max_initiator_depth {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    pub(super) fn pdata_of(p: Option<&rdma_conn_param>, max: usize) -> Res<Vec<u8>> {
        let Some(p) = p else { return Ok(Vec::new()) };
        let n = p.private_data_len as usize;
        if n > max {
            return Err(libc::EINVAL);
        }
        if n == 0 || p.private_data.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the caller's private data is readable for its length.
        Ok(unsafe { core::slice::from_raw_parts(p.private_data as *const u8, n) }.to_vec())
    }

    pub(super) fn local_gid(&self, st: &mut IdState) -> [u8; 16] {
        // SAFETY: `ibaddr` is the only member of the union.
        unsafe { self.cs(st).route.addr.addr.ibaddr.sgid.raw() }
    }

    /// The active MTU of the id's port (1024 when it cannot be known).
    pub(super) fn port_mtu(st: &IdState) -> u8 {
        st.local
            .and_then(|l| device::get(l.dev).port_attr(l.port).ok())
            .map(|p| p.active_mtu as u8)
            .unwrap_or(IBV_MTU_1024 as u8)
    }

    pub fn connect(self: &Arc<Self>, p: Option<&rdma_conn_param>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::RouteResolved {
            return Err(libc::EINVAL);
        }
        if self.datagram(&mut st) {
            return self.sidr_connect(&mut st, p);
        }
        self.valid_param(&mut st, p)?;
        let pdata = Self::pdata_of(p, REQ_PDATA)?;
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        st.idepth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => dev.max_initiator_depth,
        };
        st.rr = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => dev.max_responder_resources,
        };
        let (retry, rnr, flow) = match p {
            Some(p) => (
                p.retry_count.min(7),
                p.rnr_retry_count.min(7),
                p.flow_control,
            ),
            None => (7, 7, 0),
        };
        st.retry_count = retry;
        let qp = self.qp(&mut st);
        let (qpn, srq) = if qp.is_null() {
            p.map(|p| (p.qp_num, p.srq)).unwrap_or((0, 0))
        } else {
            // SAFETY: the id's QP is live while it is attached.
            unsafe { ((*qp).qp_num, u8::from(!(*qp).srq.is_null())) }
        };
        st.my_psn = random_psn();
        st.path_mtu = Self::port_mtu(&st);
        let info = ConnInfo {
            qpn,
            psn: st.my_psn,
            gid: self.local_gid(&mut st),
            responder_resources: st.rr,
            initiator_depth: st.idepth,
            retry_count: retry,
            rnr_retry_count: rnr,
            flow_control: flow,
            srq,
            path_mtu: st.path_mtu,
            traffic_class: st.tos,
            port_space: st.ps as u16,
            pdata,
            ece: self.ece.lock().local,
        };
        let dst = st.dst.ok_or(libc::EINVAL)?;
        if let Some(gsi) = Self::gsi_of(&st) {
            return self.mad_connect(&mut st, gsi, info);
        }
        if st.sock.is_none() {
            let fd = sock::tcp_socket(&dst)?;
            st.sock = Some(fd);
        }
        match faults::strike(faults::Step::Connect)? {
            Some(faults::Outcome::Rejected(reason)) => {
                self.rejected(&mut st, reason, &[]);
                return Ok(());
            }
            Some(faults::Outcome::Event(kind, status)) => {
                self.fail(&mut st, kind, status);
                return Ok(());
            }
            None => {}
        }
        st.cm_started = true;
        st.passive = false;
        st.mra_seen = false;
        st.refused = 0;
        st.outbuf.clear();
        Msg::Req(info).encode(&mut st.outbuf);
        if let Err(e) = self.start_connect(&mut st, dst) {
            // Nothing watches this socket: give it up and leave the id where
            // it was, so a later connect can try again.
            self.close_sock(&mut st);
            st.cm_started = false;
            return Err(e);
        }
        Ok(())
    }

    /// Starts the TCP connection to the listener with the REQ waiting in
    /// `outbuf`. Errors are only those of watching the socket; connection
    /// failures become events.
    pub(super) fn start_connect(self: &Arc<Self>, st: &mut IdState, dst: SocketAddr) -> Res<()> {
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?;
        sock::set_conn_options(fd);
        match sock::connect(fd, &dst) {
            Ok(_) => {
                self.register(st, EV_IN | EV_OUT)?;
                st.phase = Phase::Connecting;
                self.arm(st, TimerKind::Proto, cm_timeout());
            }
            Err(libc::ECONNREFUSED) => self.refused(st),
            Err(e) => self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        }
        Ok(())
    }

    /// Nobody listens on the destination port. An IB CM rejects at once,
    /// but a peer that has just agreed out of band to listen may not be
    /// listening yet: perftest -R connects right after its handshake, and
    /// with our instant address and route resolution it wins that race far
    /// more often than over a kernel CM (Debian's perftest cannot recover).
    /// So a refused connect is tried again a few times, 50 ms apart; a port
    /// nobody opens still ends in REJECTED, a quarter of a second later.
    pub(super) fn refused(self: &Arc<Self>, st: &mut IdState) {
        if st.refused >= REFUSED_RETRIES {
            return self.rejected(st, REJ_INVALID_SERVICE_ID, &[]);
        }
        st.refused += 1;
        let src = st.sock.as_ref().and_then(|fd| sock::local_addr(fd).ok());
        let req = std::mem::take(&mut st.outbuf);
        self.close_sock(st);
        st.retry = Some((req, src));
        st.phase = Phase::Connecting;
        self.arm(st, TimerKind::Proto, REFUSED_DELAY);
    }

    /// The scheduled retry of a refused connect: a new socket on the same
    /// source address (same port when it is still free), the same REQ.
    pub(super) fn retry_connect(self: &Arc<Self>, st: &mut IdState) {
        let Some((req, src)) = st.retry.take() else {
            return;
        };
        let Some(dst) = st.dst else { return };
        let fd = match sock::tcp_socket(&dst) {
            Ok(fd) => fd,
            Err(e) => return self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        };
        if let Some(a) = src {
            let _ = sock::set_reuseaddr(&fd);
            if sock::bind(&fd, &a).is_err() {
                let _ = sock::bind(&fd, &SocketAddr::new(a.ip(), 0));
            }
        }
        st.sock = Some(fd);
        st.outbuf = req;
        if let Err(e) = self.start_connect(st, dst) {
            self.close_sock(st);
            self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e);
        }
    }

    pub fn accept(self: &Arc<Self>, p: Option<&rdma_conn_param>) -> Res<()> {
        let mut st = self.st.lock();
        if self.datagram(&mut st) {
            return self.sidr_accept(&mut st, p);
        }
        if st.phase != Phase::ReqReceived {
            return Err(libc::EINVAL);
        }
        self.valid_param(&mut st, p)?;
        let pdata = Self::pdata_of(p, REP_PDATA)?;
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        let idepth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => st.idepth.min(dev.max_initiator_depth),
        };
        let rr = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => st.rr.min(dev.max_responder_resources),
        };
        let (rnr, flow) = match p {
            Some(p) => (p.rnr_retry_count.min(7), p.flow_control),
            None => (7, 0),
        };
        let qp = self.qp(&mut st);
        let (qpn, srq) = if qp.is_null() {
            p.map(|p| (p.qp_num, p.srq)).unwrap_or((0, 0))
        } else {
            // SAFETY: the id's QP is live while it is attached.
            unsafe { ((*qp).qp_num, u8::from(!(*qp).srq.is_null())) }
        };
        let old = (st.rr, st.idepth, st.my_psn);
        st.rr = rr;
        st.idepth = idepth;
        st.my_psn = random_psn();
        if !qp.is_null() {
            if let Err(e) = self.qp_to_rts(&mut st, qp) {
                (st.rr, st.idepth, st.my_psn) = old;
                return Err(e);
            }
        }
        let info = ConnInfo {
            qpn,
            psn: st.my_psn,
            gid: self.local_gid(&mut st),
            responder_resources: rr,
            initiator_depth: idepth,
            retry_count: 0,
            rnr_retry_count: rnr,
            flow_control: flow,
            srq,
            path_mtu: st.path_mtu,
            traffic_class: st.tos,
            port_space: st.ps as u16,
            pdata,
            // As rdma-core: the vendor the request named, our options.
            ece: {
                let e = *self.ece.lock();
                (e.remote.0, e.local.1)
            },
        };
        self.send(&mut st, &Msg::Rep(info));
        st.phase = Phase::RepSent;
        self.arm(&mut st, TimerKind::Proto, cm_timeout() * 6);
        Ok(())
    }

    pub fn reject(self: &Arc<Self>, pdata: &[u8], reason: u16) -> Res<()> {
        let mut st = self.st.lock();
        if self.datagram(&mut st) {
            return self.sidr_reject(&mut st, pdata);
        }
        if pdata.len() > REJ_PDATA {
            return Err(libc::EINVAL);
        }
        match st.phase {
            Phase::ReqReceived | Phase::RepReceived => {}
            _ => return Err(libc::EINVAL),
        }
        self.send(
            &mut st,
            &Msg::Rej {
                reason,
                pdata: pdata.to_vec(),
            },
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        self.hang_up(&mut st);
        Ok(())
    }

    pub fn establish(self: &Arc<Self>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::RepReceived || !self.qp(&mut st).is_null() {
            return Err(libc::EINVAL);
        }
        self.send(&mut st, &Msg::Rtu);
        st.phase = Phase::Established;
        Ok(())
    }

    /// The REJ for a handshake we abandon, with the IB CM's reasons: the
    /// passive side's consumer declined, the active side's stopped waiting.
    /// A datagram request is rejected by its passive side only.
    pub(super) fn give_up(&self, st: &mut IdState) -> Option<Msg> {
        if self.datagram(st) {
            return st.passive.then(|| {
                Msg::SidrRep(crate::wire::SidrRep {
                    status: crate::wire::SIDR_REJECT,
                    ..Default::default()
                })
            });
        }
        Some(Msg::Rej {
            reason: if st.passive {
                REJ_CONSUMER_DEFINED
            } else {
                REJ_TIMEOUT
            },
            pdata: Vec::new(),
        })
    }

    /// Returns whether a synchronous caller should now wait for an event.
    pub fn disconnect(self: &Arc<Self>) -> Res<bool> {
        let mut st = self.st.lock();
        if self.datagram(&mut st) {
            return self.sidr_disconnect(&mut st);
        }
        let qp = self.qp(&mut st);
        match st.phase {
            Phase::Established | Phase::RepReceived | Phase::RepSent => {
                qp_to_err(qp);
                self.send(&mut st, &Msg::Dreq);
                st.phase = Phase::DreqSent;
                self.arm(&mut st, TimerKind::Proto, cm_timeout() / 2);
                Ok(true)
            }
            Phase::DreqSent => {
                qp_to_err(qp);
                Ok(true)
            }
            Phase::Disconnected => {
                qp_to_err(qp);
                Ok(st.chan.has_events_for(self))
            }
            Phase::Connecting | Phase::ReqSent | Phase::ReqReceived => {
                qp_to_err(qp);
                if st.phase == Phase::Connecting {
                    // The REQ waits in our buffer for the TCP handshake:
                    // it must never leave, so the connection goes with it.
                    self.close_sock(&mut st);
                } else {
                    if let Some(m) = self.give_up(&mut st) {
                        self.send(&mut st, &m);
                    }
                    self.hang_up(&mut st);
                }
                st.phase = Phase::Closed;
                st.timer_gen += 1;
                Ok(false)
            }
            Phase::Closed if st.cm_started => {
                qp_to_err(qp);
                Ok(false)
            }
            _ => Err(libc::EINVAL),
        }
    }

    pub fn notify(self: &Arc<Self>, event: ibv_event_type) -> Res<()> {
        let mut st = self.st.lock();
        if event != IBV_EVENT_COMM_EST {
            return Err(libc::EINVAL);
        }
        match st.phase {
            Phase::RepSent => {
                // Data beat the RTU: the connection is up.
                st.phase = Phase::Established;
                st.timer_gen += 1;
                let ev = self.event(RDMA_CM_EVENT_ESTABLISHED, 0);
                self.queue(&st, ev);
                Ok(())
            }
            Phase::Established => Err(libc::EISCONN),
            _ => Err(libc::EINVAL),
        }
    }

    pub fn set_option(&self, level: i32, name: i32, val: &[u8]) -> Res<()> {
        let mut st = self.st.lock();
        let int_val = || -> Res<bool> {
            let b: [u8; 4] = val.try_into().map_err(|_| libc::EINVAL)?;
            Ok(i32::from_ne_bytes(b) != 0)
        };
        match (level, name) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => {
                if val.len() != 1 {
                    return Err(libc::EINVAL);
                }
                st.tos = val[0];
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                let on = int_val()?;
                match st.phase {
                    Phase::Idle => {}
                    Phase::Bound if on => {
                        if let Some(fd) = st.sock.as_ref() {
                            sock::set_reuseaddr(fd)?;
                        }
                        // Others may share the port from now on.
                        if let Some(c) = st.claim.as_ref() {
                            let want = ports::Holder {
                                reuse: true,
                                ..c.holder()
                            };
                            st.claim = Some(ports::claim(want, false, Some(c))?);
                        }
                    }
                    _ => return Err(libc::EINVAL),
                }
                st.reuseaddr = on;
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                let on = int_val()?;
                match st.phase {
                    Phase::Idle => st.afonly = Some(on),
                    Phase::Bound => {
                        st.afonly = Some(on);
                        // IPV6_V6ONLY cannot change on a bound socket: bind
                        // a fresh one to the same address and port.
                        if let Some(a) = st.src.filter(|a| a.is_ipv6()) {
                            let old = st.sock.take();
                            drop(old);
                            st.claim = None;
                            st.phase = Phase::Idle;
                            self.bind_locked(&mut st, a)?;
                        }
                    }
                    _ => return Err(libc::EINVAL),
                }
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                if val.len() != 1 {
                    return Err(libc::EINVAL);
                }
                st.ack_timeout = Some(val[0].min(31));
                Ok(())
            }
            _ => Err(libc::ENOSYS),
        }
    }

    /// Moves the id (and its queued events) to `chan`, or to a new private
    /// channel (synchronous mode) when `chan` is `None`.
    pub fn migrate(self: &Arc<Self>, chan: Option<Arc<Channel>>) -> Res<()> {
        let held;
        {
            let mut st = self.st.lock();
            if st.sync && chan.is_none() {
                return Err(libc::EINVAL);
            }
            let (new, sync) = match chan {
                Some(c) => (c, false),
                None => (Channel::create()?, true),
            };
            let old = std::mem::replace(&mut st.chan, new.clone());
            for ev in old.take_for(self) {
                new.push(ev);
            }
            let c = self.cs(&mut st);
            c.channel = new.c_ptr();
            held = std::mem::replace(&mut c.event, core::ptr::null_mut());
            if st.sync {
                old.destroy();
            }
            st.sync = sync;
        }
        if !held.is_null() {
            ack(held);
        }
        self.wait_acked();
        Ok(())
    }

    /// `rdma_destroy_id`.
    pub fn destroy(self: &Arc<Self>) {
        let (removed, held, sync_chan) = {
            let mut st = self.st.lock();
            if st.destroyed {
                return;
            }
            st.destroyed = true;
            if matches!(st.phase, Phase::ReqReceived | Phase::ReqSent) {
                // The peer learns at once instead of waiting for a timeout,
                // as the IB CM rejects on behalf of a destroyed id.
                if let Some(m) = self.give_up(&mut st) {
                    self.send(&mut st, &m);
                }
            }
            if Self::is_mad(&st)
                && matches!(
                    st.phase,
                    Phase::Established | Phase::RepSent | Phase::RepReceived
                )
            {
                // No connection closes under a MAD link: the IB CM sends
                // DREQ for a connected id destroyed, and so do we.
                self.send(&mut st, &Msg::Dreq);
            }
            self.close_sock(&mut st);
            st.claim = None;
            st.timer_gen += 1;
            st.phase = Phase::Closed;
            let removed = st.chan.take_for(self);
            let c = self.cs(&mut st);
            let held = std::mem::replace(&mut c.event, core::ptr::null_mut());
            let sync_chan = if st.sync { Some(st.chan.clone()) } else { None };
            (removed, held, sync_chan)
        };
        // Connect requests nobody retrieved die with their listener.
        for ev in removed {
            let request = matches!(ev.post, Post::ConnectRequest | Post::Kernel);
            if request && !ev.is_about(self) {
                let sub = cm_id(&ev.subject);
                drop(ev);
                if let Some(sub) = sub {
                    sub.destroy();
                }
            }
        }
        if !held.is_null() {
            ack(held);
        }
        self.wait_acked();
        IDS.remove(self.raw as *const c_void);
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.route.path_rec.is_null() {
            // SAFETY: allocated with calloc in `set_path`.
            unsafe { libc::free(c.route.path_rec.cast()) };
            c.route.path_rec = core::ptr::null_mut();
        }
        drop(st);
        if let Some(ch) = sync_chan {
            ch.destroy();
        }
        // The C struct goes last: every event pointing at it has been acked.
        // SAFETY: `raw` came from Box::into_raw in `new`; the id has been
        // removed from the registry, so no new user can reach it.
        drop(unsafe { Box::from_raw(self.raw) });
    }
}
