//! Opening and closing devices, and the queries on an open context:
//! device and port attributes, GID and P_Key tables, asynchronous events.

use core::ffi::{c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::null_mut;

use verbs_abi::provider::{async_event_object, ProviderOps};
use verbs_abi::*;

use crate::device::{context_ops, lookup, object_context_of, register_context, unregister_context};
use crate::util::{errno_result, int_ret, minus_one_ret, set_errno, warning};
use verbs_rt::export;

/// Size of rdma-core's `struct _compat_ibv_port_attr`: `ibv_port_attr` as it
/// was before `port_cap_flags2`, i.e. up to and including `flags`.
const COMPAT_PORT_ATTR_SIZE: usize = offset_of!(ibv_port_attr, flags) + 1;

/// `enum ibv_gid_type_sysfs` (driver.h): the GID types of rdma-core's
/// sysfs-era calls, which cannot tell IB from RoCE v1.
pub(crate) const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_uint = 0;
pub(crate) const IBV_GID_TYPE_SYSFS_ROCE_V2: c_uint = 1;

/// An `IBV_GID_TYPE_*` at `ibv_gid_type_sysfs` granularity.
pub(crate) fn sysfs_gid_type(gid_type: u32) -> c_uint {
    if gid_type == IBV_GID_TYPE_ROCE_V2 {
        IBV_GID_TYPE_SYSFS_ROCE_V2
    } else {
        IBV_GID_TYPE_SYSFS_IB_ROCE_V1
    }
}

/// Fills extension slots the provider left empty with ours, as rdma-core
/// does, so that programs built against any verbs.h take the full path.
///
/// # Safety
/// `ctx` is a freshly opened extended context.
unsafe fn install_lib_ops(ctx: *mut ibv_context) {
    // SAFETY: `ctx` is extended (checked by the caller), so the
    // verbs_context fields covered by `sz` exist; only NULL slots change.
    unsafe {
        if let Some(v) = verbs_context_of(ctx) {
            if verbs_context_has(v, offset_of!(verbs_context, query_port))
                && (*v).query_port.is_none()
            {
                (*v).query_port = Some(lib_query_port);
            }
        }
        let ops = core::ptr::addr_of_mut!((*ctx).ops);
        if (*ops)._compat_query_port.is_none() {
            (*ops)._compat_query_port = Some(ibv_query_port);
        }
        if (*ops)._compat_query_device.is_none() {
            (*ops)._compat_query_device = Some(ibv_query_device);
        }
    }
}

/// # Safety
/// `device` is NULL or an `ibv_device` from a device list.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    export!(ptr, (device), {
        // SAFETY: forwarded contract.
        unsafe { open_device_with(device, null_mut()) }
    })
}

/// `ibv_open_device` with rdma-core's provider-private data, which only
/// kernel devices' providers take.
///
/// # Safety
/// `device` is NULL or an `ibv_device` from a device list.
// Untraced: both exports trace themselves, so a trace names the one called.
pub(crate) unsafe fn open_device_with(
    device: *mut ibv_device,
    private_data: *mut c_void,
) -> Result<*mut ibv_context, c_int> {
    let dev = lookup(device).ok_or(libc::EINVAL)?;
    let kernel = core::ptr::eq(dev.ops, &crate::kernel::ops::KERNEL_OPS);
    if !private_data.is_null() && !kernel {
        return Err(libc::EOPNOTSUPP);
    }
    let open = dev.ops.open_device.ok_or(libc::EOPNOTSUPP)?;
    let ctx = if kernel {
        // SAFETY: a kernel device from the list.
        unsafe { crate::kernel::ops::open_with(device, private_data) }
    } else {
        // SAFETY: the device and handle are the pair the provider reported.
        unsafe { open(device, dev.handle) }
    };
    if ctx.is_null() {
        let e = verbs_rt::errno::errno();
        log::error!(
            "ibv_open_device {device:p}: the provider failed to open it (errno {e}, {})",
            verbs_rt::trace::errno_name(e)
        );
        return Ok(null_mut());
    }
    // SAFETY: a non-NULL context from the provider is readable.
    let (compat, ctx_dev) = unsafe { ((*ctx).abi_compat, (*ctx).device) };
    if compat != VERBS_ABI_IS_EXTENDED || ctx_dev != device {
        warning!("provider returned a context that breaks the provider contract; closed");
        if let Some(close) = dev.ops.close_device {
            // SAFETY: the provider's own context, returned just now.
            unsafe { close(ctx) };
        }
        return Err(libc::EOPNOTSUPP);
    }
    // SAFETY: checked extended context.
    unsafe { install_lib_ops(ctx) };
    // SAFETY: as above.
    unsafe { crate::trace_ops::install(ctx) };
    register_context(ctx, dev.ops);
    Ok(ctx)
}

