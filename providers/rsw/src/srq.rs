//! Shared receive queues: one receive ring that many QPs take from.
//!
//! A QP's responder claims a WQE from its SRQ when a message that needs
//! one starts (see `Qp::claim_recv`), under the SRQ's lock, so each WQE
//! goes to exactly one message. A QP that finds the SRQ empty stalls (RNR,
//! as with its own queue) and leaves its serial here; posting wakes every
//! such QP through the progress engine. Lock order: a QP's lock, then its
//! SRQ's.

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;
use verbs_rt::check::Obj;

use std::collections::HashMap;
use std::sync::Weak;

use crate::context::{Context, CtxShared};
use crate::cq::Cq;
use crate::device::{MAX_SGE, MAX_SRQ_WR};
use crate::event_count::EventCounter;
use crate::handles::{names, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::progress::engine;
use crate::ring::{RecvQueue, RecvWqe};
use crate::ringmem::{Allocator, RES_TYPE_SRQ};
use crate::transport::mailbox::Mailbox;
use crate::util::{ptr_or_errno, set_errno};
use crate::xrcd::{Domain, Xrcd};
use verbs_rt::ForkFresh;
use verbs_rt::Handles;

/// The SRQs handed out and not destroyed.
pub static SRQS: Handles<Arc<Srq>> = Handles::new();

/// SRQs by domain (`Domain::id`, 0 for basic SRQs) and number
/// (`ibv_get_srq_num`): how an XRC request names the SRQ it lands in.
/// Numbers are unique per domain (a shared domain's registry numbers
/// them; two such domains may use the same ones).
type ByNumber = HashMap<(u64, u32), Weak<Srq>>;
static BY_NUMBER: ForkFresh<Mutex<ByNumber>> = ForkFresh::new(|| Mutex::new(HashMap::new()));
static NEXT_NUMBER: AtomicU32 = AtomicU32::new(1);

/// A new process-local SRQ number: 24 bits, the low 12 counting this
/// process's SRQs and the next 11 taken from the process id. XRC SRQs of
/// a domain shared between processes are numbered by its registry
/// instead, with bit 23 set (`xrc_registry::SHARED_SRQN`), unique across
/// the domain's processes.
fn srq_number() -> u32 {
    let pid = std::process::id() & 0x7ff;
    let n = NEXT_NUMBER.fetch_add(1, Ordering::Relaxed) & 0xfff;
    (pid << 12) | n.max(1)
}

/// The live XRC SRQ with number `n` in domain `d`.
pub fn by_number(d: &Domain, n: u32) -> Option<Arc<Srq>> {
    BY_NUMBER
        .get()
        .lock()
        .get(&(d.id, n))
        .and_then(Weak::upgrade)
}

impl Srq {
    fn number_key(&self) -> (u64, u32) {
        (self.xrc.as_ref().map_or(0, |x| x.domain.id), self.num)
    }
}

/// What makes an SRQ an XRC SRQ: its domain, and the CQ its receives
/// complete into (an XRC receive QP has none of its own).
pub struct XrcSrq {
    pub domain: Arc<Domain>,
    pub cq: Arc<Cq>,
}

pub struct SrqInner {
    /// In a mailbox (`transport::mailbox`) for a basic SRQ, so same-host
    /// peers take its receives themselves; private for XRC SRQs and after
    /// a resize.
    pub rq: RecvQueue,
    /// The mailboxes of QPs on this SRQ whose same-host peers may wait
    /// for a receive: a post rings them.
    boxes: Vec<(u64, Weak<Mailbox>)>,
    /// The shared ring a resize closed (see `modify_srq`).
    retired: Option<Arc<Mailbox>>,
    /// Armed limit (`srq_limit`); 0 when disarmed.
    limit: u32,
    /// Serials of QPs stalled on an empty SRQ, to kick when a receive is
    /// posted.
    waiters: Vec<u64>,
    destroyed: bool,
}

#[repr(C)]
pub struct Srq {
    /// Shared with the application (it reads `context`, `pd`,
    /// `srq_context`).
    pub ibv: UnsafeCell<ibv_srq>,
    pub ctx: Arc<CtxShared>,
    /// The context it was made in (the public struct's may have been
    /// overwritten since).
    pub ibv_ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub pd_id: u32,
    /// The parent domain's allocator its private ring comes from (at
    /// creation, or when a resize makes it private).
    alloc: Option<Arc<Allocator>>,
    pub inner: Mutex<SrqInner>,
    pub async_events: Arc<EventCounter>,
    /// QPs attached; destroy is refused while any exist.
    pub users: AtomicU32,
    /// Its number (`ibv_get_srq_num`).
    pub num: u32,
    /// Its receive ring is in a mailbox same-host peers take from.
    pub sharing: std::sync::atomic::AtomicBool,
    pub xrc: Option<XrcSrq>,
    /// A tag-matching SRQ's tag list and CQ (`tm`).
    pub tm: Option<crate::tm::TmSrq>,
    /// An XRC SRQ of a domain shared between processes: its number is in
    /// the domain's registry, and other processes' receive QPs take its
    /// receives from its mailbox and leave completions there
    /// (`remote_srq`); `kick` (an eventfd they write when its CQ is
    /// armed) and `serial` (its progress-engine target) bring them to the
    /// CQ.
    pub registered: bool,
    pub serial: u64,
    kick: Option<std::os::fd::OwnedFd>,
    /// One mover of completions at a time (poll and progress thread).
    draining: Mutex<()>,
}

// SAFETY: mutable state is behind `inner`'s mutex; `ibv` is written only
// at creation; `pd` outlives the SRQ (dealloc_pd refuses while in use).
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
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

    /// The live SRQ behind `srq` if it was made in `context` and its
    /// public struct still names it; else EINVAL for what is no SRQ of
    /// ours, `unknown` for one that no longer names itself or is of
    /// another context.
    pub fn checked(
        srq: *mut ibv_srq,
        context: *mut ibv_context,
        unknown: c_int,
    ) -> Result<Arc<Srq>, c_int> {
        let s = SRQS.get(srq).ok_or(libc::EINVAL)?;
        if s.ibv_ctx != context || !s.names_itself() {
            return Err(unknown);
        }
        Ok(s)
    }

    /// # Safety
    /// `srq` must come from our `create_srq_ex` and not be destroyed.
    pub unsafe fn from_ibv<'a>(srq: *mut ibv_srq) -> &'a Srq {
        // SAFETY: ibv is the first field of the Arc'd Srq the pointer names.
        unsafe { &*(srq as *const Srq) }
    }

    pub fn as_ibv(&self) -> *mut ibv_srq {
        self.ibv.get()
    }

    /// Takes the oldest receive into `w` for QP `serial`; when there is
    /// none, remembers the QP so the next post wakes it.
    pub fn claim(&self, w: &mut RecvWqe, serial: u64) -> bool {
        let mut g = self.inner.lock();
        if !g.rq.take_into(w, self.pd_id) {
            if !g.waiters.contains(&serial) {
                g.waiters.push(serial);
            }
            return false;
        }
        self.check_limit(g);
        true
    }

    /// The limit event fires once when the queue drops below it, then the
    /// limit is disarmed (IB spec, SRQ limit). Also after same-host peers
    /// took receives (checked when their completions are moved).
    fn check_limit(&self, mut g: parking_lot::MutexGuard<SrqInner>) {
        if g.limit != 0 && (g.rq.len() as u32) < g.limit {
            g.limit = 0;
            drop(g);
            self.ctx.async_q.push(
                self.as_ibv() as usize,
                IBV_EVENT_SRQ_LIMIT_REACHED,
                Some(self.async_events.clone()),
            );
        }
    }

    /// See [`Srq::check_limit`]: after peers took receives.
    pub fn taken_by_peers(&self) {
        self.check_limit(self.inner.lock());
    }

    /// The PD and mailbox offset same-host peers take receives from, if
    /// the queue is shared; `mbox` (a QP's) is rung on later posts when a
    /// peer waits in it.
    pub fn share(&self, serial: u64, mbox: Option<&Arc<Mailbox>>) -> Option<(u32, u64)> {
        let mut g = self.inner.lock();
        let off = g.rq.mailbox()?.offset();
        if let Some(m) = mbox {
            g.boxes.retain(|(_, w)| w.strong_count() > 0);
            if !g.boxes.iter().any(|(s, _)| *s == serial) {
                g.boxes.push((serial, Arc::downgrade(m)));
            }
        }
        Some((self.pd_id, off))
    }
}

