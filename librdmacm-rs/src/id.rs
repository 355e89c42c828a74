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

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use core::ffi::c_void;
use parking_lot::{Condvar, Mutex};
use std::sync::LazyLock;
use verbs_abi::*;

use crate::addr;
use crate::channel::{Channel, EventBox, Post};
use crate::device::{self, Local};
use crate::engine::{self, Entry, TimerTarget, EV_IN, EV_OUT};
use crate::error::{errno, trace, Res};
use crate::ffi;
use crate::sock;
use crate::wire::{ConnInfo, Msg, MAX_FRAME, REJ_PDATA, REP_PDATA, REQ_PDATA};

/// IB CM reject reasons we produce (the values are the IB spec's).
pub const REJ_TIMEOUT: u16 = 1;
pub const REJ_INVALID_SERVICE_ID: u16 = 8;
pub const REJ_CONSUMER_DEFINED: u16 = 28;
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// The QP ack timeout when the application sets none (IB encoding:
/// 4.096 us * 2^14, about 67 ms).
const DEFAULT_ACK_TIMEOUT: u8 = 14;
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
    Proto,
    /// Closing a connection the peer did not close itself.
    Linger,
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
}

// SAFETY: `raw` is a heap object owned by this id; this library reads and
// writes it only under `st` (or before the id is shared), and the rest is
// thread-safe types.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

