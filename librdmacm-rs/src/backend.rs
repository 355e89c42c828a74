//! Which CM an id speaks, and the one place every verb picks it.
//!
//! Two CMs sit under the `rdma_*` calls: the kernel's RDMA CM (`kernel`)
//! for ids on kernel RDMA devices, whose peers run rdma-core or a NIC's
//! firmware, and our CM (`id`) for rsw devices, over TCP or, on a device
//! in RoCEv2 mode, as MADs on QP1 (`id::ibcm`). An id is created
//! undecided; the first call that names a local address decides:
//! - a bind to, or an address resolution from, an address a kernel device
//!   owns takes the kernel's CM (the kernel's bind is the test, so the
//!   answer is the kernel's own); an id bound to the wildcard address
//!   decides at address resolution, keeping its port;
//! - anything else stays on the TCP CM;
//! - a listener on the wildcard address listens through both.
//!
//! `RDMACM_RS_KERNEL_CM=0` keeps every id on the TCP CM (then kernel
//! devices connect only to peers running this library).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use verbs_abi::*;

use crate::addr;
use crate::channel::{Channel, Post};
use crate::device;
use crate::error::Res;
use crate::id::{self, CmId};
use crate::kernel::{self, KId};
use crate::sock;

/// Whether ids may take the kernel's CM: it is there and on, and one of
/// its devices is listed (with only rsw devices usable, a request the
/// kernel brought could not be served, and a wildcard listen through it
/// would let iWARP's kernel TCP listener take the port from ours).
fn kernel_cm() -> bool {
    kernel::enabled() && device::any_kernel()
}

/// The kernel side of an id that speaks only the kernel's CM.
fn kernel_of(i: &CmId) -> Option<Arc<KId>> {
    kernel::lookup(i).filter(|k| !k.dual())
}

/// Binds through the kernel's CM if a kernel device owns `a`; false when
/// none does (the id is left as it was).
fn try_kernel_bind(i: &Arc<CmId>, a: &SocketAddr) -> Res<bool> {
    if !kernel_cm() || a.ip().is_unspecified() || a.ip().is_loopback() {
        return Ok(false);
    }
    let k = kernel::create(i)?;
    match k.bind(a).and_then(|_| k.query_route(i)) {
        Ok(()) => Ok(true),
        Err(e) => {
            kernel::destroy(i, &k);
            match e {
                libc::ENODEV | libc::EADDRNOTAVAIL => Ok(false),
                e => Err(e),
            }
        }
    }
}

pub fn bind(i: &Arc<CmId>, a: SocketAddr) -> Res<()> {
    if kernel::lookup(i).is_some() {
        return Err(libc::EINVAL);
    }
    if try_kernel_bind(i, &a)? {
        return Ok(());
    }
    i.bind(a)
}

pub fn resolve_addr(
    i: &Arc<CmId>,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout_ms: i32,
) -> Res<()> {
    if let Some(k) = kernel_of(i) {
        return k.resolve_addr(i, src, &addr::any_to_loopback(dst), timeout_ms);
    }
    // An id bound to the wildcard address has not chosen a device yet:
    // the route towards `dst` does, as in rdma-core.
    let wild = i.wildcard_port();
    if kernel_cm() && kernel::lookup(i).is_none() && (i.is_idle() || wild.is_some()) {
        let dst = addr::any_to_loopback(dst);
        let port = src.or(wild).map_or(0, |s| s.port());
        let from = match src.filter(|s| !s.ip().is_unspecified()) {
            Some(s) => Some(s),
            None => sock::route_source(&dst)
                .ok()
                .map(|ip| SocketAddr::new(ip, port)),
        };
        if let Some(from) = from.filter(|f| f.is_ipv4() == dst.is_ipv4()) {
            if from_kernel(i, &from, wild)? {
                let k = kernel::lookup(i).ok_or(libc::EINVAL)?;
                return k.resolve_addr(i, src, &dst, timeout_ms);
            }
        }
    }
    i.resolve_addr(src, dst)
}

/// [`try_kernel_bind`] for an id that may hold a wildcard bind of the TCP
/// CM (`wild`): that bind is given up first, since iWARP's kernel TCP
/// socket will want the port, and taken again when no kernel device owns
/// `from`.
fn from_kernel(i: &Arc<CmId>, from: &SocketAddr, wild: Option<SocketAddr>) -> Res<bool> {
    let Some(w) = wild else {
        return try_kernel_bind(i, from);
    };
    if i.unbind_wildcard().is_none() {
        return Ok(false);
    }
    match try_kernel_bind(i, from) {
        Ok(true) => Ok(true),
        r => {
            i.bind(w)?;
            r
        }
    }
}

pub fn resolve_route(i: &Arc<CmId>, timeout_ms: i32) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.resolve_route(timeout_ms),
        None => i.resolve_route(),
    }
}

