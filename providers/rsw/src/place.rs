//! Placing a message into a receive, the one way every path does it: the
//! TCP responder (`engine::responder`), the same-host requester writing
//! into a peer's receive (`engine::samehost`) and an XRC receive QP
//! writing into another process's SRQ (`remote_srq`). The receive's
//! scatter list is checked against the key table of the process that
//! posted it ([`Keys`]: ours, or a same-host peer's mapped read-only) and
//! turned into iovecs ([`scatter`]); the receive completion is built from
//! what the message says ([`recv_cqe`]) and carried through a mailbox in
//! one form ([`delivered`], [`received`]; a small SEND's bytes too,
//! [`inline`]). Moving the bytes stays with
//! each path (a socket read, a cross-process copy).

use verbs_abi::*;

use crate::cq::Cqe;
use crate::mr::MrTable;
use crate::transport::local::Peer;
use crate::transport::mailbox::{Delivered, Inline, FLAG_IMM, FLAG_SOLICITED};
use crate::wire::Op;

/// A key table a receive's buffers are checked against.
pub trait Keys {
    /// Where `len` bytes at `addr` are, if `lkey` of PD `pd` lets the
    /// receive write them.
    fn writable(&self, lkey: u32, addr: u64, len: u64, pd: u32) -> Option<*mut u8>;
}

/// Our own keys (under the table's read lock).
impl Keys for MrTable {
    #[inline]
    fn writable(&self, lkey: u32, addr: u64, len: u64, pd: u32) -> Option<*mut u8> {
        self.local(lkey, addr, len, pd, true).ok()
    }
}

/// A same-host process's keys, as its published table says.
impl Keys for Peer {
    #[inline]
    fn writable(&self, lkey: u32, addr: u64, len: u64, pd: u32) -> Option<*mut u8> {
        self.local_buffer(lkey, addr, len, pd).map(|h| h as *mut u8)
    }
}

/// The iovecs of bytes `off..off + len` of a receive's scatter list
/// `sges` (PD `pd`), each piece checked against `keys`; empty pieces are
/// skipped. Returns how many iovecs and how many of the `len` bytes the
/// list had no room for; None if a key refuses or `out` is too short.
#[inline]
pub fn scatter<K: Keys + ?Sized>(
    keys: &K,
    sges: &[ibv_sge],
    off: u64,
    len: usize,
    pd: u32,
    out: &mut [libc::iovec],
) -> Option<(usize, usize)> {
    crate::util::sge_iovs(sges, off, len, out, |lkey, addr, l| {
        keys.writable(lkey, addr, l, pd)
    })
}

/// The successful receive completion a message of `op` makes (None for
/// an op that consumes no receive): `imm` is its immediate data when
/// `with_imm`, or the rkey a SEND_WITH_INV invalidates. The caller fills
/// in the receive, the length and the source QP.
#[inline]
pub fn recv_cqe(op: Op, with_imm: bool, imm: u32, solicited: bool) -> Option<Cqe> {
    let opcode = match op {
        Op::Send | Op::SendImm | Op::SendInv => IBV_WC_RECV,
        Op::WriteImm => IBV_WC_RECV_RDMA_WITH_IMM,
        _ => return None,
    };
    let inv = op == Op::SendInv;
    Some(Cqe {
        status: IBV_WC_SUCCESS,
        opcode,
        imm: if with_imm || inv { imm } else { 0 },
        wc_flags: if with_imm {
            IBV_WC_WITH_IMM
        } else if inv {
            IBV_WC_WITH_INV
        } else {
            0
        },
        solicited,
        ..Cqe::default()
    })
}

/// A receive completion as a mailbox carries it to the receive's owner;
/// `qp_num` names the receiving QP when it is not the mailbox's own.
#[inline]
pub fn delivered(e: &Cqe, qp_num: u32) -> Delivered {
    let mut flags = 0;
    if e.wc_flags & IBV_WC_WITH_IMM != 0 {
        flags |= FLAG_IMM;
    }
    if e.solicited {
        flags |= FLAG_SOLICITED;
    }
    Delivered {
        wr_id: e.wr_id,
        byte_len: e.byte_len,
        imm: e.imm,
        opcode: e.opcode,
        flags,
        status: e.status,
        src_qp: e.src_qp,
        qp_num,
    }
}

/// The completion a mailbox brought, for QP `qpn`'s receive CQ.
#[inline]
pub fn received(d: &Delivered, qpn: u32) -> Cqe {
    Cqe {
        wr_id: d.wr_id,
        status: d.status,
        opcode: d.opcode,
        byte_len: d.byte_len,
        imm: d.imm,
        qp_num: qpn,
        src_qp: d.src_qp,
        wc_flags: if d.flags & FLAG_IMM != 0 {
            IBV_WC_WITH_IMM
        } else {
            0
        },
        solicited: d.flags & FLAG_SOLICITED != 0,
        ..Cqe::default()
    }
}

/// Copies a small SEND's payload into the receive buffer its SGE names
/// (an lkey of `pd`, locally writable); false if the SGE does not check or
/// the memory is gone.
#[inline]
pub fn inline(t: &MrTable, i: &Inline, pd: u32) -> bool {
    match t.local(i.sge.lkey, i.sge.addr, i.len as u64, pd, true) {
        Ok(p) if i.len > 0 => {
            // SAFETY: p is i.len bytes of registered, locally writable
            // memory checked under the key table's lock (held); a fault
            // (memory unmapped since) is caught.
            unsafe { crate::guard::copy(p, i.data.as_ptr(), i.len) }.is_ok()
        }
        Ok(_) => true,
        Err(_) => false,
    }
}
