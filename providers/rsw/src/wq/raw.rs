//! A raw packet QP's transport state: its packet socket on the device's
//! interface, the buffer frames are read into, and for an RSS QP the
//! hashing configuration and indirection table. The raw engine
//! (`engine::raw`) moves the frames.

use std::sync::Arc;

use crate::cq::Cq;
use crate::rwq::IndTable;
use crate::transport::packet::PacketSocket;

/// What an RSS QP spreads frames with.
pub struct Rss {
    pub key: Vec<u8>,
    /// `IBV_RX_HASH_*` fields.
    pub fields: u64,
    pub table: Arc<IndTable>,
    /// The distinct CQs of the table's WQs, which drive this QP when
    /// polled.
    pub cqs: Vec<Arc<Cq>>,
}

pub struct Raw {
    pub(crate) sock: PacketSocket,
    pub(crate) events: u32,
    pub(crate) ifindex: u32,
    /// Largest frame the interface carries, plus a VLAN tag.
    pub(crate) buf: Vec<u8>,
    pub(crate) rss: Option<Rss>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        crate::progress::unwatch(self.sock.fd());
    }
}

impl Raw {
    /// The socket of a raw QP on interface `ifindex` (MTU `if_mtu`); EPERM
    /// without `CAP_NET_RAW`.
    pub fn open(ifindex: u32, if_mtu: u32, rss: Option<Rss>) -> Result<Raw, i32> {
        let sock =
            PacketSocket::open(ifindex).map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))?;
        Ok(Raw {
            sock,
            events: libc::EPOLLIN as u32,
            ifindex,
            buf: vec![0u8; if_mtu as usize + 14 + 4],
            rss,
        })
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.sock.fd()
    }
}