fn create(context: *mut ibv_context, a: &mut ibv_srq_init_attr_ex) -> Result<*mut ibv_srq, c_int> {
    let known = IBV_SRQ_INIT_ATTR_TYPE
        | IBV_SRQ_INIT_ATTR_PD
        | IBV_SRQ_INIT_ATTR_XRCD
        | IBV_SRQ_INIT_ATTR_CQ
        | IBV_SRQ_INIT_ATTR_TM;
    if a.comp_mask & !known != 0 || a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return Err(libc::EINVAL);
    }
    let ty = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if ty != IBV_SRQT_BASIC && ty != IBV_SRQT_XRC && ty != IBV_SRQT_TM {
        return Err(libc::EOPNOTSUPP);
    }
    let xrc = if ty == IBV_SRQT_XRC {
        let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        if a.comp_mask & need != need {
            return Err(libc::EINVAL);
        }
        // rdma-core 44 creates SRQs by ioctl: a handle the kernel does not
        // know there is ENOENT.
        Cq::checked(a.cq, context, UNKNOWN_BY_IOCTL)?;
        let domain = Xrcd::domain_of(a.xrcd).ok_or(libc::EINVAL)?;
        // SAFETY: a.cq is a live CQ of ours (checked above).
        let cq = unsafe { Cq::arc_from_ibv(a.cq) };
        Some(XrcSrq { domain, cq })
    } else {
        None
    };
    // A tag-matching SRQ has a CQ of its own too, where its list
    // operations and its receives complete (`tm`).
    let tm = if ty == IBV_SRQT_TM {
        let need = IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
        if a.comp_mask & need != need {
            return Err(libc::EINVAL);
        }
        Cq::checked(a.cq, context, UNKNOWN_BY_IOCTL)?;
        // SAFETY: a.cq is a live CQ of ours (checked above).
        let cq = unsafe { Cq::arc_from_ibv(a.cq) };
        Some(crate::tm::TmSrq::new(cq, &a.tm_cap)?)
    } else {
        None
    };
    let pd = Pd::checked(a.pd, Some(context), UNKNOWN_BY_IOCTL)?;
    crate::util::limit(
        "srq",
        crate::device::MAX_SRQ,
        SRQS.room_for_one(crate::device::MAX_SRQ),
    )?;
    let at = a.attr;
    if at.max_wr == 0 || at.max_wr > MAX_SRQ_WR || at.max_sge > MAX_SGE {
        return Err(libc::EINVAL);
    }
    let max_sge = at.max_sge.max(1);
    // SAFETY: context comes from this provider.
    let ctx = unsafe { Context::shared_of(context) };
    let alloc = pd.allocator().cloned();
    let (wr, sge) = (at.max_wr as usize, max_sge as usize);
    let mut ibv = ibv_srq::zeroed();
    ibv.context = context;
    ibv.srq_context = a.srq_context;
    ibv.pd = a.pd;
    let serial = crate::progress::new_serial();
    ibv.handle = serial as u32;
    // Other processes reach an XRC SRQ of a shared domain through its
    // mailbox; one of an unnamed domain stays private.
    let reg = xrc.as_ref().and_then(|x| x.domain.reg.as_ref());
    let registered = reg.is_some();
    // A TM-SRQ's receives stay private: same-host peers cannot match
    // tags, so their SENDs come over the connection to our responder.
    let rq = if (xrc.is_some() && reg.is_none()) || tm.is_some() {
        RecvQueue::new(wr, sge, alloc.as_ref(), RES_TYPE_SRQ)?
    } else {
        RecvQueue::shared(wr, sge, alloc.as_ref(), RES_TYPE_SRQ)?
    };
    let (num, kick) = match reg {
        None => (srq_number(), None),
        Some(r) => {
            use std::os::fd::AsRawFd;
            let kick = rq.mailbox().and_then(|_| {
                rustix::event::eventfd(
                    0,
                    rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
                )
                .ok()
            });
            let e = crate::xrc_registry::SrqEntry {
                num: 0,
                owner: crate::xrc_registry::Proc { pid: 0, start: 0 },
                table: crate::transport::local::offer().map(|(_, fd, token)| (fd, token)),
                pd: pd.id,
                mbox: rq.mailbox().map(|m| m.offset()),
                kick_fd: kick.as_ref().map(|k| k.as_raw_fd() as u32),
            };
            (r.add_srq(&e).ok_or(libc::ENOMEM)?, kick)
        }
    };
    let srq = Arc::new(Srq {
        ibv: UnsafeCell::new(ibv),
        ctx,
        ibv_ctx: context,
        pd: a.pd,
        pd_id: pd.id,
        alloc,
        inner: Mutex::new(SrqInner {
            rq,
            boxes: Vec::new(),
            retired: None,
            limit: 0,
            waiters: Vec::new(),
            destroyed: false,
        }),
        async_events: Arc::new(EventCounter::default()),
        users: AtomicU32::new(0),
        num,
        xrc,
        tm,
        sharing: std::sync::atomic::AtomicBool::new(false),
        registered,
        serial,
        kick,
        draining: Mutex::new(()),
    });
    // An SRQ has no state of its own: its ring is open from the start
    // (each QP's own mailbox says whether that QP receives).
    let shared = srq
        .inner
        .lock()
        .rq
        .mailbox()
        .inspect(|m| m.set_open(true))
        .is_some();
    srq.sharing.store(shared, Ordering::Relaxed);
    pd.users.fetch_add(1, Ordering::AcqRel);
    if let Some(x) = &srq.xrc {
        x.domain.users.fetch_add(1, Ordering::AcqRel);
        x.cq.qp_refs.fetch_add(1, Ordering::AcqRel);
    }
    if let Some(t) = &srq.tm {
        t.cq.qp_refs.fetch_add(1, Ordering::AcqRel);
    }
    BY_NUMBER
        .get()
        .lock()
        .insert(srq.number_key(), Arc::downgrade(&srq));
    if srq.registered {
        srq.attach_remote();
    }
    a.attr.max_wr = at.max_wr;
    a.attr.max_sge = max_sge;
    let p = srq.as_ibv();
    SRQS.insert(p, srq.clone());
    // The table keeps the object alive; the pointer is its address.
    std::mem::forget(srq);
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: attr points to the caller's init attributes (non-NULL).
    ptr_or_errno(create(context, unsafe { &mut *attr }))
}

