//! Posting work requests: `ibv_post_send`, `ibv_post_recv` and the
//! batches of `ibv_wr_complete`.

use std::os::raw::c_int;

use verbs_abi::*;

use crate::cq::Cqe;
use crate::device::MAX_MSG_SZ;
use crate::engine::{datagram, raw, requester};
use crate::engine::{Qp, QpInner};
use crate::progress::engine;
use crate::ring::{BindArgs, SendWqe, UdDest};
use crate::wire::Op;

fn wire_op(opcode: ibv_wr_opcode) -> Option<Op> {
    Some(match opcode {
        IBV_WR_SEND => Op::Send,
        IBV_WR_SEND_WITH_IMM => Op::SendImm,
        IBV_WR_RDMA_WRITE => Op::Write,
        IBV_WR_RDMA_WRITE_WITH_IMM => Op::WriteImm,
        IBV_WR_RDMA_READ => Op::ReadReq,
        IBV_WR_ATOMIC_CMP_AND_SWP => Op::CmpSwap,
        IBV_WR_ATOMIC_FETCH_AND_ADD => Op::FetchAdd,
        IBV_WR_SEND_WITH_INV => Op::SendInv,
        IBV_WR_ATOMIC_WRITE => Op::AtomicWrite,
        IBV_WR_BIND_MW => Op::BindMw,
        IBV_WR_LOCAL_INV => Op::LocalInv,
        _ => return None,
    })
}

/// A send WR as checked: its opcode, message length and, for UD, its
/// destination.
pub struct Checked {
    pub op: Op,
    pub len: u32,
    pub ud: UdDest,
    pub bind: BindArgs,
}

/// Q_Keys with the high bit set are "controlled": the sender's own Q_Key
/// is used instead (IB spec, Q_Key rules).
const CONTROLLED_QKEY: u32 = 0x8000_0000;

/// Checks one send WR against the QP's limits.
///
/// # Safety
/// `wr.sg_list` must hold `wr.num_sge` entries.
pub unsafe fn check_send_wr(g: &QpInner, wr: &ibv_send_wr) -> Result<Checked, c_int> {
    let op = wire_op(wr.opcode).ok_or(libc::EINVAL)?;
    // UD carries SENDs only; the rest is taken as hardware takes it, and
    // fails with IBV_WC_LOC_QP_OP_ERR when it reaches the wire
    // (`datagram::pump`).
    let ud_send = g.qp_type == IBV_QPT_UD && matches!(op, Op::Send | Op::SendImm);
    let allowed = match g.qp_type {
        // An XRC receive QP has no send queue.
        IBV_QPT_XRC_RECV => false,
        IBV_QPT_UC => !matches!(
            op,
            Op::ReadReq | Op::CmpSwap | Op::FetchAdd | Op::AtomicWrite
        ),
        // A frame is all a raw packet QP sends.
        IBV_QPT_RAW_PACKET => op == Op::Send,
        _ => true,
    };
    if !allowed {
        return Err(libc::EINVAL);
    }
    let ud = if ud_send {
        ud_dest(g, wr)?
    } else {
        UdDest::default()
    };
    if wr.num_sge < 0 || wr.num_sge as u32 > g.sq.max_sge as u32 {
        return Err(libc::EINVAL);
    }
    let sges: &[ibv_sge] = if wr.num_sge == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(wr.sg_list, wr.num_sge as usize) }
    };
    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
    if total > MAX_MSG_SZ as u64 {
        return Err(libc::EINVAL);
    }
    let mut bind = BindArgs::default();
    if op == Op::BindMw {
        bind = bind_args(wr)?;
        return Ok(Checked {
            op,
            len: 0,
            ud,
            bind,
        });
    }
    if op == Op::LocalInv {
        return Ok(Checked {
            op,
            len: 0,
            ud,
            bind,
        });
    }
    let len = match op {
        // Any other length than the 8 bytes of the result is accepted, as
        // hardware accepts it, and fails with IBV_WC_LOC_LEN_ERR when the
        // WQE is read (`requester::transmit`).
        Op::CmpSwap | Op::FetchAdd => {
            if sges.len() != 1 {
                return Err(libc::EINVAL);
            }
            total as u32
        }
        Op::ReadReq => total as u32,
        // Exactly the 8 bytes to store.
        Op::AtomicWrite if total != 8 => return Err(libc::EINVAL),
        _ => {
            if wr.send_flags & IBV_SEND_INLINE != 0 && total > g.sq.max_inline as u64 {
                return Err(libc::EINVAL);
            }
            total as u32
        }
    };
    Ok(Checked { op, len, ud, bind })
}

