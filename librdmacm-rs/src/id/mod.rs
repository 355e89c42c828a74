//! `rdma_cm_id`s: the C object, its state machine and the connection
//! protocol it speaks with its peer (see `wire`).
//!
//! Every id is an `Arc<CmId>` registered under the address of its C
//! `rdma_cm_id`, which is what applications hold. All state is behind the
//! id's mutex; the C struct's fields are written under that mutex too.
//! Work on the application's QP (RTR/RTS after a REP, ERR after a reject
//! or disconnect) is done when the application retrieves the event, in
//! its own thread, never by the CM thread: applications may destroy their
//! QP with `ibv_destroy_qp` while the CM thread runs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use core::ffi::c_void;
use parking_lot::{Condvar, Mutex};
use std::sync::LazyLock;
use verbs_abi::*;

use verbs_rt::Handles;

use crate::addr;
use crate::channel::{Channel, EventBox, EventId, Post};
use crate::device::{self, Local};
use crate::engine::{self, CmTarget, Entry, TimerTarget, EV_IN, EV_OUT};
use crate::error::{errno, trace, Res};
use crate::ffi;
use crate::sock;
use crate::wire::{
    ConnInfo, Msg, SidrReq, MAX_FRAME, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID, REJ_PDATA,
    REJ_TIMEOUT, REP_PDATA, REQ_PDATA,
};

mod api;
mod ece;
mod events;
mod ibcm;
mod io;
mod mcast;
mod passive;
mod ports;
mod qp;
mod resolve;
mod retrieve;
mod ud;
mod xrc;

/// The QP ack timeout when the application sets none: the kernel's CM
/// gives a RoCE id its path's packet lifetime (16) plus one, 4.096 us *
/// 2^17, about 0.54 s a try and 4.3 s with rsockets' 7 retries. 14 (67 ms,
/// 0.54 s in all) failed an rsocket whose peer a loaded host did not run
/// for half a second.
const DEFAULT_ACK_TIMEOUT: u8 = 17;
/// RoCE v2 hop limit for the GRH.
const HOP_LIMIT: u8 = 64;
/// How long a disconnected connection stays in timewait before
/// RDMA_CM_EVENT_TIMEWAIT_EXIT: the kernel's CM over RoCE waits about
/// twice the packet lifetime, roughly half a second.
const TIMEWAIT: Duration = Duration::from_millis(500);

/// How often, and how far apart, a refused connect is tried again before
/// it is reported as REJECTED (see `CmId::refused`).
const REFUSED_RETRIES: u8 = 5;
const REFUSED_DELAY: Duration = Duration::from_millis(50);
/// How long a listener whose accept failed (no descriptors left) rests
/// before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Base CM response timeout: how long the active side waits for the
/// passive library to acknowledge a REQ. After that acknowledgement (MRA)
/// and while waiting for RTU the wait is six times longer, since an
/// application is then in the loop. `RDMACM_RS_TIMEOUT_MS` overrides it.
fn cm_timeout() -> Duration {
    let ms = std::env::var("RDMACM_RS_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(10_000);
    // Capped at a day so the multiples taken of it and the deadlines built
    // from it cannot overflow (which would panic, and abort the process).
    Duration::from_millis(ms.min(86_400_000))
}

/// Unsent bytes no honest exchange leaves behind (a handful of messages):
/// past this the peer is not reading what it asks for.
const OUTBUF_LIMIT: usize = 4 * MAX_FRAME;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Protocol deadlines, the timewait timer and a listener's accept retry.
    Proto = 0,
    /// Closing a connection the peer did not close itself.
    Linger = 1,
}

impl TimerKind {
    fn from_bit(b: u64) -> TimerKind {
        if b == 0 {
            TimerKind::Proto
        } else {
            TimerKind::Linger
        }
    }
}

impl CmId {
    /// The id as the CM thread holds it (weakly: an id dies when the
    /// application destroys it, whatever is registered).
    fn as_target(self: &Arc<Self>) -> std::sync::Weak<dyn CmTarget> {
        let w: std::sync::Weak<CmId> = Arc::downgrade(self);
        w
    }
}