/// A context that is not open (NULL, foreign, already closed) is EINVAL.
/// If the provider refuses to close, the context stays open.
///
/// # Safety
/// `context` is NULL or a context from `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    export!(int, (context), {
        let ops = unregister_context(context).ok_or(libc::EINVAL)?;
        let rc = match ops.close_device {
            // SAFETY: an open context of this provider, now out of the open
            // set so no other close can reach it.
            Some(close) => unsafe { close(context) },
            None => libc::EOPNOTSUPP,
        };
        if rc != 0 {
            register_context(context, ops);
        }
        errno_result(rc)
    })
}

/// Full device attributes into our own buffer, whatever the provider
/// writes.
///
/// # Safety
/// `ctx` is NULL or an open context.
pub(crate) unsafe fn query_device_full(ctx: *mut ibv_context) -> Result<ibv_device_attr_ex, c_int> {
    let ops = context_ops(ctx)?;
    let q = ops.query_device_ex.ok_or(libc::EOPNOTSUPP)?;
    let mut attr = ibv_device_attr_ex::zeroed();
    // SAFETY: attr is a full-size, writable ibv_device_attr_ex.
    errno_result(unsafe {
        q(
            ctx,
            core::ptr::null(),
            &mut attr,
            size_of::<ibv_device_attr_ex>(),
        )
    })?;
    Ok(attr)
}

/// # Safety
/// `context` is NULL or an open context; `device_attr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    export!(raw::int, (context, device_attr), {
        if device_attr.is_null() {
            return int_ret(Err(libc::EINVAL));
        }
        // SAFETY: forwarded contract.
        int_ret(unsafe { query_device_full(context) }.map(|a| {
            // SAFETY: non-NULL caller buffer of the legacy size.
            unsafe { device_attr.write(a.orig_attr) }
        }))
    })
}

/// Port attributes into our own full-size buffer.
///
/// # Safety
/// `ctx` is NULL or an open context.
pub(crate) unsafe fn query_port_full(
    ops: &ProviderOps,
    ctx: *mut ibv_context,
    port_num: u8,
) -> Result<ibv_port_attr, c_int> {
    let q = ops.query_port.ok_or(libc::EOPNOTSUPP)?;
    let mut attr = ibv_port_attr::zeroed();
    // SAFETY: attr is a full-size, writable ibv_port_attr.
    errno_result(unsafe { q(ctx, port_num, &mut attr, size_of::<ibv_port_attr>()) })?;
    Ok(attr)
}

/// Writes `len` bytes of port attributes: the caller's struct may be the
/// current one, an older shorter one, or a newer longer one (tail zeroed).
///
/// # Safety
/// `attr` is NULL or `len` writable bytes.
unsafe fn query_port_sized(
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut c_void,
    len: usize,
) -> c_int {
    if attr.is_null() {
        return int_ret(Err(libc::EINVAL));
    }
    int_ret(
        context_ops(ctx)
            // SAFETY: ops is the provider of this open context.
            .and_then(|ops| unsafe { query_port_full(ops, ctx, port_num) })
            .map(|a| {
                let n = len.min(size_of::<ibv_port_attr>());
                // SAFETY: the caller's buffer holds `len` bytes; we write n <= len
                // from our copy and zero the rest.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        (&a as *const ibv_port_attr).cast::<u8>(),
                        attr.cast::<u8>(),
                        n,
                    );
                    core::ptr::write_bytes(attr.cast::<u8>().add(n), 0, len - n);
                }
            }),
    )
}

/// Installed as `verbs_context.query_port` when the provider has none.
unsafe extern "C" fn lib_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    // SAFETY: verbs.h passes its own struct and its size.
    unsafe { query_port_sized(context, port_num, port_attr.cast(), port_attr_len) }
}

