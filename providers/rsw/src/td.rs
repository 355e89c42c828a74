//! Thread domains (`ibv_alloc_td`, `ibv_dealloc_td`): a promise that one
//! thread uses the objects made with it. Our objects are thread safe
//! anyway, so a TD only has to exist, be counted, and refuse to go while a
//! parent domain uses it.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use verbs_abi::*;

use crate::handles::Ctx;
use crate::util::set_errno;
use verbs_rt::Handles;

/// The TDs handed out and not deallocated.
pub static TDS: Handles<Ctx> = Handles::new();

#[repr(C)]
pub struct Td {
    pub ibv: ibv_td,
    users: AtomicU32,
}

impl Td {
    /// # Safety
    /// `td` is a live TD of ours.
    pub unsafe fn hold(td: *mut ibv_td) {
        // SAFETY: per the contract.
        unsafe { &*(td as *const Td) }
            .users
            .fetch_add(1, Ordering::AcqRel);
    }

    /// # Safety
    /// As [`Td::hold`], with a hold to release.
    pub unsafe fn release(td: *mut ibv_td) {
        // SAFETY: per the contract.
        unsafe { &*(td as *const Td) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
    }
}

pub(crate) unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    // SAFETY: the caller's attributes, when given.
    if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let td = Box::into_raw(Box::new(Td {
        ibv: ibv_td { context },
        users: AtomicU32::new(0),
    })) as *mut ibv_td;
    TDS.insert(td, Ctx(context));
    td
}

pub(crate) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    let taken = TDS.remove_if(td, |_| {
        // SAFETY: a live TD (in the table, locked).
        if unsafe { &*(td as *const Td) }.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: out of the table, so only this call reclaims it.
    drop(unsafe { Box::from_raw(td as *mut Td) });
    0
}
