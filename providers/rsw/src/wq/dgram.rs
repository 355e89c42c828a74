//! A UD QP's sockets: the one that defines its number and one per
//! multicast group it joined, with the process-wide membership counts the
//! device limits apply to. The datagram engine (`engine::datagram`) moves
//! the data.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::device::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH};
use crate::transport::udp::UdpEndpoint;
use verbs_rt::ForkFresh;

/// A UD QP's transport state.
pub struct Dgram {
    pub(crate) ep: UdpEndpoint,
    pub(crate) events: u32,
}

impl Drop for Dgram {
    fn drop(&mut self) {
        crate::progress::unwatch(self.ep.fd());
    }
}

impl Dgram {
    /// Opens the socket that defines a UD QP's number.
    pub fn open() -> std::io::Result<(Dgram, u32)> {
        let (ep, qpn) = UdpEndpoint::open()?;
        Ok((
            Dgram {
                ep,
                events: libc::EPOLLIN as u32,
            },
            qpn,
        ))
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.ep.fd()
    }
}

/// A multicast group the QP is attached to: a socket of its own, bound to
/// the groups' port and joined to the group, so the kernel hands every
/// member (in this process, in others, on other hosts) its own copy.
pub struct Group {
    /// Names the group's socket in progress events (`Kind::Group`).
    pub id: usize,
    pub gid: [u8; 16],
    pub ep: UdpEndpoint,
}

impl Drop for Group {
    fn drop(&mut self) {
        crate::progress::unwatch(self.ep.fd());
        let mut m = MEMBERS.get().lock();
        if let Some(n) = m.get_mut(&self.gid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.gid);
            }
        }
    }
}

/// QPs of this process attached to each group, for the limits the device
/// reports (`max_mcast_grp`, `max_mcast_qp_attach`).
static MEMBERS: ForkFresh<Mutex<HashMap<[u8; 16], u32>>> =
    ForkFresh::new(|| Mutex::new(HashMap::new()));

impl Group {
    /// A membership of `gid` through `ep`; ENOMEM beyond the limits.
    pub fn new(id: usize, gid: [u8; 16], ep: UdpEndpoint) -> Result<Group, i32> {
        let mut m = MEMBERS.get().lock();
        let n = m.get(&gid).copied().unwrap_or(0);
        if n == 0 && m.len() >= MAX_MCAST_GRP as usize || n >= MAX_MCAST_QP_ATTACH {
            log::warn!(
                "attach_mcast: {} groups, {n} attachments to this one: limit reached (ENOMEM)",
                m.len()
            );
            return Err(libc::ENOMEM);
        }
        m.insert(gid, n + 1);
        Ok(Group { id, gid, ep })
    }
}
