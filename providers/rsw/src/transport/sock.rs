//! Socket plumbing shared by the transports: creation, options, and
//! socket addresses as GIDs.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, OwnedFd, RawFd};

use rustix::net::{self as rnet, AddressFamily, SocketFlags, SocketType};

use super::canon_gid;
use crate::gid::{gid_as_ipv4, ipv4_mapped};

pub(super) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The events of `events` (`POLL*`, which Linux numbers as `EPOLL*`) that
/// the socket has now, asked without waiting: `poll(2)` reads a socket's
/// state without taking its lock, where a `recv` on an empty socket does.
pub(super) fn events_now(fd: RawFd, events: libc::c_short) -> u32 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, no waiting.
    let n = unsafe {
        libc::syscall(
            libc::SYS_poll,
            &mut p as *mut libc::pollfd,
            1 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if n == 1 {
        p.revents as u16 as u32
    } else {
        0
    }
}

// The data path's socket calls go to the kernel through `syscall(2)`, not
// libc's wrappers: those are thread-cancellation points, which switch the
// thread's cancellation type with a locked instruction before and after
// every call (4 % of the cycles of a TCP ping-pong's polling side), and a
// verb is no place for a thread to be cancelled anyway: it would die
// holding a QP. Each returns what the call does, -1 with `errno` set on
// failure.

/// `recv(2)`.
///
/// # Safety
/// `buf` must be writable for `len` bytes.
pub(super) unsafe fn recv(
    fd: RawFd,
    buf: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
) -> isize {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: the caller vouches for the buffer; no address is asked for.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd as libc::c_long,
            buf,
            len,
            flags as libc::c_long,
            null,
            null,
        ) as isize
    }
}

/// `recvmsg(2)`.
///
/// # Safety
/// `msg` and the buffers it names must be valid for the kernel to fill.
pub(super) unsafe fn recvmsg(fd: RawFd, msg: *mut libc::msghdr, flags: libc::c_int) -> isize {
    // SAFETY: forwarded contract.
    unsafe {
        libc::syscall(
            libc::SYS_recvmsg,
            fd as libc::c_long,
            msg,
            flags as libc::c_long,
        ) as isize
    }
}

/// `sendmsg(2)`.
///
/// # Safety
/// `msg` and the buffers it names must be readable.
pub(super) unsafe fn sendmsg(fd: RawFd, msg: *const libc::msghdr, flags: libc::c_int) -> isize {
    // SAFETY: forwarded contract.
    unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            fd as libc::c_long,
            msg,
            flags as libc::c_long,
        ) as isize
    }
}

/// `sendmmsg(2)`: how many of the `n` messages went, -1 with `errno`
/// set when none did.
///
/// # Safety
/// `msgs` must point to `n` messages whose buffers are readable.
pub(super) unsafe fn sendmmsg(
    fd: RawFd,
    msgs: *mut libc::mmsghdr,
    n: usize,
    flags: libc::c_int,
) -> isize {
    // SAFETY: forwarded contract.
    unsafe {
        libc::syscall(
            libc::SYS_sendmmsg,
            fd as libc::c_long,
            msgs,
            n as libc::c_long,
            flags as libc::c_long,
        ) as isize
    }
}

/// `recvmmsg(2)` without a timeout: how many of the `n` messages were
/// filled, -1 with `errno` set when none was.
///
/// # Safety
/// `msgs` must point to `n` messages whose buffers are writable.
pub(super) unsafe fn recvmmsg(
    fd: RawFd,
    msgs: *mut libc::mmsghdr,
    n: usize,
    flags: libc::c_int,
) -> isize {
    let no_timeout = std::ptr::null_mut::<libc::timespec>();
    // SAFETY: forwarded contract.
    unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            fd as libc::c_long,
            msgs,
            n as libc::c_long,
            flags as libc::c_long,
            no_timeout,
        ) as isize
    }
}

/// Writes at `c` the control message that carries `tclass` in the IP
/// header: TOS for an IPv4 destination (`v4`; an IP-level message, which
/// a dual-stack socket takes for a mapped address too), traffic class for
/// IPv6. It takes `CMSG_SPACE(sizeof(int))` bytes.
///
/// # Safety
/// `c` must point to that many writable bytes, aligned for a `cmsghdr`,
/// inside the message's control buffer.
pub(super) unsafe fn put_tclass_cmsg(c: *mut libc::cmsghdr, v4: bool, tclass: u8) {
    let (level, kind) = if v4 {
        (libc::IPPROTO_IP, libc::IP_TOS)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    };
    // SAFETY: the caller vouches for the room; CMSG_DATA stays inside it.
    unsafe {
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(
            libc::CMSG_DATA(c) as *mut libc::c_int,
            tclass as libc::c_int,
        );
    }
}

