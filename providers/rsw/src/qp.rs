//! Queue pairs: the object, its state machine, its queues, and the post
//! calls.
//!
//! A QP is an `ibv_qp_ex` (so `ibv_qp_to_qp_ex` is a cast) at the start of
//! an `Arc`'d [`Qp`]; the progress engine holds weak references, so an event
//! racing with `destroy_qp` finds the QP gone or marked destroyed.
//!
//! All mutable state is in [`QpInner`] behind one mutex, taken by the post
//! calls (on the caller's thread), `modify_qp`, and the progress thread. The
//! queues are preallocated rings, so posting does not allocate. The RC
//! protocol itself is in `requester` (our requests, their responses) and
//! `responder` (their requests, our responses).

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use crate::context::{Context, CtxShared, EventCounter};
use crate::cq::{Cq, Cqe};
use crate::device::{MAX_INLINE, MAX_MSG_SZ, MAX_QP_WR, MAX_RD_ATOM, MAX_SGE, MIN_INLINE};
use crate::handles::{CQS, PDS, QPS};
use crate::pd::Pd;
use crate::progress::{engine, Kind};
use crate::qp_ex::Builder;
use crate::requester::{self, OutConn};
use crate::responder::{self, InConn, PendingConn};
use crate::transport::{Listener, RemoteAddr};
use crate::util::set_errno;
use crate::wire::Op;

/// An empty scatter/gather entry, to preallocate SGE arrays with.
pub const NO_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// One send work request as queued.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe {
    pub wr_id: u64,
    pub op: Op,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// Message length (payload for SEND/WRITE, requested for READ, 8 for
    /// atomics).
    pub len: u32,
    pub nsge: u32,
    pub inline: bool,
    /// Message sequence number, assigned when transmission starts.
    pub msn: u32,
    /// Non-zero when the WQE failed locally before transmission; it
    /// completes with this status once every earlier WQE has.
    pub local_err: ibv_wc_status,
}

impl SendWqe {
    const EMPTY: SendWqe = SendWqe {
        wr_id: 0,
        op: Op::Send,
        signaled: false,
        solicited: false,
        imm: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        len: 0,
        nsge: 0,
        inline: false,
        msn: 0,
        local_err: 0,
    };

    pub fn wc_opcode(&self) -> ibv_wc_opcode {
        match self.op {
            Op::Send | Op::SendImm => IBV_WC_SEND,
            Op::Write | Op::WriteImm => IBV_WC_RDMA_WRITE,
            Op::ReadReq => IBV_WC_RDMA_READ,
            Op::CmpSwap => IBV_WC_COMP_SWAP,
            Op::FetchAdd => IBV_WC_FETCH_ADD,
            _ => IBV_WC_SEND,
        }
    }

    /// Operations that wait for a response carrying data.
    pub fn expects_data(&self) -> bool {
        matches!(self.op, Op::ReadReq | Op::CmpSwap | Op::FetchAdd)
    }
}

/// The send queue ring. Sequence numbers only grow; `head <= tx <= tail`:
/// `[head, tx)` have been (or are being) transmitted and await a response,
/// `[tx, tail)` wait to be transmitted.
pub struct SendQueue {
    pub wqes: Box<[SendWqe]>,
    sges: Box<[ibv_sge]>,
    inline_buf: Box<[u8]>,
    pub cap: usize,
    pub max_sge: usize,
    pub max_inline: usize,
    pub head: u64,
    pub tx: u64,
    pub tail: u64,
}

impl SendQueue {
    fn new(cap: usize, max_sge: usize, max_inline: usize) -> SendQueue {
        SendQueue {
            wqes: vec![SendWqe::EMPTY; cap].into_boxed_slice(),
            sges: vec![NO_SGE; cap * max_sge].into_boxed_slice(),
            inline_buf: vec![0u8; cap * max_inline].into_boxed_slice(),
            cap,
            max_sge,
            max_inline,
            head: 0,
            tx: 0,
            tail: 0,
        }
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.cap as u64) as usize
    }

    pub fn wqe(&self, seq: u64) -> &SendWqe {
        &self.wqes[self.slot(seq)]
    }

    pub fn wqe_mut(&mut self, seq: u64) -> &mut SendWqe {
        let s = self.slot(seq);
        &mut self.wqes[s]
    }

    pub fn sges(&self, seq: u64) -> &[ibv_sge] {
        let s = self.slot(seq) * self.max_sge;
        &self.sges[s..s + self.wqe(seq).nsge as usize]
    }

    pub fn inline_data(&self, seq: u64) -> &[u8] {
        let s = self.slot(seq) * self.max_inline;
        &self.inline_buf[s..s + self.wqe(seq).len as usize]
    }

    pub fn is_full(&self) -> bool {
        self.tail - self.head == self.cap as u64
    }

    fn clear(&mut self) {
        self.head = self.tail;
        self.tx = self.tail;
    }
}

