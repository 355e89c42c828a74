//! Socket plumbing shared by the transports: creation, options, and
//! socket addresses as GIDs.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::canon_gid;
use crate::gid::{gid_as_ipv4, ipv4_mapped};

pub(super) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(super) fn socket(family: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd =
        cvt(unsafe { libc::socket(family, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

pub(super) fn local_gid(fd: RawFd) -> io::Result<[u8; 16]> {
    // SAFETY: storage is large enough for any socket address.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss/len describe a writable sockaddr buffer.
    cvt(unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) })?;
    Ok(sockaddr_gid(&ss))
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
pub(super) fn bind_any(fd: RawFd, v6: bool, port: u16) -> io::Result<()> {
    if v6 {
        // SAFETY: all-zero is the IPv6 wildcard address.
        let mut sa: libc::sockaddr_in6 = unsafe { zeroed() };
        sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sa.sin6_port = port.to_be();
        // SAFETY: sa is a valid sockaddr_in6 of the given length.
        cvt(unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        })?;
    } else {
        // SAFETY: all-zero is INADDR_ANY.
        let mut sa: libc::sockaddr_in = unsafe { zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port.to_be();
        // SAFETY: sa is a valid sockaddr_in of the given length.
        cvt(unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

pub(super) fn bound_port(fd: RawFd) -> io::Result<u16> {
    // SAFETY: storage is large enough for any socket address.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss/len describe a writable sockaddr buffer.
    cvt(unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) })?;
    let port = match ss.ss_family as libc::c_int {
        // SAFETY: the family tells which sockaddr type was written.
        libc::AF_INET6 => unsafe { (*(&ss as *const _ as *const libc::sockaddr_in6)).sin6_port },
        // SAFETY: as above.
        _ => unsafe { (*(&ss as *const _ as *const libc::sockaddr_in)).sin_port },
    };
    Ok(u16::from_be(port))
}

/// A socket of type `ty` bound to the wildcard address and `port`: IPv6
/// dual stack when `v6`, IPv4 otherwise.
pub(super) fn bound_socket(ty: libc::c_int, v6: bool, port: u16) -> io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = socket(family, ty)?;
    if v6 {
        setsockopt_int(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    }
    bind_any(fd.as_raw_fd(), v6, port)?;
    Ok(fd)
}