/// Where a UD SEND goes: its address handle's GIDs, the remote QP and
/// Q_Key (a controlled one replaced by the QP's).
#[inline]
fn ud_dest(g: &QpInner, wr: &ibv_send_wr) -> Result<UdDest, c_int> {
    // SAFETY: the UD member is the one a UD QP's WRs fill in.
    let u = unsafe { wr.wr.ud };
    let ah = crate::ah::Ah::lookup(u.ah).ok_or(libc::EINVAL)?;
    Ok(UdDest {
        dgid: ah.dgid,
        sgid: ah.sgid,
        qpn: u.remote_qpn & 0xff_ffff,
        qkey: if u.remote_qkey & CONTROLLED_QKEY != 0 {
            g.attr.qkey
        } else {
            u.remote_qkey
        },
        tclass: if ah.attr.is_global != 0 {
            ah.attr.grh.traffic_class
        } else {
            0
        },
    })
}

/// What an `IBV_WR_BIND_MW` asks: the window, the MR and the range.
#[inline]
fn bind_args(wr: &ibv_send_wr) -> Result<BindArgs, c_int> {
    // SAFETY: the bind member is the one IBV_WR_BIND_MW fills in.
    let b = unsafe { wr.ext.bind_mw };
    let mw = crate::mw::Mw::lookup(b.mw).ok_or(libc::EINVAL)?;
    let info = b.bind_info;
    let mr_key = if info.length == 0 {
        0
    } else {
        if !crate::mr::MRS.contains(info.mr) {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live MR of ours (checked above).
        unsafe { (*info.mr).lkey }
    };
    Ok(BindArgs {
        mw_rkey: mw.rkey(),
        new_rkey: crate::mr::bind_key(mw.rkey(), b.rkey),
        mr_key,
        addr: info.addr,
        len: info.length,
        access: info.mw_access_flags,
    })
}

/// Queues one checked WR (the queue has room).
///
/// # Safety
/// As [`check_send_wr`]; for inline WRs the SGE addresses must be readable.
unsafe fn enqueue_send(g: &mut QpInner, wr: &ibv_send_wr, c: &Checked) -> u64 {
    let (op, len) = (c.op, c.len);
    let seq = g.sq.next_seq();
    let inline = wr.send_flags & IBV_SEND_INLINE != 0 && op.request_has_payload();
    // SAFETY: union members are read according to the opcode.
    let (remote_addr, rkey, compare_add, swap) = unsafe {
        match op {
            Op::CmpSwap | Op::FetchAdd => (
                wr.wr.atomic.remote_addr,
                wr.wr.atomic.rkey,
                wr.wr.atomic.compare_add,
                wr.wr.atomic.swap,
            ),
            Op::Write | Op::WriteImm | Op::ReadReq | Op::AtomicWrite => {
                (wr.wr.rdma.remote_addr, wr.wr.rdma.rkey, 0, 0)
            }
            Op::LocalInv => (0, wr.invalidate_rkey(), 0, 0),
            _ => (0, 0, 0, 0),
        }
    };
    let sges: &[ibv_sge] = if wr.num_sge == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(wr.sg_list, wr.num_sge as usize) }
    };
    let slot = g.sq.slot(seq);
    if inline {
        let base = slot * g.sq.max_inline;
        let mut off = 0;
        for s in sges {
            let n = s.length as usize;
            if n > 0 {
                // SAFETY: inline data is read from the caller's buffers at
                // post time (no key needed); the destination slot has room
                // for max_inline >= len bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.addr as usize as *const u8,
                        g.sq.inline_buf.as_mut_ptr().add(base + off),
                        n,
                    )
                };
            }
            off += n;
        }
    } else {
        let base = slot * g.sq.max_sge;
        g.sq.sges[base..base + sges.len()].copy_from_slice(sges);
    }
    g.sq.wqes[slot] = SendWqe {
        wr_id: wr.wr_id,
        op,
        signaled: wr.send_flags & IBV_SEND_SIGNALED != 0,
        solicited: wr.send_flags & IBV_SEND_SOLICITED != 0,
        imm: wr.imm_data(),
        remote_addr,
        rkey,
        compare_add,
        swap,
        len,
        nsge: if inline { 0 } else { sges.len() as u32 },
        inline,
        msn: 0,
        local_err: 0,
        ud: c.ud,
        bind: c.bind,
        local_ok: false,
        tm: 0,
        xrc_srqn: if g.qp_type == IBV_QPT_XRC_SEND {
            // SAFETY: the union's one member, as XRC send QPs fill it.
            unsafe { wr.qp_type.xrc.remote_srqn }
        } else {
            0
        },
    };
    g.sq.commit();
    seq
}