/// The receive queue ring.
pub struct RecvQueue {
    wr_ids: Box<[u64]>,
    nsge: Box<[u32]>,
    sges: Box<[ibv_sge]>,
    pub cap: usize,
    pub max_sge: usize,
    pub head: u64,
    pub tail: u64,
}

impl RecvQueue {
    fn new(cap: usize, max_sge: usize) -> RecvQueue {
        RecvQueue {
            wr_ids: vec![0; cap].into_boxed_slice(),
            nsge: vec![0; cap].into_boxed_slice(),
            sges: vec![NO_SGE; cap * max_sge].into_boxed_slice(),
            cap,
            max_sge,
            head: 0,
            tail: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.cap as u64) as usize
    }

    /// The oldest posted receive: its wr_id and scatter list.
    pub fn front(&self) -> Option<(u64, &[ibv_sge])> {
        if self.is_empty() {
            return None;
        }
        let s = self.slot(self.head);
        let b = s * self.max_sge;
        Some((self.wr_ids[s], &self.sges[b..b + self.nsge[s] as usize]))
    }

    pub fn pop(&mut self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let id = self.wr_ids[self.slot(self.head)];
        self.head += 1;
        Some(id)
    }
}

/// Mutable QP state (see the module comment for who takes the lock).
pub struct QpInner {
    pub state: ibv_qp_state,
    /// Attributes as last set by modify_qp, for query_qp (which adds the
    /// state and the capabilities, kept in `state` and the queues).
    pub attr: ibv_qp_attr,
    pub sq_sig_all: bool,
    pub sq: SendQueue,
    pub rq: RecvQueue,
    pub listener: Option<Listener>,
    pub out: Option<OutConn>,
    pub inc: Option<InConn>,
    pub pending: Vec<Option<PendingConn>>,
    /// Counts connections put in `pending`, for their token ids.
    pub pending_seq: usize,
    /// The peer, known from RTR on.
    pub remote: Option<RemoteAddr>,
    /// Our own GID, as sent in the hello.
    pub local_gid: [u8; 16],
    /// The outgoing connection failed or ended; the next WQE that needs it
    /// completes with IBV_WC_RETRY_EXC_ERR.
    pub peer_gone: bool,
    /// A WQE failed locally; nothing after it is transmitted.
    pub tx_blocked: bool,
    pub comm_est_sent: bool,
    /// IBV_EVENT_SQ_DRAINED is owed when the SQ drains in SQD.
    pub sqd_notify: bool,
    /// `accept` failed (e.g. EMFILE); the listener is not watched until
    /// this monotonic time.
    pub accept_resume: Option<u64>,
    /// An incoming connection was accepted since RTR; no other may be.
    pub inc_bound: bool,
    /// The retry timer (see `requester`): when it next ticks (0: not
    /// running), whether the peer showed signs of life since the last tick,
    /// consecutive ticks without any, and until when an RNR wait notice
    /// vouches for the peer.
    pub ack_tick_at: u64,
    pub ack_progress: bool,
    pub ack_idle: u8,
    pub rnr_hold_until: u64,
    pub destroyed: bool,
}

impl QpInner {
    /// The capabilities the QP was created with, as its queues hold them.
    pub fn caps(&self) -> ibv_qp_cap {
        ibv_qp_cap {
            max_send_wr: self.sq.cap as u32,
            max_recv_wr: self.rq.cap as u32,
            max_send_sge: self.sq.max_sge as u32,
            max_recv_sge: self.rq.max_sge as u32,
            max_inline_data: self.sq.max_inline as u32,
        }
    }
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The live QP behind an application pointer, if it is one of ours. The
/// control verbs look a QP up instead of trusting the pointer: librdmacm
/// moves an id's QP to ERR when the application retrieves DISCONNECTED, and
/// programs such as rping destroy that QP with `ibv_destroy_qp` first, so a
/// stale pointer must fail with EINVAL rather than touch freed memory. The
/// lookup also keeps the QP alive for the call.
fn live(qp: *mut ibv_qp) -> Option<Arc<Qp>> {
    QPS.get(qp).and_then(|w| w.upgrade())
}

#[repr(C)]
pub struct Qp {
    /// Shared with the application (it reads `qp_num`/`state`, writes
    /// `wr_id`/`wr_flags` and calls the `wr_*` entries).
    pub ibv: UnsafeCell<ibv_qp_ex>,
    pub serial: u64,
    pub qpn: u32,
    pub ctx: Arc<CtxShared>,
    pub pd: *mut ibv_pd,
    pub pd_id: u32,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub inner: Mutex<QpInner>,
    pub async_events: Arc<EventCounter>,
    /// State of an `ibv_wr_start` .. `ibv_wr_complete` batch; single
    /// threaded by API contract.
    pub builder: UnsafeCell<Builder>,
}

// SAFETY: mutable state is behind `inner`'s mutex; `ibv` is the C-visible
// struct whose fields we write only at defined points (state changes under
// the lock); `builder` is used by one thread at a time per the ibv_wr_*
// contract; `pd` outlives the QP (dealloc_pd refuses while it is in use).
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

/// RNR timer encoding (InfiniBand spec, min_rnr_timer 0..=31) in
/// microseconds.
const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

pub fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[(code & 31) as usize] * 1000
}

