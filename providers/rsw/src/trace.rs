//! The tracer's data-path records (`RDMA_TRACE`, see `verbs_rt::trace`):
//! work requests as they are posted and completions as they are polled.
//! Every trace point is `if trace::on() { return traced(...) }` at the top
//! of a data-path call: off, one predictable branch; the traced variants
//! here are cold and call the untraced body.

use core::ffi::c_int;

use verbs_abi::*;
use verbs_rt::trace::{errno_name, record, Val};

pub(crate) fn wr_opcode_name(op: ibv_wr_opcode) -> &'static str {
    match op {
        0 => "RDMA_WRITE",
        1 => "RDMA_WRITE_WITH_IMM",
        2 => "SEND",
        3 => "SEND_WITH_IMM",
        4 => "RDMA_READ",
        5 => "ATOMIC_CMP_AND_SWP",
        6 => "ATOMIC_FETCH_AND_ADD",
        7 => "LOCAL_INV",
        8 => "BIND_MW",
        9 => "SEND_WITH_INV",
        10 => "TSO",
        11 => "DRIVER1",
        12 => "FLUSH",
        13 => "ATOMIC_WRITE",
        _ => "?",
    }
}

pub(crate) fn wc_opcode_name(op: ibv_wc_opcode) -> &'static str {
    match op {
        0 => "SEND",
        1 => "RDMA_WRITE",
        2 => "RDMA_READ",
        3 => "COMP_SWAP",
        4 => "FETCH_ADD",
        5 => "BIND_MW",
        6 => "LOCAL_INV",
        7 => "TSO",
        8 => "FLUSH",
        9 => "ATOMIC_WRITE",
        128 => "RECV",
        129 => "RECV_RDMA_WITH_IMM",
        _ => "?",
    }
}

/// A QP state's name, for the log.
pub(crate) fn qp_state_name(s: ibv_qp_state) -> &'static str {
    match s {
        IBV_QPS_RESET => "RESET",
        IBV_QPS_INIT => "INIT",
        IBV_QPS_RTR => "RTR",
        IBV_QPS_RTS => "RTS",
        IBV_QPS_SQD => "SQD",
        IBV_QPS_SQE => "SQE",
        IBV_QPS_ERR => "ERR",
        _ => "UNKNOWN",
    }
}

pub(crate) fn wc_status_name(s: ibv_wc_status) -> &'static str {
    const N: [&str; 24] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
        "TM_RNDV_INCOMPLETE",
    ];
    N.get(s as usize).copied().unwrap_or("?")
}

/// The SGEs of a WR, or none when the pointer or count is not usable.
///
/// # Safety
/// `sg` names `n` readable SGEs when non-NULL and `n > 0`.
unsafe fn sges<'a>(sg: *const ibv_sge, n: c_int) -> &'a [ibv_sge] {
    if sg.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: forwarded contract.
    unsafe { core::slice::from_raw_parts(sg, n as usize) }
}

