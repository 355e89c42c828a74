//! Datagram rsockets, in rdma-core 44's protocol (`dwire` has its
//! formats), so either end may be rdma-core's librdmacm.
//!
//! An rsocket's name is a kernel UDP socket (its number is that socket's
//! descriptor). Its datagrams travel as UD SENDs, from one QP per local
//! source address (made when a destination first needs it, on the device
//! owning that address), each behind a header naming the sender's socket
//! address. A destination is first reached through the UDP socket: the
//! datagram goes there behind a header naming our QP, and the peer
//! answers with its own QP's number, after which both sides hold an
//! address handle for the other and send over UD. rdma-core runs the UDP
//! side in a service thread; here every call that progresses the rsocket
//! (sends, receives, `rpoll`) reads the UDP socket first, so a datagram
//! that came through it is delivered ahead of the UD ones sent after it.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, LazyLock};

use core::ffi::c_int;
use core::ptr::null_mut;
use parking_lot::{Mutex, MutexGuard, RwLock};
use verbs_abi::*;

use super::dwire::{self, MSG_MAX, OP_CTRL, OP_DATA, QKEY};
use super::verbs::{self, Mr};
use crate::addr;
use crate::device;
use crate::error::{errno, Res};

/// Bytes of the GRH a UD receive starts with.
const GRH: usize = 40;
/// Largest datagram payload on any port: rdma-core's receive buffer less
/// the IPv4 header (less on a port with a smaller MTU, and for IPv6).
pub const MAX_DGRAM: usize = MSG_MAX - dwire::HDR4;
/// A receive slot: the GRH, then a whole message.
const SLOT: usize = GRH + MSG_MAX;

/// A QP of the rsocket, for one local source address.
struct Ud {
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    cc: *mut ibv_comp_channel,
    pd: *mut ibv_pd,
    mr: Option<Mr>,
    buf: Box<[u8]>,
    port: u8,
    gid_index: u8,
    gid: [u8; 16],
    /// The socket address its datagrams name as their source.
    local: SocketAddr,
    /// Largest message, header included: the port's MTU, at most MSG_MAX.
    max_msg: usize,
    rslots: usize,
    /// Free send slots (indices past `rslots`).
    sfree: Vec<usize>,
}

// SAFETY: verbs objects and owned memory, used only under the socket's mutex.
unsafe impl Send for Ud {}

impl Drop for Ud {
    fn drop(&mut self) {
        // SAFETY: made in `Ud::new`, released once, QP first.
        unsafe {
            if !self.qp.is_null() {
                verbs::ibv_destroy_qp(self.qp);
            }
            if !self.cq.is_null() {
                verbs::ibv_destroy_cq(self.cq);
            }
            if !self.cc.is_null() {
                verbs::ibv_destroy_comp_channel(self.cc);
            }
            self.mr = None;
            if !self.pd.is_null() {
                verbs::dealloc_pd(self.pd);
            }
        }
    }
}