impl Qp {
    /// # Safety
    /// `qp` must come from our `create_qp_ex` and not be destroyed.
    pub unsafe fn from_ibv<'a, T>(qp: *mut T) -> &'a Qp {
        // SAFETY: ibv is the first field of the Arc'd Qp the pointer names.
        unsafe { &*(qp as *const Qp) }
    }

    pub fn as_ibv(&self) -> *mut ibv_qp {
        self.ibv.get() as *mut ibv_qp
    }

    pub fn set_state(&self, g: &mut QpInner, s: ibv_qp_state) {
        g.state = s;
        // SAFETY: the public state field is plain data in our allocation;
        // programs only read it.
        unsafe { std::ptr::write_volatile(&raw mut (*self.ibv.get()).qp_base.state, s) };
    }

    pub fn async_event(&self, t: ibv_event_type) {
        self.ctx
            .async_q
            .push(self.as_ibv() as usize, t, Some(self.async_events.clone()));
    }

    /// Reports a send WQE's completion (always for errors, only when
    /// signaled for successes).
    pub fn complete_send(&self, g: &QpInner, w: &SendWqe, status: ibv_wc_status) {
        if status == IBV_WC_SUCCESS && !(w.signaled || g.sq_sig_all) {
            return;
        }
        self.send_cq.push(Cqe {
            wr_id: w.wr_id,
            status,
            opcode: w.wc_opcode(),
            byte_len: w.len,
            qp_num: self.qpn,
            src_qp: g.attr.dest_qp_num,
            ..Cqe::default()
        });
    }

    pub fn complete_recv(&self, e: Cqe) {
        self.recv_cq.push(Cqe {
            qp_num: self.qpn,
            ..e
        });
    }

    /// Moves to the error state: flushes both queues and takes the
    /// connections down (the incoming one after its queued responses, e.g.
    /// a NAK explaining the error, are sent).
    pub fn enter_error(&self, g: &mut QpInner) {
        if g.state == IBV_QPS_ERR {
            return;
        }
        self.set_state(g, IBV_QPS_ERR);
        g.out = None;
        g.pending.clear();
        responder::close_after_flush(self, g);
        self.flush(g);
    }

    /// Completes every outstanding WQE with IBV_WC_WR_FLUSH_ERR.
    pub fn flush(&self, g: &mut QpInner) {
        let mut seq = g.sq.head;
        while seq != g.sq.tail {
            let w = *g.sq.wqe(seq);
            self.complete_send(g, &w, IBV_WC_WR_FLUSH_ERR);
            seq += 1;
        }
        g.sq.clear();
        g.tx_blocked = false;
        while let Some(wr_id) = g.rq.pop() {
            self.complete_recv(Cqe {
                wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: IBV_WC_RECV,
                ..Cqe::default()
            });
        }
    }

    /// Completes the head WQE with an error and moves the QP to ERR.
    pub fn fail_head(&self, g: &mut QpInner, status: ibv_wc_status) {
        if g.sq.head != g.sq.tail {
            let w = *g.sq.wqe(g.sq.head);
            self.complete_send(g, &w, status);
            g.sq.head += 1;
            if g.sq.tx < g.sq.head {
                g.sq.tx = g.sq.head;
            }
        }
        self.enter_error(g);
    }

    /// After completions: report a locally failed WQE that reached the head,
    /// and the end of an SQD drain.
    pub fn after_send_completions(&self, g: &mut QpInner) {
        if g.sq.head < g.sq.tx {
            let w = g.sq.wqe(g.sq.head);
            if w.local_err != 0 {
                let st = w.local_err;
                self.fail_head(g, st);
                return;
            }
        }
        if g.state == IBV_QPS_SQD && g.sqd_notify && g.sq.head == g.sq.tx {
            g.sqd_notify = false;
            self.async_event(IBV_EVENT_SQ_DRAINED);
        }
    }

    fn reset(&self, g: &mut QpInner) {
        g.out = None;
        g.inc = None;
        g.pending.clear();
        g.sq.clear();
        g.rq.head = g.rq.tail;
        g.remote = None;
        g.peer_gone = false;
        g.tx_blocked = false;
        g.comm_est_sent = false;
        g.sqd_notify = false;
        g.inc_bound = false;
        g.ack_idle = 0;
        g.rnr_hold_until = 0;
        g.attr = ibv_qp_attr::zeroed();
        self.set_state(g, IBV_QPS_RESET);
    }

    // ---- progress engine entry points -------------------------------

