//! Device memory: `ibv_alloc_dm`, `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm`,
//! `ibv_reg_dm_mr`, `ibv_free_dm`. A software device's "on-device" memory
//! is memory the provider owns; what matters to programs is the API's
//! contract: bounds-checked copies, zero-based MRs over it, and a free that
//! is refused while MRs use it.

use std::alloc::Layout;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use verbs_abi::*;

use crate::device::MAX_DM_SIZE;
use crate::handles::{names, Ctx, UNKNOWN_BY_IOCTL};
use crate::mr::MrEntry;
use crate::pd::Pd;
use crate::util::set_errno;
use verbs_rt::Handles;

/// The DM allocations handed out and not freed.
pub static DMS: Handles<Ctx> = Handles::new();
/// Bytes of device memory allocated in this process (the device's size).
static IN_USE: AtomicUsize = AtomicUsize::new(0);
/// The next allocation's handle.
static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);

#[repr(C)]
pub struct Dm {
    pub ibv: ibv_dm,
    buf: *mut u8,
    layout: Layout,
    handle: u32,
}

impl Dm {
    /// # Safety
    /// `dm` is NULL or any pointer; only table members are dereferenced.
    unsafe fn lookup<'a>(dm: *mut ibv_dm) -> Option<&'a Dm> {
        DMS.get(dm)?;
        // SAFETY: a live Dm (in the table); ibv is its first field.
        Some(unsafe { &*(dm as *const Dm) })
    }

    /// Whether its public struct still names it (`handles::names`); `ctx`
    /// is the context it was made in.
    fn names_itself(&self, ctx: *mut ibv_context) -> bool {
        // SAFETY: the public struct is ours, live while self is.
        unsafe {
            names(
                &raw const self.ibv.context,
                &raw const self.ibv.handle,
                ctx,
                self.handle,
            )
        }
    }

    /// Copies to and from device memory work in 4-byte units, as on
    /// hardware: offset and length must be multiples of 4.
    fn copy_range(&self, off: u64, len: usize) -> Option<*mut u8> {
        if !off.is_multiple_of(4) || !len.is_multiple_of(4) {
            return None;
        }
        self.range(off, len)
    }

    fn range(&self, off: u64, len: usize) -> Option<*mut u8> {
        let end = off.checked_add(len as u64)?;
        if end > self.layout.size() as u64 {
            return None;
        }
        // SAFETY: off + len is inside the allocation (checked above).
        Some(unsafe { self.buf.add(off as usize) })
    }
}

unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    off: u64,
    src: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: the table decides whether dm is ours.
    let Some(d) = (unsafe { Dm::lookup(dm) }) else {
        return libc::EINVAL;
    };
    let Some(p) = d.copy_range(off, len) else {
        return libc::EINVAL;
    };
    if len > 0 {
        // SAFETY: p has len bytes inside our allocation; src is the
        // caller's buffer of len bytes.
        unsafe { std::ptr::copy(src as *const u8, p, len) };
    }
    0
}

unsafe extern "C" fn memcpy_from_dm(
    dst: *mut c_void,
    dm: *mut ibv_dm,
    off: u64,
    len: usize,
) -> c_int {
    // SAFETY: the table decides whether dm is ours.
    let Some(d) = (unsafe { Dm::lookup(dm) }) else {
        return libc::EINVAL;
    };
    let Some(p) = d.copy_range(off, len) else {
        return libc::EINVAL;
    };
    if len > 0 {
        // SAFETY: as in memcpy_to_dm, the other way round.
        unsafe { std::ptr::copy(p, dst as *mut u8, len) };
    }
    0
}

pub(crate) unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's attributes (non-NULL).
    let a = unsafe { *attr };
    if a.comp_mask != 0 || a.length == 0 || a.log_align_req > 12 {
        return fail(libc::EINVAL);
    }
    let len = a.length;
    if IN_USE.fetch_add(len, Ordering::AcqRel) + len > MAX_DM_SIZE as usize {
        IN_USE.fetch_sub(len, Ordering::AcqRel);
        log::warn!("alloc_dm {len:#x} bytes: beyond max_dm_size {MAX_DM_SIZE:#x} in use (ENOMEM)");
        return fail(libc::ENOMEM);
    }
    let Ok(layout) = Layout::from_size_align(len, 4096) else {
        IN_USE.fetch_sub(len, Ordering::AcqRel);
        return fail(libc::EINVAL);
    };
    // SAFETY: the layout has a non-zero size.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    if buf.is_null() {
        IN_USE.fetch_sub(len, Ordering::AcqRel);
        return fail(libc::ENOMEM);
    }
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let d = Box::into_raw(Box::new(Dm {
        ibv: ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle,
        },
        buf,
        layout,
        handle,
    })) as *mut ibv_dm;
    DMS.insert(d, Ctx(context));
    d
}

pub(crate) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    let taken = DMS.remove_if(dm, |&Ctx(ctx)| {
        // SAFETY: a live Dm (in the table, locked).
        let d = unsafe { &*(dm as *const Dm) };
        if !d.names_itself(ctx) {
            Err(UNKNOWN_BY_IOCTL)
        } else if crate::mr::any_in(d.buf as usize, d.layout.size()) {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: out of the table, so only this call reclaims it.
    let d = unsafe { Box::from_raw(dm as *mut Dm) };
    // SAFETY: allocated with this layout in alloc_dm.
    unsafe { std::alloc::dealloc(d.buf, d.layout) };
    IN_USE.fetch_sub(d.layout.size(), Ordering::AcqRel);
    0
}

pub(crate) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    off: u64,
    len: usize,
    access: u32,
) -> *mut ibv_mr {
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    let Some(Ctx(ctx)) = DMS.get(dm) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the table decides whether dm is ours.
    let Some(d) = (unsafe { Dm::lookup(dm) }) else {
        return fail(libc::EINVAL);
    };
    // An ioctl naming both: a handle it does not know is ENOENT.
    let p = match Pd::checked(pd, Some(ctx), UNKNOWN_BY_IOCTL) {
        Ok(p) if d.names_itself(ctx) => p,
        Ok(_) => return fail(UNKNOWN_BY_IOCTL),
        Err(e) => return fail(e),
    };
    // MRs over device memory are zero-based: addresses are offsets.
    if access & IBV_ACCESS_ZERO_BASED == 0 {
        return fail(libc::EINVAL);
    }
    if let Err(e) = crate::mr::check_access(access) {
        return fail(e);
    }
    let Some(host) = d.range(off, len) else {
        return fail(libc::EINVAL);
    };
    let entry = MrEntry {
        host: host as usize,
        len: len as u64,
        iova: 0,
        access: access & crate::mr::KNOWN_ACCESS,
        pd: p.id,
    };
    crate::mr::insert(p, pd, entry, std::ptr::null_mut(), len)
}
