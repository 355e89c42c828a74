//! The transport interface: how a QP reaches its peer.
//!
//! The RC protocol (requester and responder state machines) only needs a
//! reliable, ordered, non-blocking byte stream per direction plus a way to
//! be woken when it can make progress. A transport provides exactly that:
//! a listener per QP (whose address is the QP number), an outgoing
//! connection opened at RTR, the incoming connection accepted from the peer,
//! and scatter/gather send/receive on them. Everything is non-blocking; each
//! endpoint exposes a descriptor the progress engine polls.
//!
//! TCP carries every connection (UDP the datagrams). Between processes of
//! one host, `local` (published tables), `mailbox` (shared receive and
//! completion rings) and `atomics` (the per-process atomic lock) let the
//! requester do the target's work itself, on `shm` (mapped files and the
//! path's on/off switch); the connection stays for what they do not cover.

pub(crate) mod atomics;
pub(crate) mod local;
pub(crate) mod mailbox;
pub(crate) mod packet;
pub(crate) mod roce;
pub(crate) mod shm;
mod sock;
pub(crate) mod tcp;
pub(crate) mod udp;

use std::io;
use std::os::fd::RawFd;

/// Where a peer QP lives: its GID (an IP address, IPv4-mapped or IPv6) and
/// its QP number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    pub gid: [u8; 16],
    pub qpn: u32,
    /// Interface to use for link-local IPv6 GIDs.
    pub ifindex: u32,
    /// The GID was given at RTR (a GRH); without one (LID-only
    /// addressing) the peer is on this host.
    pub global: bool,
}

/// The addresses of both ends of an accepted connection, as GIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub peer: [u8; 16],
    pub local: [u8; 16],
}

pub use tcp::ConnectError;

pub use crate::gid::canon_gid;

/// Whether a connection's error means the peer's host is gone: TCP's
/// keepalive or unacknowledged-data timeout ran out (ETIMEDOUT, or the
/// ICMP or neighbour failure seen meanwhile: EHOSTUNREACH and friends).
pub fn vanished(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ETIMEDOUT
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENETDOWN
        )
    )
}

/// A QP's listening endpoint; its address is the QP number.
pub enum Listener {
    Tcp(tcp::TcpListener),
}

impl Drop for Listener {
    fn drop(&mut self) {
        crate::progress::unwatch(self.fd());
    }
}

impl Listener {
    /// Opens a new listener; returns it and the QP number it defines.
    pub fn open() -> io::Result<(Listener, u32)> {
        let (l, qpn) = tcp::TcpListener::open()?;
        Ok((Listener::Tcp(l), qpn))
    }

    pub fn fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.fd(),
        }
    }

    /// Accepts one pending connection, `Ok(None)` when there is none.
    pub fn accept(&self) -> io::Result<Option<(Conn, Endpoints)>> {
        match self {
            Listener::Tcp(l) => Ok(l.accept()?.map(|(c, e)| (Conn::Tcp(c), e))),
        }
    }
}

/// Outcome of starting a connection.
pub enum Connecting {
    /// Connected already (typical on loopback).
    Ready(Conn),
    /// In progress: the descriptor becomes writable when it completes; call
    /// [`Conn::finish_connect`] then.
    Pending(Conn),
}

/// One direction-pair byte stream between two QPs.
pub enum Conn {
    Tcp(tcp::TcpConn),
}

impl Drop for Conn {
    fn drop(&mut self) {
        crate::progress::unwatch(self.fd());
    }
}

impl Conn {
    /// Starts a connection to `remote` from our address `local`.
    pub fn connect(remote: &RemoteAddr, local: &[u8; 16]) -> Result<Connecting, ConnectError> {
        tcp::TcpConn::connect(remote, local)
    }

    /// See [`tcp::TcpConn::set_user_timeout`].
    pub fn set_user_timeout(&self, ms: u32) {
        match self {
            Conn::Tcp(c) => c.set_user_timeout(ms),
        }
    }

