//! Memory regions: registered with the kernel, which builds siw's STag
//! (the key) itself; siw keeps nothing else.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use verbs_abi::driver::verbs_mr;
use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{RegMrReq, RegMrResp};
use crate::ffi;

/// # Safety
/// `pd` is one of our PDs; the range is the caller's.
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    let mr = Box::into_raw(Box::new(verbs_mr::zeroed()));
    // stag_key 0: the kernel picks the key's low byte, as with rdma-core.
    let mut req = RegMrReq::default();
    let mut resp = RegMrResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: our new MR and buffers; the range is the caller's.
    let rc = unsafe { ffi::ibv_cmd_reg_mr(pd, addr, length, hca_va, access, mr, c, cs, r, rs) };
    if rc != 0 {
        // SAFETY: ours, never handed out.
        drop(unsafe { Box::from_raw(mr) });
        set_errno(rc);
        return null_mut();
    }
    // The ibv_mr starts the verbs_mr.
    mr.cast()
}

/// # Safety
/// `mr` is one of our MRs.
pub unsafe extern "C" fn dereg_mr(mr: *mut verbs_mr) -> c_int {
    // SAFETY: per the contract.
    let rc = unsafe { ffi::ibv_cmd_dereg_mr(mr) };
    if rc == 0 {
        // SAFETY: allocated by reg_mr; the kernel object is gone.
        drop(unsafe { Box::from_raw(mr) });
    }
    rc
}
