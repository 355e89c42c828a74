//! The exported `r*` calls of `<rdma/rsocket.h>`: argument checks and C
//! conventions (-1 with errno) over the safe core in `stream`, `opts` and
//! `poll`. A descriptor that is not an rsocket gets EBADF (nothing open
//! there) or ENOTSOCK, except in `rpoll`/`rselect`, which take ordinary
//! descriptors too.

use core::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::time::Duration;

use libc::{
    fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};

use super::dgram::{self, DSocket};
use super::opts::{self, Val};
use super::{poll, stream};
use crate::addr;
use crate::error::{errno, set_errno, Res};
use std::sync::Arc;
use verbs_rt::export;

fn ssize(r: Res<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn int(r: Res<c_int>) -> c_int {
    match r {
        Ok(n) => n,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Reads the caller's address.
///
/// # Safety
/// `a` is null or readable for `len` bytes.
unsafe fn read_addr(a: *const sockaddr, len: socklen_t) -> Res<SocketAddr> {
    if a.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: caller guarantee; the family field is in the first bytes.
    let fam = unsafe { (*a).sa_family } as c_int;
    let need = match fam {
        libc::AF_INET => core::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    // SAFETY: readable and long enough for its family.
    unsafe { addr::from_c(a) }.ok_or(libc::EINVAL)
}

/// Copies `ss` out as getsockname(2) does: truncated to the caller's room,
/// with the full length written back.
///
/// # Safety
/// `a`/`len` are null or valid for writing.
unsafe fn write_addr(
    ss: &libc::sockaddr_storage,
    a: *mut sockaddr,
    len: *mut socklen_t,
) -> Res<()> {
    if len.is_null() {
        return if a.is_null() {
            Ok(())
        } else {
            Err(libc::EFAULT)
        };
    }
    let full = match ss.ss_family as c_int {
        libc::AF_INET => core::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
        _ => core::mem::size_of::<libc::sa_family_t>(),
    };
    // SAFETY: caller guarantee.
    unsafe {
        let room = (*len as usize).min(full);
        if !a.is_null() && room > 0 {
            core::ptr::copy_nonoverlapping(ss as *const _ as *const u8, a as *mut u8, room);
        }
        *len = full as socklen_t;
    }
    Ok(())
}

/// # Safety
/// `iov` is valid for `n` entries (checked non-null when `n` > 0).
unsafe fn iovs<'a>(iov: *const iovec, n: c_int) -> Res<&'a [iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: caller guarantee.
    let v = unsafe { core::slice::from_raw_parts(iov, n as usize) };
    if v.iter().any(|b| b.iov_base.is_null() && b.iov_len > 0) {
        return Err(libc::EFAULT);
    }
    Ok(v)
}

fn one(buf: *const c_void, len: size_t) -> Res<iovec> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    Ok(iovec {
        iov_base: buf as *mut c_void,
        iov_len: len,
    })
}

const RECV_FLAGS: c_int = libc::MSG_DONTWAIT | libc::MSG_PEEK | libc::MSG_WAITALL;

/// A datagram receive into the iovecs (scattered from one bounce copy
/// when there are several).
fn dgram_recv(d: &DSocket, v: &[iovec], flags: c_int) -> Res<(usize, SocketAddr)> {
    let dontwait = flags & libc::MSG_DONTWAIT != 0;
    let peek = flags & libc::MSG_PEEK != 0;
    if v.len() == 1 {
        // SAFETY: the caller's writable buffer (checked by the entry point).
        return unsafe { d.recv_from(v[0].iov_base.cast(), v[0].iov_len, dontwait, peek) };
    }
    let mut tmp = [0u8; dgram::MAX_DGRAM];
    let room: usize = v.iter().map(|b| b.iov_len).sum::<usize>().min(tmp.len());
    // SAFETY: our stack buffer of `room` bytes.
    let (n, from) = unsafe { d.recv_from(tmp.as_mut_ptr(), room, dontwait, peek) }?;
    let mut off = 0;
    for b in v {
        let k = b.iov_len.min(n - off);
        // SAFETY: the caller's buffer of iov_len bytes.
        unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr().add(off), b.iov_base as *mut u8, k) };
        off += k;
    }
    Ok((n, from))
}

fn dgram_send(d: &DSocket, v: &[iovec], flags: c_int, to: Option<SocketAddr>) -> Res<usize> {
    let dontwait = flags & libc::MSG_DONTWAIT != 0;
    if v.len() == 1 {
        // SAFETY: the caller's readable buffer (checked by the entry point).
        return unsafe { d.send_to(v[0].iov_base as *const u8, v[0].iov_len, to, dontwait) };
    }
    let total: usize = v.iter().map(|b| b.iov_len).sum();
    if total > dgram::MAX_DGRAM {
        return Err(libc::EMSGSIZE);
    }
    let mut tmp = [0u8; dgram::MAX_DGRAM];
    let mut off = 0;
    for b in v {
        // SAFETY: the caller's buffer of iov_len bytes; fits (checked).
        unsafe {
            core::ptr::copy_nonoverlapping(
                b.iov_base as *const u8,
                tmp.as_mut_ptr().add(off),
                b.iov_len,
            )
        };
        off += b.iov_len;
    }
    // SAFETY: our stack buffer.
    unsafe { d.send_to(tmp.as_ptr(), total, to, dontwait) }
}

/// Receives into the iovecs; the sender's address for datagrams.
fn recv_core(socket: c_int, v: &[iovec], flags: c_int) -> Res<(usize, Option<SocketAddr>)> {
    if flags & libc::MSG_OOB != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if let Some(d) = dgram::find(socket) {
        return dgram_recv(&d, v, flags).map(|(n, a)| (n, Some(a)));
    }
    let s = stream::lookup(socket)?;
    let f = flags & RECV_FLAGS;
    // SAFETY: the iovecs were checked by the entry point: the caller's
    // writable buffers.
    let n = unsafe {
        s.recv(
            v,
            f & libc::MSG_DONTWAIT != 0,
            f & libc::MSG_PEEK != 0,
            f & libc::MSG_WAITALL != 0,
        )
    }?;
    Ok((n, None))
}

fn send_core(socket: c_int, v: &[iovec], flags: c_int, to: Option<SocketAddr>) -> Res<usize> {
    if flags & libc::MSG_OOB != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if let Some(d) = dgram::find(socket) {
        return dgram_send(&d, v, flags, to);
    }
    let s = stream::lookup(socket)?;
    if to.is_some() {
        // A stream socket is connected already: an address is an error,
        // as rdma-core's rsendto says.
        return Err(libc::EISCONN);
    }
    // SAFETY: the iovecs were checked by the entry point: the caller's
    // readable buffers.
    unsafe { s.send(v, flags & libc::MSG_DONTWAIT != 0) }
}

/// A datagram rsocket numbered `fd`, if it is one.
fn dgram_of(fd: c_int) -> Option<Arc<DSocket>> {
    dgram::find(fd)
}

#[no_mangle]
pub extern "C" fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    export!(raw::minus_one, (domain, type_, protocol), {
        int((|| {
            if domain != libc::AF_INET && domain != libc::AF_INET6 {
                return Err(libc::EAFNOSUPPORT);
            }
            let kind = type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
            match kind {
                libc::SOCK_STREAM => {}
                libc::SOCK_DGRAM => {
                    if protocol != 0 && protocol != libc::IPPROTO_UDP {
                        return Err(libc::EPROTONOSUPPORT);
                    }
                    return dgram::create(domain, type_ & libc::SOCK_NONBLOCK != 0);
                }
                _ => return Err(libc::ESOCKTNOSUPPORT),
            }
            if protocol != 0 && protocol != libc::IPPROTO_TCP {
                return Err(libc::EPROTONOSUPPORT);
            }
            stream::create(domain, type_ & libc::SOCK_NONBLOCK != 0)
        })())
    })
}

