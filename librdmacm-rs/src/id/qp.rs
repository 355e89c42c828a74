//! The QP an id owns or was given, and the CQs `rdma_create_qp` makes.

use super::*;

impl CmId {
    // -- QPs -----------------------------------------------------------------

    /// The attributes `rdma_init_qp_attr` reports for moving a QP to `state`.
    pub(super) fn qp_attr(&self, st: &mut IdState, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        if self.datagram(st) {
            return Self::ud_qp_attr(st, state);
        }
        let qp_type = self.cs(st).qp_type;
        let loc = st.local.ok_or(libc::EINVAL)?;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = state;
        match state {
            IBV_QPS_INIT => {
                a.pkey_index = 0;
                a.port_num = loc.port;
                // Remote access is granted only once there is a peer, as the
                // kernel's CM does; reads and atomics only if we accept them.
                a.qp_access_flags = if st.cm_started {
                    let mut f = IBV_ACCESS_REMOTE_WRITE;
                    if st.rr > 0 {
                        f |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                    }
                    f
                } else {
                    0
                };
                Ok((
                    a,
                    IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
                ))
            }
            IBV_QPS_RTR => {
                let peer = st.peer.as_ref().ok_or(libc::EINVAL)?;
                a.path_mtu = u32::from(st.path_mtu);
                a.dest_qp_num = peer.qpn;
                // The IB CM's starting PSNs are what their sender expects
                // to receive; ours over TCP are what it will send.
                a.rq_psn = if Self::is_mad(st) {
                    st.my_psn
                } else {
                    peer.psn
                } & 0x00ff_ffff;
                a.max_dest_rd_atomic = st.rr;
                a.min_rnr_timer = 0;
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid = ibv_gid::from_raw(peer.gid);
                a.ah_attr.grh.sgid_index = loc.gid_index;
                a.ah_attr.grh.hop_limit = HOP_LIMIT;
                a.ah_attr.grh.traffic_class = st.tos;
                a.ah_attr.port_num = loc.port;
                let mask = IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER;
                Ok((a, xrc::qp_mask(qp_type, state, mask)))
            }
            IBV_QPS_RTS => {
                let Some(peer) = st.peer.as_ref() else {
                    return Err(libc::EINVAL);
                };
                a.sq_psn = if Self::is_mad(st) {
                    peer.psn
                } else {
                    st.my_psn
                } & 0x00ff_ffff;
                a.timeout = st.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT);
                a.retry_cnt = st.retry_count;
                a.rnr_retry = st.rnr_retry;
                a.max_rd_atomic = st.idepth;
                let mask = IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC;
                Ok((a, xrc::qp_mask(qp_type, state, mask)))
            }
            _ => Err(libc::EINVAL),
        }
    }

    pub fn init_qp_attr(&self, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        let mut st = self.st.lock();
        if state != IBV_QPS_INIT && st.phase == Phase::ReqSent && !self.datagram(&mut st) {
            // Not yet: the active side learns its peer from the REP.
            return Err(libc::EINVAL);
        }
        self.qp_attr(&mut st, state)
    }

    /// RTR (with the access rights the connection grants) then RTS.
    pub(super) fn qp_to_rts(&self, st: &mut IdState, qp: *mut ibv_qp) -> Res<()> {
        let (init, _) = self.qp_attr(st, IBV_QPS_INIT)?;
        let (mut a, mask) = self.qp_attr(st, IBV_QPS_RTR)?;
        a.qp_access_flags = init.qp_access_flags;
        modify(qp, &mut a, mask | IBV_QP_ACCESS_FLAGS)?;
        let (mut a, mask) = self.qp_attr(st, IBV_QPS_RTS)?;
        modify(qp, &mut a, mask)
    }

    /// `rdma_create_qp_ex`.
    pub fn create_qp(&self, attr: &mut ibv_qp_init_attr_ex) -> Res<()> {
        self.create_qp_with(attr, None)
    }

    /// `rdma_create_qp_ex` with the first transitions (to INIT, or to RTS
    /// for a UD QP) done by `init` instead of this CM: another backend
    /// knows the attributes. `init` is told whether the QP is UD.
    pub fn create_qp_with(
        &self,
        attr: &mut ibv_qp_init_attr_ex,
        init: Option<&dyn Fn(*mut ibv_qp, bool) -> Res<()>>,
    ) -> Res<()> {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.qp.is_null() || c.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        self.check_qp_type(&mut st, attr.qp_type)?;
        Self::xrc_qp_init(&st, attr)?;
        let c = self.cs(&mut st);
        let verbs = c.verbs;
        if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
            attr.pd = c.pd;
        } else {
            // SAFETY: the application's PD is live.
            if unsafe { (*attr.pd).context } != verbs {
                return Err(libc::EINVAL);
            }
        }
        if (!c.recv_cq.is_null() && !attr.recv_cq.is_null() && c.recv_cq != attr.recv_cq)
            || (!c.send_cq.is_null() && !attr.send_cq.is_null() && c.send_cq != attr.send_cq)
        {
            return Err(libc::EINVAL);
        }
        let send_size = if attr.send_cq.is_null() && c.send_cq.is_null() {
            attr.cap.max_send_wr
        } else {
            0
        };
        let recv_size = if attr.recv_cq.is_null() && c.recv_cq.is_null() {
            attr.cap.max_recv_wr
        } else {
            0
        };
        create_cqs(c, send_size, recv_size)?;
        if attr.send_cq.is_null() {
            attr.send_cq = c.send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = c.recv_cq;
        }
        if !c.srq.is_null() && attr.srq.is_null() {
            attr.srq = c.srq;
        }
        // SAFETY: `verbs` is an open context and `attr` a valid attribute set.
        let qp = unsafe { ffi::create_qp_ex(verbs, attr) };
        if qp.is_null() {
            let e = errno();
            destroy_cqs(self.cs(&mut st));
            return Err(if e == 0 { libc::ENOMEM } else { e });
        }
        // Ready for ibv_post_recv right away, as librdmacm promises (and a
        // UD QP for sending too).
        let init = self.ece_from_new_qp(qp).and_then(|()| {
            if let Some(f) = init {
                f(qp, self.datagram(&mut st))
            } else if self.datagram(&mut st) {
                Self::ud_qp_to_rts(&st, qp)
            } else {
                self.qp_attr(&mut st, IBV_QPS_INIT)
                    .and_then(|(mut a, mask)| modify(qp, &mut a, mask))
            }
        });
        let init = init.and_then(|()| self.ece_after_init(qp));
        if let Err(e) = init {
            // SAFETY: the QP was just created and is not shared yet.
            unsafe { ffi::ibv_destroy_qp(qp) };
            destroy_cqs(self.cs(&mut st));
            return Err(e);
        }
        let c = self.cs(&mut st);
        // SAFETY: `qp` is live. (An XRC receive QP belongs to a domain, not
        // a PD: the id keeps its own for the SRQs and MRs still to come.)
        let qp_pd = unsafe { (*qp).pd };
        if !qp_pd.is_null() {
            c.pd = qp_pd;
        }
        c.qp = qp;
        Ok(())
    }

    pub fn destroy_qp(&self) {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.qp.is_null() {
            // SAFETY: the QP was created by rdma_create_qp on this id.
            unsafe { ffi::ibv_destroy_qp(c.qp) };
            c.qp = core::ptr::null_mut();
        }
        // An XRC SRQ still completes into the receive CQ (rdma-core keeps
        // it too): it goes with the SRQ.
        if c.qp_type != IBV_QPT_XRC_RECV || c.srq.is_null() {
            destroy_cqs(c);
        }
    }

    /// `rdma_create_srq_ex`.
    pub fn create_srq(&self, attr: &mut ibv_srq_init_attr_ex) -> Res<()> {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if c.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
            return Err(libc::EINVAL);
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.pd = c.pd;
            attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        if attr.srq_type == IBV_SRQT_XRC {
            self.xrc_srq_init(&mut st, attr)?;
        }
        let c = self.cs(&mut st);
        // SAFETY: `verbs` is open and `attr` valid.
        let srq = unsafe { ffi::create_srq_ex(c.verbs, attr) };
        if srq.is_null() {
            let e = errno();
            return Err(if e == 0 { libc::ENOMEM } else { e });
        }
        if c.pd.is_null() {
            c.pd = attr.pd;
        }
        c.srq = srq;
        Ok(())
    }

    pub fn destroy_srq(&self) {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.srq.is_null() {
            // SAFETY: the SRQ was created by rdma_create_srq on this id.
            unsafe { ffi::ibv_destroy_srq(c.srq) };
            c.srq = core::ptr::null_mut();
        }
        destroy_cqs(c);
    }
}