    pub fn on_event(&self, kind: Kind, events: u32) {
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        // Error and hang-up are reported even for descriptors we are not
        // reading on purpose (a held or RNR-stalled connection), so they
        // must end the connection here or they would fire forever.
        let dead = events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
        match kind {
            Kind::Listener => responder::on_listener(self, &mut g),
            Kind::Pending(id) => match responder::pending_slot(&g, id) {
                Some(slot) if dead => g.pending[slot] = None,
                Some(slot) => responder::on_pending(self, &mut g, slot),
                None => {}
            },
            Kind::Incoming if dead => {
                let vanished = responder::incoming_conn(&g).is_some_and(|c| c.timed_out());
                g.inc = None;
                if vanished {
                    self.peer_vanished(&mut g);
                }
            }
            Kind::Incoming => responder::pump(self, &mut g),
            Kind::Outgoing if dead && requester::outgoing_timed_out(&g) => {
                self.peer_vanished(&mut g)
            }
            Kind::Outgoing => requester::on_event(self, &mut g, events),
        }
    }

    pub fn on_kick(&self) {
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        self.check_cq_overrun(&mut g);
        responder::pump(self, &mut g);
        requester::pump(self, &mut g);
    }

    /// One non-blocking progress step on the calling thread (from
    /// `poll_cq`); does nothing if another thread holds the QP.
    pub fn drive(&self) {
        let Some(mut g) = self.inner.try_lock() else {
            return;
        };
        if g.destroyed {
            return;
        }
        if g.inc.is_some() {
            responder::pump(self, &mut g);
        }
        if g.out.is_some() {
            requester::on_event(self, &mut g, libc::EPOLLIN as u32);
        }
    }

    pub fn on_timer(&self, now: u64) {
        let mut g = self.inner.lock();
        if g.destroyed {
            return;
        }
        responder::on_timer(self, &mut g, now);
        requester::on_timer(self, &mut g, now);
    }

    /// The peer's host stopped answering (TCP's keepalive or unacked-data
    /// timeout, from the retry budget, ran out on one of the connections).
    /// Outstanding requests fail with `IBV_WC_RETRY_EXC_ERR` as the retry
    /// timer would fail them; with none outstanding, hardware would wait
    /// forever on its receives, which is the hang a test run must never
    /// meet, so the QP goes to ERR with `IBV_EVENT_QP_FATAL` and its
    /// receives flush.
    pub fn peer_vanished(&self, g: &mut QpInner) {
        if !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) {
            return;
        }
        g.out = None;
        g.peer_gone = true;
        if requester::outstanding(g) {
            self.fail_head(g, IBV_WC_RETRY_EXC_ERR);
        } else {
            self.async_event(IBV_EVENT_QP_FATAL);
            self.enter_error(g);
        }
    }

    /// A CQ of this QP overran: the completions it lost make the QP's
    /// queues meaningless, so, as the spec says, the QP goes to the error
    /// state with `IBV_EVENT_QP_FATAL`.
    fn check_cq_overrun(&self, g: &mut QpInner) {
        if g.state == IBV_QPS_ERR || g.state == IBV_QPS_RESET {
            return;
        }
        if self.send_cq.overran() || self.recv_cq.overran() {
            self.async_event(IBV_EVENT_QP_FATAL);
            self.enter_error(g);
        }
    }
}

// ---- creation and destruction ------------------------------------------

const SUPPORTED_SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;