/// The exported symbol receives rdma-core's `_compat_ibv_port_attr`: only
/// programs built against headers without `port_cap_flags2` reach it
/// (newer ones go through `verbs_context.query_port`), so exactly that
/// many bytes are written, as rdma-core does.
///
/// # Safety
/// `context` is NULL or an open context; `port_attr` NULL or a
/// `_compat_ibv_port_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut c_void,
) -> c_int {
    export!(raw::int, (context, port_num, port_attr), {
        // SAFETY: forwarded contract.
        unsafe { query_port_sized(context, port_num, port_attr, COMPAT_PORT_ATTR_SIZE) }
    })
}

/// One GID table entry through the provider.
///
/// # Safety
/// `ctx` is NULL or an open context.
pub(crate) unsafe fn gid_entry(
    ctx: *mut ibv_context,
    port_num: u32,
    index: u32,
    flags: u32,
) -> Result<ibv_gid_entry, c_int> {
    let ops = context_ops(ctx)?;
    let q = ops.query_gid_ex.ok_or(libc::EOPNOTSUPP)?;
    let mut e = ibv_gid_entry::zeroed();
    // SAFETY: e is a writable entry.
    errno_result(unsafe { q(ctx, port_num, index, &mut e, flags) })?;
    Ok(e)
}

/// Returns -1 with errno on failure, as rdma-core; an empty entry reads as
/// the zero GID.
///
/// # Safety
/// `context` is NULL or an open context; `gid` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    export!(minus_one, (context, port_num, index, gid), {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        // SAFETY: forwarded contract.
        let value = match unsafe { gid_entry(context, port_num.into(), index, 0) } {
            Ok(e) => e.gid,
            Err(libc::ENODATA) => ibv_gid::zeroed(),
            Err(e) => return Err(e),
        };
        // SAFETY: non-NULL caller buffer.
        unsafe { gid.write(value) };
        Ok(())
    })
}

/// # Safety
/// `context` is NULL or an open context; `entry` NULL or `entry_size`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    export!(
        int,
        (context, port_num, gid_index, entry, flags, entry_size),
        {
            if entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: forwarded contract.
            let e = unsafe { gid_entry(context, port_num, gid_index, flags) }?;
            // SAFETY: the caller's buffer holds entry_size >= sizeof bytes.
            unsafe { write_sized(entry.cast(), &e, entry_size) };
            Ok(())
        }
    )
}

/// Writes `value` into a caller buffer of `size` bytes (at least the
/// value's size), zeroing what a newer caller has beyond it.
///
/// # Safety
/// `dst` is `size` writable bytes, `size >= size_of::<T>()`.
unsafe fn write_sized<T: Copy>(dst: *mut u8, value: &T, size: usize) {
    // SAFETY: per the function contract.
    unsafe {
        core::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst, size_of::<T>());
        core::ptr::write_bytes(dst.add(size_of::<T>()), 0, size - size_of::<T>());
    }
}

/// Every valid GID of every port. Returns the count, or -errno; a table
/// larger than `max_entries` is -EINVAL, as the kernel reports it.
///
/// # Safety
/// `context` is NULL or an open context; `entries` NULL or
/// `max_entries * entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    export!(
        raw::value,
        (context, entries, max_entries, flags, entry_size),
        {
            let r = (|| -> Result<usize, c_int> {
                if entry_size < size_of::<ibv_gid_entry>()
                    || (entries.is_null() && max_entries != 0)
                {
                    return Err(libc::EINVAL);
                }
                let ops = context_ops(context)?;
                // SAFETY: context_ops found the context open; ops is its provider.
                let ports = unsafe { query_device_full(context) }?
                    .orig_attr
                    .phys_port_cnt;
                let mut count = 0usize;
                for port in 1..=ports {
                    // SAFETY: as above.
                    let len = unsafe { query_port_full(ops, context, port) }?.gid_tbl_len;
                    for index in 0..u32::try_from(len).unwrap_or(0) {
                        // SAFETY: as above.
                        let e = match unsafe { gid_entry(context, port.into(), index, flags) } {
                            Ok(e) => e,
                            Err(libc::ENODATA) => continue,
                            Err(e) => return Err(e),
                        };
                        if count == max_entries {
                            return Err(libc::EINVAL);
                        }
                        // SAFETY: count < max_entries, so the slot is inside the
                        // caller's array.
                        unsafe {
                            write_sized(
                                entries.cast::<u8>().add(count * entry_size),
                                &e,
                                entry_size,
                            )
                        };
                        count += 1;
                    }
                }
                Ok(count)
            })();
            match r {
                Ok(n) => isize::try_from(n).unwrap_or(isize::MAX),
                Err(e) => {
                    set_errno(e);
                    -(e as isize)
                }
            }
        }
    )
}

