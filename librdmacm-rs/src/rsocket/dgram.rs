//! Datagram rsockets: one UD QP per rsocket, datagrams as UD SENDs.
//!
//! An rsocket's name is a kernel UDP socket bound to its address (and its
//! number is that socket's descriptor). The UDP socket carries no data:
//! it answers "which QP are you" queries, so a sender can turn an IP
//! address and port into the GID and QP number its UD sends need. Every
//! datagram starts with a small header naming the sender's address, which
//! the receiver reports from `rrecvfrom` and remembers (with the QP number
//! the completion names) so replies need no query.
//!
//! The QP lives on the device that owns the rsocket's address; an rsocket
//! bound to the wildcard address uses the device of the loopback address,
//! so it is reachable on this host only.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use core::ffi::c_int;
use core::ptr::null_mut;
use parking_lot::{Mutex, MutexGuard, RwLock};
use verbs_abi::*;

use super::verbs::{self, Mr};
use crate::addr;
use crate::device;
use crate::error::{errno, Res};

/// The Q_Key every datagram rsocket uses.
const QKEY: u32 = 0x5253_4b51;
/// Bytes of the GRH a UD receive starts with.
const GRH: usize = 40;
/// Our header: magic, family, port, address, and the GID of the sender's
/// QP (which need not be its address's: an rsocket on ::1 has its QP on
/// the loopback device, whose GID is 127.0.0.1's).
const HDR: usize = 36;
const MAGIC: u8 = 0xd5;
/// Largest datagram payload on any port (a UD message must fit the
/// port's MTU, at most 4096 bytes; less on most devices).
pub const MAX_DGRAM: usize = 4096 - HDR;
const SLOT: usize = GRH + HDR + MAX_DGRAM;
const QUERY: &[u8; 4] = b"RSKQ";
const REPLY: &[u8; 4] = b"RSKR";
/// A reply: tag, QP number, GID.
const REPLY_LEN: usize = 24;
/// How often an unanswered query is repeated, and for how long.
const QUERY_EVERY: Duration = Duration::from_millis(100);
const QUERY_FOR: Duration = Duration::from_secs(5);

struct Peer {
    ah: *mut ibv_ah,
    qpn: u32,
}

/// The verbs side: a UD QP with its buffers.
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
    /// Largest payload: the port's MTU less our header.
    max_payload: usize,
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
    fn new(ip: IpAddr, rslots: usize, sslots: usize) -> Res<Ud> {
        let local = device::find_local(ip)
            .or_else(|| device::find_local(IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .ok_or(libc::EADDRNOTAVAIL)?;
        let dev = device::get(local.dev);
        let ctx = dev.ctx;
        let gid = dev
            .gids(local.port)
            .get(local.gid_index as usize)
            .copied()
            .ok_or(libc::EADDRNOTAVAIL)?;
        // IBV_MTU_256 is 1, each step doubles.
        let mtu = dev.port_attr(local.port)?.active_mtu.clamp(1, 5);
        let max_payload = ((128usize << mtu) - HDR).min(MAX_DGRAM);
        let mut ud = Ud {
            qp: null_mut(),
            cq: null_mut(),
            cc: null_mut(),
            pd: null_mut(),
            mr: None,
            buf: vec![0u8; (rslots + sslots) * SLOT].into_boxed_slice(),
            port: local.port,
            gid_index: local.gid_index,
            gid,
            max_payload,
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
        let mut sge = ibv_sge {
            addr: self.slot_ptr(i) as u64,
            length: SLOT as u32,
            lkey: self.mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
        };
        let mut wr = ibv_recv_wr {
            wr_id: i as u64,
            next: null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = null_mut();
        // SAFETY: our live QP; `wr` and `sge` live through the call and the
        // slot stays registered until the QP is gone.
        let rc = unsafe {
            match (*(*self.qp).context).ops.post_recv {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(rc)
        }
    }

    fn make_ah(&self, gid: [u8; 16]) -> Res<*mut ibv_ah> {
        let mut a = ibv_ah_attr::zeroed();
        a.is_global = 1;
        a.port_num = self.port;
        a.grh.dgid = ibv_gid::from_raw(gid);
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

/// A received datagram waiting for the application.
struct Rx {
    slot: usize,
    len: usize,
    from: SocketAddr,
}

pub struct Inner {
    ud: Option<Ud>,
    family: c_int,
    pub nonblock: bool,
    dst: Option<SocketAddr>,
    peers: HashMap<SocketAddr, Peer>,
    /// Queries sent and not answered yet: when first, when last.
    asking: HashMap<SocketAddr, (Instant, Instant)>,
    rxq: VecDeque<Rx>,
    rslots: usize,
    sslots: usize,
    reuseaddr: bool,
}

// SAFETY: verbs objects and address handles, used only under the mutex.
unsafe impl Send for Inner {}

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
            ud: None,
            family,
            nonblock,
            dst: None,
            peers: HashMap::new(),
            asking: HashMap::new(),
            rxq: VecDeque::new(),
            rslots: 64,
            sslots: 64,
            reuseaddr: false,
        }),
    });
    TABLE.write().insert(fd, s);
    Ok(fd)
}

fn sockname(fd: c_int) -> Res<SocketAddr> {
    let mut ss: libc::sockaddr_storage = unsafe_zeroed();
    let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: a buffer of `len` bytes.
    if unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) } < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel filled a valid address.
    unsafe { addr::from_c(&ss as *const _ as *const libc::sockaddr) }.ok_or(libc::EINVAL)
}

