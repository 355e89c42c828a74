//! Address handles: where a UD work request goes. The destination is
//! resolved when the AH is created (its GID, or this host for an AH
//! without a GRH), so posting needs no lookup beyond the handle itself.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use verbs_abi::*;

use crate::context::CtxShared;
use crate::handles::{names, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::util::{ptr_or_errno, set_errno};
use verbs_rt::Handles;

/// The AHs handed out and not destroyed.
pub static AHS: Handles<Arc<Ah>> = Handles::new();

/// The next AH's handle (a kernel AH has one too, which rdma-core sends
/// to destroy it).
static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);

#[repr(C)]
pub struct Ah {
    /// Shared with the application (libibverbs fills `context` and `pd`).
    pub ibv: std::cell::UnsafeCell<ibv_ah>,
    pub ctx: Arc<CtxShared>,
    pub pd_id: u32,
    /// The PD it counts as a user of.
    pd: *mut ibv_pd,
    handle: u32,
    ctx_ibv: *mut ibv_context,
    pub attr: ibv_ah_attr,
    /// Destination and source addresses, as GIDs.
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
}

// SAFETY: `ibv` is written at creation only (here and by libibverbs before
// the application sees it); everything else is immutable; `pd` outlives
// the AH (dealloc_pd refuses while it is in use).
unsafe impl Send for Ah {}
// SAFETY: as above.
unsafe impl Sync for Ah {}

impl Ah {
    /// The context it was created in (libibverbs sets `context` in the
    /// public struct; the PD's is the same one).
    pub fn ctx_ptr(&self) -> *mut ibv_context {
        self.ctx_ibv
    }

    pub fn as_ibv(&self) -> *mut ibv_ah {
        self.ibv.get()
    }

    /// The live AH behind an application pointer.
    pub fn lookup(ah: *mut ibv_ah) -> Option<Arc<Ah>> {
        AHS.get(ah)
    }
}

fn create(pd_ptr: *mut ibv_pd, a: &ibv_ah_attr) -> Result<*mut ibv_ah, c_int> {
    let pd = Pd::checked(pd_ptr, None, UNKNOWN_BY_WRITE)?;
    crate::util::limit(
        "ah",
        crate::device::MAX_AH,
        AHS.room_for_one(crate::device::MAX_AH),
    )?;
    let dev = &pd.ctx.dev;
    if a.port_num != 1 {
        return Err(libc::EINVAL);
    }
    // Without a GRH there is no address: LID addressing, which here means
    // this host, as for RC QPs (qperf's UD tests and ibv_ud_pingpong
    // without -g address by LID). A RoCE NIC refuses such an AH; rdma-core's
    // test_create_ah_roce checks that and fails here (README).
    let first = dev.gids.first().copied().unwrap_or([0; 16]);
    let (dgid, sgid) = if a.is_global != 0 {
        let sgid = *dev
            .gids
            .get(a.grh.sgid_index as usize)
            .ok_or(libc::EINVAL)?;
        (crate::gid::canon_gid(&a.grh.dgid.raw()), sgid)
    } else {
        (first, first)
    };
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let ah = Arc::new(Ah {
        ibv: std::cell::UnsafeCell::new(ibv_ah {
            context: std::ptr::null_mut(),
            pd: pd_ptr,
            handle,
        }),
        ctx: pd.ctx.clone(),
        pd_id: pd.id,
        pd: pd_ptr,
        handle,
        // The PD names its context (checked above).
        ctx_ibv: pd.ibv.context,
        attr: *a,
        dgid,
        sgid,
    });
    let p = ah.as_ibv();
    // An AH uses its PD, as in the kernel: the PD stays while it lives.
    pd.users.fetch_add(1, Ordering::AcqRel);
    AHS.insert(p, ah.clone());
    // The table holds the reference; the pointer is its address.
    std::mem::forget(ah);
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: attr is the caller's (non-NULL).
    ptr_or_errno(create(pd, unsafe { &*attr }))
}

pub(crate) unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    let taken = AHS.remove_if(ah, |a| {
        // SAFETY: a live AH of ours (in the table, locked).
        let named = unsafe {
            names(
                &raw const (*ah).context,
                &raw const (*ah).handle,
                a.ctx_ibv,
                a.handle,
            )
        };
        if named {
            Ok(())
        } else {
            Err(UNKNOWN_BY_IOCTL)
        }
    });
    let a = match taken {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: the PD outlives its AHs (dealloc_pd refuses while in use).
    unsafe { Pd::from_ibv(a.pd) }
        .users
        .fetch_sub(1, Ordering::AcqRel);
    drop(a);
    // SAFETY: reclaims the reference create forgot; the entry is gone, so
    // only this call does.
    drop(unsafe { Arc::from_raw(ah as *const Ah) });
    0
}
