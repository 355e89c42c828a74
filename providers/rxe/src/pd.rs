//! Protection domains: nothing but the kernel's object.

use core::cell::UnsafeCell;
use core::ffi::c_int;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::Cmd;
use crate::ffi;

#[repr(C)]
struct Pd {
    ibv: UnsafeCell<ibv_pd>,
}

/// # Safety
/// `ctx` is a live rxe context.
unsafe fn alloc(ctx: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    let pd = Box::new(Pd {
        ibv: UnsafeCell::new(ibv_pd::zeroed()),
    });
    let mut cmd = Cmd::<ib_uverbs_alloc_pd>::default();
    let mut resp = ib_uverbs_alloc_pd_resp::default();
    // SAFETY: a live context; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_alloc_pd(
            ctx,
            pd.ibv.get(),
            cmd.as_ptr(),
            cmd.size(),
            &mut resp,
            core::mem::size_of_val(&resp),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    Ok(Box::into_raw(pd).cast())
}

pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: libibverbs passes one of our contexts.
    verbs_rt::errno::ptr_or_errno(unsafe { alloc(ctx) })
}

pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: a PD of ours, freed once, after the kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_dealloc_pd(pd);
        if rc == 0 {
            drop(Box::from_raw(pd.cast::<Pd>()));
        }
        rc
    }
}