fn unsafe_zeroed() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain bytes; zero is valid.
    unsafe { core::mem::zeroed() }
}

fn encode_addr(a: &SocketAddr, gid: &[u8; 16], out: &mut [u8]) {
    out[0] = MAGIC;
    let (fam, ip) = match a.ip() {
        IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (6u8, v6.octets()),
    };
    out[1] = fam;
    out[2..4].copy_from_slice(&a.port().to_be_bytes());
    out[4..20].copy_from_slice(&ip);
    out[20..36].copy_from_slice(gid);
}

fn decode_addr(b: &[u8]) -> Option<(SocketAddr, [u8; 16])> {
    if b.len() < HDR || b[0] != MAGIC {
        return None;
    }
    let port = u16::from_be_bytes([b[2], b[3]]);
    let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&b[4..20]).ok()?);
    let ip = match b[1] {
        4 => IpAddr::V4(v6.to_ipv4_mapped()?),
        6 => IpAddr::V6(v6),
        _ => return None,
    };
    let gid = <[u8; 16]>::try_from(&b[20..36]).ok()?;
    Some((SocketAddr::new(ip, port), gid))
}

impl DSocket {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    fn udp_send(&self, to: &SocketAddr, msg: &[u8]) {
        let (ss, len) = addr::to_c(to);
        // SAFETY: our socket; a valid address and buffer.
        unsafe {
            libc::sendto(
                self.udp.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_DONTWAIT,
                &ss as *const _ as *const libc::sockaddr,
                len,
            )
        };
    }

    /// Gives the rsocket its QP once its address is known.
    fn ensure_ud(&self, g: &mut Inner) -> Res<()> {
        if g.ud.is_some() {
            return Ok(());
        }
        let me = sockname(self.udp.as_raw_fd())?;
        let ip = if me.ip().is_unspecified() {
            match me {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            }
        } else {
            addr::unmap(me).ip()
        };
        g.ud = Some(Ud::new(ip, g.rslots, g.sslots)?);
        Ok(())
    }

    /// Binds to the address the kernel would send to `dst` from.
    fn autobind(&self, dst: &SocketAddr) -> Res<()> {
        if sockname(self.udp.as_raw_fd())?.port() != 0 {
            return Ok(());
        }
        let fam = if dst.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: a throwaway socket, closed below.
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
        let mut src = sockname(probe.as_raw_fd())?;
        src.set_port(0);
        self.bind(src)
    }

    pub fn bind(&self, a: SocketAddr) -> Res<()> {
        let mut g = self.lock();
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
        self.ensure_ud(&mut g)
    }

    pub fn connect(&self, dst: SocketAddr) -> Res<()> {
        self.autobind(&dst)?;
        let mut g = self.lock();
        self.ensure_ud(&mut g)?;
        let dst = addr::unmap(dst);
        g.dst = Some(dst);
        self.ask(&mut g, dst);
        Ok(())
    }

    /// An rsocket of this process named `dst`: its QP number and GID.
    /// Asking it over UDP would wait for this very process to answer.
    /// `try_lock`: two threads resolving each other must not deadlock
    /// (the query then goes out as for anyone else).
    fn local_peer(&self, dst: &SocketAddr) -> Option<(u32, [u8; 16])> {
        let socks: Vec<Arc<DSocket>> = TABLE.read().values().cloned().collect();
        socks.iter().filter(|s| s.fd != self.fd).find_map(|s| {
            let name = addr::unmap(sockname(s.udp.as_raw_fd()).ok()?);
            let same = name == *dst
                || (name.ip().is_unspecified()
                    && name.port() == dst.port()
                    && dst.ip().is_loopback());
            if !same {
                return None;
            }
            let g = s.inner.try_lock()?;
            g.ud.as_ref().map(|u| (u.qpn(), u.gid))
        })
    }