fn create(context: *mut ibv_context, a: &mut ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, c_int> {
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
        | IBV_QP_INIT_ATTR_IND_TABLE
        | IBV_QP_INIT_ATTR_RX_HASH
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return Err(libc::EINVAL);
    }
    if a.comp_mask
        & (IBV_QP_INIT_ATTR_XRCD
            | IBV_QP_INIT_ATTR_IND_TABLE
            | IBV_QP_INIT_ATTR_RX_HASH
            | IBV_QP_INIT_ATTR_MAX_TSO_HEADER)
        != 0
    {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        if a.send_ops_flags & !SUPPORTED_SEND_OPS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        Some(a.send_ops_flags)
    } else {
        None
    };
    // UD, UC, XRC and raw packet QPs are not implemented yet.
    if a.qp_type != IBV_QPT_RC {
        return Err(libc::EOPNOTSUPP);
    }
    if !a.srq.is_null() {
        return Err(libc::EOPNOTSUPP);
    }
    if !PDS.contains(a.pd) || !CQS.contains(a.send_cq) || !CQS.contains(a.recv_cq) {
        return Err(libc::EINVAL);
    }
    let c = a.cap;
    if c.max_send_wr > MAX_QP_WR
        || c.max_recv_wr > MAX_QP_WR
        || c.max_send_sge > MAX_SGE
        || c.max_recv_sge > MAX_SGE
        || c.max_inline_data > MAX_INLINE
    {
        return Err(libc::EINVAL);
    }
    let cap = ibv_qp_cap {
        max_send_wr: c.max_send_wr.max(1),
        max_recv_wr: c.max_recv_wr.max(1),
        max_send_sge: c.max_send_sge.max(1),
        max_recv_sge: c.max_recv_sge.max(1),
        max_inline_data: c.max_inline_data.max(MIN_INLINE),
    };
    let eng = engine().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    let (listener, qpn) = Listener::open().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;

    // SAFETY: context, pd and the CQs come from this provider.
    let (ctx, pd, send_cq, recv_cq) = unsafe {
        (
            Context::shared_of(context),
            Pd::from_ibv(a.pd),
            Cq::arc_from_ibv(a.send_cq),
            Cq::arc_from_ibv(a.recv_cq),
        )
    };
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut ibv = ibv_qp_ex::zeroed();
    ibv.qp_base.context = context;
    ibv.qp_base.qp_context = a.qp_context;
    ibv.qp_base.pd = a.pd;
    ibv.qp_base.send_cq = a.send_cq;
    ibv.qp_base.recv_cq = a.recv_cq;
    ibv.qp_base.srq = std::ptr::null_mut();
    ibv.qp_base.handle = serial as u32;
    ibv.qp_base.qp_num = qpn;
    ibv.qp_base.state = IBV_QPS_RESET;
    ibv.qp_base.qp_type = IBV_QPT_RC;
    if send_ops.is_some() {
        crate::qp_ex::fill_ops(&mut ibv);
    }
    let listen_fd = listener.fd();
    let qp = Arc::new(Qp {
        ibv: UnsafeCell::new(ibv),
        serial,
        qpn,
        ctx,
        pd: a.pd,
        pd_id: pd.id,
        send_cq,
        recv_cq,
        inner: Mutex::new(QpInner {
            state: IBV_QPS_RESET,
            attr: ibv_qp_attr::zeroed(),
            sq_sig_all: a.sq_sig_all != 0,
            sq: SendQueue::new(
                cap.max_send_wr as usize,
                cap.max_send_sge as usize,
                cap.max_inline_data as usize,
            ),
            rq: RecvQueue::new(cap.max_recv_wr as usize, cap.max_recv_sge as usize),
            listener: Some(listener),
            out: None,
            inc: None,
            pending: Vec::new(),
            pending_seq: 0,
            remote: None,
            local_gid: [0; 16],
            peer_gone: false,
            tx_blocked: false,
            comm_est_sent: false,
            sqd_notify: false,
            accept_resume: None,
            inc_bound: false,
            ack_tick_at: 0,
            ack_progress: false,
            ack_idle: 0,
            rnr_hold_until: 0,
            destroyed: false,
        }),
        async_events: Arc::new(EventCounter::default()),
        builder: UnsafeCell::new(if send_ops.is_some() {
            Builder::new(
                cap.max_send_wr as usize,
                cap.max_send_sge as usize,
                cap.max_inline_data as usize,
            )
        } else {
            Builder::empty()
        }),
    });
    eng.register_qp(serial, &qp);
    if let Err(e) = eng.add(
        listen_fd,
        crate::progress::token(serial, Kind::Listener),
        libc::EPOLLIN as u32,
    ) {
        eng.unregister_qp(serial);
        return Err(e.raw_os_error().unwrap_or(libc::ENOMEM));
    }
    pd.users.fetch_add(1, Ordering::AcqRel);
    qp.send_cq.qp_refs.fetch_add(1, Ordering::AcqRel);
    qp.recv_cq.qp_refs.fetch_add(1, Ordering::AcqRel);
    qp.send_cq.attach_qp(&qp);
    if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
        qp.recv_cq.attach_qp(&qp);
    }
    a.cap = cap;
    let weak = Arc::downgrade(&qp);
    let p = Arc::into_raw(qp) as *mut ibv_qp;
    QPS.insert(p, weak);
    Ok(p)
}

pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: attr points to the caller's init attributes.
    match create(context, unsafe { &mut *attr }) {
        Ok(qp) => qp,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // Claiming it (the destroyed flag, under the QP's lock) makes a second
    // destroy, or a racing one, fail; it stays findable until its async
    // events are acknowledged, since acknowledging looks it up.
    let Some(held) = live(qp) else {
        return libc::EINVAL;
    };
    {
        let mut g = held.inner.lock();
        if g.destroyed {
            return libc::EINVAL;
        }
        g.destroyed = true;
    }
    drop(held);
    // SAFETY: qp came from create_qp_ex; this call claimed it, so only it
    // reclaims it.
    let q = unsafe { Qp::from_ibv(qp) };
    if let Ok(e) = engine() {
        e.unregister_qp(q.serial);
    }
    {
        let mut g = q.inner.lock();
        g.out = None;
        g.inc = None;
        g.pending.clear();
        g.listener = None;
    }
    q.ctx.async_q.purge(qp as usize);
    q.async_events.wait_all_acked();
    q.send_cq.detach_qp(q);
    q.recv_cq.detach_qp(q);
    q.send_cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    q.recv_cq.qp_refs.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: the PD outlives its QPs.
    unsafe { Pd::from_ibv(q.pd) }
        .users
        .fetch_sub(1, Ordering::AcqRel);
    QPS.remove(qp);
    // SAFETY: reclaims the application's reference from create_qp_ex.
    drop(unsafe { Arc::from_raw(qp as *const Qp) });
    0
}

// ---- modify / query -------------------------------------------------------

