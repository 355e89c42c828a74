//! A QP's state: the object the application's pointer names, its
//! work queues (rings, `crate::ring`), what its engines keep per connection
//! (`conn`, `dgram`) and per QP (the engines' `info` structs, held here),
//! the `ibv_wr_*` batch (`batch`), and the completion helpers
//! every engine and verb uses (complete, claim a receive, flush, enter the
//! error state).
//!
//! A QP is an `ibv_qp_ex` (so `ibv_qp_to_qp_ex` is a cast) at the start of
//! an `Arc`'d [`Qp`]; the progress engine holds weak references, so an event
//! racing with `destroy_qp` finds the QP gone or marked destroyed.
//!
//! All mutable state is in [`QpInner`] behind one mutex, taken by the post
//! calls (on the caller's thread), `modify_qp`, and the progress thread. The
//! queues are preallocated rings, so posting does not allocate. This layer
//! sits below the engines (`engine::*`), which call its methods; what it
//! needs of them (their per-QP state, two responder steps) goes through
//! the [`Engines`] trait, so it is generic over them: `engine::Qp` is
//! `Qp<engine::Tasks>`.

pub(crate) mod batch;
pub(crate) mod conn;
pub(crate) mod dgram;
pub(crate) mod raw;

pub use batch::Builder;
pub use dgram::{Dgram, Group};

use std::cell::UnsafeCell;
use std::os::raw::c_int;
use std::sync::Arc;

use parking_lot::Mutex;
use verbs_abi::*;

use crate::context::CtxShared;
use crate::cq::{Cq, Cqe};
use crate::event_count::EventCounter;
use crate::ring::{RecvQueue, RecvWqe, SendQueue, SendWqe};
use crate::ringmem::{Allocator, RES_TYPE_QP};
use crate::srq::Srq;
use crate::stats::Counters;
use crate::transport::mailbox::Mailbox;
use crate::transport::{Conn, Listener, RemoteAddr};
use conn::{InConn, Rx};

/// An RC QP's state on a RoCEv2-mode device, as the QP's state changes
/// see it.
pub trait RoceRcState: Default + Send + 'static {
    /// The QP entered ERR: the state starts over, except what it still
    /// has to send.
    fn on_error(&mut self);
}

/// What this layer needs of the engines above it, as a trait so that it
/// names none of them (`engine::Tasks` implements it). The engines own
/// the per-QP state the QP holds for them (`req`, `resp`, `comp`, as rxe's
/// `rxe_req_info`, `rxe_resp_info`, `rxe_comp_info`): their fields are
/// private to the engine that edits them; this layer only creates, resets
/// and asks them through these traits.
pub trait Engines: Sized + 'static {
    type Req: ReqState;
    type Resp: RespState;
    type Comp: Default;
    /// A RoCEv2-mode device's port, which a UD QP sends and receives
    /// through (`engine::roce_ud`).
    type Roce: Send + Sync + 'static;
    /// An RC QP's state on a RoCEv2-mode device (`engine::roce_rc`).
    type RoceRc: RoceRcState;
    /// Ends the incoming connection once its queued responses are out.
    fn close_incoming(qp: &Qp<Self>, g: &mut QpInner<Self>);
    /// Sends the incoming connection's queued responses.
    fn send_responses(qp: &Qp<Self>, g: &mut QpInner<Self>);
}

/// The requester's state, as the QP resets it.
pub trait ReqState: Default {
    /// Ends the outgoing connection (the QP went to ERR).
    fn disconnect(&mut self);
    /// The peer is lost: what needs it fails.
    fn lose_peer(&mut self);
    fn reset(&mut self);
}

/// The responder's state, as the QP makes, resets and asks it.
pub trait RespState {
    fn new(listener: Option<Listener>) -> Self;
    fn inc(&self) -> Option<&InConn>;
    fn inc_mut(&mut self) -> Option<&mut InConn>;
    /// Drops connections accepted but not yet bound to the QP.
    fn drop_pending(&mut self);
    fn reset(&mut self);
}

