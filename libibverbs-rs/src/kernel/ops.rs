//! Kernel devices behind our provider table: each entry reaches the
//! rdma-core provider's operation through the context's private part and
//! adds what rdma-core's exported verb adds around it (object fields,
//! channel reference counts, `verbs_init_cq`).

use core::ffi::{c_int, c_uint, c_void};
use core::ptr::null_mut;

use verbs_abi::driver::*;
use verbs_abi::provider::{ProviderDevice, ProviderOps, PROVIDER_ABI_VERSION};
use verbs_abi::*;

use super::context::{open_cdev, ops_of};
use super::{events, gid};
use crate::util::set_errno;
use verbs_rt::export;

/// The provider operation `$name` of the context `$ctx`, or the errno
/// rdma-core's placeholder operations return.
macro_rules! op {
    ($ctx:expr, $name:ident) => {
        // SAFETY: the callers pass a live kernel context.
        match unsafe { ops_of($ctx) }.map(|o| o.$name) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(libc::EOPNOTSUPP),
            Err(e) => Err(e),
        }
    };
}

/// Calls the int operation `$name` of `$ctx`, or gives the errno.
macro_rules! call_int {
    ($ctx:expr, $name:ident, $($arg:expr),*) => {
        match op!($ctx, $name) {
            // SAFETY: the provider's own operation on its own objects.
            Ok(f) => unsafe { f($($arg),*) },
            Err(e) => e,
        }
    };
}

fn null_with<T>(e: c_int) -> *mut T {
    set_errno(e);
    null_mut()
}

unsafe extern "C" fn discover(_out: *mut ProviderDevice, _max: usize) -> isize {
    0
}

/// Opens a kernel device: its command file, then the provider's context.
///
/// # Safety
/// `device` is a kernel device from discovery.
pub(crate) unsafe fn open_with(
    device: *mut ibv_device,
    private_data: *mut c_void,
) -> *mut ibv_context {
    let vdev = device.cast::<verbs_device>();
    // SAFETY: a kernel device is the provider's verbs_device with our
    // sysfs record.
    let (ops, sysfs) = unsafe { ((*vdev).ops, (*vdev).sysfs) };
    if ops.is_null() || sysfs.is_null() {
        return null_with(libc::ENODEV);
    }
    // SAFETY: both are live for the process.
    let (ops, sysfs) = unsafe { (&*ops, &*sysfs) };
    let name: Vec<u8> = sysfs
        .sysfs_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let fd = match open_cdev(&String::from_utf8_lossy(&name), sysfs.sysfs_cdev) {
        Ok(fd) => fd,
        Err(e) => return null_with(e),
    };
    let Some(alloc) = ops.alloc_context else {
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        return null_with(libc::EOPNOTSUPP);
    };
    // SAFETY: the provider takes the descriptor (and closes it on failure).
    let vctx = unsafe { alloc(device, fd, private_data) };
    if vctx.is_null() {
        return null_mut();
    }
    // SAFETY: the provider's new context.
    unsafe {
        (*vctx).create_cq_ex = Some(lib_create_cq_ex);
        (*vctx).ABI_placeholder1 = core::mem::transmute::<
            Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
            Option<unsafe extern "C" fn()>,
        >((*vctx).ibv_create_flow);
        (*vctx).ABI_placeholder2 = core::mem::transmute::<
            Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
            Option<unsafe extern "C" fn()>,
        >((*vctx).ibv_destroy_flow);
        core::ptr::addr_of_mut!((*vctx).context)
    }
}

unsafe extern "C" fn open_device(
    device: *mut ibv_device,
    _handle: *mut c_void,
) -> *mut ibv_context {
    // SAFETY: forwarded contract.
    unsafe { open_with(device, null_mut()) }
}

unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    match op!(ctx, free_context) {
        Ok(f) => {
            // SAFETY: the provider's own context, now closed for us.
            unsafe { f(ctx) };
            0
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    size: usize,
) -> c_int {
    // SAFETY: a live kernel context.
    let f = match unsafe { verbs_context_of(ctx) }.and_then(|v| unsafe { (*v).query_device_ex }) {
        Some(f) => f,
        None => return libc::EOPNOTSUPP,
    };
    // SAFETY: the provider's own context and the caller's buffer.
    unsafe { f(ctx, input, attr, size) }
}

unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    _size: usize,
) -> c_int {
    // The caller's buffer is a full ibv_port_attr (see context.rs).
    call_int!(ctx, query_port, ctx, port, attr)
}

unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    match op!(ctx, alloc_pd) {
        // SAFETY: the provider's own context.
        Ok(f) => unsafe { f(ctx) },
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    call_int!(ctx, dealloc_pd, pd)
}

unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    match op!(ctx, reg_mr) {
        Ok(f) => {
            // Pinned for DMA: kept out of forked children once
            // ibv_fork_init asked (rdma-core's ibv_reg_mr).
            let odp = access & IBV_ACCESS_ON_DEMAND != 0;
            if !odp && crate::fork::ibv_dontfork_range(addr, length) != 0 {
                return null_mut();
            }
            // SAFETY: the provider's own PD; the range is the caller's.
            let mr = unsafe { f(pd, addr, length, iova, access as c_int) };
            if mr.is_null() && !odp {
                let e = verbs_rt::errno::errno();
                crate::fork::ibv_dofork_range(addr, length);
                set_errno(e);
            }
            if !mr.is_null() {
                // SAFETY: the provider's new MR.
                unsafe {
                    (*mr).context = ctx;
                    (*mr).pd = pd;
                    (*mr).addr = addr;
                    (*mr).length = length;
                }
            }
            mr
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    // SAFETY: a live MR of a kernel context.
    let ctx = unsafe { (*mr).context };
    // Every kernel MR is the start of a verbs_mr.
    call_int!(ctx, rereg_mr, mr.cast(), flags, pd, addr, length, access)
}

unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: a live MR of a kernel context, the start of a verbs_mr.
    let (ctx, addr, length, kind, access) = unsafe {
        let v = mr.cast::<verbs_mr>();
        (
            (*mr).context,
            (*mr).addr,
            (*mr).length,
            (*v).mr_type,
            (*v).access,
        )
    };
    // Every kernel MR is the start of a verbs_mr.
    let rc = call_int!(ctx, dereg_mr, mr.cast());
    if rc == 0 && kind == IBV_MR_TYPE_MR && access as c_uint & IBV_ACCESS_ON_DEMAND == 0 {
        crate::fork::ibv_dofork_range(addr, length);
    }
    rc
}

unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, t: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    // SAFETY: as above.
    match unsafe { (*ctx).ops.alloc_mw } {
        // SAFETY: the provider's own PD.
        Some(f) => unsafe { f(pd, t) },
        None => null_with(libc::EOPNOTSUPP),
    }
}

unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: a live MW of a kernel context.
    match unsafe { (*(*mw).context).ops.dealloc_mw } {
        // SAFETY: the provider's own MW.
        Some(f) => unsafe { f(mw) },
        None => libc::EOPNOTSUPP,
    }
}

/// Initialises the generic part of a CQ, as rdma-core's helper does.
///
/// # Safety
/// `cq` is NULL or a CQ being created; `context` its context; `channel`
/// NULL or a channel of that context.
#[no_mangle]
pub unsafe extern "C" fn verbs_init_cq(
    cq: *mut ibv_cq,
    context: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    export!(raw::void, untraced, {
        if cq.is_null() {
            return;
        }
        // SAFETY: a CQ under construction owned by the caller; the channel's
        // reference count is protected by its context's mutex.
        unsafe {
            (*cq).context = context;
            (*cq).channel = channel;
            if !channel.is_null() && !context.is_null() {
                libc::pthread_mutex_lock(core::ptr::addr_of_mut!((*context).mutex));
                (*channel).refcnt += 1;
                libc::pthread_mutex_unlock(core::ptr::addr_of_mut!((*context).mutex));
            }
            (*cq).cq_context = cq_context;
            (*cq).comp_events_completed = 0;
            (*cq).async_events_completed = 0;
            libc::pthread_mutex_init(core::ptr::addr_of_mut!((*cq).mutex), core::ptr::null());
            libc::pthread_cond_init(core::ptr::addr_of_mut!((*cq).cond), core::ptr::null());
        }
    })
}

