//! The exported `rdma_*` entry points: argument checks and the C calling
//! convention (0, or -1 with errno) around `id` and `channel`.

use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;
use std::net::SocketAddr;
use std::sync::Arc;

use libc::sockaddr;
use verbs_abi::*;

use crate::addr;
use crate::backend;
use crate::channel::Channel;
use crate::device;
use crate::error::{set_errno, to_c, Res};
use crate::id::{self, CmId};
use crate::wire::{REJ_CONSUMER_DEFINED, REJ_VENDOR_OPTION_NOT_SUPPORTED};
use verbs_rt::export;

/// Reads an optional C address; a non-null one of a foreign family is EINVAL.
///
/// # Safety
/// `sa` must be null or a readable address of its family's size.
unsafe fn opt_addr(sa: *const sockaddr) -> Res<Option<SocketAddr>> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a readable address.
    unsafe { addr::from_c(sa) }.map(Some).ok_or(libc::EINVAL)
}

fn lookup(id: *mut rdma_cm_id) -> Res<Arc<CmId>> {
    CmId::lookup(id)
}

/// For ids in synchronous mode (created with a NULL channel): wait for the
/// event the operation produces, keep it in `id->event` and turn its status
/// into the call's result, as rdma-core does.
fn sync_complete(id: &Arc<CmId>) -> Res<()> {
    let taken = id.with_c(|c, st| {
        if !st.sync {
            return None;
        }
        Some((st.chan.clone(), std::mem::replace(&mut c.event, null_mut())))
    });
    let Some((chan, held)) = taken else {
        return Ok(());
    };
    if !held.is_null() {
        id::ack(held);
    }
    let p = backend::next_event(&chan)?;
    id.with_c(|c, _| c.event = p);
    // SAFETY: `p` is a live event we just delivered.
    let ev = unsafe { &*p };
    match ev.status {
        0 => Ok(()),
        _ if ev.event == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
        s if s < 0 => Err(-s),
        s => Err(s),
    }
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    export!(raw::ptr, (), {
        let r = device::all().and_then(|_| Channel::create());
        match r {
            Ok(ch) => ch.c_ptr(),
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    export!(raw::void, (channel), {
        if let Ok(ch) = Channel::lookup(channel) {
            ch.destroy();
        }
    })
}

fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
) -> Res<Arc<CmId>> {
    device::all()?;
    match ps {
        RDMA_PS_TCP | RDMA_PS_UDP | RDMA_PS_IPOIB | RDMA_PS_IB => {}
        _ => return Err(libc::EINVAL),
    }
    let (chan, sync) = if channel.is_null() {
        (Channel::create()?, true)
    } else {
        (Channel::lookup(channel)?, false)
    };
    Ok(CmId::new(ps, chan, sync, context))
}

/// # Safety
/// `id` must be writable; `channel` null or a live channel.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    export!(raw::minus_one, (channel, id, context, ps), {
        if id.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        to_c(create_id(channel, context, ps).map(|new| {
            // SAFETY: checked non-null; the caller provides the slot.
            unsafe { *id = new.c() }
        }))
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    export!(raw::minus_one, (id), {
        to_c(lookup(id).and_then(|i| {
            if verbs_rt::check::on() {
                i.check_destroy()?;
            }
            backend::destroy(&i);
            Ok(())
        }))
    })
}

/// # Safety
/// `addr` must be null or a readable socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    export!(minus_one, (id, addr), {
        // SAFETY: forwarded caller guarantee.
        let a = unsafe { opt_addr(addr) };
        let a = a?.ok_or(libc::EINVAL)?;
        backend::bind(&lookup(id)?, a)
    })
}

/// # Safety
/// The addresses must be null or readable socket addresses.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    export!(minus_one, (id, src_addr, dst_addr, timeout_ms), {
        // SAFETY: forwarded caller guarantee.
        let (src, dst) = unsafe { (opt_addr(src_addr), opt_addr(dst_addr)) };
        let dst = dst?.ok_or(libc::EINVAL)?;
        let src = src?;
        let i = lookup(id)?;
        backend::resolve_addr(&i, src, dst, timeout_ms)?;
        sync_complete(&i)
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    export!(minus_one, (id, timeout_ms), {
        let i = lookup(id)?;
        backend::resolve_route(&i, timeout_ms)?;
        sync_complete(&i)
    })
}

