//! The BSD socket calls the CM needs (non-blocking connect, accept,
//! socket options), through rustix, returning errno values.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::{self, sockopt, AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::addr;
use crate::error::Res;

/// The errno of a failed call.
fn e(err: rustix::io::Errno) -> i32 {
    err.raw_os_error()
}

/// A non-blocking, close-on-exec socket of `kind` for `a`'s family.
fn socket(a: &SocketAddr, kind: SocketType) -> Res<OwnedFd> {
    let family = match a {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    net::socket_with(
        family,
        kind,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(e)
}

pub fn tcp_socket(a: &SocketAddr) -> Res<OwnedFd> {
    socket(a, SocketType::STREAM)
}

pub fn set_reuseaddr(fd: &OwnedFd) -> Res<()> {
    sockopt::set_socket_reuseaddr(fd, true).map_err(e)
}

pub fn set_v6only(fd: &OwnedFd, on: bool) -> Res<()> {
    sockopt::set_ipv6_v6only(fd, on).map_err(e)
}

/// CM connections live as long as the RDMA connection they carry; TCP
/// keepalive makes a vanished peer host show up as an error within
/// about half a minute even when nothing is being sent.
pub fn set_conn_options(fd: &OwnedFd) {
    let _ = sockopt::set_tcp_nodelay(fd, true);
    let _ = sockopt::set_socket_keepalive(fd, true);
    let _ = sockopt::set_tcp_keepidle(fd, Duration::from_secs(10));
    let _ = sockopt::set_tcp_keepintvl(fd, Duration::from_secs(5));
    let _ = sockopt::set_tcp_keepcnt(fd, 3);
}

pub fn bind(fd: &OwnedFd, a: &SocketAddr) -> Res<()> {
    net::bind(fd, a).map_err(e)
}

pub fn listen(fd: &OwnedFd, backlog: i32) -> Res<()> {
    net::listen(fd, backlog).map_err(e)
}

fn std_addr(a: net::SocketAddrAny) -> Res<SocketAddr> {
    SocketAddr::try_from(a)
        .map(addr::unmap)
        .map_err(|_| libc::EAFNOSUPPORT)
}

pub fn local_addr(fd: &OwnedFd) -> Res<SocketAddr> {
    std_addr(net::getsockname(fd).map_err(e)?)
}

pub fn peer_addr(fd: &OwnedFd) -> Res<SocketAddr> {
    std_addr(net::getpeername(fd).map_err(e)?.ok_or(libc::ENOTCONN)?)
}

/// Starts a connection; `Ok(true)` if it completed at once.
pub fn connect(fd: &OwnedFd, a: &SocketAddr) -> Res<bool> {
    match net::connect(fd, a) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::INPROGRESS) => Ok(false),
        Err(err) => Err(e(err)),
    }
}

/// The pending error of a socket (the result of a non-blocking connect).
pub fn so_error(fd: &OwnedFd) -> i32 {
    match sockopt::socket_error(fd) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) | Err(err) => e(err),
    }
}

/// One pending connection, or `None` when there is none right now.
pub fn accept(fd: &OwnedFd) -> Res<Option<OwnedFd>> {
    match net::accept_with(fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
        Ok(c) => Ok(Some(c)),
        Err(err) => match e(err) {
            libc::EAGAIN | libc::ECONNABORTED | libc::EINTR => Ok(None),
            other => Err(other),
        },
    }
}

/// Reads what is available. `Ok(0)` means end of stream; `Err(EAGAIN)` none yet.
pub fn read(fd: &OwnedFd, buf: &mut [u8]) -> Res<usize> {
    net::recv(fd, buf, RecvFlags::empty())
        .map(|(n, _)| n)
        .map_err(e)
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
    net::send(fd, buf, SendFlags::NOSIGNAL).map_err(e)
}

/// The source address the routing table picks for `dst`, found the way the
/// kernel would: by connecting a UDP socket (which sends nothing).
pub fn route_source(dst: &SocketAddr) -> Res<IpAddr> {
    let s = socket(dst, SocketType::DGRAM)?;
    let mut d = *dst;
    if d.port() == 0 {
        // A UDP connect to port 0 is refused by some stacks; any port will do.
        d.set_port(9);
    }
    net::connect(&s, &d).map_err(e)?;
    Ok(local_addr(&s)?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustix::event::{poll, PollFd, PollFlags, Timespec};

    /// Waits (at most 5 s) for `events` on `fd`.
    fn ready(fd: &OwnedFd, events: PollFlags) -> bool {
        let mut pfd = [PollFd::new(fd, events)];
        let limit = Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        poll(&mut pfd, Some(&limit)) == Ok(1)
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
        assert!(ready(&c, PollFlags::OUT));
        assert_eq!(so_error(&c), 0);
        assert!(ready(&l, PollFlags::IN));
        let a = accept(&l).unwrap().unwrap();
        assert_eq!(peer_addr(&a).unwrap(), local_addr(&c).unwrap());
        assert_eq!(write(&c, b"hi").unwrap(), 2);
        assert!(ready(&a, PollFlags::IN));
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
                assert!(ready(&c, PollFlags::OUT));
                assert_eq!(so_error(&c), libc::ECONNREFUSED);
            }
        }
    }
}
