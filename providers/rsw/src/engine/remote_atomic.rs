//! A peer's compare-and-swap or fetch-and-add on our memory, as every
//! responder runs it (over TCP and over RoCEv2): the QP's and the key's
//! rights checked, then the CPU's atomic under the process's atomic lock,
//! which same-host peers take for their own atomics on this memory.

use verbs_abi::*;

use super::{Qp, QpInner};
use crate::{guard, mr};

/// What the peer asked for.
#[derive(Clone, Copy, Debug)]
pub enum Operation {
    CmpSwap { compare: u64, swap: u64 },
    FetchAdd(u64),
}

/// How long a responder waits for the atomic lock held by a live
/// same-host peer that does not let go (stopped in its critical section,
/// say) before it goes ahead without it.
const PATIENCE_NS: u64 = 1_000_000_000;

/// Runs `op` on the 8 bytes at `va` that `rkey` names; the original
/// value, or None when the QP, the key or the memory refuses it.
pub fn run(qp: &Qp, g: &QpInner, rkey: u32, va: u64, op: Operation) -> Option<u64> {
    if g.attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC == 0 {
        return None;
    }
    let t = mr::table();
    let p = t
        .remote(
            rkey,
            va,
            8,
            qp.target_pd(g),
            IBV_ACCESS_REMOTE_ATOMIC,
            qp.qpn,
        )
        .ok()?;
    // The wire address is in the MR's iova space; the host address may
    // be aligned differently (ibv_reg_mr_iova).
    if !(p as usize).is_multiple_of(8) {
        return None;
    }
    let p = p as *mut u64;
    let _held = own_lock();
    // SAFETY: p is 8 bytes of registered memory with remote atomic
    // rights, checked under the MR table's lock (held), and 8-aligned;
    // the CPU's atomics make the operation atomic against other QPs and
    // the application's own atomics. Memory unmapped since its
    // registration faults, which the guard reports.
    unsafe {
        match op {
            Operation::CmpSwap { compare, swap } => guard::cas64(p, compare, swap),
            Operation::FetchAdd(add) => guard::fetch_add64(p, add),
        }
    }
    .ok()
}

/// This process's atomic lock (`transport::atomics`), when same-host
/// peers may take it.
pub fn own_lock() -> Option<crate::transport::atomics::Held<'static>> {
    let word = crate::transport::mailbox::own_atomic_word()?;
    let held = crate::transport::atomics::lock(word, PATIENCE_NS);
    if held.is_none() {
        log::warn!("a same-host peer holds the atomic lock and does not let go: going ahead");
    }
    held
}
