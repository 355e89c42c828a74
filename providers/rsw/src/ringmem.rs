//! The memory a queue ring's slots live in: the provider's heap, or a
//! buffer a parent domain's allocator handed out
//! (`IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`, `ibv_alloc_parent_domain(3)`).
//!
//! Each array of a ring (a send queue's WQEs, its SGEs, its inline bytes; a
//! private receive ring's wr_ids, SGE counts and SGEs; a CQ's entries) is
//! one allocation: `alloc(pd, pd_context, size, alignment, resource_type)`
//! with the `RSW_RES_TYPE_*` code of the object that owns the ring
//! (include/infiniband/rswdv.h), returned with `free` when the object is
//! destroyed, when a resize replaces it, or when creation fails after it.
//! `IBV_ALLOCATOR_USE_DEFAULT` puts that array on our heap (and `free` is
//! not called for it); NULL fails the creation with ENOMEM.
//!
//! A [`Slots`] derefs to a plain slice, whichever memory backs it: the
//! data path pays nothing for the choice.

use std::ops::{Deref, DerefMut};
use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use verbs_abi::*;

/// `resource_type` codes, as in include/infiniband/rswdv.h: mlx5dv's
/// resource codes in the low 32 bits, RDMA_DRIVER_UNKNOWN (0) above.
pub const RES_TYPE_QP: u64 = 1;
pub const RES_TYPE_SRQ: u64 = 4;
pub const RES_TYPE_CQ: u64 = 5;

/// Alignment asked of the allocator: a cache line, so two rings never
/// share one.
const ALIGN: usize = 64;

type AllocFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

/// A parent domain's allocator callbacks and what they are called with.
pub struct Allocator {
    /// The parent domain (the callbacks' first argument).
    pd: *mut ibv_pd,
    pd_context: *mut c_void,
    alloc: AllocFn,
    free: FreeFn,
}

// SAFETY: the callbacks are the application's, which `ibv_alloc_parent_domain`
// lets any thread call; the pointers are only passed back to them.
unsafe impl Send for Allocator {}
// SAFETY: as above; nothing here is mutated.
unsafe impl Sync for Allocator {}

impl Allocator {
    /// The allocator of a parent domain `pd` made with `a`, if `a` gives
    /// one: both callbacks set (as rdma-core's mlx5, one of them NULL means
    /// the provider's own allocation).
    pub fn of(pd: *mut ibv_pd, a: &ibv_parent_domain_init_attr) -> Option<Arc<Allocator>> {
        if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS == 0 {
            return None;
        }
        let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
            a.pd_context
        } else {
            std::ptr::null_mut()
        };
        Some(Arc::new(Allocator {
            pd,
            pd_context,
            alloc: a.alloc?,
            free: a.free?,
        }))
    }
}

enum Owner {
    Heap,
    Extern(Arc<Allocator>, u64),
}

/// `len` slots of `T`, on our heap or in an allocator's buffer.
pub struct Slots<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    owner: Owner,
}

// SAFETY: Slots owns its memory exclusively, like a Box<[T]>.
unsafe impl<T: Copy + Send> Send for Slots<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Copy + Sync> Sync for Slots<T> {}

impl<T: Copy> Slots<T> {
    /// `len` copies of `init` on our heap.
    pub fn heap(len: usize, init: T) -> Slots<T> {
        let b = vec![init; len].into_boxed_slice();
        let len = b.len();
        // SAFETY: Box::into_raw never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b) as *mut T) };
        Slots {
            ptr,
            len,
            owner: Owner::Heap,
        }
    }

