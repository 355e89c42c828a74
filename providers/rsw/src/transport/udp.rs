//! UDP transport for UD QPs: one datagram per message, the way RoCE v2
//! carries UD, so datagrams really are unreliable and unordered.
//!
//! A UD QP's number is the port of its UDP socket (bound to the wildcard
//! address of a dual-stack socket). The same port is also held in TCP by a
//! bound, never-listening socket, so no RC QP on this host can get the same
//! number: QP numbers stay unique across QP types with no coordination.
//!
//! Sends name their source address (the GID the address handle chose) with
//! `IPV6_PKTINFO`; receives report the destination address (`IP_PKTINFO` /
//! `IPV6_PKTINFO`) so the GRH can be built, and multicast told apart.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sock::{
    self, bind_any, bound_port, bound_socket, cvt, setsockopt_int, sockaddr_for, sockaddr_gid,
    socket,
};
use crate::gid::{gid_as_ipv4, ipv4_mapped};

/// Room for the control messages of one receive (one pktinfo).
const CMSG_SPACE: usize = 128;
/// Receive buffer asked for: bursts of datagrams should not be lost merely
/// because the progress thread was not scheduled (the kernel caps it at
/// `net.core.rmem_max`).
const RCVBUF: libc::c_int = 4 << 20;

/// What one received datagram was.
pub struct Datagram {
    /// Its full length (more than was stored when `truncated`).
    pub len: usize,
    pub truncated: bool,
    /// Source and destination addresses, as GIDs.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// The IP header's TOS (IPv4) or traffic class (IPv6).
    pub tclass: u8,
}

pub struct UdpEndpoint {
    fd: OwnedFd,
    /// The socket is AF_INET6 (dual stack); otherwise AF_INET only.
    v6: bool,
    /// The kernel drops what [`UdpEndpoint::filter`] refuses before it is
    /// queued (false until a filter is attached, or if attaching failed).
    filtered: bool,
    /// Holds the QP number in TCP's port space (a QP's own socket).
    _reserve: Option<OwnedFd>,
}

/// The UDP port multicast datagrams go to: every member of every group
/// binds it (with `SO_REUSEADDR`) and joins its groups, so the kernel
/// delivers one copy to each. Below the ephemeral range, so no QP's own
/// port is ever this one, and not RoCE v2's 4791, which a kernel RoCE
/// device would hold.
pub const MCAST_PORT: u16 = 24791;

/// A UDP socket of `family` bound to the wildcard address and `port` (0:
/// any), dual stack when IPv6.
fn udp_socket(v6: bool, port: u16) -> io::Result<OwnedFd> {
    bound_socket(libc::SOCK_DGRAM, v6, port)
}