/// Required and optional attribute masks of each legal RC transition
/// (InfiniBand spec, QP state transition table); None when illegal.
fn transition(cur: ibv_qp_state, new: ibv_qp_state) -> Option<(u32, u32)> {
    const ALT_PATH: u32 = IBV_QP_ALT_PATH;
    Some(match (cur, new) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => (0, 0),
        (IBV_QPS_RESET, IBV_QPS_INIT) => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        (IBV_QPS_INIT, IBV_QPS_INIT) => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        (IBV_QPS_INIT, IBV_QPS_RTR) => (
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        ),
        (IBV_QPS_RTR, IBV_QPS_RTS) => (
            IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            IBV_QP_CUR_STATE
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        ),
        (IBV_QPS_RTS, IBV_QPS_RTS) => (
            0,
            IBV_QP_CUR_STATE
                | IBV_QP_ACCESS_FLAGS
                | ALT_PATH
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (IBV_QPS_RTS, IBV_QPS_SQD) => (0, IBV_QP_EN_SQD_ASYNC_NOTIFY),
        (IBV_QPS_SQD, IBV_QPS_RTS) => (
            0,
            IBV_QP_CUR_STATE
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        ),
        (IBV_QPS_SQD, IBV_QPS_SQD) => (
            0,
            IBV_QP_PKEY_INDEX
                | IBV_QP_PORT
                | IBV_QP_AV
                | ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC
                | IBV_QP_MAX_DEST_RD_ATOMIC,
        ),
        (IBV_QPS_SQE, IBV_QPS_RTS) => (0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS),
        _ => return None,
    })
}

const QP_ACCESS_OK: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Checks attribute values (not masks) of a modify.
fn check_values(qp: &Qp, a: &ibv_qp_attr, mask: u32) -> Result<(), c_int> {
    let bad = |c: bool| if c { Err(libc::EINVAL) } else { Ok(()) };
    if mask & IBV_QP_PORT != 0 {
        bad(a.port_num != 1)?;
    }
    if mask & IBV_QP_PKEY_INDEX != 0 {
        bad(a.pkey_index != 0)?;
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        bad(a.qp_access_flags & !QP_ACCESS_OK != 0)?;
    }
    if mask & IBV_QP_PATH_MTU != 0 {
        bad(!(IBV_MTU_256..=IBV_MTU_4096).contains(&a.path_mtu))?;
    }
    if mask & IBV_QP_AV != 0 && a.ah_attr.is_global != 0 {
        let n = qp.ctx.dev.gids.len();
        bad(a.ah_attr.grh.sgid_index as usize >= n)?;
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        bad(a.max_rd_atomic as u32 > MAX_RD_ATOM)?;
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        bad(a.max_dest_rd_atomic as u32 > MAX_RD_ATOM)?;
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        bad(a.min_rnr_timer > 31)?;
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        bad(a.timeout > 31)?;
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        bad(a.retry_cnt > 7)?;
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        bad(a.rnr_retry > 7)?;
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        bad(a.dest_qp_num >= 1 << 24)?;
    }
    if mask & IBV_QP_PATH_MIG_STATE != 0 {
        bad(a.path_mig_state > IBV_MIG_ARMED)?;
    }
    Ok(())
}

/// Records the attributes of a successful modify for query_qp.
fn store(g: &mut QpInner, a: &ibv_qp_attr, mask: u32) {
    let s = &mut g.attr;
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        s.qp_access_flags = a.qp_access_flags;
    }
    if mask & IBV_QP_PKEY_INDEX != 0 {
        s.pkey_index = a.pkey_index;
    }
    if mask & IBV_QP_PORT != 0 {
        s.port_num = a.port_num;
    }
    if mask & IBV_QP_AV != 0 {
        s.ah_attr = a.ah_attr;
    }
    if mask & IBV_QP_PATH_MTU != 0 {
        s.path_mtu = a.path_mtu;
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        s.dest_qp_num = a.dest_qp_num;
    }
    if mask & IBV_QP_RQ_PSN != 0 {
        s.rq_psn = a.rq_psn & 0xff_ffff;
    }
    if mask & IBV_QP_SQ_PSN != 0 {
        s.sq_psn = a.sq_psn & 0xff_ffff;
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        s.max_rd_atomic = a.max_rd_atomic;
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        s.min_rnr_timer = a.min_rnr_timer;
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        s.timeout = a.timeout;
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        s.retry_cnt = a.retry_cnt;
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        s.rnr_retry = a.rnr_retry;
    }
    if mask & IBV_QP_ALT_PATH != 0 {
        s.alt_ah_attr = a.alt_ah_attr;
        s.alt_pkey_index = a.alt_pkey_index;
        s.alt_port_num = a.alt_port_num;
        s.alt_timeout = a.alt_timeout;
    }
    if mask & IBV_QP_PATH_MIG_STATE != 0 {
        s.path_mig_state = a.path_mig_state;
    }
    if mask & IBV_QP_EN_SQD_ASYNC_NOTIFY != 0 {
        s.en_sqd_async_notify = a.en_sqd_async_notify;
    }
}

