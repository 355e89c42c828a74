//! The contexts of rdma-core providers: the calls a provider builds its
//! context with (`_verbs_init_and_alloc_context`, `verbs_set_ops`,
//! `verbs_uninit_context`), our private part behind `verbs_context.priv`,
//! and opening a kernel device's command file.

use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::ptr::null_mut;

use verbs_abi::driver::*;
use verbs_abi::*;

use super::write::fail_null;
use verbs_rt::export;

/// What `verbs_context.priv` points to for a kernel context: the
/// provider's operations, as `verbs_set_ops` collected them. Our own
/// layout; providers never read it.
pub(crate) struct Private {
    pub ops: verbs_context_ops,
    pub driver_id: u32,
    /// A tag telling our private part from anything else behind `priv`.
    magic: u64,
}

const MAGIC: u64 = 0x6b65_726e_656c_7276; // "kernelrv"

/// The private part of a kernel context, or None for any other context.
///
/// # Safety
/// `ctx` is NULL or a live context.
pub(crate) unsafe fn private_of<'a>(ctx: *mut ibv_context) -> Option<&'a Private> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a live context; only extended ones have `priv`.
    unsafe {
        let v = verbs_context_of(ctx)?;
        let p = (*v).r#priv as *const Private;
        if p.is_null() || (*p).magic != MAGIC {
            return None;
        }
        Some(&*p)
    }
}

/// The provider's operations of a kernel context.
///
/// # Safety
/// `ctx` is a live kernel context.
pub(crate) unsafe fn ops_of<'a>(ctx: *mut ibv_context) -> Result<&'a verbs_context_ops, c_int> {
    // SAFETY: forwarded contract.
    unsafe { private_of(ctx) }
        .map(|p| &p.ops)
        .ok_or(libc::EINVAL)
}

/// rdma-core's `verbs_init_context`: takes `cmd_fd`, closes it on failure.
///
/// # Safety
/// `vctx` is the zeroed `verbs_context` inside a provider's new context.
unsafe fn init_context(
    vctx: *mut verbs_context,
    device: *mut ibv_device,
    cmd_fd: c_int,
    driver_id: u32,
) -> c_int {
    // SAFETY: per the contract, ours to initialise.
    unsafe {
        let ctx = core::ptr::addr_of_mut!((*vctx).context);
        (*ctx).device = device;
        (*ctx).cmd_fd = cmd_fd;
        (*ctx).async_fd = -1;
        libc::pthread_mutex_init(core::ptr::addr_of_mut!((*ctx).mutex), core::ptr::null());
        (*ctx).abi_compat = VERBS_ABI_IS_EXTENDED;
        (*vctx).sz = size_of::<verbs_context>();
        let p = Box::new(Private {
            ops: verbs_context_ops::zeroed(),
            driver_id,
            magic: MAGIC,
        });
        (*vctx).r#priv = Box::into_raw(p).cast();
    }
    0
}

/// The context builder of rdma-core providers: allocates `alloc_size`
/// zeroed bytes with the `verbs_context` at `context_offset`. It takes
/// ownership of `cmd_fd` and closes it on failure.
///
/// # Safety
/// `device` is the provider's device; `cmd_fd` is -1 or a descriptor the
/// caller hands over; `context_offset` is an offset, not a pointer.
#[no_mangle]
pub unsafe extern "C" fn _verbs_init_and_alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    alloc_size: usize,
    context_offset: *mut verbs_context,
    driver_id: u32,
) -> *mut c_void {
    export!(raw::ptr, untraced, {
        let off = context_offset as usize;
        if device.is_null() || off + size_of::<verbs_context>() > alloc_size {
            if cmd_fd >= 0 {
                // SAFETY: the descriptor was handed to us to own.
                unsafe { libc::close(cmd_fd) };
            }
            return fail_null(libc::EINVAL);
        }
        // SAFETY: plain allocation, freed by the provider with free().
        let drv = unsafe { libc::calloc(1, alloc_size) };
        if drv.is_null() {
            if cmd_fd >= 0 {
                // SAFETY: as above.
                unsafe { libc::close(cmd_fd) };
            }
            return fail_null(libc::ENOMEM);
        }
        // SAFETY: the offset lies inside the allocation (checked).
        let vctx = unsafe { drv.cast::<u8>().add(off) }.cast::<verbs_context>();
        // SAFETY: zeroed memory of the right size.
        unsafe { init_context(vctx, device, cmd_fd, driver_id) };
        drv
    })
}

/// Releases what `_verbs_init_and_alloc_context` set up; the provider
/// frees its own memory afterwards.
///
/// # Safety
/// `vctx` is NULL or a context built by `_verbs_init_and_alloc_context`.
#[no_mangle]
pub unsafe extern "C" fn verbs_uninit_context(vctx: *mut verbs_context) {
    export!(raw::void, untraced, {
        if vctx.is_null() {
            return;
        }
        // SAFETY: per the contract; `priv` is our box.
        unsafe {
            let p = (*vctx).r#priv as *mut Private;
            if !p.is_null() && (*p).magic == MAGIC {
                (*vctx).r#priv = null_mut();
                drop(Box::from_raw(p));
            }
            let ctx = core::ptr::addr_of_mut!((*vctx).context);
            if (*ctx).cmd_fd >= 0 {
                libc::close((*ctx).cmd_fd);
            }
            if (*ctx).async_fd >= 0 {
                libc::close((*ctx).async_fd);
            }
        }
    })
}