impl Ud {
    fn new(local: SocketAddr, rslots: usize, sslots: usize) -> Res<Ud> {
        let ip = addr::unmap(local).ip();
        let found = device::find_local(ip).or_else(|| {
            // A loopback address of either family: the loopback device.
            ip.is_loopback()
                .then(|| device::find_local(IpAddr::V4(Ipv4Addr::LOCALHOST)))
                .flatten()
        });
        let at = found.ok_or(libc::EADDRNOTAVAIL)?;
        let dev = device::get(at.dev);
        let ctx = dev.ctx;
        let gid = dev
            .gids(at.port)
            .get(at.gid_index as usize)
            .copied()
            .ok_or(libc::EADDRNOTAVAIL)?;
        // IBV_MTU_256 is 1, each step doubles.
        let mtu = dev.port_attr(at.port)?.active_mtu.clamp(1, 5);
        let mut ud = Ud {
            qp: null_mut(),
            cq: null_mut(),
            cc: null_mut(),
            pd: null_mut(),
            mr: None,
            buf: vec![0u8; (rslots + sslots) * SLOT].into_boxed_slice(),
            port: at.port,
            gid_index: at.gid_index,
            gid,
            local,
            max_msg: (128usize << mtu).min(MSG_MAX),
            rslots,
            sfree: (rslots..rslots + sslots).collect(),
        };
        // SAFETY: `ctx` is an open device; each object is recorded in `ud`
        // and released by its Drop on failure.
        unsafe {
            ud.pd = verbs::ibv_alloc_pd(ctx);
            if ud.pd.is_null() {
                return Err(errno());
            }
            ud.cc = verbs::ibv_create_comp_channel(ctx);
            if ud.cc.is_null() {
                return Err(errno());
            }
            set_nonblocking((*ud.cc).fd);
            ud.cq = verbs::ibv_create_cq(ctx, (rslots + sslots) as c_int, null_mut(), ud.cc, 0);
            if ud.cq.is_null() {
                return Err(errno());
            }
            let len = ud.buf.len();
            ud.mr = Some(Mr::new(
                ud.pd,
                ud.buf.as_mut_ptr(),
                len,
                IBV_ACCESS_LOCAL_WRITE as c_int,
            )?);
            let mut attr = ibv_qp_init_attr::zeroed();
            attr.send_cq = ud.cq;
            attr.recv_cq = ud.cq;
            attr.qp_type = IBV_QPT_UD;
            attr.sq_sig_all = 1;
            attr.cap.max_send_wr = sslots as u32;
            attr.cap.max_recv_wr = rslots as u32;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            ud.qp = verbs::ibv_create_qp(ud.pd, &mut attr);
            if ud.qp.is_null() {
                return Err(errno());
            }
            let mut a = ibv_qp_attr::zeroed();
            a.qp_state = IBV_QPS_INIT;
            a.pkey_index = 0;
            a.port_num = ud.port;
            a.qkey = QKEY;
            modify(
                ud.qp,
                &mut a,
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
            )?;
            a = ibv_qp_attr::zeroed();
            a.qp_state = IBV_QPS_RTR;
            modify(ud.qp, &mut a, IBV_QP_STATE)?;
            a = ibv_qp_attr::zeroed();
            a.qp_state = IBV_QPS_RTS;
            a.sq_psn = 0;
            modify(ud.qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)?;
            verbs::arm_cq(ud.cq);
        }
        for i in 0..rslots {
            ud.post_recv(i)?;
        }
        Ok(ud)
    }

    fn qpn(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { (*self.qp).qp_num }
    }

    fn slot_ptr(&mut self, i: usize) -> *mut u8 {
        // SAFETY: slot `i` lies inside `buf` (i < rslots + sslots).
        unsafe { self.buf.as_mut_ptr().add(i * SLOT) }
    }

    fn post_recv(&mut self, i: usize) -> Res<()> {
        let sge = ibv_sge {
            addr: self.slot_ptr(i) as u64,
            length: SLOT as u32,
            lkey: self.mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
        };
        // SAFETY: our live QP; the slot stays registered until the QP is
        // gone.
        unsafe { verbs::post_recv(self.qp, i as u64, Some(sge)) }
    }

    /// An address handle for `to`: its address's GID, or ours for a
    /// loopback address (this host, whatever device the peer's QP is on).
    fn make_ah(&self, to: &SocketAddr) -> Res<*mut ibv_ah> {
        let ip = addr::unmap(*to).ip();
        let mut a = ibv_ah_attr::zeroed();
        a.is_global = 1;
        a.port_num = self.port;
        a.grh.dgid = ibv_gid::from_raw(if ip.is_loopback() {
            self.gid
        } else {
            addr::gid_of(ip)
        });
        a.grh.sgid_index = self.gid_index;
        a.grh.hop_limit = 64;
        // SAFETY: our live PD and a complete attribute.
        let ah = unsafe { verbs::ibv_create_ah(self.pd, &mut a) };
        if ah.is_null() {
            Err(errno())
        } else {
            Ok(ah)
        }
    }
}

