//! Completion queues.
//!
//! A CQ is a preallocated ring of completions behind a mutex (on our heap,
//! or from the allocator of the parent domain it names: `ringmem`); producers
//! (post paths and the progress thread) push, `poll_cq` and the
//! `ibv_cq_ex` start/next calls pop. Nothing on these paths allocates.
//!
//! Every CQ is an `ibv_cq_ex` (the provider ABI requires it), shared with
//! the QPs that use it through an `Arc`; the pointer handed to the
//! application is that `Arc`'s data pointer.
//!
//! Notification follows the verbs model: `req_notify_cq` arms the CQ once;
//! the next qualifying completion writes one event to the channel and
//! disarms. Overrun (a completion arriving on a full ring) puts the CQ in
//! error and queues `IBV_EVENT_CQ_ERR`, unless the CQ was created with
//! `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
//!
//! Polling an empty, unarmed CQ also runs its QPs' transport on the calling
//! thread (`Cq::drive`), so busy-polling programs do not depend on the
//! progress thread getting a CPU.

use std::cell::UnsafeCell;
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use crate::channel::CHANNELS;
use crate::channel::{self, Channel};
use crate::context::{Context, CtxShared};
use crate::device::MAX_CQE;
use crate::event_count::EventCounter;
use crate::handles::{names, Ctx, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::ringmem::{Allocator, Slots, RES_TYPE_CQ};
use crate::util::{mono_ns, set_errno, wall_ns};
use verbs_rt::Handles;

/// The CQs handed out and not destroyed.
pub static CQS: Handles<Ctx> = Handles::new();

/// One completion as stored in the ring (a superset of `ibv_wc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data, raw (network order) bits.
    pub imm: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    /// The completed receive was for a solicited request (drives
    /// solicited-only notification; not visible in `ibv_wc`).
    pub solicited: bool,
    /// UD receives: the RoCE network header type (see
    /// `ud_recv::roce_header_type`).
    pub sl: u8,
    pub ts: u64,
    pub wallclock: u64,
    /// Tag matching (`tm`): the tag and app_ctx `ibv_wc_read_tm_info`
    /// reads.
    pub tm_tag: u64,
    pub tm_priv: u32,
}

impl Cqe {
    fn to_wc(self) -> ibv_wc {
        let mut wc = ibv_wc::zeroed();
        wc.wr_id = self.wr_id;
        wc.status = self.status;
        wc.opcode = self.opcode;
        wc.vendor_err = self.vendor_err;
        wc.byte_len = self.byte_len;
        wc.set_imm_data(self.imm);
        wc.qp_num = self.qp_num;
        wc.src_qp = self.src_qp;
        wc.wc_flags = self.wc_flags;
        wc.sl = self.sl;
        wc
    }
}

const ARM_NONE: u8 = 0;
const ARM_ANY: u8 = 1;
const ARM_SOLICITED: u8 = 2;

struct Ring {
    /// On our heap, or from the parent domain's allocator (`ringmem`).
    buf: Slots<Cqe>,
    head: usize,
    len: usize,
    arm: u8,
    /// Of the `len` completions, how many an event already announced
    /// (each event announces one; polling retires them oldest first).
    /// Arming fires at once only for completions beyond these.
    announced: usize,
    error: bool,
    /// Injected overrun (`faults`): the completion number that overruns
    /// the CQ, 0 for none; and how many were added.
    overrun_at: u64,
    pushed: u64,
}

impl Ring {
    fn new(cap: usize, alloc: Option<&Arc<Allocator>>) -> Result<Ring, c_int> {
        Ok(Ring {
            buf: Slots::new(cap, Cqe::default(), alloc, RES_TYPE_CQ)?,
            head: 0,
            len: 0,
            arm: ARM_NONE,
            announced: 0,
            error: false,
            overrun_at: crate::faults::cq_overrun_at(),
            pushed: 0,
        })
    }

    fn pop(&mut self) -> Option<Cqe> {
        if self.len == 0 {
            return None;
        }
        let e = self.buf[self.head];
        self.head = (self.head + 1) % self.buf.len();
        self.len -= 1;
        self.announced = self.announced.saturating_sub(1);
        Some(e)
    }
}

