//! Protection domains: kernel objects only, nothing of siw's own.

use core::ffi::c_int;
use core::ptr::null_mut;

use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{AllocPdReq, AllocPdResp};
use crate::ffi;

/// # Safety
/// `ctx` is one of our contexts.
pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let pd = Box::into_raw(Box::new(ibv_pd::zeroed()));
    let mut req = AllocPdReq::default();
    let mut resp = AllocPdResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: our new PD and buffers.
    let rc = unsafe { ffi::ibv_cmd_alloc_pd(ctx, pd, c, cs, r, rs) };
    if rc != 0 {
        // SAFETY: ours, never handed out.
        drop(unsafe { Box::from_raw(pd) });
        set_errno(rc);
        return null_mut();
    }
    pd
}

/// # Safety
/// `pd` is one of our PDs, no longer used.
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: per the contract.
    let rc = unsafe { ffi::ibv_cmd_dealloc_pd(pd) };
    if rc == 0 {
        // SAFETY: allocated by alloc_pd; the kernel object is gone.
        drop(unsafe { Box::from_raw(pd) });
    }
    rc
}
