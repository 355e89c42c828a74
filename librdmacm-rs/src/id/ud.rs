//! Datagram ids: ids whose QP type is UD (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`,
//! and `RDMA_PS_IB` ids given a UD QP). Their QP is ready to send as soon
//! as `rdma_create_qp` returns; `rdma_connect` only asks the listener for
//! its UD QP (service ID resolution, see `wire`) and `rdma_accept` answers
//! with it. Nothing stays open afterwards: no disconnect, no timewait.

use super::*;
use crate::wire::{
    SidrRep, SidrReq, REJ_INVALID_SERVICE_ID, SIDR_REJECT, SIDR_REP_PDATA, SIDR_REQ_PDATA,
    SIDR_SUCCESS, SIDR_UNSUPPORTED,
};

/// The Q_Key of every datagram id and the one its peers are told:
/// rdma-core's `RDMA_UDP_QKEY`. (An IB fabric's SA would give `RDMA_PS_IPOIB`
/// ids the IPoIB broadcast group's Q_Key; RoCE has no SA, so they get the
/// same one, as UD ids of `RDMA_PS_IB` do in the kernel.)
pub const QKEY: u32 = RDMA_UDP_QKEY;

/// The datagram part of an id's state.
#[derive(Default)]
pub struct UdState {
    /// Multicast groups joined and not left, oldest first.
    pub(super) mcast: Vec<mcast::Membership>,
}

/// The QP type an id of port space `ps` starts with, as rdma-core's
/// `rdma_create_id` chooses it.
pub fn initial_qp_type(ps: rdma_port_space) -> ibv_qp_type {
    match ps {
        RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
        _ => IBV_QPT_RC,
    }
}

/// Fills an event's `param.ud` (private data is set apart).
pub(super) fn set_ud(ev: &mut EventBox, ah: ibv_ah_attr, qp_num: u32, qkey: u32) {
    // Writing union fields is safe; `ud` is the member datagram events use.
    ev.ev.param.ud.ah_attr = ah;
    ev.ev.param.ud.qp_num = qp_num;
    ev.ev.param.ud.qkey = qkey;
}

impl CmId {
    /// Whether the id is a datagram id (its QP type is UD).
    pub(super) fn datagram(&self, st: &mut IdState) -> bool {
        self.cs(st).qp_type == IBV_QPT_UD
    }

    /// `datagram`, for callers outside the id module.
    pub fn is_datagram(&self) -> bool {
        let mut st = self.st.lock();
        self.datagram(&mut st)
    }

    /// Address handle attributes that reach `dgid` from the id's port.
    pub(super) fn ah_attr_to(st: &IdState, dgid: [u8; 16], traffic_class: u8) -> ibv_ah_attr {
        let mut ah = ibv_ah_attr::zeroed();
        ah.is_global = 1;
        ah.grh.dgid = ibv_gid::from_raw(dgid);
        ah.grh.hop_limit = HOP_LIMIT;
        ah.grh.traffic_class = traffic_class;
        if let Some(loc) = st.local {
            ah.grh.sgid_index = loc.gid_index;
            ah.port_num = loc.port;
        }
        ah
    }

