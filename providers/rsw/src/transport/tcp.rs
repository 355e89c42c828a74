//! TCP transport.
//!
//! A QP's number is the TCP port of its listening socket, bound to the
//! wildcard address of an IPv6 dual-stack socket (IPv4 peers arrive as
//! IPv4-mapped addresses). The kernel keeps ports unique per network
//! namespace, which makes QP numbers unique across processes with no daemon
//! and no coordination.

use std::cell::Cell;
use std::io;
use std::mem::zeroed;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::net::{self as rnet, sockopt, SocketFlags};

use super::sock::{addr_gid, bound_port, bound_socket, local_gid, socket, socket_addr};
use super::{Connecting, Endpoints, RemoteAddr};

/// Small request/response messages must not wait for Nagle.
fn tune(fd: &OwnedFd) {
    let _ = sockopt::set_tcp_nodelay(fd, true);
}

pub struct TcpListener {
    fd: OwnedFd,
}

impl TcpListener {
    pub fn open() -> io::Result<(TcpListener, u32)> {
        let fd = match bound_socket(libc::SOCK_STREAM, true, 0) {
            Ok(fd) => fd,
            Err(_) => bound_socket(libc::SOCK_STREAM, false, 0)?,
        };
        rnet::listen(&fd, 64)?;
        let port = bound_port(&fd)?;
        Ok((TcpListener { fd }, port as u32))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Accepts one pending connection with the addresses of both ends.
    pub fn accept(&self) -> io::Result<Option<(TcpConn, Endpoints)>> {
        loop {
            let e =
                match rnet::acceptfrom_with(&self.fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)
                {
                    Ok((fd, from)) => {
                        tune(&fd);
                        let peer = from
                            .and_then(|a| SocketAddr::try_from(a).ok())
                            .map_or([0; 16], |a| addr_gid(&a));
                        let local = local_gid(&fd).unwrap_or([0; 16]);
                        return Ok(Some((TcpConn::new(fd), Endpoints { peer, local })));
                    }
                    Err(e) => io::Error::from(e),
                };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                // The peer gave up before we accepted: try the next one.
                Some(libc::ECONNABORTED) | Some(libc::EPROTO) => continue,
                _ => return Err(e),
            }
        }
    }
}

/// Bytes one read may take beyond what the caller asked for: the start
/// of the messages that follow, so a burst of small messages (or a header
/// and its payload) costs one `recvmsg` instead of two per message.
const STAGE: usize = 64 << 10;

/// Reads of up to this many bytes go through the stage (see
/// `TcpConn::recv_small`); larger ones land in place.
const SMALL_READ: usize = 256;

pub struct TcpConn {
    fd: OwnedFd,
    /// Stream bytes read ahead of the caller: `stage[start..]` (the
    /// vector's length is where they end). Its capacity is reserved at
    /// the first read and never grows, so no read allocates after that;
    /// pages are only touched as far as data has come.
    stage: Vec<u8>,
    start: usize,
    /// The last `recvmsg` returned less than it had room for: the socket
    /// was empty then, so the next read reports "would block" without
    /// asking again, until `fresh` says something may have come (the
    /// descriptor fired, or a thread polls).
    drained: bool,
    calls: Calls,
}

/// How many `recvmsg`/`sendmsg` calls of a connection moved bytes (the
/// ones that found the socket empty or full are not counted): diagnostics
/// and tests, see `qp::socket_calls`.
#[derive(Default)]
pub struct Calls {
    pub reads: Cell<u64>,
    pub writes: Cell<u64>,
}

impl Drop for TcpConn {
    /// Closing a socket with unread bytes makes the kernel reset the
    /// connection and throw away what we queued but it has not sent yet:
    /// the acknowledgements for messages the application has already seen
    /// completed. Hardware would have sent those, so the peer must get
    /// them; discard what we will never read first, so the close is an
    /// orderly one. Bounded: a peer still sending gets its reset.
    fn drop(&mut self) {
        for _ in 0..64 {
            // SAFETY: MSG_TRUNC makes TCP discard up to `len` bytes without
            // writing to the (null) buffer.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    1 << 20,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n <= 0 {
                break;
            }
        }
    }
}