/// How the CM thread reaches an id.
impl CmTarget for CmId {
    fn accept_one(self: Arc<Self>) -> Option<OwnedFd> {
        CmId::accept_one(&self)
    }

    fn on_request(self: Arc<Self>, fd: OwnedFd, token: u64, info: ConnInfo, rest: Vec<u8>) {
        CmId::on_request(&self, fd, token, info, rest)
    }

    fn on_sidr_request(self: Arc<Self>, fd: OwnedFd, token: u64, req: SidrReq) {
        CmId::on_sidr_request(&self, fd, token, req)
    }

    fn on_io(self: Arc<Self>, token: u64, events: u32) {
        CmId::on_io(&self, token, events)
    }

    fn on_timer(self: Arc<Self>, cookie: u64) {
        CmId::on_timer(&self, cookie)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: TCP connection to the listener in progress.
    Connecting,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: REP received; RTU goes out when the application has the event
    /// (with a QP) or calls `rdma_establish` (without).
    RepReceived,
    /// Passive: connect request delivered, waiting for accept or reject.
    ReqReceived,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    Established,
    DreqSent,
    Disconnected,
    /// No connection any more (rejected, refused, failed).
    Closed,
}

#[repr(C)]
pub struct IdBox {
    pub c: rdma_cm_id,
}

pub struct IdState {
    phase: Phase,
    ps: rdma_port_space,
    pub chan: Arc<Channel>,
    /// The channel is the id's own (created for a NULL channel): operations
    /// wait for their event and consume it.
    pub sync: bool,
    local: Option<Local>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// Bound socket, then the listening socket or the CM connection.
    sock: Option<OwnedFd>,
    token: u64,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    out_armed: bool,
    close_after_flush: bool,
    timer_gen: u64,
    linger_gen: u64,
    tos: u8,
    reuseaddr: bool,
    afonly: Option<bool>,
    /// The port this id holds as the kernel's CM counts it (see `ports`).
    claim: Option<ports::Claim>,
    ack_timeout: Option<u8>,
    backlog: u32,
    passive: bool,
    /// A REQ went out or came in (the kernel's "has an IB CM id").
    cm_started: bool,
    /// Active: the peer's MRA arrived. Only the first one extends the wait
    /// for the REP, so a peer repeating MRAs cannot hold a connect open
    /// forever.
    mra_seen: bool,
    /// Active: refused connects so far, and the REQ and source address kept
    /// for the next try while one is scheduled (see `refused`).
    refused: u8,
    retry: Option<(Vec<u8>, Option<SocketAddr>)>,
    my_psn: u32,
    /// Negotiated responder resources and initiator depth of our QP.
    rr: u8,
    idepth: u8,
    retry_count: u8,
    rnr_retry: u8,
    path_mtu: u8,
    peer: Option<ConnInfo>,
    destroyed: bool,
    /// `rdma_create_ep` on a passive id: QP attributes for new connections.
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    ud: ud::UdState,
    /// The peer's CM speaks MADs on QP1 (a RoCEv2-mode device).
    mad: Option<ibcm::MadLink>,
    /// A listener's service ID with the GSI.
    mad_sid: Option<u64>,
}

struct Counts {
    reported: u64,
    completed: u64,
}

pub struct CmId {
    raw: *mut IdBox,
    pub st: Mutex<IdState>,
    counts: Mutex<Counts>,
    acked: Condvar,
    /// Listener: connect requests queued and not yet retrieved.
    pending_reqs: AtomicU32,
    /// Enhanced connection establishment: ours to offer, the peer's.
    pub ece: Mutex<Ece>,
}

/// ECE as rdma-core keeps it per id: vendor id and options, ours and the
/// peer's (zero: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ece {
    pub local: (u32, u32),
    pub remote: (u32, u32),
}

// SAFETY: `raw` is a heap object owned by this id; this library reads and
// writes it only under `st` (or before the id is shared), and the rest is
// thread-safe types.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

/// The ids handed out, by the C object's address (a forked child starts
/// with none, as its parent's ids are not its own).
static IDS: Handles<Arc<CmId>> = Handles::new();

