//! Multicast membership of UD QPs: `ibv_attach_mcast` / `ibv_detach_mcast`.
//! Each attached group gets a socket of its own (see `wq::dgram::Group`);
//! delivery to every member, in this process, others, and other hosts, is
//! the kernel's IP multicast.

use std::os::raw::c_int;

use verbs_abi::*;

use super::checked;
use crate::engine::Qp;
use crate::handles::UNKNOWN_BY_WRITE;
use crate::progress::{engine, token, Kind};
use crate::transport::udp::UdpEndpoint;
use crate::wq::Group;

/// Group ids fit the progress token's slot field.
const GROUP_ID_MASK: usize = (1 << 14) - 1;

fn attach(qp: &Qp, gid: [u8; 16]) -> Result<(), c_int> {
    let mut g = qp.inner.lock();
    if g.destroyed || g.dgram.is_none() || !crate::gid::is_multicast(&gid) {
        return Err(libc::EINVAL);
    }
    // Not spoken in RoCEv2 mode yet: said, rather than a group that
    // hears nothing.
    if g.roce.is_some() {
        return Err(libc::EOPNOTSUPP);
    }
    let gid = crate::gid::canon_gid(&gid);
    // Attaching again is harmless: still one copy per datagram.
    if g.mcast.iter().any(|m| m.gid == gid) {
        return Ok(());
    }
    let ep = UdpEndpoint::join(&gid, qp.ctx.dev.ifindex, qp.ctx.dev.is_loopback())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    g.mcast_seq = g.mcast_seq.wrapping_add(1);
    let id = g.mcast_seq & GROUP_ID_MASK;
    let group = Group::new(id, gid, ep)?;
    let eng = engine().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    eng.add(
        group.ep.fd(),
        token(qp.serial, Kind::Group(id)),
        libc::EPOLLIN as u32,
    )
    .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    g.mcast.push(group);
    crate::engine::datagram::filter_sockets(qp, &mut g);
    Ok(())
}

fn detach(qp: &Qp, gid: [u8; 16]) -> Result<(), c_int> {
    let mut g = qp.inner.lock();
    if g.destroyed || g.dgram.is_none() {
        return Err(libc::EINVAL);
    }
    let gid = crate::gid::canon_gid(&gid);
    let i = g
        .mcast
        .iter()
        .position(|m| m.gid == gid)
        .ok_or(libc::EINVAL)?;
    g.mcast.remove(i);
    Ok(())
}

/// # Safety
/// `gid` is readable (libibverbs checks it is not NULL).
unsafe fn run(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    f: fn(&Qp, [u8; 16]) -> Result<(), c_int>,
) -> c_int {
    let q = match checked(qp, UNKNOWN_BY_WRITE) {
        Ok(q) => q,
        Err(e) => return e,
    };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: per the contract.
    let gid = unsafe { (*gid).raw() };
    match f(&q, gid) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

pub(crate) unsafe extern "C" fn attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: forwarded contract.
    let r = unsafe { run(qp, gid, attach) };
    if r != 0 {
        log::error!("attach_mcast qp {qp:p}: refused (errno {r})");
    }
    r
}

pub(crate) unsafe extern "C" fn detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { run(qp, gid, detach) }
}