/// `ibv_modify_qp` with the C convention turned into a result.
///
/// # Safety
/// `qp` is live.
unsafe fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: ibv_qp_attr_mask) -> Res<()> {
    // SAFETY: caller guarantee; `a` lives through the call.
    match unsafe { verbs::ibv_modify_qp(qp, a, mask as c_int) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

/// A destination: the QP we reach it from and, once its QP is known, the
/// address handle and QP number our UD sends use.
struct Dest {
    ud: usize,
    ah: *mut ibv_ah,
    qpn: u32,
}

/// Where a received datagram's bytes are.
enum Data {
    /// In a receive slot of `uds[ud]`, after the GRH and a header of
    /// `hdr` bytes.
    Slot { ud: usize, slot: usize, hdr: usize },
    /// Came through the UDP socket.
    Owned(Vec<u8>),
}

/// A received datagram waiting for the application.
struct Rx {
    data: Data,
    len: usize,
    from: SocketAddr,
}

pub struct Inner {
    uds: Vec<Ud>,
    family: c_int,
    pub nonblock: bool,
    dst: Option<SocketAddr>,
    /// By destination address (IPv4-mapped addresses as IPv4).
    dests: HashMap<SocketAddr, Dest>,
    rxq: VecDeque<Rx>,
    /// Datagrams of `rxq` that came through the UDP socket.
    owned: usize,
    rslots: usize,
    sslots: usize,
    reuseaddr: bool,
}

// SAFETY: verbs objects and address handles, used only under the mutex.
unsafe impl Send for Inner {}

impl Inner {
    fn release_ahs(&mut self) {
        for (_, d) in self.dests.drain() {
            if !d.ah.is_null() {
                // SAFETY: an AH we made, destroyed once, before its PD.
                unsafe { verbs::ibv_destroy_ah(d.ah) };
            }
        }
    }

    fn can_send(&self) -> bool {
        self.uds.iter().all(|u| !u.sfree.is_empty())
    }
}

pub struct DSocket {
    pub fd: c_int,
    udp: OwnedFd,
    pub inner: Mutex<Inner>,
}

static TABLE: LazyLock<RwLock<HashMap<c_int, Arc<DSocket>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

pub fn find(fd: c_int) -> Option<Arc<DSocket>> {
    TABLE.read().get(&fd).cloned()
}

pub fn create(family: c_int, nonblock: bool) -> Res<c_int> {
    // SAFETY: plain socket(2).
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor we own.
    let udp = unsafe { OwnedFd::from_raw_fd(fd) };
    let s = Arc::new(DSocket {
        fd,
        udp,
        inner: Mutex::new(Inner {
            uds: Vec::new(),
            family,
            nonblock,
            dst: None,
            dests: HashMap::new(),
            rxq: VecDeque::new(),
            owned: 0,
            rslots: 64,
            sslots: 64,
            reuseaddr: false,
        }),
    });
    TABLE.write().insert(fd, s);
    Ok(fd)
}

fn sockname(fd: c_int) -> Res<SocketAddr> {
    let mut ss = zeroed_storage();
    let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: a buffer of `len` bytes.
    if unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) } < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel filled a valid address.
    unsafe { addr::from_c(&ss as *const _ as *const libc::sockaddr) }.ok_or(libc::EINVAL)
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain bytes; zero is valid.
    unsafe { core::mem::zeroed() }
}

/// Our address `local` as the peer at `dst` sees it: IPv4 to an IPv4
/// peer (an IPv6 socket's IPv4-mapped addresses unmapped), else IPv6.
/// rdma-core's receivers accept a UDP header only of the family they see
/// the sender in.
fn local_for(local: SocketAddr, dst: &SocketAddr) -> SocketAddr {
    match (addr::unmap(local), addr::unmap(*dst)) {
        (l @ SocketAddr::V4(_), SocketAddr::V4(_)) => l,
        (SocketAddr::V4(l), SocketAddr::V6(_)) => {
            SocketAddr::new(IpAddr::V6(l.ip().to_ipv6_mapped()), l.port())
        }
        (l, _) => l,
    }
}

