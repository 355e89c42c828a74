//! Protection domains.

use core::ffi::c_int;

use verbs_abi::*;

use crate::device::{context_ops, release};
use crate::util::ptr_ret;
use verbs_rt::export;

/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    export!(ptr, (context), {
        let ops = context_ops(context)?;
        let alloc = ops.alloc_pd.ok_or(libc::EOPNOTSUPP)?;
        // SAFETY: the provider's own context.
        let pd = unsafe { alloc(context) };
        if !pd.is_null() {
            // SAFETY: a PD the provider just returned.
            unsafe { (*pd).context = context };
        }
        Ok(pd)
    })
}

/// # Safety
/// `pd` is NULL or a PD from `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    export!(raw::int, untraced, {
        // SAFETY: forwarded contract.
        unsafe { release(pd, |ops| ops.dealloc_pd) }
    })
}

/// Sharing a PD between processes needs a kernel object handle; software
/// providers have none to share.
///
/// # Safety
/// `context` is NULL or an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
    export!(raw::ptr, (context), {
        ptr_ret(context_ops(context).and(Err(libc::EOPNOTSUPP)))
    })
}

/// Nothing can have been imported (see `ibv_import_pd`), so there is
/// nothing to release.
///
/// # Safety
/// Not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {
    export!(raw::void, (), {})
}