fn random_psn() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: writes at most 4 bytes into `v`.
    let n = unsafe { libc::getrandom(&mut v as *mut u32 as *mut c_void, 4, libc::GRND_NONBLOCK) };
    if n != 4 {
        v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
            .unwrap_or(0x5a5a5a);
    }
    v & 0x00ff_ffff
}

fn family_matches(a: &SocketAddr, b: &SocketAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

impl CmId {
    pub fn new(
        ps: rdma_port_space,
        chan: Arc<Channel>,
        sync: bool,
        context: *mut c_void,
    ) -> Arc<CmId> {
        let mut c = rdma_cm_id::zeroed();
        c.channel = chan.c_ptr();
        c.context = context;
        c.ps = ps;
        c.qp_type = ud::initial_qp_type(ps);
        let raw = Box::into_raw(Box::new(IdBox { c }));
        let id = Arc::new(CmId {
            raw,
            st: Mutex::new(IdState {
                phase: Phase::Idle,
                ps,
                chan,
                sync,
                local: None,
                src: None,
                dst: None,
                sock: None,
                token: 0,
                inbuf: Vec::new(),
                outbuf: Vec::new(),
                out_armed: false,
                close_after_flush: false,
                timer_gen: 0,
                linger_gen: 0,
                tos: 0,
                reuseaddr: false,
                afonly: None,
                claim: None,
                ack_timeout: None,
                backlog: 0,
                passive: false,
                cm_started: false,
                mra_seen: false,
                refused: 0,
                retry: None,
                my_psn: 0,
                rr: 0,
                idepth: 0,
                retry_count: 7,
                rnr_retry: 7,
                path_mtu: IBV_MTU_1024 as u8,
                peer: None,
                destroyed: false,
                qp_init_attr: None,
                ud: ud::UdState::default(),
                mad: None,
                mad_sid: None,
            }),
            counts: Mutex::new(Counts {
                reported: 0,
                completed: 0,
            }),
            acked: Condvar::new(),
            pending_reqs: AtomicU32::new(0),
            ece: Mutex::new(Ece::default()),
        });
        IDS.insert(raw, id.clone());
        id
    }

    pub fn lookup(p: *mut rdma_cm_id) -> Res<Arc<CmId>> {
        IDS.get(p).ok_or(libc::EINVAL)
    }

    /// The C object applications see.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.raw as *mut rdma_cm_id
    }

    /// The C struct, for writing under the state lock: the reference
    /// borrows the guard's state, so it cannot outlive the lock nor
    /// coexist with another one made this way.
    pub(super) fn cs<'a>(&self, _st: &'a mut IdState) -> &'a mut rdma_cm_id {
        // SAFETY: `raw` lives until `destroy` frees it after removing the id
        // from every table; our writers hold the state lock (the `_st`
        // borrow). The application may read the struct meanwhile, as with
        // rdma-core.
        unsafe { &mut (*self.raw).c }
    }

    /// Runs `f` on the C struct under the state lock.
    pub fn with_c<R>(&self, f: impl FnOnce(&mut rdma_cm_id, &mut IdState) -> R) -> R {
        let mut st = self.st.lock();
        // SAFETY: see `cs`; the guard is held for the whole call.
        let c = unsafe { &mut (*self.raw).c };
        f(c, &mut st)
    }

    pub fn qp(&self, st: &mut IdState) -> *mut ibv_qp {
        self.cs(st).qp
    }

    /// The options set on the id so far, as `rdma_set_option` takes them,
    /// for a backend that takes the id over.
    pub fn options(&self) -> Vec<(i32, i32, Vec<u8>)> {
        let st = self.st.lock();
        let mut v = Vec::new();
        if st.tos != 0 {
            v.push((RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, vec![st.tos]));
        }
        if st.reuseaddr {
            v.push((
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_REUSEADDR,
                1i32.to_ne_bytes().to_vec(),
            ));
        }
        if let Some(on) = st.afonly {
            v.push((
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_AFONLY,
                i32::from(on).to_ne_bytes().to_vec(),
            ));
        }
        if let Some(t) = st.ack_timeout {
            v.push((RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, vec![t]));
        }
        v
    }

    /// Whether no call has given the id an address yet.
    pub fn is_idle(&self) -> bool {
        self.st.lock().phase == Phase::Idle
    }

    /// Whether the id is bound (by the TCP CM) to a wildcard address: the
    /// port, if so.
    pub fn wildcard_port(&self) -> Option<SocketAddr> {
        let st = self.st.lock();
        if st.phase != Phase::Bound {
            return None;
        }
        st.src.filter(|a| a.ip().is_unspecified())
    }

    pub fn note_reported(&self) {
        self.counts.lock().reported += 1;
    }

    pub fn complete_one(&self) {
        let mut c = self.counts.lock();
        c.completed += 1;
        self.acked.notify_all();
    }

    /// Events reported and not acked that are the application's to ack:
    /// the one a synchronous id keeps in `id->event` is the library's.
    fn unacked_by_app(&self) -> u64 {
        let held = self.with_c(|c, _| !c.event.is_null()) as u64;
        let c = self.counts.lock();
        c.reported.saturating_sub(c.completed).saturating_sub(held)
    }

    /// The misuse checker's look at `rdma_destroy_id`: events the
    /// application still holds make the destroy block for ever. After a
    /// grace for other threads to ack them, EBUSY with the id untouched.
    pub fn check_destroy(&self) -> Res<()> {
        let n = self.unacked_by_app();
        if n == 0 {
            return Ok(());
        }
        let end = std::time::Instant::now() + Duration::from_secs(1);
        loop {
            if self.unacked_by_app() == 0 {
                return Ok(());
            }
            let mut c = self.counts.lock();
            if self.acked.wait_until(&mut c, end).timed_out() {
                break;
            }
        }
        crate::check::unacked_at_destroy(self.c() as usize, self.unacked_by_app());
        Err(libc::EBUSY)
    }

    /// Blocks until every event reported for this id has been acked
    /// (rdma_destroy_id and rdma_migrate_id are documented to block so).
    pub(super) fn wait_acked(&self) {
        let mut c = self.counts.lock();
        while c.completed < c.reported {
            self.acked.wait(&mut c);
        }
    }
}

