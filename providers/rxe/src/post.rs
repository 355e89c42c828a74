//! The data path's entry points: `ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`. A send ends with the doorbell (`wq::doorbell`);
//! receives need none: the kernel looks when a message arrives.

use core::ffi::c_int;

use verbs_abi::*;

use crate::qp::Qp;
use crate::srq::Srq;
use crate::wq::doorbell;

/// `ibv_post_send` (C: `rxe_post_send`).
pub unsafe extern "C" fn post_send(
    ibqp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    if bad_wr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's out-pointer, checked above.
    unsafe { *bad_wr = core::ptr::null_mut() };
    if wr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: libibverbs' inline ibv_post_send passes one of our QPs.
    let qp = unsafe { Qp::from_ibv(ibqp) };
    // SAFETY: the program's list of requests.
    let (posted, res) = unsafe { qp.sq.lock().post(wr) };
    let rc = match res {
        Ok(()) => 0,
        Err((e, bad)) => {
            // SAFETY: checked above.
            unsafe { *bad_wr = bad };
            e
        }
    };
    if posted {
        // SAFETY: our live QP.
        let db = unsafe { doorbell(ibqp) };
        if db != 0 {
            return db;
        }
    }
    rc
}

/// `ibv_post_recv` (C: `rxe_post_recv`).
pub unsafe extern "C" fn post_recv(
    ibqp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if bad_wr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's out-pointer, checked above.
    unsafe { *bad_wr = core::ptr::null_mut() };
    // SAFETY: libibverbs passes one of our QPs; its state is kept by
    // libibverbs' ibv_modify_qp.
    let (qp, state) = unsafe { (Qp::from_ibv(ibqp), (*ibqp).state) };
    // A receive may not be posted in RESET (IBA C10-97.2.1).
    if wr.is_null() || state == IBV_QPS_RESET {
        return libc::EINVAL;
    }
    // SAFETY: the program's list of requests.
    match unsafe { qp.rq.lock().post(wr) } {
        Ok(()) => 0,
        Err((e, bad)) => {
            // SAFETY: checked above.
            unsafe { *bad_wr = bad };
            e
        }
    }
}

/// `ibv_post_srq_recv` (C: `rxe_post_srq_recv`).
pub unsafe extern "C" fn post_srq_recv(
    ibsrq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if bad_wr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program's out-pointer, checked above.
    unsafe { *bad_wr = core::ptr::null_mut() };
    if wr.is_null() {
        return 0;
    }
    // SAFETY: libibverbs passes one of our SRQs.
    let srq = unsafe { Srq::from_ibv(ibsrq) };
    // SAFETY: the program's list of requests.
    match unsafe { srq.rq.lock().post(wr) } {
        Ok(()) => 0,
        Err((e, bad)) => {
            // SAFETY: checked above.
            unsafe { *bad_wr = bad };
            e
        }
    }
}
