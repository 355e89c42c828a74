//! Queue pairs: the kernel's QP with its send queue, and its receive
//! queue unless an SRQ replaces it, mapped here. Posting is `post`'s;
//! this module creates, changes, queries and destroys.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr::{addr_of_mut, null_mut};

use verbs_abi::uverbs::*;
use verbs_abi::*;
use verbs_rt::errno::set_errno;

use crate::abi::{CreateQpReq, CreateQpResp, ModifyQpReq, QueryQpReq};
use crate::ffi;
use crate::lock::{Guard, SpinLock};
use crate::ring::{Producer, Ring};

/// rdma-core's `siw_qp`: the `ibv_qp` first, so the pointer libibverbs and
/// the program hold is ours.
#[repr(C)]
pub struct Qp {
    /// In a cell: libibverbs and the program write it (event counts, the
    /// context of the object) while we hold a reference to the rest.
    base: UnsafeCell<ibv_qp>,
    id: u32,
    /// Every SQE is signalled (`sq_sig_all` at creation).
    sig_all: bool,
    /// None when the kernel gave the QP no send queue.
    sq: Option<SpinLock<Producer<siw_sqe>>>,
    /// None with an SRQ, or when the kernel gave the QP no receive queue.
    rq: Option<SpinLock<Producer<siw_rqe>>>,
}

impl Qp {
    /// Our QP behind an `ibv_qp` of ours.
    ///
    /// # Safety
    /// `qp` is one of our live QPs.
    pub unsafe fn from_base<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: the ibv_qp starts our repr(C) Qp.
        unsafe { &*qp.cast::<Qp>() }
    }

    /// The kernel's id of the QP (its number, for messages).
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn sig_all(&self) -> bool {
        self.sig_all
    }

    /// The kernel's handle (the doorbell names the QP by it).
    pub fn handle(&self) -> u32 {
        // SAFETY: set at creation, never written again.
        unsafe { (*self.base.get()).handle }
    }

    /// The command file of the QP's context.
    pub fn cmd_fd(&self) -> c_int {
        // SAFETY: a live QP's context outlives it; the field is set at
        // creation.
        unsafe { (*(*self.base.get()).context).cmd_fd }
    }

    /// Whether the QP takes its receives from an SRQ.
    pub fn has_srq(&self) -> bool {
        // SAFETY: set at creation, never written again.
        unsafe { !(*self.base.get()).srq.is_null() }
    }

    pub fn sq(&self) -> Option<&SpinLock<Producer<siw_sqe>>> {
        self.sq.as_ref()
    }

    pub fn rq(&self) -> Option<&SpinLock<Producer<siw_rqe>>> {
        self.rq.as_ref()
    }

    /// Both queues locked (no post runs meanwhile), as rdma-core's siw
    /// holds them across a state change.
    fn lock_queues(&self) -> Locked<'_> {
        (
            self.sq.as_ref().map(SpinLock::lock),
            self.rq.as_ref().map(SpinLock::lock),
        )
    }
}

/// A QP's queues, locked.
type Locked<'a> = (
    Option<Guard<'a, Producer<siw_sqe>>>,
    Option<Guard<'a, Producer<siw_rqe>>>,
);

/// Maps a queue of `n` elements the kernel made (none when `n` is 0).
fn map_queue<T: crate::ring::Element>(
    fd: c_int,
    key: u64,
    n: u32,
) -> Result<Option<SpinLock<Producer<T>>>, c_int> {
    if n == 0 {
        return Ok(None);
    }
    if key == u64::from(SIW_INVAL_UOBJ_KEY) {
        return Err(libc::ENOMEM);
    }
    Ok(Some(SpinLock::new(Producer::new(Ring::map(
        fd, key, n, 0,
    )?))))
}