pub(crate) unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let Some(s) = SRQS.get(srq) else {
        return libc::EINVAL;
    };
    if !s.names_itself() {
        return UNKNOWN_BY_WRITE;
    }
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: attr is the caller's (non-NULL).
    let a = unsafe { *attr };
    let mask = mask as u32;
    if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
        return libc::EINVAL;
    }
    let mut g = s.inner.lock();
    let cap = if mask & IBV_SRQ_MAX_WR != 0 {
        // Resizing: never below what is posted now.
        if a.max_wr == 0 || a.max_wr > MAX_SRQ_WR || (a.max_wr as usize) < g.rq.len() {
            return libc::EINVAL;
        }
        a.max_wr as usize
    } else {
        g.rq.cap
    };
    if mask & IBV_SRQ_LIMIT != 0 && a.srq_limit as usize > cap {
        return libc::EINVAL;
    }
    if cap != g.rq.cap {
        let q = match g.rq.resized(cap, s.alloc.as_ref(), RES_TYPE_SRQ) {
            Ok(q) => q,
            Err(e) => return e,
        };
        // Peers may still read the shared ring's offset from our QPs'
        // entries: it stays, closed, for the SRQ's life.
        if let Some(m) = g.rq.mailbox() {
            g.retired = Some(m.clone());
            s.sharing.store(false, Ordering::Relaxed);
        }
        g.rq = q;
    }
    if mask & IBV_SRQ_LIMIT != 0 {
        g.limit = a.srq_limit;
    }
    0
}

