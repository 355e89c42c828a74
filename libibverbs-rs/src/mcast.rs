//! Multicast group membership of UD QPs.

use core::ffi::c_int;

use verbs_abi::*;

use crate::device::object_ops;
use crate::pd::rc;
use crate::util::int_ret;

/// # Safety
/// `qp` is NULL or a QP; `gid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    int_ret((|| {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(qp) }?;
        let attach = ops.attach_mcast.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own QP.
        rc(unsafe { attach(qp, gid, lid) })
    })())
}

/// # Safety
/// `qp` is NULL or a QP; `gid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    int_ret((|| {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(qp) }?;
        let detach = ops.detach_mcast.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own QP.
        rc(unsafe { detach(qp, gid, lid) })
    })())
}
