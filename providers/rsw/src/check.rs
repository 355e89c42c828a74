//! The misuse checker's data-path and object checks (`RDMA_CHECK`, see
//! `verbs_abi::check` for the switch, the report format and the once-only
//! rule). The verbs call in here only when the checker is on: off, each
//! check point is the one branch of `verbs_abi::check::on` (or
//! `hooks_on`, shared with the tracer, on the post and poll paths).
//!
//! What it keeps, only while on: per QP the signaled send WRs posted and
//! not yet polled (wr_id, and a checksum of up to [`SUM_BYTES`] of each
//! SGE's registered memory for SENDs and WRITEs) and the posted receives'
//! ranges; per CQ the signaled sends due on it, the completions polled
//! and, after a re-arm, how many completions it held; the keys this
//! process deregistered or invalidated; async events delivered and not
//! acknowledged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Once};
use std::time::Duration;

use parking_lot::Mutex;
use verbs_abi::check::{report, summary, Obj};
use verbs_abi::*;

use crate::cq::{Cq, CQS};
use crate::qp::{Qp, QPS};

/// Bytes of each send SGE checksummed at post and at completion.
const SUM_BYTES: usize = 4096;
/// Bounds on what is kept per QP and for dead keys.
const MAX_KEPT: usize = 65536;
/// How long a destroy waits for events another thread may still
/// acknowledge before the checker calls it hopeless.
const ACK_GRACE: Duration = Duration::from_secs(1);

struct Sum {
    host: usize,
    len: usize,
    sum: u64,
}

/// A signaled send WR posted and not yet polled.
pub struct Posted {
    wr_id: u64,
    sums: Vec<Sum>,
    /// The post call and WR it came from, to take it back if the post
    /// refuses it.
    call: u64,
    wr: usize,
}

/// What a post recorded before it ran (entries are recorded first: another
/// thread may poll their completions before the post returns).
pub struct Recorded {
    call: u64,
    n: usize,
}

static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A posted receive: wr_id, the ranges its SGEs name, and (as for
/// [`Posted`]) the call and WR it came from.
struct RecvRec {
    wr_id: u64,
    ranges: Vec<(u64, u64)>,
    lkeys: Vec<u32>,
    call: u64,
    wr: usize,
}

#[derive(Default)]
struct QpWatch {
    handle: usize,
    send_cq: usize,
    sends: VecDeque<Posted>,
    /// Posted receives: wr_id and the ranges their SGEs name.
    recvs: VecDeque<RecvRec>,
}

#[derive(Default)]
struct CqWatch {
    /// Signaled send WRs due to complete here, not polled yet.
    due: usize,
    polled: u64,
    /// `polled` plus the completions the CQ held when it was last re-armed.
    held_at_arm: Option<u64>,
}

#[derive(Default)]
struct State {
    qps: HashMap<u32, QpWatch>,
    cqs: HashMap<usize, CqWatch>,
    dead: HashSet<u32>,
    dead_order: VecDeque<u32>,
    /// Async events delivered and not acknowledged: (element, type) -> the
    /// contexts they came from.
    async_out: HashMap<(usize, u32), Vec<usize>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock();
    f(g.get_or_insert_with(State::default))
}

fn qp_obj(q: &Qp) -> Obj {
    Obj::qp(q.as_ibv() as usize, q.qpn)
}

fn state_name(s: ibv_qp_state) -> &'static str {
    crate::trace::qp_state_name(s)
}

/// Registers the exit summary (once; the provider calls this when it
/// opens a device with the checker on).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