    /// Sends a query for `dst` unless one went out recently.
    fn ask(&self, g: &mut Inner, dst: SocketAddr) {
        if g.peers.contains_key(&dst) {
            return;
        }
        if let (Some((qpn, gid)), Some(ud)) = (self.local_peer(&dst), g.ud.as_ref()) {
            if let Ok(ah) = ud.make_ah(gid) {
                g.asking.remove(&dst);
                g.peers.insert(dst, Peer { ah, qpn });
                return;
            }
        }
        let now = Instant::now();
        let e = g.asking.entry(dst).or_insert((now, now - QUERY_EVERY));
        if now - e.1 >= QUERY_EVERY {
            e.1 = now;
            self.udp_send(&dst, QUERY);
        }
    }

    /// Answers queries, takes replies, polls completions.
    pub fn progress(&self, g: &mut Inner) {
        let mut b = [0u8; 32];
        loop {
            let mut ss = unsafe_zeroed();
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
                break;
            }
            // SAFETY: the kernel filled the address.
            let Some(from) = (unsafe { addr::from_c(&ss as *const _ as *const libc::sockaddr) })
            else {
                continue;
            };
            let from = addr::unmap(from);
            if n == 4 && &b[..4] == QUERY {
                if let Some(ud) = &g.ud {
                    let mut r = [0u8; REPLY_LEN];
                    r[..4].copy_from_slice(REPLY);
                    r[4..8].copy_from_slice(&ud.qpn().to_be_bytes());
                    r[8..].copy_from_slice(&ud.gid);
                    self.udp_send(&from, &r);
                }
            } else if n as usize == REPLY_LEN && &b[..4] == REPLY {
                let qpn = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                let mut gid = [0u8; 16];
                gid.copy_from_slice(&b[8..REPLY_LEN]);
                let key = g.asking.keys().find(|k| addr::unmap(**k) == from).copied();
                if let (Some(k), Some(ud)) = (key, g.ud.as_ref()) {
                    if let Ok(ah) = ud.make_ah(gid) {
                        g.asking.remove(&k);
                        g.peers.insert(k, Peer { ah, qpn });
                    }
                }
            }
        }
        self.poll_cq(g);
    }

    fn poll_cq(&self, g: &mut Inner) {
        let Some(ud) = g.ud.as_mut() else { return };
        let mut wc = [ibv_wc::zeroed(); 16];
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
                let from = if w.status == IBV_WC_SUCCESS && len >= GRH + HDR {
                    let p = ud.slot_ptr(slot);
                    // SAFETY: the completion says `len` bytes of the slot
                    // were written.
                    let hdr = unsafe { core::slice::from_raw_parts(p.add(GRH), HDR) };
                    decode_addr(hdr)
                } else {
                    None
                };
                match from {
                    Some((from, gid)) => {
                        if let Entry::Vacant(e) = g.peers.entry(from) {
                            if let Ok(ah) = ud.make_ah(gid) {
                                e.insert(Peer { ah, qpn: w.src_qp });
                            }
                        }
                        g.rxq.push_back(Rx {
                            slot,
                            len: len - GRH - HDR,
                            from,
                        });
                    }
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

    /// Waits for `ready` (EAGAIN when non-blocking).
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        nonblock: bool,
        ready: impl Fn(&DSocket, &mut Inner) -> bool,
    ) -> Res<MutexGuard<'a, Inner>> {
        loop {
            self.progress(&mut g);
            if ready(self, &mut g) {
                return Ok(g);
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            if let Some(ud) = &g.ud {
                // SAFETY: our live CQ.
                unsafe { verbs::arm_cq(ud.cq) };
            }
            self.progress(&mut g);
            if ready(self, &mut g) {
                return Ok(g);
            }
            let comp = g.ud.as_ref().map(|u| {
                // SAFETY: a live channel.
                unsafe { (*u.cc).fd }
            });
            let mut fds = [
                libc::pollfd {
                    fd: self.udp.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: comp.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            drop(g);
            // Bounded, so unanswered queries are repeated.
            // SAFETY: two valid pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, QUERY_EVERY.as_millis() as c_int) };
            if rc < 0 && errno() == libc::EINTR {
                return Err(libc::EINTR);
            }
            g = self.lock();
            if let Some(ud) = &g.ud {
                // SAFETY: the live channel of our CQ.
                unsafe { verbs::drain_cq_events(ud.cc) };
            }
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
        let mut g = self.lock();
        let dst = to.or(g.dst).ok_or(libc::EDESTADDRREQ)?;
        let dst = addr::unmap(dst);
        drop(g);
        self.autobind(&dst)?;
        g = self.lock();
        self.ensure_ud(&mut g)?;
        if g.ud.as_ref().is_some_and(|u| len > u.max_payload) {
            return Err(libc::EMSGSIZE);
        }
        let nonblock = dontwait || g.nonblock;
        g = self.wait(g, nonblock, |s, g| {
            s.ask(g, dst);
            let gave_up = g
                .asking
                .get(&dst)
                .is_some_and(|(first, _)| first.elapsed() > QUERY_FOR);
            gave_up
                || (g.peers.contains_key(&dst)
                    && g.ud.as_ref().is_some_and(|u| !u.sfree.is_empty()))
        })?;
        if !g.peers.contains_key(&dst) {
            // Nobody answered for QUERY_FOR: the next send asks afresh.
            g.asking.remove(&dst);
            return Err(libc::EHOSTUNREACH);
        }
        let me = sockname(self.udp.as_raw_fd())?;
        let (ah, qpn) = {
            let p = g.peers.get(&dst).ok_or(libc::EAGAIN)?;
            (p.ah, p.qpn)
        };
        let ud = g.ud.as_mut().ok_or(libc::ENOTCONN)?;
        let gid = ud.gid;
        let slot = ud.sfree.pop().ok_or(libc::EAGAIN)?;
        let p = ud.slot_ptr(slot);
        // SAFETY: the slot is ours (free) and SLOT bytes long; the payload
        // is the caller's.
        unsafe {
            encode_addr(
                &addr::unmap(me),
                &gid,
                core::slice::from_raw_parts_mut(p, HDR),
            );
            core::ptr::copy_nonoverlapping(data, p.add(HDR), len);
        }
        let mut sge = ibv_sge {
            addr: p as u64,
            length: (HDR + len) as u32,
            lkey: ud.mr.as_ref().map(|m| m.lkey()).unwrap_or(0),
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
        if let Err(e) = unsafe { verbs::post_send(ud.qp, &mut wr) } {
            ud.sfree.push(slot);
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
        if g.ud.is_none() {
            // Nothing can arrive at a socket with no address.
            return Err(if dontwait || g.nonblock {
                libc::EAGAIN
            } else {
                libc::ENOTCONN
            });
        }
        let nonblock = dontwait || g.nonblock;
        let mut g = self.wait(g, nonblock, |_, g| !g.rxq.is_empty())?;
        let rx = g.rxq.front().map(|r| (r.slot, r.len, r.from));
        let (slot, dlen, from) = rx.ok_or(libc::EAGAIN)?;
        let ud = g.ud.as_mut().ok_or(libc::ENOTCONN)?;
        let n = dlen.min(len);
        // SAFETY: the datagram's bytes in our slot; the caller's buffer.
        unsafe { core::ptr::copy_nonoverlapping(ud.slot_ptr(slot).add(GRH + HDR), buf, n) };
        if !peek {
            let _ = ud.post_recv(slot);
            g.rxq.pop_front();
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
        let can_send = g.ud.as_ref().is_none_or(|u| !u.sfree.is_empty());
        if events & libc::POLLOUT != 0 && can_send {
            r |= libc::POLLOUT;
        }
        r
    }

    /// Arms the CQ; the descriptors to sleep on.
    pub fn arm(&self) -> [c_int; 2] {
        let g = self.lock();
        let comp = match &g.ud {
            Some(u) => {
                // SAFETY: our live CQ and channel.
                unsafe {
                    verbs::arm_cq(u.cq);
                    (*u.cc).fd
                }
            }
            None => -1,
        };
        [self.udp.as_raw_fd(), comp]
    }

    pub fn drain(&self) {
        let g = self.lock();
        if let Some(u) = &g.ud {
            // SAFETY: the live channel of our CQ.
            unsafe { verbs::drain_cq_events(u.cc) };
        }
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

    /// SO_RCVBUF/SO_SNDBUF: how many datagrams may wait (before the QP is
    /// made).
    pub fn set_buf(&self, recv: bool, bytes: usize) -> Res<()> {
        let mut g = self.lock();
        if g.ud.is_some() {
            return Err(libc::EINVAL);
        }
        let n = (bytes / SLOT).clamp(4, 1024);
        if recv {
            g.rslots = n;
        } else {
            g.sslots = n;
        }
        Ok(())
    }

    pub fn bufs(&self) -> (usize, usize) {
        let g = self.lock();
        (g.rslots * SLOT, g.sslots * SLOT)
    }

    pub fn close(self: Arc<Self>) -> Res<()> {
        TABLE.write().remove(&self.fd);
        let mut g = self.lock();
        for (_, p) in g.peers.drain() {
            // SAFETY: an AH we made, destroyed once, before its PD.
            unsafe { verbs::ibv_destroy_ah(p.ah) };
        }
        g.ud = None;
        Ok(())
    }
}
