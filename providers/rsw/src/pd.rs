//! Protection domains. A PD is an id that MRs and QPs carry; the responder
//! only honours an rkey whose MR is in the same PD as the target QP.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use verbs_abi::*;

use crate::context::{Context, CtxShared};
use crate::handles::{names, Ctx, UNKNOWN_BY_IOCTL};
use crate::ringmem::Allocator;
use crate::util::set_errno;
use verbs_rt::Handles;

/// The PDs handed out and not deallocated.
pub static PDS: Handles<Ctx> = Handles::new();

static NEXT_PD: AtomicU32 = AtomicU32::new(1);

#[repr(C)]
pub struct Pd {
    pub ibv: ibv_pd,
    pub id: u32,
    pub ctx: Arc<CtxShared>,
    /// Objects made on this PD (MRs, windows, QPs, SRQs, AHs, and parent
    /// domains and CQs on a parent domain); dealloc is refused (EBUSY)
    /// while any exist, as the kernel's use count refuses it.
    pub users: AtomicU32,
    /// A parent domain (`ibv_alloc_parent_domain`): the PD it stands for
    /// (same `id`, so keys and QPs of both match) and its thread domain.
    pub parent: Option<Parent>,
}

pub struct Parent {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    /// Its allocator, which the rings of QPs, CQs and SRQs made on it
    /// come from (`ringmem`).
    pub alloc: Option<Arc<Allocator>>,
}

impl Pd {
    /// # Safety
    /// `pd` must come from our `alloc_pd` and not be deallocated.
    pub unsafe fn from_ibv<'a>(pd: *mut ibv_pd) -> &'a Pd {
        // SAFETY: ibv is the first field of a live, boxed Pd.
        unsafe { &*(pd as *const Pd) }
    }

    /// The live PD behind `pd` whose public struct still names it
    /// (`handles::names`) and, when `context` is given, that was made
    /// there: what an object made on `pd` may be in. A pointer that is no
    /// PD of ours is EINVAL; a PD whose struct no longer names it, or of
    /// another context, is `unknown`, what the kernel answers for the verb
    /// (`handles::UNKNOWN_BY_IOCTL`, `UNKNOWN_BY_WRITE`).
    pub(crate) fn checked<'a>(
        pd: *mut ibv_pd,
        context: Option<*mut ibv_context>,
        unknown: c_int,
    ) -> Result<&'a Pd, c_int> {
        let Some(Ctx(ctx)) = PDS.get(pd) else {
            return Err(libc::EINVAL);
        };
        // SAFETY: a live PD of ours (in the table).
        let p = unsafe { Pd::from_ibv(pd) };
        if context.is_some_and(|c| c != ctx) || !p.names_itself(pd, ctx) {
            return Err(unknown);
        }
        Ok(p)
    }

    /// Whether the public struct at `pd` (this PD's) still names it.
    fn names_itself(&self, pd: *mut ibv_pd, ctx: *mut ibv_context) -> bool {
        // SAFETY: `pd` is this live PD's public struct.
        unsafe {
            names(
                &raw const (*pd).context,
                &raw const (*pd).handle,
                ctx,
                self.id,
            )
        }
    }

    /// The allocator rings of objects made on this PD come from: a parent
    /// domain's, if it was given one.
    pub fn allocator(&self) -> Option<&Arc<Allocator>> {
        self.parent.as_ref().and_then(|p| p.alloc.as_ref())
    }
}

pub(crate) unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    if let Err(e) = crate::util::limit(
        "pd",
        crate::device::MAX_PD,
        PDS.room_for_one(crate::device::MAX_PD),
    ) {
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
        parent: None,
    }));
    PDS.insert(pd, Ctx(context));
    pd as *mut ibv_pd
}

pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let taken = PDS.remove_if(pd, |&Ctx(ctx)| {
        // SAFETY: pd is a live PD of ours (it is in the table, locked).
        let p = unsafe { Pd::from_ibv(pd) };
        // The kernel looks the handle up before it asks whether the PD is
        // in use.
        if !p.names_itself(pd, ctx) {
            Err(UNKNOWN_BY_IOCTL)
        } else if p.users.load(Ordering::Acquire) != 0 {
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
    let p = unsafe { Box::from_raw(pd as *mut Pd) };
    if let Some(parent) = &p.parent {
        // SAFETY: a parent domain's PD and TD outlive it (they refuse to go
        // while it exists).
        unsafe {
            Pd::from_ibv(parent.pd).users.fetch_sub(1, Ordering::AcqRel);
            if !parent.td.is_null() {
                crate::td::Td::release(parent.td);
            }
        }
    }
    0
}

/// `ibv_alloc_parent_domain`: a PD that stands for `attr.pd` (objects made
/// on it are in that protection domain) with an optional thread domain.
/// Its allocators, when given, provide the private rings of the QPs, CQs
/// and SRQs made on it (`ringmem`); a receive ring in a same-host mailbox
/// stays there (peers map it), so it is not asked of them.
pub(crate) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes (non-NULL).
    let a = unsafe { *attr };
    let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if a.comp_mask & !known != 0 || !PDS.contains(a.pd) {
        return fail(libc::EINVAL);
    }
    if !a.td.is_null() && !crate::td::TDS.contains(a.td) {
        return fail(libc::EINVAL);
    }
    // SAFETY: a.pd is a live PD of ours (checked above).
    let base = unsafe { Pd::from_ibv(a.pd) };
    // A parent domain of a parent domain stands for the same PD.
    let real = base.parent.as_ref().map_or(a.pd, |p| p.pd);
    // SAFETY: real is live: base holds it.
    unsafe { Pd::from_ibv(real) }
        .users
        .fetch_add(1, Ordering::AcqRel);
    if !a.td.is_null() {
        // SAFETY: a live TD (checked above).
        unsafe { crate::td::Td::hold(a.td) };
    }
    let pd = Box::into_raw(Box::new(Pd {
        ibv: ibv_pd {
            context,
            handle: base.id,
        },
        id: base.id,
        ctx: base.ctx.clone(),
        users: AtomicU32::new(0),
        parent: None,
    }));
    // The callbacks get the parent domain itself, so it is known only now.
    // SAFETY: just boxed, not shared yet.
    unsafe {
        (*pd).parent = Some(Parent {
            pd: real,
            td: a.td,
            alloc: Allocator::of(pd as *mut ibv_pd, &a),
        })
    };
    PDS.insert(pd, Ctx(context));
    pd as *mut ibv_pd
}
