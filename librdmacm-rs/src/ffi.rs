//! The part of libibverbs' exported C API that librdmacm uses, plus the
//! few `static inline` helpers of `<infiniband/verbs.h>` we need, redone
//! here the way the header does them (through `verbs_context`).

use core::ffi::{c_int, c_void};
use core::mem::offset_of;

use verbs_abi::uverbs;
use verbs_abi::*;

// Unit tests exercise the pure logic only; they get failing stand-ins so the
// test binary does not need libibverbs at run time.
#[cfg(not(test))]
extern "C" {
    pub fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_get_device_guid(device: *mut ibv_device) -> u64;
    pub fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut uverbs::ib_uverbs_ah_attr);
    pub fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut uverbs::ib_uverbs_qp_attr);
    pub fn ibv_copy_path_rec_from_kern(
        dst: *mut ibv_sa_path_rec,
        src: *mut uverbs::ib_user_path_rec,
    );
    pub fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    pub fn ibv_query_gid(
        context: *mut ibv_context,
        port: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
    pub fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int;
    pub fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int;
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
    pub fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

/// `ibv_query_port` as the header's inline wrapper does it.
///
/// # Safety
/// `ctx` must be a live context.
pub unsafe fn query_port(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, i32> {
    let mut attr = ibv_port_attr::zeroed();
    // SAFETY: `ctx` is live; `attr` is a full-size port attribute buffer.
    let rc = unsafe {
        match verbs_context_of(ctx) {
            Some(v) if verbs_context_has(v, offset_of!(verbs_context, query_port)) => {
                match (*v).query_port {
                    Some(f) => f(ctx, port, &mut attr, core::mem::size_of::<ibv_port_attr>()),
                    None => ibv_query_port(ctx, port, &mut attr),
                }
            }
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
        if let Some(v) = verbs_context_of(ctx) {
            if verbs_context_has(v, offset_of!(verbs_context, create_qp_ex)) {
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
        if let Some(v) = verbs_context_of(ctx) {
            if verbs_context_has(v, offset_of!(verbs_context, create_srq_ex)) {
                if let Some(f) = (*v).create_srq_ex {
                    return f(ctx, attr);
                }
            }
        }
    }
    crate::error::set_errno(libc::EOPNOTSUPP);
    core::ptr::null_mut()
}

/// `ibv_open_xrcd` as the header's inline function does it.
///
/// # Safety
/// `ctx` must be live and `attr` valid.
pub unsafe fn open_xrcd(ctx: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    // SAFETY: the caller guarantees both pointers.
    unsafe {
        if let Some(v) = verbs_context_of(ctx) {
            if verbs_context_has(v, offset_of!(verbs_context, open_xrcd)) {
                if let Some(f) = (*v).open_xrcd {
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
    pub unsafe fn ibv_get_device_guid(_: *mut ibv_device) -> u64 {
        0
    }
    pub unsafe fn ibv_copy_ah_attr_from_kern(
        _: *mut ibv_ah_attr,
        _: *mut uverbs::ib_uverbs_ah_attr,
    ) {
    }
    pub unsafe fn ibv_copy_qp_attr_from_kern(
        _: *mut ibv_qp_attr,
        _: *mut uverbs::ib_uverbs_qp_attr,
    ) {
    }
    pub unsafe fn ibv_copy_path_rec_from_kern(
        _: *mut ibv_sa_path_rec,
        _: *mut uverbs::ib_user_path_rec,
    ) {
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
    pub unsafe fn ibv_dealloc_pd(_: *mut ibv_pd) -> c_int {
        libc::ENOSYS
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
    pub unsafe fn ibv_query_ece(_: *mut ibv_qp, _: *mut ibv_ece) -> c_int {
        libc::EOPNOTSUPP
    }
    pub unsafe fn ibv_set_ece(_: *mut ibv_qp, _: *mut ibv_ece) -> c_int {
        libc::EOPNOTSUPP
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
    pub unsafe fn ibv_attach_mcast(_: *mut ibv_qp, _: *const ibv_gid, _: u16) -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn ibv_detach_mcast(_: *mut ibv_qp, _: *const ibv_gid, _: u16) -> c_int {
        libc::ENOSYS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn provider_query_port(
        _: *mut ibv_context,
        _: u8,
        _: *mut ibv_port_attr,
        _: usize,
    ) -> c_int {
        0
    }

    /// A provider whose `verbs_context` ends one field before `query_port`
    /// must not have that slot read: the call goes to the exported
    /// `ibv_query_port` (a stub answering ENOSYS here). With the full size
    /// the provider's entry answers.
    #[test]
    fn a_context_one_field_short_is_not_trusted() {
        let mut v = Box::new(verbs_context::zeroed());
        v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
        v.query_port = Some(provider_query_port);
        let full = core::mem::size_of::<verbs_context>();
        let short = full - offset_of!(verbs_context, query_port) - core::mem::size_of::<usize>();
        let ctx = core::ptr::addr_of_mut!(v.context);
        v.sz = short;
        // SAFETY: ctx is the tail of a live verbs_context.
        assert_eq!(unsafe { query_port(ctx, 1) }.err(), Some(libc::ENOSYS));
        v.sz = full;
        // SAFETY: as above.
        assert!(unsafe { query_port(ctx, 1) }.is_ok());
    }
}