fn fnv(sum: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(sum, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

/// A checksum of `len` bytes at `host` (at most [`SUM_BYTES`]), or None if
/// the memory cannot be read.
fn checksum(host: usize, len: usize) -> Option<u64> {
    let mut buf = [0u8; SUM_BYTES];
    let n = len.min(SUM_BYTES);
    // SAFETY: host..host+n lies in registered memory (checked against the
    // key table by the caller); a fault (unmapped since) is caught.
    unsafe { crate::guard::copy(buf.as_mut_ptr(), host as *const u8, n) }.ok()?;
    Some(fnv(0xcbf2_9ce4_8422_2325, &buf[..n]))
}

/// Checks one local SGE against the key table: unknown or deregistered
/// lkey, another PD, a range outside the MR. Returns the host address of
/// a good one.
fn check_sge(obj: Obj, pd: u32, s: &ibv_sge, verb: &str) -> Option<usize> {
    if s.length == 0 {
        return None;
    }
    let e = crate::mr::table().lookup(s.lkey);
    let spec = "ibv_post_send(3)/ibv_post_recv(3): every SGE's lkey must be the lkey of an MR registered in the QP's PD, and [addr, addr+length) must lie inside that MR; otherwise the WR completes with IBV_WC_LOC_PROT_ERR (IB spec 10.6.3.1, C10-11)";
    let Some(e) = e else {
        let dead = with(|st| st.dead.contains(&s.lkey));
        let (kind, what) = if dead {
            ("lkey_deregistered", "names an MR this process deregistered")
        } else {
            ("lkey_unknown", "is not the lkey of any registered MR")
        };
        report(
            kind,
            obj,
            &format!(
                "{verb}: SGE addr={:#x} length={} lkey={:#x} {what}",
                s.addr, s.length, s.lkey
            ),
            spec,
        );
        return None;
    };
    if e.pd != pd {
        report(
            "lkey_other_pd",
            obj,
            &format!(
                "{verb}: SGE lkey={:#x} belongs to an MR of another PD (pd id {} vs the QP's {pd})",
                s.lkey, e.pd
            ),
            spec,
        );
        return None;
    }
    let end = s.addr.checked_add(s.length as u64);
    if s.addr < e.iova || end.is_none_or(|x| x > e.iova + e.len) {
        report(
            "sge_out_of_mr",
            obj,
            &format!(
                "{verb}: SGE [{:#x}, +{}) leaves its MR [{:#x}, +{}) (lkey={:#x})",
                s.addr, s.length, e.iova, e.len, s.lkey
            ),
            spec,
        );
        return None;
    }
    Some(e.host + (s.addr - e.iova) as usize)
}

fn is_read_or_atomic(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    )
}

fn names_rkey(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
            | IBV_WR_RDMA_READ
            | IBV_WR_ATOMIC_CMP_AND_SWP
            | IBV_WR_ATOMIC_FETCH_AND_ADD
            | IBV_WR_ATOMIC_WRITE
    )
}

/// Whether a SEND/WRITE reads its buffers until it completes.
fn reads_buffers(op: ibv_wr_opcode) -> bool {
    matches!(
        op,
        IBV_WR_SEND
            | IBV_WR_SEND_WITH_IMM
            | IBV_WR_SEND_WITH_INV
            | IBV_WR_RDMA_WRITE
            | IBV_WR_RDMA_WRITE_WITH_IMM
    )
}