    /// The attributes `rdma_init_qp_attr` reports for a UD QP: INIT with
    /// the Q_Key, then RTR and RTS with nothing but the state (and the send
    /// PSN rdma-core sets).
    pub(super) fn ud_qp_attr(st: &IdState, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        let loc = st.local.ok_or(libc::EINVAL)?;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = state;
        match state {
            IBV_QPS_INIT => {
                a.pkey_index = 0;
                a.port_num = loc.port;
                a.qkey = QKEY;
                Ok((
                    a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                ))
            }
            IBV_QPS_RTR => Ok((a, IBV_QP_STATE)),
            IBV_QPS_RTS => {
                a.sq_psn = 0;
                Ok((a, IBV_QP_STATE | IBV_QP_SQ_PSN))
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// A new UD QP goes straight to RTS, as rdma-core's `rdma_create_qp`
    /// does: a datagram QP needs no peer.
    pub(super) fn ud_qp_to_rts(st: &IdState, qp: *mut ibv_qp) -> Res<()> {
        for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
            let (mut a, mask) = Self::ud_qp_attr(st, state)?;
            modify(qp, &mut a, mask)?;
        }
        Ok(())
    }

    /// `RDMA_PS_IB` ids take the QP type of their first QP (made before any
    /// connection work), so one port space carries every kind; a datagram
    /// id takes only UD QPs, a connected one no UD QP.
    pub(super) fn check_qp_type(&self, st: &mut IdState, want: ibv_qp_type) -> Res<()> {
        let cm_started = st.cm_started;
        let ps = st.ps;
        let c = self.cs(st);
        let any = matches!(
            want,
            IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV
        );
        if ps == RDMA_PS_IB && !cm_started && any {
            c.qp_type = want;
        }
        if (c.qp_type == IBV_QPT_UD) != (want == IBV_QPT_UD) {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// The QP number a SIDR message names: the id's QP, else the one the
    /// application passed.
    fn sidr_qpn(&self, st: &mut IdState, p: Option<&rdma_conn_param>) -> u32 {
        let qp = self.qp(st);
        if qp.is_null() {
            p.map_or(0, |p| p.qp_num)
        } else {
            // SAFETY: the id's QP is live while it is attached.
            unsafe { (*qp).qp_num }
        }
    }

    // -- active side -----------------------------------------------------------

    /// `rdma_connect` on a datagram id: a SIDR_REQ to the listener.
    pub(super) fn sidr_connect(
        self: &Arc<Self>,
        st: &mut IdState,
        p: Option<&rdma_conn_param>,
    ) -> Res<()> {
        let pdata = Self::pdata_of(p, SIDR_REQ_PDATA)?;
        let req = SidrReq {
            qpn: self.sidr_qpn(st, p),
            qkey: QKEY,
            gid: self.local_gid(st),
            port_space: st.ps as u16,
            pdata,
        };
        if let Some(gsi) = Self::gsi_of(st) {
            return self.mad_sidr_connect(st, gsi, req.pdata);
        }
        let dst = st.dst.ok_or(libc::EINVAL)?;
        if st.sock.is_none() {
            st.sock = Some(sock::tcp_socket(&dst)?);
        }
        st.cm_started = true;
        st.passive = false;
        st.mra_seen = false;
        st.refused = 0;
        st.outbuf.clear();
        Msg::SidrReq(req).encode(&mut st.outbuf);
        if let Err(e) = self.start_connect(st, dst) {
            self.close_sock(st);
            st.cm_started = false;
            return Err(e);
        }
        Ok(())
    }

    /// What the active side of a SIDR exchange makes of a message.
    pub(super) fn sidr_handle(self: &Arc<Self>, st: &mut IdState, msg: Msg) {
        match (st.phase, msg) {
            (Phase::ReqSent, Msg::Mra) if !st.mra_seen => {
                st.mra_seen = true;
                self.arm(st, TimerKind::Proto, cm_timeout() * 6)
            }
            (Phase::ReqSent, Msg::SidrRep(rep)) => self.got_sidr_rep(st, rep),
            // Anything else (a passive id's peer has nothing more to say).
            _ => {}
        }
    }

    fn got_sidr_rep(self: &Arc<Self>, st: &mut IdState, rep: SidrRep) {
        if rep.status != SIDR_SUCCESS {
            return self.sidr_failed(st, rep.status, &rep.pdata);
        }
        st.timer_gen += 1;
        st.phase = Phase::Established;
        // SAFETY: `ibaddr` is the only member of the union.
        let dgid = unsafe { self.cs(st).route.addr.addr.ibaddr.dgid.raw() };
        let mut ev = self.event(RDMA_CM_EVENT_ESTABLISHED, 0);
        ev.set_pdata(&rep.pdata, SIDR_REP_PDATA);
        set_ud(
            &mut ev,
            Self::ah_attr_to(st, dgid, st.tos),
            rep.qpn,
            rep.qkey,
        );
        self.queue(st, ev);
        self.close_sock(st);
    }

    /// The request failed: UNREACHABLE with the SIDR status, as the
    /// kernel's CM reports a SIDR_REP that is not a success (1: nobody
    /// takes the request there, 2: rejected).
    pub(super) fn sidr_failed(self: &Arc<Self>, st: &mut IdState, status: u8, pdata: &[u8]) {
        log::warn!(
            "id {:p} (to {}): service ID resolution failed, status {} ({})",
            self.raw,
            st.dst.map_or_else(|| "?".to_string(), |a| a.to_string()),
            status,
            match status {
                SIDR_UNSUPPORTED => "nobody takes datagram requests on that port",
                SIDR_REJECT => "the peer called rdma_reject",
                _ => "other",
            }
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        let mut ev = self.event(RDMA_CM_EVENT_UNREACHABLE, i32::from(status));
        ev.set_pdata(pdata, SIDR_REP_PDATA);
        self.queue(st, ev);
        self.close_sock(st);
    }

    /// The SIDR status standing for an IB CM reject reason.
    pub(super) fn sidr_status_of(reason: u16) -> u8 {
        if reason == REJ_INVALID_SERVICE_ID {
            SIDR_UNSUPPORTED
        } else {
            SIDR_REJECT
        }
    }

    /// The CM connection of a datagram id ended. Only an active id still
    /// waiting for its answer cares.
    pub(super) fn sidr_eof(self: &Arc<Self>, st: &mut IdState) {
        if !st.passive && matches!(st.phase, Phase::Connecting | Phase::ReqSent) {
            self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -libc::ECONNRESET);
        }
        self.close_sock(st);
    }

    /// `rdma_disconnect` on a datagram id: there is no connection to end,
    /// only the QP to stop (rdma-core moves it to the error state and the
    /// kernel sends nothing).
    pub(super) fn sidr_disconnect(&self, st: &mut IdState) -> Res<bool> {
        if !st.cm_started {
            return Err(libc::EINVAL);
        }
        qp_to_err(self.qp(st));
        Ok(false)
    }

    // -- passive side ------------------------------------------------------------

    /// A SIDR_REQ reached `listener`: make the new id and queue
    /// RDMA_CM_EVENT_CONNECT_REQUEST, with the requester's UD QP in
    /// `param.ud`.
    pub fn on_sidr_request(listener: &Arc<CmId>, fd: OwnedFd, token: u64, req: SidrReq) {
        let Ok(eng) = engine::get() else { return };
        let ls = listener.st.lock();
        let addrs = sock::local_addr(&fd).and_then(|l| Ok((l, sock::peer_addr(&fd)?)));
        let new = match addrs
            .map_err(|_| REJ_CONSUMER_DEFINED)
            .and_then(|(local, peer)| {
                Self::admit_new(listener, &ls, local, peer, req.port_space, true, req.gid)
            }) {
            Ok(new) => new,
            Err(reason) => {
                drop(ls);
                eng.refuse_sidr(token, fd, Self::sidr_status_of(reason));
                return;
            }
        };
        let mut ev = EventBox::new(listener, &new, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        {
            let mut ns = new.st.lock();
            ns.sock = Some(fd);
            ns.token = token;
            eng.set_entry(token, Entry::Conn(new.as_target()));
            new.send(&mut ns, &Msg::Mra);
            set_ud(
                &mut ev,
                Self::ah_attr_to(&ns, req.gid, ns.tos),
                req.qpn,
                req.qkey,
            );
        }
        ev.ev.listen_id = listener.c();
        ev.set_pdata(&req.pdata, SIDR_REQ_PDATA);
        ev.post = Post::ConnectRequest;
        listener.pending_reqs.fetch_add(1, Ordering::Relaxed);
        listener.queue(&ls, ev);
    }

    /// `rdma_accept` on a datagram id: the SIDR_REP naming our UD QP. No
    /// event follows on this side.
    pub(super) fn sidr_accept(
        self: &Arc<Self>,
        st: &mut IdState,
        p: Option<&rdma_conn_param>,
    ) -> Res<()> {
        if st.phase != Phase::ReqReceived {
            return Err(libc::EINVAL);
        }
        let pdata = Self::pdata_of(p, SIDR_REP_PDATA)?;
        let rep = SidrRep {
            status: SIDR_SUCCESS,
            qpn: self.sidr_qpn(st, p),
            qkey: QKEY,
            gid: self.local_gid(st),
            pdata,
        };
        self.send(st, &Msg::SidrRep(rep));
        st.phase = Phase::Established;
        st.timer_gen += 1;
        self.hang_up(st);
        Ok(())
    }

    /// `rdma_reject` on a datagram id: a SIDR_REP with status 2 and the
    /// private data (at most what a SIDR_REP carries).
    pub(super) fn sidr_reject(self: &Arc<Self>, st: &mut IdState, pdata: &[u8]) -> Res<()> {
        if pdata.len() > SIDR_REP_PDATA || st.phase != Phase::ReqReceived {
            return Err(libc::EINVAL);
        }
        let rep = SidrRep {
            status: SIDR_REJECT,
            pdata: pdata.to_vec(),
            ..SidrRep::default()
        };
        self.send(st, &Msg::SidrRep(rep));
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        self.hang_up(st);
        Ok(())
    }

    /// In synchronous mode the request's event stays with the id until the
    /// next operation; a datagram accept completes without one, so it is
    /// released now, as rdma-core does.
    pub fn release_held_event(&self) {
        let held = self.with_c(|c, st| {
            if st.sync {
                std::mem::replace(&mut c.event, core::ptr::null_mut())
            } else {
                core::ptr::null_mut()
            }
        });
        if !held.is_null() {
            ack(held);
        }
    }
}
