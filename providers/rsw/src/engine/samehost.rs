//! The same-host path's requests (`transport::local`): a WRITE, READ or
//! atomic done by the requester itself between the two processes'
//! memory, and a SEND (or WRITE_WITH_IMM) placed into a receive the peer
//! posted to its mailbox, with nothing of the peer's involved. The
//! requester asks [`direct`] first for each WQE when nothing is in flight
//! and sends it over the connection when the answer is `No`; what it says
//! is in [`Direct`]. Below the requester: it reads the QP's state and
//! the outgoing connection, and calls nothing of the requester's.

use verbs_abi::*;

use super::{Qp, QpInner};
use crate::cq::Cqe;
use crate::mr;
use crate::place;
use crate::progress::engine;
use crate::transport::{local, mailbox, MAX_IOV};
use crate::util::{iov, mono_ns};
use crate::wire::Op;
use crate::wq::conn::RNR_DIRECT_NS;
use crate::wq::rnr_timer_ns;

/// What the same-host path made of a WQE.
pub enum Direct {
    /// Not taken: it goes the usual way.
    No,
    /// Done; `ring`: the peer waits for completions (its CQ is armed), so
    /// a doorbell follows on the connection; `rtr`: the peer QP is in RTR,
    /// and its first request must raise `IBV_EVENT_COMM_EST` even if it
    /// does not poll (one doorbell does that); `more`: that many WQEs
    /// behind it were done with it (a batch of atomics).
    Done { ring: bool, rtr: bool, more: u32 },
    /// The peer's receive was taken but its buffers could not be written:
    /// the WQE fails with this status (the peer's QP fails too).
    Failed(ibv_wc_status),
    /// The peer has no receive posted yet: try again shortly.
    Wait,
    /// Earlier requests are on the wire: try again when they are answered.
    Hold,
    /// Try again at once.
    Retry,
}

/// The same-host path (`transport::local`): an RDMA WRITE or READ the
/// peer's published table allows is done here and now, straight between
/// the two processes' memory, and a SEND (or WRITE_WITH_IMM) takes the
/// peer's oldest posted receive from its mailbox, writes the payload into
/// it and leaves the completion there, with nothing of the peer's
/// involved. Only when nothing is in flight, so it cannot overtake an
/// earlier request; `No` sends it the usual way (whose responder then
/// gives the exact error or the RNR wait, if there is one).
pub fn direct(qp: &Qp, g: &QpInner, seq: u64) -> Direct {
    let Some(peer) = g.req.out_ref().and_then(|o| o.direct.as_ref()) else {
        return Direct::No;
    };
    let Some(remote) = g.remote else {
        return Direct::No;
    };
    let w = g.sq.wqe(seq);
    // A rendezvous FIN (`engine::rndv`) goes over the connection, behind
    // the ACK of the request it answers: a requester sees its SEND
    // complete before the FIN arrives, as with hardware.
    if w.tm == crate::ring::TM_FIN {
        return Direct::No;
    }
    if g.sq.in_flight() || g.sq.oldest() != Some(seq) {
        // Behind requests on the wire: wait for their responses rather
        // than follow them there (the path stays direct).
        return if matches!(
            w.op,
            Op::Write
                | Op::ReadReq
                | Op::Send
                | Op::SendImm
                | Op::WriteImm
                | Op::CmpSwap
                | Op::FetchAdd
        ) {
            Direct::Hold
        } else {
            Direct::No
        };
    }
    let done = Direct::Done {
        ring: false,
        rtr: false,
        more: 0,
    };
    let one_sided = match w.op {
        Op::Write => IBV_ACCESS_REMOTE_WRITE,
        Op::ReadReq => IBV_ACCESS_REMOTE_READ,
        Op::Send | Op::SendImm | Op::WriteImm => return deliver(qp, g, seq, peer, remote.qpn),
        Op::CmpSwap | Op::FetchAdd => return atomic(qp, g, seq, peer, remote.qpn),
        _ => return Direct::No,
    };
    let remote_qpn = remote.qpn;
    let len = w.len as usize;
    if len == 0 {
        // Touches no memory, but still needs a peer that receives.
        return if peer.receives(remote_qpn) {
            done
        } else {
            Direct::No
        };
    }
    let Some(at) = peer.check(remote_qpn, w.rkey, w.remote_addr, len as u64, one_sided) else {
        return Direct::No;
    };
    let remote = [iov(at as *const u8, len)];
    let read = one_sided == IBV_ACCESS_REMOTE_READ;
    let moved = with_local_iovs(qp, g, seq, read, |v| {
        // SAFETY: `with_local_iovs` hands registered memory of ours
        // checked under the key table's lock, held across the copy
        // (writable for a READ).
        unsafe {
            if read {
                peer.read(v, at, len)
            } else {
                peer.write_v(v, &remote, len)
            }
        }
    });
    if moved == Some(true) {
        // A peer in RTR raises IBV_EVENT_COMM_EST at its first request.
        Direct::Done {
            ring: false,
            rtr: peer.in_rtr(remote_qpn),
            more: 0,
        }
    } else {
        Direct::No
    }
}