    /// `len` copies of `init`, in memory from `alloc` when there is one
    /// (tagged `res_type`), else on our heap. ENOMEM when the allocator
    /// returns NULL (or the size overflows), EINVAL when it returns memory
    /// not aligned for `T` (handed back to it first).
    pub fn new(
        len: usize,
        init: T,
        alloc: Option<&Arc<Allocator>>,
        res_type: u64,
    ) -> Result<Slots<T>, c_int> {
        let Some(a) = alloc.filter(|_| len > 0 && size_of::<T>() > 0) else {
            return Ok(Slots::heap(len, init));
        };
        let size = len.checked_mul(size_of::<T>()).ok_or(libc::ENOMEM)?;
        let align = ALIGN.max(align_of::<T>());
        // SAFETY: the application's callback, called as
        // ibv_alloc_parent_domain(3) documents.
        let p = unsafe { (a.alloc)(a.pd, a.pd_context, size, align, res_type) };
        if p == IBV_ALLOCATOR_USE_DEFAULT {
            return Ok(Slots::heap(len, init));
        }
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        if !(p as usize).is_multiple_of(align_of::<T>()) {
            log::error!(
                "parent domain allocator returned {p:p}, not aligned to {align} as asked: refused"
            );
            // SAFETY: hands back what its alloc returned.
            unsafe { (a.free)(a.pd, a.pd_context, p, res_type) };
            return Err(libc::EINVAL);
        }
        let ptr = p as *mut T;
        for i in 0..len {
            // SAFETY: the allocator gave `size` bytes at `p`, aligned for T.
            unsafe { ptr.add(i).write(init) };
        }
        Ok(Slots {
            // SAFETY: checked non-null above.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            len,
            owner: Owner::Extern(a.clone(), res_type),
        })
    }

    /// The memory came from a parent domain's allocator.
    pub fn is_extern(&self) -> bool {
        matches!(self.owner, Owner::Extern(..))
    }
}

impl<T: Copy> Deref for Slots<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised slots we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for Slots<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: `len` initialised slots we own, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Slots<T> {
    fn drop(&mut self) {
        match &self.owner {
            Owner::Heap => {
                let s = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: the Box `heap` leaked, reclaimed once.
                drop(unsafe { Box::from_raw(s) });
            }
            Owner::Extern(a, res_type) => {
                // SAFETY: hands back, once, what the allocator's alloc
                // returned.
                unsafe {
                    (a.free)(
                        a.pd,
                        a.pd_context,
                        self.ptr.as_ptr() as *mut c_void,
                        *res_type,
                    )
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static ALLOCS: AtomicUsize = AtomicUsize::new(0);
    static FREES: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn alloc(
        _pd: *mut ibv_pd,
        ctx: *mut c_void,
        size: usize,
        align: usize,
        _t: u64,
    ) -> *mut c_void {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        match ctx as usize {
            0 => std::ptr::null_mut(),
            1 => IBV_ALLOCATOR_USE_DEFAULT,
            _ => {
                let l = std::alloc::Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero layout.
                unsafe { std::alloc::alloc_zeroed(l) as *mut c_void }
            }
        }
    }

    unsafe extern "C" fn free(_pd: *mut ibv_pd, _ctx: *mut c_void, p: *mut c_void, _t: u64) {
        FREES.fetch_add(1, Ordering::SeqCst);
        let l = std::alloc::Layout::from_size_align(4 * 8, ALIGN).unwrap();
        // SAFETY: allocated by `alloc` with this layout (the test's size).
        unsafe { std::alloc::dealloc(p as *mut u8, l) };
    }

    fn allocator(ctx: usize) -> Arc<Allocator> {
        Arc::new(Allocator {
            pd: std::ptr::null_mut(),
            pd_context: ctx as *mut c_void,
            alloc,
            free,
        })
    }

    #[test]
    fn backing_stores() {
        let a = allocator(2);
        let mut s = Slots::new(4, 7u64, Some(&a), RES_TYPE_CQ).unwrap();
        assert!(s.is_extern());
        assert_eq!(&s[..], &[7, 7, 7, 7]);
        s[3] = 9;
        assert_eq!(s[3], 9);
        drop(s);
        assert_eq!(FREES.load(Ordering::SeqCst), 1);

        let d = Slots::new(4, 1u64, Some(&allocator(1)), RES_TYPE_CQ).unwrap();
        assert!(!d.is_extern());
        drop(d);
        assert_eq!(FREES.load(Ordering::SeqCst), 1);
        assert_eq!(
            Slots::new(4, 1u64, Some(&allocator(0)), RES_TYPE_CQ).err(),
            Some(libc::ENOMEM)
        );
        // Nothing to allocate: no call.
        let before = ALLOCS.load(Ordering::SeqCst);
        assert!(Slots::new(0, 1u64, Some(&a), RES_TYPE_CQ)
            .unwrap()
            .is_empty());
        assert_eq!(ALLOCS.load(Ordering::SeqCst), before);
    }
}
