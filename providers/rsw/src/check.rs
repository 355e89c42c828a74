//! The misuse checker's ledger (`RDMA_CHECK`; `verbs_rt::check` holds
//! the switch, the report format and the once-only rule): what the checker
//! remembers between verbs, and the checks that need nothing else. The
//! objects report to it as they act, with plain values (handles, numbers,
//! the application's structs), so it sits below all of them; the checks
//! that read an object live beside it (`qp::check`, `mr::check_sge`), and
//! what only the layers above can answer comes through the hooks they
//! register when the checker starts ([`Above`]). Off, each check point is
//! the one branch of `verbs_rt::check::on` (or `hooks_on`, shared with
//! the tracer, on the post and poll paths).
//!
//! What it keeps, only while on: per QP the signaled send WRs posted and
//! not yet polled (wr_id, and a checksum of up to [`SUM_BYTES`] of each
//! SGE's registered memory for SENDs and WRITEs) and the posted receives'
//! ranges; per CQ the signaled sends due on it, the completions polled
//! and, after a re-arm, how many completions it held; the keys this
//! process deregistered or invalidated; async events delivered and not
//! acknowledged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;
use verbs_abi::*;
use verbs_rt::check::{report, Obj};

use crate::event_count::EventCounter;

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

impl Posted {
    pub fn new(wr_id: u64, call: u64, wr: usize) -> Posted {
        Posted {
            wr_id,
            sums: Vec::new(),
            call,
            wr,
        }
    }

    /// Remembers the `len` bytes at `host` the WR gathers from (when they
    /// can be read), to compare them at its completion.
    pub fn sum(&mut self, host: usize, len: usize) {
        if let Some(sum) = checksum(host, len) {
            self.sums.push(Sum { host, len, sum });
        }
    }
}

/// What a post recorded before it ran (entries are recorded first: another
/// thread may poll their completions before the post returns).
pub struct Recorded {
    call: u64,
    n: usize,
}

impl Recorded {
    /// Nothing was recorded.
    pub fn none(&self) -> bool {
        self.n == 0
    }
}

static CALLS: AtomicU64 = AtomicU64::new(1);

/// A number for one post call, which its records carry.
pub fn new_call() -> u64 {
    CALLS.fetch_add(1, Ordering::Relaxed)
}

/// A posted receive: wr_id, the ranges its SGEs name, and (as for
/// [`Posted`]) the call and WR it came from.
pub struct RecvRec {
    wr_id: u64,
    ranges: Vec<(u64, u64)>,
    lkeys: Vec<u32>,
    call: u64,
    wr: usize,
}

impl RecvRec {
    pub fn new(wr_id: u64, sges: &[ibv_sge], call: u64, wr: usize) -> RecvRec {
        RecvRec {
            wr_id,
            ranges: sges
                .iter()
                .map(|s| (s.addr, s.addr.wrapping_add(s.length as u64)))
                .collect(),
            lkeys: sges.iter().map(|s| s.lkey).collect(),
            call,
            wr,
        }
    }
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

/// What the ledger asks of the layers above it, which know the live QPs
/// and every object table; registered by the top layer when the checker
/// starts.
pub struct Above {
    /// The application's handle of the live QP numbered `qpn`, or 0.
    pub qp_handle: fn(u32) -> usize,
    /// Send WRs posted and not completed, on live QPs in RTS or SQD, that
    /// name `lkey`.
    pub sends_naming: fn(u32) -> usize,
    /// At exit, before the count of findings: the objects never destroyed
    /// and the events never acknowledged.
    pub exit_summary: fn(),
}

static ABOVE: OnceLock<Above> = OnceLock::new();

/// Starts the checker (the provider calls this when it opens a device
/// with the checker on; the first call's hooks stay): the exit summary is
/// registered once.
pub fn init(above: Above) {
    if ABOVE.set(above).is_ok() {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(at_exit) };
    }
}