/// One record per send WR of the list, then one for a failed post.
///
/// # Safety
/// `wr` is the caller's valid list; `qp` the QP it goes to.
#[cold]
#[inline(never)]
pub(crate) unsafe fn send_wrs(name: &str, qp: *mut ibv_qp, mut wr: *const ibv_send_wr) {
    // SAFETY: the caller's QP.
    let qp_num = unsafe { (*qp).qp_num };
    while !wr.is_null() {
        // SAFETY: an element of the caller's list.
        let w = unsafe { &*wr };
        let mut f: Vec<(&str, Val<'_>)> = vec![
            ("qp_num", Val::from(qp_num)),
            ("wr_id", Val::Hex(w.wr_id)),
            ("opcode", Val::Str(wr_opcode_name(w.opcode))),
            ("send_flags", Val::Hex(w.send_flags as u64)),
            ("num_sge", Val::from(w.num_sge)),
            // SAFETY: the WR describes its own SGE array.
            ("sg_list", Val::Sges(unsafe { sges(w.sg_list, w.num_sge) })),
        ];
        match w.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                // SAFETY: the RDMA member is the one these opcodes use.
                let r = unsafe { w.wr.rdma };
                f.push(("remote_addr", Val::Hex(r.remote_addr)));
                f.push(("rkey", Val::Hex(r.rkey as u64)));
            }
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: the atomic member is the one these opcodes use.
                let a = unsafe { w.wr.atomic };
                f.push(("remote_addr", Val::Hex(a.remote_addr)));
                f.push(("rkey", Val::Hex(a.rkey as u64)));
                f.push(("compare_add", Val::Hex(a.compare_add)));
                f.push(("swap", Val::Hex(a.swap)));
            }
            _ => {}
        }
        if matches!(w.opcode, IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND_WITH_IMM) {
            f.push(("imm_data", Val::Hex(u32::from_be(w.imm_data()) as u64)));
        }
        // SAFETY: ud is plain data; only meaningful for UD QPs.
        if unsafe { (*qp).qp_type } == IBV_QPT_UD {
            // SAFETY: as above.
            let u = unsafe { w.wr.ud };
            f.push(("ah", Val::from(u.ah)));
            f.push(("remote_qpn", Val::from(u.remote_qpn)));
        }
        record("wr", name, qp as usize, &f);
        wr = w.next;
    }
}

/// One record per receive WR of the list.
///
/// # Safety
/// `wr` is the caller's valid list.
#[cold]
#[inline(never)]
pub(crate) unsafe fn recv_wrs(name: &str, obj: usize, mut wr: *const ibv_recv_wr) {
    while !wr.is_null() {
        // SAFETY: an element of the caller's list.
        let w = unsafe { &*wr };
        record(
            "wr",
            name,
            obj,
            &[
                ("wr_id", Val::Hex(w.wr_id)),
                ("num_sge", Val::from(w.num_sge)),
                // SAFETY: the WR describes its own SGE array.
                ("sg_list", Val::Sges(unsafe { sges(w.sg_list, w.num_sge) })),
            ],
        );
        wr = w.next;
    }
}

/// The result of a post call, when it failed.
#[cold]
#[inline(never)]
pub(crate) fn post_result(name: &str, obj: usize, rc: c_int, bad_wr_id: Option<u64>) {
    if rc == 0 {
        return;
    }
    let mut f = vec![("ret", Val::from(rc)), ("err", Val::Str(errno_name(rc)))];
    if let Some(id) = bad_wr_id {
        f.push(("bad_wr_id", Val::Hex(id)));
    }
    record("wr", name, obj, &f);
}

/// One completion as polled.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn completion(
    name: &str,
    cq: usize,
    wr_id: u64,
    status: ibv_wc_status,
    opcode: ibv_wc_opcode,
    byte_len: u32,
    imm: u32,
    qp_num: u32,
    wc_flags: u32,
    vendor_err: u32,
) {
    let mut f = vec![
        ("wr_id", Val::Hex(wr_id)),
        ("status", Val::Str(wc_status_name(status))),
        ("status_code", Val::from(status)),
        ("opcode", Val::Str(wc_opcode_name(opcode))),
        ("byte_len", Val::from(byte_len)),
        ("qp_num", Val::from(qp_num)),
        ("wc_flags", Val::Hex(wc_flags as u64)),
    ];
    if wc_flags & IBV_WC_WITH_IMM != 0 {
        f.push(("imm_data", Val::Hex(u32::from_be(imm) as u64)));
    }
    if status != IBV_WC_SUCCESS {
        f.push(("vendor_err", Val::from(vendor_err)));
    }
    record("wc", name, cq, &f);
}

/// The completions `ibv_poll_cq` returned.
#[cold]
#[inline(never)]
pub(crate) fn wcs(cq: usize, wc: &[ibv_wc]) {
    for w in wc {
        // SAFETY: both union members are u32.
        let imm = unsafe { w.imm.imm_data };
        completion(
            "poll_cq",
            cq,
            w.wr_id,
            w.status,
            w.opcode,
            w.byte_len,
            imm,
            w.qp_num,
            w.wc_flags,
            w.vendor_err,
        );
    }
}
