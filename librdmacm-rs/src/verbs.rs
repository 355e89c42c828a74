//! The libibverbs calls the data paths make (rsockets, the GSI of a
//! RoCEv2 device): the exported ones, and the `static inline` ones of
//! `<infiniband/verbs.h>` (post, poll, arm), which go through the
//! context's ops table as the header does.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use verbs_abi::*;

use crate::error::Res;

#[cfg(not(test))]
extern "C" {
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr;
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int;
    fn ibv_ack_cq_events(cq: *mut ibv_cq, n: u32);
    pub fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    pub fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
}

pub use crate::ffi::{
    ibv_alloc_pd, ibv_create_comp_channel, ibv_create_cq, ibv_create_qp, ibv_destroy_comp_channel,
    ibv_destroy_cq, ibv_destroy_qp, ibv_modify_qp,
};

/// A registered region (`ibv_reg_mr`); deregistered on drop.
pub struct Mr {
    pub mr: *mut ibv_mr,
}

impl Mr {
    /// # Safety
    /// `addr..addr+len` must stay valid memory until the region is dropped.
    pub unsafe fn new(pd: *mut ibv_pd, addr: *mut u8, len: usize, access: c_int) -> Res<Mr> {
        // SAFETY: forwarded caller guarantee; `pd` is live.
        let mr = unsafe { ibv_reg_mr(pd, addr.cast(), len, access) };
        if mr.is_null() {
            return Err(crate::error::errno());
        }
        Ok(Mr { mr })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by `new`, deregistered once.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// # Safety
/// `pd` was allocated and nothing uses it any more.
pub unsafe fn dealloc_pd(pd: *mut ibv_pd) {
    // SAFETY: caller guarantee.
    unsafe { ibv_dealloc_pd(pd) };
}

/// `ibv_post_send` as the header does it.
///
/// # Safety
/// `qp` is live; `wr` and its scatter list are valid for the call.
#[inline]
pub unsafe fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Res<()> {
    let mut bad = null_mut();
    // SAFETY: caller guarantee; the provider fills every ops slot.
    let rc = unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, &mut bad),
            None => libc::EOPNOTSUPP,
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// `ibv_post_recv` of one receive: without a scatter list when messages
/// are RDMA writes with immediate data (the receive carries no payload),
/// with `sge` where they are sends (iWARP has no immediate data).
///
/// # Safety
/// `qp` is live; `sge`, if any, names registered memory that stays valid
/// until the receive completes.
#[inline]
pub unsafe fn post_recv(qp: *mut ibv_qp, wr_id: u64, sge: Option<ibv_sge>) -> Res<()> {
    let mut sge = sge;
    let mut wr = ibv_recv_wr {
        wr_id,
        next: null_mut(),
        sg_list: sge.as_mut().map_or(null_mut(), |s| s as *mut ibv_sge),
        num_sge: i32::from(sge.is_some()),
    };
    let mut bad = null_mut();
    // SAFETY: caller guarantee; `wr` and `sge` live through the call.
    let rc = unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, &mut wr, &mut bad),
            None => libc::EOPNOTSUPP,
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// `ibv_poll_cq`: completions into `wc`, how many.
///
/// # Safety
/// `cq` is live.
#[inline]
pub unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> Res<usize> {
    // SAFETY: caller guarantee; `wc` has room for its length.
    let n = unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, wc.len() as c_int, wc.as_mut_ptr()),
            None => -1,
        }
    };
    if n < 0 {
        Err(libc::EIO)
    } else {
        Ok(n as usize)
    }
}

/// `ibv_req_notify_cq` for every completion.
///
/// # Safety
/// `cq` is live.
pub unsafe fn arm_cq(cq: *mut ibv_cq) {
    // SAFETY: caller guarantee.
    unsafe {
        if let Some(f) = (*(*cq).context).ops.req_notify_cq {
            f(cq, 0);
        }
    }
}

/// Takes and acknowledges the completion events waiting on `cc` (whose
/// descriptor is non-blocking). Returns whether there was one.
///
/// # Safety
/// `cc` is live and its CQ is `cq`.
pub unsafe fn drain_cq_events(cc: *mut ibv_comp_channel) -> bool {
    let mut any = false;
    loop {
        let mut cq = null_mut();
        let mut ctx = null_mut();
        // SAFETY: caller guarantee; out-pointers are locals.
        if unsafe { ibv_get_cq_event(cc, &mut cq, &mut ctx) } != 0 {
            return any;
        }
        any = true;
        // SAFETY: the CQ the event names, acknowledged once.
        unsafe { ibv_ack_cq_events(cq, 1) };
    }
}

// Unit tests run the pure logic only; they get failing stand-ins so the
// test binary does not need libibverbs.
#[cfg(test)]
pub use stand_ins::*;
#[cfg(test)]
mod stand_ins {
    use super::*;
    pub unsafe fn ibv_reg_mr(_: *mut ibv_pd, _: *mut c_void, _: usize, _: c_int) -> *mut ibv_mr {
        null_mut()
    }
    pub unsafe fn ibv_dereg_mr(_: *mut ibv_mr) -> c_int {
        0
    }
    pub unsafe fn ibv_dealloc_pd(_: *mut ibv_pd) -> c_int {
        0
    }
    pub unsafe fn ibv_get_cq_event(
        _: *mut ibv_comp_channel,
        _: *mut *mut ibv_cq,
        _: *mut *mut c_void,
    ) -> c_int {
        -1
    }
    pub unsafe fn ibv_ack_cq_events(_: *mut ibv_cq, _: u32) {}
    pub unsafe fn ibv_create_ah(_: *mut ibv_pd, _: *mut ibv_ah_attr) -> *mut ibv_ah {
        null_mut()
    }
    pub unsafe fn ibv_destroy_ah(_: *mut ibv_ah) -> c_int {
        0
    }
}