/// The checks of `ibv_post_send` (or `ibv_wr_complete`: `verb`) before
/// the post; records the signaled WRs of the list (with the checksums of
/// their buffers), in order.
///
/// # Safety
/// `wr` is the caller's list of send WRs.
pub unsafe fn before_post_send(q: &Qp, mut wr: *mut ibv_send_wr, verb: &str) -> Recorded {
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let obj = qp_obj(q);
    let (state, max_rd_atomic, sig_all, qp_type, max_sge) = {
        let g = q.inner.lock();
        (
            g.state,
            g.attr.max_rd_atomic,
            g.sq_sig_all,
            g.qp_type,
            g.sq.max_sge,
        )
    };
    match state {
        IBV_QPS_RESET => report(
            "post_state",
            obj,
            &format!("{verb} on a QP in RESET: the post fails"),
            "ibv_post_send(3), IB spec 10.8.2 / 11.4.1.1: send WRs may be posted only in RTS (or SQD); a QP in RESET refuses them",
        ),
        IBV_QPS_INIT | IBV_QPS_RTR => report(
            "post_state",
            obj,
            &format!(
                "{verb} on a QP in {}: accepted here, the WR waits for RTS",
                state_name(state)
            ),
            "ibv_post_send(3), IB spec 10.8.2 / 11.4.1.1: send WRs may be posted only in RTS (or SQD); in INIT and RTR the spec refuses the post, and so do hns, bnxt_re and efa (EINVAL), where mlx5 and irdma take it and rxe says EINVAL yet runs it at RTS",
        ),
        IBV_QPS_ERR => report(
            "post_state",
            obj,
            &format!("{verb} on a QP in ERR: the WR will complete with IBV_WC_WR_FLUSH_ERR"),
            "IB spec 10.3.1 (Error state): WRs posted to a QP in ERR are completed in error (flushed) without being executed",
        ),
        _ => {}
    }
    let mut out = Vec::new();
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        let sges = unsafe { sg_list(w.sg_list, w.num_sge, max_sge) };
        let inline = w.send_flags & IBV_SEND_INLINE != 0;
        let local = !matches!(w.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV);
        let signaled = w.send_flags & IBV_SEND_SIGNALED != 0 || sig_all;
        let mut sums = Vec::new();
        // Inline data is copied at post: its SGEs need no key.
        if local && (!inline || is_read_or_atomic(w.opcode)) {
            for s in sges {
                let host = check_sge(obj, q.pd_id, s, verb);
                if let (Some(h), true) = (host, signaled && reads_buffers(w.opcode)) {
                    let len = s.length as usize;
                    if let Some(sum) = checksum(h, len) {
                        sums.push(Sum { host: h, len, sum });
                    }
                }
            }
        }
        if names_rkey(w.opcode) && qp_type != IBV_QPT_UD {
            // SAFETY: the rdma/atomic member, as these opcodes fill it.
            let rkey = unsafe {
                if matches!(
                    w.opcode,
                    IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
                ) {
                    w.wr.atomic.rkey
                } else {
                    w.wr.rdma.rkey
                }
            };
            check_rkey(obj, rkey);
        }
        // (UC and UD have no READ/atomic at all: the post refuses them.)
        if is_read_or_atomic(w.opcode)
            && max_rd_atomic == 0
            && state == IBV_QPS_RTS
            && matches!(qp_type, IBV_QPT_RC | IBV_QPT_XRC_SEND)
        {
            report(
                "rd_atomic_exceeded",
                obj,
                "RDMA READ/atomic posted on a QP whose max_rd_atomic is 0: it may never have one outstanding, so the WR can never be issued",
                "ibv_modify_qp(3): max_rd_atomic is the number of outstanding RDMA READ/atomic operations the QP may have as initiator (set with IBV_QP_MAX_QP_RD_ATOMIC for RTS); IB spec 9.4.4/C9-147 forbids exceeding it (hardware stalls the send queue or fails the WR)",
            );
        }
        if signaled {
            out.push(Posted {
                wr_id: w.wr_id,
                sums,
                call,
                wr: wr as usize,
            });
        }
        wr = w.next;
    }
    if let Some(cq) = &q.send_cq {
        // SAFETY: plain data in the CQ's allocation.
        let cap =
            unsafe { std::ptr::read_volatile(&raw const (*cq.ibv.get()).cqe) }.max(0) as usize;
        let handle = cq.as_ibv() as usize;
        let due = with(|st| st.cqs.get(&handle).map_or(0, |c| c.due)) + out.len();
        if due > cap {
            report(
                "cq_overrun",
                Obj::new("cq", handle),
                &format!(
                    "{due} signaled send WRs outstanding on a CQ of {cap} entries: its completions will certainly overrun it"
                ),
                "ibv_create_cq(3)/ibv_poll_cq(3): the CQ must be large enough for every completion that can be outstanding; an overrun is a CQ error (IBV_EVENT_CQ_ERR) and puts its QPs in error",
            );
        }
    }
    let send_cq = q.send_cq.as_ref().map_or(0, |c| c.as_ibv() as usize);
    let sends = out.len();
    with(|st| {
        let w = st.qps.entry(q.qpn).or_default();
        w.handle = q.as_ibv() as usize;
        w.send_cq = send_cq;
        for p in out {
            if w.sends.len() >= MAX_KEPT {
                w.sends.pop_front();
            }
            w.sends.push_back(p);
        }
        st.cqs.entry(send_cq).or_default().due += sends;
    });
    Recorded { call, n: sends }
}

fn check_rkey(obj: Obj, rkey: u32) {
    let live = crate::mr::table().key_live(rkey);
    let dead = live == Some(false) || (live.is_none() && with(|st| st.dead.contains(&rkey)));
    if dead {
        report(
            "rkey_invalidated",
            obj,
            &format!("a WR names rkey {rkey:#x}, which this process deregistered, invalidated or bound again (or never bound)"),
            "ibv_dereg_mr(3)/ibv_dealloc_mw(3)/IBV_WR_LOCAL_INV: once an MR is deregistered or a window invalidated, its rkey is invalid; a remote access with it completes with IBV_WC_REM_ACCESS_ERR and moves both QPs to error (IB spec 10.6.7)",
        );
    }
}