/// # Safety
/// As `bind(2)`.
#[no_mangle]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    export!(minus_one, (socket, addr, addrlen), {
        if let Some(d) = dgram_of(socket) {
            // SAFETY: caller guarantee.
            return d.bind(unsafe { read_addr(addr, addrlen) }?);
        }
        let s = stream::lookup(socket)?;
        // SAFETY: caller guarantee.
        let a = unsafe { read_addr(addr, addrlen) }?;
        s.bind(a)
    })
}

#[no_mangle]
pub extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    export!(minus_one, (socket, backlog), {
        if dgram_of(socket).is_some() {
            return Err(libc::EOPNOTSUPP);
        }
        stream::lookup(socket)?.listen(backlog)
    })
}

/// # Safety
/// As `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn raccept(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    export!(raw::minus_one, (socket, addr, addrlen), {
        int((|| {
            if dgram_of(socket).is_some() {
                return Err(libc::EOPNOTSUPP);
            }
            let s = stream::lookup(socket)?;
            if !addr.is_null() && addrlen.is_null() {
                return Err(libc::EFAULT);
            }
            let (fd, peer) = s.accept()?;
            if let Some(p) = peer {
                let (ss, _) = addr::to_c(&p);
                // SAFETY: caller guarantee.
                unsafe { write_addr(&ss, addr, addrlen) }?;
            }
            Ok(fd)
        })())
    })
}