/// The ring behind its lock, with a summary a polling thread reads without
/// it: polling an empty CQ is what a spinning program does most, and the
/// lock's two locked instructions were a good part of each round.
struct RingCell {
    m: Mutex<Ring>,
    /// As of the last unlock: no completion, no error, not armed.
    idle: AtomicBool,
}

impl RingCell {
    fn new(r: Ring) -> RingCell {
        RingCell {
            m: Mutex::new(r),
            idle: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> RingGuard<'_> {
        RingGuard {
            g: self.m.lock(),
            idle: &self.idle,
        }
    }

    /// Whether the ring was empty, unarmed and without error when last
    /// unlocked. Read without the lock: a completion being added right now
    /// is seen by the next poll.
    fn idle(&self) -> bool {
        self.idle.load(Ordering::Acquire)
    }
}

/// The ring, locked; the summary is written as it is unlocked, so it never
/// misses a change.
struct RingGuard<'a> {
    g: parking_lot::MutexGuard<'a, Ring>,
    idle: &'a AtomicBool,
}

impl std::ops::Deref for RingGuard<'_> {
    type Target = Ring;
    fn deref(&self) -> &Ring {
        &self.g
    }
}

impl std::ops::DerefMut for RingGuard<'_> {
    fn deref_mut(&mut self) -> &mut Ring {
        &mut self.g
    }
}

impl Drop for RingGuard<'_> {
    fn drop(&mut self) {
        let r = &*self.g;
        self.idle.store(
            r.len == 0 && !r.error && r.arm == ARM_NONE,
            Ordering::Release,
        );
    }
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// What completes into a CQ (a QP), registered from above so the CQ can
/// reach it without knowing what it is.
pub trait Producer: Send + Sync {
    /// One non-blocking progress step on the calling thread (the CQ is
    /// being polled empty).
    fn drive(&self);
    /// Asks the progress thread to run the producer soon (the CQ overran).
    fn kick(&self);
    /// The CQ was armed: completions the producer holds elsewhere must
    /// now raise the event (same-host mailboxes).
    fn armed(&self) {}
}

fn kick_all(qps: &[Arc<dyn Producer>]) {
    for q in qps {
        q.kick();
    }
}

#[repr(C)]
pub struct Cq {
    /// Shared with the application, which reads the poll cursor fields and
    /// may write `cq_context`.
    pub ibv: UnsafeCell<ibv_cq_ex>,
    pub serial: u64,
    pub ctx: Arc<CtxShared>,
    /// The context it was made in (the public struct's may have been
    /// overwritten since).
    ibv_ctx: *mut ibv_context,
    ring: RingCell,
    channel: *mut ibv_comp_channel,
    chan_wr: RawFd,
    wc_flags: u64,
    ignore_overrun: bool,
    /// The ring overflowed: the CQ and its QPs are in error.
    overrun: AtomicBool,
    /// A destroy claimed it (a second one fails with EINVAL).
    destroying: AtomicBool,
    /// The completion `ibv_start_poll`/`ibv_next_poll` moved to; only the
    /// single thread inside a start/end poll section touches it.
    cur: UnsafeCell<Cqe>,
    pub comp_events: EventCounter,
    pub async_events: Arc<EventCounter>,
    /// QPs using this CQ; destroy is refused while any exist.
    pub qp_refs: AtomicU32,
    /// The parent domain it was made on (`IBV_CQ_INIT_ATTR_MASK_PD`),
    /// held (its `users`) until destroy, and its allocator, which the
    /// ring comes from (at creation and on resize).
    parent: *mut ibv_pd,
    alloc: Option<Arc<Allocator>>,
    /// The same QPs, for polling-driven progress. Held strongly from
    /// attach to detach (which every destroy does first): a poll then
    /// drives them with no reference count to take and give back.
    qps: Mutex<Vec<Arc<dyn Producer>>>,
    /// Counts `ibv_poll_cq`/`ibv_start_poll` calls: a requester tells a
    /// program that posts in a burst from one that polls between posts.
    polls: AtomicU64,
    /// A completion event was taken (`ibv_get_cq_event`) and the CQ not
    /// polled since.
    taken: AtomicBool,
    /// The CQ was armed right after an event was taken, before any poll,
    /// while it held completions no event announced: whether they call
    /// for an event is decided when the program has polled (see
    /// `req_notify_cq`). Written under the ring's lock.
    deferred: AtomicBool,
}

