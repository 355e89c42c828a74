//! The part of libibverbs' exported C API that librdmacm uses, plus the
//! few `static inline` helpers of `<infiniband/verbs.h>` we need, redone
//! here the way the header does them (through `verbs_context`).

use core::ffi::{c_int, c_void};
use core::mem::offset_of;

use verbs_abi::*;

// Unit tests exercise the pure logic only; they get failing stand-ins so the
// test binary does not need libibverbs at run time.
#[cfg(not(test))]
extern "C" {
    pub fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    pub fn ibv_query_gid(
        context: *mut ibv_context,
        port: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
    pub fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
}

/// The `verbs_context` around `ctx`, if the context is an extended one.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn verbs_ctx(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: the caller guarantees `ctx` is live.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    Some((ctx as *mut u8).wrapping_sub(offset_of!(verbs_context, context)) as *mut verbs_context)
}

/// True if the provider's `verbs_context` is long enough to hold the entry
/// at byte offset `field` (counted from the start of the struct).
///
/// # Safety
/// `vctx` must come from [`verbs_ctx`].
unsafe fn has_field(vctx: *mut verbs_context, field: usize) -> bool {
    let tail = offset_of!(verbs_context, context) - field;
    // SAFETY: `sz` sits just before `context`, which is valid.
    unsafe { (*vctx).sz >= tail }
}

/// `ibv_query_port` as the header's inline wrapper does it.
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn query_port(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, i32> {
    let mut attr = ibv_port_attr::zeroed();
    // SAFETY: `ctx` is live; `attr` is a full-size port attribute buffer.
    let rc = unsafe {
        match verbs_ctx(ctx) {
            Some(v) if has_field(v, offset_of!(verbs_context, query_port)) => match (*v).query_port
            {
                Some(f) => f(ctx, port, &mut attr, core::mem::size_of::<ibv_port_attr>()),
                None => ibv_query_port(ctx, port, &mut attr),
            },
            _ => ibv_query_port(ctx, port, &mut attr),
        }
    };
    if rc != 0 {
        Err(rc)
    } else {
        Ok(attr)
    }
}

/// `ibv_create_qp_ex` as the header's inline function does it.
///
/// # Safety
/// `ctx` must be live and `attr` valid.
pub unsafe fn create_qp_ex(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    // SAFETY: the caller guarantees both pointers.
    unsafe {
        if (*attr).comp_mask == IBV_QP_INIT_ATTR_PD {
            return ibv_create_qp((*attr).pd, attr as *mut ibv_qp_init_attr);
        }
        if let Some(v) = verbs_ctx(ctx) {
            if has_field(v, offset_of!(verbs_context, create_qp_ex)) {
                if let Some(f) = (*v).create_qp_ex {
                    return f(ctx, attr);
                }
            }
        }
    }
    crate::error::set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

/// `ibv_create_srq_ex` as the header's inline function does it.
///
/// # Safety
/// `ctx` must be live and `attr` valid.
pub unsafe fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: the caller guarantees both pointers.
    unsafe {
        let mask = (*attr).comp_mask;
        let basic = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
        if mask & !basic == 0
            && mask & IBV_SRQ_INIT_ATTR_PD != 0
            && (mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || (*attr).srq_type == IBV_SRQT_BASIC)
        {
            return ibv_create_srq((*attr).pd, attr as *mut ibv_srq_init_attr);
        }
        if let Some(v) = verbs_ctx(ctx) {
            if has_field(v, offset_of!(verbs_context, create_srq_ex)) {
                if let Some(f) = (*v).create_srq_ex {
                    return f(ctx, attr);
                }
            }
        }
    }
    crate::error::set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

#[cfg(test)]
pub use stubs::*;

#[cfg(test)]
#[allow(clippy::missing_safety_doc)]
mod stubs {
    use super::*;
    use core::ptr::null_mut;
    pub unsafe fn ibv_get_device_list(n: *mut c_int) -> *mut *mut ibv_device {
        if !n.is_null() {
            // SAFETY: caller's out-parameter.
            unsafe { *n = 0 };
        }
        null_mut()
    }
    pub unsafe fn ibv_open_device(_: *mut ibv_device) -> *mut ibv_context {
        null_mut()
    }
    pub unsafe fn ibv_query_device(_: *mut ibv_context, _: *mut ibv_device_attr) -> c_int {
        libc::ENOSYS
    }
    pub(super) unsafe fn ibv_query_port(
        _: *mut ibv_context,
        _: u8,
        _: *mut ibv_port_attr,
    ) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_query_gid(_: *mut ibv_context, _: u8, _: c_int, _: *mut ibv_gid) -> c_int {
        -1
    }
    pub unsafe fn ibv_alloc_pd(_: *mut ibv_context) -> *mut ibv_pd {
        null_mut()
    }
    pub unsafe fn ibv_create_qp(_: *mut ibv_pd, _: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        null_mut()
    }
    pub unsafe fn ibv_destroy_qp(_: *mut ibv_qp) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_modify_qp(_: *mut ibv_qp, _: *mut ibv_qp_attr, _: c_int) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_create_comp_channel(_: *mut ibv_context) -> *mut ibv_comp_channel {
        null_mut()
    }
    pub unsafe fn ibv_destroy_comp_channel(_: *mut ibv_comp_channel) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_create_cq(
        _: *mut ibv_context,
        _: c_int,
        _: *mut c_void,
        _: *mut ibv_comp_channel,
        _: c_int,
    ) -> *mut ibv_cq {
        null_mut()
    }
    pub unsafe fn ibv_destroy_cq(_: *mut ibv_cq) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_create_srq(_: *mut ibv_pd, _: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        null_mut()
    }
    pub unsafe fn ibv_destroy_srq(_: *mut ibv_srq) -> c_int {
        libc::ENOSYS
    }
}
