//! Whole Ethernet frames on one interface: an `AF_PACKET` raw socket, for
//! raw packet QPs. Opening one needs `CAP_NET_RAW` (the kernel answers
//! EPERM without it, as mlx5 does for a raw QP of a user without it).
//!
//! The socket is bound to the interface with protocol 0 (it sends, and
//! receives nothing) until [`PacketSocket::listen`] asks for every frame
//! (`ETH_P_ALL`): a QP with no flow steered to it reads nothing. Frames
//! this host sends are not looped back to it (`PACKET_IGNORE_OUTGOING`)
//! except by the interface itself (`lo` hands every frame back as an
//! incoming one).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20), not in every libc crate.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    listening: bool,
}

/// One frame read: its full length on the wire (more than was read when
/// `truncated`).
pub struct Frame {
    pub len: usize,
    pub truncated: bool,
}

impl PacketSocket {
    /// A non-blocking raw packet socket bound to `ifindex`; EPERM without
    /// `CAP_NET_RAW`.
    pub fn open(ifindex: u32) -> io::Result<PacketSocket> {
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        // SAFETY: an int option on our socket. Older kernels lack it: then
        // a QP may also see frames this host sent on a real interface.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let s = PacketSocket {
            fd,
            ifindex,
            listening: false,
        };
        s.bind(0)?;
        Ok(s)
    }

    fn bind(&self, protocol: u16) -> io::Result<()> {
        // SAFETY: a zeroed sockaddr_ll is valid; filled in below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = self.ifindex as i32;
        // SAFETY: sll is a valid sockaddr_ll of the size given.
        let r = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives every frame of the interface from now on (`on`), or none.
    pub fn listen(&mut self, on: bool) -> io::Result<()> {
        if on != self.listening {
            self.bind(if on { libc::ETH_P_ALL as u16 } else { 0 })?;
            self.listening = on;
        }
        Ok(())
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends the frame the iovecs hold, as it is.
    ///
    /// # Safety
    /// Each iovec must be readable for its length.
    pub unsafe fn send(&self, iov: &[libc::iovec]) -> io::Result<usize> {
        // SAFETY: a zeroed msghdr is valid; the iovecs are the caller's.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = iov.len() as _;
        loop {
            // SAFETY: per the contract; the socket is bound to the
            // interface, so no address is needed.
            let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &m, libc::MSG_DONTWAIT) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reads the next frame into `buf`; `WouldBlock` when none waits.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Frame> {
        loop {
            // SAFETY: buf is ours, writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n >= 0 {
                let len = n as usize;
                return Ok(Frame {
                    len,
                    truncated: len > buf.len(),
                });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
