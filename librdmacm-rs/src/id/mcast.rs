//! Multicast groups of datagram ids: `rdma_join_multicast(_ex)` and
//! `rdma_leave_multicast`.
//!
//! A group is an IP multicast address; its MGID is that address as RoCE v2
//! maps it (`::ffff:a.b.c.d` for IPv4, the IPv6 address itself), and the
//! verbs layer's `ibv_attach_mcast` does the delivery (IP multicast, so
//! other processes and hosts receive too). There is no subnet manager to
//! ask, so a join succeeds at once; as in rdma-core, the id's QP is
//! attached when the application retrieves RDMA_CM_EVENT_MULTICAST_JOIN
//! (unless it joined as a send-only member), and a failed attach turns the
//! event into RDMA_CM_EVENT_MULTICAST_ERROR.

use super::*;

/// The QP number that addresses every member of a group.
const MCAST_QPN: u32 = 0x00ff_ffff;

pub(super) struct Membership {
    addr: SocketAddr,
    mgid: [u8; 16],
    send_only: bool,
    /// Its JOIN event went to the application.
    reported: bool,
    /// The id's QP was attached to the group then.
    attached: bool,
}

/// Whether `ip` is a multicast group (an IPv4 one may come IPv4-mapped).
fn is_group(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast()),
    }
}

impl CmId {
    /// `rdma_join_multicast_ex` after the argument checks.
    pub fn join_multicast(
        self: &Arc<Self>,
        addr: SocketAddr,
        flags: rdma_cm_mc_join_flags,
        context: *mut c_void,
    ) -> Res<()> {
        let mut st = self.st.lock();
        // As the kernel's CM: only UD ids with a device (bound to a local
        // address or with the address resolved), and never the wildcard.
        if !self.datagram(&mut st)
            || st.local.is_none()
            || !matches!(st.phase, Phase::Bound | Phase::AddrResolved)
            || addr.ip().is_unspecified()
        {
            return Err(libc::EINVAL);
        }
        let mgid = addr::gid_of(addr.ip());
        st.ud.mcast.push(Membership {
            addr,
            mgid,
            send_only: flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            reported: false,
            attached: false,
        });
        let ev = if is_group(addr.ip()) {
            let mut ev = self.event(RDMA_CM_EVENT_MULTICAST_JOIN, 0);
            ud::set_ud(&mut ev, Self::ah_attr_to(&st, mgid, 0), MCAST_QPN, ud::QKEY);
            ev.post = Post::McastJoin;
            ev
        } else {
            // A unicast address names no group: what attaching a QP to it
            // would answer.
            log::warn!(
                "id {:p}: {} is not a multicast address",
                self.raw,
                addr.ip()
            );
            self.event(RDMA_CM_EVENT_MULTICAST_ERROR, -libc::EINVAL)
        };
        let mut ev = ev;
        // rdma-core hands the join's context back in the private data
        // pointer.
        ev.ev.param.ud.private_data = context;
        self.queue(&st, ev);
        Ok(())
    }

    /// RDMA_CM_EVENT_MULTICAST_JOIN goes to the application: attach the
    /// QP (in the application's thread, as rdma-core does).
    pub(super) fn on_join_retrieved(ev: &mut EventBox) {
        let Some(id) = cm_id(&ev.subject) else { return };
        let mut st = id.st.lock();
        if st.destroyed {
            return;
        }
        // SAFETY: the event was made with `ud` filled in.
        let mgid = unsafe { ev.ev.param.ud.ah_attr.grh.dgid.raw() };
        let qp = id.qp(&mut st);
        // Events come in join order, so the oldest unreported membership of
        // the group is this event's; none left means it was left already.
        let Some(m) = st
            .ud
            .mcast
            .iter_mut()
            .find(|m| m.mgid == mgid && !m.reported)
        else {
            return;
        };
        m.reported = true;
        if qp.is_null() || m.send_only {
            return;
        }
        let gid = ibv_gid::from_raw(mgid);
        // SAFETY: the id's QP is live while attached to the id; `gid` is a
        // valid GID.
        match unsafe { ffi::ibv_attach_mcast(qp, &gid, 0) } {
            0 => m.attached = true,
            e => {
                log::warn!(
                    "id {:p}: attaching the QP to a group failed: errno {e}",
                    id.raw
                );
                ev.ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
                ev.ev.status = -e;
            }
        }
    }

    /// `rdma_leave_multicast`: forgets the latest join of `addr` and
    /// detaches the QP when no other join of the group still receives.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Res<()> {
        let mut st = self.st.lock();
        let i = st
            .ud
            .mcast
            .iter()
            .rposition(|m| m.addr == addr)
            .ok_or(libc::EADDRNOTAVAIL)?;
        let m = st.ud.mcast.remove(i);
        let still = st.ud.mcast.iter().any(|o| o.attached && o.mgid == m.mgid);
        let qp = self.qp(&mut st);
        if m.attached && !still && !qp.is_null() {
            let gid = ibv_gid::from_raw(m.mgid);
            // SAFETY: as in `on_join_retrieved`. A QP replaced since the
            // attach refuses the detach, which changes nothing.
            let _ = unsafe { ffi::ibv_detach_mcast(qp, &gid, 0) };
        }
        Ok(())
    }
}
