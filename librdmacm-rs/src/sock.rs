//! Thin wrappers over the BSD socket calls the CM needs (non-blocking
//! connect, accept4, socket options), returning errno values.

use core::ffi::c_int;
use core::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::addr;
use crate::error::{check, errno, Res};

fn family_of(a: &SocketAddr) -> c_int {
    match a {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    }
}

/// A non-blocking, close-on-exec socket of `kind` for `a`'s family.
fn socket(a: &SocketAddr, kind: c_int) -> Res<OwnedFd> {
    // SAFETY: plain syscall; the returned descriptor is owned below.
    let fd = check(unsafe {
        libc::socket(
            family_of(a),
            kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn tcp_socket(a: &SocketAddr) -> Res<OwnedFd> {
    socket(a, libc::SOCK_STREAM)
}

fn setsockopt_int(fd: RawFd, level: c_int, name: c_int, val: c_int) -> Res<()> {
    // SAFETY: `val` lives across the call and its size is passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const c_int as *const libc::c_void,
            size_of::<c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub fn set_reuseaddr(fd: &OwnedFd) -> Res<()> {
    setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

pub fn set_v6only(fd: &OwnedFd, on: bool) -> Res<()> {
    setsockopt_int(
        fd.as_raw_fd(),
        libc::IPPROTO_IPV6,
        libc::IPV6_V6ONLY,
        on as c_int,
    )
}

/// CM connections live as long as the RDMA connection they carry; TCP
/// keepalive makes a vanished peer host show up as an error within
/// about half a minute even when nothing is being sent.
pub fn set_conn_options(fd: &OwnedFd) {
    let raw = fd.as_raw_fd();
    let _ = setsockopt_int(raw, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    let _ = setsockopt_int(raw, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
    let _ = setsockopt_int(raw, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
    let _ = setsockopt_int(raw, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}

pub fn bind(fd: &OwnedFd, a: &SocketAddr) -> Res<()> {
    let (ss, len) = addr::to_c(a);
    // SAFETY: `ss` holds a valid address of length `len`.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    })
    .map(|_| ())
}

pub fn listen(fd: &OwnedFd, backlog: c_int) -> Res<()> {
    // SAFETY: plain syscall on an owned descriptor.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(|_| ())
}

fn name_of(
    fd: RawFd,
    f: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int,
) -> Res<SocketAddr> {
    // SAFETY: storage is plain data; the call writes at most `len` bytes.
    unsafe {
        let mut ss: libc::sockaddr_storage = core::mem::zeroed();
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        check(f(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len))?;
        addr::from_c(&ss as *const _ as *const libc::sockaddr).ok_or(libc::EAFNOSUPPORT)
    }
}

pub fn local_addr(fd: &OwnedFd) -> Res<SocketAddr> {
    name_of(fd.as_raw_fd(), libc::getsockname).map(addr::unmap)
}

pub fn peer_addr(fd: &OwnedFd) -> Res<SocketAddr> {
    name_of(fd.as_raw_fd(), libc::getpeername).map(addr::unmap)
}

/// Starts a connection; `Ok(true)` if it completed at once.
pub fn connect(fd: &OwnedFd, a: &SocketAddr) -> Res<bool> {
    let (ss, len) = addr::to_c(a);
    // SAFETY: `ss` holds a valid address of length `len`.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    match errno() {
        libc::EINPROGRESS => Ok(false),
        e => Err(e),
    }
}

/// The pending error of a socket (the result of a non-blocking connect).
pub fn so_error(fd: &OwnedFd) -> i32 {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for the call.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut v as *mut c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        errno()
    } else {
        v
    }
}

/// One pending connection, or `None` when there is none right now.
pub fn accept(fd: &OwnedFd) -> Res<Option<OwnedFd>> {
    // SAFETY: null address arguments are allowed; the result is owned below.
    let r = unsafe {
        libc::accept4(
            fd.as_raw_fd(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if r < 0 {
        return match errno() {
            libc::EAGAIN | libc::ECONNABORTED | libc::EINTR => Ok(None),
            e => Err(e),
        };
    }
    // SAFETY: fresh descriptor from accept4.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// Reads what is available. `Ok(0)` means end of stream; `Err(EAGAIN)` none yet.
pub fn read(fd: &OwnedFd, buf: &mut [u8]) -> Res<usize> {
    // SAFETY: `buf` is writable for its length.
    let r = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// Appends what `fd` has to `inbuf` until it would block, the stream ends
/// or fails (then returns true), or `inbuf` holds `limit` bytes. The limit
/// bounds the memory and the CM thread's time one busy or hostile peer
/// can take per wakeup; epoll is level-triggered, so whatever is left is
/// read on the next round.
pub fn read_into(fd: &OwnedFd, inbuf: &mut Vec<u8>, limit: usize) -> bool {
    let mut buf = [0u8; 2048];
    while inbuf.len() < limit {
        match read(fd, &mut buf) {
            Ok(0) => return true,
            Ok(n) => inbuf.extend_from_slice(&buf[..n]),
            Err(libc::EINTR) => {}
            Err(libc::EAGAIN) => return false,
            Err(_) => return true,
        }
    }
    false
}

/// Writes what fits without blocking; never raises SIGPIPE.
pub fn write(fd: &OwnedFd, buf: &[u8]) -> Res<usize> {
    // SAFETY: `buf` is readable for its length.
    let r = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// The source address the routing table picks for `dst`, found the way the
/// kernel would: by connecting a UDP socket (which sends nothing).
pub fn route_source(dst: &SocketAddr) -> Res<IpAddr> {
    let s = socket(dst, libc::SOCK_DGRAM)?;
    let mut d = *dst;
    if d.port() == 0 {
        // A UDP connect to port 0 is refused by some stacks; any port will do.
        d.set_port(9);
    }
    let (ss, len) = addr::to_c(&d);
    // SAFETY: `ss` holds a valid address of length `len`.
    check(unsafe { libc::connect(s.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) })?;
    Ok(local_addr(&s)?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (at most 5 s) for `events` on `fd`.
    fn ready(fd: &OwnedFd, events: i16) -> bool {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 5000) == 1 }
    }

    #[test]
    fn loopback_route_and_connect() {
        let src = route_source(&"127.0.0.1:7".parse().unwrap()).unwrap();
        assert_eq!(src, "127.0.0.1".parse::<IpAddr>().unwrap());

        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let l = tcp_socket(&any).unwrap();
        bind(&l, &any).unwrap();
        listen(&l, 4).unwrap();
        let la = local_addr(&l).unwrap();
        assert_ne!(la.port(), 0);

        let c = tcp_socket(&la).unwrap();
        let _ = connect(&c, &la).unwrap();
        assert!(ready(&c, libc::POLLOUT));
        assert_eq!(so_error(&c), 0);
        assert!(ready(&l, libc::POLLIN));
        let a = accept(&l).unwrap().unwrap();
        assert_eq!(peer_addr(&a).unwrap(), local_addr(&c).unwrap());
        assert_eq!(write(&c, b"hi").unwrap(), 2);
        assert!(ready(&a, libc::POLLIN));
        let mut b = [0u8; 4];
        assert_eq!(read(&a, &mut b).unwrap(), 2);
        assert_eq!(&b[..2], b"hi");
    }

    #[test]
    fn refused_connect_reports_econnrefused() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let l = tcp_socket(&any).unwrap();
        bind(&l, &any).unwrap();
        let port = local_addr(&l).unwrap();
        drop(l); // bound, never listened, now closed: nobody listens there
        let c = tcp_socket(&port).unwrap();
        match connect(&c, &port) {
            Err(e) => assert_eq!(e, libc::ECONNREFUSED),
            Ok(_) => {
                assert!(ready(&c, libc::POLLOUT));
                assert_eq!(so_error(&c), libc::ECONNREFUSED);
            }
        }
    }
}