static IDS: LazyLock<Mutex<HashMap<usize, Arc<CmId>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

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
        c.qp_type = IBV_QPT_RC;
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
            }),
            counts: Mutex::new(Counts {
                reported: 0,
                completed: 0,
            }),
            acked: Condvar::new(),
            pending_reqs: AtomicU32::new(0),
        });
        IDS.lock().insert(raw as usize, id.clone());
        id
    }

    pub fn lookup(p: *mut rdma_cm_id) -> Res<Arc<CmId>> {
        IDS.lock().get(&(p as usize)).cloned().ok_or(libc::EINVAL)
    }

    /// The C object applications see.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.raw as *mut rdma_cm_id
    }

    /// The C struct, for writing under the state lock: the reference
    /// borrows the guard's state, so it cannot outlive the lock nor
    /// coexist with another one made this way.
    fn cs<'a>(&self, _st: &'a mut IdState) -> &'a mut rdma_cm_id {
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

    pub fn note_reported(&self) {
        self.counts.lock().reported += 1;
    }

    pub fn complete_one(&self) {
        let mut c = self.counts.lock();
        c.completed += 1;
        self.acked.notify_all();
    }

    /// Blocks until every event reported for this id has been acked
    /// (rdma_destroy_id and rdma_migrate_id are documented to block so).
    fn wait_acked(&self) {
        let mut c = self.counts.lock();
        while c.completed < c.reported {
            self.acked.wait(&mut c);
        }
    }

    // -- events ------------------------------------------------------------

    fn event(self: &Arc<Self>, kind: rdma_cm_event_type, status: i32) -> Box<EventBox> {
        EventBox::new(self, self, kind, status)
    }

    fn queue(&self, st: &IdState, ev: Box<EventBox>) {
        st.chan.push(ev);
    }

    /// A connection attempt or connection ended with `kind`; the QP goes to
    /// the error state when the application gets the event.
    fn fail(self: &Arc<Self>, st: &mut IdState, kind: rdma_cm_event_type, status: i32) {
        trace!(
            "id {:p} in {:?} fails: event {} status {}",
            self.raw,
            st.phase,
            kind,
            status
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        let mut ev = self.event(kind, status);
        ev.post = Post::QpToErr;
        self.queue(st, ev);
        self.close_sock(st);
    }

    fn rejected(self: &Arc<Self>, st: &mut IdState, reason: u16, pdata: &[u8]) {
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        let mut ev = self.event(RDMA_CM_EVENT_REJECTED, reason as i32);
        ev.set_pdata(pdata, REJ_PDATA);
        ev.post = Post::QpToErr;
        self.queue(st, ev);
        self.close_sock(st);
    }

    fn disconnected(self: &Arc<Self>, st: &mut IdState, status: i32) {
        st.phase = Phase::Disconnected;
        let mut ev = self.event(RDMA_CM_EVENT_DISCONNECTED, status);
        ev.post = Post::QpToErr;
        self.queue(st, ev);
        self.arm(st, TimerKind::Proto, TIMEWAIT);
        self.hang_up(st);
    }

    // -- timers --------------------------------------------------------------

    fn arm(self: &Arc<Self>, st: &mut IdState, kind: TimerKind, after: Duration) {
        let gen = match kind {
            TimerKind::Proto => {
                st.timer_gen += 1;
                st.timer_gen
            }
            TimerKind::Linger => {
                st.linger_gen += 1;
                st.linger_gen
            }
        };
        if let Ok(e) = engine::get() {
            e.arm(after, TimerTarget::Id(Arc::downgrade(self), kind, gen));
        }
    }

    pub fn on_timer(self: &Arc<Self>, kind: TimerKind, gen: u64) {
        let mut st = self.st.lock();
        if st.destroyed {
            return;
        }
        match kind {
            TimerKind::Linger => {
                if gen == st.linger_gen {
                    self.close_sock(&mut st);
                }
            }
            TimerKind::Proto => {
                if gen != st.timer_gen {
                    return;
                }
                match st.phase {
                    Phase::Connecting if st.retry.is_some() => self.retry_connect(&mut st),
                    Phase::Connecting | Phase::ReqSent | Phase::RepSent => {
                        self.fail(&mut st, RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT)
                    }
                    Phase::DreqSent => {
                        self.disconnected(&mut st, -libc::ETIMEDOUT);
                        self.close_sock(&mut st);
                    }
                    Phase::Disconnected => {
                        let ev = self.event(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
                        self.queue(&st, ev);
                    }
                    Phase::Listening => self.watch_listener(&mut st, true),
                    _ => {}
                }
            }
        }
    }

    // -- socket I/O ----------------------------------------------------------

    fn close_sock(&self, st: &mut IdState) {
        if let Some(fd) = st.sock.take() {
            if st.token != 0 {
                if let Ok(e) = engine::get() {
                    e.deregister(fd.as_raw_fd(), st.token);
                }
            }
        }
        st.token = 0;
        st.inbuf.clear();
        st.outbuf.clear();
        st.out_armed = false;
        st.close_after_flush = false;
        st.linger_gen += 1;
    }

    /// Ends the connection once our last message is out. The active side
    /// closes first, so TCP's TIME_WAIT lands on its ephemeral port and not
    /// on the listener's; the passive side waits (bounded) for that close.
    fn hang_up(self: &Arc<Self>, st: &mut IdState) {
        if st.passive {
            self.flush(st);
            self.arm(st, TimerKind::Linger, cm_timeout());
        } else {
            st.close_after_flush = true;
            self.flush(st);
        }
    }

    fn register(self: &Arc<Self>, st: &mut IdState, events: u32) -> Res<()> {
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?.as_raw_fd();
        let e = engine::get()?;
        st.token = e.register(fd, Entry::Conn(Arc::downgrade(self)), events)?;
        st.out_armed = events & EV_OUT != 0;
        Ok(())
    }

    fn send(&self, st: &mut IdState, msg: &Msg) {
        if st.sock.is_none() {
            return;
        }
        if st.outbuf.len() > OUTBUF_LIMIT {
            // A peer that keeps sending (DREQ after DREQ) but reads nothing
            // must not grow the buffer without end; it misses only answers
            // it does not read.
            trace!("id {:p}: peer not reading, {:?} dropped", self.raw, msg);
            return;
        }
        msg.encode(&mut st.outbuf);
        if st.phase != Phase::Connecting {
            self.flush(st);
        }
    }

    fn flush(&self, st: &mut IdState) {
        let Some(fd) = st.sock.as_ref() else { return };
        while !st.outbuf.is_empty() {
            match sock::write(fd, &st.outbuf) {
                Ok(n) => {
                    st.outbuf.drain(..n);
                }
                Err(libc::EINTR) => {}
                Err(libc::EAGAIN) => break,
                // The error shows up as end-of-stream on the read side.
                Err(_) => {
                    st.outbuf.clear();
                    break;
                }
            }
        }
        let want_out = !st.outbuf.is_empty();
        if want_out != st.out_armed && st.token != 0 {
            if let Ok(e) = engine::get() {
                e.modify(
                    fd.as_raw_fd(),
                    st.token,
                    EV_IN | if want_out { EV_OUT } else { 0 },
                );
            }
            st.out_armed = want_out;
        }
        if !want_out && st.close_after_flush {
            self.close_sock(st);
        }
    }

    /// Called by the CM thread when the id's connection is ready.
    pub fn on_io(self: &Arc<Self>, token: u64, events: u32) {
        let mut st = self.st.lock();
        if st.destroyed || st.token != token || st.sock.is_none() {
            return;
        }
        if events & EV_OUT != 0 {
            if st.phase == Phase::Connecting {
                self.finish_connect(&mut st);
            } else {
                self.flush(&mut st);
            }
        }
        if st.sock.is_some() && events & !EV_OUT != 0 {
            self.read_all(&mut st);
        }
    }

    fn read_all(self: &Arc<Self>, st: &mut IdState) {
        let Some(fd) = st.sock.as_ref() else { return };
        let eof = sock::read_into(fd, &mut st.inbuf, MAX_FRAME);
        self.process(st, eof);
    }

    /// Handles every complete message received so far, then the end of
    /// the stream if `eof`.
    fn process(self: &Arc<Self>, st: &mut IdState, mut eof: bool) {
        loop {
            match Msg::decode(&st.inbuf) {
                Ok(Some((msg, used))) => {
                    st.inbuf.drain(..used);
                    self.handle(st, msg);
                    if st.sock.is_none() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // Garbage from the peer: the connection is useless.
                    eof = true;
                    st.inbuf.clear();
                    break;
                }
            }
        }
        if eof {
            self.on_eof(st);
        }
    }

    fn on_eof(self: &Arc<Self>, st: &mut IdState) {
        trace!("id {:p} in {:?}: connection closed", self.raw, st.phase);
        match st.phase {
            Phase::ReqSent | Phase::ReqReceived | Phase::RepSent => {
                self.fail(st, RDMA_CM_EVENT_CONNECT_ERROR, -libc::ECONNRESET)
            }
            Phase::RepReceived | Phase::Established | Phase::DreqSent => self.disconnected(st, 0),
            _ => {}
        }
        self.close_sock(st);
    }

    fn finish_connect(self: &Arc<Self>, st: &mut IdState) {
        let err = st.sock.as_ref().map(sock::so_error).unwrap_or(libc::EBADF);
        match err {
            0 => {
                st.phase = Phase::ReqSent;
                self.flush(st);
            }
            libc::ECONNREFUSED => self.refused(st),
            e => self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        }
    }

    fn handle(self: &Arc<Self>, st: &mut IdState, msg: Msg) {
        use Phase::*;
        trace!("id {:p} in {:?} got {:?}", self.raw, st.phase, msg);
        match (st.phase, msg) {
            (ReqSent, Msg::Mra) if !st.mra_seen => {
                st.mra_seen = true;
                self.arm(st, TimerKind::Proto, cm_timeout() * 6)
            }
            (ReqSent, Msg::Rep(info)) => self.got_rep(st, info),
            (ReqSent | RepReceived | ReqReceived | RepSent, Msg::Rej { reason, pdata }) => {
                self.rejected(st, reason, &pdata)
            }
            (RepSent, Msg::Rtu) => {
                st.phase = Established;
                st.timer_gen += 1;
                let ev = self.event(RDMA_CM_EVENT_ESTABLISHED, 0);
                self.queue(st, ev);
            }
            (Established | RepReceived | RepSent | DreqSent, Msg::Dreq) => {
                // Unlike the IB CM we answer at once instead of waiting for
                // the application's rdma_disconnect: the initiator gets its
                // DISCONNECTED promptly either way.
                self.send(st, &Msg::Drep);
                self.disconnected(st, 0);
            }
            (Disconnected, Msg::Dreq) => self.send(st, &Msg::Drep),
            (DreqSent, Msg::Drep) => self.disconnected(st, 0),
            // Duplicates and stragglers after a state change.
            _ => {}
        }
    }

    fn got_rep(self: &Arc<Self>, st: &mut IdState, info: ConnInfo) {
        st.phase = Phase::RepReceived;
        st.timer_gen += 1;
        // The peer's initiator depth is how many reads we must answer, and
        // its responder resources how many we may have outstanding.
        st.rr = info.initiator_depth;
        st.idepth = info.responder_resources;
        // Kept within what the IB CM's wire fields can carry and our port
        // (whose MTU `connect` put in `path_mtu`) can do, whatever the peer
        // claims.
        st.rnr_retry = info.rnr_retry_count.min(7);
        st.path_mtu = info.path_mtu.min(st.path_mtu).max(1);
        let mut ev = self.event(RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        report_conn(&mut ev, &info, REP_PDATA);
        ev.post = Post::ConnectReply;
        st.peer = Some(info);
        self.queue(st, ev);
    }

    // -- passive side --------------------------------------------------------

    /// The listener accepts one pending TCP connection, if any.
    pub fn accept_one(self: &Arc<Self>) -> Option<OwnedFd> {
        let mut st = self.st.lock();
        if st.destroyed || st.phase != Phase::Listening {
            return None;
        }
        match sock::accept(st.sock.as_ref()?) {
            Ok(fd) => fd,
            Err(e) => {
                // Out of descriptors or memory: the connection stays queued
                // and the socket readable, so epoll would report it again
                // at once. Stop watching it for a moment instead of
                // spinning the CM thread.
                trace!("id {:p}: accept failed: errno {}", self.raw, e);
                self.watch_listener(&mut st, false);
                self.arm(&mut st, TimerKind::Proto, ACCEPT_RETRY);
                None
            }
        }
    }

    fn watch_listener(&self, st: &mut IdState, on: bool) {
        if let (Some(fd), Ok(e)) = (st.sock.as_ref(), engine::get()) {
            e.modify(fd.as_raw_fd(), st.token, if on { EV_IN } else { 0 });
        }
    }

    /// A REQ arrived on a connection accepted by `listener`: make the new
    /// id and queue RDMA_CM_EVENT_CONNECT_REQUEST on the listener's channel.
    pub fn on_request(
        listener: &Arc<CmId>,
        fd: OwnedFd,
        token: u64,
        info: ConnInfo,
        rest: Vec<u8>,
    ) {
        let Ok(eng) = engine::get() else { return };
        let ls = listener.st.lock();
        let new = match Self::admit(listener, &ls, &fd, &info) {
            Ok(new) => new,
            Err(reason) => {
                drop(ls);
                eng.refuse(token, fd, reason);
                return;
            }
        };
        {
            let mut ns = new.st.lock();
            ns.sock = Some(fd);
            ns.token = token;
            ns.inbuf = rest;
            eng.set_entry(token, Entry::Conn(Arc::downgrade(&new)));
            new.send(&mut ns, &Msg::Mra);
        }
        let mut ev = EventBox::new(listener, &new, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        ev.ev.listen_id = listener.c();
        report_conn(&mut ev, &info, REQ_PDATA);
        ev.conn().retry_count = info.retry_count;
        ev.post = Post::ConnectRequest;
        listener.pending_reqs.fetch_add(1, Ordering::Relaxed);
        listener.queue(&ls, ev);
        // Whatever came right behind the REQ (the peer may already have
        // given up) is handled now that the request is queued before it.
        let mut ns = new.st.lock();
        if !ns.inbuf.is_empty() {
            new.process(&mut ns, false);
        }
    }

    /// Makes the id that answers a REQ on `fd` (connection not attached
    /// yet), or gives the reason to refuse the REQ with.
    fn admit(
        listener: &Arc<CmId>,
        ls: &IdState,
        fd: &OwnedFd,
        info: &ConnInfo,
    ) -> Result<Arc<CmId>, u16> {
        if ls.destroyed || ls.phase != Phase::Listening || u32::from(info.port_space) != ls.ps {
            return Err(REJ_INVALID_SERVICE_ID);
        }
        if listener.pending_reqs.load(Ordering::Relaxed) >= ls.backlog {
            return Err(REJ_CONSUMER_DEFINED);
        }
        let (Ok(local), Ok(peer)) = (sock::local_addr(fd), sock::peer_addr(fd)) else {
            return Err(REJ_CONSUMER_DEFINED);
        };
        let loc = device::find_local(local.ip()).ok_or(REJ_INVALID_SERVICE_ID)?;
        let chan = if ls.sync {
            Channel::create().map_err(|_| REJ_CONSUMER_DEFINED)?
        } else {
            ls.chan.clone()
        };
        // SAFETY: the listener's C struct is live while we hold its lock.
        let context = unsafe { (*listener.c()).context };
        let new = CmId::new(ls.ps, chan, ls.sync, context);
        let mut ns = new.st.lock();
        if new.set_device(&mut ns, loc).is_err() {
            drop(ns);
            new.forget();
            return Err(REJ_CONSUMER_DEFINED);
        }
        ns.passive = true;
        ns.cm_started = true;
        ns.phase = Phase::ReqReceived;
        new.set_addrs(&mut ns, local, peer, info.gid);
        new.set_path(&mut ns);
        // As seen from here: the peer's initiator depth is what we must
        // answer, its responder resources what we may use.
        ns.rr = info.initiator_depth;
        ns.idepth = info.responder_resources;
        ns.retry_count = info.retry_count.min(7);
        ns.rnr_retry = info.rnr_retry_count.min(7);
        ns.path_mtu = info.path_mtu.min(Self::port_mtu(&ns)).max(1);
        ns.tos = ls.tos;
        ns.ack_timeout = ls.ack_timeout;
        ns.peer = Some(info.clone());
        drop(ns);
        Ok(new)
    }

    /// Drops a half-made id that was never shown to the application.
    fn forget(self: &Arc<Self>) {
        IDS.lock().remove(&(self.raw as usize));
        let st = self.st.lock();
        if st.sync {
            st.chan.destroy();
        }
        drop(st);
        // SAFETY: the id was never shown to anyone: no event, no engine
        // entry and (just removed) no registry entry refers to it.
        drop(unsafe { Box::from_raw(self.raw) });
    }

    // -- addresses and devices -------------------------------------------------

    fn set_device(&self, st: &mut IdState, loc: Local) -> Res<()> {
        let dev = device::get(loc.dev);
        let pd = dev.default_pd()?;
        let gids = dev.gids(loc.port);
        let c = self.cs(st);
        c.verbs = dev.ctx;
        c.port_num = loc.port;
        c.pd = pd;
        c.route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        if let Some(g) = gids.get(loc.gid_index as usize) {
            c.route.addr.addr.ibaddr.sgid = ibv_gid::from_raw(*g);
        }
        st.local = Some(loc);
        Ok(())
    }

    fn write_src(&self, st: &mut IdState, a: SocketAddr) {
        let (ss, _) = addr::to_c(&a);
        self.cs(st).route.addr.src.src_storage = ss;
        st.src = Some(a);
    }

    fn write_dst(&self, st: &mut IdState, a: SocketAddr) {
        let (ss, _) = addr::to_c(&a);
        self.cs(st).route.addr.dst.dst_storage = ss;
        st.dst = Some(a);
    }

    fn set_addrs(&self, st: &mut IdState, local: SocketAddr, peer: SocketAddr, dgid: [u8; 16]) {
        self.write_src(st, local);
        self.write_dst(st, peer);
        self.cs(st).route.addr.addr.ibaddr.dgid = ibv_gid::from_raw(dgid);
    }

    /// One path record, as rdma-core reports for RoCE after route resolution.
    fn set_path(&self, st: &mut IdState) {
        if st.local.is_none() {
            return;
        }
        let mtu = Self::port_mtu(st);
        let tos = st.tos;
        let c = self.cs(st);
        if c.route.path_rec.is_null() {
            // SAFETY: calloc of one zeroed record; freed in `destroy`.
            let p = unsafe { libc::calloc(1, core::mem::size_of::<ibv_sa_path_rec>()) };
            if p.is_null() {
                return;
            }
            c.route.path_rec = p.cast();
        }
        // SAFETY: `ibaddr` is the only member of the union; the record was
        // allocated above and belongs to this id.
        unsafe {
            let ib = c.route.addr.addr.ibaddr;
            let p = &mut *c.route.path_rec;
            p.dgid = ib.dgid;
            p.sgid = ib.sgid;
            p.pkey = ib.pkey;
            p.hop_limit = HOP_LIMIT;
            p.traffic_class = tos;
            p.reversible = 1;
            p.numb_path = 1;
            p.mtu_selector = 2;
            p.mtu = mtu;
            p.rate_selector = 2;
            p.rate = IBV_RATE_10_GBPS as u8;
            p.packet_life_time_selector = 2;
            p.packet_life_time = 16;
        }
        c.route.num_paths = 1;
    }

    fn bind_locked(&self, st: &mut IdState, a: SocketAddr) -> Res<()> {
        let fd = sock::tcp_socket(&a)?;
        if a.is_ipv6() {
            if let Some(only) = st.afonly {
                sock::set_v6only(&fd, only)?;
            }
        }
        // A listener restarted on its well-known port must not trip over
        // TCP TIME_WAIT remnants of its previous life.
        if a.port() != 0 || st.reuseaddr {
            sock::set_reuseaddr(&fd)?;
        }
        sock::bind(&fd, &a)?;
        let bound = addr::unmap(sock::local_addr(&fd)?);
        if !a.ip().is_unspecified() {
            let loc = device::find_local(a.ip()).ok_or(libc::ENODEV)?;
            self.set_device(st, loc)?;
        }
        self.write_src(st, bound);
        st.sock = Some(fd);
        st.phase = Phase::Bound;
        Ok(())
    }

    // -- the API ---------------------------------------------------------------

    pub fn bind(&self, a: SocketAddr) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::Idle {
            return Err(libc::EINVAL);
        }
        self.bind_locked(&mut st, a)
    }

    pub fn resolve_addr(self: &Arc<Self>, src: Option<SocketAddr>, dst: SocketAddr) -> Res<()> {
        let mut st = self.st.lock();
        match st.phase {
            Phase::Idle => {
                if let Some(s) = src {
                    self.bind_locked(&mut st, s)?;
                }
            }
            Phase::Bound | Phase::AddrResolved => {}
            _ => return Err(libc::EINVAL),
        }
        let dst = addr::any_to_loopback(dst);
        if let Some(s) = st.src {
            if !family_matches(&s, &dst) {
                return Err(libc::EINVAL);
            }
        }
        let fallback = if st.sock.is_some() {
            Phase::Bound
        } else {
            Phase::Idle
        };
        let bound_ip = st.src.map(|s| s.ip()).filter(|ip| !ip.is_unspecified());
        let src_ip = match bound_ip {
            Some(ip) => ip,
            None => match sock::route_source(&dst) {
                Ok(ip) => ip,
                Err(e) => {
                    st.phase = fallback;
                    let ev = self.event(RDMA_CM_EVENT_ADDR_ERROR, -e);
                    self.queue(&st, ev);
                    return Ok(());
                }
            },
        };
        let Some(loc) = device::find_local(src_ip) else {
            st.phase = fallback;
            let ev = self.event(RDMA_CM_EVENT_ADDR_ERROR, -libc::ENODEV);
            self.queue(&st, ev);
            return Ok(());
        };
        if st.sock.is_none() {
            let fd = sock::tcp_socket(&dst)?;
            sock::bind(&fd, &SocketAddr::new(src_ip, 0))?;
            let bound = sock::local_addr(&fd)?;
            st.sock = Some(fd);
            self.write_src(&mut st, bound);
        } else if let Some(s) = st.src {
            self.write_src(&mut st, SocketAddr::new(src_ip, s.port()));
        }
        self.set_device(&mut st, loc)?;
        let src_now = st.src.ok_or(libc::EINVAL)?;
        self.set_addrs(&mut st, src_now, dst, addr::gid_of(dst.ip()));
        st.phase = Phase::AddrResolved;
        let ev = self.event(RDMA_CM_EVENT_ADDR_RESOLVED, 0);
        self.queue(&st, ev);
        Ok(())
    }

    pub fn resolve_route(self: &Arc<Self>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::AddrResolved {
            return Err(libc::EINVAL);
        }
        self.set_path(&mut st);
        st.phase = Phase::RouteResolved;
        let ev = self.event(RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        self.queue(&st, ev);
        Ok(())
    }

    pub fn listen(self: &Arc<Self>, backlog: i32) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase == Phase::Idle {
            self.bind_locked(
                &mut st,
                SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            )?;
        }
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        // The kernel's limit on connect requests awaiting retrieval.
        st.backlog = if backlog > 0 && backlog < 1024 {
            backlog as u32
        } else {
            1024
        };
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?;
        sock::listen(fd, 1024)?;
        let raw = fd.as_raw_fd();
        st.token = engine::get()?.register(raw, Entry::Listener(Arc::downgrade(self)), EV_IN)?;
        st.phase = Phase::Listening;
        Ok(())
    }

    /// Checks connection parameters against the device, as librdmacm does.
    fn valid_param(&self, st: &mut IdState, p: Option<&rdma_conn_param>) -> Res<()> {
        if st.ps != RDMA_PS_TCP {
            return Ok(());
        }
        let Some(p) = p else {
            return if self.qp(st).is_null() {
                Err(libc::EINVAL)
            } else {
                Ok(())
            };
        };
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        if p.responder_resources != RDMA_MAX_RESP_RES
            && p.responder_resources > dev.max_responder_resources
        {
            return Err(libc::EINVAL);
        }
        if p.initiator_depth != RDMA_MAX_INIT_DEPTH && p.initiator_depth > dev.max_initiator_depth {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    fn pdata_of(p: Option<&rdma_conn_param>, max: usize) -> Res<Vec<u8>> {
        let Some(p) = p else { return Ok(Vec::new()) };
        let n = p.private_data_len as usize;
        if n > max {
            return Err(libc::EINVAL);
        }
        if n == 0 || p.private_data.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the caller's private data is readable for its length.
        Ok(unsafe { core::slice::from_raw_parts(p.private_data as *const u8, n) }.to_vec())
    }

    fn local_gid(&self, st: &mut IdState) -> [u8; 16] {
        // SAFETY: `ibaddr` is the only member of the union.
        unsafe { self.cs(st).route.addr.addr.ibaddr.sgid.raw() }
    }

    /// The active MTU of the id's port (1024 when it cannot be known).
    fn port_mtu(st: &IdState) -> u8 {
        st.local
            .and_then(|l| device::get(l.dev).port_attr(l.port).ok())
            .map(|p| p.active_mtu as u8)
            .unwrap_or(IBV_MTU_1024 as u8)
    }

    pub fn connect(self: &Arc<Self>, p: Option<&rdma_conn_param>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::RouteResolved {
            return Err(libc::EINVAL);
        }
        self.valid_param(&mut st, p)?;
        let pdata = Self::pdata_of(p, REQ_PDATA)?;
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        st.idepth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => dev.max_initiator_depth,
        };
        st.rr = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => dev.max_responder_resources,
        };
        let (retry, rnr, flow) = match p {
            Some(p) => (
                p.retry_count.min(7),
                p.rnr_retry_count.min(7),
                p.flow_control,
            ),
            None => (7, 7, 0),
        };
        st.retry_count = retry;
        let qp = self.qp(&mut st);
        let (qpn, srq) = if qp.is_null() {
            p.map(|p| (p.qp_num, p.srq)).unwrap_or((0, 0))
        } else {
            // SAFETY: the id's QP is live while it is attached.
            unsafe { ((*qp).qp_num, u8::from(!(*qp).srq.is_null())) }
        };
        st.my_psn = random_psn();
        st.path_mtu = Self::port_mtu(&st);
        let info = ConnInfo {
            qpn,
            psn: st.my_psn,
            gid: self.local_gid(&mut st),
            responder_resources: st.rr,
            initiator_depth: st.idepth,
            retry_count: retry,
            rnr_retry_count: rnr,
            flow_control: flow,
            srq,
            path_mtu: st.path_mtu,
            traffic_class: st.tos,
            port_space: st.ps as u16,
            pdata,
        };
        let dst = st.dst.ok_or(libc::EINVAL)?;
        if st.sock.is_none() {
            let fd = sock::tcp_socket(&dst)?;
            st.sock = Some(fd);
        }
        st.cm_started = true;
        st.passive = false;
        st.mra_seen = false;
        st.refused = 0;
        st.outbuf.clear();
        Msg::Req(info).encode(&mut st.outbuf);
        if let Err(e) = self.start_connect(&mut st, dst) {
            // Nothing watches this socket: give it up and leave the id where
            // it was, so a later connect can try again.
            self.close_sock(&mut st);
            st.cm_started = false;
            return Err(e);
        }
        Ok(())
    }

    /// Starts the TCP connection to the listener with the REQ waiting in
    /// `outbuf`. Errors are only those of watching the socket; connection
    /// failures become events.
    fn start_connect(self: &Arc<Self>, st: &mut IdState, dst: SocketAddr) -> Res<()> {
        let fd = st.sock.as_ref().ok_or(libc::EINVAL)?;
        sock::set_conn_options(fd);
        match sock::connect(fd, &dst) {
            Ok(_) => {
                self.register(st, EV_IN | EV_OUT)?;
                st.phase = Phase::Connecting;
                self.arm(st, TimerKind::Proto, cm_timeout());
            }
            Err(libc::ECONNREFUSED) => self.refused(st),
            Err(e) => self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        }
        Ok(())
    }

    /// Nobody listens on the destination port. An IB CM rejects at once,
    /// but a peer that has just agreed out of band to listen may not be
    /// listening yet: perftest -R connects right after its handshake, and
    /// with our instant address and route resolution it wins that race far
    /// more often than over a kernel CM (Debian's perftest cannot recover).
    /// So a refused connect is tried again a few times, 50 ms apart; a port
    /// nobody opens still ends in REJECTED, a quarter of a second later.
    fn refused(self: &Arc<Self>, st: &mut IdState) {
        if st.refused >= REFUSED_RETRIES {
            return self.rejected(st, REJ_INVALID_SERVICE_ID, &[]);
        }
        st.refused += 1;
        let src = st.sock.as_ref().and_then(|fd| sock::local_addr(fd).ok());
        let req = std::mem::take(&mut st.outbuf);
        self.close_sock(st);
        st.retry = Some((req, src));
        st.phase = Phase::Connecting;
        self.arm(st, TimerKind::Proto, REFUSED_DELAY);
    }

    /// The scheduled retry of a refused connect: a new socket on the same
    /// source address (same port when it is still free), the same REQ.
    fn retry_connect(self: &Arc<Self>, st: &mut IdState) {
        let Some((req, src)) = st.retry.take() else {
            return;
        };
        let Some(dst) = st.dst else { return };
        let fd = match sock::tcp_socket(&dst) {
            Ok(fd) => fd,
            Err(e) => return self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e),
        };
        if let Some(a) = src {
            let _ = sock::set_reuseaddr(&fd);
            if sock::bind(&fd, &a).is_err() {
                let _ = sock::bind(&fd, &SocketAddr::new(a.ip(), 0));
            }
        }
        st.sock = Some(fd);
        st.outbuf = req;
        if let Err(e) = self.start_connect(st, dst) {
            self.close_sock(st);
            self.fail(st, RDMA_CM_EVENT_UNREACHABLE, -e);
        }
    }

    pub fn accept(self: &Arc<Self>, p: Option<&rdma_conn_param>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::ReqReceived {
            return Err(libc::EINVAL);
        }
        self.valid_param(&mut st, p)?;
        let pdata = Self::pdata_of(p, REP_PDATA)?;
        let dev = device::get(st.local.ok_or(libc::EINVAL)?.dev);
        let idepth = match p {
            Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH => p.initiator_depth,
            _ => st.idepth.min(dev.max_initiator_depth),
        };
        let rr = match p {
            Some(p) if p.responder_resources != RDMA_MAX_RESP_RES => p.responder_resources,
            _ => st.rr.min(dev.max_responder_resources),
        };
        let (rnr, flow) = match p {
            Some(p) => (p.rnr_retry_count.min(7), p.flow_control),
            None => (7, 0),
        };
        let qp = self.qp(&mut st);
        let (qpn, srq) = if qp.is_null() {
            p.map(|p| (p.qp_num, p.srq)).unwrap_or((0, 0))
        } else {
            // SAFETY: the id's QP is live while it is attached.
            unsafe { ((*qp).qp_num, u8::from(!(*qp).srq.is_null())) }
        };
        let old = (st.rr, st.idepth, st.my_psn);
        st.rr = rr;
        st.idepth = idepth;
        st.my_psn = random_psn();
        if !qp.is_null() {
            if let Err(e) = self.qp_to_rts(&mut st, qp) {
                (st.rr, st.idepth, st.my_psn) = old;
                return Err(e);
            }
        }
        let info = ConnInfo {
            qpn,
            psn: st.my_psn,
            gid: self.local_gid(&mut st),
            responder_resources: rr,
            initiator_depth: idepth,
            retry_count: 0,
            rnr_retry_count: rnr,
            flow_control: flow,
            srq,
            path_mtu: st.path_mtu,
            traffic_class: st.tos,
            port_space: st.ps as u16,
            pdata,
        };
        self.send(&mut st, &Msg::Rep(info));
        st.phase = Phase::RepSent;
        self.arm(&mut st, TimerKind::Proto, cm_timeout() * 6);
        Ok(())
    }

    pub fn reject(self: &Arc<Self>, pdata: &[u8], reason: u16) -> Res<()> {
        let mut st = self.st.lock();
        if pdata.len() > REJ_PDATA {
            return Err(libc::EINVAL);
        }
        match st.phase {
            Phase::ReqReceived | Phase::RepReceived => {}
            _ => return Err(libc::EINVAL),
        }
        self.send(
            &mut st,
            &Msg::Rej {
                reason,
                pdata: pdata.to_vec(),
            },
        );
        st.phase = Phase::Closed;
        st.timer_gen += 1;
        self.hang_up(&mut st);
        Ok(())
    }

    pub fn establish(self: &Arc<Self>) -> Res<()> {
        let mut st = self.st.lock();
        if st.phase != Phase::RepReceived || !self.qp(&mut st).is_null() {
            return Err(libc::EINVAL);
        }
        self.send(&mut st, &Msg::Rtu);
        st.phase = Phase::Established;
        Ok(())
    }

    /// The REJ for a handshake we abandon, with the IB CM's reasons: the
    /// passive side's consumer declined, the active side's stopped waiting.
    fn give_up(st: &IdState) -> Msg {
        Msg::Rej {
            reason: if st.passive {
                REJ_CONSUMER_DEFINED
            } else {
                REJ_TIMEOUT
            },
            pdata: Vec::new(),
        }
    }

    /// Returns whether a synchronous caller should now wait for an event.
    pub fn disconnect(self: &Arc<Self>) -> Res<bool> {
        let mut st = self.st.lock();
        let qp = self.qp(&mut st);
        match st.phase {
            Phase::Established | Phase::RepReceived | Phase::RepSent => {
                qp_to_err(qp);
                self.send(&mut st, &Msg::Dreq);
                st.phase = Phase::DreqSent;
                self.arm(&mut st, TimerKind::Proto, cm_timeout() / 2);
                Ok(true)
            }
            Phase::DreqSent => {
                qp_to_err(qp);
                Ok(true)
            }
            Phase::Disconnected => {
                qp_to_err(qp);
                Ok(st.chan.has_events_for(self))
            }
            Phase::Connecting | Phase::ReqSent | Phase::ReqReceived => {
                qp_to_err(qp);
                if st.phase == Phase::Connecting {
                    // The REQ waits in our buffer for the TCP handshake:
                    // it must never leave, so the connection goes with it.
                    self.close_sock(&mut st);
                } else {
                    let m = Self::give_up(&st);
                    self.send(&mut st, &m);
                    self.hang_up(&mut st);
                }
                st.phase = Phase::Closed;
                st.timer_gen += 1;
                Ok(false)
            }
            Phase::Closed if st.cm_started => {
                qp_to_err(qp);
                Ok(false)
            }
            _ => Err(libc::EINVAL),
        }
    }

    pub fn notify(self: &Arc<Self>, event: ibv_event_type) -> Res<()> {
        let mut st = self.st.lock();
        if event != IBV_EVENT_COMM_EST {
            return Err(libc::EINVAL);
        }
        match st.phase {
            Phase::RepSent => {
                // Data beat the RTU: the connection is up.
                st.phase = Phase::Established;
                st.timer_gen += 1;
                let ev = self.event(RDMA_CM_EVENT_ESTABLISHED, 0);
                self.queue(&st, ev);
                Ok(())
            }
            Phase::Established => Err(libc::EISCONN),
            _ => Err(libc::EINVAL),
        }
    }

    pub fn set_option(&self, level: i32, name: i32, val: &[u8]) -> Res<()> {
        let mut st = self.st.lock();
        let int_val = || -> Res<bool> {
            let b: [u8; 4] = val.try_into().map_err(|_| libc::EINVAL)?;
            Ok(i32::from_ne_bytes(b) != 0)
        };
        match (level, name) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => {
                if val.len() != 1 {
                    return Err(libc::EINVAL);
                }
                st.tos = val[0];
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                let on = int_val()?;
                match st.phase {
                    Phase::Idle => {}
                    Phase::Bound if on => {
                        if let Some(fd) = st.sock.as_ref() {
                            sock::set_reuseaddr(fd)?;
                        }
                    }
                    _ => return Err(libc::EINVAL),
                }
                st.reuseaddr = on;
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                let on = int_val()?;
                match st.phase {
                    Phase::Idle => st.afonly = Some(on),
                    Phase::Bound => {
                        st.afonly = Some(on);
                        // IPV6_V6ONLY cannot change on a bound socket: bind
                        // a fresh one to the same address and port.
                        if let Some(a) = st.src.filter(|a| a.is_ipv6()) {
                            let old = st.sock.take();
                            drop(old);
                            st.phase = Phase::Idle;
                            self.bind_locked(&mut st, a)?;
                        }
                    }
                    _ => return Err(libc::EINVAL),
                }
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                if val.len() != 1 {
                    return Err(libc::EINVAL);
                }
                st.ack_timeout = Some(val[0].min(31));
                Ok(())
            }
            _ => Err(libc::ENOSYS),
        }
    }

    /// Moves the id (and its queued events) to `chan`, or to a new private
    /// channel (synchronous mode) when `chan` is `None`.
    pub fn migrate(self: &Arc<Self>, chan: Option<Arc<Channel>>) -> Res<()> {
        let held;
        {
            let mut st = self.st.lock();
            if st.sync && chan.is_none() {
                return Err(libc::EINVAL);
            }
            let (new, sync) = match chan {
                Some(c) => (c, false),
                None => (Channel::create()?, true),
            };
            let old = std::mem::replace(&mut st.chan, new.clone());
            for ev in old.take_for(self) {
                new.push(ev);
            }
            let c = self.cs(&mut st);
            c.channel = new.c_ptr();
            held = std::mem::replace(&mut c.event, core::ptr::null_mut());
            if st.sync {
                old.destroy();
            }
            st.sync = sync;
        }
        if !held.is_null() {
            ack(held);
        }
        self.wait_acked();
        Ok(())
    }

    /// `rdma_destroy_id`.
    pub fn destroy(self: &Arc<Self>) {
        let (removed, held, sync_chan) = {
            let mut st = self.st.lock();
            if st.destroyed {
                return;
            }
            st.destroyed = true;
            if matches!(st.phase, Phase::ReqReceived | Phase::ReqSent) {
                // The peer learns at once instead of waiting for a timeout,
                // as the IB CM rejects on behalf of a destroyed id.
                let m = Self::give_up(&st);
                self.send(&mut st, &m);
            }
            self.close_sock(&mut st);
            st.timer_gen += 1;
            st.phase = Phase::Closed;
            let removed = st.chan.take_for(self);
            let c = self.cs(&mut st);
            let held = std::mem::replace(&mut c.event, core::ptr::null_mut());
            let sync_chan = if st.sync { Some(st.chan.clone()) } else { None };
            (removed, held, sync_chan)
        };
        // Connect requests nobody retrieved die with their listener.
        for ev in removed {
            if ev.post == Post::ConnectRequest && !Arc::ptr_eq(&ev.subject, self) {
                let sub = ev.subject.clone();
                drop(ev);
                sub.destroy();
            }
        }
        if !held.is_null() {
            ack(held);
        }
        self.wait_acked();
        IDS.lock().remove(&(self.raw as usize));
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.route.path_rec.is_null() {
            // SAFETY: allocated with calloc in `set_path`.
            unsafe { libc::free(c.route.path_rec.cast()) };
            c.route.path_rec = core::ptr::null_mut();
        }
        drop(st);
        if let Some(ch) = sync_chan {
            ch.destroy();
        }
        // The C struct goes last: every event pointing at it has been acked.
        // SAFETY: `raw` came from Box::into_raw in `new`; the id has been
        // removed from the registry, so no new user can reach it.
        drop(unsafe { Box::from_raw(self.raw) });
    }

    // -- QPs -----------------------------------------------------------------

    /// The attributes `rdma_init_qp_attr` reports for moving a QP to `state`.
    fn qp_attr(&self, st: &mut IdState, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        let loc = st.local.ok_or(libc::EINVAL)?;
        let mut a = ibv_qp_attr::zeroed();
        a.qp_state = state;
        match state {
            IBV_QPS_INIT => {
                a.pkey_index = 0;
                a.port_num = loc.port;
                // Remote access is granted only once there is a peer, as the
                // kernel's CM does; reads and atomics only if we accept them.
                a.qp_access_flags = if st.cm_started {
                    let mut f = IBV_ACCESS_REMOTE_WRITE;
                    if st.rr > 0 {
                        f |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                    }
                    f
                } else {
                    0
                };
                Ok((
                    a,
                    IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
                ))
            }
            IBV_QPS_RTR => {
                let peer = st.peer.as_ref().ok_or(libc::EINVAL)?;
                a.path_mtu = u32::from(st.path_mtu);
                a.dest_qp_num = peer.qpn;
                a.rq_psn = peer.psn & 0x00ff_ffff;
                a.max_dest_rd_atomic = st.rr;
                a.min_rnr_timer = 0;
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid = ibv_gid::from_raw(peer.gid);
                a.ah_attr.grh.sgid_index = loc.gid_index;
                a.ah_attr.grh.hop_limit = HOP_LIMIT;
                a.ah_attr.grh.traffic_class = st.tos;
                a.ah_attr.port_num = loc.port;
                Ok((
                    a,
                    IBV_QP_STATE
                        | IBV_QP_AV
                        | IBV_QP_PATH_MTU
                        | IBV_QP_DEST_QPN
                        | IBV_QP_RQ_PSN
                        | IBV_QP_MAX_DEST_RD_ATOMIC
                        | IBV_QP_MIN_RNR_TIMER,
                ))
            }
            IBV_QPS_RTS => {
                if st.peer.is_none() {
                    return Err(libc::EINVAL);
                }
                a.sq_psn = st.my_psn;
                a.timeout = st.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT);
                a.retry_cnt = st.retry_count;
                a.rnr_retry = st.rnr_retry;
                a.max_rd_atomic = st.idepth;
                Ok((
                    a,
                    IBV_QP_STATE
                        | IBV_QP_TIMEOUT
                        | IBV_QP_RETRY_CNT
                        | IBV_QP_RNR_RETRY
                        | IBV_QP_SQ_PSN
                        | IBV_QP_MAX_QP_RD_ATOMIC,
                ))
            }
            _ => Err(libc::EINVAL),
        }
    }

    pub fn init_qp_attr(&self, state: ibv_qp_state) -> Res<(ibv_qp_attr, u32)> {
        let mut st = self.st.lock();
        if state != IBV_QPS_INIT && st.phase == Phase::ReqSent {
            // Not yet: the active side learns its peer from the REP.
            return Err(libc::EINVAL);
        }
        self.qp_attr(&mut st, state)
    }

    /// RTR (with the access rights the connection grants) then RTS.
    fn qp_to_rts(&self, st: &mut IdState, qp: *mut ibv_qp) -> Res<()> {
        let (init, _) = self.qp_attr(st, IBV_QPS_INIT)?;
        let (mut a, mask) = self.qp_attr(st, IBV_QPS_RTR)?;
        a.qp_access_flags = init.qp_access_flags;
        modify(qp, &mut a, mask | IBV_QP_ACCESS_FLAGS)?;
        let (mut a, mask) = self.qp_attr(st, IBV_QPS_RTS)?;
        modify(qp, &mut a, mask)
    }

    /// `rdma_create_qp_ex`.
    pub fn create_qp(&self, attr: &mut ibv_qp_init_attr_ex) -> Res<()> {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.qp.is_null() || c.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        let verbs = c.verbs;
        if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
            attr.pd = c.pd;
        } else {
            // SAFETY: the application's PD is live.
            if unsafe { (*attr.pd).context } != verbs {
                return Err(libc::EINVAL);
            }
        }
        if (!c.recv_cq.is_null() && !attr.recv_cq.is_null() && c.recv_cq != attr.recv_cq)
            || (!c.send_cq.is_null() && !attr.send_cq.is_null() && c.send_cq != attr.send_cq)
        {
            return Err(libc::EINVAL);
        }
        let send_size = if attr.send_cq.is_null() && c.send_cq.is_null() {
            attr.cap.max_send_wr
        } else {
            0
        };
        let recv_size = if attr.recv_cq.is_null() && c.recv_cq.is_null() {
            attr.cap.max_recv_wr
        } else {
            0
        };
        create_cqs(c, send_size, recv_size)?;
        if attr.send_cq.is_null() {
            attr.send_cq = c.send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = c.recv_cq;
        }
        if !c.srq.is_null() && attr.srq.is_null() {
            attr.srq = c.srq;
        }
        // SAFETY: `verbs` is an open context and `attr` a valid attribute set.
        let qp = unsafe { ffi::create_qp_ex(verbs, attr) };
        if qp.is_null() {
            let e = errno();
            destroy_cqs(self.cs(&mut st));
            return Err(if e == 0 { libc::ENOMEM } else { e });
        }
        // Ready for ibv_post_recv right away, as librdmacm promises.
        let init = self
            .qp_attr(&mut st, IBV_QPS_INIT)
            .and_then(|(mut a, mask)| modify(qp, &mut a, mask));
        if let Err(e) = init {
            // SAFETY: the QP was just created and is not shared yet.
            unsafe { ffi::ibv_destroy_qp(qp) };
            destroy_cqs(self.cs(&mut st));
            return Err(e);
        }
        let c = self.cs(&mut st);
        // SAFETY: `qp` is live.
        c.pd = unsafe { (*qp).pd };
        c.qp = qp;
        Ok(())
    }

    pub fn destroy_qp(&self) {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.qp.is_null() {
            // SAFETY: the QP was created by rdma_create_qp on this id.
            unsafe { ffi::ibv_destroy_qp(c.qp) };
            c.qp = core::ptr::null_mut();
        }
        destroy_cqs(c);
    }

    /// `rdma_create_srq_ex`.
    pub fn create_srq(&self, attr: &mut ibv_srq_init_attr_ex) -> Res<()> {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if c.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
            return Err(libc::EINVAL);
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.pd = c.pd;
            attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        if attr.srq_type == IBV_SRQT_XRC {
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: `verbs` is open and `attr` valid.
        let srq = unsafe { ffi::create_srq_ex(c.verbs, attr) };
        if srq.is_null() {
            let e = errno();
            return Err(if e == 0 { libc::ENOMEM } else { e });
        }
        if c.pd.is_null() {
            c.pd = attr.pd;
        }
        c.srq = srq;
        Ok(())
    }

    pub fn destroy_srq(&self) {
        let mut st = self.st.lock();
        let c = self.cs(&mut st);
        if !c.srq.is_null() {
            // SAFETY: the SRQ was created by rdma_create_srq on this id.
            unsafe { ffi::ibv_destroy_srq(c.srq) };
            c.srq = core::ptr::null_mut();
        }
        destroy_cqs(c);
    }

    // -- event retrieval -----------------------------------------------------

    /// Work done when the application takes `ev` off its channel.
    pub fn on_retrieve(ev: &mut EventBox) {
        match ev.post {
            Post::None => {}
            Post::ConnectRequest => {
                let listener = ev.owner.clone();
                listener.pending_reqs.fetch_sub(1, Ordering::Relaxed);
                // rdma-core makes the new id when the request is retrieved,
                // on the listener's channel of that moment: follow the
                // listener if it migrated since the request arrived.
                let ls = listener.st.lock();
                let id = ev.subject.clone();
                let mut ns = id.st.lock();
                if !ls.sync && !ns.sync && !Arc::ptr_eq(&ns.chan, &ls.chan) {
                    let old = std::mem::replace(&mut ns.chan, ls.chan.clone());
                    for e in old.take_for(&id) {
                        ns.chan.push(e);
                    }
                    id.cs(&mut ns).channel = ls.chan.c_ptr();
                }
            }
            Post::QpToErr => {
                let id = ev.subject.clone();
                let mut st = id.st.lock();
                if !st.destroyed {
                    qp_to_err(id.qp(&mut st));
                }
            }
            Post::ConnectReply => {
                let id = ev.subject.clone();
                let mut st = id.st.lock();
                if st.destroyed {
                    return;
                }
                let qp = id.qp(&mut st);
                if qp.is_null() {
                    ev.ev.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
                    return;
                }
                match id.qp_to_rts(&mut st, qp) {
                    Ok(()) => {
                        ev.ev.event = RDMA_CM_EVENT_ESTABLISHED;
                        if st.phase == Phase::RepReceived {
                            id.send(&mut st, &Msg::Rtu);
                            st.phase = Phase::Established;
                        }
                    }
                    Err(e) => {
                        trace!("id {:p}: QP to RTS failed: errno {}", id.raw, e);
                        ev.ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
                        ev.ev.status = -e;
                        qp_to_err(qp);
                        if st.phase == Phase::RepReceived {
                            let m = Msg::Rej {
                                reason: REJ_CONSUMER_DEFINED,
                                pdata: Vec::new(),
                            };
                            id.send(&mut st, &m);
                            st.phase = Phase::Closed;
                            id.hang_up(&mut st);
                        }
                    }
                }
            }
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

/// Hands a retrieved event to the application.
pub fn deliver(mut ev: Box<EventBox>) -> *mut rdma_cm_event {
    CmId::on_retrieve(&mut ev);
    let p = Box::into_raw(ev);
    OUTSTANDING.lock().insert(p as usize);
    p as *mut rdma_cm_event
}

/// `rdma_ack_cm_event`: frees the event and counts the ack.
pub fn ack(p: *mut rdma_cm_event) -> bool {
    if !OUTSTANDING.lock().remove(&(p as usize)) {
        return false;
    }
    // SAFETY: `p` came from `deliver` (Box::into_raw) and was outstanding.
    let ev = unsafe { Box::from_raw(p as *mut EventBox) };
    let owner = ev.owner.clone();
    drop(ev);
    owner.complete_one();
    true
}
