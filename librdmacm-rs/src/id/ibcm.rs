//! Ids on an rsw device in RoCEv2 mode: the same state machine, its
//! messages carried as IB CM MADs on QP1 (`gsi`, `mad`) instead of over a
//! TCP connection, so the peer may be the kernel's rdma_cm (rxe, a RoCE
//! NIC) as well as this library.
//!
//! The link to the peer is its GID and the two comm IDs. A REQ, REP or
//! DREQ is sent again every [`RESEND`] until answered (the id's protocol
//! timer still ends the wait); the last RTU or DREP is sent again when
//! the peer repeats the message it answers. A REQ carries rdma_cm's
//! header (addresses and source port) before the application's private
//! data, and its service ID names the port space and port, as the kernel
//! expects. Datagram ids resolve the service ID the same way (SIDR_REQ,
//! SIDR_REP), the request ID standing for the comm IDs.

use super::*;
use crate::gsi::{self, Gsi, MadTarget, Peer};
use crate::mad::{self, Cm, CmaHdr, Rep, Req, CMA_HDR_LEN, MAD_LEN};

/// How long a REQ, REP or DREQ waits for its answer before going again.
const RESEND: Duration = Duration::from_millis(1000);
/// Tries after the first; the protocol timer usually ends the wait first.
const MAX_RESENDS: u8 = 15;
/// What our MRA asks the requester to allow for the application's answer
/// (4.096 us * 2^24, about a minute).
const MRA_SERVICE_TIMEOUT: u8 = 24;

pub(super) struct MadLink {
    gsi: Arc<Gsi>,
    local_id: u32,
    remote_id: u32,
    peer_gid: [u8; 16],
    /// The transaction of the exchange under way (the REQ's, then a
    /// DREQ's).
    tid: u64,
    /// Sent and awaiting its answer: resent on the linger timer.
    pending: Option<[u8; MAD_LEN]>,
    resends: u8,
    /// Our last answer (RTU, DREP), for a peer that repeats its message.
    last_reply: Option<[u8; MAD_LEN]>,
    /// A passive id's entry in the repeated-REQ table.
    passive: bool,
    /// The service ID a SIDR exchange is about (0 for a connection).
    sid: u64,
}

fn new_tid() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    unsafe { libc::getrandom(&mut v as *mut u64 as *mut c_void, 8, libc::GRND_NONBLOCK) };
    v
}

impl MadTarget for CmId {
    fn on_mad(self: Arc<Self>, from: Peer, tid: u64, msg: Cm) {
        let listening = self.st.lock().phase == Phase::Listening;
        match &msg {
            Cm::Req(r) if listening => return CmId::on_mad_request(&self, from, tid, r),
            Cm::SidrReq {
                request_id,
                service_id,
                pdata,
                ..
            } if listening => {
                return CmId::on_mad_sidr_request(&self, from, tid, *request_id, *service_id, pdata)
            }
            _ => {}
        }
        CmId::on_link_mad(&self, from, tid, msg)
    }
}

impl CmId {
    fn as_mad_target(self: &Arc<Self>) -> std::sync::Weak<dyn MadTarget> {
        let w: std::sync::Weak<CmId> = Arc::downgrade(self);
        w
    }

    /// The GSI the id's device speaks the IB CM through, if it does.
    pub(super) fn gsi_of(st: &IdState) -> Option<Arc<Gsi>> {
        gsi::for_local(st.local?)
    }

    pub(super) fn is_mad(st: &IdState) -> bool {
        st.mad.is_some()
    }

    /// `connect` over MADs: the REQ goes to QP1 of the peer's GID.
    pub(super) fn mad_connect(
        self: &Arc<Self>,
        st: &mut IdState,
        gsi: Arc<Gsi>,
        info: ConnInfo,
    ) -> Res<()> {
        let (src, dst) = (st.src.ok_or(libc::EINVAL)?, st.dst.ok_or(libc::EINVAL)?);
        let local_id = gsi::new_comm_id();
        gsi::register(local_id, self.as_mad_target());
        st.mad = Some(MadLink {
            gsi,
            local_id,
            remote_id: 0,
            peer_gid: addr::gid_of(dst.ip()),
            tid: new_tid(),
            pending: None,
            resends: 0,
            last_reply: None,
            passive: false,
            sid: 0,
        });
        st.cm_started = true;
        st.passive = false;
        st.mra_seen = false;
        let hdr = CmaHdr {
            src: src.ip(),
            src_port: src.port(),
            dst: dst.ip(),
        };
        self.mad_send_req(st, info, hdr, dst.port());
        st.phase = Phase::ReqSent;
        self.arm(st, TimerKind::Proto, cm_timeout());
        Ok(())
    }