/// Mutable QP state (see the module comment for who takes the lock).
pub struct QpInner<E: Engines> {
    /// RC or UC (fixed at creation): UC sends no acknowledgements, never
    /// retries, and drops what it cannot deliver.
    pub qp_type: ibv_qp_type,
    pub state: ibv_qp_state,
    /// Attributes as last set by modify_qp, for query_qp (which adds the
    /// state and the capabilities, kept in `state` and the queues).
    pub attr: ibv_qp_attr,
    pub sq_sig_all: bool,
    pub sq: SendQueue,
    pub rq: RecvQueue,
    /// The receive the message being received lands in, taken from `rq`
    /// or the SRQ when the message started (valid while `claimed`).
    pub recv: RecvWqe,
    pub claimed: bool,
    /// XRC receive QP: the SRQ the request being received named.
    pub xrc_srq: Option<Arc<Srq>>,
    /// ... when it is another process's (`remote_srq`): the payload is
    /// received into `xrc_bounce`, then written into the owner's receive.
    pub xrc_remote: Option<Arc<crate::remote_srq::RemoteSrq>>,
    pub xrc_bounce: Vec<std::cell::Cell<u8>>,
    /// The message is already in the owner's receive (`finish_request`).
    pub xrc_placed: bool,
    /// A QP on a tag-matching SRQ: the SEND being received (`tm`); its
    /// payload goes through `xrc_bounce` too.
    pub tm: crate::tm::Incoming,
    /// UD: the QP's datagram socket and the multicast groups it joined.
    pub dgram: Option<Dgram>,
    pub mcast: Vec<Group>,
    /// UD on a RoCEv2-mode device: the device's port its packets go
    /// through instead of `dgram`'s socket (which still holds the QPN).
    pub roce: Option<Arc<E::Roce>>,
    /// RC on a RoCEv2-mode device: its PSNs, messages in flight and the
    /// message being received; reset with the QP and on entering ERR.
    pub roce_rc: E::RoceRc,
    /// Raw packet: the QP's packet socket (and RSS configuration).
    pub raw: Option<raw::Raw>,
    /// Counts multicast attachments, for their ids.
    pub mcast_seq: usize,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: the QP does not receive the
    /// multicast datagrams it sent itself.
    pub block_self_mcast: bool,
    /// `IBV_QP_CREATE_SOURCE_QPN` (RoCEv2 UD only, and only 1): the
    /// number the QP sends from and receives at on the wire, QP1's for
    /// a connection manager speaking MADs.
    pub source_qpn: Option<u32>,
    /// The peer, known from RTR on.
    pub remote: Option<RemoteAddr>,
    /// Our own GID, as sent in the hello.
    pub local_gid: [u8; 16],
    /// A WQE failed locally; nothing after it is transmitted.
    pub tx_blocked: bool,
    pub comm_est_sent: bool,
    /// IBV_EVENT_SQ_DRAINED is owed when the SQ drains in SQD.
    pub sqd_notify: bool,
    /// Polls while a connection of the QP is still being made (see
    /// `Qp::drive_setup`).
    pub setup_polls: u32,
    /// A thread polling a CQ drives the QP now (`Qp::drive_now`): its
    /// reads probe the socket first (`Conn::fresh_probe`).
    pub polling: bool,
    pub destroyed: bool,
    pub stats: crate::stats::Counters,
    /// Each engine's own state, edited by that engine only.
    pub req: E::Req,
    pub resp: E::Resp,
    pub comp: E::Comp,
}

impl<E: Engines> QpInner<E> {
    /// A QP's state in RESET with queues of `cap`, their private rings
    /// from `alloc` when given (a parent domain's: see `ringmem`).
    pub fn new(
        qp_type: ibv_qp_type,
        sq_sig_all: bool,
        cap: &ibv_qp_cap,
        listener: Option<Listener>,
        dgram: Option<Dgram>,
        alloc: Option<&Arc<Allocator>>,
    ) -> Result<QpInner<E>, c_int> {
        let sq = SendQueue::new(
            cap.max_send_wr as usize,
            cap.max_send_sge as usize,
            cap.max_inline_data as usize,
            alloc,
            RES_TYPE_QP,
        )?;
        let (rwr, rsge) = (cap.max_recv_wr as usize, cap.max_recv_sge as usize);
        // RC and UC receive queues live in a mailbox, where same-host
        // peers deliver SENDs themselves (`transport::mailbox`).
        let rq = if matches!(qp_type, IBV_QPT_RC | IBV_QPT_UC) {
            RecvQueue::shared(rwr, rsge, alloc, RES_TYPE_QP)?
        } else {
            RecvQueue::new(rwr, rsge, alloc, RES_TYPE_QP)?
        };
        Ok(QpInner {
            qp_type,
            state: IBV_QPS_RESET,
            attr: ibv_qp_attr::zeroed(),
            sq_sig_all,
            sq,
            rq,
            recv: RecvWqe::EMPTY,
            claimed: false,
            xrc_srq: None,
            xrc_remote: None,
            xrc_bounce: Vec::new(),
            xrc_placed: false,
            tm: crate::tm::Incoming::default(),
            dgram,
            mcast: Vec::new(),
            roce: None,
            roce_rc: E::RoceRc::default(),
            raw: None,
            mcast_seq: 0,
            block_self_mcast: false,
            source_qpn: None,
            remote: None,
            local_gid: [0; 16],
            tx_blocked: false,
            comm_est_sent: false,
            sqd_notify: false,
            setup_polls: 0,
            polling: false,
            destroyed: false,
            stats: crate::stats::Counters::default(),
            req: E::Req::default(),
            resp: E::Resp::new(listener),
            comp: E::Comp::default(),
        })
    }