// SAFETY: the ring is behind a mutex; `ibv` and `cur` are C-visible fields
// accessed under the verbs threading rules (the extended poll cursor is
// single-threaded by API contract); the channel pointer is only used to
// reach a channel that outlives the CQ.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// # Safety
    /// `cq` must come from our `create_cq_ex` and not be destroyed.
    pub unsafe fn from_ibv<'a, T>(cq: *mut T) -> &'a Cq {
        // SAFETY: ibv is the first field of the Arc'd Cq the pointer names.
        unsafe { &*(cq as *const Cq) }
    }

    /// Whether its public struct still names it (`handles::names`): its
    /// handle is its serial's low 32 bits.
    pub fn names_itself(&self) -> bool {
        let ibv = self.ibv.get();
        // SAFETY: the public struct is ours, live while self is.
        unsafe {
            names(
                &raw const (*ibv).context,
                &raw const (*ibv).handle,
                self.ibv_ctx,
                self.serial as u32,
            )
        }
    }

    /// The live CQ behind `cq` if it was made in `context` and its public
    /// struct still names it; else EINVAL for what is no CQ of ours,
    /// `unknown` for one that no longer names itself or is of another
    /// context (`handles::UNKNOWN_BY_IOCTL`, `UNKNOWN_BY_WRITE`).
    pub(crate) fn checked<'a>(
        cq: *mut ibv_cq,
        context: *mut ibv_context,
        unknown: c_int,
    ) -> Result<&'a Cq, c_int> {
        if !CQS.contains(cq) {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live CQ of ours (checked above).
        let c = unsafe { Cq::from_ibv(cq) };
        if c.ibv_ctx != context || !c.names_itself() {
            return Err(unknown);
        }
        Ok(c)
    }

    /// A new strong reference for a QP that will use this CQ.
    ///
    /// # Safety
    /// As [`Cq::from_ibv`].
    pub unsafe fn arc_from_ibv(cq: *mut ibv_cq) -> Arc<Cq> {
        let p = cq as *const Cq;
        // SAFETY: p is the data pointer of a live Arc<Cq> whose count the
        // application's handle holds; we add one and adopt it.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }

    pub fn as_ibv(&self) -> *mut ibv_cq {
        self.ibv.get() as *mut ibv_cq
    }

    /// Adds a completion. Never blocks on anything but the ring lock.
    pub fn push(&self, mut e: Cqe) {
        if self.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64 != 0 {
            e.ts = mono_ns();
        }
        if self.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK as u64 != 0 {
            e.wallclock = wall_ns();
        }
        let mut r = self.ring.lock();
        if r.error {
            return;
        }
        let cap = r.buf.len();
        let injected = r.overrun_at != 0 && {
            r.pushed += 1;
            r.pushed == r.overrun_at
        };
        if r.len == cap || injected {
            if self.ignore_overrun {
                return;
            }
            r.error = true;
            drop(r);
            if verbs_rt::check::on() {
                overran_check(self, cap);
            }
            self.overrun.store(true, Ordering::Release);
            self.ctx.async_q.push(
                self.as_ibv() as usize,
                IBV_EVENT_CQ_ERR,
                Some(self.async_events.clone()),
            );
            // Every QP on this CQ has lost completions: have each move
            // itself to ERR (the caller may hold one QP's lock, so none is
            // changed from here). A poller driving the QPs holds the list
            // (this may be its own thread, inside `drive`): it kicks them
            // when it is done.
            if let Some(qps) = self.qps.try_lock() {
                kick_all(&qps);
            }
            return;
        }
        let slot = (r.head + r.len) % cap;
        r.buf[slot] = e;
        r.len += 1;
        let fire = match r.arm {
            ARM_ANY => true,
            ARM_SOLICITED => e.solicited || e.status != IBV_WC_SUCCESS,
            _ => false,
        };
        if fire {
            r.arm = ARM_NONE;
            r.announced = (r.announced + 1).min(r.len);
            self.deferred.store(false, Ordering::Relaxed);
        }
        drop(r);
        if fire && self.chan_wr >= 0 {
            channel::notify(self.chan_wr, self.serial);
        }
    }

    /// The program has polled (a batch of `ibv_poll_cq`, or an extended
    /// poll ended): an arm deferred by `req_notify_cq` raises its event
    /// now if completions no event announced are still there. Called with
    /// the ring locked; true when the caller must notify the channel.
    fn settle_deferred(&self, r: &mut Ring) -> bool {
        if !self.deferred.load(Ordering::Relaxed) {
            return false;
        }
        self.deferred.store(false, Ordering::Relaxed);
        let fire = r.arm == ARM_ANY && r.len > r.announced && !r.error;
        if fire {
            r.arm = ARM_NONE;
            r.announced += 1;
        }
        fire
    }

    fn notify(&self) {
        if self.chan_wr >= 0 {
            channel::notify(self.chan_wr, self.serial);
        }
    }

    /// Drops the unpolled completions of QP `qpn` (the QP went to RESET:
    /// hardware providers clean the CQ then, and programs that reset and
    /// reconnect a failed QP rely on not meeting its old completions).
    pub fn purge_qp(&self, qpn: u32) {
        let mut r = self.ring.lock();
        let cap = r.buf.len();
        let (head, len) = (r.head, r.len);
        let mut kept = 0;
        for i in 0..len {
            let e = r.buf[(head + i) % cap];
            if e.qp_num != qpn {
                r.buf[(head + kept) % cap] = e;
                kept += 1;
            }
        }
        r.len = kept;
        r.announced = r.announced.min(kept);
    }

    /// Completions not polled yet (for the misuse checker).
    pub fn backlog(&self) -> usize {
        self.ring.lock().len
    }

    /// Whether the CQ overran (see [`Cq::push`]).
    pub fn overran(&self) -> bool {
        self.overrun.load(Ordering::Acquire)
    }

    pub fn attach_qp<P: Producer + 'static>(&self, qp: &Arc<P>) {
        let a: Arc<dyn Producer> = qp.clone();
        self.qps.lock().push(a);
        // Armed before the QP existed (a program may arm a new CQ first).
        if self.ring.lock().arm != ARM_NONE {
            qp.armed();
        }
    }

    pub fn detach_qp<P>(&self, qp: *const P) {
        let mut gone = Vec::new();
        {
            let mut qps = self.qps.lock();
            while let Some(i) = qps
                .iter()
                .position(|a| Arc::as_ptr(a) as *const () == qp as *const ())
            {
                gone.push(qps.remove(i));
            }
        }
        // Dropped outside the lock, in case one was the last reference.
        drop(gone);
    }

    /// Runs the transport of this CQ's QPs on the polling thread. A program
    /// that spins on an empty CQ would otherwise compete for the CPU with
    /// the progress thread that has to produce its completions; this way it
    /// makes the progress itself. QPs busy elsewhere are skipped.
    fn drive(&self) {
        let qps = self.qps.lock();
        for q in qps.iter() {
            q.drive();
        }
        // An overrun met while driving could not kick the QPs (`push`
        // found this lock held): kick them now.
        if self.overran() {
            kick_all(&qps);
        }
    }

    /// Runs `f` (which must not touch this CQ) only if the CQ is not armed,
    /// under the lock arming takes: a producer's "nobody waits" cannot
    /// overtake an arm.
    pub fn if_unarmed(&self, f: impl FnOnce()) {
        let r = self.ring.lock();
        if r.arm == ARM_NONE {
            f();
        }
    }

    fn polled(&self) {
        // Only the count's change matters: no read-modify-write.
        let n = self.polls.load(Ordering::Relaxed);
        self.polls.store(n.wrapping_add(1), Ordering::Relaxed);
        if self.taken.load(Ordering::Relaxed) {
            self.taken.store(false, Ordering::Relaxed);
        }
    }

    /// How many times the CQ was polled (see `polls`).
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Whether a program waits for its completion events.
    pub fn is_armed(&self) -> bool {
        self.ring.lock().arm != ARM_NONE
    }

    /// Drive from polling only when the CQ is empty and not armed: an armed
    /// CQ belongs to a program that waits for events (the progress thread
    /// serves it), and completions made while it polls after re-arming
    /// would raise events for entries that same poll then consumes.
    fn wants_drive(&self) -> bool {
        self.ring.idle()
    }

    /// Tells the producers the CQ is armed (see [`Producer::armed`]).
    fn tell_armed(&self) {
        for q in self.qps.lock().iter() {
            q.armed();
        }
    }
}

pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: attr points to the caller's init attributes.
    let a = unsafe { &*attr };
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    if a.cqe == 0 || a.cqe > MAX_CQE || a.comp_vector != 0 {
        return fail(libc::EINVAL);
    }
    if let Err(e) = crate::util::limit(
        "cq",
        crate::device::MAX_CQ,
        CQS.room_for_one(crate::device::MAX_CQ),
    ) {
        return fail(e);
    }
    let known_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
    if a.comp_mask & !known_mask != 0 {
        return fail(libc::EINVAL);
    }
    // A CQ may name a parent domain; its ring then comes from the
    // domain's allocator, if it has one.
    let parent = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        if !crate::pd::PDS.contains(a.parent_domain)
            // SAFETY: a live PD of ours (checked just before).
            || unsafe { Pd::from_ibv(a.parent_domain) }.parent.is_none()
        {
            return fail(libc::EINVAL);
        }
        // SAFETY: as above.
        Some(unsafe { Pd::from_ibv(a.parent_domain) })
    } else {
        None
    };
    let alloc = parent.and_then(|p| p.allocator()).cloned();
    let supported = (IBV_WC_STANDARD_FLAGS
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
        | IBV_WC_EX_WITH_TM_INFO) as u64;
    if a.wc_flags & !supported != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    if flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: context came from open_device.
    let ctx = unsafe { Context::shared_of(context) };
    if !a.channel.is_null() && !CHANNELS.contains(a.channel) {
        return fail(libc::EINVAL);
    }
    let ring = match Ring::new(a.cqe as usize, alloc.as_ref()) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let chan_wr = if a.channel.is_null() {
        -1
    } else {
        // SAFETY: a non-null channel comes from create_comp_channel.
        let ch = unsafe { Channel::from_ibv(a.channel) };
        ch.attach();
        ch.write_fd()
    };
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut ibv = ibv_cq_ex::zeroed();
    ibv.context = context;
    ibv.channel = a.channel;
    ibv.cq_context = a.cq_context;
    ibv.handle = serial as u32;
    ibv.cqe = a.cqe as c_int;
    ibv.start_poll = Some(start_poll);
    ibv.next_poll = Some(next_poll);
    ibv.end_poll = Some(end_poll);
    ibv.read_opcode = Some(read_opcode);
    ibv.read_vendor_err = Some(read_vendor_err);
    ibv.read_byte_len = Some(read_byte_len);
    ibv.read_imm_data = Some(read_imm_data);
    ibv.read_qp_num = Some(read_qp_num);
    ibv.read_src_qp = Some(read_src_qp);
    ibv.read_wc_flags = Some(read_wc_flags);
    ibv.read_slid = Some(read_slid);
    ibv.read_sl = Some(read_sl);
    ibv.read_dlid_path_bits = Some(read_dlid_path_bits);
    ibv.read_completion_ts = Some(read_completion_ts);
    ibv.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
    ibv.read_cvlan = Some(read_cvlan);
    ibv.read_flow_tag = Some(read_flow_tag);
    ibv.read_tm_info = Some(read_tm_info);
    let cq = Arc::new(Cq {
        ibv: UnsafeCell::new(ibv),
        serial,
        ctx,
        ibv_ctx: context,
        ring: RingCell::new(ring),
        channel: a.channel,
        chan_wr,
        wc_flags: a.wc_flags,
        ignore_overrun: flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0,
        overrun: AtomicBool::new(false),
        destroying: AtomicBool::new(false),
        cur: UnsafeCell::new(Cqe::default()),
        comp_events: EventCounter::default(),
        async_events: Arc::new(EventCounter::default()),
        qp_refs: AtomicU32::new(0),
        qps: Mutex::new(Vec::new()),
        polls: AtomicU64::new(0),
        taken: AtomicBool::new(false),
        deferred: AtomicBool::new(false),
        parent: parent.map_or(std::ptr::null_mut(), |p| {
            &p.ibv as *const ibv_pd as *mut ibv_pd
        }),
        alloc,
    });
    if let Some(p) = parent {
        p.users.fetch_add(1, Ordering::AcqRel);
    }
    let p = Arc::into_raw(cq);
    channel::register_cq(serial, p);
    CQS.insert(p, Ctx(context));
    p as *mut ibv_cq_ex
}