/// Collects a provider's operations into our private part and publishes
/// the ones programs call directly (the `ibv_context_ops` data path and
/// the `verbs_context` extension slots), as rdma-core's `verbs_set_ops`.
///
/// # Safety
/// `vctx` is a context built by `_verbs_init_and_alloc_context`; `ops` NULL
/// or a provider's table.
#[no_mangle]
pub unsafe extern "C" fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops) {
    export!(raw::void, untraced, {
        if vctx.is_null() || ops.is_null() {
            return;
        }
        // SAFETY: per the contract.
        let (v, o) = unsafe { (&mut *vctx, &*ops) };
        let p = v.r#priv as *mut Private;
        // SAFETY: our private part, checked by its tag.
        if p.is_null() || unsafe { (*p).magic } != MAGIC {
            return;
        }
        // SAFETY: as above.
        let priv_ops = unsafe { &mut (*p).ops };

        // Same-signature slots: the provider's entry is copied as is.
        macro_rules! keep {
        ($($name:ident),* $(,)?) => {$(
            if o.$name.is_some() { priv_ops.$name = o.$name; }
        )*};
    }
        // Published in the public structs too.
        macro_rules! publish {
            ($dst:expr, $name:ident) => {
                if o.$name.is_some() {
                    priv_ops.$name = o.$name;
                    $dst = o.$name;
                }
            };
        }
        keep!(
            alloc_pd,
            async_event,
            attach_mcast,
            cq_event,
            create_ah,
            create_cq,
            create_cq_ex,
            create_qp,
            create_srq,
            dealloc_pd,
            dereg_mr,
            destroy_ah,
            destroy_cq,
            destroy_qp,
            destroy_srq,
            detach_mcast,
            free_context,
            import_dm,
            import_mr,
            import_pd,
            modify_qp,
            modify_srq,
            query_ece,
            query_port,
            query_qp,
            query_qp_data_in_order,
            query_srq,
            reg_dmabuf_mr,
            reg_mr,
            rereg_mr,
            resize_cq,
            set_ece,
            unimport_dm,
            unimport_mr,
            unimport_pd,
            create_flow,
            destroy_flow,
        );
        let c = &mut v.context.ops;
        publish!(c.alloc_mw, alloc_mw);
        publish!(c.bind_mw, bind_mw);
        publish!(c.dealloc_mw, dealloc_mw);
        publish!(c.poll_cq, poll_cq);
        publish!(c.post_recv, post_recv);
        publish!(c.post_send, post_send);
        publish!(c.post_srq_recv, post_srq_recv);
        publish!(c.req_notify_cq, req_notify_cq);
        publish!(v.advise_mr, advise_mr);
        publish!(v.alloc_dm, alloc_dm);
        publish!(v.alloc_null_mr, alloc_null_mr);
        publish!(v.alloc_parent_domain, alloc_parent_domain);
        publish!(v.alloc_td, alloc_td);
        publish!(v.attach_counters_point_flow, attach_counters_point_flow);
        publish!(v.create_counters, create_counters);
        publish!(v.close_xrcd, close_xrcd);
        publish!(v.create_flow_action_esp, create_flow_action_esp);
        publish!(v.create_qp_ex, create_qp_ex);
        publish!(v.create_rwq_ind_table, create_rwq_ind_table);
        publish!(v.create_srq_ex, create_srq_ex);
        publish!(v.create_wq, create_wq);
        publish!(v.dealloc_td, dealloc_td);
        publish!(v.destroy_counters, destroy_counters);
        publish!(v.destroy_flow_action, destroy_flow_action);
        publish!(v.destroy_rwq_ind_table, destroy_rwq_ind_table);
        publish!(v.destroy_wq, destroy_wq);
        publish!(v.free_dm, free_dm);
        publish!(v.get_srq_num, get_srq_num);
        publish!(v.modify_cq, modify_cq);
        publish!(v.modify_flow_action_esp, modify_flow_action_esp);
        publish!(v.modify_qp_rate_limit, modify_qp_rate_limit);
        publish!(v.modify_wq, modify_wq);
        publish!(v.open_qp, open_qp);
        publish!(v.open_xrcd, open_xrcd);
        publish!(v.post_srq_ops, post_srq_ops);
        publish!(v.query_device_ex, query_device_ex);
        publish!(v.query_rt_values, query_rt_values);
        publish!(v.read_counters, read_counters);
        publish!(v.reg_dm_mr, reg_dm_mr);
        publish!(v.ibv_create_flow, create_flow);
        publish!(v.ibv_destroy_flow, destroy_flow);
    })
}

/// The device file of a kernel device, opened read-write (providers mmap
/// it) and checked to be the character device discovery found.
pub(crate) fn open_cdev(sysfs_name: &str, cdev: libc::dev_t) -> Result<c_int, c_int> {
    let path = std::ffi::CString::new(format!("/dev/infiniband/{sysfs_name}"))
        .map_err(|_| libc::EINVAL)?;
    // SAFETY: a valid path string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(verbs_rt::errno::errno());
    }
    // SAFETY: plain data out-buffer.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a descriptor we own; st is writable.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_rdev != cdev {
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        return Err(libc::ENODEV);
    }
    Ok(fd)
}