/// `vctx->create_cq_ex` of every kernel context, as rdma-core's
/// `__lib_ibv_create_cq_ex`.
unsafe extern "C" fn lib_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        return null_with(libc::EINVAL);
    }
    // SAFETY: the caller's attribute.
    let a = unsafe { &*attr };
    if a.wc_flags & !u64::from(IBV_CREATE_CQ_SUP_WC_FLAGS) != 0 {
        return null_with(libc::EOPNOTSUPP);
    }
    match op!(ctx, create_cq_ex) {
        Ok(f) => {
            // SAFETY: the provider's own context.
            let cq = unsafe { f(ctx, attr) };
            if !cq.is_null() {
                // SAFETY: every CQ_ex starts with its ibv_cq.
                unsafe { verbs_init_cq(cq.cast(), ctx, a.channel, a.cq_context) };
            }
            cq
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: forwarded.
    unsafe { lib_create_cq_ex(ctx, attr) }
}

unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    cq_context: *mut c_void,
) -> *mut ibv_cq {
    match op!(ctx, create_cq) {
        Ok(f) => {
            // SAFETY: the provider's own context.
            let cq = unsafe { f(ctx, cqe, channel, comp_vector) };
            if !cq.is_null() {
                // SAFETY: the provider's new CQ.
                unsafe { verbs_init_cq(cq, ctx, channel, cq_context) };
            }
            cq
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: a live CQ of a kernel context.
    let ctx = unsafe { (*cq).context };
    call_int!(ctx, resize_cq, cq, cqe)
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: a live CQ of a kernel context.
    let (ctx, ch) = unsafe { ((*cq).context, (*cq).channel) };
    let rc = call_int!(ctx, destroy_cq, cq);
    if rc == 0 && !ch.is_null() {
        // SAFETY: the channel outlives the CQs using it (EBUSY); its
        // context's mutex guards the count.
        unsafe {
            let m = core::ptr::addr_of_mut!((*(*ch).context).mutex);
            libc::pthread_mutex_lock(m);
            (*ch).refcnt -= 1;
            libc::pthread_mutex_unlock(m);
        }
    }
    rc
}

unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    match op!(ctx, create_srq) {
        Ok(f) => {
            // SAFETY: the provider's own PD and the caller's attribute.
            let srq = unsafe { f(pd, attr) };
            if !srq.is_null() {
                // SAFETY: the provider's new SRQ, as rdma-core's
                // ibv_create_srq completes it.
                unsafe {
                    (*srq).context = ctx;
                    (*srq).srq_context = (*attr).srq_context;
                    (*srq).pd = pd;
                    (*srq).events_completed = 0;
                    libc::pthread_mutex_init(
                        core::ptr::addr_of_mut!((*srq).mutex),
                        core::ptr::null(),
                    );
                    libc::pthread_cond_init(
                        core::ptr::addr_of_mut!((*srq).cond),
                        core::ptr::null(),
                    );
                }
            }
            srq
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: a live kernel context.
    match unsafe { verbs_context_of(ctx).and_then(|v| (*v).create_srq_ex) } {
        // SAFETY: the provider's own context.
        Some(f) => unsafe { f(ctx, attr) },
        None => null_with(libc::EOPNOTSUPP),
    }
}

unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    // SAFETY: a live SRQ of a kernel context.
    let ctx = unsafe { (*srq).context };
    call_int!(ctx, modify_srq, srq, attr, mask)
}

unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: a live SRQ of a kernel context.
    let ctx = unsafe { (*srq).context };
    call_int!(ctx, query_srq, srq, attr)
}

unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: a live SRQ of a kernel context.
    let ctx = unsafe { (*srq).context };
    call_int!(ctx, destroy_srq, srq)
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    match op!(ctx, create_qp) {
        // SAFETY: the provider's own PD and the caller's attribute.
        Ok(f) => unsafe { f(pd, attr) },
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: a live kernel context.
    match unsafe { verbs_context_of(ctx).and_then(|v| (*v).create_qp_ex) } {
        // SAFETY: the provider's own context.
        Some(f) => unsafe { f(ctx, attr) },
        None => null_with(libc::EOPNOTSUPP),
    }
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: a live QP of a kernel context.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, modify_qp, qp, attr, mask)
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: a live QP of a kernel context.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, query_qp, qp, attr, mask, init)
}