    pub fn fd(&self) -> RawFd {
        match self {
            Conn::Tcp(c) => c.fd(),
        }
    }

    /// Whether the connection died because the peer stopped answering
    /// (keepalive or unacknowledged data timed out): its host vanished, as
    /// opposed to a peer that closed or reset it.
    pub fn timed_out(&self) -> bool {
        match self {
            Conn::Tcp(c) => c.finish_connect().err().is_some_and(|e| vanished(&e)),
        }
    }

    /// See [`tcp::TcpConn::connect_events`].
    pub fn connect_events(&self) -> u32 {
        match self {
            Conn::Tcp(c) => c.connect_events(),
        }
    }

    /// Whether the socket has room for more now (`POLLOUT`: for TCP, at
    /// least half of what it holds is free), asked without waiting.
    pub fn writable_now(&self) -> bool {
        self.connect_events() & libc::EPOLLOUT as u32 != 0
    }

    /// After the descriptor reported writable while connecting: Ok when the
    /// connection is up, the connect error otherwise.
    pub fn finish_connect(&self) -> io::Result<()> {
        match self {
            Conn::Tcp(c) => c.finish_connect(),
        }
    }

    /// Non-blocking gather send; `ErrorKind::WouldBlock` when full.
    ///
    /// # Safety
    /// Every iovec must describe readable memory for the whole call.
    pub unsafe fn send_iov(&self, iov: &[libc::iovec]) -> io::Result<usize> {
        match self {
            // SAFETY: forwarded contract.
            Conn::Tcp(c) => unsafe { c.send_iov(iov) },
        }
    }

    /// Frames both directions from now on, sends after `plain` more bytes
    /// (see `tcp`'s module comment).
    pub fn set_framed(&mut self, plain: usize) {
        match self {
            Conn::Tcp(c) => c.set_framed(plain),
        }
    }

    /// Something may have arrived (the descriptor fired, or a thread
    /// polls): the next [`Conn::recv_iov`] asks the socket even if the
    /// last one found it empty.
    pub fn fresh(&mut self) {
        match self {
            Conn::Tcp(c) => c.fresh(),
        }
    }

    /// As [`Conn::fresh`], from a thread that polls (no descriptor fired).
    pub fn fresh_probe(&mut self) {
        match self {
            Conn::Tcp(c) => c.fresh_probe(),
        }
    }

    /// See [`tcp::TcpConn::ack_early`]: for the incoming connection, after
    /// a send on the outgoing one.
    pub fn ack_early(&mut self) {
        match self {
            Conn::Tcp(c) => c.ack_early(),
        }
    }

    /// Bytes read ahead and not yet taken by [`Conn::recv_iov`].
    pub fn staged(&self) -> usize {
        match self {
            Conn::Tcp(c) => c.staged(),
        }
    }

    /// The `recvmsg` and `sendmsg` calls that moved bytes so far.
    pub fn calls(&self) -> (u64, u64) {
        match self {
            Conn::Tcp(c) => c.calls(),
        }
    }

    /// Holds everything sent until uncorked (see [`TcpConn::cork`]).
    pub fn cork(&self, on: bool) {
        match self {
            Conn::Tcp(c) => c.cork(on),
        }
    }

    /// Non-blocking scatter receive; `Ok(0)` is end of stream,
    /// `ErrorKind::WouldBlock` when nothing is available. Reads ahead:
    /// bytes beyond `iov` are kept for the next call, so the caller must
    /// read on until it would block before waiting for the descriptor.
    ///
    /// # Safety
    /// Every iovec must describe writable memory for the whole call.
    pub unsafe fn recv_iov(&mut self, iov: &[libc::iovec]) -> io::Result<usize> {
        match self {
            // SAFETY: forwarded contract.
            Conn::Tcp(c) => unsafe { c.recv_iov(iov) },
        }
    }
}

/// Maximum iovecs one send/receive call uses (a header plus the largest
/// scatter/gather list).
pub const MAX_IOV: usize = 2 + crate::device::MAX_SGE as usize;