/// Queues a list of send WRs and starts transmitting.
///
/// # Safety
/// `wr` must be a valid list of send WRs.
unsafe fn post_locked(
    qp: &Qp,
    g: &mut QpInner,
    mut wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let mut rc = 0;
    while !wr.is_null() {
        // SAFETY: wr is an element of the caller's list.
        let w = unsafe { &*wr };
        // The send queue exists from INIT on: posted in INIT or RTR, the
        // WR waits and goes when the QP reaches RTS, as mlx5 and irdma
        // take it (rxe's doorbell says EINVAL, yet keeps the WR); a move
        // to RESET discards it, one to ERR flushes it. RESET refuses it,
        // as the spec (C10-96), rxe and rdma-core's own tests require.
        if g.state == IBV_QPS_RESET {
            rc = libc::EINVAL;
            break;
        }
        // SAFETY: the caller's WR describes its own SGE array.
        let checked = match unsafe { check_send_wr(g, w) } {
            Ok(v) => v,
            Err(e) => {
                rc = e;
                break;
            }
        };
        if g.sq.is_full() {
            rc = libc::ENOMEM;
            break;
        }
        // SAFETY: checked above.
        let seq = unsafe { enqueue_send(g, w, &checked) };
        if checked.op == Op::BindMw {
            // SAFETY: the bind member is the one IBV_WR_BIND_MW fills in.
            crate::mw::bind_posted(unsafe { w.ext.bind_mw.mw }, checked.bind.new_rkey);
        }
        if g.state == IBV_QPS_ERR {
            // Like hardware providers: accepted, then flushed at once.
            let wq = *g.sq.wqe(seq);
            qp.complete_send(g, &wq, IBV_WC_WR_FLUSH_ERR);
            g.sq.clear();
        }
        wr = w.next;
    }
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { *bad_wr = wr };
    }
    if g.dgram.is_some() {
        datagram::pump(qp, g);
    } else if g.raw.is_some() {
        raw::pump(qp, g);
    } else if g.roce.is_some() {
        crate::engine::roce_rc::pump(qp, g);
    } else {
        // The requester may hold back a burst of same-host atomics to do
        // them together (see `requester::defer_atomic`).
        g.req.set_posting(true);
        requester::pump(qp, g);
        g.req.set_posting(false);
    }
    rc
}

/// Posts `n` linked WRs all or nothing (`ibv_wr_complete`).
///
/// # Safety
/// `wr` must be a valid list of `n` send WRs.
pub unsafe fn post_send_batch(qp: &Qp, wr: *mut ibv_send_wr, n: usize) -> c_int {
    if verbs_rt::check::hooks_on() {
        // SAFETY: forwarded contract.
        return unsafe { traced_post_send_batch(qp, wr, n) };
    }
    // SAFETY: forwarded contract.
    unsafe { post_send_batch_inner(qp, wr, n) }
}

