//! The UDP socket a RoCEv2-mode device speaks through: bound to UDP port
//! 4791 on the device's address, shared by all of the process's UD QPs on
//! that device (the BTH names the QP, not the port).
//!
//! Bound to one address, so the kernel picks that address as the source,
//! which the ICRC covers. An IPv4 socket sets `IP_PMTUDISC_DO` and is
//! never connected: Linux then sends identification 0 (see
//! `roce::icrc`). An IPv6 socket sets `UDP_NO_CHECK6_RX`: rxe sends UDP
//! checksum 0 over IPv6, which the kernel otherwise drops.
//!
//! Only one socket per address can hold port 4791: a second process (or
//! a kernel RoCE device in the same network namespace, which binds the
//! wildcard address) makes [`RoceSocket::open`] fail with `EADDRINUSE`.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sock::{self, cvt, setsockopt_int, sockaddr_for, sockaddr_gid, socket};
use crate::gid::gid_as_ipv4;

/// RoCEv2's UDP port: where packets go, and where we receive.
pub const PORT: u16 = 4791;
/// Room for the control messages of one receive.
const CMSG_SPACE: usize = 128;
/// As the UD sockets (`udp`): bursts should not be lost to scheduling.
const RCVBUF: libc::c_int = 4 << 20;
/// Linux's `UDP_NO_CHECK6_RX` (not in the libc crate).
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Sets a socket buffer to [`RCVBUF`] with `force`, past the system's
/// limit, or else with `plain`, up to that limit.
fn buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int) {
    if setsockopt_int(fd, libc::SOL_SOCKET, force, RCVBUF).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, RCVBUF);
    }
}

/// What one received datagram was.
#[derive(Clone, Copy, Debug)]
pub struct RoceDatagram {
    /// Its full length (more than was stored when `truncated`).
    pub len: usize,
    pub truncated: bool,
    /// The sender's address (a GID) and UDP port.
    pub src: [u8; 16],
    pub src_port: u16,
    /// The IP header's TOS (IPv4) or traffic class (IPv6).
    pub tclass: u8,
    /// The IP header's TTL or hop limit.
    pub ttl: u8,
}

pub struct RoceSocket {
    fd: OwnedFd,
    /// The address bound, as a GID: every packet's source.
    addr: [u8; 16],
    ifindex: u32,
}