    fn mad_send_req(self: &Arc<Self>, st: &mut IdState, info: ConnInfo, hdr: CmaHdr, port: u16) {
        let loc = st.local.unwrap_or(Local {
            dev: 0,
            port: 1,
            gid_index: 0,
        });
        let mut pdata = hdr.encode().to_vec();
        pdata.extend_from_slice(&info.pdata);
        let qp_type = self.cs(st).qp_type;
        let Some(l) = st.mad.as_mut() else { return };
        let req = Req {
            local_comm_id: l.local_id,
            service_id: mad::service_id(st.ps, port),
            ca_guid: device::get(loc.dev).guid,
            qpn: info.qpn,
            responder_resources: info.responder_resources,
            initiator_depth: info.initiator_depth,
            transport: u8::from(qp_type == IBV_QPT_UC),
            flow_control: info.flow_control != 0,
            psn: info.psn,
            retry_count: info.retry_count,
            path_mtu: info.path_mtu,
            rnr_retry_count: info.rnr_retry_count,
            srq: info.srq != 0,
            local_gid: info.gid,
            remote_gid: l.peer_gid,
            flow_label: 0,
            traffic_class: info.traffic_class,
            hop_limit: HOP_LIMIT,
            sl: 0,
            local_ack_timeout: st.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT),
            pdata,
        };
        let m = Cm::Req(req).encode(l.tid);
        l.pending = Some(m);
        l.resends = 0;
        l.gsi.send_raw(&l.peer_gid, st.tos, &m);
        self.arm(st, TimerKind::Linger, RESEND);
    }

    /// `send` for an id whose peer speaks MADs.
    pub(super) fn mad_send(self: &Arc<Self>, st: &mut IdState, msg: &Msg) {
        let peer_qpn = st.peer.as_ref().map_or(0, |p| p.qpn);
        let guid = st.local.map_or(0, |l| device::get(l.dev).guid);
        let passive = st.passive;
        let tos = st.tos;
        let Some(l) = st.mad.as_mut() else { return };
        let (local, remote) = (l.local_id, l.remote_id);
        if l.sid != 0 && matches!(msg, Msg::Mra) {
            return;
        }
        let (cm, awaits_answer, is_reply) = match msg {
            Msg::Mra => (
                Cm::Mra {
                    local,
                    remote,
                    mraed: 0,
                    timeout: MRA_SERVICE_TIMEOUT,
                },
                false,
                false,
            ),
            Msg::Rep(i) => (
                Cm::Rep(Rep {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    qpn: i.qpn,
                    psn: i.psn,
                    responder_resources: i.responder_resources,
                    initiator_depth: i.initiator_depth,
                    target_ack_delay: 15,
                    flow_control: i.flow_control != 0,
                    rnr_retry_count: i.rnr_retry_count,
                    srq: i.srq != 0,
                    ca_guid: guid,
                    pdata: i.pdata.clone(),
                }),
                true,
                false,
            ),
            Msg::Rtu => (Cm::Rtu { local, remote }, false, true),
            Msg::Rej { reason, pdata } => (
                Cm::Rej {
                    local,
                    remote,
                    rejected: if passive { 0 } else { 1 },
                    reason: *reason,
                    pdata: pdata.clone(),
                },
                false,
                false,
            ),
            Msg::Dreq => {
                l.tid = new_tid();
                (
                    Cm::Dreq {
                        local,
                        remote,
                        remote_qpn: peer_qpn,
                    },
                    true,
                    false,
                )
            }
            Msg::Drep => (Cm::Drep { local, remote }, false, true),
            Msg::SidrRep(r) => (
                Cm::SidrRep {
                    request_id: remote,
                    status: r.status,
                    qpn: r.qpn,
                    service_id: l.sid,
                    qkey: r.qkey,
                    pdata: r.pdata.clone(),
                },
                false,
                true,
            ),
            // Requests go through `mad_connect` and `mad_sidr_connect`;
            Msg::Req(_) | Msg::SidrReq(_) => return,
        };
        let m = cm.encode(l.tid);
        l.gsi.send_raw(&l.peer_gid, tos, &m);
        if is_reply {
            l.last_reply = Some(m);
        }
        if awaits_answer {
            l.pending = Some(m);
            l.resends = 0;
            self.arm(st, TimerKind::Linger, RESEND);
        } else if matches!(msg, Msg::Rej { .. }) {
            l.pending = None;
        }
    }

    /// The linger timer of an id on MADs: the message awaiting an answer
    /// goes again; with nothing awaiting, a link whose connection is over
    /// (the hang-up's linger) is closed as a TCP connection would be, and
    /// a live one kept (a resend's timer that outlived its answer).
    pub(super) fn mad_timer(self: &Arc<Self>, st: &mut IdState) {
        let tos = st.tos;
        let over = matches!(st.phase, Phase::Closed | Phase::Disconnected);
        let Some(l) = st.mad.as_mut() else { return };
        match l.pending {
            Some(m) if l.resends < MAX_RESENDS => {
                l.resends += 1;
                l.gsi.send_raw(&l.peer_gid, tos, &m);
                self.arm(st, TimerKind::Linger, RESEND);
            }
            Some(_) => l.pending = None,
            None if over => self.close_sock(st),
            None => {}
        }
    }

    /// Forgets the link (the comm ID answers nothing any more).
    pub(super) fn mad_close(&self, st: &mut IdState) {
        if let Some(l) = st.mad.take() {
            gsi::unregister(l.local_id);
            if l.passive {
                gsi::unregister_remote(l.peer_gid, l.remote_id);
            }
        }
        if let Some(sid) = st.mad_sid.take() {
            gsi::unlisten(sid);
        }
    }

    /// A listener on a device that speaks MADs (or on the wildcard, when
    /// one does) takes REQs for its service ID too.
    pub(super) fn mad_listen(self: &Arc<Self>, st: &mut IdState) {
        let Some(src) = st.src else { return };
        let on_mad = match st.local {
            Some(loc) => gsi::for_local(loc).is_some(),
            None => {
                gsi::open_all();
                true
            }
        };
        if !on_mad {
            return;
        }
        let sid = mad::service_id(st.ps, src.port());
        if gsi::listen(sid, self.as_mad_target()) {
            st.mad_sid = Some(sid);
        }
    }

    /// A MAD for a connected (or connecting) id.
    fn on_link_mad(self: &Arc<Self>, from: Peer, tid: u64, msg: Cm) {
        let mut st = self.st.lock();
        if st.destroyed {
            return;
        }
        let tos = st.tos;
        let phase = st.phase;
        let path_mtu = st.path_mtu;
        let ps = st.ps as u16;
        let Some(l) = st.mad.as_mut() else { return };
        if from.gid != l.peer_gid {
            return;
        }
        if l.remote_id != 0 && msg.local_comm_id() != l.remote_id && !matches!(msg, Cm::Rej { .. })
        {
            return;
        }
        let m = match msg {
            Cm::Req(_) => {
                // The requester did not hear us: say again where we are.
                if let Some(m) = l.pending {
                    l.gsi.send_raw(&l.peer_gid, tos, &m);
                } else if phase == Phase::ReqReceived {
                    self.mad_send(&mut st, &Msg::Mra);
                }
                return;
            }
            Cm::Rep(r) => {
                if phase != Phase::ReqSent {
                    // Our RTU was lost.
                    if let Some(m) = l.last_reply {
                        l.gsi.send_raw(&l.peer_gid, tos, &m);
                    }
                    return;
                }
                l.remote_id = r.local_comm_id;
                l.pending = None;
                Msg::Rep(ConnInfo {
                    qpn: r.qpn,
                    psn: r.psn,
                    gid: l.peer_gid,
                    responder_resources: r.responder_resources,
                    initiator_depth: r.initiator_depth,
                    retry_count: 0,
                    rnr_retry_count: r.rnr_retry_count,
                    flow_control: u8::from(r.flow_control),
                    srq: u8::from(r.srq),
                    path_mtu,
                    traffic_class: tos,
                    port_space: ps,
                    pdata: r.pdata,
                    ece: (0, 0),
                })
            }
            Cm::Mra { .. } => {
                l.pending = None;
                Msg::Mra
            }
            Cm::Rej { reason, pdata, .. } => {
                l.pending = None;
                Msg::Rej { reason, pdata }
            }
            Cm::Rtu { .. } => {
                l.pending = None;
                Msg::Rtu
            }
            Cm::Dreq { local, .. } => {
                l.tid = tid;
                if l.remote_id == 0 {
                    l.remote_id = local;
                }
                if phase == Phase::Disconnected || phase == Phase::Closed {
                    if let Some(m) = l.last_reply {
                        l.gsi.send_raw(&l.peer_gid, tos, &m);
                    }
                    return;
                }
                Msg::Dreq
            }
            Cm::Drep { .. } => {
                l.pending = None;
                Msg::Drep
            }
            Cm::SidrRep {
                status,
                qpn,
                qkey,
                pdata,
                ..
            } => {
                l.pending = None;
                Msg::SidrRep(crate::wire::SidrRep {
                    status,
                    qpn,
                    qkey,
                    gid: l.peer_gid,
                    pdata,
                })
            }
            // A repeated SIDR_REQ: our answer again, if there is one.
            Cm::SidrReq { .. } => {
                if let Some(m) = l.last_reply {
                    l.gsi.send_raw(&l.peer_gid, tos, &m);
                }
                return;
            }
        };
        self.handle(&mut st, m);
    }

    /// A REQ for a listener: a new id, and RDMA_CM_EVENT_CONNECT_REQUEST
    /// with the application's part of the private data.
    fn on_mad_request(listener: &Arc<CmId>, from: Peer, tid: u64, r: &Req) {
        let Some(gsi) = gsi::for_local(from.loc) else {
            return;
        };
        let refuse = |reason: u16| {
            gsi.send(
                &from.gid,
                0,
                tid,
                &Cm::Rej {
                    local: 0,
                    remote: r.local_comm_id,
                    rejected: 0,
                    reason,
                    pdata: Vec::new(),
                },
            )
        };
        let Some(hdr) = CmaHdr::decode(&r.pdata) else {
            return refuse(REJ_INVALID_SERVICE_ID);
        };
        let Some((ps, port)) = mad::service_of(r.service_id) else {
            return refuse(REJ_INVALID_SERVICE_ID);
        };
        let local = SocketAddr::new(hdr.dst, port);
        let peer = SocketAddr::new(hdr.src, hdr.src_port);
        let info = ConnInfo {
            qpn: r.qpn,
            psn: r.psn,
            gid: from.gid,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            flow_control: u8::from(r.flow_control),
            srq: u8::from(r.srq),
            path_mtu: r.path_mtu,
            traffic_class: r.traffic_class,
            port_space: ps as u16,
            pdata: r.pdata[CMA_HDR_LEN.min(r.pdata.len())..].to_vec(),
            ece: (0, 0),
        };
        let ls = listener.st.lock();
        let new = match Self::admit_at(listener, &ls, local, peer, &info) {
            Ok(new) => new,
            Err(reason) => {
                drop(ls);
                return refuse(reason);
            }
        };
        {
            let mut ns = new.st.lock();
            let local_id = gsi::new_comm_id();
            gsi::register(local_id, new.as_mad_target());
            gsi::register_remote(from.gid, r.local_comm_id, new.as_mad_target());
            if ns.ack_timeout.is_none() && r.local_ack_timeout != 0 {
                ns.ack_timeout = Some(r.local_ack_timeout);
            }
            ns.mad = Some(MadLink {
                gsi,
                local_id,
                remote_id: r.local_comm_id,
                peer_gid: from.gid,
                tid,
                pending: None,
                resends: 0,
                last_reply: None,
                passive: true,
                sid: 0,
            });
            new.send(&mut ns, &Msg::Mra);
        }
        let mut ev = EventBox::new(listener, &new, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        ev.ev.listen_id = listener.c();
        report_conn(&mut ev, &info, REQ_PDATA);
        ev.conn().retry_count = info.retry_count;
        ev.post = Post::ConnectRequest;
        listener.pending_reqs.fetch_add(1, Ordering::Relaxed);
        listener.queue(&ls, ev);
    }

    /// `rdma_connect` on a datagram id over MADs: a SIDR_REQ to QP1 of
    /// the peer's GID, its request ID the link's comm ID.
    pub(super) fn mad_sidr_connect(
        self: &Arc<Self>,
        st: &mut IdState,
        gsi: Arc<Gsi>,
        pdata: Vec<u8>,
    ) -> Res<()> {
        let (src, dst) = (st.src.ok_or(libc::EINVAL)?, st.dst.ok_or(libc::EINVAL)?);
        let local_id = gsi::new_comm_id();
        gsi::register(local_id, self.as_mad_target());
        let sid = mad::service_id(st.ps, dst.port());
        let hdr = CmaHdr {
            src: src.ip(),
            src_port: src.port(),
            dst: dst.ip(),
        };
        let mut all = hdr.encode().to_vec();
        all.extend_from_slice(&pdata);
        let tid = new_tid();
        let m = Cm::SidrReq {
            request_id: local_id,
            pkey: 0xffff,
            service_id: sid,
            pdata: all,
        }
        .encode(tid);
        let peer_gid = addr::gid_of(dst.ip());
        gsi.send_raw(&peer_gid, st.tos, &m);
        st.mad = Some(MadLink {
            gsi,
            local_id,
            remote_id: 0,
            peer_gid,
            tid,
            pending: Some(m),
            resends: 0,
            last_reply: None,
            passive: false,
            sid,
        });
        st.cm_started = true;
        st.passive = false;
        st.mra_seen = false;
        st.phase = Phase::ReqSent;
        self.arm(st, TimerKind::Linger, RESEND);
        self.arm(st, TimerKind::Proto, cm_timeout());
        Ok(())
    }

    /// A SIDR_REQ for a datagram listener: a new id, and
    /// RDMA_CM_EVENT_CONNECT_REQUEST (the requester's QP number is not in
    /// a SIDR_REQ: 0, as the kernel reports it).
    fn on_mad_sidr_request(
        listener: &Arc<CmId>,
        from: Peer,
        tid: u64,
        request_id: u32,
        sid: u64,
        pdata: &[u8],
    ) {
        let Some(gsi) = gsi::for_local(from.loc) else {
            return;
        };
        let refuse = |status: u8| {
            gsi.send(
                &from.gid,
                0,
                tid,
                &Cm::SidrRep {
                    request_id,
                    status,
                    qpn: 0,
                    service_id: sid,
                    qkey: 0,
                    pdata: Vec::new(),
                },
            )
        };
        let (Some(hdr), Some((ps, port))) = (CmaHdr::decode(pdata), mad::service_of(sid)) else {
            return refuse(crate::wire::SIDR_UNSUPPORTED);
        };
        let local = SocketAddr::new(hdr.dst, port);
        let peer = SocketAddr::new(hdr.src, hdr.src_port);
        let ls = listener.st.lock();
        let new = match Self::admit_new(listener, &ls, local, peer, ps as u16, true, from.gid) {
            Ok(new) => new,
            Err(reason) => {
                drop(ls);
                return refuse(Self::sidr_status_of(reason));
            }
        };
        let mut ev = EventBox::new(listener, &new, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        {
            let mut ns = new.st.lock();
            let local_id = gsi::new_comm_id();
            gsi::register(local_id, new.as_mad_target());
            ns.mad = Some(MadLink {
                gsi,
                local_id,
                remote_id: request_id,
                peer_gid: from.gid,
                tid,
                pending: None,
                resends: 0,
                last_reply: None,
                passive: false,
                sid,
            });
            ud::set_ud(
                &mut ev,
                Self::ah_attr_to(&ns, from.gid, ns.tos),
                0,
                ud::QKEY,
            );
        }
        ev.ev.listen_id = listener.c();
        ev.set_pdata(
            &pdata[CMA_HDR_LEN.min(pdata.len())..],
            crate::wire::SIDR_REQ_PDATA,
        );
        ev.post = Post::ConnectRequest;
        listener.pending_reqs.fetch_add(1, Ordering::Relaxed);
        listener.queue(&ls, ev);
    }
}