/// The source address the kernel routes `dst` from.
fn route_source(dst: &SocketAddr) -> Res<IpAddr> {
    let fam = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a throwaway socket, owned below.
    let probe = unsafe { libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if probe < 0 {
        return Err(errno());
    }
    // SAFETY: owned from here.
    let probe = unsafe { OwnedFd::from_raw_fd(probe) };
    let (ss, len) = addr::to_c(dst);
    // SAFETY: a UDP connect only picks a route.
    if unsafe {
        libc::connect(
            probe.as_raw_fd(),
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    } < 0
    {
        return Err(errno());
    }
    Ok(sockname(probe.as_raw_fd())?.ip())
}

impl DSocket {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Sends `parts` as one UDP datagram to `to`.
    fn udp_send(&self, to: &SocketAddr, parts: &[&[u8]], dontwait: bool) -> Res<usize> {
        let (mut ss, len) = addr::to_c(to);
        let mut iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut _,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut m: libc::msghdr = unsafe { core::mem::zeroed() };
        m.msg_name = &mut ss as *mut _ as *mut _;
        m.msg_namelen = len;
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = iov.len() as _;
        loop {
            // SAFETY: our socket; the message names live buffers.
            let n = unsafe { libc::sendmsg(self.udp.as_raw_fd(), &m, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = errno();
            if e != libc::EAGAIN || dontwait {
                return Err(e);
            }
            let mut p = libc::pollfd {
                fd: self.udp.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, -1) } < 0 && errno() == libc::EINTR {
                return Err(libc::EINTR);
            }
        }
    }

    /// `dst`'s entry (`ds_get_dest`): made on first use, with the QP of
    /// the source address we reach it from (made too if need be).
    fn dest(&self, g: &mut Inner, dst: SocketAddr) -> Res<SocketAddr> {
        let key = addr::unmap(dst);
        if g.dests.contains_key(&key) {
            return Ok(key);
        }
        // Our name; an unbound, wildcard or loopback name sends from the
        // address the kernel routes the destination from (as rdma-core).
        let mut me = sockname(self.udp.as_raw_fd())?;
        let ip = addr::unmap(me).ip();
        if ip.is_unspecified() || ip.is_loopback() {
            let src = route_source(&dst)?;
            me = match (me, src) {
                (SocketAddr::V6(_), IpAddr::V4(v4)) => {
                    SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), me.port())
                }
                _ => SocketAddr::new(src, me.port()),
            };
        }
        let ud = match g
            .uds
            .iter()
            .position(|u| addr::unmap(u.local).ip() == addr::unmap(me).ip())
        {
            Some(i) => i,
            None => {
                let u = Ud::new(me, g.rslots, g.sslots)?;
                g.uds.push(u);
                g.uds.len() - 1
            }
        };
        g.dests.insert(
            key,
            Dest {
                ud,
                ah: null_mut(),
                qpn: 0,
            },
        );
        Ok(key)
    }

    /// Binds an unbound socket to the address the kernel would send to
    /// `dst` from, as a UDP socket's first send does.
    fn autobind(&self, dst: &SocketAddr) -> Res<()> {
        if sockname(self.udp.as_raw_fd())?.port() != 0 {
            return Ok(());
        }
        let src = SocketAddr::new(route_source(dst)?, 0);
        let src = match (self.lock().family, src) {
            (libc::AF_INET6, SocketAddr::V4(v4)) => {
                SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), 0)
            }
            _ => src,
        };
        self.bind(src)
    }

    pub fn bind(&self, a: SocketAddr) -> Res<()> {
        let g = self.lock();
        if sockname(self.udp.as_raw_fd())?.port() != 0 {
            return Err(libc::EINVAL);
        }
        if g.reuseaddr {
            let one: c_int = 1;
            // SAFETY: setsockopt with a valid int.
            unsafe {
                libc::setsockopt(
                    self.udp.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_REUSEADDR,
                    &one as *const c_int as *const _,
                    4,
                )
            };
        }
        let (ss, len) = addr::to_c(&a);
        // SAFETY: our socket, a valid address.
        if unsafe {
            libc::bind(
                self.udp.as_raw_fd(),
                &ss as *const _ as *const libc::sockaddr,
                len,
            )
        } < 0
        {
            return Err(errno());
        }
        Ok(())
    }

    pub fn connect(&self, dst: SocketAddr) -> Res<()> {
        self.autobind(&dst)?;
        let mut g = self.lock();
        self.dest(&mut g, dst)?;
        g.dst = Some(dst);
        Ok(())
    }

    /// Reads the UDP socket (`udp_svc_process_rs`), then the CQs.
    pub fn progress(&self, g: &mut Inner) {
        let mut b = [0u8; MSG_MAX];
        loop {
            let mut ss = zeroed_storage();
            let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: our socket; buffers of the given sizes.
            let n = unsafe {
                libc::recvfrom(
                    self.udp.as_raw_fd(),
                    b.as_mut_ptr().cast(),
                    b.len(),
                    libc::MSG_DONTWAIT,
                    &mut ss as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n < 0 {
                // Empty, or an ICMP error of an earlier send: nothing
                // more to read now either way.
                break;
            }
            // SAFETY: the kernel filled the address.
            let Some(from) = (unsafe { addr::from_c(&ss as *const _ as *const libc::sockaddr) })
            else {
                continue;
            };
            let b = &b[..n as usize];
            let Some((op, qpn, hl)) =
                dwire::parse_udp_header(b, ss.ss_family as c_int == libc::AF_INET6)
            else {
                continue;
            };
            let Ok(key) = self.dest(g, from) else {
                continue;
            };
            let Some((ud, known)) = g
                .dests
                .get(&key)
                .map(|d| (d.ud, !d.ah.is_null() && d.qpn == qpn))
            else {
                continue;
            };
            let u = &g.uds[ud];
            if op == OP_DATA {
                // Tell the sender which QP to send to from now on.
                let (h, hl) = dwire::udp_header(OP_CTRL, u.qpn(), local_for(u.local, &from).ip());
                let _ = self.udp_send(&from, &[&h[..hl]], true);
            }
            if !known {
                if let (Ok(ah), Some(d)) = (u.make_ah(&from), g.dests.get_mut(&key)) {
                    if !d.ah.is_null() {
                        // SAFETY: the AH we made before, no longer used.
                        unsafe { verbs::ibv_destroy_ah(d.ah) };
                    }
                    d.ah = ah;
                    d.qpn = qpn;
                }
            }
            // Lossy as a full receive queue is.
            let room: usize = g.uds.iter().map(|u| u.rslots).sum::<usize>().max(g.rslots);
            if op == OP_DATA && g.owned < room {
                g.owned += 1;
                g.rxq.push_back(Rx {
                    data: Data::Owned(b[hl..].to_vec()),
                    len: b.len() - hl,
                    from,
                });
            }
        }
        self.poll_cqs(g);
    }

    fn poll_cqs(&self, g: &mut Inner) {
        let mut wc = [ibv_wc::zeroed(); 16];
        for (i, ud) in g.uds.iter_mut().enumerate() {
            loop {
                // SAFETY: our live CQ.
                let n = unsafe { verbs::poll_cq(ud.cq, &mut wc) }.unwrap_or(0);
                for w in &wc[..n] {
                    let slot = w.wr_id as usize;
                    if slot >= ud.rslots {
                        ud.sfree.push(slot);
                        continue;
                    }
                    let len = w.byte_len as usize;
                    let hdr = if w.status == IBV_WC_SUCCESS && len >= GRH + dwire::HDR4 {
                        let p = ud.slot_ptr(slot);
                        // SAFETY: the completion says `len` bytes of the
                        // slot were written.
                        let b = unsafe { core::slice::from_raw_parts(p.add(GRH), len - GRH) };
                        dwire::parse_ds_header(b)
                    } else {
                        None
                    };
                    match hdr {
                        Some((from, hl)) => g.rxq.push_back(Rx {
                            data: Data::Slot {
                                ud: i,
                                slot,
                                hdr: hl,
                            },
                            len: len - GRH - hl,
                            from,
                        }),
                        None => {
                            let _ = ud.post_recv(slot);
                        }
                    }
                }
                if n < wc.len() {
                    break;
                }
            }
        }
    }

    /// Waits for `ready` (EAGAIN when non-blocking).
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        nonblock: bool,
        ready: impl Fn(&Inner) -> bool,
    ) -> Res<MutexGuard<'a, Inner>> {
        loop {
            self.progress(&mut g);
            if ready(&g) {
                return Ok(g);
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            let fds = self.arm_locked(&g);
            self.progress(&mut g);
            if ready(&g) {
                return Ok(g);
            }
            let mut pfds: Vec<libc::pollfd> = fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            drop(g);
            // SAFETY: valid pollfds.
            let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) };
            if rc < 0 && errno() == libc::EINTR {
                return Err(libc::EINTR);
            }
            g = self.lock();
            Self::drain_locked(&g);
        }
    }

    /// # Safety
    /// `data..data+len` is readable.
    pub unsafe fn send_to(
        &self,
        data: *const u8,
        len: usize,
        to: Option<SocketAddr>,
        dontwait: bool,
    ) -> Res<usize> {
        if len > MAX_DGRAM {
            return Err(libc::EMSGSIZE);
        }
        let dst = to.or(self.lock().dst).ok_or(libc::EDESTADDRREQ)?;
        self.autobind(&dst)?;
        let mut g = self.lock();
        let key = self.dest(&mut g, dst)?;
        let nonblock = dontwait || g.nonblock;
        let ud = g.dests[&key].ud;
        let me = local_for(g.uds[ud].local, &dst);
        let (h, hl) = dwire::ds_header(&me);
        if hl + len > g.uds[ud].max_msg {
            return Err(libc::EMSGSIZE);
        }
        // A CTRL naming the peer's QP may be waiting.
        self.progress(&mut g);
        // SAFETY: caller guarantee.
        let payload = unsafe { core::slice::from_raw_parts(data, len) };
        if g.dests[&key].ah.is_null() {
            // The peer's QP is not known yet: through its UDP socket.
            let (uh, uhl) = dwire::udp_header(OP_DATA, g.uds[ud].qpn(), me.ip());
            drop(g);
            let n = self.udp_send(&dst, &[&uh[..uhl], payload], nonblock)?;
            return Ok(n.saturating_sub(uhl));
        }
        g = self.wait(g, nonblock, |g| !g.uds[ud].sfree.is_empty())?;
        let (ah, qpn) = {
            let d = g.dests.get(&key).ok_or(libc::EAGAIN)?;
            (d.ah, d.qpn)
        };
        let u = &mut g.uds[ud];
        let slot = u.sfree.pop().ok_or(libc::EAGAIN)?;
        let p = u.slot_ptr(slot);
        // SAFETY: the slot is ours (free) and SLOT bytes long; the payload
        // is the caller's.
        unsafe {
            core::ptr::copy_nonoverlapping(h.as_ptr(), p, hl);
            core::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(hl), len);
        }
        let mut sge = ibv_sge {
            addr: p as u64,
            length: (hl + len) as u32,
            lkey: u.mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
        };
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud = ibv_send_wr_ud {
            ah,
            remote_qpn: qpn,
            remote_qkey: QKEY,
        };
        // SAFETY: our live QP; `wr` and `sge` live through the call.
        if let Err(e) = unsafe { verbs::post_send(u.qp, &mut wr) } {
            u.sfree.push(slot);
            return Err(e);
        }
        Ok(len)
    }

    /// # Safety
    /// `buf..buf+len` is writable.
    pub unsafe fn recv_from(
        &self,
        buf: *mut u8,
        len: usize,
        dontwait: bool,
        peek: bool,
    ) -> Res<(usize, SocketAddr)> {
        let g = self.lock();
        let nonblock = dontwait || g.nonblock;
        if sockname(self.udp.as_raw_fd())?.port() == 0 {
            // Nothing can arrive at a socket with no address; rdma-core
            // refuses a receive before rbind/rconnect/rsendto the same way.
            return Err(libc::EINVAL);
        }
        let mut g = self.wait(g, nonblock, |g| !g.rxq.is_empty())?;
        let rx = g.rxq.front().ok_or(libc::EAGAIN)?;
        let (dlen, from) = (rx.len, rx.from);
        let n = dlen.min(len);
        match rx.data {
            Data::Owned(ref v) => {
                // SAFETY: the caller's buffer of `len` >= n bytes.
                unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), buf, n) };
                if !peek {
                    g.rxq.pop_front();
                    g.owned -= 1;
                }
            }
            Data::Slot { ud, slot, hdr } => {
                let u = &mut g.uds[ud];
                // SAFETY: the datagram's bytes in our slot; the caller's
                // buffer.
                unsafe { core::ptr::copy_nonoverlapping(u.slot_ptr(slot).add(GRH + hdr), buf, n) };
                if !peek {
                    let _ = u.post_recv(slot);
                    g.rxq.pop_front();
                }
            }
        }
        Ok((n, from))
    }

    pub fn revents(&self, events: i16) -> i16 {
        let mut g = self.lock();
        self.progress(&mut g);
        let mut r = 0;
        if events & libc::POLLIN != 0 && !g.rxq.is_empty() {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && g.can_send() {
            r |= libc::POLLOUT;
        }
        r
    }

    /// Arms the CQs; the descriptors to sleep on.
    fn arm_locked(&self, g: &Inner) -> Vec<c_int> {
        let mut fds = vec![self.udp.as_raw_fd()];
        for u in &g.uds {
            // SAFETY: our live CQ and channel.
            unsafe {
                verbs::arm_cq(u.cq);
                fds.push((*u.cc).fd);
            }
        }
        fds
    }

    /// Arms the CQs; the descriptors to sleep on.
    pub fn arm(&self) -> Vec<c_int> {
        self.arm_locked(&self.lock())
    }

    fn drain_locked(g: &Inner) {
        for u in &g.uds {
            // SAFETY: the live channel of our CQ.
            unsafe { verbs::drain_cq_events(u.cc) };
        }
    }

    pub fn drain(&self) {
        Self::drain_locked(&self.lock());
    }

    pub fn local_addr(&self) -> Res<SocketAddr> {
        sockname(self.udp.as_raw_fd())
    }

    pub fn peer_addr(&self) -> Res<SocketAddr> {
        self.lock().dst.ok_or(libc::ENOTCONN)
    }

    pub fn family(&self) -> c_int {
        self.lock().family
    }

    pub fn set_reuseaddr(&self, on: bool) {
        self.lock().reuseaddr = on;
    }

    /// SO_RCVBUF/SO_SNDBUF: how many datagrams may wait (before the first
    /// QP is made), in rdma-core's 2 KB buffers.
    pub fn set_buf(&self, recv: bool, bytes: usize) -> Res<()> {
        let mut g = self.lock();
        if !g.uds.is_empty() {
            return Err(libc::EINVAL);
        }
        let n = (bytes / MSG_MAX).clamp(4, 1024);
        if recv {
            g.rslots = n;
        } else {
            g.sslots = n;
        }
        Ok(())
    }

    pub fn bufs(&self) -> (usize, usize) {
        let g = self.lock();
        (g.rslots * MSG_MAX, g.sslots * MSG_MAX)
    }

    pub fn close(self: Arc<Self>) -> Res<()> {
        TABLE.write().remove(&self.fd);
        let mut g = self.lock();
        g.release_ahs();
        g.rxq.clear();
        g.uds.clear();
        Ok(())
    }
}