#[no_mangle]
pub extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    export!(raw::minus_one, (id, backlog), {
        to_c(lookup(id).and_then(|i| backend::listen(&i, backlog)))
    })
}

/// # Safety
/// `conn_param` must be null or valid, with readable private data.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    export!(minus_one, (id, conn_param), {
        // SAFETY: null or valid per the caller.
        let p = unsafe { conn_param.as_ref() };
        let i = lookup(id)?;
        backend::connect(&i, p)?;
        sync_complete(&i)
    })
}

/// # Safety
/// `conn_param` must be null or valid, with readable private data.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    export!(minus_one, (id, conn_param), {
        // SAFETY: null or valid per the caller.
        let p = unsafe { conn_param.as_ref() };
        let i = lookup(id)?;
        backend::accept(&i, p)?;
        if i.is_datagram() {
            // A datagram accept completes at once: no event follows.
            i.release_held_event();
            return Ok(());
        }
        sync_complete(&i)
    })
}

/// # Safety
/// `private_data` must be readable for `private_data_len` bytes (or null).
unsafe fn reject_with(id: *mut rdma_cm_id, data: *const c_void, len: u8, reason: u16) -> c_int {
    let pdata: &[u8] = if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: readable for `len` bytes per the caller.
        unsafe { core::slice::from_raw_parts(data as *const u8, len as usize) }
    };
    to_c(lookup(id).and_then(|i| backend::reject(&i, pdata, reason)))
}

/// # Safety
/// `private_data` must be readable for `private_data_len` bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    export!(raw::minus_one, (id, private_data, private_data_len), {
        // SAFETY: forwarded caller guarantee.
        unsafe { reject_with(id, private_data, private_data_len, REJ_CONSUMER_DEFINED) }
    })
}

/// # Safety
/// As `rdma_reject`.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    export!(raw::minus_one, (id, private_data, private_data_len), {
        // SAFETY: forwarded caller guarantee.
        unsafe {
            reject_with(
                id,
                private_data,
                private_data_len,
                REJ_VENDOR_OPTION_NOT_SUPPORTED,
            )
        }
    })
}

#[no_mangle]
pub extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    export!(minus_one, (id), {
        let i = lookup(id)?;
        if backend::disconnect(&i)? {
            sync_complete(&i)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    export!(raw::minus_one, (id), {
        to_c(lookup(id).and_then(|i| backend::establish(&i)))
    })
}

#[no_mangle]
pub extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int {
    export!(raw::minus_one, (id), {
        to_c(lookup(id).and_then(|i| backend::notify(&i, event)))
    })
}

/// # Safety
/// `event` must be writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    export!(minus_one, (channel, event), {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let ch = Channel::lookup(channel)?;
        let p = backend::next_event(&ch)?;
        // SAFETY: checked non-null; the caller provides the slot.
        unsafe { *event = p };
        if verbs_rt::trace::on() {
            // SAFETY: an event just delivered, live until acked.
            unsafe { trace_cm_event(channel, p) };
        }
        Ok(())
    })
}

/// The tracer's line for a delivered CM event.
///
/// # Safety
/// `p` is a live event.
#[cold]
unsafe fn trace_cm_event(channel: *mut rdma_event_channel, p: *mut rdma_cm_event) {
    use verbs_rt::trace::{record, Val};
    // SAFETY: forwarded contract.
    let e = unsafe { &*p };
    // SAFETY: rdma_event_str returns a static C string.
    let name = unsafe { core::ffi::CStr::from_ptr(rdma_event_str(e.event)) };
    record(
        "cm",
        "rdma_cm_event",
        e.id as usize,
        &[
            ("event", Val::Str(name.to_str().unwrap_or(""))),
            ("event_type", Val::from(e.event)),
            ("status", Val::from(e.status)),
            ("id", Val::from(e.id)),
            ("listen_id", Val::from(e.listen_id)),
            ("channel", Val::from(channel)),
            ("event_ptr", Val::from(p)),
        ],
    );
}