    /// Takes out the rings whose memory a parent domain's allocator gave,
    /// for the caller to drop (so `free` runs) once it has let go of the
    /// QP's lock: the QP is being destroyed, and `free` must not wait for
    /// the last reference to the QP, which a progress step may hold a
    /// moment longer. Nothing reads the rings of a destroyed QP.
    pub fn take_extern_rings(&mut self) -> (Option<SendQueue>, Option<RecvQueue>) {
        let sq = self
            .sq
            .is_extern()
            .then(|| std::mem::replace(&mut self.sq, SendQueue::none()));
        let rq = self
            .rq
            .is_extern()
            .then(|| std::mem::replace(&mut self.rq, RecvQueue::none()));
        (sq, rq)
    }

    /// The payload being received goes to our bounce buffer first
    /// (`xrc_bounce`): another process's XRC SRQ takes it from there, or
    /// tag matching places it.
    pub fn bouncing(&self) -> bool {
        self.xrc_remote.is_some() || self.tm.decision.is_some()
    }

    /// Reliable connected (RC and XRC): acknowledged, retried,
    /// RNR-stalled.
    pub fn reliable(&self) -> bool {
        matches!(
            self.qp_type,
            IBV_QPT_RC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV
        )
    }

    /// Requests wait for the peer: transmitted and unanswered, or queued
    /// to go out in RTS.
    pub fn outstanding(&self) -> bool {
        // UC never waits for its peer: there is nothing to time out.
        if !self.reliable() {
            return false;
        }
        match self.state {
            IBV_QPS_RTS => self.sq.has_work(),
            IBV_QPS_SQD => self.sq.in_flight(),
            _ => false,
        }
    }

    /// The incoming connection, if there is one.
    pub fn incoming_conn(&self) -> Option<&Conn> {
        self.resp.inc().map(|i| &i.conn)
    }

    /// The responder waits for a receive to be posted (RNR).
    pub fn is_stalled(&self) -> bool {
        matches!(self.resp.inc().map(|i| &i.rx), Some(Rx::Stalled(_)))
    }

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

#[repr(C)]
pub struct Qp<E: Engines> {
    /// Shared with the application (it reads `qp_num`/`state`, writes
    /// `wr_id`/`wr_flags` and calls the `wr_*` entries).
    pub ibv: UnsafeCell<ibv_qp_ex>,
    pub serial: u64,
    pub qpn: u32,
    pub ctx: Arc<CtxShared>,
    /// The context it was made (or opened) in: the public struct's may
    /// have been overwritten since.
    pub ibv_ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub pd_id: u32,
    /// None for the queue an XRC QP does not have (an XRC send QP has no
    /// receive queue, an XRC receive QP neither queue).
    pub send_cq: Option<Arc<Cq>>,
    pub recv_cq: Option<Arc<Cq>>,
    /// An XRC receive QP's domain.
    pub xrcd: Option<Arc<crate::xrcd::Domain>>,
    /// The shared receive queue receives come from, instead of `rq`.
    pub srq: Option<Arc<Srq>>,
    /// A handle `ibv_open_qp` made: modify and query go to this QP.
    pub opened_from: Option<Arc<Qp<E>>>,
    /// A handle `ibv_open_qp` returned for another process's receive QP:
    /// query reads its state from the domain's registry; nothing else.
    pub foreign: bool,
    /// The receive queue's mailbox (`transport::mailbox`), reachable
    /// without the lock (arming a CQ needs it).
    pub mbox: Option<Arc<Mailbox>>,
    pub inner: Mutex<QpInner<E>>,
    pub async_events: Arc<EventCounter>,
    /// State of an `ibv_wr_start` .. `ibv_wr_complete` batch; single
    /// threaded by API contract.
    pub builder: UnsafeCell<Builder>,
}

// SAFETY: mutable state is behind `inner`'s mutex; `ibv` is the C-visible
// struct whose fields we write only at defined points (state changes under
// the lock); `builder` is used by one thread at a time per the ibv_wr_*
// contract; `pd` outlives the QP (dealloc_pd refuses while it is in use).
unsafe impl<E: Engines> Send for Qp<E> {}
// SAFETY: as above.
unsafe impl<E: Engines> Sync for Qp<E> {}

/// RNR timer encoding (InfiniBand spec, min_rnr_timer 0..=31) in
/// microseconds.
const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// How long a post spins for the QP's lock before it sleeps on it.
const POST_SPIN_NS: u64 = 50_000;

pub fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[(code & 31) as usize] * 1000
}

