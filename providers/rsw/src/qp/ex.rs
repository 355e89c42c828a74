//! The `ibv_wr_*` work-request builder API of `ibv_qp_ex`.
//!
//! `ibv_wr_start` opens a batch; each `ibv_wr_<op>` call appends a work
//! request (taking `wr_id`/`wr_flags` from the fields the application wrote
//! in the `ibv_qp_ex`), the setters fill its buffers, and `ibv_wr_complete`
//! posts the whole batch through the same path as `ibv_post_send`, all or
//! nothing. Errors in the builder calls (which return nothing) are recorded
//! and reported by `ibv_wr_complete`. The batch storage is preallocated at
//! QP creation, sized by the send queue.

use std::os::raw::{c_int, c_void};

use verbs_abi::*;

use super::post::post_send_batch;
use crate::engine::Qp;
use crate::wq::Builder;

/// # Safety
/// `qp` must be a live QP of ours, used by one thread for `ibv_wr_*`.
unsafe fn parts<'a>(qp: *mut ibv_qp_ex) -> (&'a mut Builder, &'a ibv_qp_ex, &'a Qp) {
    // SAFETY: per the contract, nobody else touches the builder now; the
    // ibv_qp_ex fields read are the ones the application wrote.
    unsafe {
        let q = Qp::from_ibv(qp);
        (&mut *q.builder.get(), &*q.ibv.get(), q)
    }
}

/// Appends a WR with the application's current `wr_id` and `wr_flags`.
///
/// # Safety
/// As [`parts`].
unsafe fn begin<'a>(qp: *mut ibv_qp_ex, opcode: ibv_wr_opcode) -> Option<&'a mut ibv_send_wr> {
    // SAFETY: forwarded contract.
    let (b, ibv, _) = unsafe { parts(qp) };
    if b.count == b.wrs.len() {
        b.fail(libc::ENOMEM);
        return None;
    }
    let i = b.count;
    b.count += 1;
    let mut wr = ibv_send_wr::zeroed();
    wr.wr_id = ibv.wr_id;
    wr.send_flags = ibv.wr_flags;
    wr.opcode = opcode;
    b.wrs[i] = wr;
    Some(&mut b.wrs[i])
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: called by the application on its QP.
    unsafe { parts(qp) }.0.reset();
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: called by the application on its QP.
    unsafe { parts(qp) }.0.reset();
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: called by the application on its QP.
    let (b, _, q) = unsafe { parts(qp) };
    let (n, err) = (b.count, b.err);
    b.reset();
    if err != 0 {
        return err;
    }
    if n == 0 {
        return 0;
    }
    let base = b.wrs.as_mut_ptr();
    for i in 0..n {
        // SAFETY: i and i + 1 are within the first n built WRs.
        unsafe {
            (*base.add(i)).next = if i + 1 < n {
                base.add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
    }
    // SAFETY: the list is the n WRs just linked; their SGE pointers point
    // into the builder's storage.
    unsafe { post_send_batch(q, base, n) }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: called by the application on its QP.
    unsafe { begin(qp, IBV_WR_SEND) };
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_SEND_WITH_IMM) } {
        wr.set_imm_data(imm_data);
    }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_RDMA_WRITE) } {
        wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
    }
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: __be32,
) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_RDMA_WRITE_WITH_IMM) } {
        wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        wr.set_imm_data(imm_data);
    }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_RDMA_READ) } {
        wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_ATOMIC_CMP_AND_SWP) } {
        wr.wr.atomic = ibv_send_wr_atomic {
            remote_addr,
            compare_add: compare,
            swap,
            rkey,
        };
    }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_ATOMIC_FETCH_AND_ADD) } {
        wr.wr.atomic = ibv_send_wr_atomic {
            remote_addr,
            compare_add: add,
            swap: 0,
            rkey,
        };
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: called by the application on its QP.
    let (b, _, _) = unsafe { parts(qp) };
    let max_sge = b.max_sge;
    let sges = b.sges.as_mut_ptr();
    let Some((i, wr)) = b.last() else { return };
    // SAFETY: slot i owns sges[i*max_sge .. (i+1)*max_sge], max_sge >= 1.
    unsafe {
        let s = sges.add(i * max_sge);
        s.write(ibv_sge { addr, length, lkey });
        wr.sg_list = s;
    }
    wr.num_sge = 1;
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: called by the application on its QP.
    let (b, _, _) = unsafe { parts(qp) };
    let max_sge = b.max_sge;
    if num_sge > max_sge {
        b.fail(libc::EINVAL);
        return;
    }
    let sges = b.sges.as_mut_ptr();
    let Some((i, wr)) = b.last() else { return };
    // SAFETY: the caller's list has num_sge entries; slot i has room for
    // max_sge >= num_sge.
    unsafe {
        let s = sges.add(i * max_sge);
        std::ptr::copy_nonoverlapping(sg_list, s, num_sge);
        wr.sg_list = s;
    }
    wr.num_sge = num_sge as c_int;
}