#[no_mangle]
pub extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    export!(raw::minus_one, (event), {
        if event.is_null() || !id::ack(event) {
            return to_c(Err(libc::EINVAL));
        }
        0
    })
}

#[no_mangle]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    export!(raw::value, untraced, {
        crate::channel::event_cstr(event).as_ptr()
    })
}

/// # Safety
/// `optval` must be readable for `optlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    export!(raw::minus_one, (id, level, optname, optval, optlen), {
        if optval.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        // SAFETY: readable for `optlen` bytes per the caller.
        let val = unsafe { core::slice::from_raw_parts(optval as *const u8, optlen) };
        to_c(lookup(id).and_then(|i| backend::set_option(&i, level, optname, val)))
    })
}

#[no_mangle]
pub extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    export!(minus_one, (id, channel), {
        let i = lookup(id)?;
        let ch = if channel.is_null() {
            None
        } else {
            Some(Channel::lookup(channel)?)
        };
        backend::migrate(&i, ch)
    })
}

fn port_of(sa: &libc::sockaddr_storage) -> u16 {
    let p = sa as *const libc::sockaddr_storage;
    // SAFETY: the storage is large enough for either family's struct.
    unsafe {
        match sa.ss_family as c_int {
            libc::AF_INET => (*(p as *const libc::sockaddr_in)).sin_port,
            libc::AF_INET6 => (*(p as *const libc::sockaddr_in6)).sin6_port,
            _ => 0,
        }
    }
}

/// Returns the port in network byte order, as rdma-core does.
#[no_mangle]
pub extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    export!(raw::value, (id), {
        lookup(id)
            // SAFETY: union members are plain data.
            .map(|i| i.with_c(|c, _| port_of(unsafe { &c.route.addr.src.src_storage })))
            .unwrap_or(0)
    })
}

/// Returns the port in network byte order, as rdma-core does.
#[no_mangle]
pub extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    export!(raw::value, (id), {
        lookup(id)
            // SAFETY: union members are plain data.
            .map(|i| i.with_c(|c, _| port_of(unsafe { &c.route.addr.dst.dst_storage })))
            .unwrap_or(0)
    })
}

/// # Safety
/// `num_devices` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    export!(raw::ptr, (num_devices), {
        let set_num = |n: c_int| {
            if !num_devices.is_null() {
                // SAFETY: non-null and writable per the caller.
                unsafe { *num_devices = n };
            }
        };
        let devs = match device::all() {
            Ok(d) => d,
            Err(e) => {
                set_num(0);
                set_errno(e);
                return null_mut();
            }
        };
        // SAFETY: malloc'd so that rdma_free_devices (and any C code) can free it.
        let list =
            unsafe { libc::malloc((devs.len() + 1) * core::mem::size_of::<*mut ibv_context>()) }
                as *mut *mut ibv_context;
        if list.is_null() {
            set_num(0);
            set_errno(libc::ENOMEM);
            return null_mut();
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: `list` has room for devs.len() + 1 pointers.
            unsafe { *list.add(i) = d.ctx };
        }
        // SAFETY: as above.
        unsafe { *list.add(devs.len()) = null_mut() };
        set_num(devs.len() as c_int);
        list
    })
}

/// # Safety
/// `list` must come from `rdma_get_devices` (or be null).
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    export!(raw::void, (list), {
        // SAFETY: allocated with malloc in rdma_get_devices; the contexts stay
        // open for the life of the process.
        unsafe { libc::free(list.cast()) };
    })
}