/// Shows a REQ's or REP's parameters in an event as the receiving side
/// sees them: the peer's initiator depth is the responder resources asked
/// of us, and the other way round. (Only a REQ reports its retry count.)
fn report_conn(ev: &mut EventBox, info: &ConnInfo, pdata_area: usize) {
    ev.set_pdata(&info.pdata, pdata_area);
    let c = ev.conn();
    c.responder_resources = info.initiator_depth;
    c.initiator_depth = info.responder_resources;
    c.flow_control = info.flow_control;
    c.rnr_retry_count = info.rnr_retry_count;
    c.srq = info.srq;
    c.qp_num = info.qpn;
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> Res<()> {
    // SAFETY: the QP is live (owned by the id or the application).
    match unsafe { ffi::ibv_modify_qp(qp, a, mask as i32) } {
        0 => Ok(()),
        e => Err(e),
    }
}

pub fn qp_to_err(qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_ERR;
    let _ = modify(qp, &mut a, IBV_QP_STATE);
}

/// A completion channel and a CQ of `size` entries on it, for an id whose
/// application passed no CQ (rdma-core does the same).
fn make_cq(
    verbs: *mut ibv_context,
    size: u32,
    id: *mut rdma_cm_id,
) -> Res<(*mut ibv_comp_channel, *mut ibv_cq)> {
    let err = || match errno() {
        0 => libc::ENOMEM,
        e => e,
    };
    // SAFETY: `verbs` is an open context.
    let chan = unsafe { ffi::ibv_create_comp_channel(verbs) };
    if chan.is_null() {
        return Err(err());
    }
    // SAFETY: open context and the channel just made; the CQ's context is
    // the id, as in rdma-core.
    let cq = unsafe { ffi::ibv_create_cq(verbs, size as i32, id.cast(), chan, 0) };
    if cq.is_null() {
        let e = err();
        // SAFETY: the channel was made above and has no CQ.
        unsafe { ffi::ibv_destroy_comp_channel(chan) };
        return Err(e);
    }
    Ok((chan, cq))
}

fn create_cqs(c: &mut rdma_cm_id, send_size: u32, recv_size: u32) -> Res<()> {
    let id: *mut rdma_cm_id = c;
    if recv_size > 0 {
        let (chan, cq) = make_cq(c.verbs, recv_size, id)?;
        c.recv_cq_channel = chan;
        c.recv_cq = cq;
    }
    if send_size > 0 {
        match make_cq(c.verbs, send_size, id) {
            Ok((chan, cq)) => {
                c.send_cq_channel = chan;
                c.send_cq = cq;
            }
            Err(e) => {
                destroy_cqs(c);
                return Err(e);
            }
        }
    }
    Ok(())
}

fn destroy_cqs(c: &mut rdma_cm_id) {
    // SAFETY: these CQs and channels were created by `create_cqs` for this
    // id (an application-provided CQ is never stored in the id).
    unsafe {
        if !c.recv_cq.is_null() {
            ffi::ibv_destroy_cq(c.recv_cq);
            if !c.send_cq.is_null() && c.send_cq != c.recv_cq {
                ffi::ibv_destroy_cq(c.send_cq);
            }
        } else if !c.send_cq.is_null() {
            ffi::ibv_destroy_cq(c.send_cq);
        }
        c.recv_cq = core::ptr::null_mut();
        c.send_cq = core::ptr::null_mut();
        if !c.recv_cq_channel.is_null() {
            ffi::ibv_destroy_comp_channel(c.recv_cq_channel);
            if !c.send_cq_channel.is_null() && c.send_cq_channel != c.recv_cq_channel {
                ffi::ibv_destroy_comp_channel(c.send_cq_channel);
            }
        } else if !c.send_cq_channel.is_null() {
            ffi::ibv_destroy_comp_channel(c.send_cq_channel);
        }
        c.recv_cq_channel = core::ptr::null_mut();
        c.send_cq_channel = core::ptr::null_mut();
    }
}

/// Outstanding (retrieved, not yet acked) events, so a bad or repeated
/// `rdma_ack_cm_event` is refused instead of freeing twice.
static OUTSTANDING: LazyLock<Mutex<std::collections::HashSet<usize>>> =
    LazyLock::new(|| Mutex::new(std::collections::HashSet::new()));

/// For the misuse checker's exit summary: the ids never destroyed and the
/// events retrieved and never acknowledged.
fn report_leftovers() {
    let ids: Vec<usize> = IDS.entries().into_iter().map(|(h, _)| h).collect();
    let events = OUTSTANDING.lock().len();
    crate::check::leftovers(&ids, events);
}

/// Hands a retrieved event to the application.
pub fn deliver(mut ev: Box<EventBox>) -> *mut rdma_cm_event {
    if verbs_rt::check::on() {
        crate::check::at_exit(report_leftovers);
    }
    CmId::on_retrieve(&mut ev);
    let p = Box::into_raw(ev);
    OUTSTANDING.lock().insert(p as usize);
    p as *mut rdma_cm_event
}

impl EventId for CmId {
    fn c_id(&self) -> *mut rdma_cm_id {
        self.c()
    }

    fn note_reported(&self) {
        CmId::note_reported(self);
    }
}

/// The id an event's owner or subject is (ids are the only `EventId`).
pub fn cm_id(e: &Arc<dyn EventId>) -> Option<Arc<CmId>> {
    let any: Arc<dyn std::any::Any + Send + Sync> = e.clone();
    any.downcast().ok()
}

/// `rdma_ack_cm_event`: frees the event and counts the ack.
pub fn ack(p: *mut rdma_cm_event) -> bool {
    if !OUTSTANDING.lock().remove(&(p as usize)) {
        return false;
    }
    // SAFETY: `p` came from `deliver` (Box::into_raw) and was outstanding.
    let ev = unsafe { Box::from_raw(p as *mut EventBox) };
    let owner = cm_id(&ev.owner);
    drop(ev);
    if let Some(owner) = owner {
        owner.complete_one();
    }
    true
}
