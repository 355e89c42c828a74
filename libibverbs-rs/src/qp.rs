//! Queue pairs (control path; posting is inline in verbs.h).

use core::ffi::{c_int, c_uint};

use verbs_abi::*;

use crate::context::query_device_full;
use crate::device::{object_ops, release};
use crate::util::{errno_result, set_errno};
use verbs_rt::export;

/// Builds the QP through the provider's `create_qp_ex` and reports the
/// capabilities actually granted back in `qp_init_attr->cap`. verbs.h's
/// inline `ibv_create_qp_ex` also lands here with an `ibv_qp_init_attr_ex`
/// cast down, so only the leading `ibv_qp_init_attr` part is touched.
///
/// # Safety
/// `pd` is NULL or a PD; `qp_init_attr` NULL or a valid attribute.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    export!(ptr, (pd, qp_init_attr), {
        if qp_init_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, ctx) = unsafe { object_ops(pd) }?;
        if let Some(legacy) = ops.create_qp {
            // SAFETY: the provider's own PD and the caller's attribute.
            return Ok(unsafe { legacy(pd, qp_init_attr) });
        }
        let create = ops.create_qp_ex.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: non-NULL attribute per the caller.
        let init = unsafe { &mut *qp_init_attr };
        let mut ex = ibv_qp_init_attr_ex::zeroed();
        ex.qp_context = init.qp_context;
        ex.send_cq = init.send_cq;
        ex.recv_cq = init.recv_cq;
        ex.srq = init.srq;
        ex.cap = init.cap;
        ex.qp_type = init.qp_type;
        ex.sq_sig_all = init.sq_sig_all;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = pd;
        // SAFETY: the provider's own context and a complete attribute.
        let qp = unsafe { create(ctx, &mut ex) };
        if !qp.is_null() {
            init.cap = ex.cap;
        }
        Ok(qp)
    })
}

/// # Safety
/// `qp` is NULL or a QP; `attr` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    export!(int, (qp, attr, attr_mask), {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(qp) }?;
        let modify = ops.modify_qp.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own QP.
        errno_result(unsafe { modify(qp, attr, attr_mask) })?;
        if attr_mask as c_uint & IBV_QP_STATE != 0 {
            // SAFETY: both live; programs read qp->state directly.
            unsafe { (*qp).state = (*attr).qp_state };
        }
        Ok(())
    })
}

/// # Safety
/// `qp` is NULL or a QP; `attr` and `init_attr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    export!(int, (qp, attr, attr_mask, init_attr), {
        if attr.is_null() || init_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(qp) }?;
        let query = ops.query_qp.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own QP; outputs checked non-NULL.
        errno_result(unsafe { query(qp, attr, attr_mask, init_attr) })?;
        if attr_mask as c_uint & IBV_QP_STATE != 0 {
            // SAFETY: both live.
            unsafe { (*qp).state = (*attr).qp_state };
        }
        Ok(())
    })
}

/// # Safety
/// `qp` is NULL or a QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(qp, |ops| ops.destroy_qp) }
    })
}

/// Every provider QP is the `qp_base` (first member) of an `ibv_qp_ex`, by
/// the provider contract, so the conversion is a cast.
///
/// # Safety
/// `qp` is NULL or a QP.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    export!(raw::ptr, (qp), {
        if qp.is_null() {
            set_errno(libc::EINVAL);
        }
        qp.cast()
    })
}

/// The device's vendor id, for ECE.
///
/// # Safety
/// `qp` is NULL or a QP.
unsafe fn ece_vendor(qp: *mut ibv_qp) -> Result<u32, c_int> {
    // SAFETY: forwarded contract.
    let (_, ctx) = unsafe { object_ops(qp) }?;
    // SAFETY: object_ops found the QP's context open.
    Ok(unsafe { query_device_full(ctx) }?.orig_attr.vendor_id)
}

/// Whether `qp` belongs to a kernel device, whose provider answers ECE.
///
/// # Safety
/// `qp` is NULL or a QP.
unsafe fn kernel_qp(qp: *mut ibv_qp) -> Result<bool, c_int> {
    // SAFETY: forwarded contract.
    let (ops, _) = unsafe { object_ops(qp) }?;
    Ok(core::ptr::eq(ops, &crate::kernel::ops::KERNEL_OPS))
}

/// Enhanced Connection Establishment negotiates vendor options between
/// hardware implementations. A software provider has none: the QP's ECE is
/// the device's vendor id with no options, and that is all `ibv_set_ece`
/// accepts (another vendor's id or any option bit: EINVAL).
///
/// # Safety
/// `qp` is NULL or a QP; `ece` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    export!(int, (qp, ece), {
        if ece.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        if unsafe { kernel_qp(qp) }? {
            // SAFETY: a live kernel QP; `ece` is writable.
            return errno_result(unsafe { crate::kernel::ops::query_ece(qp, ece) });
        }
        // SAFETY: forwarded contract.
        let vendor_id = unsafe { ece_vendor(qp) }?;
        // SAFETY: non-NULL out-pointer supplied by the caller.
        unsafe {
            ece.write(ibv_ece {
                vendor_id,
                options: 0,
                comp_mask: 0,
            })
        };
        Ok(())
    })
}

/// See `ibv_query_ece`.
///
/// # Safety
/// `qp` is NULL or a QP; `ece` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    export!(int, (qp, ece), {
        if ece.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        if unsafe { kernel_qp(qp) }? {
            // SAFETY: a live kernel QP; `ece` is readable.
            return errno_result(unsafe { crate::kernel::ops::set_ece(qp, ece) });
        }
        // SAFETY: forwarded contract.
        let vendor_id = unsafe { ece_vendor(qp) }?;
        // SAFETY: non-NULL, the caller's.
        let e = unsafe { *ece };
        if e.vendor_id != vendor_id || e.options != 0 || e.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        Ok(())
    })
}

/// 0 means "no guarantee that incoming data lands in address order", which
/// is the truth for a provider that copies with memcpy (whose store order
/// is unspecified); rdma-core answers the same when a provider does not
/// say otherwise.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_uint,
    _flags: u32,
) -> c_int {
    export!(raw::value, (), { 0 })
}