pub(crate) unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let Some(s) = SRQS.get(srq) else {
        return libc::EINVAL;
    };
    if !s.names_itself() {
        return UNKNOWN_BY_WRITE;
    }
    if attr.is_null() {
        return libc::EINVAL;
    }
    let g = s.inner.lock();
    let a = ibv_srq_attr {
        max_wr: g.rq.cap as u32,
        max_sge: g.rq.max_sge as u32,
        srq_limit: g.limit,
    };
    // SAFETY: out-pointer supplied by the caller (non-NULL).
    unsafe { attr.write(a) };
    0
}

pub(crate) unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    if verbs_rt::check::on() {
        if let Some(s) = SRQS.get(srq) {
            if let Err(e) = crate::check::async_unacked(
                Obj::new("srq", srq as usize),
                "ibv_destroy_srq",
                &s.async_events,
            ) {
                return e;
            }
        }
    }
    let claimed = SRQS.claim(srq, |s| {
        if !s.names_itself() {
            return Err(UNKNOWN_BY_IOCTL);
        }
        let mut g = s.inner.lock();
        if g.destroyed {
            return Err(libc::EINVAL);
        }
        if s.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        g.destroyed = true;
        Ok(())
    });
    let s = match claimed {
        Ok(s) => s,
        Err(e) => return e,
    };
    // Its ring goes back to the parent domain's allocator now, not when
    // the last reference to the SRQ goes; and outside our locks, since
    // `free` is the application's code.
    let ring = {
        let mut g = s.inner.lock();
        if g.rq.is_extern() {
            Some(std::mem::replace(&mut g.rq, RecvQueue::none()))
        } else {
            None
        }
    };
    drop(ring);
    s.ctx.async_q.purge(srq as usize);
    s.async_events.wait_all_acked();
    // SAFETY: the PD outlives its SRQs.
    unsafe { Pd::from_ibv(s.pd) }
        .users
        .fetch_sub(1, Ordering::AcqRel);
    if s.registered {
        s.detach_remote();
    }
    if let Some(x) = &s.xrc {
        x.domain.users.fetch_sub(1, Ordering::AcqRel);
        x.cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    }
    if let Some(t) = &s.tm {
        t.cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    }
    BY_NUMBER.get().lock().remove(&s.number_key());
    SRQS.remove(srq);
    // SAFETY: reclaims the reference create forgot.
    drop(unsafe { Arc::from_raw(srq as *const Srq) });
    0
}

pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    let Some(s) = SRQS.get(srq) else {
        return libc::EINVAL;
    };
    if num.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: out-pointer supplied by the caller (non-NULL).
    unsafe { num.write(s.num) };
    0
}

pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if verbs_rt::check::hooks_on() {
        if verbs_rt::check::on() {
            // SAFETY: srq came from create_srq_ex.
            let s = unsafe { Srq::from_ibv(srq) };
            let max_sge = s.inner.lock().rq.max_sge;
            // SAFETY: the caller's list.
            unsafe { check_post(srq, s.pd_id, max_sge, wr) };
        }
        if !verbs_rt::trace::on() {
            // SAFETY: forwarded contract.
            return unsafe { post_srq_recv_inner(srq, wr, bad_wr) };
        }
        // SAFETY: the caller's list.
        unsafe { crate::trace::recv_wrs("post_srq_recv", srq as usize, wr) };
        // SAFETY: forwarded contract.
        let rc = unsafe { post_srq_recv_inner(srq, wr, bad_wr) };
        crate::trace::post_result("post_srq_recv", srq as usize, rc, None);
        return rc;
    }
    // SAFETY: forwarded contract.
    unsafe { post_srq_recv_inner(srq, wr, bad_wr) }
}

/// # Safety
/// As for `post_srq_recv`.
#[inline(always)]
unsafe fn post_srq_recv_inner(
    srq: *mut ibv_srq,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: srq came from create_srq_ex (data path: trusted like a QP).
    let s = unsafe { Srq::from_ibv(srq) };
    let mut g = s.inner.lock();
    let mut rc = 0;
    while !wr.is_null() {
        // SAFETY: wr is an element of the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the caller's WR describes its own SGE array.
        match unsafe { g.rq.checked_sges(w) } {
            Ok(sges) => g.rq.push(w.wr_id, sges),
            Err(e) => {
                rc = e;
                break;
            }
        }
        wr = w.next;
    }
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { *bad_wr = wr };
    }
    // Same-host peers waiting in a QP's mailbox for one of our receives:
    // that QP's progress rings them (`Qp::wake_waiting_peer`).
    // (The SRQ's own flag says whether any does: one load per post.)
    if g.rq.mailbox().is_some_and(|m| m.take_rnr_waiting()) {
        if let Ok(e) = engine() {
            for (serial, m) in &g.boxes {
                if m.upgrade().is_some_and(|m| m.rnr_waiting()) {
                    e.kick(*serial);
                }
            }
        }
    }
    if !g.waiters.is_empty() && !g.rq.is_empty() {
        let waiters = std::mem::take(&mut g.waiters);
        drop(g);
        if let Ok(e) = engine() {
            for serial in waiters {
                e.kick(serial);
            }
        }
    }
    rc
}