/// # Safety
/// As `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn rconnect(
    socket: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> c_int {
    export!(minus_one, (socket, addr, addrlen), {
        if let Some(d) = dgram_of(socket) {
            // SAFETY: caller guarantee.
            return d.connect(unsafe { read_addr(addr, addrlen) }?);
        }
        let s = stream::lookup(socket)?;
        // SAFETY: caller guarantee.
        let a = unsafe { read_addr(addr, addrlen) }?;
        s.connect(a)
    })
}

#[no_mangle]
pub extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    export!(minus_one, (socket, how), {
        if dgram_of(socket).is_some() {
            return Err(libc::EOPNOTSUPP);
        }
        stream::lookup(socket)?.shutdown(how)
    })
}

#[no_mangle]
pub extern "C" fn rclose(socket: c_int) -> c_int {
    export!(minus_one, (socket), {
        if let Some(d) = dgram_of(socket) {
            return d.close();
        }
        stream::lookup(socket)?.close()
    })
}

/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecv(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    export!(raw::ssize, (socket, buf, len, flags), {
        ssize(one(buf, len).and_then(|v| recv_core(socket, &[v], flags).map(|r| r.0)))
    })
}

/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src_addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    export!(raw::ssize, (socket, buf, len, flags, src_addr, addrlen), {
        ssize(one(buf, len).and_then(|v| {
            let (n, from) = recv_core(socket, &[v], flags)?;
            if !src_addr.is_null() {
                let ss = match from {
                    Some(a) => addr::to_c(&a).0,
                    None => stream::lookup(socket)?.peer_addr()?,
                };
                // SAFETY: caller guarantee.
                unsafe { write_addr(&ss, src_addr, addrlen) }?;
            }
            Ok(n)
        }))
    })
}

/// # Safety
/// As `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    export!(raw::ssize, (socket, msg, flags), {
        // SAFETY: caller guarantee: null or a valid msghdr.
        ssize(unsafe { msg.as_mut() }.ok_or(libc::EFAULT).and_then(|m| {
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: the msghdr's iovecs, per the caller.
            let v = unsafe { iovs(m.msg_iov, m.msg_iovlen as c_int) }?;
            let (n, from) = recv_core(socket, v, flags)?;
            if !m.msg_name.is_null() {
                let ss = match from {
                    Some(a) => addr::to_c(&a).0,
                    None => stream::lookup(socket)?.peer_addr()?,
                };
                let mut len = m.msg_namelen;
                // SAFETY: the caller's name buffer of msg_namelen bytes.
                unsafe { write_addr(&ss, m.msg_name.cast(), &mut len) }?;
                m.msg_namelen = len;
            }
            m.msg_flags = 0;
            Ok(n)
        }))
    })
}

/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    export!(raw::ssize, (socket, buf, len, flags), {
        ssize(one(buf, len).and_then(|v| send_core(socket, &[v], flags, None)))
    })
}

/// # Safety
/// As `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dest_addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    export!(raw::ssize, (socket, buf, len, flags, dest_addr, addrlen), {
        ssize(one(buf, len).and_then(|v| {
            let to = if dest_addr.is_null() && addrlen == 0 {
                None
            } else {
                // SAFETY: caller guarantee.
                Some(unsafe { read_addr(dest_addr, addrlen) }?)
            };
            send_core(socket, &[v], flags, to)
        }))
    })
}

/// # Safety
/// As `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    export!(raw::ssize, (socket, msg, flags), {
        // SAFETY: caller guarantee: null or a valid msghdr.
        ssize(unsafe { msg.as_ref() }.ok_or(libc::EFAULT).and_then(|m| {
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: the msghdr's iovecs, per the caller.
            let v = unsafe { iovs(m.msg_iov, m.msg_iovlen as c_int) }?;
            let to = if m.msg_name.is_null() {
                None
            } else {
                // SAFETY: the caller's name of msg_namelen bytes.
                Some(unsafe { read_addr(m.msg_name.cast(), m.msg_namelen) }?)
            };
            send_core(socket, v, flags, to)
        }))
    })
}