/// A remote access was refused by this process's key table (the
/// responder): reported when the key is one this process invalidated.
/// `live` is what the key table says of the key (the caller holds it).
pub fn remote_key_refused(rkey: u32, qpn: u32, live: Option<bool>) {
    let (dead, handle) = with(|st| {
        (
            st.dead.contains(&rkey),
            st.qps.get(&qpn).map_or(0, |w| w.handle),
        )
    });
    if (live.is_none() && dead) || live == Some(false) {
        let handle = if handle != 0 {
            handle
        } else {
            QPS.entries()
                .into_iter()
                .find(|(_, w)| w.upgrade().is_some_and(|q| q.qpn == qpn))
                .map_or(0, |(h, _)| h)
        };
        report(
            "rkey_invalidated",
            Obj::qp(handle, qpn),
            &format!("the peer used rkey {rkey:#x}, which this process deregistered or invalidated; the access was refused"),
            "ibv_dereg_mr(3)/ibv_dealloc_mw(3)/IBV_WR_LOCAL_INV: an invalidated rkey gives the requester IBV_WC_REM_ACCESS_ERR and the responder QP IBV_EVENT_QP_ACCESS_ERR (IB spec 10.6.7)",
        );
    }
}

/// After `ibv_post_send` of the list at `head`: a refused post takes back
/// what it recorded from `bad` on (everything, when `bad` is NULL).
///
/// # Safety
/// `head` is the caller's list, as posted.
pub unsafe fn after_post_send(
    q: &Qp,
    rec: Recorded,
    rc: i32,
    head: *mut ibv_send_wr,
    bad: *mut ibv_send_wr,
) {
    if rc == 0 || rec.n == 0 {
        return;
    }
    let mut accepted = HashSet::new();
    let mut p = head;
    while !bad.is_null() && !p.is_null() && p != bad {
        accepted.insert(p as usize);
        // SAFETY: p walks the caller's list.
        p = unsafe { (*p).next };
    }
    with(|st| {
        let Some(w) = st.qps.get_mut(&q.qpn) else {
            return;
        };
        let before = w.sends.len();
        w.sends
            .retain(|x| x.call != rec.call || accepted.contains(&x.wr));
        let gone = before - w.sends.len();
        let send_cq = w.send_cq;
        if let Some(c) = st.cqs.get_mut(&send_cq) {
            c.due = c.due.saturating_sub(gone);
        }
    });
}

/// A QP went to RESET: its queues and unpolled completions are gone.
pub fn qp_reset(qpn: u32) {
    with(|st| {
        if let Some(w) = st.qps.get_mut(&qpn) {
            let n = w.sends.len();
            w.sends.clear();
            w.recvs.clear();
            if let Some(c) = st.cqs.get_mut(&w.send_cq) {
                c.due = c.due.saturating_sub(n);
            }
        }
    });
}

/// The checks of `ibv_post_srq_recv`: the SGEs against the SRQ's PD.
///
/// # Safety
/// `wr` is the caller's list of receive WRs.
pub unsafe fn before_post_srq_recv(
    srq: *mut ibv_srq,
    pd: u32,
    max_sge: usize,
    mut wr: *mut ibv_recv_wr,
) {
    let obj = Obj::new("srq", srq as usize);
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        for s in unsafe { sg_list(w.sg_list, w.num_sge, max_sge) } {
            check_sge(obj, pd, s, "ibv_post_srq_recv");
        }
        wr = w.next;
    }
}

/// A WR's scatter/gather list, or nothing when its length is out of the
/// queue's bounds (the post refuses it with EINVAL before reading it, and
/// so must the checker).
///
/// # Safety
/// With `0 < n <= max`, `p` holds `n` entries.
unsafe fn sg_list<'a>(p: *mut ibv_sge, n: i32, max: usize) -> &'a [ibv_sge] {
    if n <= 0 || n as usize > max || p.is_null() {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p, n as usize) }
}

/// The checks of `ibv_post_recv` before the post; records the receives.
///
/// # Safety
/// `wr` is the caller's list of receive WRs.
pub unsafe fn before_post_recv(q: &Qp, mut wr: *mut ibv_recv_wr) -> Recorded {
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let obj = qp_obj(q);
    let (state, max_sge) = {
        let g = q.inner.lock();
        (g.state, g.rq.max_sge)
    };
    match state {
        IBV_QPS_RESET => report(
            "post_state",
            obj,
            "ibv_post_recv on a QP in RESET: the post fails",
            "ibv_post_recv(3), IB spec 10.8.2: receive WRs may be posted from INIT on; a QP in RESET refuses them",
        ),
        IBV_QPS_ERR => report(
            "post_state",
            obj,
            "ibv_post_recv on a QP in ERR: the WR will complete with IBV_WC_WR_FLUSH_ERR",
            "IB spec 10.3.1 (Error state): WRs posted to a QP in ERR are completed in error (flushed)",
        ),
        _ => {}
    }
    let mut out = Vec::new();
    if q.srq.is_some() {
        return Recorded { call, n: 0 };
    }
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        let sges = unsafe { sg_list(w.sg_list, w.num_sge, max_sge) };
        for s in sges {
            check_sge(obj, q.pd_id, s, "ibv_post_recv");
        }
        out.push(RecvRec {
            wr_id: w.wr_id,
            ranges: sges
                .iter()
                .map(|s| (s.addr, s.addr.wrapping_add(s.length as u64)))
                .collect(),
            lkeys: sges.iter().map(|s| s.lkey).collect(),
            call,
            wr: wr as usize,
        });
        wr = w.next;
    }
    let n = out.len();
    with(|st| {
        let w = st.qps.entry(q.qpn).or_default();
        w.handle = q.as_ibv() as usize;
        for r in out {
            if w.recvs.len() >= MAX_KEPT {
                w.recvs.pop_front();
            }
            w.recvs.push_back(r);
        }
    });
    Recorded { call, n }
}