fn attr_to_ex(a: &ibv_qp_init_attr, pd: *mut ibv_pd) -> ibv_qp_init_attr_ex {
    let mut ex = ibv_qp_init_attr_ex::zeroed();
    ex.qp_context = a.qp_context;
    ex.send_cq = a.send_cq;
    ex.recv_cq = a.recv_cq;
    ex.srq = a.srq;
    ex.cap = a.cap;
    ex.qp_type = a.qp_type;
    ex.sq_sig_all = a.sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ex
}

fn ex_to_attr(ex: &ibv_qp_init_attr_ex, a: &mut ibv_qp_init_attr) {
    a.qp_context = ex.qp_context;
    a.send_cq = ex.send_cq;
    a.recv_cq = ex.recv_cq;
    a.srq = ex.srq;
    a.cap = ex.cap;
    a.qp_type = ex.qp_type;
    a.sq_sig_all = ex.sq_sig_all;
}

fn create_qp(i: &Arc<CmId>, pd: *mut ibv_pd, a: &mut ibv_qp_init_attr) -> Res<()> {
    let mut ex = attr_to_ex(a, pd);
    let r = backend::create_qp(i, &mut ex);
    ex_to_attr(&ex, a);
    r
}

/// # Safety
/// `qp_init_attr` must be valid; `pd` null or a live PD.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    export!(raw::minus_one, (id, pd, qp_init_attr), {
        // SAFETY: null or valid per the caller.
        let Some(a) = (unsafe { qp_init_attr.as_mut() }) else {
            return to_c(Err(libc::EINVAL));
        };
        to_c(lookup(id).and_then(|i| create_qp(&i, pd, a)))
    })
}

/// # Safety
/// `qp_init_attr` must be valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    qp_init_attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    export!(raw::minus_one, (id, qp_init_attr), {
        // SAFETY: null or valid per the caller.
        let Some(a) = (unsafe { qp_init_attr.as_mut() }) else {
            return to_c(Err(libc::EINVAL));
        };
        to_c(lookup(id).and_then(|i| backend::create_qp(&i, a)))
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    export!(raw::void, (id), {
        if let Ok(i) = lookup(id) {
            i.destroy_qp();
        }
    })
}

/// # Safety
/// `qp_attr` and `qp_attr_mask` must be valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    export!(raw::minus_one, (id, qp_attr, qp_attr_mask), {
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        // SAFETY: checked non-null; valid per the caller.
        let state = unsafe { (*qp_attr).qp_state };
        to_c(
            lookup(id)
                .and_then(|i| backend::init_qp_attr(&i, state))
                .map(|(a, m)| {
                    // SAFETY: as above.
                    unsafe {
                        *qp_attr = a;
                        *qp_attr_mask = m as c_int;
                    }
                }),
        )
    })
}

/// # Safety
/// `attr` must be valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    export!(raw::minus_one, (id, attr), {
        // SAFETY: null or valid per the caller.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return to_c(Err(libc::EINVAL));
        };
        to_c(lookup(id).and_then(|i| i.create_srq(a)))
    })
}

/// # Safety
/// `attr` must be valid; `pd` null or live.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    export!(raw::minus_one, (id, pd, attr), {
        // SAFETY: null or valid per the caller.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return to_c(Err(libc::EINVAL));
        };
        let mut ex = ibv_srq_init_attr_ex::zeroed();
        ex.srq_context = a.srq_context;
        ex.attr = a.attr;
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.pd = pd;
        let r = lookup(id).and_then(|i| {
            // An XRC receive id's SRQ is an XRC SRQ, as in rdma-core.
            let xrc = i.with_c(|c, _| c.qp_type == IBV_QPT_XRC_RECV);
            ex.srq_type = if xrc { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
            i.create_srq(&mut ex)
        });
        a.srq_context = ex.srq_context;
        a.attr = ex.attr;
        to_c(r)
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    export!(raw::void, (id), {
        if let Ok(i) = lookup(id) {
            i.destroy_srq();
        }
    })
}