/// `ibv_post_srq_ops`: tag list operations on a tag-matching SRQ
/// (`tm`); EINVAL on any other SRQ, as mlx5 says.
pub(crate) unsafe extern "C" fn post_srq_ops(
    srq: *mut ibv_srq,
    wr: *mut ibv_ops_wr,
    bad_wr: *mut *mut ibv_ops_wr,
) -> c_int {
    let refuse = |rc: c_int| {
        if !bad_wr.is_null() {
            // SAFETY: out-pointer supplied by the caller.
            unsafe { *bad_wr = wr };
        }
        rc
    };
    let Some(s) = SRQS.get(srq) else {
        return refuse(libc::EINVAL);
    };
    let Some(tm) = &s.tm else {
        return refuse(libc::EINVAL);
    };
    // SAFETY: the caller's list.
    let rc = unsafe { tm.post(wr, bad_wr) };
    if verbs_rt::trace::on() {
        crate::trace::post_result("post_srq_ops", srq as usize, rc, None);
    }
    rc
}

/// The misuse checker's checks of `ibv_post_srq_recv` (`RDMA_CHECK`):
/// the SGEs against the SRQ's PD.
///
/// # Safety
/// `wr` is the caller's list of receive WRs.
unsafe fn check_post(srq: *mut ibv_srq, pd: u32, max_sge: usize, mut wr: *mut ibv_recv_wr) {
    let obj = Obj::new("srq", srq as usize);
    while !wr.is_null() {
        // SAFETY: wr walks the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: the WR describes its own SGE array.
        for s in unsafe { crate::check::sg_list(w.sg_list, w.num_sge, max_sge) } {
            crate::mr::check_sge(obj, pd, s, "ibv_post_srq_recv");
        }
        wr = w.next;
    }
}