impl UdpEndpoint {
    /// Opens a UD QP's socket; returns it and the QP number it defines.
    pub fn open() -> io::Result<(UdpEndpoint, u32)> {
        let v6 = socket(libc::AF_INET6, libc::SOCK_DGRAM).is_ok();
        let mut last = io::Error::from_raw_os_error(libc::EADDRINUSE);
        for _ in 0..64 {
            let fd = udp_socket(v6, 0)?;
            let port = bound_port(&fd)?;
            let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
            let reserve = socket(family, libc::SOCK_STREAM)?;
            if v6 {
                setsockopt_int(
                    reserve.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_V6ONLY,
                    0,
                )?;
            }
            match bind_any(&reserve, v6, port) {
                Ok(()) => {
                    let ep = UdpEndpoint {
                        fd,
                        v6,
                        filtered: false,
                        _reserve: Some(reserve),
                    };
                    ep.configure();
                    return Ok((ep, port as u32));
                }
                // An RC QP (or anyone) has this port in TCP: try another.
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// A socket that receives the datagrams sent to multicast group
    /// `group` (a GID) on interface `ifindex` (see [`wire_group`] for
    /// `loopback`).
    pub fn join(group: &[u8; 16], ifindex: u32, loopback: bool) -> io::Result<UdpEndpoint> {
        let group = &wire_group(group, loopback);
        let v4 = gid_as_ipv4(group);
        let v6 = v4.is_none();
        let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        let fd = socket(family, libc::SOCK_DGRAM)?;
        let raw = fd.as_raw_fd();
        setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        if v6 {
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        bind_any(&fd, v6, MCAST_PORT)?;
        // Only the groups this socket joined, not every group any socket
        // on the host joined (Linux's default for wildcard-bound sockets).
        if v6 {
            let _ = setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_ALL, 0);
            let mreq = libc::ipv6_mreq {
                ipv6mr_multiaddr: libc::in6_addr { s6_addr: *group },
                ipv6mr_interface: ifindex,
            };
            setsockopt_val(raw, libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &mreq)?;
        } else {
            setsockopt_int(raw, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
            let mreq = libc::ip_mreqn {
                imr_multiaddr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.unwrap_or([0; 4])),
                },
                imr_address: libc::in_addr { s_addr: 0 },
                imr_ifindex: ifindex as libc::c_int,
            };
            setsockopt_val(raw, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &mreq)?;
        }
        let ep = UdpEndpoint {
            fd,
            v6,
            filtered: false,
            _reserve: None,
        };
        ep.configure();
        Ok(ep)
    }

    fn configure(&self) {
        let fd = self.fd.as_raw_fd();
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
        let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1);
        let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
        if self.v6 {
            let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1);
            let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1);
        }
    }

    /// Has the kernel drop every datagram whose payload does not hold,
    /// at each `(offset, bytes)`, those 4 bytes (a classic BPF socket
    /// filter: offset 0 of a UDP socket's filter is the UDP header, so the
    /// payload starts at 8). A datagram refused there never reaches a
    /// receive buffer, costs no syscall, and is not counted against the
    /// socket buffer. Replaces the previous filter; false (and
    /// [`UdpEndpoint::filtered`] false) if the kernel refused it.
    pub fn filter(&mut self, words: &[(u32, [u8; 4])]) -> bool {
        const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
        const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
        const MAX_WORDS: usize = 16;
        let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
        let mut prog = [ins(0, 0, 0, 0); 2 * MAX_WORDS + 2];
        let n = words.len().min(MAX_WORDS);
        for (i, &(off, bytes)) in words[..n].iter().enumerate() {
            // A failed comparison jumps over the rest to the drop.
            let skip = (2 * (n - 1 - i) + 1) as u8;
            prog[2 * i] = ins(LD_W_ABS, 0, 0, 8 + off);
            prog[2 * i + 1] = ins(JEQ_K, 0, skip, u32::from_be_bytes(bytes));
        }
        // Accept the whole datagram; a load past its end drops it.
        prog[2 * n] = ins(RET_K, 0, 0, u32::MAX);
        prog[2 * n + 1] = ins(RET_K, 0, 0, 0);
        let fprog = libc::sock_fprog {
            len: (2 * n + 2) as u16,
            filter: prog.as_mut_ptr(),
        };
        self.filtered = setsockopt_val(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog,
        )
        .is_ok();
        self.filtered
    }

    /// Whether the kernel filters this socket's datagrams (see
    /// [`UdpEndpoint::filter`]).
    pub fn filtered(&self) -> bool {
        self.filtered
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends one datagram to `dst` (a GID), port `port`, from our address
    /// `src`; `ErrorKind::WouldBlock` when the socket buffer is full.
    ///
    /// # Safety
    /// Every iovec must describe readable memory for the whole call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_to(
        &self,
        dst: &[u8; 16],
        port: u32,
        ifindex: u32,
        src: &[u8; 16],
        tclass: u8,
        iov: &[libc::iovec],
    ) -> io::Result<usize> {
        // SAFETY: forwarded contract.
        unsafe {
            send_from(
                self.fd.as_raw_fd(),
                self.v6,
                dst,
                port,
                ifindex,
                src,
                tclass,
                iov,
            )
        }
    }

    /// Receives one datagram into `iov`; `ErrorKind::WouldBlock` when none
    /// is waiting.
    ///
    /// # Safety
    /// Every iovec must describe writable memory for the whole call.
    pub unsafe fn recv(&self, iov: &[libc::iovec]) -> io::Result<Datagram> {
        // SAFETY: forwarded contract.
        unsafe { recv_on(self.fd.as_raw_fd(), iov, 0) }
    }

    /// Reads the start of the next datagram into `head` and leaves it
    /// queued; `len` is its full length.
    pub fn peek(&self, head: &mut [u8]) -> io::Result<Datagram> {
        let v = [crate::util::iov(head.as_mut_ptr(), head.len())];
        // SAFETY: the iovec covers `head`, ours for the call.
        unsafe { recv_on(self.fd.as_raw_fd(), &v, libc::MSG_PEEK) }
    }

    /// Drops the next datagram; false when there was none.
    pub fn discard(&self) -> io::Result<bool> {
        discard_on(self.fd.as_raw_fd())
    }
}