/// The misuse checker's report of an overrun that happened.
#[cold]
#[inline(never)]
fn overran_check(c: &Cq, cap: usize) {
    verbs_rt::check::report(
        "cq_overrun",
        verbs_rt::check::Obj::new("cq", c.as_ibv() as usize),
        &format!("the CQ overran: a completion arrived with all {cap} entries unpolled; the CQ and its QPs are now in error"),
        "ibv_create_cq(3)/ibv_poll_cq(3): the CQ must be large enough for every completion that can be outstanding; an overrun is a CQ error (IBV_EVENT_CQ_ERR)",
    );
}

pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    if verbs_rt::check::on() && CQS.contains(cq) {
        // SAFETY: a live CQ of ours (checked above).
        let c = unsafe { Cq::from_ibv(cq) };
        let users = c.qp_refs.load(Ordering::Acquire);
        if let Err(e) =
            crate::check::cq_destroy(cq as usize, users, &c.comp_events, &c.async_events)
        {
            return e;
        }
    }
    let claimed = CQS.claim(cq, |_| {
        // SAFETY: cq is a live CQ of ours (in the table, locked).
        let c = unsafe { Cq::from_ibv(cq) };
        // The kernel looks the handle up before it asks whether the CQ is
        // in use.
        if !c.names_itself() {
            Err(UNKNOWN_BY_IOCTL)
        } else if c.qp_refs.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else if c.destroying.swap(true, Ordering::AcqRel) {
            Err(libc::EINVAL)
        } else {
            Ok(())
        }
    });
    if let Err(e) = claimed {
        return e;
    }
    // SAFETY: cq came from create_cq_ex; this call claimed it, so only it
    // reclaims it. It stays in the table until its events are acked.
    let c = unsafe { Cq::from_ibv(cq) };
    channel::unregister_cq(c.serial);
    c.ctx.async_q.purge(cq as usize);
    c.comp_events.wait_all_acked();
    c.async_events.wait_all_acked();
    if !c.channel.is_null() {
        // SAFETY: the channel outlives every CQ attached to it.
        unsafe { Channel::from_ibv(c.channel) }.detach();
    }
    // An allocator's ring goes back now (a QP that used the CQ may hold
    // a reference a moment longer), outside the lock: `free` is the
    // application's code. A completion arriving after this is dropped.
    let ring = {
        let mut r = c.ring.lock();
        r.error = true;
        r.len = 0;
        r.announced = 0;
        r.buf
            .is_extern()
            .then(|| std::mem::replace(&mut r.buf, Slots::heap(0, Cqe::default())))
    };
    drop(ring);
    if !c.parent.is_null() {
        // SAFETY: a parent domain outlives the CQs made on it (it refuses
        // to go while they exist).
        unsafe { Pd::from_ibv(c.parent) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
    }
    CQS.remove(cq);
    // SAFETY: reclaims the application's reference taken in create_cq_ex.
    drop(unsafe { Arc::from_raw(cq as *const Cq) });
    0
}

