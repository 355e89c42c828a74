//! Multicast group membership of UD QPs.

use core::ffi::c_int;

use verbs_abi::provider::ProviderOps;
use verbs_abi::*;

use crate::device::object_ops;
use crate::util::errno_result;
use verbs_rt::export;

type McastEntry = Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>;

/// Attach and detach differ only in the provider entry they call.
///
/// # Safety
/// `qp` is NULL or a QP; `gid` NULL or readable.
unsafe fn membership(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
    entry: fn(&ProviderOps) -> McastEntry,
) -> c_int {
    export!(int, (), {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded contract.
        let (ops, _) = unsafe { object_ops(qp) }?;
        let f = entry(ops).ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own QP and a readable GID.
        errno_result(unsafe { f(qp, gid, lid) })
    })
}

/// # Safety
/// `qp` is NULL or a QP; `gid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    export!(raw::int, (qp, gid, lid), {
        // SAFETY: forwarded contract.
        unsafe { membership(qp, gid, lid, |ops| ops.attach_mcast) }
    })
}

/// # Safety
/// `qp` is NULL or a QP; `gid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    export!(raw::int, (qp, gid, lid), {
        // SAFETY: forwarded contract.
        unsafe { membership(qp, gid, lid, |ops| ops.detach_mcast) }
    })
}