/// After `ibv_post_recv` of the list at `head`: a refused post takes
/// back what it recorded from `bad` on (everything, when `bad` is NULL).
///
/// # Safety
/// `head` is the caller's list, as posted.
pub unsafe fn after_post_recv(
    q: &Qp,
    rec: Recorded,
    rc: i32,
    head: *mut ibv_recv_wr,
    bad: *mut ibv_recv_wr,
) {
    if rc == 0 || rec.n == 0 {
        return;
    }
    let mut accepted = HashSet::new();
    let mut p = head;
    while !bad.is_null() && !p.is_null() && p != bad {
        accepted.insert(p as usize);
        // SAFETY: p walks the caller's list.
        p = unsafe { (*p).next };
    }
    with(|st| {
        if let Some(w) = st.qps.get_mut(&q.qpn) {
            w.recvs
                .retain(|x| x.call != rec.call || accepted.contains(&x.wr));
        }
    });
}

/// Completions polled from `cq`: signaled sends leave their CQ's due
/// count, and a successful SEND/WRITE's buffers must be as they were
/// posted (unless a receive of the same QP wrote them).
pub fn polled(cq: *mut ibv_cq, wcs: &[ibv_wc]) {
    let handle = cq as usize;
    let mut changed: Vec<(Obj, u64, usize, usize, bool)> = Vec::new();
    with(|st| {
        st.cqs.entry(handle).or_default().polled += wcs.len() as u64;
        for wc in wcs {
            let Some(w) = st.qps.get_mut(&wc.qp_num) else {
                continue;
            };
            if wc.opcode & IBV_WC_RECV != 0 {
                if let Some(i) = w.recvs.iter().position(|r| r.wr_id == wc.wr_id) {
                    w.recvs.remove(i);
                }
                // A message from the peer after the post: programs (rping)
                // take it as the reply that proves their SEND arrived and
                // reuse the buffer before polling the send's completion.
                // The data already left, so that is not reported.
                for s in w.sends.iter_mut() {
                    s.sums.clear();
                }
                continue;
            }
            let Some(i) = w.sends.iter().position(|p| p.wr_id == wc.wr_id) else {
                continue;
            };
            let posted: Vec<Posted> = w.sends.drain(..=i).collect();
            let send_cq = w.send_cq;
            let obj = Obj::qp(w.handle, wc.qp_num);
            // Posted receives of the same QP on the same memory may
            // rightly have changed it.
            let recv_ranges: Vec<(u64, u64)> = w
                .recvs
                .iter()
                .flat_map(|r| r.ranges.iter().copied())
                .collect();
            if let Some(c) = st.cqs.get_mut(&send_cq) {
                c.due = c.due.saturating_sub(posted.len());
            }
            let Some(last) = posted.last() else { continue };
            if wc.status != IBV_WC_SUCCESS {
                continue;
            }
            for s in &last.sums {
                if recv_ranges
                    .iter()
                    .any(|r| overlaps(s.host as u64, s.len as u64, r.0, r.1))
                {
                    continue;
                }
                match checksum(s.host, s.len) {
                    Some(x) if x == s.sum => {}
                    now => changed.push((obj, wc.wr_id, s.host, s.len, now.is_none())),
                }
            }
        }
    });
    for (obj, wr_id, host, len, gone) in changed {
        let how = if gone { "was unmapped" } else { "changed" };
        report(
            "send_buffer_changed",
            obj,
            &format!(
                "the buffer of signaled WR wr_id={wr_id:#x} ([{host:#x}, +{len})) {how} between ibv_post_send and its completion"
            ),
            "ibv_post_send(3): the buffers a WR gathers from must not be modified (or freed) until its completion is polled; the adapter may read them at any time before (the data sent is undefined)",
        );
    }
}