/// How long a same-host atomic waits for the peer's atomic lock before it
/// goes over TCP instead (its holder is alive but does not let go).
const ATOMIC_PATIENCE_NS: u64 = 10_000_000;

/// Atomics done in one go on the same-host path: they cost two syscalls
/// and a lock whether one or many, and `ib_atomic_bw`-style streams keep
/// many posted.
pub const ATOMIC_BATCH: usize = 32;

/// Fills `lv`/`rv` with one iovec pair per run of adjacent `words` (sorted
/// addresses in the peer) that `take` keeps, the local side pointing at
/// the runs' values in the array at `vals` (indexed like `words`; written
/// through the iovecs when they are read into); returns how many.
fn word_runs(
    words: &[u64],
    take: impl Fn(usize) -> bool,
    vals: *mut u64,
    lv: &mut [libc::iovec; ATOMIC_BATCH],
    rv: &mut [libc::iovec; ATOMIC_BATCH],
) -> usize {
    let mut runs = 0;
    let mut i = 0;
    while i < words.len() {
        if !take(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i + 1 < words.len() && take(i + 1) && words[i + 1] == words[i] + 8 {
            i += 1;
        }
        let len = (i + 1 - start) * 8;
        lv[runs] = iov(vals.wrapping_add(start) as *const u8, len);
        rv[runs] = iov(words[start] as *const u8, len);
        runs += 1;
        i += 1;
    }
    runs
}

/// Compare-and-swap or fetch-and-add on a same-host peer's memory, with
/// the atomics posted right behind it: read every target word, compute in
/// posting order, write back the changed ones, all under the peer's
/// atomic lock, which its own responder takes too (`transport::atomics`);
/// then each original value into its WQE's SGE. Anything unusual (a
/// misaligned target, a key the table does not allow, no lock word) goes
/// over TCP for the exact status.
fn atomic(qp: &Qp, g: &QpInner, seq: u64, peer: &local::Peer, qpn: u32) -> Direct {
    let Some(word) = peer.atomic_word() else {
        return Direct::No;
    };
    let t = mr::table();
    // The batch: where each result goes (checked first, and the table's
    // lock held to the end, so they stay valid; one that cannot take its
    // result goes over TCP, whose responder runs it before the response
    // fails locally, as hardware orders it) and the target's host address.
    let mut ops = [(std::ptr::null_mut::<u8>(), 0u64); ATOMIC_BATCH];
    let n = atomic_batch(qp, g, seq, peer, qpn, &t, &mut ops);
    if n == 0 {
        return Direct::No;
    }
    // Each distinct word once, by address: adjacent words travel as one
    // iovec (the kernel pins memory per iovec, the bulk of a call's cost).
    let mut words = [0u64; ATOMIC_BATCH];
    let mut nw = 0;
    for &(_, at) in &ops[..n] {
        if let Err(i) = words[..nw].binary_search(&at) {
            words.copy_within(i..nw, i + 1);
            words[i] = at;
            nw += 1;
        }
    }
    let Some(held) = crate::transport::atomics::lock(word, ATOMIC_PATIENCE_NS) else {
        return Direct::No;
    };
    let mut old = [0u64; ATOMIC_BATCH];
    let mut lv = [iov(std::ptr::null(), 0); ATOMIC_BATCH];
    let mut rv = [iov(std::ptr::null(), 0); ATOMIC_BATCH];
    let runs = word_runs(&words[..nw], |_| true, old.as_mut_ptr(), &mut lv, &mut rv);
    // SAFETY: the local iovecs cover `old`; the remote ones are words the
    // peer's table grants atomic rights to.
    if !unsafe { peer.read_v(&lv[..runs], &rv[..runs], nw * 8) } {
        return Direct::No;
    }
    // In posting order, each seeing the ones before it.
    let mut new = old;
    let found = run_in_order(g, seq, &ops[..n], &words[..nw], &mut new);
    let mut changed = [false; ATOMIC_BATCH];
    for i in 0..nw {
        changed[i] = new[i] != old[i];
    }
    let bytes = changed.iter().filter(|&&c| c).count() * 8;
    let runs = word_runs(
        &words[..nw],
        |i| changed[i],
        new.as_mut_ptr(),
        &mut lv,
        &mut rv,
    );
    // SAFETY: as for the read.
    if runs > 0 && !unsafe { peer.write_v(&lv[..runs], &rv[..runs], bytes) } {
        // The words read a moment ago cannot be written (the target
        // unmapped or protected its memory): some may have been, so
        // nothing may run again over TCP; the responder would fail it
        // the same way.
        return Direct::Failed(IBV_WC_REM_ACCESS_ERR);
    }
    drop(held);
    local::count_atomic_batch();
    for (k, &(res, _)) in ops[..n].iter().enumerate() {
        let v = found[k].to_ne_bytes();
        // SAFETY: res is 8 bytes of registered, locally writable memory
        // (checked under the table lock, still held); it need not be
        // aligned; a fault (memory unmapped since) is caught.
        if unsafe { crate::guard::copy(res, v.as_ptr(), 8) }.is_err() {
            return Direct::Failed(IBV_WC_LOC_PROT_ERR);
        }
    }
    Direct::Done {
        ring: false,
        rtr: peer.in_rtr(qpn),
        more: n as u32 - 1,
    }
}

/// Fills `ops` with the atomics from `seq` on that may run on the peer's
/// memory together: where each result goes, checked under `t`, and the
/// target's host address; how many.
fn atomic_batch(
    qp: &Qp,
    g: &QpInner,
    seq: u64,
    peer: &local::Peer,
    qpn: u32,
    t: &mr::MrTable,
    ops: &mut [(*mut u8, u64); ATOMIC_BATCH],
) -> usize {
    let mut n = 0;
    for s in seq..g.sq.outstanding().end {
        if n == ATOMIC_BATCH {
            break;
        }
        let w = g.sq.wqe(s);
        if !w.op.is_atomic() || w.len != 8 || !w.remote_addr.is_multiple_of(8) {
            break;
        }
        let Some(at) = peer
            .check(qpn, w.rkey, w.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC)
            .filter(|a| a.is_multiple_of(8))
        else {
            break;
        };
        let Some(sge) = g.sq.sges(s).first().filter(|_| !w.inline) else {
            break;
        };
        let Ok(res) = t.local(sge.lkey, sge.addr, 8, qp.pd_id, true) else {
            break;
        };
        ops[n] = (res, at);
        n += 1;
    }
    n
}

/// Runs the batch on the target words' values (`new`, indexed like
/// `words`), in posting order, each seeing the ones before it; the value
/// each atomic found.
fn run_in_order(
    g: &QpInner,
    seq: u64,
    ops: &[(*mut u8, u64)],
    words: &[u64],
    new: &mut [u64; ATOMIC_BATCH],
) -> [u64; ATOMIC_BATCH] {
    let mut found = [0u64; ATOMIC_BATCH];
    for (k, &(_, at)) in ops.iter().enumerate() {
        let w = g.sq.wqe(seq + k as u64);
        let i = words.binary_search(&at).unwrap_or(0);
        let cur = new[i];
        found[k] = cur;
        new[i] = match w.op {
            Op::CmpSwap if cur == w.compare_add => w.swap,
            Op::CmpSwap => cur,
            _ => cur.wrapping_add(w.compare_add),
        };
    }
    found
}

/// A same-host SEND found no receive (or no room for its completion):
/// it waits as an RNR NAK would make it wait, `rnr_retry` + 1 times the
/// peer's `min_rnr_timer` (for ever with 7), retried whenever this QP's
/// CQ is polled. A program that waits without polling gets a tick after
/// [`RNR_DIRECT_NS`]: from then on the peer rings us (a doorbell on the
/// connection) when it posts a receive or drains.
pub fn rnr_wait(qp: &Qp, g: &mut QpInner) -> Direct {
    let retries = g.attr.rnr_retry;
    let Some(remote) = g.remote else {
        return Direct::No;
    };
    let Ok(out) = g.req.out() else {
        return Direct::No;
    };
    let now = mono_ns();
    if out.rnr_since == 0 {
        out.rnr_since = now;
        out.rnr_polls = qp.cq_polls();
        // A tick still pending from an earlier wait serves this one too:
        // short waits come one after another when a receiver re-posts as
        // it polls, and each would otherwise add a timer.
        if out.rnr_tick <= now || out.rnr_tick > now + RNR_DIRECT_NS {
            out.rnr_tick = now + RNR_DIRECT_NS;
            if let Ok(e) = engine() {
                e.add_timer(out.rnr_tick, qp.serial);
            }
        }
        return Direct::Wait;
    }
    let Some(peer) = out.direct.as_ref() else {
        return Direct::No;
    };
    if retries < 7 {
        let budget = rnr_timer_ns(peer.rnr_timer(remote.qpn)) * (retries as u64 + 1);
        if now - out.rnr_since >= budget {
            return Direct::Failed(IBV_WC_RNR_RETRY_EXC_ERR);
        }
    }
    if now >= out.rnr_tick {
        let polls = qp.cq_polls();
        if polls != out.rnr_polls {
            // The program polls: each poll looks again, and a doorbell
            // would only wake our progress thread to take the QP from the
            // poller.
            out.rnr_polls = polls;
            out.rnr_tick = now + RNR_DIRECT_NS;
            if let Ok(e) = engine() {
                e.add_timer(out.rnr_tick, qp.serial);
            }
            return Direct::Wait;
        }
        let rung = peer
            .mailbox(remote.qpn)
            .is_some_and(|(_, _, m)| m.set_rnr_waiting());
        // Slow ticks from now on, in case a doorbell is lost to a peer
        // that went away, and to notice the RNR budget's end; quick ones
        // where the peer cannot be trusted to see the flag (`shm::asym`).
        let tick = if rung {
            RNR_DIRECT_NS * 100
        } else {
            RNR_DIRECT_NS
        };
        out.rnr_tick = now + tick;
        if let Ok(e) = engine() {
            e.add_timer(out.rnr_tick, qp.serial);
        }
        // Look again: a receive posted before the peer saw the flag
        // rings nobody.
        return Direct::Retry;
    }
    Direct::Wait
}

/// Runs `f` on the WQE's local buffers as iovecs (its inline copy, or its
/// SGEs checked under the key table's lock, held during `f`); None if an
/// SGE no longer checks.
fn with_local_iovs<T>(
    qp: &Qp,
    g: &QpInner,
    seq: u64,
    write: bool,
    f: impl FnOnce(&[libc::iovec]) -> T,
) -> Option<T> {
    let w = g.sq.wqe(seq);
    if w.inline {
        let d = g.sq.inline_data(seq);
        return Some(f(&[iov(d.as_ptr(), d.len())]));
    }
    let mut v = [iov(std::ptr::null(), 0); MAX_IOV];
    let t = mr::table();
    let n = t
        .sge_iovs(g.sq.sges(seq), 0, w.len as usize, qp.pd_id, write, &mut v)
        .ok()?;
    Some(f(&v[..n]))
}

/// SEND, SEND_WITH_IMM or WRITE_WITH_IMM into a same-host peer's mailbox
/// (see [`direct`]).
fn deliver(qp: &Qp, g: &QpInner, seq: u64, peer: &local::Peer, qpn: u32) -> Direct {
    let Some((pd, rtr, mbox)) = peer.mailbox(qpn) else {
        return Direct::No;
    };
    let w = g.sq.wqe(seq);
    let imm = matches!(w.op, Op::SendImm | Op::WriteImm);
    let Some(e) = place::recv_cqe(w.op, imm, w.imm, w.solicited) else {
        return Direct::No;
    };
    let len = w.len as u64;
    let mut remote = [iov(std::ptr::null(), 0); MAX_IOV];
    let mut n = 0;
    if w.op == Op::WriteImm && len > 0 {
        let Some(at) = peer.check(qpn, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_WRITE) else {
            return Direct::No;
        };
        remote[0] = iov(at as *const u8, len as usize);
        n = 1;
    }
    // No receive posted (RNR) or no room for its completion: wait (see
    // `OutConn::rnr_since`).
    let o = match mbox.peek() {
        Ok(o) => o,
        // UC has no RNR: the responder drops what finds no receive.
        Err(false) if g.reliable() => return Direct::Wait,
        Err(_) => return Direct::No,
    };
    if w.op != Op::WriteImm {
        // The receive's buffers, checked as the peer's responder would;
        // anything wrong (too small, a bad lkey) is left to it.
        match place::scatter(peer, &o.sges[..o.nsge], 0, len as usize, pd, &mut remote) {
            Some((k, 0)) => n = k,
            _ => return Direct::No,
        }
    }
    // A small SEND whose receive's first SGE holds it travels inside the
    // completion: no syscall here, the peer copies it when it polls.
    let mut inline = None;
    if w.op != Op::WriteImm
        && len > 0
        && len as usize <= mailbox::INLINE_MAX
        && o.sges[0].length as u64 >= len
    {
        let Some(i) = gather_inline(qp, g, seq, o.sges[0], len as usize) else {
            return Direct::No;
        };
        inline = Some(i);
    }
    let moved = if len == 0 || inline.is_some() {
        if !mbox.commit(&o) {
            return Direct::No;
        }
        true
    } else {
        let copied = write_payload(qp, g, seq, peer, &mbox, &o, &remote[..n]);
        match copied {
            Some(Some(moved)) => moved,
            _ => return Direct::No,
        }
    };
    let e = Cqe {
        wr_id: o.wr_id,
        byte_len: if moved { w.len } else { 0 },
        status: if moved {
            IBV_WC_SUCCESS
        } else {
            IBV_WC_LOC_PROT_ERR
        },
        src_qp: qp.qpn,
        ..e
    };
    let mut d = place::delivered(&e, 0);
    if inline.is_some() {
        d.flags |= mailbox::FLAG_INLINE;
    }
    let ring = mbox.deliver(&d, inline.as_ref());
    if moved {
        Direct::Done { ring, rtr, more: 0 }
    } else {
        Direct::Failed(IBV_WC_REM_OP_ERR)
    }
}

/// A small SEND's payload copied into the completion that carries it
/// (for the receive's first SGE, `sge`); None if our memory fails.
fn gather_inline(
    qp: &Qp,
    g: &QpInner,
    seq: u64,
    sge: ibv_sge,
    len: usize,
) -> Option<mailbox::Inline> {
    let mut i = mailbox::Inline {
        sge,
        len,
        data: [0; mailbox::INLINE_MAX],
    };
    let gathered = with_local_iovs(qp, g, seq, false, |v| {
        let mut at = 0;
        for piece in v {
            // SAFETY: registered memory of ours checked under the key
            // table's lock (held by `with_local_iovs`), copied into our
            // buffer with room for all of it (len <= INLINE_MAX); a
            // fault (memory unmapped since) is caught.
            let r = unsafe {
                crate::guard::copy(
                    i.data.as_mut_ptr().add(at),
                    piece.iov_base as *const u8,
                    piece.iov_len,
                )
            };
            if r.is_err() {
                return false;
            }
            at += piece.iov_len;
        }
        at == len
    });
    (gathered == Some(true)).then_some(i)
}

/// Takes the peer's receive `o` and writes the payload into it (`remote`);
/// None, with the receive left, when our own buffers fail first.
fn write_payload(
    qp: &Qp,
    g: &QpInner,
    seq: u64,
    peer: &local::Peer,
    mbox: &mailbox::Target,
    o: &mailbox::Offered,
    remote: &[libc::iovec],
) -> Option<Option<bool>> {
    let len = g.sq.wqe(seq).len as usize;
    // Our own buffers are proven readable before the peer's receive is
    // taken: a gather from memory we unmapped is our local error (TCP
    // reports it), and must not cost the peer its receive.
    with_local_iovs(qp, g, seq, false, |v| {
        // SAFETY: the iovecs are registered memory of ours, checked
        // under the key table's lock (held); a fault is caught.
        let ours = v
            .iter()
            .all(|x| unsafe { crate::guard::readable(x.iov_base as *const u8, x.iov_len) });
        if !ours || !mbox.commit(o) {
            return None;
        }
        // SAFETY: as in `direct`; the remote iovecs are the peer's,
        // checked by its kernel.
        Some(unsafe { peer.write_v(v, remote, len) })
    })
}