/// # Safety
/// `pd` is one of our PDs; `attr` the caller's.
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // The kernel learns the QP's address (its user handle, which events
    // carry) at creation, so the QP is allocated first and filled after.
    let mut qp = Box::<Qp>::new_uninit();
    let p = qp.as_mut_ptr();
    // SAFETY: a field of our allocation.
    let base = unsafe {
        let cell = addr_of_mut!((*p).base);
        cell.write(UnsafeCell::new(ibv_qp::zeroed()));
        UnsafeCell::raw_get(cell)
    };
    let mut req = CreateQpReq::default();
    let mut resp = CreateQpResp::default();
    let (c, cs) = req.buf();
    let (r, rs) = resp.buf();
    // SAFETY: our new QP and buffers; the attributes are the caller's.
    let rc = unsafe { ffi::ibv_cmd_create_qp(pd, base, attr, c, cs, r, rs) };
    if rc != 0 {
        log::error!("siw: QP creation failed: errno {rc}");
        set_errno(rc);
        return null_mut();
    }
    let u = resp.drv;
    // SAFETY: the caller's attributes, a live PD.
    let (srq, sig_all, fd) = unsafe {
        (
            !(*attr).srq.is_null(),
            (*attr).sq_sig_all != 0,
            (*(*pd).context).cmd_fd,
        )
    };
    let queues = map_queue::<siw_sqe>(fd, u.sq_key, u.num_sqe).and_then(|sq| {
        let rq = if srq {
            None
        } else {
            map_queue::<siw_rqe>(fd, u.rq_key, u.num_rqe)?
        };
        Ok((sq, rq))
    });
    let (sq, rq) = match queues {
        Ok(q) => q,
        Err(e) => {
            log::error!("siw: QP[{}]: mapping its queues failed: errno {e}", u.qp_id);
            // SAFETY: the kernel QP we just made; its memory is plain.
            unsafe { ffi::ibv_cmd_destroy_qp(base) };
            set_errno(e);
            return null_mut();
        }
    };
    // SAFETY: the remaining fields, then the whole is initialised.
    let qp = unsafe {
        addr_of_mut!((*p).id).write(u.qp_id);
        addr_of_mut!((*p).sig_all).write(sig_all);
        addr_of_mut!((*p).sq).write(sq);
        addr_of_mut!((*p).rq).write(rq);
        qp.assume_init()
    };
    Box::into_raw(qp).cast()
}

/// # Safety
/// `qp` is one of our QPs; `attr` the caller's.
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: per the contract.
    let q = unsafe { Qp::from_base(qp) };
    let _queues = q.lock_queues();
    let mut req = ModifyQpReq::default();
    let (c, cs) = req.buf();
    // SAFETY: per the contract; our buffer.
    unsafe { ffi::ibv_cmd_modify_qp(qp, attr, mask, c, cs) }
}

/// # Safety
/// `qp` is one of our QPs; `attr` and `init` the caller's.
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    let mut req = QueryQpReq::default();
    let (c, cs) = req.buf();
    // SAFETY: per the contract; our buffer.
    unsafe { ffi::ibv_cmd_query_qp(qp, attr, mask, init, c, cs) }
}

/// # Safety
/// `qp` is one of our QPs, no longer used.
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: per the contract.
    let rc = unsafe { ffi::ibv_cmd_destroy_qp(qp) };
    if rc == 0 {
        // SAFETY: allocated by create_qp; the kernel object is gone, the
        // queues are unmapped with it.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
    }
    rc
}

#[cfg(test)]
impl Qp {
    /// A QP over anonymous memory: `sq` SQEs and `rq` RQEs.
    pub fn for_test(sq: u32, rq: u32, sig_all: bool) -> Box<Qp> {
        use crate::mapping::Mapping;
        use core::mem::size_of;
        fn queue<T: crate::ring::Element>(n: u32) -> Option<SpinLock<Producer<T>>> {
            (n > 0).then(|| {
                let m = Mapping::anonymous(n as usize * size_of::<T>());
                SpinLock::new(Producer::new(Ring::new(m, n).unwrap()))
            })
        }
        Box::new(Qp {
            base: UnsafeCell::new(ibv_qp::zeroed()),
            id: 1,
            sig_all,
            sq: queue(sq),
            rq: queue(rq),
        })
    }
}
