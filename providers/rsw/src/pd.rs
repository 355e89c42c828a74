//! Protection domains. A PD is an id that MRs and QPs carry; the responder
//! only honours an rkey whose MR is in the same PD as the target QP.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use verbs_abi::*;

use crate::context::{Context, CtxShared};
use crate::handles::{Ctx, Handles};
use crate::util::set_errno;

/// The PDs handed out and not deallocated.
pub static PDS: Handles<Ctx> = Handles::new();

static NEXT_PD: AtomicU32 = AtomicU32::new(1);

#[repr(C)]
pub struct Pd {
    pub ibv: ibv_pd,
    pub id: u32,
    pub ctx: Arc<CtxShared>,
    /// MRs and QPs created on this PD; dealloc is refused while any exist.
    pub users: AtomicU32,
}

impl Pd {
    /// # Safety
    /// `pd` must come from our `alloc_pd` and not be deallocated.
    pub unsafe fn from_ibv<'a>(pd: *mut ibv_pd) -> &'a Pd {
        // SAFETY: ibv is the first field of a live, boxed Pd.
        unsafe { &*(pd as *const Pd) }
    }
}

pub(crate) unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    if let Err(e) = PDS.room_for_one(crate::device::MAX_PD) {
        set_errno(e);
        return std::ptr::null_mut();
    }
    let id = NEXT_PD.fetch_add(1, Ordering::Relaxed);
    if id == 0 {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    }
    // SAFETY: context came from open_device.
    let ctx = unsafe { Context::shared_of(context) };
    let pd = Box::into_raw(Box::new(Pd {
        ibv: ibv_pd {
            context,
            handle: id,
        },
        id,
        ctx,
        users: AtomicU32::new(0),
    }));
    PDS.insert(pd, Ctx(context));
    pd as *mut ibv_pd
}

pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let taken = PDS.remove_if(pd, |_| {
        // SAFETY: pd is a live PD of ours (it is in the table, locked).
        if unsafe { Pd::from_ibv(pd) }.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: pd was a boxed Pd with no users, out of the table now, so
    // only this call reclaims it.
    drop(unsafe { Box::from_raw(pd as *mut Pd) });
    0
}
