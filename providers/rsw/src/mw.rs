//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw`. Binds (`ibv_bind_mw`,
//! posted by `qp::post`) and invalidations run in send-queue order as work
//! requests (`IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`,
//! `IBV_WR_SEND_WITH_INV`); the window's state lives in the key table
//! (`mr.rs`), where the responder checks every rkey.

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::Arc;

use verbs_abi::*;

use crate::handles::{names, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::util::set_errno;
use verbs_rt::Handles;

/// The windows handed out and not deallocated.
pub static MWS: Handles<Arc<Mw>> = Handles::new();

#[repr(C)]
pub struct Mw {
    /// Shared with the application (it reads `rkey`).
    pub ibv: UnsafeCell<ibv_mw>,
    pub pd_id: u32,
    /// The PD it counts as a user of.
    pd: *mut ibv_pd,
    /// Its context and handle, as made (the public struct's may have been
    /// overwritten since).
    ctx: *mut ibv_context,
    /// Its index in the key table (the rkey's upper 24 bits), which is
    /// also its handle.
    index: u32,
}

// SAFETY: `ibv.rkey` changes only when a bind is posted, on the
// application's thread, as in every provider; the rest is immutable.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Mw {
    /// The live window behind an application pointer.
    pub fn lookup(mw: *mut ibv_mw) -> Option<Arc<Mw>> {
        MWS.get(mw)
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: plain data in our allocation.
        unsafe { (*self.ibv.get()).rkey }
    }

    pub fn context(&self) -> *mut ibv_context {
        self.ctx
    }
}

pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw {
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    let p = match Pd::checked(pd, None, UNKNOWN_BY_WRITE) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if mw_type != IBV_MW_TYPE_1 && mw_type != IBV_MW_TYPE_2 {
        return fail(libc::EINVAL);
    }
    if let Err(e) = crate::util::limit(
        "mw",
        crate::device::MAX_MW,
        MWS.room_for_one(crate::device::MAX_MW),
    ) {
        return fail(e);
    }
    let rkey = crate::mr::new_window(p.id, mw_type);
    let mw = Arc::new(Mw {
        ibv: UnsafeCell::new(ibv_mw {
            context: p.ibv.context,
            pd,
            rkey,
            handle: rkey >> 8,
            r#type: mw_type,
        }),
        pd_id: p.id,
        pd,
        ctx: p.ibv.context,
        index: rkey >> 8,
    });
    p.users.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    let ptr = mw.ibv.get();
    MWS.insert(ptr, mw.clone());
    std::mem::forget(mw);
    ptr
}

pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    let taken = MWS.remove_if(mw, |m| {
        // SAFETY: a live window of ours (in the table, locked).
        let named = unsafe {
            names(
                &raw const (*mw).context,
                &raw const (*mw).handle,
                m.ctx,
                m.index,
            )
        };
        if named {
            Ok(())
        } else {
            Err(UNKNOWN_BY_IOCTL)
        }
    });
    let m = match taken {
        Ok(m) => m,
        Err(e) => return e,
    };
    // The index from our record: the public rkey is the application's to
    // overwrite, and must not pick which window goes.
    crate::mr::drop_window(m.index << 8 | (m.rkey() & 0xff));
    // SAFETY: the PD outlives its windows (dealloc_pd refuses while in use).
    unsafe { Pd::from_ibv(m.pd) }
        .users
        .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    drop(m);
    // SAFETY: reclaims the reference alloc forgot; out of the table, so only
    // this call does.
    drop(unsafe { Arc::from_raw(mw as *const Mw) });
    0
}

/// A bind of `mw` was posted: the window's `rkey` shows the key it gets
/// from then on, as `ibv_bind_mw` does in rdma-core's providers, and for
/// `IBV_WR_BIND_MW` too (irdma's habit), so a program may read the new key
/// from `mw->rkey` whatever it passed in the WR's low 8 bits. A bind that
/// then fails (`IBV_WC_MW_BIND_ERR`) leaves the window as it was and this
/// key invalid.
pub fn bind_posted(mw: *mut ibv_mw, rkey: u32) {
    if let Some(m) = Mw::lookup(mw) {
        // SAFETY: our allocation; the application reads the field, from
        // the thread that posts (the verbs threading rules), after this.
        unsafe { std::ptr::write_volatile(&raw mut (*m.ibv.get()).rkey, rkey) };
    }
}