fn modify(qp: &Qp, a: &ibv_qp_attr, mask: u32) -> Result<(), c_int> {
    let mut g = qp.inner.lock();
    if g.destroyed {
        return Err(libc::EINVAL);
    }
    let cur = g.state;
    if mask & IBV_QP_CUR_STATE != 0 && a.cur_qp_state != cur {
        return Err(libc::EINVAL);
    }
    let new = if mask & IBV_QP_STATE != 0 {
        a.qp_state
    } else {
        cur
    };
    if new > IBV_QPS_ERR {
        return Err(libc::EINVAL);
    }
    let (req, opt) = transition(cur, new).ok_or(libc::EINVAL)?;
    let given = mask & !IBV_QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return Err(libc::EINVAL);
    }
    check_values(qp, a, mask)?;
    let saved = g.attr;
    store(&mut g, a, mask);
    match new {
        IBV_QPS_RESET => qp.reset(&mut g),
        IBV_QPS_ERR => qp.enter_error(&mut g),
        IBV_QPS_INIT => qp.set_state(&mut g, IBV_QPS_INIT),
        IBV_QPS_RTR => {
            qp.set_state(&mut g, IBV_QPS_RTR);
            if cur == IBV_QPS_INIT {
                if let Err(e) = to_rtr(qp, &mut g) {
                    // No socket for the connection: the modify fails and
                    // the QP stays in INIT, as a failed command leaves it.
                    g.attr = saved;
                    g.remote = None;
                    g.out = None;
                    qp.set_state(&mut g, IBV_QPS_INIT);
                    return Err(e);
                }
            }
        }
        IBV_QPS_RTS => {
            qp.set_state(&mut g, IBV_QPS_RTS);
            g.sqd_notify = false;
            requester::apply_timeouts(&g);
            requester::pump(qp, &mut g);
        }
        IBV_QPS_SQD => {
            qp.set_state(&mut g, IBV_QPS_SQD);
            if cur == IBV_QPS_RTS {
                g.sqd_notify = a.en_sqd_async_notify != 0 && mask & IBV_QP_EN_SQD_ASYNC_NOTIFY != 0;
                qp.after_send_completions(&mut g);
            }
        }
        _ => qp.set_state(&mut g, new),
    }
    Ok(())
}

/// Entering RTR: the peer is known, so open our outgoing connection and let
/// a peer connection that arrived early through.
fn to_rtr(qp: &Qp, g: &mut QpInner) -> Result<(), c_int> {
    let dev = &qp.ctx.dev;
    let first = dev.gids.first().copied().unwrap_or([0; 16]);
    let ah = g.attr.ah_attr;
    g.local_gid = if ah.is_global != 0 {
        dev.gids
            .get(ah.grh.sgid_index as usize)
            .copied()
            .unwrap_or(first)
    } else {
        first
    };
    // Without a GRH there is no address: LID 0 can only mean this host, so
    // the peer is reached through our own first GID.
    let gid = if ah.is_global != 0 {
        ah.grh.dgid.raw()
    } else {
        first
    };
    g.remote = Some(RemoteAddr {
        gid,
        qpn: g.attr.dest_qp_num,
        ifindex: dev.ifindex,
        global: ah.is_global != 0,
    });
    g.inc_bound = false;
    requester::start(qp, g)?;
    responder::promote_pending(qp, g);
    Ok(())
}

pub(crate) unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let Some(q) = live(qp) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: attr points to the caller's attributes (checked non-null).
    let a = unsafe { &*attr };
    match modify(&q, a, mask as u32) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let Some(q) = live(qp) else {
        return libc::EINVAL;
    };
    let g = q.inner.lock();
    if g.destroyed {
        return libc::EINVAL;
    }
    let mut a = g.attr;
    a.qp_state = g.state;
    a.cur_qp_state = g.state;
    a.cap = g.caps();
    a.sq_draining = (g.state == IBV_QPS_SQD && g.sq.head != g.sq.tx) as u8;
    if !attr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { attr.write(a) };
    }
    if !init_attr.is_null() {
        // SAFETY: the public struct is ours; reading its fixed fields.
        let b = unsafe { &(*q.ibv.get()).qp_base };
        let ia = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: std::ptr::null_mut(),
            cap: g.caps(),
            qp_type: IBV_QPT_RC,
            sq_sig_all: g.sq_sig_all as c_int,
        };
        // SAFETY: out-pointer supplied by the caller.
        unsafe { init_attr.write(ia) };
    }
    0
}

// ---- posting ----------------------------------------------------------------

fn wire_op(opcode: ibv_wr_opcode) -> Option<Op> {
    Some(match opcode {
        IBV_WR_SEND => Op::Send,
        IBV_WR_SEND_WITH_IMM => Op::SendImm,
        IBV_WR_RDMA_WRITE => Op::Write,
        IBV_WR_RDMA_WRITE_WITH_IMM => Op::WriteImm,
        IBV_WR_RDMA_READ => Op::ReadReq,
        IBV_WR_ATOMIC_CMP_AND_SWP => Op::CmpSwap,
        IBV_WR_ATOMIC_FETCH_AND_ADD => Op::FetchAdd,
        _ => return None,
    })
}