impl<E: Engines> Qp<E> {
    /// The QP for a post. The holder is most often the progress thread
    /// handing a response to the kernel, which takes microseconds: a
    /// poster that slept on the lock instead paid a futex wake-up and, on
    /// a busy machine, a wait for a core (a program polling a WRITE's last
    /// byte posts its answer while the ACK is being sent).
    #[inline]
    pub fn lock_for_post(&self) -> parking_lot::MutexGuard<'_, QpInner<E>> {
        if let Some(g) = self.inner.try_lock() {
            return g;
        }
        let until = crate::util::mono_ns() + POST_SPIN_NS;
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if let Some(g) = self.inner.try_lock() {
                return g;
            }
            if crate::util::mono_ns() >= until {
                return self.inner.lock();
            }
        }
    }

    /// Whether its public struct still names it (`handles::names`): its
    /// handle is its serial's low 32 bits.
    pub fn names_itself(&self) -> bool {
        let ibv = self.ibv.get();
        // SAFETY: the public struct is ours, live while self is.
        unsafe {
            crate::handles::names(
                &raw const (*ibv).qp_base.context,
                &raw const (*ibv).qp_base.handle,
                self.ibv_ctx,
                self.serial as u32,
            )
        }
    }

    /// How many times the QP's CQs were polled, not counting polls of an
    /// armed CQ (a program waiting for events does not look again by
    /// itself).
    pub fn cq_polls(&self) -> u64 {
        let count = |c: &Option<Arc<Cq>>| {
            c.as_ref()
                .filter(|c| !c.is_armed())
                .map_or(0, |c| c.polls())
        };
        count(&self.send_cq).wrapping_add(count(&self.recv_cq))
    }

    /// # Safety
    /// `qp` must come from our `create_qp_ex` and not be destroyed.
    pub unsafe fn from_ibv<'a, T>(qp: *mut T) -> &'a Qp<E> {
        // SAFETY: ibv is the first field of the Arc'd Qp the pointer names.
        unsafe { &*(qp as *const Qp<E>) }
    }

    pub fn as_ibv(&self) -> *mut ibv_qp {
        self.ibv.get() as *mut ibv_qp
    }

    pub fn mailbox(&self) -> Option<&Arc<Mailbox>> {
        self.mbox.as_ref()
    }

    /// A same-host peer waits for a receive or for room in the mailbox:
    /// ring it on the connection (its progress thread retries).
    pub fn wake_waiting_peer(&self, g: &mut QpInner<E>) {
        let Some(m) = self.mbox.as_ref() else { return };
        if m.take_rnr_waiting() {
            if let Some(inc) = g.resp.inc_mut() {
                inc.push_resp(
                    &crate::wire::Header::new(crate::wire::Op::Doorbell, 0),
                    None,
                );
                E::send_responses(self, g);
            }
        }
    }

    /// Moves the completions same-host peers left in the mailbox to the
    /// receive CQ, before any the responder makes itself, so the QP's
    /// completions keep their order. A failed delivery (the peer could not
    /// write the receive's buffers) moves the QP to ERR, as the responder
    /// would have.
    pub fn drain_mailbox(&self, g: &mut QpInner<E>) {
        let Some(m) = self.mbox.as_ref() else { return };
        let mut failed = false;
        let mut any = false;
        // Receives are checked against the PD of the queue they came from.
        let rpd = self.srq.as_ref().map_or(self.pd_id, |s| s.pd_id);
        // The key table's read lock, taken once for the whole batch: a
        // lock is a locked instruction, which waits for every store
        // still on its way to the peer's cache lines.
        let mut table = None;
        while let Some((mut d, inline)) = m.pop_completion() {
            any = true;
            if let Some(i) = inline {
                // A small SEND: its bytes go into the receive's buffer now,
                // checked against our own key table.
                let t = table.get_or_insert_with(crate::mr::table);
                if !crate::place::inline(t, &i, rpd) {
                    d.status = IBV_WC_LOC_PROT_ERR;
                    d.byte_len = 0;
                }
            }
            Counters::bump(&g.stats.rcvd_pkts);
            Counters::add(&g.stats.rcvd_bytes, d.byte_len as u64);
            if d.status != IBV_WC_SUCCESS {
                Counters::bump(&g.stats.resp_cqe_error);
            }
            if let Some(cq) = &self.recv_cq {
                cq.push(crate::place::received(&d, self.qpn));
            }
            if d.status != IBV_WC_SUCCESS {
                failed = true;
                break;
            }
        }
        // Nothing moved: an empty poll takes no lock here. (A doorbell
        // request left standing only costs a peer one needless ring.)
        if !any {
            return;
        }
        if let Some(cq) = &self.recv_cq {
            cq.if_unarmed(|| m.set_want_kick(false));
        }
        if let Some(s) = &self.srq {
            s.taken_by_peers();
        }
        self.wake_waiting_peer(g);
        if g.state == IBV_QPS_RTR && !g.comm_est_sent {
            g.comm_est_sent = true;
            self.async_event(IBV_EVENT_COMM_EST);
        }
        if failed {
            self.async_event(IBV_EVENT_QP_FATAL);
            self.enter_error(g, &"a same-host delivery into this QP failed");
        }
    }

    pub fn set_state(&self, g: &mut QpInner<E>, s: ibv_qp_state) {
        g.state = s;
        // SAFETY: the public state field is plain data in our allocation;
        // programs only read it.
        unsafe { std::ptr::write_volatile(&raw mut (*self.ibv.get()).qp_base.state, s) };
        self.publish(g);
        // Other processes of the domain see it (`ibv_open_qp`, query).
        if g.qp_type == IBV_QPT_XRC_RECV && self.opened_from.is_none() && !self.foreign {
            if let Some(r) = self.xrcd.as_ref().and_then(|d| d.reg.as_ref()) {
                r.set_qp(self.qpn, s);
            }
        }
    }

    /// Tells same-host requesters what our responder accepts
    /// (`transport::local`): RC and UC QPs in RTR, RTS or SQD, with their
    /// PD and access flags.
    pub fn publish(&self, g: &QpInner<E>) {
        if !matches!(g.qp_type, IBV_QPT_RC | IBV_QPT_UC) {
            return;
        }
        use crate::transport::local::{RECEIVING, RECEIVING_RTR};
        let open = match g.state {
            _ if g.destroyed => 0,
            IBV_QPS_RTR => RECEIVING_RTR,
            IBV_QPS_RTS | IBV_QPS_SQD => RECEIVING,
            _ => 0,
        };
        if let Some(m) = &self.mbox {
            m.set_open(open != 0);
        }
        // A QP on an SRQ: peers take the SRQ's receives and leave the
        // completions in our mailbox; none of it unless the SRQ shares.
        let srq = self
            .srq
            .as_ref()
            .map(|s| s.share(self.serial, self.mbox.as_ref()));
        let boxes = crate::transport::local::Boxes {
            own: self
                .mbox
                .as_ref()
                .filter(|_| !g.destroyed && srq.is_none_or(|s| s.is_some()))
                .map(|m| m.offset()),
            srq: srq.flatten(),
        };
        // With no responder resources a READ or an atomic is an invalid
        // request: peers leave those to the connection, whose responder
        // says so.
        let mut access = g.attr.qp_access_flags;
        if g.attr.max_dest_rd_atomic == 0 {
            access &= !(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
        }
        crate::transport::local::publish_qp(
            self.qpn,
            self.pd_id,
            access,
            open,
            boxes,
            g.attr.min_rnr_timer,
        );
    }

    pub fn async_event(&self, t: ibv_event_type) {
        self.ctx
            .async_q
            .push(self.as_ibv() as usize, t, Some(self.async_events.clone()));
    }

    /// Reports a send WQE's completion (always for errors, only when
    /// signaled for successes).
    pub fn complete_send(&self, g: &QpInner<E>, w: &SendWqe, status: ibv_wc_status) {
        // Tag matching's own WQEs (`engine::rndv`): the READ completes as
        // its tag's data, the FIN silently.
        if w.tm != 0 {
            if w.tm == crate::ring::TM_RNDV_READ {
                if let Some(t) = self.srq.as_ref().and_then(|s| s.tm.as_ref()) {
                    t.data_done(w.wr_id, w.len, self.qpn, status);
                }
            }
            return;
        }
        if status == IBV_WC_SUCCESS && !(w.signaled || g.sq_sig_all) {
            return;
        }
        match status {
            IBV_WC_SUCCESS => {}
            IBV_WC_WR_FLUSH_ERR => Counters::bump(&g.stats.req_cqe_flush_error),
            _ => Counters::bump(&g.stats.req_cqe_error),
        }
        let Some(cq) = &self.send_cq else { return };
        cq.push(Cqe {
            wr_id: w.wr_id,
            status,
            opcode: w.wc_opcode(),
            byte_len: w.len,
            qp_num: self.qpn,
            src_qp: g.attr.dest_qp_num,
            ..Cqe::default()
        });
    }

    /// Claims the receive the incoming message lands in (see
    /// [`QpInner::recv`]); false when none is posted (the responder
    /// stalls; an SRQ remembers to wake us).
    pub fn claim_recv(&self, g: &mut QpInner<E>) -> bool {
        if !g.claimed {
            if let Some(r) = g.xrc_remote.clone() {
                g.claimed = match r.claim(&mut g.recv) {
                    crate::remote_srq::Claim::Taken => true,
                    crate::remote_srq::Claim::Empty => false,
                    crate::remote_srq::Claim::Closed => {
                        // Resized: its receives are out of our reach; the
                        // RNR wait ends as its retries run out.
                        log::warn!(
                            "qp {:#x}: xrc srq {:#x} of another process stopped sharing its queue",
                            self.qpn,
                            r.entry.num
                        );
                        false
                    }
                };
                return g.claimed;
            }
            // An XRC receive QP takes from the SRQ the request named.
            let srq = self.srq.as_ref().or(g.xrc_srq.as_ref());
            g.claimed = match srq {
                Some(s) => s.claim(&mut g.recv, self.serial),
                None => g.rq.take_into(&mut g.recv, self.pd_id),
            };
        }
        g.claimed
    }

    /// The CQs the QP completes into, each once.
    pub fn cqs(&self) -> impl Iterator<Item = &Arc<Cq>> {
        let recv = self
            .recv_cq
            .as_ref()
            .filter(|r| !self.send_cq.as_ref().is_some_and(|s| Arc::ptr_eq(s, r)));
        self.send_cq.iter().chain(recv)
    }

    /// The PD remote accesses are checked against: the QP's, or for an
    /// XRC receive QP, that of the SRQ the request named.
    pub fn target_pd(&self, g: &QpInner<E>) -> u32 {
        g.xrc_srq.as_ref().map_or(self.pd_id, |s| s.pd_id)
    }

    /// The CQ receives complete into: the QP's, or for an XRC receive QP,
    /// the named SRQ's.
    fn recv_cq_for<'a>(&'a self, g: &'a QpInner<E>) -> Option<&'a Arc<Cq>> {
        // A tag-matching SRQ's receives complete into its own CQ.
        if let Some(t) = self.srq.as_ref().and_then(|s| s.tm.as_ref()) {
            return Some(&t.cq);
        }
        match g.xrc_srq.as_ref().and_then(|s| s.xrc.as_ref()) {
            Some(x) => Some(&x.cq),
            None => self.recv_cq.as_ref(),
        }
    }

    /// The claimed receive, if any, for completing it.
    pub fn take_claimed(&self, g: &mut QpInner<E>) -> Option<u64> {
        std::mem::take(&mut g.claimed).then_some(g.recv.wr_id)
    }

    /// The claimed receive cannot take the incoming message: it completes
    /// with `status` (nothing happens if none was claimed).
    pub fn fail_claimed(&self, g: &mut QpInner<E>, status: ibv_wc_status) {
        if let Some(wr_id) = self.take_claimed(g) {
            let e = Cqe {
                wr_id,
                status,
                opcode: IBV_WC_RECV,
                src_qp: g.attr.dest_qp_num,
                ..Cqe::default()
            };
            self.complete_recv(g, e);
        }
    }

    pub fn complete_recv(&self, g: &mut QpInner<E>, e: Cqe) {
        self.drain_mailbox(g);
        self.complete_recv_drained(g, e);
    }

    /// As [`Qp::complete_recv`] for a caller that drained the mailbox
    /// itself, before the ACK that lets a same-host peer place the next
    /// SEND there went out: what the peer placed since comes after this.
    pub fn complete_recv_drained(&self, g: &mut QpInner<E>, e: Cqe) {
        if let Some(r) = g.xrc_remote.clone() {
            return self.complete_remote(g, &r, e);
        }
        if e.status != IBV_WC_SUCCESS {
            Counters::bump(&g.stats.resp_cqe_error);
        }
        if let Some(cq) = self.recv_cq_for(g) {
            cq.push(Cqe {
                qp_num: self.qpn,
                ..e
            });
        }
    }

    /// A receive of another process's XRC SRQ: the payload (in
    /// `xrc_bounce`) goes into its buffers, the completion into its ring.
    fn complete_remote(&self, g: &mut QpInner<E>, r: &crate::remote_srq::RemoteSrq, mut e: Cqe) {
        let placed = std::mem::take(&mut g.xrc_placed);
        if e.status == IBV_WC_SUCCESS && e.byte_len > 0 && !placed {
            let len = (e.byte_len as usize).min(g.xrc_bounce.len());
            // SAFETY: the bounce buffer holds at least `len` bytes.
            if !unsafe { r.write(&g.recv, g.xrc_bounce.as_ptr() as *const u8, len) } {
                e.status = IBV_WC_LOC_PROT_ERR;
                e.byte_len = 0;
            }
        }
        if e.status != IBV_WC_SUCCESS {
            Counters::bump(&g.stats.resp_cqe_error);
        }
        // A large message's buffer is not kept.
        if g.xrc_bounce.capacity() > 1 << 20 {
            g.xrc_bounce = Vec::new();
        }
        r.complete(&crate::place::delivered(&e, self.qpn));
    }

    /// Moves to the error state: flushes both queues and takes the
    /// connections down (the incoming one after its queued responses, e.g.
    /// a NAK explaining the error, are sent).
    /// `why` goes to the log at error level.
    pub fn enter_error(&self, g: &mut QpInner<E>, why: &dyn core::fmt::Display) {
        if g.state == IBV_QPS_ERR {
            return;
        }
        log::error!(
            "qp {:#x}: {} -> ERR: {why}",
            self.qpn,
            crate::trace::qp_state_name(g.state)
        );
        self.enter_error_quietly(g);
    }

    /// `enter_error` without the log: `ibv_modify_qp` to ERR.
    pub fn enter_error_quietly(&self, g: &mut QpInner<E>) {
        if g.state == IBV_QPS_ERR {
            return;
        }
        self.set_state(g, IBV_QPS_ERR);
        g.roce_rc.on_error();
        g.req.disconnect();
        g.resp.drop_pending();
        E::close_incoming(self, g);
        self.flush(g);
        // Nothing more will be taken from the SRQ for this QP.
        if self.srq.is_some() {
            self.async_event(IBV_EVENT_QP_LAST_WQE_REACHED);
        }
    }

    /// Completes every outstanding WQE with IBV_WC_WR_FLUSH_ERR.
    pub fn flush(&self, g: &mut QpInner<E>) {
        for seq in g.sq.outstanding() {
            let w = *g.sq.wqe(seq);
            self.complete_send(g, &w, IBV_WC_WR_FLUSH_ERR);
        }
        g.sq.clear();
        g.tx_blocked = false;
        // Delivered before the error: they complete first.
        self.drain_mailbox(g);
        if let Some(r) = g.xrc_remote.clone() {
            if let Some(wr_id) = self.take_claimed(g) {
                let e = Cqe {
                    wr_id,
                    status: IBV_WC_WR_FLUSH_ERR,
                    opcode: IBV_WC_RECV,
                    ..Cqe::default()
                };
                self.complete_remote(g, &r, e);
            }
        }
        let claimed = self.take_claimed(g);
        // Cloned: the loop below borrows the queue.
        let cq = self.recv_cq_for(g).cloned();
        // A claimed receive is older than anything still in the queue.
        for wr_id in claimed.into_iter().chain(std::iter::from_fn(|| g.rq.pop())) {
            Counters::bump(&g.stats.resp_cqe_flush_error);
            if let Some(cq) = &cq {
                cq.push(Cqe {
                    wr_id,
                    status: IBV_WC_WR_FLUSH_ERR,
                    opcode: IBV_WC_RECV,
                    qp_num: self.qpn,
                    ..Cqe::default()
                });
            }
        }
    }

    /// Completes the head WQE with an error and moves the QP to ERR.
    pub fn fail_head(&self, g: &mut QpInner<E>, status: ibv_wc_status) {
        if let Some(seq) = g.sq.oldest() {
            let w = *g.sq.wqe(seq);
            self.complete_send(g, &w, status);
            g.sq.retire_oldest();
            self.enter_error(
                g,
                &format_args!(
                    "work request {:#x} failed with {}",
                    w.wr_id,
                    crate::trace::wc_status_name(status)
                ),
            );
        } else {
            self.enter_error(
                g,
                &format_args!("failed with {}", crate::trace::wc_status_name(status)),
            );
        }
    }

    /// After completions: report a locally failed WQE that reached the head,
    /// and the end of an SQD drain.
    pub fn after_send_completions(&self, g: &mut QpInner<E>) {
        while let Some(seq) = g.sq.oldest_in_flight() {
            let w = *g.sq.wqe(seq);
            if w.local_err != 0 {
                self.fail_head(g, w.local_err);
                return;
            }
            // A local operation that succeeded completes once it is the
            // oldest.
            if !w.local_ok {
                break;
            }
            g.sq.retire_oldest();
            self.complete_send(g, &w, IBV_WC_SUCCESS);
        }
        if g.state == IBV_QPS_SQD && g.sqd_notify && !g.sq.in_flight() {
            g.sqd_notify = false;
            self.async_event(IBV_EVENT_SQ_DRAINED);
        }
    }

    pub fn reset(&self, g: &mut QpInner<E>) {
        g.req.reset();
        g.resp.reset();
        g.roce_rc = E::RoceRc::default();
        g.sq.clear();
        g.rq.clear();
        if let Some(m) = &self.mbox {
            m.discard_completions();
        }
        g.claimed = false;
        g.tm = crate::tm::Incoming::default();
        g.remote = None;
        g.tx_blocked = false;
        g.comm_est_sent = false;
        g.sqd_notify = false;
        g.attr = ibv_qp_attr::zeroed();
        for cq in self.cqs() {
            cq.purge_qp(self.qpn);
        }
        self.set_state(g, IBV_QPS_RESET);
    }

    /// The peer's host stopped answering (TCP's keepalive or unacked-data
    /// timeout, from the retry budget, ran out on one of the connections).
    /// Outstanding requests fail with `IBV_WC_RETRY_EXC_ERR` as the retry
    /// timer would fail them; with none outstanding, hardware would wait
    /// forever on its receives, which is the hang a test run must never
    /// meet, so the QP goes to ERR with `IBV_EVENT_QP_FATAL` and its
    /// receives flush.
    pub fn peer_vanished(&self, g: &mut QpInner<E>) {
        if !matches!(g.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) {
            return;
        }
        g.req.lose_peer();
        if g.outstanding() {
            self.fail_head(g, IBV_WC_RETRY_EXC_ERR);
        } else {
            self.async_event(IBV_EVENT_QP_FATAL);
            self.enter_error(g, &"the peer vanished (its host stopped answering)");
        }
    }

    /// A CQ of this QP overran: the completions it lost make the QP's
    /// queues meaningless, so, as the spec says, the QP goes to the error
    /// state with `IBV_EVENT_QP_FATAL`.
    pub fn check_cq_overrun(&self, g: &mut QpInner<E>) {
        if g.state == IBV_QPS_ERR || g.state == IBV_QPS_RESET {
            return;
        }
        let overran = |c: &Option<Arc<Cq>>| c.as_ref().is_some_and(|c| c.overran());
        if overran(&self.send_cq) || overran(&self.recv_cq) {
            self.async_event(IBV_EVENT_QP_FATAL);
            self.enter_error(g, &"CQ overrun");
        }
    }
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
}