/// rdma-core's private GID-type query (ibv_devinfo uses it): -1 with errno
/// on failure; an empty entry reports the IB/RoCE v1 type.
///
/// # Safety
/// `context` is NULL or an open context; `type_` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    type_: *mut c_uint,
) -> c_int {
    export!(minus_one, (context, port_num, index, type_), {
        if type_.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let t = match unsafe { gid_entry(context, port_num.into(), index, 0) } {
            Ok(e) => sysfs_gid_type(e.gid_type),
            Err(libc::ENODATA) => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
            Err(e) => return Err(e),
        };
        // SAFETY: non-NULL caller buffer.
        unsafe { type_.write(t) };
        Ok(())
    })
}

/// -1 with errno on failure, as rdma-core (whose callers test `< 0`).
///
/// # Safety
/// `context` is NULL or an open context; `pkey` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    export!(minus_one, (context, port_num, index, pkey), {
        if pkey.is_null() {
            return Err(libc::EINVAL);
        }
        let ops = context_ops(context)?;
        let q = ops.query_pkey.ok_or(libc::EOPNOTSUPP)?;
        let mut v: u16 = 0;
        // SAFETY: v is writable.
        errno_result(unsafe { q(context, port_num, index, &mut v) })?;
        // SAFETY: non-NULL caller buffer.
        unsafe { pkey.write(v) };
        Ok(())
    })
}

/// The index of `pkey` in the port's table, or -1 with errno.
///
/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: __be16,
) -> c_int {
    export!(raw::value, (context, port_num), {
        let r = (|| -> Result<c_int, c_int> {
            let ops = context_ops(context)?;
            let q = ops.query_pkey.ok_or(libc::EOPNOTSUPP)?;
            // SAFETY: context_ops found the context open; ops is its provider.
            let len = unsafe { query_port_full(ops, context, port_num) }?.pkey_tbl_len;
            for i in 0..c_int::from(len) {
                let mut v: u16 = 0;
                // SAFETY: v is writable.
                errno_result(unsafe { q(context, port_num, i, &mut v) })?;
                if v == pkey {
                    return Ok(i);
                }
            }
            Err(libc::ENOENT)
        })();
        r.unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    })
}

/// 0, or -1 with errno (the C convention of this call).
///
/// # Safety
/// `context` is NULL or an open context; `event` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    export!(raw::minus_one, untraced, {
        if event.is_null() {
            return minus_one_ret(Err(libc::EINVAL));
        }
        match context_ops(context) {
            Err(e) => minus_one_ret(Err(e)),
            Ok(ops) => match ops.get_async_event {
                Some(get) => {
                    // SAFETY: the provider's own context; the event buffer is valid.
                    let rc = unsafe { get(context, event) };
                    if verbs_rt::trace::on() {
                        // SAFETY: the event buffer is valid (checked non-NULL).
                        unsafe { trace_async_event(context, event, rc) };
                    }
                    rc
                }
                None => minus_one_ret(Err(libc::EOPNOTSUPP)),
            },
        }
    })
}

/// The tracer's line for an async event (or the failed wait).
///
/// # Safety
/// `event` is valid.
#[cold]
unsafe fn trace_async_event(context: *mut ibv_context, event: *mut ibv_async_event, rc: c_int) {
    use verbs_rt::trace::{errno_name, record, Val};
    if rc != 0 {
        let e = verbs_rt::errno::errno();
        record(
            "event",
            "ibv_get_async_event",
            context as usize,
            &[
                ("ret", Val::I(rc as i64)),
                ("errno", Val::I(e as i64)),
                ("err", Val::Str(errno_name(e))),
            ],
        );
        return;
    }
    // SAFETY: filled by the provider.
    let (kind, element) = unsafe { ((*event).event_type, (*event).element.cq as usize) };
    let name = crate::strings::event_type_name(kind as c_int)
        .to_str()
        .unwrap_or("");
    record(
        "event",
        "ibv_get_async_event",
        context as usize,
        &[
            ("event_type", Val::from(kind)),
            ("event", Val::Str(name)),
            ("element", Val::Hex(element as u64)),
            ("ret", Val::I(0)),
        ],
    );
}