fn overlaps(a: u64, alen: u64, lo: u64, hi: u64) -> bool {
    a < hi && lo < a.saturating_add(alen)
}

/// `ibv_req_notify_cq`: remembers what the CQ held.
pub fn armed(c: &Cq) {
    let held = c.backlog() as u64;
    with(|st| {
        let w = st.cqs.entry(c.as_ibv() as usize).or_default();
        w.held_at_arm = Some(w.polled + held);
    });
}

/// A completion event of `c` is being handed to the application: if the
/// CQ was re-armed while holding completions that have not been polled
/// since, the program waits for events without draining the CQ.
pub fn event_delivered(c: &Cq) {
    let handle = c.as_ibv() as usize;
    let left = with(|st| {
        let w = st.cqs.entry(handle).or_default();
        let left = w.held_at_arm.map_or(0, |h| h.saturating_sub(w.polled));
        w.held_at_arm = None;
        left
    });
    if left > 0 {
        report(
            "rearm_undrained",
            Obj::new("cq", handle),
            &format!(
                "the CQ was armed (ibv_req_notify_cq) while holding {left} completion(s) that were still not polled when the program took the next event"
            ),
            "ibv_req_notify_cq(3)/ibv_get_cq_event(3): an event is raised only for completions added after arming; after an event, poll the CQ until it is empty (ibv_poll_cq returns fewer than asked) or completions already queued never raise one and the program waits for ever on some hardware",
        );
    }
}

/// `ibv_destroy_cq`: a CQ still used by QPs, or with events not
/// acknowledged (the destroy would block for ever): Err(EBUSY) then,
/// leaving the CQ intact, so the program can acknowledge and retry.
pub fn cq_destroy(c: &Cq) -> Result<(), i32> {
    let obj = Obj::new("cq", c.as_ibv() as usize);
    let users = c.qp_refs.load(std::sync::atomic::Ordering::Acquire);
    if users > 0 {
        report(
            "destroy_busy",
            obj,
            &format!("ibv_destroy_cq while {users} QP(s) still use the CQ: the destroy fails with EBUSY"),
            "ibv_destroy_cq(3): fails with EBUSY if any QP is still associated with the CQ; destroy the QPs first",
        );
        return Ok(());
    }
    let comp = c.comp_events.unacked();
    let asy = c.async_events.unacked();
    if comp + asy > 0
        && !(c.comp_events.wait_acked_for(ACK_GRACE) && c.async_events.wait_acked_for(ACK_GRACE))
    {
        report(
            "unacked_events",
            obj,
            &format!(
                "ibv_destroy_cq with {} completion event(s) and {} async event(s) not acknowledged: rdma-core blocks for ever here; with the checker on the destroy fails with EBUSY instead",
                c.comp_events.unacked(),
                c.async_events.unacked()
            ),
            "ibv_get_cq_event(3): every event must be acknowledged with ibv_ack_cq_events (ibv_ack_async_event); ibv_destroy_cq waits until all events of the CQ are acknowledged",
        );
        return Err(libc::EBUSY);
    }
    with(|st| st.cqs.remove(&(c.as_ibv() as usize)));
    verbs_abi::check::forget(c.as_ibv() as usize);
    Ok(())
}

/// `ibv_destroy_qp`: send WRs still in flight (discarded without a
/// completion), async events not acknowledged (Err(EBUSY), as for CQs).
pub fn qp_destroy(q: &Arc<Qp>) -> Result<(), i32> {
    let obj = qp_obj(q);
    let (state, in_flight) = {
        let g = q.inner.lock();
        let r = g.sq.outstanding();
        (g.state, r.end - r.start)
    };
    if in_flight > 0 && matches!(state, IBV_QPS_RTS | IBV_QPS_SQD) {
        report(
            "destroy_busy",
            obj,
            &format!("ibv_destroy_qp with {in_flight} send WR(s) posted and not completed: they are discarded without completions"),
            "ibv_destroy_qp(3)/IB spec 10.2.4.4: destroying a QP discards its outstanding WRs without completing them; move it to ERR and poll the flushed completions first, or wait for them",
        );
    }
    let asy = q.async_events.unacked();
    if asy > 0 && !q.async_events.wait_acked_for(ACK_GRACE) {
        report(
            "unacked_events",
            obj,
            &format!("ibv_destroy_qp with {asy} async event(s) not acknowledged: rdma-core blocks for ever here; with the checker on the destroy fails with EBUSY instead"),
            "ibv_get_async_event(3): every async event must be acknowledged with ibv_ack_async_event; destroying the object it is about waits until then",
        );
        return Err(libc::EBUSY);
    }
    with(|st| {
        if let Some(w) = st.qps.remove(&q.qpn) {
            if let Some(c) = st.cqs.get_mut(&w.send_cq) {
                c.due = c.due.saturating_sub(w.sends.len());
            }
        }
    });
    verbs_abi::check::forget(q.as_ibv() as usize);
    Ok(())
}

