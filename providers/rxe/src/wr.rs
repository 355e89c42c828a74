//! The `ibv_wr_*` work-request builders of `ibv_qp_ex`: `ibv_wr_start`
//! takes the send queue's lock, each builder writes one WQE in place and
//! the setters amend it, and `ibv_wr_complete` publishes the batch and
//! rings the doorbell (or reports the batch's first error, publishing
//! nothing), `ibv_wr_abort` drops it. The verbs contract keeps every call
//! between start and complete/abort on the thread that holds the lock.

use core::ffi::{c_int, c_void};

use verbs_abi::*;

use crate::ah::Ah;
use crate::qp::Qp;
use crate::wq::SendQueue;

/// The QP and its send queue, for a call inside a batch.
///
/// # Safety
/// `qpx` is one of our QPs and this thread holds its send queue (between
/// `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`); the reference is
/// not kept past the call.
unsafe fn batch<'a>(qpx: *mut ibv_qp_ex) -> (&'a Qp, &'a mut SendQueue) {
    // SAFETY: per the contract.
    unsafe {
        let qp = Qp::from_ex(qpx);
        (qp, qp.sq.held())
    }
}

/// The request identity the program set in the `ibv_qp_ex` before a
/// builder.
///
/// # Safety
/// `qpx` is a live `ibv_qp_ex`.
unsafe fn identity(qpx: *mut ibv_qp_ex) -> (u64, u32) {
    // SAFETY: per the contract; the program wrote these before the call.
    unsafe { ((*qpx).wr_id, (*qpx).wr_flags) }
}

/// One builder: a fresh WQE of `$opcode`, then `$body` with it as `$s`.
macro_rules! builder {
    ($name:ident($($arg:ident: $ty:ty),*), $opcode:expr, |$s:ident| $body:block) => {
        #[allow(unused_mut, unused_variables)]
        unsafe extern "C" fn $name(qpx: *mut ibv_qp_ex $(, $arg: $ty)*) {
            // SAFETY: called inside a batch (the verbs contract).
            let ((_, sq), (wr_id, flags)) = unsafe { (batch(qpx), identity(qpx)) };
            if let Some(mut $s) = sq.wr_new($opcode, wr_id, flags) $body
        }
    };
}

builder!(wr_send(), IBV_WR_SEND, |s| {});
builder!(wr_send_imm(imm: __be32), IBV_WR_SEND_WITH_IMM, |s| {
    s.hdr.wr.ex = imm;
});
builder!(wr_send_inv(rkey: u32), IBV_WR_SEND_WITH_INV, |s| {
    s.hdr.wr.ex = rkey;
});
builder!(wr_local_inv(rkey: u32), IBV_WR_LOCAL_INV, |s| {
    s.hdr.wr.ex = rkey;
});
builder!(wr_rdma_write(rkey: u32, addr: u64), IBV_WR_RDMA_WRITE, |s| {
    rdma(&mut s, rkey, addr);
});
builder!(wr_rdma_write_imm(rkey: u32, addr: u64, imm: __be32), IBV_WR_RDMA_WRITE_WITH_IMM, |s| {
    rdma(&mut s, rkey, addr);
    s.hdr.wr.ex = imm;
});
builder!(wr_rdma_read(rkey: u32, addr: u64), IBV_WR_RDMA_READ, |s| {
    rdma(&mut s, rkey, addr);
});
builder!(wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64), IBV_WR_ATOMIC_CMP_AND_SWP, |s| {
    atomic(&mut s, rkey, addr, compare, swap);
});
builder!(wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64), IBV_WR_ATOMIC_FETCH_AND_ADD, |s| {
    atomic(&mut s, rkey, addr, add, 0);
});
builder!(wr_atomic_write(rkey: u32, addr: u64, data: *const c_void), IBV_WR_ATOMIC_WRITE, |s| {
    rdma(&mut s, rkey, addr);
    // SAFETY: the program's 8 bytes to write (ibv_wr_atomic_write).
    let v = unsafe { core::ptr::read_unaligned(data.cast::<[u8; 8]>()) };
    // Every send slot holds 8 bytes after the header: cannot fail.
    let _ = s.set_atomic_data(v);
});
builder!(wr_bind_mw(mw: *mut ibv_mw, rkey: u32, info: *const ibv_mw_bind_info), IBV_WR_BIND_MW, |s| {
    // SAFETY: the program's live window and bind information.
    let (mw_rkey, info) = unsafe { ((*mw).rkey, *info) };
    let mr_lkey = if info.mr.is_null() {
        0
    } else {
        // SAFETY: a live MR (the verbs contract).
        unsafe { (*info.mr).lkey }
    };
    s.hdr.wr.wr.mw = verbs_abi::uverbs::rxe_send_wr_mw {
        addr: info.addr,
        length: info.length,
        mr_lkey,
        mw_rkey,
        rkey,
        access: info.mw_access_flags,
    };
});

fn rdma(s: &mut crate::wqe::SendSlot<'_>, rkey: u32, addr: u64) {
    s.hdr.wr.wr.rdma = verbs_abi::uverbs::rxe_send_wr_rdma {
        remote_addr: addr,
        rkey,
        reserved: 0,
    };
    s.hdr.iova = addr;
}

fn atomic(s: &mut crate::wqe::SendSlot<'_>, rkey: u32, addr: u64, compare_add: u64, swap: u64) {
    s.hdr.wr.wr.atomic = verbs_abi::uverbs::rxe_send_wr_atomic {
        remote_addr: addr,
        compare_add,
        swap,
        rkey,
        reserved: 0,
    };
    s.hdr.iova = addr;
}