pub(crate) unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    if !CQS.contains(cq) {
        return libc::EINVAL;
    }
    // SAFETY: cq is a live CQ of ours (checked above).
    let c = unsafe { Cq::from_ibv(cq) };
    if c.destroying.load(Ordering::Acquire) {
        return libc::EINVAL;
    }
    if !c.names_itself() {
        return UNKNOWN_BY_WRITE;
    }
    if cqe <= 0 || cqe as u32 > MAX_CQE {
        return libc::EINVAL;
    }
    if (cqe as usize) < c.ring.lock().len {
        return libc::EINVAL;
    }
    // The new ring from the allocator too (ENOMEM, and the CQ unchanged,
    // when it says NULL); the old one goes back to it. Its callbacks are
    // the application's code: not called under the ring's lock.
    let mut n = match Ring::new(cqe as usize, c.alloc.as_ref()) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let mut r = c.ring.lock();
    if (cqe as usize) < r.len {
        drop(r);
        return libc::EINVAL;
    }
    n.arm = r.arm;
    n.error = r.error;
    let announced = r.announced;
    while let Some(e) = r.pop() {
        n.buf[n.len] = e;
        n.len += 1;
    }
    n.announced = announced;
    let old = std::mem::replace(&mut *r, n);
    // SAFETY: the cqe field is plain data in our allocation.
    unsafe { std::ptr::write_volatile(&raw mut (*c.ibv.get()).cqe, cqe) };
    drop(r);
    drop(old);
    0
}

pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // SAFETY: cq came from create_cq_ex.
    let c = unsafe { Cq::from_ibv(cq) };
    c.polled();
    if c.wants_drive() {
        c.drive();
        if c.ring.idle() {
            return 0;
        }
    }
    let mut r = c.ring.lock();
    if r.len == 0 && r.error {
        return -1;
    }
    let mut n = 0;
    while n < num_entries.max(0) {
        let Some(e) = r.pop() else { break };
        // SAFETY: the caller provides room for num_entries completions.
        unsafe { wc.add(n as usize).write(e.to_wc()) };
        n += 1;
    }
    let fire = c.settle_deferred(&mut r);
    drop(r);
    if fire {
        c.notify();
    }
    if verbs_rt::check::hooks_on() && n > 0 {
        // SAFETY: the n completions just written.
        polled_hooks(cq, unsafe { core::slice::from_raw_parts(wc, n as usize) });
    }
    n
}

/// The tracer's and the checker's look at polled completions.
#[cold]
#[inline(never)]
fn polled_hooks(cq: *mut ibv_cq, wcs: &[ibv_wc]) {
    if verbs_rt::trace::on() {
        crate::trace::wcs(cq as usize, wcs);
    }
    if verbs_rt::check::on() {
        crate::check::polled(cq, wcs);
    }
}

pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: cq came from create_cq_ex.
    let c = unsafe { Cq::from_ibv(cq) };
    // rxe arms through the kernel, which refuses a handle it does not
    // know; two loads, not a table lookup, as arming is on the event path.
    if !c.names_itself() {
        return UNKNOWN_BY_WRITE;
    }
    let mut r = c.ring.lock();
    // A solicited-only request does not weaken an existing any-completion arm.
    if solicited_only == 0 {
        r.arm = ARM_ANY;
    } else if r.arm != ARM_ANY {
        r.arm = ARM_SOLICITED;
    }
    // Arming a CQ that holds unpolled completions no event announced yet
    // fires at once, as ConnectX does for the completions past the
    // consumer index its arm doorbell carries: programs written from
    // vendor documentation poll one completion per event and would
    // otherwise wait for ever on completions that arrived together. A
    // completion an event already announced (the usual pattern: get the
    // event, re-arm, then poll) raises no second one. Armed right after
    // an event was taken, before any poll, the CQ leaves the decision to
    // that poll (`settle_deferred`): a program that then takes every
    // completion (ibv_rc_pingpong -e -t takes two an event) meets no
    // event for a CQ it emptied itself, one that takes one a time still
    // gets an event for the rest.
    let unannounced = r.arm == ARM_ANY && r.len > r.announced && !r.error;
    let defer = unannounced && c.taken.load(Ordering::Relaxed);
    let fire = unannounced && !defer;
    if fire {
        r.arm = ARM_NONE;
        r.announced += 1;
    }
    c.deferred.store(defer, Ordering::Relaxed);
    drop(r);
    if verbs_rt::check::on() {
        crate::check::armed(c.as_ibv() as usize, c.backlog() as u64);
    }
    if fire && c.chan_wr >= 0 {
        channel::notify(c.chan_wr, c.serial);
    }
    c.tell_armed();
    0
}

