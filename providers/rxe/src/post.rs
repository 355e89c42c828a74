//! The data path's entry points: `ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`, and the doorbell that tells the kernel a send
//! queue has new WQEs (receives need none: the kernel looks when a
//! message arrives).

use core::ffi::c_int;
use core::mem::size_of;

use verbs_abi::uverbs::*;
use verbs_abi::*;

use crate::abi::PostSendCmd;
use crate::qp::Qp;
use crate::srq::Srq;

/// Rings the doorbell: a POST_SEND command with no work requests, which
/// makes the kernel run the QP's requester (C: `post_send_db`).
///
/// # Safety
/// `qp` is a live QP of this provider.
pub unsafe fn doorbell(qp: *mut ibv_qp) -> c_int {
    let mut resp = ib_uverbs_post_send_resp::default();
    // SAFETY: per the contract; the context outlives its QPs.
    let (fd, handle) = unsafe { ((*(*qp).context).cmd_fd, (*qp).handle) };
    let cmd = PostSendCmd {
        hdr: ib_uverbs_cmd_hdr {
            command: IB_USER_VERBS_CMD_POST_SEND,
            in_words: (size_of::<PostSendCmd>() / 4) as u16,
            out_words: (size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
        },
        core: ib_uverbs_post_send {
            response: &mut resp as *mut ib_uverbs_post_send_resp as u64,
            qp_handle: handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: size_of::<ibv_send_wr>() as u32,
        },
        drv: (),
    };
    // SAFETY: a whole command from our stack to the command file; the
    // kernel writes the response into `resp`, alive across the call.
    let n = unsafe {
        libc::write(
            fd,
            (&cmd as *const PostSendCmd).cast(),
            size_of::<PostSendCmd>(),
        )
    };
    if n == size_of::<PostSendCmd>() as isize {
        0
    } else {
        verbs_abi::errno::errno()
    }
}

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