/// The address a multicast group's datagrams travel to. The loopback
/// interface carries IPv4 multicast but has no IPv6 multicast route, so on
/// it an IPv6 group travels as an IPv4 group in 239.255.0.0/16 derived from
/// it (the datagram header names the real group; receivers check it, so
/// two groups sharing a derived address do not mix).
pub fn wire_group(group: &[u8; 16], loopback: bool) -> [u8; 16] {
    if !loopback || gid_as_ipv4(group).is_some() {
        return *group;
    }
    // FNV-1a, folded to 16 bits.
    let mut h: u32 = 0x811c_9dc5;
    for &b in group {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    let h = (h ^ (h >> 16)) as u16;
    ipv4_mapped([239, 255, (h >> 8) as u8, h as u8])
}

/// The sockaddr for `dst` in the socket's family (IPv4 as IPv4-mapped on a
/// dual-stack socket).
fn dest_addr(v6: bool, dst: &[u8; 16], port: u16, ifindex: u32) -> (libc::sockaddr_storage, usize) {
    if v6 {
        if let Some(v4) = gid_as_ipv4(dst) {
            // SAFETY: zeroed storage is a valid start for sockaddr_in6.
            let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in6.
            let sa = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sa.sin6_port = port;
            sa.sin6_addr.s6_addr = ipv4_mapped(v4);
            return (ss, size_of::<libc::sockaddr_in6>());
        }
    }
    sockaddr_for(dst, port, ifindex)
}

fn setsockopt_val<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: passes a valid T of the advertised size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// `sendmsg` of one datagram with its source address chosen (and, for a
/// multicast destination, the interface: `ifindex`).
///
/// # Safety
/// Every iovec must describe readable memory for the whole call.
#[allow(clippy::too_many_arguments)]
unsafe fn send_from(
    fd: RawFd,
    v6: bool,
    dst: &[u8; 16],
    port: u32,
    ifindex: u32,
    src: &[u8; 16],
    tclass: u8,
    iov: &[libc::iovec],
) -> io::Result<usize> {
    let (mut ss, len) = dest_addr(v6, dst, (port as u16).to_be(), ifindex);
    if !v6 && gid_as_ipv4(dst).is_none() {
        return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
    }
    let mut cbuf = [0u64; CMSG_SPACE / 8];
    // SAFETY: a zeroed msghdr is valid; the fields set below point to live
    // locals for the duration of the call.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
    msg.msg_namelen = len as libc::socklen_t;
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len();
    let oif = if crate::gid::is_multicast(dst) {
        ifindex
    } else {
        0
    };
    // The source must be of the destination's family (an IPv6 group sent
    // as IPv4 on loopback, see `wire_group`): otherwise let the kernel
    // pick, in the right family.
    let src = &match (gid_as_ipv4(dst).is_some(), gid_as_ipv4(src).is_some()) {
        (true, false) => ipv4_mapped([0; 4]),
        (false, true) => [0; 16],
        _ => *src,
    };
    let mut used = 0;
    if *src != [0; 16] || oif != 0 {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        // SAFETY: CMSG_SPACE/CMSG_FIRSTHDR/CMSG_DATA compute offsets within
        // cbuf, which has room for one pktinfo control message of either
        // family; msg_controllen is set to exactly what is written.
        unsafe {
            if v6 {
                msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::IPPROTO_IPV6;
                (*c).cmsg_type = libc::IPV6_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                let mut pi: libc::in6_pktinfo = zeroed();
                pi.ipi6_addr.s6_addr = crate::gid::canon_gid(src);
                pi.ipi6_ifindex = oif;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::in6_pktinfo, pi);
            } else {
                msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_PKTINFO;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                let mut pi: libc::in_pktinfo = zeroed();
                pi.ipi_spec_dst.s_addr = u32::from_ne_bytes(gid_as_ipv4(src).unwrap_or([0; 4]));
                pi.ipi_ifindex = oif as libc::c_int;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::in_pktinfo, pi);
            }
        }
        used = msg.msg_controllen as usize;
    }
    if tclass != 0 {
        // The GRH's traffic class travels in the IP header (RoCE v2).
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        // SAFETY: the pktinfo message (if any) takes `used` bytes of cbuf,
        // whose 128 bytes leave room for one int-sized message after it;
        // the header is written at that aligned offset inside cbuf.
        unsafe {
            let space = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
            let c = (cbuf.as_mut_ptr() as *mut u8).add(used) as *mut libc::cmsghdr;
            sock::put_tclass_cmsg(c, gid_as_ipv4(dst).is_some(), tclass);
            msg.msg_controllen = (used + space) as _;
        }
    }
    loop {
        // SAFETY: msg points to our locals and the caller's iovecs.
        let n = unsafe { sock::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// # Safety
/// Every iovec must describe writable memory for the whole call.
unsafe fn recv_on(fd: RawFd, iov: &[libc::iovec], flags: libc::c_int) -> io::Result<Datagram> {
    // SAFETY: storage is large enough for any socket address.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut cbuf = [0u64; CMSG_SPACE / 8];
    // SAFETY: a zeroed msghdr is valid; we set the fields we use.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len();
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = CMSG_SPACE as _;
    let n = loop {
        // SAFETY: msg points to our locals and iovecs the caller vouches
        // for; MSG_TRUNC makes the result the datagram's real length.
        let n =
            unsafe { sock::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC | flags) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    };
    let mut dst = [0u8; 16];
    let mut tclass = 0u8;
    // SAFETY: the kernel wrote msg_controllen bytes of well-formed control
    // messages into cbuf; the CMSG_* walk stays inside them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let pi =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in6_pktinfo);
                    dst = crate::gid::canon_gid(&pi.ipi6_addr.s6_addr);
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let pi =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in_pktinfo);
                    dst = ipv4_mapped(pi.ipi_addr.s_addr.to_ne_bytes());
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => {
                    tclass = *libc::CMSG_DATA(c);
                }
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                    tclass = v as u8;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let stored: usize = iov.iter().map(|v| v.iov_len).sum();
    Ok(Datagram {
        len: n,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0 || n > stored,
        src: sockaddr_gid(&ss),
        dst,
        tclass,
    })
}

fn discard_on(fd: RawFd) -> io::Result<bool> {
    loop {
        // SAFETY: a zero-length receive into no buffer drops the datagram.
        let n = unsafe { sock::recv(fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(false),
            _ => return Err(e),
        }
    }
}