/// Copies inline pieces into the WR's inline slot now (the application may
/// reuse its buffers as soon as the call returns).
///
/// # Safety
/// As [`parts`]; every piece must be readable.
unsafe fn set_inline(qp: *mut ibv_qp_ex, pieces: &[(*const u8, usize)]) {
    // SAFETY: forwarded contract.
    let (b, _, _) = unsafe { parts(qp) };
    let total: usize = pieces.iter().map(|p| p.1).sum();
    if total > b.max_inline {
        b.fail(libc::EINVAL);
        return;
    }
    let (max_sge, max_inline) = (b.max_sge, b.max_inline);
    let sges = b.sges.as_mut_ptr();
    let inl = b.inline.as_mut_ptr();
    let Some((i, wr)) = b.last() else { return };
    // SAFETY: slot i owns max_inline bytes of inline storage (>= total) and
    // max_sge >= 1 SGE slots; pieces are readable per the contract.
    unsafe {
        let dst = inl.add(i * max_inline);
        let mut off = 0;
        for &(p, n) in pieces {
            if n > 0 {
                std::ptr::copy_nonoverlapping(p, dst.add(off), n);
            }
            off += n;
        }
        let s = sges.add(i * max_sge);
        s.write(ibv_sge {
            addr: dst as u64,
            length: total as u32,
            lkey: 0,
        });
        wr.sg_list = s;
    }
    wr.num_sge = 1;
    wr.send_flags |= IBV_SEND_INLINE;
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: called by the application with a readable buffer.
    unsafe { set_inline(qp, &[(addr as *const u8, length)]) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    const MAX_PIECES: usize = 32;
    if num_buf > MAX_PIECES {
        // SAFETY: called by the application on its QP.
        unsafe { parts(qp) }.0.fail(libc::EINVAL);
        return;
    }
    let mut pieces = [(std::ptr::null::<u8>(), 0usize); MAX_PIECES];
    for (i, p) in pieces.iter_mut().enumerate().take(num_buf) {
        // SAFETY: the caller's list has num_buf entries.
        let b = unsafe { &*buf_list.add(i) };
        *p = (b.addr as *const u8, b.length);
    }
    // SAFETY: called by the application with readable buffers.
    unsafe { set_inline(qp, &pieces[..num_buf]) };
}

/// Operations we do not implement record EOPNOTSUPP for `ibv_wr_complete`.
unsafe fn unsupported(qp: *mut ibv_qp_ex) {
    // SAFETY: called by the application on its QP.
    unsafe { parts(qp) }.0.fail(libc::EOPNOTSUPP);
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if info.is_null() {
        // SAFETY: called by the application on its QP.
        unsafe { parts(qp) }.0.fail(libc::EINVAL);
        return;
    }
    // SAFETY: called by the application on its QP; info is its bind
    // description (non-NULL).
    if let Some(wr) = unsafe { begin(qp, IBV_WR_BIND_MW) } {
        wr.ext.bind_mw = ibv_send_wr_bind_mw {
            mw,
            rkey,
            // SAFETY: non-NULL, the caller's.
            bind_info: unsafe { *info },
        };
    }
}
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_LOCAL_INV) } {
        wr.set_invalidate_rkey(rkey);
    }
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: called by the application on its QP.
    if let Some(wr) = unsafe { begin(qp, IBV_WR_SEND_WITH_INV) } {
        wr.set_invalidate_rkey(rkey);
    }
}
unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    // SAFETY: called by the application on its QP.
    unsafe { unsupported(qp) };
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: called by the application on its QP.
    let (b, _, _) = unsafe { parts(qp) };
    if let Some((_, wr)) = b.last() {
        wr.wr.ud = ibv_send_wr_ud {
            ah,
            remote_qpn: qpn,
            remote_qkey: qkey,
        };
    }
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, srqn: u32) {
    // SAFETY: called by the application on its QP.
    let (b, _, _) = unsafe { parts(qp) };
    if let Some((_, wr)) = b.last() {
        wr.qp_type.xrc.remote_srqn = srqn;
    }
}
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    data: *const c_void,
) {
    if data.is_null() {
        // SAFETY: called by the application on its QP.
        unsafe { parts(qp) }.0.fail(libc::EINVAL);
        return;
    }
    // SAFETY: called by the application on its QP; `data` holds the 8
    // bytes to store (copied now, as inline data).
    unsafe {
        if let Some(wr) = begin(qp, IBV_WR_ATOMIC_WRITE) {
            wr.wr.rdma = ibv_send_wr_rdma {
                remote_addr: addr,
                rkey,
            };
            wr.send_flags |= IBV_SEND_INLINE;
            set_inline(qp, &[(data as *const u8, 8)]);
        }
    }
}

/// Installs the builder entry points in a new QP's `ibv_qp_ex`.
pub fn fill_ops(q: &mut ibv_qp_ex) {
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_atomic_write = Some(wr_atomic_write);
}