/// `ibv_query_ece` and `ibv_set_ece` on a kernel device: the provider's
/// own (mlx5 negotiates real options), or EOPNOTSUPP where it has none,
/// as rdma-core's placeholders answer (rxe, siw).
///
/// # Safety
/// `qp` is a live QP of a kernel context; `ece` as the verb's.
pub(crate) unsafe fn query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    // SAFETY: forwarded contract.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, query_ece, qp, ece)
}

/// See [`query_ece`].
///
/// # Safety
/// As for [`query_ece`].
pub(crate) unsafe fn set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    // SAFETY: forwarded contract.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, set_ece, qp, ece)
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: a live QP of a kernel context.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, destroy_qp, qp)
}

unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: a live PD of a kernel context.
    let ctx = unsafe { (*pd).context };
    match op!(ctx, create_ah) {
        Ok(f) => {
            // SAFETY: the provider's own PD.
            let ah = unsafe { f(pd, attr) };
            if !ah.is_null() {
                // SAFETY: the provider's new AH.
                unsafe {
                    (*ah).context = ctx;
                    (*ah).pd = pd;
                }
            }
            ah
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: a live AH of a kernel context.
    let ctx = unsafe { (*ah).context };
    call_int!(ctx, destroy_ah, ah)
}

unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: a live QP of a kernel context.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, attach_mcast, qp, gid, lid)
}

unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: a live QP of a kernel context.
    let ctx = unsafe { (*qp).context };
    call_int!(ctx, detach_mcast, qp, gid, lid)
}

/// The provider table of every kernel device.
pub(crate) static KERNEL_OPS: ProviderOps = ProviderOps {
    abi_version: PROVIDER_ABI_VERSION,
    size: core::mem::size_of::<ProviderOps>() as u32,
    name: c"kernel".as_ptr(),
    discover: Some(discover),
    open_device: Some(open_device),
    close_device: Some(close_device),
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    query_gid_ex: Some(gid::query_gid_ex),
    query_pkey: Some(gid::query_pkey),
    alloc_pd: Some(alloc_pd),
    dealloc_pd: Some(dealloc_pd),
    reg_mr: Some(reg_mr),
    rereg_mr: Some(rereg_mr),
    dereg_mr: Some(dereg_mr),
    alloc_mw: Some(alloc_mw),
    dealloc_mw: Some(dealloc_mw),
    create_comp_channel: Some(events::create_comp_channel),
    destroy_comp_channel: Some(events::destroy_comp_channel),
    get_cq_event: Some(events::get_cq_event),
    ack_cq_events: Some(events::ack_cq_events),
    create_cq_ex: Some(create_cq_ex),
    resize_cq: Some(resize_cq),
    destroy_cq: Some(destroy_cq),
    create_srq_ex: Some(create_srq_ex),
    modify_srq: Some(modify_srq),
    query_srq: Some(query_srq),
    destroy_srq: Some(destroy_srq),
    create_qp_ex: Some(create_qp_ex),
    modify_qp: Some(modify_qp),
    query_qp: Some(query_qp),
    destroy_qp: Some(destroy_qp),
    create_ah: Some(create_ah),
    destroy_ah: Some(destroy_ah),
    attach_mcast: Some(attach_mcast),
    detach_mcast: Some(detach_mcast),
    get_async_event: Some(events::get_async_event),
    ack_async_event: Some(events::ack_async_event),
    object_context: None,
    create_cq: Some(create_cq),
    create_srq: Some(create_srq),
    create_qp: Some(create_qp),
};