/// # Safety
/// `res` must be a valid address info; `qp_init_attr` null or valid.
unsafe fn create_ep(
    res: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Res<Arc<CmId>> {
    let i = create_id(null_mut(), null_mut(), res.ai_port_space as rdma_port_space)?;
    if res.ai_qp_type != 0 {
        // As rdma-core: the id's QP type is the address's (RDMA_PS_IB
        // carries both connections and datagrams).
        i.with_c(|c, _| c.qp_type = res.ai_qp_type as ibv_qp_type);
    }
    // SAFETY: the address pointers of a valid rdma_addrinfo are null or
    // addresses of their family.
    let (src, dst) = unsafe { (opt_addr(res.ai_src_addr), opt_addr(res.ai_dst_addr)) };
    // SAFETY: null or valid per the caller.
    let attr = unsafe { qp_init_attr.as_mut() };
    let r = (|| {
        if res.ai_flags & RAI_PASSIVE != 0 {
            backend::bind(&i, src?.ok_or(libc::EINVAL)?)?;
            i.with_c(|c, st| {
                if !pd.is_null() {
                    c.pd = pd;
                }
                st.qp_init_attr = attr.map(|a| {
                    let mut a = *a;
                    a.qp_type = res.ai_qp_type as ibv_qp_type;
                    a
                });
            });
            return Ok(());
        }
        backend::resolve_addr(&i, src?, dst?.ok_or(libc::EINVAL)?, 2000)?;
        sync_complete(&i)?;
        backend::resolve_route(&i, 2000)?;
        sync_complete(&i)?;
        if let Some(a) = attr {
            a.qp_type = res.ai_qp_type as ibv_qp_type;
            create_qp(&i, pd, a)?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(i),
        Err(e) => {
            destroy_ep(&i);
            Err(e)
        }
    }
}

/// # Safety
/// `id` must be writable, `res` valid, `qp_init_attr` null or valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    export!(raw::minus_one, (id, res, pd, qp_init_attr), {
        // SAFETY: null or valid per the caller.
        let Some(res) = (unsafe { res.as_ref() }) else {
            return to_c(Err(libc::EINVAL));
        };
        if id.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        // SAFETY: forwarded caller guarantees.
        to_c(unsafe { create_ep(res, pd, qp_init_attr) }.map(|i| {
            // SAFETY: checked non-null.
            unsafe { *id = i.c() }
        }))
    })
}

fn destroy_ep(i: &Arc<CmId>) {
    i.destroy_qp();
    i.destroy_srq();
    backend::destroy(i);
}

#[no_mangle]
pub extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    export!(raw::void, (id), {
        if let Ok(i) = lookup(id) {
            destroy_ep(&i);
        }
    })
}

fn get_request(listen: &Arc<CmId>) -> Res<*mut rdma_cm_id> {
    let taken = listen.with_c(|c, st| {
        if !st.sync {
            return None;
        }
        Some((
            st.chan.clone(),
            std::mem::replace(&mut c.event, null_mut()),
            st.qp_init_attr,
            c.pd,
        ))
    });
    let (chan, held, qp_attr, pd) = taken.ok_or(libc::EINVAL)?;
    if !held.is_null() {
        id::ack(held);
    }
    let p = backend::next_event(&chan)?;
    // SAFETY: `p` is a live event we just delivered.
    let ev = unsafe { &*p };
    let fail = |e: i32| {
        listen.with_c(|c, _| c.event = p);
        Err(e)
    };
    if ev.event == RDMA_CM_EVENT_REJECTED {
        return fail(libc::ECONNREFUSED);
    }
    if ev.status != 0 {
        return fail(ev.status.abs());
    }
    if ev.event != RDMA_CM_EVENT_CONNECT_REQUEST {
        return fail(libc::EINVAL);
    }
    let new = match lookup(ev.id) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    if let Some(mut a) = qp_attr {
        if let Err(e) = create_qp(&new, pd, &mut a) {
            return fail(e);
        }
    }
    new.with_c(|c, _| c.event = p);
    Ok(ev.id)
}