/// Why a connection could not be started.
#[derive(Debug)]
pub enum ConnectError {
    /// No socket for it here (descriptors, memory, our address).
    Local(io::Error),
    /// The network or the peer said no.
    Remote(io::Error),
}

impl TcpConn {
    fn new(fd: OwnedFd) -> TcpConn {
        TcpConn {
            fd,
            stage: Vec::new(),
            start: 0,
            drained: false,
            calls: Calls::default(),
        }
    }

    pub fn fresh(&mut self) {
        self.drained = false;
    }

    pub fn staged(&self) -> usize {
        self.stage.len() - self.start
    }

    pub fn calls(&self) -> (u64, u64) {
        (self.calls.reads.get(), self.calls.writes.get())
    }

    /// Connects to `remote` from the address `local` (our GID), so the peer
    /// sees the source address it was told at RTR. Creating or binding the
    /// socket fails with `Err(ConnectError::Local)`; anything the network
    /// answers is `ConnectError::Remote`.
    pub fn connect(remote: &RemoteAddr, local: &[u8; 16]) -> Result<Connecting, ConnectError> {
        if remote.qpn == 0 || remote.qpn > u16::MAX as u32 {
            return Err(ConnectError::Remote(io::Error::from_raw_os_error(
                libc::EADDRNOTAVAIL,
            )));
        }
        let dst = socket_addr(&remote.gid, remote.qpn as u16, remote.ifindex);
        let family = if dst.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let fd = socket(family, libc::SOCK_STREAM).map_err(ConnectError::Local)?;
        tune(&fd);
        // Bind the source only when it is of the peer's family; a mixed
        // pair (IPv4 GID to IPv6 GID) cannot talk and fails at connect.
        let src = socket_addr(local, 0, remote.ifindex);
        if src.is_ipv4() == dst.is_ipv4() && *local != [0; 16] {
            rnet::bind(&fd, &src).map_err(|e| ConnectError::Local(e.into()))?;
        }
        let conn = TcpConn::new(fd);
        loop {
            let e = match rnet::connect(&conn.fd, &dst) {
                Ok(()) => return Ok(Connecting::Ready(super::Conn::Tcp(conn))),
                Err(e) => io::Error::from(e),
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINPROGRESS) => return Ok(Connecting::Pending(super::Conn::Tcp(conn))),
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    return Err(ConnectError::Local(e))
                }
                _ => return Err(ConnectError::Remote(e)),
            }
        }
    }

    /// Bounds how long sent data may stay unacknowledged by the peer's
    /// kernel, and probes an idle connection, so a vanished host ends the
    /// connection instead of leaving it open forever.
    pub fn set_user_timeout(&self, ms: u32) {
        let fd = &self.fd;
        let _ = sockopt::set_tcp_user_timeout(fd, ms);
        // Probe after two seconds of silence, then every two; the user
        // timeout decides when unanswered probes end the connection.
        let _ = sockopt::set_socket_keepalive(fd, true);
        let _ = sockopt::set_tcp_keepidle(fd, Duration::from_secs(2));
        let _ = sockopt::set_tcp_keepintvl(fd, Duration::from_secs(2));
        let _ = sockopt::set_tcp_keepcnt(fd, 3);
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn finish_connect(&self) -> io::Result<()> {
        sockopt::socket_error(&self.fd)??;
        Ok(())
    }

    /// # Safety
    /// Every iovec must describe readable memory.
    pub unsafe fn send_iov(&self, iov: &[libc::iovec], hold: bool) -> io::Result<usize> {
        // SAFETY: a zeroed msghdr is valid; we only set the iovec fields.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        // MSG_MORE corks this data in the socket until the next push.
        let more = if hold { libc::MSG_MORE } else { 0 };
        loop {
            // SAFETY: msg points to iovecs the caller vouches for.
            let n = unsafe {
                libc::sendmsg(
                    self.fd.as_raw_fd(),
                    &msg,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT | more,
                )
            };
            if n > 0 {
                self.calls.writes.set(self.calls.writes.get() + 1);
            }
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Setting TCP_NODELAY (already on) makes the kernel transmit corked
    /// data now.
    pub fn push(&self) {
        tune(&self.fd);
    }

    /// Receives into `iov`: from the bytes read ahead if there are any
    /// (copied, so a destination unmapped since its registration fails
    /// with EFAULT as `recvmsg` would), else with one `recvmsg` that also
    /// reads ahead whatever follows, up to [`STAGE`] bytes. A large
    /// payload still goes straight from the socket into its destination.
    ///
    /// # Safety
    /// Every iovec must describe writable memory.
    pub unsafe fn recv_iov(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        if self.start < self.stage.len() && want > 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.unstage(iov) };
        }
        if self.drained && want > 0 {
            self.drained = false;
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        if self.stage.capacity() == 0 {
            self.stage.reserve_exact(STAGE);
        }
        self.stage.clear();
        self.start = 0;
        if want > 0 && want <= SMALL_READ {
            // SAFETY: forwarded contract.
            return unsafe { self.recv_small(iov) };
        }
        let mut v = [crate::util::iov(std::ptr::null(), 0); super::MAX_IOV + 1];
        let n = iov.len().min(super::MAX_IOV);
        v[..n].copy_from_slice(&iov[..n]);
        let room = if want > 0 { self.stage.capacity() } else { 0 };
        v[n] = crate::util::iov(self.stage.as_mut_ptr(), room);
        // SAFETY: a zeroed msghdr is valid; we only set the iovec fields.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = v.as_mut_ptr();
        msg.msg_iovlen = n + 1;
        loop {
            // SAFETY: msg points to the caller's iovecs, which it vouches
            // for, and to our stage's reserved (unused) capacity.
            let r = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if r > 0 {
                self.calls.reads.set(self.calls.reads.get() + 1);
            }
            if r >= 0 {
                let r = r as usize;
                self.drained = r < want + room;
                if r > want {
                    // SAFETY: the kernel wrote these bytes of the reserved
                    // capacity.
                    unsafe { self.stage.set_len(r - want) };
                }
                return Ok(r.min(want));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// A small read (a header, mostly: what a polling thread asks for
    /// over and over) goes whole into the stage with `recv`, then is
    /// copied out: `recvmsg`'s message and iovec import is a good part of
    /// the cost of a call that finds the socket empty.
    ///
    /// # Safety
    /// As [`TcpConn::recv_iov`]; the stage is empty and reserved.
    unsafe fn recv_small(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let room = self.stage.capacity();
        loop {
            // SAFETY: the stage's reserved, unused capacity, `room` bytes.
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.stage.as_mut_ptr() as *mut libc::c_void,
                    room,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                self.calls.reads.set(self.calls.reads.get() + 1);
                let r = r as usize;
                self.drained = r < room;
                // SAFETY: the kernel wrote these bytes of the reserved
                // capacity.
                unsafe { self.stage.set_len(r) };
                // SAFETY: forwarded contract.
                return unsafe { self.unstage(iov) };
            }
            if r == 0 {
                return Ok(0);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Copies bytes read ahead into `iov`, as many as fit.
    ///
    /// # Safety
    /// Every iovec must describe memory the application registered for us
    /// to write, or ours.
    unsafe fn unstage(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        let mut done = 0;
        for v in iov {
            let k = v.iov_len.min(self.stage.len() - self.start);
            if k == 0 {
                continue;
            }
            // SAFETY: the source is initialised stage bytes; the caller
            // vouches for the destination, and a fault there (memory
            // unmapped since) is caught.
            let r = unsafe {
                crate::guard::copy(
                    v.iov_base as *mut u8,
                    self.stage.as_ptr().add(self.start),
                    k,
                )
            };
            if r.is_err() {
                if done > 0 {
                    break;
                }
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            self.start += k;
            done += k;
            if self.start == self.stage.len() {
                break;
            }
        }
        Ok(done)
    }
}
