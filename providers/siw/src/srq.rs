//! Shared receive queues: a receive ring the kernel made, mapped here;
//! posting is `post`'s.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr::{addr_of_mut, null_mut};

use verbs_abi::uverbs::*;
use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{CreateSrqReq, CreateSrqResp, ModifySrqReq, QuerySrqReq};
use crate::ffi;
use crate::lock::SpinLock;
use crate::ring::{Producer, Ring};

/// rdma-core's `siw_srq`: the `ibv_srq` first, so the pointer libibverbs
/// and the program hold is ours.
#[repr(C)]
pub struct Srq {
    /// In a cell: libibverbs and the program write it (event counts, the
    /// context of the object) while we hold a reference to the rest.
    base: UnsafeCell<ibv_srq>,
    rq: SpinLock<Producer<siw_rqe>>,
}

impl Srq {
    /// Our SRQ behind an `ibv_srq` of ours.
    ///
    /// # Safety
    /// `srq` is one of our live SRQs.
    pub unsafe fn from_base<'a>(srq: *mut ibv_srq) -> &'a Srq {
        // SAFETY: the ibv_srq starts our repr(C) Srq.
        unsafe { &*srq.cast::<Srq>() }
    }

    pub fn rq(&self) -> &SpinLock<Producer<siw_rqe>> {
        &self.rq
    }
}

/// # Safety
/// `pd` is one of our PDs; `attr` the caller's.
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // Allocated first: the kernel learns the SRQ's address at creation.
    let mut srq = Box::<Srq>::new_uninit();
    let p = srq.as_mut_ptr();
    // SAFETY: a field of our allocation.
    let base = unsafe {
        let cell = addr_of_mut!((*p).base);
        cell.write(UnsafeCell::new(ibv_srq::zeroed()));
        UnsafeCell::raw_get(cell)
    };
    let mut req = CreateSrqReq::default();
    let mut resp = CreateSrqResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: our new SRQ and buffers; the attributes are the caller's.
    let rc = unsafe { ffi::ibv_cmd_create_srq(pd, base, attr, c, cs, r, rs) };
    if rc != 0 {
        log::error!("siw: creating an SRQ failed: errno {rc}");
        set_errno(rc);
        return null_mut();
    }
    let u = resp.drv;
    let ring = if u.srq_key == u64::from(SIW_INVAL_UOBJ_KEY) {
        Err(libc::ENOMEM)
    } else {
        // SAFETY: a live PD and its context.
        let fd = unsafe { (*(*pd).context).cmd_fd };
        Ring::map(fd, u.srq_key, u.num_rqe, 0)
    };
    let ring = match ring {
        Ok(r) => r,
        Err(e) => {
            log::error!("siw: SRQ mapping failed: errno {e}");
            // SAFETY: the kernel SRQ we just made; its memory is plain.
            unsafe { ffi::ibv_cmd_destroy_srq(base) };
            set_errno(e);
            return null_mut();
        }
    };
    // SAFETY: the remaining field, then the whole is initialised.
    let srq = unsafe {
        addr_of_mut!((*p).rq).write(SpinLock::new(Producer::new(ring)));
        srq.assume_init()
    };
    Box::into_raw(srq).cast()
}

/// # Safety
/// `srq` is one of our SRQs; `attr` the caller's.
pub unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let s = unsafe { Srq::from_base(srq) };
    // No post meanwhile, as rdma-core's siw.
    let _rq = s.rq.lock();
    let mut req = ModifySrqReq::default();
    let (c, cs) = req.buf();
    // SAFETY: per the contract; our buffer.
    unsafe { ffi::ibv_cmd_modify_srq(srq, attr, mask, c, cs) }
}

/// # Safety
/// `srq` is one of our SRQs; `attr` the caller's.
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let mut req = QuerySrqReq::default();
    let (c, cs) = req.buf();
    // SAFETY: per the contract; our buffer.
    unsafe { ffi::ibv_cmd_query_srq(srq, attr, c, cs) }
}

/// # Safety
/// `srq` is one of our SRQs, no longer used.
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: per the contract.
    let rc = unsafe { ffi::ibv_cmd_destroy_srq(srq) };
    if rc == 0 {
        // SAFETY: allocated by create_srq; the kernel object is gone.
        drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
    }
    rc
}

#[cfg(test)]
impl Srq {
    /// An SRQ of `n` RQEs over anonymous memory.
    pub fn for_test(n: u32) -> Box<Srq> {
        let m = crate::mapping::Mapping::anonymous(n as usize * core::mem::size_of::<siw_rqe>());
        Box::new(Srq {
            base: UnsafeCell::new(ibv_srq::zeroed()),
            rq: SpinLock::new(Producer::new(Ring::new(m, n).unwrap())),
        })
    }
}