impl RoceSocket {
    /// A socket on `addr` (a GID), port 4791, of interface `ifindex`.
    pub fn open(addr: &[u8; 16], ifindex: u32) -> io::Result<RoceSocket> {
        let v4 = gid_as_ipv4(addr).is_some();
        let family = if v4 { libc::AF_INET } else { libc::AF_INET6 };
        let fd = socket(family, libc::SOCK_DGRAM)?;
        let raw = fd.as_raw_fd();
        if v4 {
            setsockopt_int(
                raw,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            setsockopt_int(raw, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
            setsockopt_int(raw, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
        } else {
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
            setsockopt_int(raw, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        }
        // A READ's responses come in one burst (a 1 MiB READ: 1024
        // packets), which net.core.rmem_max (208 KiB by default, about 90
        // packets of truesize) would drop; past that limit where the
        // process may (CAP_NET_ADMIN).
        buffer(raw, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        // RC sends a window of packets, READ responses in bursts.
        buffer(raw, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        let (ss, len) = sockaddr_for(addr, PORT.to_be(), ifindex);
        // SAFETY: ss holds a valid socket address of `len` bytes.
        cvt(unsafe {
            libc::bind(
                raw,
                &ss as *const _ as *const libc::sockaddr,
                len as libc::socklen_t,
            )
        })?;
        Ok(RoceSocket {
            fd,
            addr: *addr,
            ifindex,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The address bound (a GID).
    pub fn addr(&self) -> &[u8; 16] {
        &self.addr
    }

    /// Whether `dst` (a GID) is of the socket's family.
    pub fn reaches(&self, dst: &[u8; 16]) -> bool {
        gid_as_ipv4(dst).is_some() == gid_as_ipv4(&self.addr).is_some()
    }

    /// Sends one packet to `dst` (a GID), port 4791, with `tclass` as the
    /// IP header's TOS / traffic class; `ErrorKind::WouldBlock` when the
    /// socket buffer is full, `EAFNOSUPPORT` for a destination of the
    /// other family.
    pub fn send(&self, dst: &[u8; 16], tclass: u8, pkt: &[u8]) -> io::Result<usize> {
        if !self.reaches(dst) {
            return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        }
        let v4 = gid_as_ipv4(dst).is_some();
        let (mut ss, len) = sockaddr_for(dst, PORT.to_be(), self.ifindex);
        let mut iov = crate::util::iov(pkt.as_ptr(), pkt.len());
        let mut cbuf = [0u64; CMSG_SPACE / 8];
        // SAFETY: a zeroed msghdr is valid; the fields set below point to
        // live locals for the duration of the call.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
        msg.msg_namelen = len as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if tclass != 0 {
            let (level, kind) = if v4 {
                (libc::IPPROTO_IP, libc::IP_TOS)
            } else {
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
            };
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: one int-sized control message fits in cbuf's 128
            // bytes; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
            unsafe {
                msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = level;
                (*c).cmsg_type = kind;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                std::ptr::write_unaligned(
                    libc::CMSG_DATA(c) as *mut libc::c_int,
                    tclass as libc::c_int,
                );
            }
        }
        loop {
            // SAFETY: msg points to our locals and `pkt`, readable.
            let n =
                unsafe { sock::sendmsg(self.fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Receives one datagram into `buf`; `ErrorKind::WouldBlock` when
    /// none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<RoceDatagram> {
        // SAFETY: storage is large enough for any socket address.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let mut cbuf = [0u64; CMSG_SPACE / 8];
        let mut iov = crate::util::iov(buf.as_mut_ptr(), buf.len());
        // SAFETY: a zeroed msghdr is valid; we set the fields we use.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = CMSG_SPACE as _;
        let n = loop {
            // SAFETY: msg points to our locals and `buf`, writable;
            // MSG_TRUNC makes the result the datagram's real length.
            let n =
                unsafe { sock::recvmsg(self.fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        };
        let (mut tclass, mut ttl) = (0u8, 0u8);
        // SAFETY: the kernel wrote msg_controllen bytes of well-formed
        // control messages into cbuf; the CMSG_* walk stays inside them.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let int = || std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_TOS) => tclass = *libc::CMSG_DATA(c),
                    (libc::IPPROTO_IP, libc::IP_TTL) => ttl = int() as u8,
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => tclass = int() as u8,
                    (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => ttl = int() as u8,
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        // SAFETY: the family says which sockaddr the kernel wrote; both
        // start their port at the same offset.
        let src_port =
            u16::from_be(unsafe { (*(&ss as *const _ as *const libc::sockaddr_in)).sin_port });
        Ok(RoceDatagram {
            len: n,
            truncated: msg.msg_flags & libc::MSG_TRUNC != 0 || n > buf.len(),
            src: sockaddr_gid(&ss),
            src_port,
            tclass,
            ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::ipv4_mapped;

    /// Two sockets on loopback addresses, as two RoCEv2 devices would be:
    /// a packet goes from one to the other with its TOS, and the receiver
    /// learns the source address, port and TTL. Skipped where port 4791
    /// is taken (a kernel RoCE device in this namespace).
    #[test]
    fn packets_cross_between_two_addresses_with_their_ip_facts() {
        let (a_addr, b_addr) = (ipv4_mapped([127, 0, 0, 1]), ipv4_mapped([127, 0, 0, 2]));
        let a = match RoceSocket::open(&a_addr, 0) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                eprintln!("SKIP: 4791 taken: {e}");
                return;
            }
            Err(e) => panic!("open: {e}"),
        };
        let b = RoceSocket::open(&b_addr, 0).expect("open 127.0.0.2");
        // A second socket on the same address: the port is taken.
        let again = RoceSocket::open(&a_addr, 0)
            .err()
            .and_then(|e| e.raw_os_error());
        assert_eq!(again, Some(libc::EADDRINUSE));
        assert!(!a.reaches(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        let e = a.send(&[0; 16], 0, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAFNOSUPPORT));
        assert_eq!(a.send(&b_addr, 0x48, b"0123456789ab").unwrap(), 12);
        let mut pfd = libc::pollfd {
            fd: b.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 5000) };
        assert_eq!(ready, 1, "no packet in 5 s");
        let mut buf = [0u8; 8];
        let d = b.recv(&mut buf).unwrap();
        assert_eq!(d.len, 12);
        assert!(d.truncated);
        assert_eq!(&buf, b"01234567");
        assert_eq!(d.src, a_addr);
        assert_eq!(d.src_port, PORT);
        assert_eq!(d.tclass, 0x48);
        assert_eq!(d.ttl, 64);
        assert_eq!(b.addr(), &b_addr);
        let e = b.recv(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    /// The receive and send buffers hold a READ's burst: 4 MiB (the
    /// kernel reports twice what was set) with CAP_NET_ADMIN, else as
    /// much as net.core.rmem_max / wmem_max allow.
    #[test]
    fn buffers_hold_a_burst_where_the_process_may() {
        let addr = ipv4_mapped([127, 0, 0, 3]);
        let s = match RoceSocket::open(&addr, 0) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                eprintln!("SKIP: 4791 taken: {e}");
                return;
            }
            Err(e) => panic!("open: {e}"),
        };
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caps = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        // Bit 12: CAP_NET_ADMIN.
        let net_admin = caps & (1 << 12) != 0;
        for (opt, limit) in [
            (libc::SO_RCVBUF, "/proc/sys/net/core/rmem_max"),
            (libc::SO_SNDBUF, "/proc/sys/net/core/wmem_max"),
        ] {
            let mut v: libc::c_int = 0;
            let mut len = size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: v and len are live locals of the advertised size.
            let r = unsafe {
                libc::getsockopt(
                    s.fd(),
                    libc::SOL_SOCKET,
                    opt,
                    &mut v as *mut libc::c_int as *mut libc::c_void,
                    &mut len,
                )
            };
            assert_eq!(r, 0);
            let max: libc::c_int = std::fs::read_to_string(limit)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let want = if net_admin { RCVBUF } else { RCVBUF.min(max) };
            assert!(v >= 2 * want, "option {opt}: {v} < 2 x {want}");
        }
    }
}
