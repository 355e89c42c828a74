//! Shared receive queues: a receive ring of their own, which a resize
//! (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`) replaces: the kernel writes the
//! new ring's mmap information where the request's driver part points.

use core::cell::UnsafeCell;
use core::ffi::c_int;

use verbs_abi::driver::verbs_srq;
use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::{Cmd, CreateSrqResp, ModifySrqCmd};
use crate::ffi;
use crate::lock::SpinLock;
use crate::queue::Queue;
use crate::wq::RecvQueue;

#[repr(C)]
pub struct Srq {
    /// What libibverbs and the program see; first, so the pointers agree.
    vsrq: UnsafeCell<verbs_srq>,
    pub rq: SpinLock<RecvQueue>,
}

impl Srq {
    fn new() -> Box<Srq> {
        Box::new(Srq {
            vsrq: UnsafeCell::new(verbs_srq::zeroed()),
            rq: SpinLock::new(RecvQueue::default()),
        })
    }

    fn ibv(&self) -> *mut ibv_srq {
        self.vsrq.get().cast()
    }

    /// # Safety
    /// `srq` is an SRQ of this provider, not yet destroyed.
    pub unsafe fn from_ibv<'a>(srq: *mut ibv_srq) -> &'a Srq {
        // SAFETY: per the contract; `vsrq` is the first field.
        unsafe { &*srq.cast::<Srq>() }
    }

    fn cmd_fd(&self) -> c_int {
        // SAFETY: the context outlives its SRQs (set by the create).
        unsafe { (*(*self.ibv()).context).cmd_fd }
    }

    fn map(&mut self, mi: &mminfo, max_sge: u32) -> Result<(), c_int> {
        let q = Queue::map(self.cmd_fd(), mi)?;
        *self.rq.get_mut() = RecvQueue {
            queue: Some(q),
            max_sge,
        };
        Ok(())
    }
}

fn undo(srq: &Srq) {
    // SAFETY: the kernel's SRQ we just created; the program never saw it.
    unsafe { ffi::ibv_cmd_destroy_srq(srq.ibv()) };
}

/// # Safety
/// `pd` a live PD of an rxe context; `attr` valid.
unsafe fn create(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> Result<*mut ibv_srq, c_int> {
    let mut srq = Srq::new();
    let mut cmd = Cmd::<ib_uverbs_create_srq>::default();
    let mut resp = CreateSrqResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_srq(
            pd,
            srq.ibv(),
            attr,
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    // SAFETY: the attribute, updated by the create.
    let max_sge = unsafe { (*attr).attr.max_sge };
    if let Err(e) = srq.map(&resp.drv.mi, max_sge) {
        undo(&srq);
        return Err(e);
    }
    Ok(Box::into_raw(srq).cast())
}

pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: libibverbs passes a live PD and the program's attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { create(pd, attr) })
}

/// # Safety
/// `ctx` a live rxe context; `attr` valid.
unsafe fn create_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> Result<*mut ibv_srq, c_int> {
    let mut srq = Srq::new();
    let mut cmd = Cmd::<ib_uverbs_create_xsrq>::default();
    let mut resp = CreateSrqResp::default();
    // SAFETY: live objects; the buffers are ours and of their sizes.
    let rc = unsafe {
        ffi::ibv_cmd_create_srq_ex(
            ctx,
            srq.vsrq.get(),
            attr,
            cmd.as_ptr(),
            cmd.size(),
            resp.as_core(),
            resp.size(),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    // SAFETY: the attribute, updated by the create.
    let max_sge = unsafe { (*attr).attr.max_sge };
    if let Err(e) = srq.map(&resp.drv.mi, max_sge) {
        undo(&srq);
        return Err(e);
    }
    Ok(Box::into_raw(srq).cast())
}

pub unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: libibverbs passes one of our contexts and the program's
    // attribute.
    verbs_rt::errno::ptr_or_errno(unsafe { create_ex(ctx, attr) })
}

pub unsafe extern "C" fn modify_srq(
    ibsrq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: libibverbs passes one of our live SRQs.
    let srq = unsafe { Srq::from_ibv(ibsrq) };
    let resize = mask as u32 & IBV_SRQ_MAX_WR != 0;
    // A resize swaps the ring under the posts: hold them off throughout.
    let mut rq = resize.then(|| srq.rq.lock());
    let mut mi = mminfo::default();
    let mut cmd = ModifySrqCmd::default();
    cmd.drv.mmap_info_addr = &mut mi as *mut mminfo as u64;
    // SAFETY: a live SRQ and the program's attribute; the kernel writes
    // `mi`, alive across the call.
    let rc = unsafe { ffi::ibv_cmd_modify_srq(ibsrq, attr, mask, cmd.as_ptr(), cmd.size()) };
    if rc != 0 {
        return rc;
    }
    if let Some(rq) = rq.as_mut() {
        // The old ring is no longer the kernel's: drop it either way.
        match Queue::map(srq.cmd_fd(), &mi) {
            Ok(q) => rq.queue = Some(q),
            Err(e) => {
                rq.queue = None;
                return e;
            }
        }
    }
    0
}

pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let mut cmd = Cmd::<ib_uverbs_query_srq>::default();
    // SAFETY: libibverbs passes a live SRQ and the program's attribute.
    unsafe { ffi::ibv_cmd_query_srq(srq, attr, cmd.as_ptr(), cmd.size()) }
}

pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: an SRQ of ours, freed once (with its mapping) after the
    // kernel let it go.
    unsafe {
        let rc = ffi::ibv_cmd_destroy_srq(srq);
        if rc == 0 {
            drop(Box::from_raw(srq.cast::<Srq>()));
        }
        rc
    }
}