fn fnv(sum: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(sum, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

/// A checksum of `len` bytes at `host` (at most [`SUM_BYTES`]), or None if
/// the memory cannot be read.
pub fn checksum(host: usize, len: usize) -> Option<u64> {
    let mut buf = [0u8; SUM_BYTES];
    let n = len.min(SUM_BYTES);
    // SAFETY: host..host+n lies in registered memory (checked against the
    // key table by the caller); a fault (unmapped since) is caught.
    unsafe { crate::guard::copy(buf.as_mut_ptr(), host as *const u8, n) }.ok()?;
    Some(fnv(0xcbf2_9ce4_8422_2325, &buf[..n]))
}

/// Whether `key` is one this process deregistered or invalidated (and
/// still remembers).
pub fn is_dead(key: u32) -> bool {
    with(|st| st.dead.contains(&key))
}

/// The signaled send WRs due on the CQ `cq`, not polled yet.
pub fn due_on(cq: usize) -> usize {
    with(|st| st.cqs.get(&cq).map_or(0, |c| c.due))
}

/// Records the signaled send WRs of post call `call` on QP `qpn` (whose
/// application handle is `handle`, whose send CQ `send_cq`), in order.
pub fn record_sends(
    qpn: u32,
    handle: usize,
    send_cq: usize,
    call: u64,
    out: Vec<Posted>,
) -> Recorded {
    let sends = out.len();
    with(|st| {
        let w = st.qps.entry(qpn).or_default();
        w.handle = handle;
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

/// A post of QP `qpn` was refused from some WR on: takes back what `rec`
/// recorded, but for the WRs in `accepted`.
pub fn take_back_sends(qpn: u32, rec: Recorded, accepted: &HashSet<usize>) {
    with(|st| {
        let Some(w) = st.qps.get_mut(&qpn) else {
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

/// Records the receives of post call `call` on QP `qpn`, in order.
pub fn record_recvs(qpn: u32, handle: usize, call: u64, out: Vec<RecvRec>) -> Recorded {
    let n = out.len();
    with(|st| {
        let w = st.qps.entry(qpn).or_default();
        w.handle = handle;
        for r in out {
            if w.recvs.len() >= MAX_KEPT {
                w.recvs.pop_front();
            }
            w.recvs.push_back(r);
        }
    });
    Recorded { call, n }
}

/// As [`take_back_sends`], for receives.
pub fn take_back_recvs(qpn: u32, rec: Recorded, accepted: &HashSet<usize>) {
    with(|st| {
        if let Some(w) = st.qps.get_mut(&qpn) {
            w.recvs
                .retain(|x| x.call != rec.call || accepted.contains(&x.wr));
        }
    });
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
            ABOVE.get().map_or(0, |a| (a.qp_handle)(qpn))
        };
        report(
            "rkey_invalidated",
            Obj::qp(handle, qpn),
            &format!("the peer used rkey {rkey:#x}, which this process deregistered or invalidated; the access was refused"),
            "ibv_dereg_mr(3)/ibv_dealloc_mw(3)/IBV_WR_LOCAL_INV: an invalidated rkey gives the requester IBV_WC_REM_ACCESS_ERR and the responder QP IBV_EVENT_QP_ACCESS_ERR (IB spec 10.6.7)",
        );
    }
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

/// A WR's scatter/gather list, or nothing when its length is out of the
/// queue's bounds (the post refuses it with EINVAL before reading it, and
/// so must the checker).
///
/// # Safety
/// With `0 < n <= max`, `p` holds `n` entries.
pub unsafe fn sg_list<'a>(p: *mut ibv_sge, n: i32, max: usize) -> &'a [ibv_sge] {
    if n <= 0 || n as usize > max || p.is_null() {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p, n as usize) }
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

/// `ibv_req_notify_cq` of the CQ `cq`, which holds `held` completions.
pub fn armed(cq: usize, held: u64) {
    with(|st| {
        let w = st.cqs.entry(cq).or_default();
        w.held_at_arm = Some(w.polled + held);
    });
}

/// A completion event of the CQ `handle` is being handed to the
/// application: if the CQ was re-armed while holding completions that
/// have not been polled since, the program waits for events without
/// draining the CQ.
pub fn event_delivered(handle: usize) {
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
/// `users` is how many QPs use the CQ `cq`; `comp_events` and
/// `async_events` count its events.
pub fn cq_destroy(
    cq: usize,
    users: u32,
    comp_events: &EventCounter,
    async_events: &EventCounter,
) -> Result<(), i32> {
    let obj = Obj::new("cq", cq);
    if users > 0 {
        report(
            "destroy_busy",
            obj,
            &format!("ibv_destroy_cq while {users} QP(s) still use the CQ: the destroy fails with EBUSY"),
            "ibv_destroy_cq(3): fails with EBUSY if any QP is still associated with the CQ; destroy the QPs first",
        );
        return Ok(());
    }
    let comp = comp_events.unacked();
    let asy = async_events.unacked();
    if comp + asy > 0
        && !(comp_events.wait_acked_for(ACK_GRACE) && async_events.wait_acked_for(ACK_GRACE))
    {
        report(
            "unacked_events",
            obj,
            &format!(
                "ibv_destroy_cq with {} completion event(s) and {} async event(s) not acknowledged: rdma-core blocks for ever here; with the checker on the destroy fails with EBUSY instead",
                comp_events.unacked(),
                async_events.unacked()
            ),
            "ibv_get_cq_event(3): every event must be acknowledged with ibv_ack_cq_events (ibv_ack_async_event); ibv_destroy_cq waits until all events of the CQ are acknowledged",
        );
        return Err(libc::EBUSY);
    }
    with(|st| st.cqs.remove(&cq));
    verbs_rt::check::forget(cq);
    Ok(())
}

/// A QP is destroyed: what was kept of it goes, and its signaled sends
/// leave their CQ's due count.
pub fn qp_gone(qpn: u32) {
    with(|st| {
        if let Some(w) = st.qps.remove(&qpn) {
            if let Some(c) = st.cqs.get_mut(&w.send_cq) {
                c.due = c.due.saturating_sub(w.sends.len());
            }
        }
    });
}

/// `verb` (`ibv_destroy_qp`, `ibv_destroy_srq`) of `obj` with async
/// events not acknowledged: Err(EBUSY), as for CQs.
pub fn async_unacked(obj: Obj, verb: &str, events: &EventCounter) -> Result<(), i32> {
    let n = events.unacked();
    if n > 0 && !events.wait_acked_for(ACK_GRACE) {
        report(
            "unacked_events",
            obj,
            &format!("{verb} with {n} async event(s) not acknowledged: rdma-core blocks for ever here; with the checker on the destroy fails with EBUSY instead"),
            "ibv_get_async_event(3): every async event must be acknowledged with ibv_ack_async_event; destroying the object it is about waits until then",
        );
        return Err(libc::EBUSY);
    }
    Ok(())
}

/// `ibv_dereg_mr` of an MR that WRs still in flight (posted sends not
/// completed, posted receives) name.
pub fn mr_destroy(mr: *mut ibv_mr, lkey: u32) {
    let sends = ABOVE.get().map_or(0, |a| (a.sends_naming)(lkey));
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

/// The exit summary: what the layers above list, then the findings.
extern "C" fn at_exit() {
    if let Some(a) = ABOVE.get() {
        (a.exit_summary)();
    }
    let n = verbs_rt::check::findings();
    if n > 0 {
        verbs_rt::check::summary(&format!("{n} finding(s) reported by the provider"));
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