/// `ibv_destroy_srq` with async events (`IBV_EVENT_SRQ_LIMIT_REACHED`,
/// `IBV_EVENT_SRQ_ERR`) not acknowledged: Err(EBUSY), as for CQs.
pub fn srq_destroy(
    srq: *mut ibv_srq,
    events: &crate::event_count::EventCounter,
) -> Result<(), i32> {
    let n = events.unacked();
    if n > 0 && !events.wait_acked_for(ACK_GRACE) {
        report(
            "unacked_events",
            Obj::new("srq", srq as usize),
            &format!("ibv_destroy_srq with {n} async event(s) not acknowledged: rdma-core blocks for ever here; with the checker on the destroy fails with EBUSY instead"),
            "ibv_get_async_event(3): every async event must be acknowledged with ibv_ack_async_event; destroying the object it is about waits until then",
        );
        return Err(libc::EBUSY);
    }
    Ok(())
}

/// `ibv_dereg_mr` of an MR that WRs still in flight (posted sends not
/// completed, posted receives) name.
pub fn mr_destroy(mr: *mut ibv_mr, lkey: u32) {
    let mut sends = 0usize;
    for (_, w) in QPS.entries() {
        let Some(q) = w.upgrade() else { continue };
        let g = q.inner.lock();
        if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD) {
            continue;
        }
        for seq in g.sq.outstanding() {
            if g.sq.sges(seq).iter().any(|s| s.lkey == lkey) {
                sends += 1;
            }
        }
    }
    let recvs: usize = with(|st| {
        st.qps
            .values()
            .flat_map(|w| w.recvs.iter())
            .filter(|r| r.lkeys.contains(&lkey))
            .count()
    });
    if sends + recvs > 0 {
        report(
            "destroy_busy",
            Obj::new("mr", mr as usize),
            &format!("ibv_dereg_mr while {sends} send WR(s) and {recvs} posted receive(s) still use the MR"),
            "ibv_dereg_mr(3): an MR must not be deregistered while WRs that use it are outstanding; they complete with IBV_WC_LOC_PROT_ERR (or the memory is accessed after deregistration)",
        );
    }
}

/// A key this process deregistered or invalidated.
pub fn key_dead(key: u32) {
    with(|st| {
        if st.dead.insert(key) {
            st.dead_order.push_back(key);
            if st.dead_order.len() > MAX_KEPT {
                if let Some(k) = st.dead_order.pop_front() {
                    st.dead.remove(&k);
                }
            }
        }
    });
}

/// `ibv_destroy_comp_channel` while CQs still use the channel.
pub fn channel_destroy(ch: *mut ibv_comp_channel, cqs: i32) {
    if cqs > 0 {
        report(
            "destroy_busy",
            Obj::new("channel", ch as usize),
            &format!("ibv_destroy_comp_channel while {cqs} CQ(s) still use it: the destroy fails with EBUSY"),
            "ibv_destroy_comp_channel(3): fails if any CQ is still associated with the channel; destroy those CQs (acknowledging their events) first",
        );
    }
}

/// An async event handed to the application.
pub fn async_delivered(ctx: *mut ibv_context, ev: &ibv_async_event) {
    // SAFETY: every member of the element union is pointer-sized or less;
    // the QP member reads the whole of it.
    let element = unsafe { ev.element.qp } as usize;
    with(|st| {
        st.async_out
            .entry((element, ev.event_type))
            .or_default()
            .push(ctx as usize)
    });
}

/// `ibv_ack_async_event`.
pub fn async_acked(ev: &ibv_async_event) {
    // SAFETY: as in async_delivered.
    let element = unsafe { ev.element.qp } as usize;
    with(|st| {
        if let Some(v) = st.async_out.get_mut(&(element, ev.event_type)) {
            v.pop();
            if v.is_empty() {
                st.async_out.remove(&(element, ev.event_type));
            }
        }
    });
}