/// A non-blocking, close-on-exec socket (`family` and `ty` as libc names
/// them).
pub(super) fn socket(family: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
    Ok(rnet::socket_with(
        AddressFamily::from_raw(family as _),
        SocketType::from_raw(ty as _),
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}

pub(super) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a valid int of the advertised size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// The address in a socket address as a GID (IPv4 as `::ffff:a.b.c.d`).
pub(super) fn sockaddr_gid(ss: &libc::sockaddr_storage) -> [u8; 16] {
    match ss.ss_family as libc::c_int {
        libc::AF_INET6 => {
            // SAFETY: the family says a sockaddr_in6 was written.
            let sa = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            canon_gid(&sa.sin6_addr.s6_addr)
        }
        libc::AF_INET => {
            // SAFETY: the family says a sockaddr_in was written.
            let sa = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            ipv4_mapped(sa.sin_addr.s_addr.to_ne_bytes())
        }
        _ => [0; 16],
    }
}

/// The address in a socket address as a GID (IPv4 as `::ffff:a.b.c.d`).
pub(super) fn addr_gid(a: &SocketAddr) -> [u8; 16] {
    match a.ip() {
        IpAddr::V4(v4) => ipv4_mapped(v4.octets()),
        IpAddr::V6(v6) => canon_gid(&v6.octets()),
    }
}

fn std_addr(a: rnet::SocketAddrAny) -> io::Result<SocketAddr> {
    SocketAddr::try_from(a).map_err(|_| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))
}

/// The local address of a socket as a GID.
pub(super) fn local_gid(fd: &impl AsFd) -> io::Result<[u8; 16]> {
    Ok(addr_gid(&std_addr(rnet::getsockname(fd)?)?))
}

/// The socket address for `gid` and `port` (host order); a link-local IPv6
/// address is scoped to `ifindex`.
pub(super) fn socket_addr(gid: &[u8; 16], port: u16, ifindex: u32) -> SocketAddr {
    match gid_as_ipv4(gid) {
        Some(v4) => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(v4), port)),
        None => {
            let scope = if gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 {
                ifindex
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(*gid), port, 0, scope))
        }
    }
}

/// A socket address for `gid` and `port` (network order), with its length.
pub(super) fn sockaddr_for(
    gid: &[u8; 16],
    port: u16,
    ifindex: u32,
) -> (libc::sockaddr_storage, usize) {
    // SAFETY: zeroed storage is a valid start for either family.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    if let Some(v4) = gid_as_ipv4(gid) {
        // SAFETY: sockaddr_storage is larger than and aligned for
        // sockaddr_in.
        let sa = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port;
        sa.sin_addr.s_addr = u32::from_ne_bytes(v4);
        (ss, size_of::<libc::sockaddr_in>())
    } else {
        // SAFETY: as above, for sockaddr_in6.
        let sa = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
        sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sa.sin6_port = port;
        sa.sin6_addr.s6_addr = *gid;
        if gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 {
            sa.sin6_scope_id = ifindex;
        }
        (ss, size_of::<libc::sockaddr_in6>())
    }
}

/// Binds `fd` to the wildcard address of its family and `port` (0: any).
pub(super) fn bind_any(fd: &impl AsFd, v6: bool, port: u16) -> io::Result<()> {
    let any = if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
    };
    Ok(rnet::bind(fd, &any)?)
}

/// The port a socket is bound to.
pub(super) fn bound_port(fd: &impl AsFd) -> io::Result<u16> {
    Ok(std_addr(rnet::getsockname(fd)?)?.port())
}

/// A socket of type `ty` bound to the wildcard address and `port`: IPv6
/// dual stack when `v6`, IPv4 otherwise.
pub(super) fn bound_socket(ty: libc::c_int, v6: bool, port: u16) -> io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = socket(family, ty)?;
    if v6 {
        rnet::sockopt::set_ipv6_v6only(&fd, false)?;
    }
    bind_any(&fd, v6, port)?;
    Ok(fd)
}