/// Checks one send WR against the QP's limits; returns its opcode and
/// message length.
///
/// # Safety
/// `wr.sg_list` must hold `wr.num_sge` entries.
pub unsafe fn check_send_wr(g: &QpInner, wr: &ibv_send_wr) -> Result<(Op, u32), c_int> {
    let op = wire_op(wr.opcode).ok_or(libc::EINVAL)?;
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
    match op {
        Op::CmpSwap | Op::FetchAdd => {
            if sges.len() != 1 || sges[0].length < 8 {
                return Err(libc::EINVAL);
            }
            Ok((op, 8))
        }
        Op::ReadReq => Ok((op, total as u32)),
        _ => {
            if wr.send_flags & IBV_SEND_INLINE != 0 && total > g.sq.max_inline as u64 {
                return Err(libc::EINVAL);
            }
            Ok((op, total as u32))
        }
    }
}

/// Queues one checked WR (the queue has room).
///
/// # Safety
/// As [`check_send_wr`]; for inline WRs the SGE addresses must be readable.
unsafe fn enqueue_send(g: &mut QpInner, wr: &ibv_send_wr, op: Op, len: u32) -> u64 {
    let seq = g.sq.tail;
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
            Op::Write | Op::WriteImm | Op::ReadReq => {
                (wr.wr.rdma.remote_addr, wr.wr.rdma.rkey, 0, 0)
            }
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
    };
    g.sq.tail += 1;
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
        if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR) {
            rc = libc::EINVAL;
            break;
        }
        // SAFETY: the caller's WR describes its own SGE array.
        let (op, len) = match unsafe { check_send_wr(g, w) } {
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
        let seq = unsafe { enqueue_send(g, w, op, len) };
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
    requester::pump(qp, g);
    rc
}

/// Posts `n` linked WRs all or nothing (`ibv_wr_complete`).
///
/// # Safety
/// `wr` must be a valid list of `n` send WRs.
pub unsafe fn post_send_batch(qp: &Qp, wr: *mut ibv_send_wr, n: usize) -> c_int {
    let mut g = qp.inner.lock();
    if !matches!(g.state, IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR) {
        return libc::EINVAL;
    }
    if g.sq.cap as u64 - (g.sq.tail - g.sq.head) < n as u64 {
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
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    let mut g = q.inner.lock();
    // SAFETY: wr is the caller's list.
    unsafe { post_locked(q, &mut g, wr, bad_wr) }
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: qp came from create_qp_ex.
    let q = unsafe { Qp::from_ibv(qp) };
    let mut g = q.inner.lock();
    let mut rc = 0;
    let was_empty = g.rq.is_empty();
    while !wr.is_null() {
        // SAFETY: wr is an element of the caller's list.
        let w = unsafe { &*wr };
        if g.state == IBV_QPS_RESET {
            rc = libc::EINVAL;
            break;
        }
        if w.num_sge < 0 || w.num_sge as u32 > g.rq.max_sge as u32 {
            rc = libc::EINVAL;
            break;
        }
        if g.rq.tail - g.rq.head == g.rq.cap as u64 {
            rc = libc::ENOMEM;
            break;
        }
        if g.state == IBV_QPS_ERR {
            q.complete_recv(Cqe {
                wr_id: w.wr_id,
                status: IBV_WC_WR_FLUSH_ERR,
                opcode: IBV_WC_RECV,
                ..Cqe::default()
            });
        } else {
            let rq = &mut g.rq;
            let s = rq.slot(rq.tail);
            rq.wr_ids[s] = w.wr_id;
            rq.nsge[s] = w.num_sge as u32;
            if w.num_sge > 0 {
                // SAFETY: the caller's WR describes its own SGE array.
                let sges = unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) };
                let b = s * rq.max_sge;
                rq.sges[b..b + sges.len()].copy_from_slice(sges);
            }
            rq.tail += 1;
        }
        wr = w.next;
    }
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: out-pointer supplied by the caller.
        unsafe { *bad_wr = wr };
    }
    if was_empty && !g.rq.is_empty() && responder::is_stalled(&g) {
        if let Ok(e) = engine() {
            e.kick(q.serial);
        }
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rnr_table_samples() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(12), 640_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }

    #[test]
    fn transition_table() {
        assert!(transition(IBV_QPS_RESET, IBV_QPS_RTR).is_none());
        assert!(transition(IBV_QPS_INIT, IBV_QPS_RTS).is_none());
        assert!(transition(IBV_QPS_ERR, IBV_QPS_RTS).is_none());
        let (req, _) = transition(IBV_QPS_RESET, IBV_QPS_INIT).unwrap();
        assert_eq!(req, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        assert_eq!(transition(IBV_QPS_RTS, IBV_QPS_ERR), Some((0, 0)));
        assert_eq!(transition(IBV_QPS_SQD, IBV_QPS_RESET), Some((0, 0)));
    }
}
