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
use std::mem::{size_of, zeroed, MaybeUninit};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sock::{self, cvt, setsockopt_int, sockaddr_for, sockaddr_gid, socket};
use crate::gid::gid_as_ipv4;

/// RoCEv2's UDP port: where packets go, and where we receive.
pub const PORT: u16 = 4791;
/// Room for the control messages of one receive.
const CMSG_SPACE: usize = 128;
/// Packets one `sendmmsg` carries, at most.
pub const SEND_BATCH: usize = 32;
/// Datagrams one `recvmmsg` takes, at most.
pub const RECV_BATCH: usize = 32;
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
        self.send_many([Outgoing { dst, tclass, pkt }].into_iter())
            .map(|_| pkt.len())
    }

    /// Sends the first [`SEND_BATCH`] of `pkts` or fewer, in order, with
    /// one system call: how many went (from the first on). Stops before
    /// the first packet to the other family; an error when none went
    /// (`ErrorKind::WouldBlock`: the socket buffer is full;
    /// `EAFNOSUPPORT`: the first is to the other family).
    pub fn send_many<'a>(&self, pkts: impl Iterator<Item = Outgoing<'a>>) -> io::Result<usize> {
        // Only what is used is written (a run of packets to one place
        // shares its address and TOS): under emulation (the TCG VM)
        // zeroing all of it cost more than the call it saved.
        let mut names = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; SEND_BATCH];
        let mut cbufs = [const { MaybeUninit::<[u64; TOS_CMSG_SPACE / 8]>::uninit() }; SEND_BATCH];
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; SEND_BATCH];
        let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; SEND_BATCH];
        let name0 = names.as_mut_ptr() as *mut libc::sockaddr_storage;
        let cbuf0 = cbufs.as_mut_ptr() as *mut [u64; TOS_CMSG_SPACE / 8];
        let iov0 = iovs.as_mut_ptr() as *mut libc::iovec;
        let hdr0 = hdrs.as_mut_ptr() as *mut libc::mmsghdr;
        // The address and TOS of the run of packets being added.
        let mut run: Option<(&[u8; 16], u8, libc::msghdr)> = None;
        let mut n = 0;
        for o in pkts.take(SEND_BATCH) {
            if !self.reaches(o.dst) {
                break;
            }
            let mut msg = match run {
                Some((dst, tclass, m)) if dst == o.dst && tclass == o.tclass => m,
                _ => {
                    let (ss, len) = sockaddr_for(o.dst, PORT.to_be(), self.ifindex);
                    // SAFETY: n < SEND_BATCH: inside `names`.
                    unsafe { name0.add(n).write(ss) };
                    // SAFETY: a zeroed msghdr is valid.
                    let mut m: libc::msghdr = unsafe { zeroed() };
                    m.msg_name = name0.wrapping_add(n) as *mut libc::c_void;
                    m.msg_namelen = len as libc::socklen_t;
                    if o.tclass != 0 {
                        // SAFETY: inside `cbufs`, which outlives the send.
                        unsafe {
                            cbuf0.add(n).write([0; TOS_CMSG_SPACE / 8]);
                            set_tclass(
                                &mut m,
                                cbuf0.add(n),
                                gid_as_ipv4(o.dst).is_some(),
                                o.tclass,
                            );
                        }
                    }
                    run = Some((o.dst, o.tclass, m));
                    m
                }
            };
            msg.msg_iov = iov0.wrapping_add(n);
            msg.msg_iovlen = 1;
            // SAFETY: n < SEND_BATCH: inside `iovs` and `hdrs`.
            unsafe {
                iov0.add(n)
                    .write(crate::util::iov(o.pkt.as_ptr(), o.pkt.len()));
                hdr0.add(n).write(libc::mmsghdr {
                    msg_hdr: msg,
                    msg_len: 0,
                });
            }
            n += 1;
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        }
        loop {
            // SAFETY: the first n headers are written and point to our
            // locals and to the packets, which the iterator lent for 'a.
            let r = unsafe {
                sock::sendmmsg(self.fd(), hdr0, n, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Receives up to `max` datagrams waiting (at most [`RECV_BATCH`])
    /// into `b` with one system call: how many; `ErrorKind::WouldBlock`
    /// when none is waiting.
    pub fn recv_many(&self, b: &mut RecvBatch, max: usize) -> io::Result<usize> {
        let max = max.min(RECV_BATCH);
        b.got.clear();
        if max == 0 {
            return Ok(0);
        }
        for h in &mut b.hdrs[..max] {
            // What the kernel wrote last time.
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = CMSG_SPACE as _;
        }
        let n = loop {
            // SAFETY: b's headers point into b's own buffers, writable
            // (`RecvBatch::new`); MSG_TRUNC makes each length the
            // datagram's real one.
            let r = unsafe {
                sock::recvmmsg(
                    self.fd(),
                    b.hdrs.as_mut_ptr(),
                    max,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        };
        for (h, ss) in b.hdrs[..n].iter().zip(b.names.iter()) {
            b.got
                .push(datagram(&h.msg_hdr, h.msg_len as usize, b.slot, ss));
        }
        Ok(n)
    }
}

/// Room for one int-sized control message (CMSG_SPACE(4) on 64 bits).
const TOS_CMSG_SPACE: usize = 24;

/// Adds `tclass` to `msg` as the IP header's TOS (`v4`) or traffic class,
/// in `cbuf`.
///
/// # Safety
/// `cbuf` must be valid for writes, and stay so until the send.
unsafe fn set_tclass(
    msg: &mut libc::msghdr,
    cbuf: *mut [u64; TOS_CMSG_SPACE / 8],
    v4: bool,
    tclass: u8,
) {
    msg.msg_control = cbuf as *mut libc::c_void;
    // SAFETY: one int-sized control message fits in cbuf's 24 bytes,
    // which the caller vouches for; CMSG_FIRSTHDR points at their start.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as _;
        sock::put_tclass_cmsg(libc::CMSG_FIRSTHDR(msg), v4, tclass);
    }
}

/// What the kernel said of one datagram received: `msg` as it filled it,
/// `n` the datagram's length, `cap` the bytes stored at most, `ss` the
/// address it wrote.
fn datagram(msg: &libc::msghdr, n: usize, cap: usize, ss: &libc::sockaddr_storage) -> RoceDatagram {
    let (mut tclass, mut ttl) = (0u8, 0u8);
    // SAFETY: the kernel wrote msg_controllen bytes of well-formed
    // control messages where msg_control points; the CMSG_* walk stays
    // inside them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let int = || std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_TOS) => tclass = *libc::CMSG_DATA(c),
                (libc::IPPROTO_IP, libc::IP_TTL) => ttl = int() as u8,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => tclass = int() as u8,
                (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => ttl = int() as u8,
                _ => {}
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    // SAFETY: the family says which sockaddr the kernel wrote; both
    // start their port at the same offset.
    let src_port =
        u16::from_be(unsafe { (*(ss as *const _ as *const libc::sockaddr_in)).sin_port });
    RoceDatagram {
        len: n,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0 || n > cap,
        src: sockaddr_gid(ss),
        src_port,
        tclass,
        ttl,
    }
}

/// One packet for [`RoceSocket::send_many`]: to `dst` (a GID), port
/// 4791, with `tclass` as the IP header's TOS / traffic class.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    pub dst: &'a [u8; 16],
    pub tclass: u8,
    pub pkt: &'a [u8],
}

/// Buffers for [`RoceSocket::recv_many`]: [`RECV_BATCH`] datagrams of
/// up to a slot's bytes, with the message headers that name them, made
/// once and kept.
pub struct RecvBatch {
    data: Box<[u8]>,
    slot: usize,
    names: Box<[libc::sockaddr_storage]>,
    /// Read through `hdrs` only.
    _cmsgs: Box<[[u64; CMSG_SPACE / 8]]>,
    _iovs: Box<[libc::iovec]>,
    /// Point into `data`, `names`, `_cmsgs` and `_iovs`: heap memory of
    /// the batch's own, which stays put when the batch moves.
    hdrs: Box<[libc::mmsghdr]>,
    got: Vec<RoceDatagram>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point only into the
// batch's own boxes, which go where it goes; they are used through
// `&mut RecvBatch` only.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for [`RECV_BATCH`] datagrams of `slot` bytes each (a longer
    /// one is stored cut, and reported `truncated`).
    pub fn new(slot: usize) -> RecvBatch {
        let mut data = vec![0; slot * RECV_BATCH].into_boxed_slice();
        // SAFETY: a zeroed socket address is valid (family 0).
        let mut names =
            vec![unsafe { zeroed::<libc::sockaddr_storage>() }; RECV_BATCH].into_boxed_slice();
        let mut cmsgs = vec![[0u64; CMSG_SPACE / 8]; RECV_BATCH].into_boxed_slice();
        let (data0, name0, cmsg0) = (data.as_mut_ptr(), names.as_mut_ptr(), cmsgs.as_mut_ptr());
        let mut iovs: Box<[libc::iovec]> = (0..RECV_BATCH)
            .map(|i| crate::util::iov(data0.wrapping_add(i * slot), slot))
            .collect();
        let iov0 = iovs.as_mut_ptr();
        let hdrs = (0..RECV_BATCH)
            .map(|i| {
                // SAFETY: a zeroed msghdr is valid; recv_many sets the
                // lengths the kernel overwrites.
                let mut m: libc::msghdr = unsafe { zeroed() };
                m.msg_name = name0.wrapping_add(i) as *mut libc::c_void;
                m.msg_iov = iov0.wrapping_add(i);
                m.msg_iovlen = 1;
                m.msg_control = cmsg0.wrapping_add(i) as *mut libc::c_void;
                libc::mmsghdr {
                    msg_hdr: m,
                    msg_len: 0,
                }
            })
            .collect();
        RecvBatch {
            data,
            slot,
            names,
            _cmsgs: cmsgs,
            _iovs: iovs,
            hdrs,
            got: Vec::with_capacity(RECV_BATCH),
        }
    }

    /// The datagrams of the last receive.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.got.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.got.is_empty()
    }

    /// Datagram `i` of the last receive, with the bytes stored of it.
    pub fn get(&self, i: usize) -> (&RoceDatagram, &[u8]) {
        let d = &self.got[i];
        let at = i * self.slot;
        (d, &self.data[at..at + d.len.min(self.slot)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::ipv4_mapped;

    /// A socket on `addr`, or None (said on stderr) where port 4791 is
    /// taken: a kernel RoCE device in this namespace.
    fn open_or_skip(addr: &[u8; 16]) -> Option<RoceSocket> {
        match RoceSocket::open(addr, 0) {
            Ok(s) => Some(s),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                eprintln!("SKIP: 4791 taken: {e}");
                None
            }
            Err(e) => panic!("open: {e}"),
        }
    }

    /// Two sockets on loopback addresses, as two RoCEv2 devices would be:
    /// a packet goes from one to the other with its TOS, and the receiver
    /// learns the source address, port and TTL. Skipped where port 4791
    /// is taken (a kernel RoCE device in this namespace).
    #[test]
    fn packets_cross_between_two_addresses_with_their_ip_facts() {
        let (a_addr, b_addr) = (ipv4_mapped([127, 0, 0, 1]), ipv4_mapped([127, 0, 0, 2]));
        let Some(a) = open_or_skip(&a_addr) else {
            return;
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
        let mut batch = RecvBatch::new(8);
        assert_eq!(b.recv_many(&mut batch, RECV_BATCH).unwrap(), 1);
        let (d, bytes) = batch.get(0);
        assert_eq!(d.len, 12);
        assert!(d.truncated);
        assert_eq!(bytes, b"01234567");
        assert_eq!(d.src, a_addr);
        assert_eq!(d.src_port, PORT);
        assert_eq!(d.tclass, 0x48);
        assert_eq!(d.ttl, 64);
        assert_eq!(b.addr(), &b_addr);
        let e = b.recv_many(&mut batch, RECV_BATCH).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(batch.is_empty());
    }

    /// One `sendmmsg` carries [`SEND_BATCH`] packets, each with its own
    /// TOS and length, and stops before one to the other family; one
    /// `recvmmsg` takes them in the order sent, as many as asked.
    #[test]
    fn batches_keep_each_packets_facts_and_order() {
        let (a_addr, b_addr) = (ipv4_mapped([127, 0, 0, 4]), ipv4_mapped([127, 0, 0, 5]));
        let Some(a) = open_or_skip(&a_addr) else {
            return;
        };
        let b = RoceSocket::open(&b_addr, 0).expect("open 127.0.0.5");
        let v6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let pkts: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + i as usize]).collect();
        let out = |i: usize| Outgoing {
            dst: if i == 35 { &v6 } else { &b_addr },
            tclass: (i as u8) << 2,
            pkt: &pkts[i],
        };
        assert_eq!(a.send_many((0..40).map(out)).unwrap(), SEND_BATCH);
        // The rest: up to the one to an IPv6 address, which alone fails.
        assert_eq!(a.send_many((32..40).map(out)).unwrap(), 3);
        let e = a.send_many((35..40).map(out)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAFNOSUPPORT));
        assert_eq!(a.send_many((36..40).map(out)).unwrap(), 4);
        let mut batch = RecvBatch::new(64);
        let mut got = Vec::new();
        for want in [10, RECV_BATCH, 1] {
            let mut pfd = libc::pollfd {
                fd: b.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, 5000) };
            assert_eq!(ready, 1, "nothing in 5 s");
            let n = b.recv_many(&mut batch, want).unwrap();
            assert!(n <= want && n == batch.len());
            for i in 0..n {
                let (d, bytes) = batch.get(i);
                assert!(!d.truncated);
                assert_eq!((d.src, d.src_port, d.len), (a_addr, PORT, bytes.len()));
                got.push((bytes.to_vec(), d.tclass));
            }
            if got.len() == 39 {
                break;
            }
        }
        let want: Vec<(Vec<u8>, u8)> = (0..40)
            .filter(|&i| i != 35)
            .map(|i| (pkts[i].clone(), (i as u8) << 2))
            .collect();
        assert_eq!(got, want);
    }

    /// The receive and send buffers hold a READ's burst: 4 MiB (the
    /// kernel reports twice what was set) with CAP_NET_ADMIN, else as
    /// much as net.core.rmem_max / wmem_max allow.
    #[test]
    fn buffers_hold_a_burst_where_the_process_may() {
        let addr = ipv4_mapped([127, 0, 0, 3]);
        let Some(s) = open_or_skip(&addr) else {
            return;
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
