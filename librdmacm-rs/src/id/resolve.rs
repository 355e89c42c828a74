//! Address and route resolution, and the device an id is bound to.

use super::*;

impl CmId {
    // -- addresses and devices -------------------------------------------------

    pub(super) fn set_device(&self, st: &mut IdState, loc: Local) -> Res<()> {
        let dev = device::get(loc.dev);
        let pd = dev.default_pd()?;
        let gids = dev.gids(loc.port);
        let c = self.cs(st);
        c.verbs = dev.ctx;
        c.port_num = loc.port;
        c.pd = pd;
        c.route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        if let Some(g) = gids.get(loc.gid_index as usize) {
            c.route.addr.addr.ibaddr.sgid = ibv_gid::from_raw(*g);
        }
        st.local = Some(loc);
        Ok(())
    }

    /// Puts the id on a device another backend found for it.
    pub fn adopt_device(&self, loc: Local) -> Res<()> {
        let mut st = self.st.lock();
        self.set_device(&mut st, loc)
    }

    pub(super) fn write_src(&self, st: &mut IdState, a: SocketAddr) {
        let (ss, _) = addr::to_c(&a);
        self.cs(st).route.addr.src.src_storage = ss;
        st.src = Some(a);
    }

    pub(super) fn write_dst(&self, st: &mut IdState, a: SocketAddr) {
        let (ss, _) = addr::to_c(&a);
        self.cs(st).route.addr.dst.dst_storage = ss;
        st.dst = Some(a);
    }

    pub(super) fn set_addrs(
        &self,
        st: &mut IdState,
        local: SocketAddr,
        peer: SocketAddr,
        dgid: [u8; 16],
    ) {
        self.write_src(st, local);
        self.write_dst(st, peer);
        self.cs(st).route.addr.addr.ibaddr.dgid = ibv_gid::from_raw(dgid);
    }

    /// One path record, as rdma-core reports for RoCE after route resolution.
    pub(super) fn set_path(&self, st: &mut IdState) {
        if st.local.is_none() {
            return;
        }
        let mtu = Self::port_mtu(st);
        let tos = st.tos;
        let c = self.cs(st);
        if c.route.path_rec.is_null() {
            // SAFETY: calloc of one zeroed record; freed in `destroy`.
            let p = unsafe { libc::calloc(1, core::mem::size_of::<ibv_sa_path_rec>()) };
            if p.is_null() {
                return;
            }
            c.route.path_rec = p.cast();
        }
        // SAFETY: `ibaddr` is the only member of the union; the record was
        // allocated above and belongs to this id.
        unsafe {
            let ib = c.route.addr.addr.ibaddr;
            let p = &mut *c.route.path_rec;
            p.dgid = ib.dgid;
            p.sgid = ib.sgid;
            p.pkey = ib.pkey;
            p.hop_limit = HOP_LIMIT;
            p.traffic_class = tos;
            p.reversible = 1;
            p.numb_path = 1;
            p.mtu_selector = 2;
            p.mtu = mtu;
            p.rate_selector = 2;
            p.rate = IBV_RATE_10_GBPS as u8;
            p.packet_life_time_selector = 2;
            p.packet_life_time = 16;
        }
        c.route.num_paths = 1;
    }

    pub(super) fn bind_locked(&self, st: &mut IdState, a: SocketAddr) -> Res<()> {
        let fd = sock::tcp_socket(&a)?;
        if a.is_ipv6() {
            if let Some(only) = st.afonly {
                sock::set_v6only(&fd, only)?;
            }
        }
        // The kernel's CM rules for a port another id holds; a port the
        // system picks is nobody's yet.
        let claim = match a.port() {
            0 => None,
            _ => Some(ports::claim(self.holder(st, a), false, None)?),
        };
        // A listener restarted on its well-known port must not trip over
        // TCP TIME_WAIT remnants of its previous life (the claim above is
        // what keeps two ids apart).
        if a.port() != 0 || st.reuseaddr {
            sock::set_reuseaddr(&fd)?;
        }
        sock::bind(&fd, &a)?;
        let bound = addr::unmap(sock::local_addr(&fd)?);
        if !a.ip().is_unspecified() {
            let loc = device::find_local(a.ip()).ok_or(libc::ENODEV)?;
            self.set_device(st, loc)?;
        }
        self.write_src(st, bound);
        st.sock = Some(fd);
        st.claim = claim;
        st.phase = Phase::Bound;
        Ok(())
    }

    /// Gives up a bind to the wildcard address (the socket and the port
    /// claim), back to an unbound id, so that another CM can take the id
    /// with the same port; the address it was bound to, or None (and
    /// nothing changes) when it was not bound that way.
    pub fn unbind_wildcard(&self) -> Option<SocketAddr> {
        let mut st = self.st.lock();
        let a = st
            .src
            .filter(|a| st.phase == Phase::Bound && a.ip().is_unspecified())?;
        st.sock = None;
        st.claim = None;
        // The C struct keeps the old address until the next bind writes
        // its own.
        st.src = None;
        st.phase = Phase::Idle;
        Some(a)
    }

    /// How the port check sees this id bound to `a`.
    pub(super) fn holder(&self, st: &IdState, a: SocketAddr) -> ports::Holder {
        ports::Holder {
            ps: st.ps,
            addr: a,
            // The kernel's CM: IPv4 ids are AF-only unless told otherwise,
            // IPv6 ids as the namespace's bindv6only says.
            afonly: st
                .afonly
                .unwrap_or_else(|| a.is_ipv4() || ports::default_v6only()),
            reuse: st.reuseaddr,
        }
    }

    /// At `rdma_listen`: the port checked again as if this id allowed no
    /// reuse, and held unshareable from now on (a listener on a port the
    /// system picked claims it only now).
    pub(super) fn claim_for_listen(&self, st: &mut IdState) -> Res<()> {
        let held = st.claim.as_ref().map(|c| c.holder());
        let want = match (held, st.src) {
            (Some(h), _) if !h.reuse => return Ok(()),
            (Some(h), _) => h,
            (None, Some(a)) if a.port() != 0 => self.holder(st, a),
            (None, _) => return Ok(()),
        };
        let new = ports::claim(want, true, st.claim.as_ref())?;
        st.claim = Some(new);
        Ok(())
    }
}