/// # Safety
/// As [`post_send_batch`].
#[cold]
#[inline(never)]
unsafe fn traced_post_send_batch(qp: &Qp, wr: *mut ibv_send_wr, n: usize) -> c_int {
    let (trace, check) = (verbs_rt::trace::on(), verbs_rt::check::on());
    let ibv = qp as *const Qp as *mut ibv_qp;
    let rec = if check {
        // SAFETY: the caller's list.
        Some(unsafe { super::check::before_post_send(qp, wr, "ibv_wr_complete") })
    } else {
        None
    };
    if trace {
        // SAFETY: the caller's list; a Qp starts with its ibv_qp.
        unsafe { crate::trace::send_wrs("wr_complete", ibv, wr) };
    }
    // SAFETY: forwarded contract.
    let rc = unsafe { post_send_batch_inner(qp, wr, n) };
    if let Some(rec) = rec {
        // All or nothing: on failure none was posted (`bad` is the head).
        // SAFETY: the caller's list, as posted.
        unsafe { super::check::after_post_send(qp, rec, rc, wr, wr) };
    }
    if trace {
        crate::trace::post_result("wr_complete", ibv as usize, rc, None);
    }
    rc
}

/// # Safety
/// As [`post_send_batch`].
unsafe fn post_send_batch_inner(qp: &Qp, wr: *mut ibv_send_wr, n: usize) -> c_int {
    let mut g = qp.lock_for_post();
    if g.state == IBV_QPS_RESET {
        return libc::EINVAL;
    }
    if g.sq.room() < n as u64 {
        return libc::ENOMEM;
    }
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: p walks the caller's list.
        let w = unsafe { &*p };
        // SAFETY: as above.
        if let Err(e) = unsafe { check_send_wr(&g, w) } {
            return e;
        }
        p = w.next;
    }
    // SAFETY: forwarded contract; every WR was checked.
    unsafe { post_locked(qp, &mut g, wr, std::ptr::null_mut()) }
}

pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    if verbs_rt::check::hooks_on() {
        // SAFETY: forwarded contract.
        return unsafe { traced_post_send(qp, wr, bad_wr) };
    }
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    let mut g = q.lock_for_post();
    // SAFETY: wr is the caller's list.
    unsafe { post_locked(q, &mut g, wr, bad_wr) }
}

/// `post_send` with its WRs and a failure traced, and checked by the
/// misuse checker (`crate::check`), as each is on.
///
/// # Safety
/// As for `post_send`.
#[cold]
#[inline(never)]
unsafe fn traced_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let (trace, check) = (verbs_rt::trace::on(), verbs_rt::check::on());
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    let rec = if check {
        // SAFETY: the caller's list.
        Some(unsafe { super::check::before_post_send(q, wr, "ibv_post_send") })
    } else {
        None
    };
    if trace {
        // SAFETY: the caller's list and QP.
        unsafe { crate::trace::send_wrs("post_send", qp, wr) };
    }
    let rc = {
        let mut g = q.lock_for_post();
        // SAFETY: wr is the caller's list.
        unsafe { post_locked(q, &mut g, wr, bad_wr) }
    };
    // SAFETY: on failure *bad_wr names an element of the caller's list.
    let bad = (rc != 0 && !bad_wr.is_null())
        .then(|| unsafe { *bad_wr })
        .filter(|b| !b.is_null());
    if let Some(rec) = rec {
        let bad = bad.unwrap_or(std::ptr::null_mut());
        // SAFETY: the caller's list, as posted.
        unsafe { super::check::after_post_send(q, rec, rc, wr, bad) };
    }
    if trace {
        // SAFETY: as above.
        let bad = bad.map(|b| unsafe { (*b).wr_id });
        crate::trace::post_result("post_send", qp as usize, rc, bad);
    }
    rc
}