// ---- an XRC SRQ other processes deliver into ------------------------------------------

impl Srq {
    /// Lets other processes' completions reach the SRQ's CQ: polling the
    /// CQ moves them, and so does the progress thread when they ring.
    fn attach_remote(self: &Arc<Self>) {
        let Some(x) = &self.xrc else { return };
        x.cq.attach_qp(self);
        if let (Some(k), Ok(e)) = (&self.kick, engine()) {
            use std::os::fd::AsRawFd;
            e.register_qp(self.serial, self);
            let tok = crate::progress::token(self.serial, crate::progress::Kind::Datagram);
            if let Err(err) = e.add(k.as_raw_fd(), tok, libc::EPOLLIN as u32) {
                log::warn!("srq {:#x}: cannot watch its eventfd: {err}", self.num);
            }
        }
    }

    fn detach_remote(&self) {
        if let Some(r) = self.xrc.as_ref().and_then(|x| x.domain.reg.as_ref()) {
            r.remove_srq(self.num);
        }
        // No process takes a receive any more: close the ring.
        if let Some(m) = self.inner.lock().rq.mailbox() {
            m.set_open(false);
        }
        if let Some(x) = &self.xrc {
            x.cq.detach_qp(self as *const Srq);
        }
        if let Ok(e) = engine() {
            e.unregister_qp(self.serial);
        }
        if let Some(k) = &self.kick {
            use std::os::fd::AsRawFd;
            crate::progress::unwatch(k.as_raw_fd());
        }
    }

    /// Moves the completions other processes left in the mailbox to the
    /// SRQ's CQ.
    fn drain_remote(&self, wait: bool) {
        let Some(x) = &self.xrc else { return };
        let _d = if wait {
            self.draining.lock()
        } else {
            match self.draining.try_lock() {
                Some(d) => d,
                None => return,
            }
        };
        let Some(m) = self.inner.lock().rq.mailbox().cloned() else {
            return;
        };
        let mut any = false;
        while let Some((d, _)) = m.pop_completion() {
            any = true;
            x.cq.push(crate::cq::Cqe {
                wr_id: d.wr_id,
                status: d.status,
                opcode: d.opcode,
                byte_len: d.byte_len,
                imm: d.imm,
                qp_num: d.qp_num,
                src_qp: d.src_qp,
                wc_flags: if d.flags & crate::transport::mailbox::FLAG_IMM != 0 {
                    IBV_WC_WITH_IMM
                } else {
                    0
                },
                solicited: d.flags & crate::transport::mailbox::FLAG_SOLICITED != 0,
                ..crate::cq::Cqe::default()
            });
        }
        if any {
            x.cq.if_unarmed(|| m.set_want_kick(false));
            self.taken_by_peers();
        }
    }
}

impl crate::cq::Producer for Srq {
    fn drive(&self) {
        self.drain_remote(false);
    }

    fn kick(&self) {
        if let Ok(e) = engine() {
            e.kick(self.serial);
        }
    }

    fn armed(&self) {
        let m = self.inner.lock().rq.mailbox().cloned();
        if let Some(m) = m {
            m.set_want_kick(true);
            if m.has_completions() {
                crate::cq::Producer::kick(self);
            }
        }
    }
}

impl crate::progress::Target for Srq {
    fn on_event(&self, _kind: crate::progress::Kind, _events: u32) {
        if let Some(k) = &self.kick {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(k, &mut b);
        }
        self.drain_remote(true);
    }

    fn on_kick(&self) {
        self.drain_remote(true);
    }

    fn on_timer(&self, _now: u64) {}
}
