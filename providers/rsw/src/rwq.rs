//! Receive work queues (`ibv_create_wq`, `IBV_WQT_RQ`) and the
//! indirection tables RSS spreads frames over (`ibv_create_rwq_ind_table`).
//!
//! A WQ is a receive queue with a CQ of its own and a state (RESET, RDY,
//! ERR); a raw packet QP created on an indirection table (the RSS QP)
//! places each frame steered to it into a receive of the table's WQ that
//! the frame's hash picks (`engine::raw`), and completes it into that WQ's
//! CQ with `qp_num` the WQ's number, as mlx5 does.

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use crate::cq::{Cq, Cqe};
use crate::device::{MAX_IND_TBLS, MAX_LOG_IND_TBL, MAX_QP_WR, MAX_SGE, MAX_WQS};
use crate::handles::{Ctx, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::ring::{RecvQueue, RecvWqe};
use crate::ringmem::RES_TYPE_QP;
use crate::util::{ptr_or_errno, set_errno};
use verbs_rt::Handles;

/// The WQs handed out and not destroyed.
pub static WQS: Handles<Ctx> = Handles::new();
/// The indirection tables handed out and not destroyed.
pub static TABLES: Handles<Ctx> = Handles::new();

/// WQ and table numbers: from 0x1000000 down, apart from the QPs' ports.
static NEXT_NUM: AtomicU32 = AtomicU32::new(0x00f0_0000);

pub struct WqInner {
    pub state: ibv_wq_state,
    pub rq: RecvQueue,
}

#[repr(C)]
pub struct Wq {
    pub ibv: UnsafeCell<ibv_wq>,
    pub serial: u32,
    ibv_ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub pd_id: u32,
    pub cq: Arc<Cq>,
    pub inner: Mutex<WqInner>,
    /// Indirection tables naming it: destroy is refused (EBUSY) while any
    /// exist.
    users: AtomicU32,
}

// SAFETY: mutable state is behind `inner`; `ibv` is the C-visible struct,
// written only under that lock (its state); the PD outlives the WQ.
unsafe impl Send for Wq {}
// SAFETY: as above.
unsafe impl Sync for Wq {}

impl Wq {
    /// The live WQ behind `wq`, made in `context` (when given) and still
    /// named by its public struct.
    fn checked(
        wq: *mut ibv_wq,
        context: Option<*mut ibv_context>,
        unknown: c_int,
    ) -> Result<Arc<Wq>, c_int> {
        let Some(Ctx(ctx)) = WQS.get(wq) else {
            return Err(libc::EINVAL);
        };
        let p = wq as *const Wq;
        // SAFETY: a live WQ of ours (in the table): an Arc's data pointer;
        // one more count for the caller.
        let w = unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        let ibv = w.ibv.get();
        // SAFETY: the public struct is ours, live while w is.
        let names = unsafe {
            crate::handles::names(
                &raw const (*ibv).context,
                &raw const (*ibv).handle,
                ctx,
                w.serial,
            )
        };
        if !names || context.is_some_and(|c| c != ctx) {
            return Err(unknown);
        }
        Ok(w)
    }

    pub fn wqn(&self) -> u32 {
        // SAFETY: plain field of our public struct, fixed at creation.
        unsafe { (*self.ibv.get()).wq_num }
    }

    fn set_state(&self, g: &mut WqInner, s: ibv_wq_state) {
        g.state = s;
        // SAFETY: the public state field; programs only read it.
        unsafe { std::ptr::write_volatile(&raw mut (*self.ibv.get()).state, s) };
    }

    /// Completes every posted receive with `IBV_WC_WR_FLUSH_ERR`.
    fn flush(&self, g: &mut WqInner) {
        let wqn = self.wqn();
        while let Some(wr_id) = g.rq.pop() {
            self.cq.push(Cqe {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: IBV_WC_RECV,
                qp_num: wqn,
                ..Cqe::default()
            });
        }
    }

    /// Takes the oldest receive into `w` if the WQ is ready and has one.
    pub fn take(&self, w: &mut RecvWqe) -> bool {
        let mut g = self.inner.lock();
        g.state == IBV_WQS_RDY && g.rq.take_into(w, self.pd_id)
    }

    /// Completes a receive taken by [`Wq::take`]; a failed one moves the
    /// WQ to ERR, flushing the rest, as a failed completion moves a QP.
    pub fn complete(&self, e: Cqe) {
        let failed = e.status != IBV_WC_SUCCESS;
        self.cq.push(Cqe {
            qp_num: self.wqn(),
            opcode: IBV_WC_RECV,
            ..e
        });
        if failed {
            let mut g = self.inner.lock();
            log::error!("wq {:#x}: a receive failed: RDY -> ERR", self.wqn());
            self.set_state(&mut g, IBV_WQS_ERR);
            self.flush(&mut g);
        }
    }
}

fn create(context: *mut ibv_context, a: &mut ibv_wq_init_attr) -> Result<*mut ibv_wq, c_int> {
    if a.wq_type != IBV_WQT_RQ || a.comp_mask & !IBV_WQ_INIT_ATTR_FLAGS != 0 {
        return Err(libc::EINVAL);
    }
    // Stripping, FCS scatter, delayed drop, padding: not offered
    // (`raw_packet_caps` is 0).
    if a.comp_mask & IBV_WQ_INIT_ATTR_FLAGS != 0 && a.create_flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.max_wr == 0 || a.max_wr > MAX_QP_WR || a.max_sge > MAX_SGE {
        return Err(libc::EINVAL);
    }
    let pd = Pd::checked(a.pd, Some(context), UNKNOWN_BY_IOCTL)?;
    Cq::checked(a.cq, context, UNKNOWN_BY_IOCTL)?;
    WQS.room_for_one(MAX_WQS)?;
    let sge = a.max_sge.max(1);
    let rq = RecvQueue::new(a.max_wr as usize, sge as usize, pd.allocator(), RES_TYPE_QP)?;
    let serial = crate::progress::new_serial() as u32;
    let mut ibv: ibv_wq = ibv_wq {
        context,
        wq_context: a.wq_context,
        pd: a.pd,
        cq: a.cq,
        wq_num: NEXT_NUM.fetch_add(1, Ordering::Relaxed) & 0xff_ffff,
        handle: serial,
        state: IBV_WQS_RESET,
        wq_type: IBV_WQT_RQ,
        post_recv: Some(post_wq_recv),
        // SAFETY: zeroed pthread objects; libibverbs' ibv_create_wq
        // initialises them after we return.
        mutex: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { std::mem::zeroed() },
        events_completed: 0,
        comp_mask: 0,
    };
    ibv.state = IBV_WQS_RESET;
    // SAFETY: checked above: a live CQ of ours.
    let cq = unsafe { Cq::arc_from_ibv(a.cq) };
    cq.qp_refs.fetch_add(1, Ordering::AcqRel);
    pd.users.fetch_add(1, Ordering::AcqRel);
    a.max_sge = sge;
    let w = Arc::new(Wq {
        ibv: UnsafeCell::new(ibv),
        serial,
        ibv_ctx: context,
        pd: a.pd,
        pd_id: pd.id,
        cq,
        inner: Mutex::new(WqInner {
            state: IBV_WQS_RESET,
            rq,
        }),
        users: AtomicU32::new(0),
    });
    let p = Arc::into_raw(w) as *mut ibv_wq;
    WQS.insert(p, Ctx(context));
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_wq(
    context: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's attributes (non-NULL).
    ptr_or_errno(create(context, unsafe { &mut *attr }))
}

fn modify(w: &Wq, a: &ibv_wq_attr) -> Result<(), c_int> {
    let known = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
    if a.attr_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    if a.attr_mask & IBV_WQ_ATTR_FLAGS != 0 && a.flags_mask != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut g = w.inner.lock();
    if a.attr_mask & IBV_WQ_ATTR_CURR_STATE != 0 && a.curr_wq_state != g.state {
        return Err(libc::EINVAL);
    }
    if a.attr_mask & IBV_WQ_ATTR_STATE == 0 {
        return Ok(());
    }
    match (g.state, a.wq_state) {
        (_, IBV_WQS_RESET) => {
            g.rq.clear();
            w.cq.purge_qp(w.wqn());
        }
        (IBV_WQS_RESET | IBV_WQS_RDY, IBV_WQS_RDY) => {}
        (_, IBV_WQS_ERR) => w.flush(&mut g),
        _ => return Err(libc::EINVAL),
    }
    w.set_state(&mut g, a.wq_state);
    Ok(())
}

pub(crate) unsafe extern "C" fn modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    let w = match Wq::checked(wq, None, UNKNOWN_BY_WRITE) {
        Ok(w) => w,
        Err(e) => return e,
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's attributes (non-NULL).
    match modify(&w, unsafe { &*attr }) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `ibv_post_wq_recv`: refused (EINVAL) in RESET, as posting to a QP in
/// RESET is; in ERR accepted and flushed at once.
unsafe extern "C" fn post_wq_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let mut cur = wr;
    let rc = match Wq::checked(wq, None, UNKNOWN_BY_WRITE) {
        Err(e) => e,
        Ok(w) => {
            let mut g = w.inner.lock();
            let mut rc = 0;
            while !cur.is_null() {
                if g.state == IBV_WQS_RESET {
                    rc = libc::EINVAL;
                    break;
                }
                // SAFETY: the caller's WR list.
                let r = unsafe { &*cur };
                // SAFETY: the WR describes its own SGE array.
                match unsafe { g.rq.checked_sges(r) } {
                    Ok(sges) => g.rq.push(r.wr_id, sges),
                    Err(e) => {
                        rc = e;
                        break;
                    }
                }
                if g.state == IBV_WQS_ERR {
                    w.flush(&mut g);
                }
                cur = r.next;
            }
            rc
        }
    };
    if rc != 0 && !bad.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *bad = cur };
    }
    rc
}