/// `ibv_bind_mw` (type 1): a bind work request on `qp`'s send queue, with
/// the next rkey (the low 8 bits bumped); the window's `rkey` shows it once
/// the request is posted (`mw::bind_posted`).
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    let Some(m) = crate::mw::Mw::lookup(mw) else {
        return libc::EINVAL;
    };
    if mw_bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's bind description (non-NULL).
    let b = unsafe { *mw_bind };
    let old = m.rkey();
    let new = (old & 0xffff_ff00) | (old.wrapping_add(1) & 0xff);
    let mut wr = ibv_send_wr::zeroed();
    wr.wr_id = b.wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = b.send_flags;
    wr.ext.bind_mw = ibv_send_wr_bind_mw {
        mw,
        rkey: new,
        bind_info: b.bind_info,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: qp is the caller's QP; the data path trusts it as
    // ibv_post_send does. wr is a complete WR on our stack.
    unsafe { post_send(qp, &mut wr, &mut bad) }
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if verbs_rt::check::hooks_on() {
        // SAFETY: forwarded contract.
        return unsafe { hooked_post_recv(qp, wr, bad_wr) };
    }
    // SAFETY: forwarded contract.
    unsafe { post_recv_inner(qp, wr, bad_wr) }
}

/// `post_recv` traced and checked, as each is on.
///
/// # Safety
/// As for `post_recv`.
#[cold]
#[inline(never)]
unsafe fn hooked_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let (trace, check) = (verbs_rt::trace::on(), verbs_rt::check::on());
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    let rec = if check {
        // SAFETY: the caller's list.
        Some(unsafe { super::check::before_post_recv(q, wr) })
    } else {
        None
    };
    if trace {
        // SAFETY: the caller's list.
        unsafe { crate::trace::recv_wrs("post_recv", qp as usize, wr) };
    }
    // SAFETY: forwarded contract.
    let rc = unsafe { post_recv_inner(qp, wr, bad_wr) };
    if let Some(rec) = rec {
        let bad = if rc != 0 && !bad_wr.is_null() {
            // SAFETY: out-pointer supplied by the caller, set on failure.
            unsafe { *bad_wr }
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: the caller's list, as posted.
        unsafe { super::check::after_post_recv(q, rec, rc, wr, bad) };
    }
    if trace {
        crate::trace::post_result("post_recv", qp as usize, rc, None);
    }
    rc
}

/// # Safety
/// As for `post_recv`.
#[inline(always)]
unsafe fn post_recv_inner(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    // Receives of a QP on an SRQ are posted to the SRQ; XRC QPs have no
    // receive queue.
    if q.srq.is_some() || q.recv_cq.is_none() {
        if !bad_wr.is_null() {
            // SAFETY: out-pointer supplied by the caller.
            unsafe { *bad_wr = wr };
        }
        return libc::EINVAL;
    }
    let mut g = q.lock_for_post();
    let mut rc = 0;
    // Only a stalled incoming connection needs to hear of a first receive;
    // asked first, as a mailbox's head is a line same-host peers write.
    let was_empty = g.is_stalled() && g.rq.is_empty();
    while !wr.is_null() {
        // SAFETY: wr is an element of the caller's list.
        let w = unsafe { &*wr };
        // From INIT on receives wait in the queue for RTR; RESET refuses
        // them, as the spec (C10-97.2.1), rxe and rdma-core's own tests
        // require (mlx4 and mlx5 take them).
        if g.state == IBV_QPS_RESET {
            rc = libc::EINVAL;
            break;
        }
        // SAFETY: the caller's WR describes its own SGE array.
        let sges = match unsafe { g.rq.checked_sges(w) } {
            Ok(s) => s,
            Err(e) => {
                rc = e;
                break;
            }
        };
        if g.state == IBV_QPS_ERR {
            q.complete_recv(
                &mut g,
                Cqe {
                    wr_id: w.wr_id,
                    status: IBV_WC_WR_FLUSH_ERR,
                    opcode: IBV_WC_RECV,
                    ..Cqe::default()
                },
            );
        } else {
            g.rq.push(w.wr_id, sges);
        }
        wr = w.next;
    }
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { *bad_wr = wr };
    }
    q.wake_waiting_peer(&mut g);
    if was_empty && !g.rq.is_empty() && g.is_stalled() {
        if let Ok(e) = engine() {
            e.kick(q.serial);
        }
    }
    rc
}