/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    export!(raw::ssize, (socket, buf, count), {
        ssize(one(buf, count).and_then(|v| recv_core(socket, &[v], 0).map(|r| r.0)))
    })
}

/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    export!(raw::ssize, (socket, iov, iovcnt), {
        // SAFETY: caller guarantee.
        ssize(unsafe { iovs(iov, iovcnt) }.and_then(|v| recv_core(socket, v, 0).map(|r| r.0)))
    })
}

/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    export!(raw::ssize, (socket, buf, count), {
        ssize(one(buf, count).and_then(|v| send_core(socket, &[v], 0, None)))
    })
}

/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    export!(raw::ssize, (socket, iov, iovcnt), {
        // SAFETY: caller guarantee.
        ssize(unsafe { iovs(iov, iovcnt) }.and_then(|v| send_core(socket, v, 0, None)))
    })
}

/// # Safety
/// As `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    export!(raw::minus_one, (fds, nfds, timeout), {
        if fds.is_null() && nfds > 0 {
            set_errno(libc::EFAULT);
            return -1;
        }
        let fds = if nfds == 0 {
            &mut [][..]
        } else {
            // SAFETY: caller guarantee: `nfds` writable pollfds.
            unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) }
        };
        // Internal steps (a non-blocking read of a CM channel, say) may
        // set errno; a call that succeeds leaves the caller's as it was.
        let saved = errno();
        let r = int(poll::rpoll(fds, timeout));
        if r >= 0 {
            set_errno(saved);
        }
        r
    })
}

/// # Safety
/// As `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    export!(
        raw::minus_one,
        (nfds, readfds, writefds, exceptfds, timeout),
        {
            // SAFETY: caller guarantee: null or a valid timeval.
            let t = match unsafe { timeout.as_ref() } {
                None => None,
                Some(t) if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) => {
                    set_errno(libc::EINVAL);
                    return -1;
                }
                Some(t) => Some(
                    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64),
                ),
            };
            let saved = errno();
            // SAFETY: caller guarantee: null or valid sets for `nfds`.
            let r = int(unsafe { poll::rselect(nfds, readfds, writefds, exceptfds, t) });
            if r >= 0 {
                set_errno(saved);
            }
            r
        }
    )
}

/// # Safety
/// As `getpeername(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    export!(minus_one, (socket, addr, addrlen), {
        let ss = match dgram_of(socket) {
            Some(d) => addr::to_c(&d.peer_addr()?).0,
            None => stream::lookup(socket)?.peer_addr()?,
        };
        if addrlen.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: caller guarantee.
        unsafe { write_addr(&ss, addr, addrlen) }
    })
}

/// # Safety
/// As `getsockname(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    export!(minus_one, (socket, addr, addrlen), {
        let ss = match dgram_of(socket) {
            Some(d) => addr::to_c(&d.local_addr()?).0,
            None => {
                let s = stream::lookup(socket)?;
                let mut ss = s.local_addr()?;
                if ss.ss_family == 0 {
                    // Not bound yet: the wildcard address of the family.
                    ss.ss_family = s.lock().family as libc::sa_family_t;
                }
                ss
            }
        };
        if addrlen.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: caller guarantee.
        unsafe { write_addr(&ss, addr, addrlen) }
    })
}

/// # Safety
/// As `setsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    export!(minus_one, (socket, level, optname, optval, optlen), {
        let d = dgram_of(socket);
        let s = if d.is_none() {
            Some(stream::lookup(socket)?)
        } else {
            None
        };
        if optval.is_null() && optlen > 0 {
            return Err(libc::EFAULT);
        }
        let v: &[u8] = if optlen == 0 {
            &[]
        } else {
            // SAFETY: caller guarantee: `optlen` readable bytes.
            unsafe { core::slice::from_raw_parts(optval.cast(), optlen as usize) }
        };
        match (d, s) {
            (Some(d), _) => opts::dgram_set(&d, level, optname, v),
            (None, Some(s)) => opts::set(&s, level, optname, v),
            _ => Err(libc::EBADF),
        }
    })
}

