//! Shared receive queues.

use core::ffi::c_int;

use verbs_abi::*;

use crate::device::{object_ops, release};
use crate::util::errno_result;
use verbs_rt::export;

/// Builds a basic SRQ through the provider's `create_srq_ex` and reports
/// the granted sizes back in `srq_init_attr->attr`. verbs.h's inline
/// `ibv_create_srq_ex` sends basic SRQs here with the `_ex` struct cast
/// down, so only the leading `ibv_srq_init_attr` part is touched.
///
/// # Safety
/// `pd` is NULL or a PD; `srq_init_attr` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    srq_init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    export!(ptr, (pd, srq_init_attr), {
        if srq_init_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, ctx) = unsafe { object_ops(pd) }?;
        if let Some(legacy) = ops.create_srq {
            // SAFETY: the provider's own PD and the caller's attribute.
            return Ok(unsafe { legacy(pd, srq_init_attr) });
        }
        let create = ops.create_srq_ex.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: non-NULL attribute per the caller.
        let init = unsafe { &mut *srq_init_attr };
        let mut ex = ibv_srq_init_attr_ex::zeroed();
        ex.srq_context = init.srq_context;
        ex.attr = init.attr;
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type = IBV_SRQT_BASIC;
        ex.pd = pd;
        // SAFETY: the provider's own context and a complete attribute.
        let srq = unsafe { create(ctx, &mut ex) };
        if !srq.is_null() {
            init.attr = ex.attr;
        }
        Ok(srq)
    })
}

/// # Safety
/// `srq` is NULL or an SRQ; `srq_attr` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
) -> c_int {
    export!(int, (srq, srq_attr, srq_attr_mask), {
        if srq_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(srq) }?;
        let modify = ops.modify_srq.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own SRQ.
        errno_result(unsafe { modify(srq, srq_attr, srq_attr_mask) })
    })
}

/// # Safety
/// `srq` is NULL or an SRQ; `srq_attr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    export!(int, (srq, srq_attr), {
        if srq_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(srq) }?;
        let query = ops.query_srq.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own SRQ.
        errno_result(unsafe { query(srq, srq_attr) })
    })
}

/// # Safety
/// `srq` is NULL or an SRQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(srq, |ops| ops.destroy_srq) }
    })
}
