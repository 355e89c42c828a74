//! Address handles: where a UD work request goes. The destination is
//! resolved when the AH is created (its GID, or this host for an AH
//! without a GRH), so posting needs no lookup beyond the handle itself.

use std::os::raw::c_int;
use std::sync::Arc;

use verbs_abi::*;

use crate::context::CtxShared;
use crate::pd::{Pd, PDS};
use crate::util::{ptr_or_errno, set_errno};
use verbs_rt::Handles;

/// The AHs handed out and not destroyed.
pub static AHS: Handles<Arc<Ah>> = Handles::new();

#[repr(C)]
pub struct Ah {
    /// Shared with the application (libibverbs fills `context` and `pd`).
    pub ibv: std::cell::UnsafeCell<ibv_ah>,
    pub ctx: Arc<CtxShared>,
    pub pd_id: u32,
    ctx_ibv: *mut ibv_context,
    pub attr: ibv_ah_attr,
    /// Destination and source addresses, as GIDs.
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
}

// SAFETY: `ibv` is written at creation only (here and by libibverbs before
// the application sees it); everything else is immutable.
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

fn create(pd: *mut ibv_pd, a: &ibv_ah_attr) -> Result<*mut ibv_ah, c_int> {
    if !PDS.contains(pd) {
        return Err(libc::EINVAL);
    }
    crate::util::limit(
        "ah",
        crate::device::MAX_AH,
        AHS.room_for_one(crate::device::MAX_AH),
    )?;
    // SAFETY: pd is a live PD of ours (checked above).
    let pd = unsafe { Pd::from_ibv(pd) };
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
    let ah = Arc::new(Ah {
        ibv: std::cell::UnsafeCell::new(ibv_ah {
            context: std::ptr::null_mut(),
            pd: pd as *const Pd as *mut ibv_pd,
            handle: 0,
        }),
        ctx: pd.ctx.clone(),
        pd_id: pd.id,
        ctx_ibv: pd.ibv.context,
        attr: *a,
        dgid,
        sgid,
    });
    let p = ah.as_ibv();
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
    match AHS.remove(ah) {
        Some(a) => {
            drop(a);
            // SAFETY: reclaims the reference create forgot; the entry is
            // gone, so only this call does.
            drop(unsafe { Arc::from_raw(ah as *const Ah) });
            0
        }
        None => libc::EINVAL,
    }
}