/// `ibv_close_device` with async events not acknowledged.
pub fn close_device(ctx: *mut ibv_context) {
    let n: usize = with(|st| {
        st.async_out
            .values()
            .map(|v| v.iter().filter(|&&c| c == ctx as usize).count())
            .sum()
    });
    if n > 0 {
        report(
            "unacked_events",
            Obj::new("context", ctx as usize),
            &format!("ibv_close_device with {n} async event(s) not acknowledged"),
            "ibv_get_async_event(3): every event returned must be acknowledged with ibv_ack_async_event; destroying the object an event is about blocks until it is",
        );
    }
}

fn list(entries: &[(usize, String)]) -> String {
    let mut s: Vec<String> = entries
        .iter()
        .take(8)
        .map(|(h, extra)| format!("{h:#x}{extra}"))
        .collect();
    if entries.len() > 8 {
        s.push(format!("and {} more", entries.len() - 8));
    }
    s.join(", ")
}

/// The exit summary: objects never destroyed, events never acknowledged.
extern "C" fn at_exit() {
    let mut leaked: Vec<(&str, Vec<(usize, String)>)> = Vec::new();
    let qps: Vec<(usize, String)> = QPS
        .entries()
        .into_iter()
        .map(|(h, w)| {
            let n = w
                .upgrade()
                .map_or(String::new(), |q| format!(" qpn={}", q.qpn));
            (h, n)
        })
        .collect();
    leaked.push(("qp", qps));
    let plain = |e: Vec<(usize, crate::handles::Ctx)>| -> Vec<(usize, String)> {
        e.into_iter().map(|(h, _)| (h, String::new())).collect()
    };
    leaked.push(("cq", plain(CQS.entries())));
    leaked.push((
        "srq",
        crate::srq::SRQS
            .entries()
            .into_iter()
            .map(|(h, _)| (h, String::new()))
            .collect(),
    ));
    leaked.push(("mr", plain(crate::mr::MRS.entries())));
    leaked.push((
        "mw",
        crate::mw::MWS
            .entries()
            .into_iter()
            .map(|(h, _)| (h, String::new()))
            .collect(),
    ));
    leaked.push((
        "ah",
        crate::ah::AHS
            .entries()
            .into_iter()
            .map(|(h, _)| (h, String::new()))
            .collect(),
    ));
    leaked.push(("pd", plain(crate::pd::PDS.entries())));
    leaked.push(("channel", plain(crate::channel::CHANNELS.entries())));
    for (kind, objs) in &leaked {
        if !objs.is_empty() {
            summary(&format!("leaked {} {kind}(s): {}", objs.len(), list(objs)));
        }
    }
    for (h, _) in CQS.entries() {
        // SAFETY: a live CQ of ours (in the table).
        let c = unsafe { Cq::from_ibv(h as *mut ibv_cq) };
        let (comp, asy) = (c.comp_events.unacked(), c.async_events.unacked());
        if comp + asy > 0 {
            summary(&format!(
                "unacked events on cq {h:#x}: {comp} completion, {asy} async"
            ));
        }
    }
    for (h, w) in QPS.entries() {
        if let Some(q) = w.upgrade() {
            let asy = q.async_events.unacked();
            if asy > 0 {
                summary(&format!("unacked events on qp {h:#x}: {asy} async"));
            }
        }
    }
    let n = verbs_abi::check::findings();
    if n > 0 {
        summary(&format!("{n} finding(s) reported by the provider"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap() {
        assert!(overlaps(100, 10, 105, 106));
        assert!(overlaps(100, 10, 90, 101));
        assert!(!overlaps(100, 10, 110, 120));
        assert!(!overlaps(100, 10, 50, 100));
    }

    #[test]
    fn sg_lists_are_bounded_by_the_queue() {
        let mut sges = [ibv_sge {
            addr: 1,
            length: 2,
            lkey: 3,
        }; 2];
        // SAFETY: two entries.
        assert_eq!(unsafe { sg_list(sges.as_mut_ptr(), 2, 4) }.len(), 2);
        // SAFETY: not read: over the bound.
        assert!(unsafe { sg_list(sges.as_mut_ptr(), 1000, 4) }.is_empty());
        // SAFETY: not read: negative.
        assert!(unsafe { sg_list(sges.as_mut_ptr(), -1, 4) }.is_empty());
    }

    #[test]
    fn checksums_see_one_byte() {
        let mut b = [7u8; 64];
        let a = checksum(b.as_ptr() as usize, b.len());
        b[63] = 8;
        assert_ne!(a, checksum(b.as_ptr() as usize, b.len()));
        assert!(a.is_some());
    }
}