/// Moves the poll cursor to the next completion, or reports ENOENT.
fn advance(c: &Cq) -> c_int {
    let e = {
        let mut r = c.ring.lock();
        match r.pop() {
            Some(e) => e,
            None => {
                // The batch is over (an ENOENT start has no end_poll).
                let fire = c.settle_deferred(&mut r);
                drop(r);
                if fire {
                    c.notify();
                }
                return libc::ENOENT;
            }
        }
    };
    // SAFETY: only the thread inside the start/end poll section uses the
    // cursor and the cursor fields of the public struct.
    unsafe {
        *c.cur.get() = e;
        let ibv = c.ibv.get();
        (*ibv).status = e.status;
        (*ibv).wr_id = e.wr_id;
    }
    if verbs_rt::check::hooks_on() {
        cqe_hooks(c, &e);
    }
    0
}

/// The tracer's and the checker's look at a completion read through the
/// extended poll.
#[cold]
#[inline(never)]
fn cqe_hooks(c: &Cq, e: &Cqe) {
    if verbs_rt::trace::on() {
        trace_cqe(c, e);
    }
    if verbs_rt::check::on() {
        crate::check::polled(c.as_ibv(), &[e.to_wc()]);
    }
}

/// The tracer's line for a completion read through `ibv_start_poll` /
/// `ibv_next_poll`.
#[cold]
#[inline(never)]
fn trace_cqe(c: &Cq, e: &Cqe) {
    crate::trace::completion(
        "cq_ex_poll",
        c as *const Cq as usize,
        e.wr_id,
        e.status,
        e.opcode,
        e.byte_len,
        e.imm,
        e.qp_num,
        e.wc_flags,
        e.vendor_err,
    );
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: attr, when given, points to the caller's poll attributes.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: cq came from create_cq_ex.
    let c = unsafe { Cq::from_ibv(cq) };
    c.polled();
    if c.wants_drive() {
        c.drive();
        if c.ring.idle() {
            return libc::ENOENT;
        }
    }
    advance(c)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: cq came from create_cq_ex.
    advance(unsafe { Cq::from_ibv(cq) })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: cq came from create_cq_ex.
    let c = unsafe { Cq::from_ibv(cq) };
    if c.deferred.load(Ordering::Relaxed) {
        let fire = c.settle_deferred(&mut c.ring.lock());
        if fire {
            c.notify();
        }
    }
}

/// # Safety
/// `cq` must be a live CQ inside a start/end poll section.
unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a Cqe {
    // SAFETY: per the contract, only this thread touches the cursor now.
    unsafe { &*Cq::from_ibv(cq).cur.get() }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.opcode
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.vendor_err
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.byte_len
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.imm
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.qp_num
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.src_qp
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.wc_flags
}
unsafe extern "C" fn read_slid(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.sl
}
unsafe extern "C" fn read_dlid_path_bits(_cq: *mut ibv_cq_ex) -> u8 {
    0
}
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.ts
}
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: called between start_poll and end_poll.
    unsafe { cur(cq) }.wallclock
}
unsafe extern "C" fn read_cvlan(_cq: *mut ibv_cq_ex) -> u16 {
    0
}
unsafe extern "C" fn read_flow_tag(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) {
    if !tm_info.is_null() {
        // SAFETY: called between start_poll and end_poll.
        let e = unsafe { cur(cq) };
        // SAFETY: out-pointer supplied by the caller.
        unsafe {
            tm_info.write(ibv_wc_tm_info {
                tag: e.tm_tag,
                r#priv: e.tm_priv,
            })
        };
    }
}

/// Acknowledges completion events of a CQ (`ibv_ack_cq_events`).
pub(crate) unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: cq came from create_cq_ex and is not destroyed (destroy waits
    // for these acks).
    let c = unsafe { Cq::from_ibv(cq) };
    c.comp_events.acked(nevents as u64);
    let total = c.comp_events.acked_total();
    // SAFETY: the public counter is plain data in our allocation.
    unsafe {
        std::ptr::write_volatile(&raw mut (*c.ibv.get()).comp_events_completed, total as u32)
    };
}

impl channel::EventSource for Cq {
    fn delivered(&self) {
        self.comp_events.delivered();
        self.taken.store(true, Ordering::Relaxed);
    }

    fn checked_delivery(&self) {
        crate::check::event_delivered(self.as_ibv() as usize);
    }

    fn public(&self) -> (*mut ibv_cq, *mut std::os::raw::c_void) {
        // SAFETY: plain data in our allocation, set at creation.
        (self.as_ibv(), unsafe { (*self.ibv.get()).cq_context })
    }
}