/// # Safety
/// As `getsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    export!(minus_one, (socket, level, optname, optval, optlen), {
        let v = match dgram_of(socket) {
            Some(d) => {
                if optlen.is_null() || optval.is_null() {
                    return Err(libc::EFAULT);
                }
                opts::dgram_get(&d, level, optname)?
            }
            None => {
                let s = stream::lookup(socket)?;
                if optlen.is_null() || optval.is_null() {
                    return Err(libc::EFAULT);
                }
                opts::get(&s, level, optname)?
            }
        };
        let bytes: &[u8];
        let int_bytes;
        let linger_bytes;
        match &v {
            Val::Int(i) => {
                int_bytes = i.to_ne_bytes();
                bytes = &int_bytes;
            }
            Val::Linger(l) => {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&l.l_onoff.to_ne_bytes());
                b[4..].copy_from_slice(&l.l_linger.to_ne_bytes());
                linger_bytes = b;
                bytes = &linger_bytes;
            }
            Val::Bytes(b) => bytes = b.as_slice(),
        }
        // SAFETY: caller guarantee: `*optlen` writable bytes at optval.
        unsafe {
            let room = *optlen as usize;
            if room < bytes.len().min(4) {
                return Err(libc::EINVAL);
            }
            let n = room.min(bytes.len());
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), optval as *mut u8, n);
            *optlen = n as socklen_t;
        }
        Ok(())
    })
}

/// `int rfcntl(int socket, int cmd, ... /* arg */)`. Stable Rust cannot
/// define a C variadic function; on x86-64 (and the other 64-bit Linux
/// ABIs) the one optional integer or pointer argument travels in the same
/// register as a third fixed argument, so it is taken as one.
#[no_mangle]
pub extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: usize) -> c_int {
    export!(raw::minus_one, (socket, cmd, arg), {
        if let Some(d) = dgram_of(socket) {
            return int(opts::dgram_fcntl(&d, cmd, arg));
        }
        int(stream::lookup(socket).and_then(|s| opts::fcntl(&s, cmd, arg)))
    })
}

#[no_mangle]
pub extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    _flags: c_int,
    offset: off_t,
) -> off_t {
    export!(raw::ssize, (socket, buf, len, prot, offset), {
        if dgram_of(socket).is_some() {
            set_errno(libc::EOPNOTSUPP);
            return -1;
        }
        let r = stream::lookup(socket).and_then(|s| {
            // Only remote writes exist (riowrite); a mapping for anything
            // else has no use, as in rdma-core.
            if buf.is_null() || len == 0 || prot != libc::PROT_WRITE || offset < -1 {
                return Err(libc::EINVAL);
            }
            let off = if offset == -1 {
                buf as u64
            } else {
                offset as u64
            };
            s.iomap(buf as usize, len, off)
        });
        match r {
            Ok(o) => o as off_t,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
    export!(raw::minus_one, (socket, buf, len), {
        int(stream::lookup(socket)
            .and_then(|s| s.iounmap(buf as usize, len))
            .map(|()| 0))
    })
}

#[no_mangle]
pub extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
    flags: c_int,
) -> size_t {
    export!(raw::ssize, (socket, buf, count, offset, flags), {
        if dgram_of(socket).is_some() {
            set_errno(libc::EOPNOTSUPP);
            return usize::MAX;
        }
        let r = stream::lookup(socket).and_then(|s| {
            if buf.is_null() && count > 0 || offset < 0 {
                return Err(libc::EINVAL);
            }
            if count == 0 {
                return Ok(0);
            }
            // SAFETY: the caller's buffer of `count` bytes.
            unsafe {
                s.iowrite(
                    buf.cast(),
                    count,
                    offset as u64,
                    flags & libc::MSG_DONTWAIT != 0,
                )
            }
        });
        match r {
            Ok(n) => n,
            Err(e) => {
                set_errno(e);
                usize::MAX
            }
        }
    })
}

// rdma-core 44 does not have the repoll_* calls (not exported here, see
// exports.txt); kept for the header's sake.

#[no_mangle]
pub extern "C" fn repoll_create(_flags: c_int) -> c_int {
    export!(raw::minus_one, untraced, {
        set_errno(libc::ENOSYS);
        -1
    })
}

#[no_mangle]
pub extern "C" fn repoll_ctl(
    _epfd: c_int,
    _op: c_int,
    _fd: c_int,
    _event: *mut libc::epoll_event,
) -> c_int {
    export!(raw::minus_one, untraced, {
        set_errno(libc::ENOSYS);
        -1
    })
}

#[no_mangle]
pub extern "C" fn repoll_wait(
    _epfd: c_int,
    _events: *mut libc::epoll_event,
    _maxevents: c_int,
    _timeout: c_int,
) -> c_int {
    export!(raw::minus_one, untraced, {
        set_errno(libc::ENOSYS);
        -1
    })
}