/// One setter: amends the last builder's WQE as `$body` with it as `$s`
/// and the send queue's limits as `$l`; an error fails the batch.
macro_rules! setter {
    ($name:ident($($arg:ident: $ty:ty),*), |$s:ident, $l:ident| $body:expr) => {
        unsafe extern "C" fn $name(qpx: *mut ibv_qp_ex $(, $arg: $ty)*) {
            // SAFETY: called inside a batch (the verbs contract).
            let (_, sq) = unsafe { batch(qpx) };
            let $l = sq.limits;
            let r: Result<(), c_int> = match sq.wr_last() {
                Some(mut $s) => $body,
                None => Ok(()),
            };
            if let Err(e) = r {
                sq.wr_fail(e);
            }
        }
    };
}

setter!(wr_set_sge(lkey: u32, addr: u64, length: u32), |s, _l| s.set_sge(lkey, addr, length));
setter!(wr_set_sge_list(num: usize, list: *const ibv_sge), |s, l| {
    let sges = if num == 0 {
        &[][..]
    } else {
        // SAFETY: the program's `num` SGEs (the verbs contract).
        unsafe { core::slice::from_raw_parts(list, num) }
    };
    s.set_sge_list(sges, l.max_sge)
});
setter!(wr_set_inline_data(addr: *mut c_void, length: usize), |s, l| {
    let data = if length == 0 {
        &[][..]
    } else {
        // SAFETY: the program's `length` bytes (the verbs contract).
        unsafe { core::slice::from_raw_parts(addr.cast::<u8>(), length) }
    };
    s.set_inline(core::iter::once(data), l.max_inline)
});
setter!(wr_set_inline_data_list(num: usize, bufs: *const ibv_data_buf), |s, l| {
    let list = if num == 0 {
        &[][..]
    } else {
        // SAFETY: the program's `num` buffers (the verbs contract).
        unsafe { core::slice::from_raw_parts(bufs, num) }
    };
    // SAFETY: each buffer names `length` readable bytes (the contract).
    let datas = list
        .iter()
        .map(|b| unsafe { core::slice::from_raw_parts(b.addr.cast::<u8>(), b.length) });
    s.set_inline(datas, l.max_inline)
});
setter!(wr_set_ud_addr(ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32), |s, _l| {
    // SAFETY: NULL or one of our live AHs (the verbs contract).
    match unsafe { Ah::from_ibv(ah) } {
        Some(ah) => {
            s.set_ud(ah, remote_qpn, remote_qkey);
            Ok(())
        }
        None => Err(libc::EINVAL),
    }
});

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: the program passes one of our live QPs.
    let qp = unsafe { Qp::from_ex(qpx) };
    qp.sq.acquire();
    // SAFETY: acquired above; held until complete or abort.
    unsafe { qp.sq.held() }.wr_begin();
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: called inside a batch (the verbs contract).
    let (qp, sq) = unsafe { batch(qpx) };
    let res = sq.wr_finish();
    // SAFETY: held since wr_start; `sq` is not used again.
    unsafe { qp.sq.release() };
    match res {
        // SAFETY: our live QP.
        Ok(true) => unsafe { crate::wq::doorbell(qp.ibv()) },
        Ok(false) => 0,
        Err(e) => e,
    }
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: called inside a batch (the verbs contract).
    let (qp, sq) = unsafe { batch(qpx) };
    sq.wr_drop();
    // SAFETY: held since wr_start; `sq` is not used again.
    unsafe { qp.sq.release() };
}

/// Fills the `ibv_qp_ex` of a new QP with the builders the program asked
/// for (`send_ops_flags`), the setters and start/complete/abort (C:
/// `set_qp_send_ops`).
pub fn install(qpx: &mut ibv_qp_ex, send_ops: u64) {
    let has = |f: u32| send_ops & u64::from(f) != 0;
    if has(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) {
        qpx.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if has(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) {
        qpx.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
    if has(IBV_QP_EX_WITH_BIND_MW) {
        qpx.wr_bind_mw = Some(wr_bind_mw);
    }
    if has(IBV_QP_EX_WITH_LOCAL_INV) {
        qpx.wr_local_inv = Some(wr_local_inv);
    }
    if has(IBV_QP_EX_WITH_ATOMIC_WRITE) {
        qpx.wr_atomic_write = Some(wr_atomic_write);
    }
    if has(IBV_QP_EX_WITH_RDMA_READ) {
        qpx.wr_rdma_read = Some(wr_rdma_read);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE) {
        qpx.wr_rdma_write = Some(wr_rdma_write);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) {
        qpx.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if has(IBV_QP_EX_WITH_SEND) {
        qpx.wr_send = Some(wr_send);
    }
    if has(IBV_QP_EX_WITH_SEND_WITH_IMM) {
        qpx.wr_send_imm = Some(wr_send_imm);
    }
    if has(IBV_QP_EX_WITH_SEND_WITH_INV) {
        qpx.wr_send_inv = Some(wr_send_inv);
    }
    qpx.wr_set_ud_addr = Some(wr_set_ud_addr);
    qpx.wr_set_inline_data = Some(wr_set_inline_data);
    qpx.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    qpx.wr_set_sge = Some(wr_set_sge);
    qpx.wr_set_sge_list = Some(wr_set_sge_list);
    qpx.wr_start = Some(wr_start);
    qpx.wr_complete = Some(wr_complete);
    qpx.wr_abort = Some(wr_abort);
}