/// # Safety
/// `event` is NULL or was filled by `ibv_get_async_event`.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    export!(raw::void, (event), {
        if event.is_null() {
            return;
        }
        // SAFETY: non-NULL event from ibv_get_async_event.
        let (kind, element) =
            unsafe { ((*event).event_type, (*event).element.cq.cast::<c_void>()) };
        let Some(kind) = async_event_object(kind) else {
            return;
        };
        // SAFETY: for these event types the element is a CQ, QP, SRQ or WQ,
        // which the provider validates before anything reads it.
        let Ok(ctx) = (unsafe { object_context_of(element, kind) }) else {
            return;
        };
        if let Ok(ops) = context_ops(ctx) {
            if let Some(ack) = ops.ack_async_event {
                // SAFETY: the event came from this provider.
                unsafe { ack(event) };
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::errno;

    /// A provider whose contexts and PDs are plain heap objects, so that a
    /// use after close would be a real use after free.
    unsafe extern "C" fn open(dev: *mut ibv_device, _: *mut c_void) -> *mut ibv_context {
        let mut v = Box::new(verbs_context::zeroed());
        v.sz = size_of::<verbs_context>();
        v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        v.context.device = dev;
        let v = Box::into_raw(v);
        // SAFETY: v is a live verbs_context.
        unsafe { core::ptr::addr_of_mut!((*v).context) }
    }
    unsafe extern "C" fn close(ctx: *mut ibv_context) -> c_int {
        // SAFETY: ctx is the tail of a verbs_context boxed by `open`.
        if let Some(v) = unsafe { verbs_context_of(ctx) } {
            // SAFETY: as above; reclaimed once.
            drop(unsafe { Box::from_raw(v) });
        }
        0
    }
    unsafe extern "C" fn alloc_pd(_: *mut ibv_context) -> *mut ibv_pd {
        Box::into_raw(Box::new(ibv_pd::zeroed()))
    }
    unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
        // SAFETY: pd was boxed by `alloc_pd`.
        drop(unsafe { Box::from_raw(pd) });
        0
    }
    static OPS: ProviderOps = {
        // SAFETY: all-zero is a valid ProviderOps (no name, no entries).
        let mut ops: ProviderOps = unsafe { core::mem::zeroed() };
        ops.open_device = Some(open);
        ops.close_device = Some(close);
        ops.alloc_pd = Some(alloc_pd);
        ops.dealloc_pd = Some(dealloc_pd);
        ops
    };

    #[test]
    fn closed_contexts_are_refused() {
        let dev = crate::device::add_test_device(&OPS);
        // SAFETY: dev is registered; every later call is on a pointer the
        // library checks before use.
        unsafe {
            let ctx = ibv_open_device(dev);
            assert!(!ctx.is_null());
            let pd = crate::pd::ibv_alloc_pd(ctx);
            assert!(!pd.is_null());
            assert_eq!((*pd).context, ctx);
            assert_eq!(crate::pd::ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
            // The provider freed the context: nothing may reach it again.
            assert_eq!(ibv_close_device(ctx), libc::EINVAL);
            assert!(crate::pd::ibv_alloc_pd(ctx).is_null());
            assert_eq!(errno(), libc::EINVAL);
            let mut attr = ibv_device_attr::zeroed();
            assert_eq!(ibv_query_device(ctx, &mut attr), libc::EINVAL);
            assert_eq!(ibv_close_device(null_mut()), libc::EINVAL);
            // A missing entry is EOPNOTSUPP on an open context.
            let ctx = ibv_open_device(dev);
            assert_eq!(ibv_query_device(ctx, &mut attr), libc::EOPNOTSUPP);
            assert_eq!(ibv_close_device(ctx), 0);
        }
    }
}