pub(crate) unsafe extern "C" fn destroy_wq(wq: *mut ibv_wq) -> c_int {
    if let Err(e) = Wq::checked(wq, None, UNKNOWN_BY_IOCTL) {
        return e;
    }
    let taken = WQS.remove_if(wq, |_| {
        // SAFETY: a live WQ (in the table, locked).
        if unsafe { &*(wq as *const Wq) }.users.load(Ordering::Acquire) != 0 {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: out of the table, so only this call reclaims the
    // application's reference.
    let w = unsafe { Arc::from_raw(wq as *const Wq) };
    w.cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: the PD outlives its WQs (dealloc refuses while they exist).
    unsafe { Pd::from_ibv(w.pd) }
        .users
        .fetch_sub(1, Ordering::AcqRel);
    0
}

/// An indirection table: `1 << log_size` WQs, an RSS QP's hash picking
/// one.
#[repr(C)]
pub struct IndTable {
    pub ibv: UnsafeCell<ibv_rwq_ind_table>,
    serial: u32,
    ibv_ctx: *mut ibv_context,
    pub wqs: Vec<Arc<Wq>>,
    /// RSS QPs on it: destroy is refused (EBUSY) while any exist.
    pub users: AtomicU32,
}

// SAFETY: the WQs are shared objects of their own; `ibv` is only read.
unsafe impl Send for IndTable {}
// SAFETY: as above.
unsafe impl Sync for IndTable {}

impl IndTable {
    /// The live table behind `t`, made in `context`.
    pub fn checked(
        t: *mut ibv_rwq_ind_table,
        context: *mut ibv_context,
    ) -> Result<Arc<IndTable>, c_int> {
        let Some(Ctx(ctx)) = TABLES.get(t) else {
            return Err(libc::EINVAL);
        };
        let p = t as *const IndTable;
        // SAFETY: a live table of ours: an Arc's data pointer; one more
        // count for the caller.
        let tbl = unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        // SAFETY: plain fields of our public struct.
        let handle = unsafe { std::ptr::read_volatile(&raw const (*tbl.ibv.get()).ind_tbl_handle) };
        if ctx != context || tbl.ibv_ctx != context || handle as u32 != tbl.serial {
            return Err(UNKNOWN_BY_IOCTL);
        }
        Ok(tbl)
    }

    /// The distinct CQs of its WQs.
    pub fn cqs(&self) -> Vec<Arc<Cq>> {
        let mut out: Vec<Arc<Cq>> = Vec::new();
        for w in &self.wqs {
            if !out.iter().any(|c| Arc::ptr_eq(c, &w.cq)) {
                out.push(w.cq.clone());
            }
        }
        out
    }
}

fn create_table(
    context: *mut ibv_context,
    a: &ibv_rwq_ind_table_init_attr,
) -> Result<*mut ibv_rwq_ind_table, c_int> {
    if a.comp_mask != 0 || a.log_ind_tbl_size > MAX_LOG_IND_TBL || a.ind_tbl.is_null() {
        return Err(libc::EINVAL);
    }
    TABLES.room_for_one(MAX_IND_TBLS)?;
    let n = 1usize << a.log_ind_tbl_size;
    let mut wqs = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the caller's table holds 1 << log_ind_tbl_size entries.
        let p = unsafe { *a.ind_tbl.add(i) };
        wqs.push(Wq::checked(p, Some(context), UNKNOWN_BY_IOCTL)?);
    }
    for w in &wqs {
        w.users.fetch_add(1, Ordering::AcqRel);
    }
    let serial = crate::progress::new_serial() as u32;
    let t = Arc::new(IndTable {
        ibv: UnsafeCell::new(ibv_rwq_ind_table {
            context,
            ind_tbl_handle: serial as c_int,
            ind_tbl_num: (NEXT_NUM.fetch_add(1, Ordering::Relaxed) & 0xff_ffff) as c_int,
            comp_mask: 0,
        }),
        serial,
        ibv_ctx: context,
        wqs,
        users: AtomicU32::new(0),
    });
    let p = Arc::into_raw(t) as *mut ibv_rwq_ind_table;
    TABLES.insert(p, Ctx(context));
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_rwq_ind_table(
    context: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's attributes (non-NULL).
    ptr_or_errno(create_table(context, unsafe { &*attr }))
}

pub(crate) unsafe extern "C" fn destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    let Some(Ctx(ctx)) = TABLES.get(t) else {
        return libc::EINVAL;
    };
    if let Err(e) = IndTable::checked(t, ctx) {
        return e;
    }
    let taken = TABLES.remove_if(t, |_| {
        // SAFETY: a live table (in the table, locked).
        if unsafe { &*(t as *const IndTable) }
            .users
            .load(Ordering::Acquire)
            != 0
        {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: out of the table, so only this call reclaims the
    // application's reference.
    let tbl = unsafe { Arc::from_raw(t as *const IndTable) };
    for w in &tbl.wqs {
        w.users.fetch_sub(1, Ordering::AcqRel);
    }
    0
}