/// # Safety
/// `id` must be writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    export!(raw::minus_one, (listen, id), {
        if id.is_null() {
            return to_c(Err(libc::EINVAL));
        }
        to_c(lookup(listen).and_then(|l| get_request(&l)).map(|n| {
            // SAFETY: checked non-null.
            unsafe { *id = n }
        }))
    })
}

// -- Multicast, ECE and the newer calls ----------------------------------------

/// # Safety
/// `addr` must be null or a readable socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    export!(minus_one, (id, addr, context), {
        // SAFETY: forwarded caller guarantee.
        let a = unsafe { opt_addr(addr) };
        join(id, a?, RDMA_MC_JOIN_FLAG_FULLMEMBER, context)
    })
}

fn join(
    id: *mut rdma_cm_id,
    addr: Option<SocketAddr>,
    flags: rdma_cm_mc_join_flags,
    context: *mut c_void,
) -> Res<()> {
    let addr = addr.ok_or(libc::EINVAL)?;
    let i = lookup(id)?;
    backend::join_multicast(&i, addr, flags, context)?;
    sync_complete(&i)
}

/// # Safety
/// `mc_join_attr` must be null or valid, its address null or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    export!(minus_one, (id, mc_join_attr, context), {
        // SAFETY: null or valid per the caller.
        let attr = unsafe { mc_join_attr.as_ref() };
        let at = attr.ok_or(libc::EINVAL)?;
        // rdma-core's checks, in its order.
        if at.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(libc::EOPNOTSUPP);
        }
        if at.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 {
            return Err(libc::EINVAL);
        }
        if at.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || at.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: with the address flagged valid, it is null or readable
        // per the caller.
        let a = unsafe { opt_addr(at.addr) }?;
        join(id, a, at.join_flags, context)
    })
}

/// # Safety
/// `addr` must be null or a readable socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    export!(minus_one, (id, addr), {
        // SAFETY: forwarded caller guarantee.
        let a = unsafe { opt_addr(addr) };
        let a = a?.ok_or(libc::EINVAL)?;
        backend::leave_multicast(&lookup(id)?, a)
    })
}

/// ECE (enhanced connection establishment) options are never negotiated:
/// the local options pass rdma-core's checks and are then not used, and
/// the peer is reported as offering none.
///
/// # Safety
/// `ece` must be null or valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    export!(minus_one, (id, ece), {
        // SAFETY: null or valid per the caller.
        let e = unsafe { ece.as_ref() };
        let i = lookup(id)?;
        let e = e.ok_or(libc::EINVAL)?;
        let has_qp = i.with_c(|c, _| !c.qp.is_null());
        if has_qp || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        i.ece.lock().local = (e.vendor_id, e.options);
        Ok(())
    })
}

/// # Safety
/// `ece` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    export!(minus_one, (id, ece), {
        let i = lookup(id)?;
        if ece.is_null() || i.with_c(|c, _| !c.qp.is_null()) {
            return Err(libc::EINVAL);
        }
        let (vendor_id, options) = i.ece.lock().remote;
        // SAFETY: checked non-null; writable per the caller.
        unsafe {
            *ece = ibv_ece {
                vendor_id,
                options,
                comp_mask: 0,
            }
        };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_addrinfo(
    _id: *mut rdma_cm_id,
    _node: *const c_char,
    _service: *const c_char,
    _hints: *const rdma_addrinfo,
) -> c_int {
    export!(raw::minus_one, (), { to_c(Err(libc::EOPNOTSUPP)) })
}

#[no_mangle]
pub extern "C" fn rdma_query_addrinfo(
    _id: *mut rdma_cm_id,
    _info: *mut *mut rdma_addrinfo,
) -> c_int {
    export!(raw::minus_one, (), { to_c(Err(libc::EOPNOTSUPP)) })
}

#[no_mangle]
pub extern "C" fn rdma_write_cm_event(
    _id: *mut rdma_cm_id,
    _event: rdma_cm_event_type,
    _status: c_int,
    _arg: u64,
) -> c_int {
    export!(raw::minus_one, (), { to_c(Err(libc::EOPNOTSUPP)) })
}