pub fn listen(i: &Arc<CmId>, backlog: i32) -> Res<()> {
    if let Some(k) = kernel_of(i) {
        return k.listen(i, backlog);
    }
    if !kernel_cm() || kernel::lookup(i).is_some() {
        return i.listen(backlog);
    }
    if i.is_idle() {
        i.bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
    }
    let Some(any) = i.wildcard_port() else {
        return i.listen(backlog);
    };
    // The wildcard: connect requests come through either CM. An iWARP
    // device (siw) listens through a kernel TCP socket on the same port,
    // which our bound socket must let it share.
    i.set_option(
        RDMA_OPTION_ID,
        RDMA_OPTION_ID_REUSEADDR,
        &1i32.to_ne_bytes(),
    )?;
    let k = kernel::create(i)?;
    k.st.lock().dual = true;
    let r = k.bind(&any).and_then(|_| k.listen(i, backlog));
    if r.is_err() {
        kernel::destroy(i, &k);
        return r;
    }
    match i.listen(backlog) {
        // An iWARP device (siw) listens on the port through the kernel's
        // TCP: then the kernel's devices alone get the wildcard.
        Err(libc::EADDRINUSE) => {
            log::warn!(
                "port {} is the kernel's: rsw devices do not listen on it",
                any.port()
            );
            Ok(())
        }
        Err(e) => {
            kernel::destroy(i, &k);
            Err(e)
        }
        Ok(()) => Ok(()),
    }
}

pub fn connect(i: &Arc<CmId>, p: Option<&rdma_conn_param>) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.connect(i, p),
        None => i.connect(p),
    }
}

pub fn accept(i: &Arc<CmId>, p: Option<&rdma_conn_param>) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.accept(i, p),
        None => i.accept(p),
    }
}

pub fn reject(i: &Arc<CmId>, pdata: &[u8], reason: u16) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.reject(pdata, reason),
        None => i.reject(pdata, reason),
    }
}

/// True when an event follows (a synchronous id waits for it).
pub fn disconnect(i: &Arc<CmId>) -> Res<bool> {
    match kernel_of(i) {
        Some(k) => k.disconnect(i).map(|_| true),
        None => i.disconnect(),
    }
}

pub fn establish(i: &Arc<CmId>) -> Res<()> {
    match kernel_of(i) {
        Some(k) => {
            if !i.with_c(|c, _| c.qp.is_null()) {
                return Err(libc::EINVAL);
            }
            k.connect_reply(core::ptr::null_mut())
        }
        None => i.establish(),
    }
}

pub fn notify(i: &Arc<CmId>, event: ibv_event_type) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.notify(event),
        None => i.notify(event),
    }
}

pub fn set_option(i: &Arc<CmId>, level: i32, name: i32, val: &[u8]) -> Res<()> {
    match kernel::lookup(i) {
        Some(k) if k.dual() => {
            i.set_option(level, name, val)?;
            k.set_option(level, name, val)
        }
        Some(k) => k.set_option(level, name, val),
        None => i.set_option(level, name, val),
    }
}

pub fn migrate(i: &Arc<CmId>, chan: Option<Arc<Channel>>) -> Res<()> {
    i.migrate(chan)?;
    match kernel::lookup(i) {
        Some(k) => k.follow_channel(i),
        None => Ok(()),
    }
}

pub fn destroy(i: &Arc<CmId>) {
    if let Some(k) = kernel::lookup(i) {
        kernel::destroy(i, &k);
    }
    i.destroy();
}

pub fn init_qp_attr(i: &Arc<CmId>, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
    match kernel_of(i) {
        Some(k) => k.init_qp_attr(state),
        None => i.init_qp_attr(state),
    }
}

pub fn create_qp(i: &Arc<CmId>, attr: &mut ibv_qp_init_attr_ex) -> Res<()> {
    match kernel_of(i) {
        Some(k) => i.create_qp_with(attr, Some(&|qp, ud| k.init_qp(qp, ud))),
        None => i.create_qp(attr),
    }
}

pub fn join_multicast(
    i: &Arc<CmId>,
    a: SocketAddr,
    flags: rdma_cm_mc_join_flags,
    context: *mut core::ffi::c_void,
) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.join(a, flags as u16, context as usize),
        None => i.join_multicast(a, flags, context),
    }
}

pub fn leave_multicast(i: &Arc<CmId>, a: SocketAddr) -> Res<()> {
    match kernel_of(i) {
        Some(k) => k.leave(i, a),
        None => i.leave_multicast(a),
    }
}

/// The next event for the program: the kernel's CM's work on it done, and
/// the ones rdma-core would not hand out skipped.
pub fn next_event(chan: &Channel) -> Res<*mut rdma_cm_event> {
    loop {
        let mut ev = chan.get()?;
        if ev.post == Post::Kernel && !kernel::on_retrieve(&mut ev) {
            // Counted as reported when taken: count it as acked too.
            let owner = id::cm_id(&ev.owner);
            drop(ev);
            if let Some(o) = owner {
                o.complete_one();
            }
            continue;
        }
        return Ok(id::deliver(ev));
    }
}
