//! A stream rsocket: its rdma_cm id and event channel, the connection
//! state machine, and the blocking and non-blocking forms of each call.
//!
//! The rsocket's number is the descriptor of its own CM event channel: a
//! real descriptor of ours, so it never collides with the application's
//! descriptors (librspreload and `rpoll` mix both), and closing the
//! rsocket gives it back. All state sits behind one mutex; a call that
//! must wait releases it and sleeps in poll(2) on the event channel and
//! the completion channel, after arming the CQ and checking once more.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use core::ffi::c_int;
use core::ptr::null_mut;
use parking_lot::{Mutex, MutexGuard, RwLock};
use verbs_abi::*;

use super::conn::{Conn, Sizes};
use super::settings::Opts;
use super::wire::{ConnData, CONN_DATA_LEN};
use crate::addr;
use crate::cma;
use crate::engine::{self, Tick, TimerTarget};
use crate::error::{errno, Res};

/// rdma-core's address and route resolution timeout.
const RESOLVE_MS: c_int = 2000;
/// How long close waits for sent data to reach the peer without SO_LINGER.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);
/// A keepalive that found the rsocket busy tries again this much later.
const KEEPALIVE_BUSY: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Open,
    Bound,
    Listening,
    ResolvingAddr,
    ResolvingRoute,
    /// REQ sent, waiting for ESTABLISHED.
    Connecting,
    /// Accepted, waiting for the peer's RTU (ESTABLISHED).
    Accepting,
    Connected,
    /// Connect failed (the error is in `so_error`) or the socket was
    /// shut down for good.
    Failed,
    Disconnected,
}

pub struct Inner {
    pub state: State,
    id: *mut rdma_cm_id,
    pub family: c_int,
    pub nonblock: bool,
    pub opts: Opts,
    pub so_error: i32,
    pub conn: Option<Box<Conn>>,
    /// Listener: connect requests taken from the channel, not yet accepted.
    backlog: VecDeque<*mut rdma_cm_event>,
    pub shut_rd: bool,
    pub shut_wr: bool,
    /// A FIN or CLOSE still has to go out (the send queue was full).
    end_pending: Option<bool>,
    close_sent: bool,
    disconnected: bool,
    /// When the CM channel was last read (see `RSocket::wait`).
    last_cm: Option<Instant>,
    /// Bumped whenever SO_KEEPALIVE or TCP_KEEPIDLE changes: a keepalive
    /// timer armed under another number is stale.
    keepalive_gen: u64,
}

// SAFETY: the id and queued events are librdmacm objects, usable from any
// thread, and only touched under the rsocket's mutex.
unsafe impl Send for Inner {}

pub struct RSocket {
    pub fd: c_int,
    chan: *mut rdma_event_channel,
    pub inner: Mutex<Inner>,
}

// SAFETY: `chan` is a librdmacm channel, usable from any thread; the rest
// is behind the mutex.
unsafe impl Send for RSocket {}
// SAFETY: as above.
unsafe impl Sync for RSocket {}

static TABLE: LazyLock<RwLock<HashMap<c_int, Arc<RSocket>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// The rsocket numbered `fd`: EBADF for no descriptor at all, ENOTSOCK
/// for a descriptor that is not an rsocket.
pub fn lookup(fd: c_int) -> Res<Arc<RSocket>> {
    if let Some(s) = TABLE.read().get(&fd) {
        return Ok(s.clone());
    }
    // SAFETY: F_GETFD only asks whether the descriptor exists.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        Err(libc::EBADF)
    } else {
        Err(libc::ENOTSOCK)
    }
}

pub fn find(fd: c_int) -> Option<Arc<RSocket>> {
    TABLE.read().get(&fd).cloned()
}

/// The system's TCP keepalive time, as rdma-core reads it when a socket
/// turns SO_KEEPALIVE on without a TCP_KEEPIDLE of its own.
fn system_keepidle() -> c_int {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .filter(|&t: &c_int| t > 0)
        .unwrap_or(7200)
}

impl Tick for RSocket {
    fn on_tick(self: Arc<Self>, gen: u64) {
        // The CM thread never waits for an application thread.
        let Some(mut g) = self.inner.try_lock() else {
            let me: Arc<dyn Tick> = self.clone();
            if let Ok(e) = engine::get() {
                e.arm(KEEPALIVE_BUSY, TimerTarget::Tick(Arc::downgrade(&me), gen));
            }
            return;
        };
        if !g.opts.keepalive || g.keepalive_gen != gen {
            return;
        }
        if g.state == State::Connected {
            if let Some(c) = g.conn.as_mut() {
                // A failed post is the connection failing: the next call
                // on the rsocket finds it.
                let _ = c.send_keepalive();
            }
        }
        let secs = g.opts.keepidle;
        drop(g);
        let _ = self.arm_keepalive(secs, gen);
    }
}

fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK | libc::O_CLOEXEC);
        }
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

/// A fresh channel and an id on it.
fn new_endpoint() -> Res<(*mut rdma_event_channel, *mut rdma_cm_id)> {
    let chan = cma::rdma_create_event_channel();
    if chan.is_null() {
        return Err(errno());
    }
    let mut id = null_mut();
    // SAFETY: a live channel and a writable slot.
    if unsafe { cma::rdma_create_id(chan, &mut id, null_mut(), RDMA_PS_TCP) } != 0 {
        let e = errno();
        cma::rdma_destroy_event_channel(chan);
        return Err(e);
    }
    // SAFETY: a live channel.
    set_nonblocking(unsafe { (*chan).fd });
    Ok((chan, id))
}

fn insert(chan: *mut rdma_event_channel, inner: Inner) -> Arc<RSocket> {
    // SAFETY: a live channel.
    let fd = unsafe { (*chan).fd };
    let s = Arc::new(RSocket {
        fd,
        chan,
        inner: Mutex::new(inner),
    });
    TABLE.write().insert(fd, s.clone());
    s
}

fn inner(id: *mut rdma_cm_id, family: c_int, opts: Opts, state: State) -> Inner {
    Inner {
        state,
        id,
        family,
        nonblock: false,
        opts,
        so_error: 0,
        conn: None,
        backlog: VecDeque::new(),
        shut_rd: false,
        shut_wr: false,
        end_pending: None,
        close_sent: false,
        disconnected: false,
        last_cm: None,
        keepalive_gen: 0,
    }
}

pub fn create(family: c_int, nonblock: bool) -> Res<c_int> {
    let (chan, id) = new_endpoint()?;
    let mut i = inner(id, family, Opts::default(), State::Open);
    i.nonblock = nonblock;
    Ok(insert(chan, i).fd)
}

/// Takes one event off a channel without blocking.
fn next_event(chan: *mut rdma_event_channel) -> Option<*mut rdma_cm_event> {
    let mut ev = null_mut();
    // SAFETY: a live channel, a writable slot; the channel's descriptor is
    // non-blocking, so this never waits.
    (unsafe { cma::rdma_get_cm_event(chan, &mut ev) } == 0).then_some(ev)
}

fn ack(ev: *mut rdma_cm_event) {
    cma::rdma_ack_cm_event(ev);
}

/// The private data an event carries.
///
/// # Safety
/// `ev` is a live event.
unsafe fn event_pdata(ev: *mut rdma_cm_event) -> Vec<u8> {
    // SAFETY: caller guarantee; connection events carry `conn`.
    unsafe {
        let p = (*ev).param.conn;
        if p.private_data.is_null() {
            return Vec::new();
        }
        core::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len as usize)
            .to_vec()
    }
}

/// `addr`'s C form.
fn c_addr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    addr::to_c(a)
}

impl Inner {
    fn sizes(&self) -> Sizes {
        Sizes {
            rbuf: self.opts.rcvbuf,
            sbuf: self.opts.sndbuf,
            sq: self.opts.sq_size,
            slots: self.opts.rq_size,
            inline: self.opts.inline,
            iomaps: self.opts.iomap_size,
        }
    }

    fn fail(&mut self, e: i32) {
        self.state = State::Failed;
        self.so_error = e;
        self.conn = None;
    }

    pub fn id(&self) -> *mut rdma_cm_id {
        self.id
    }

    /// Whether the CM channel is due another look from a caller that
    /// polls without sleeping.
    pub fn cm_due(&self) -> bool {
        self.last_cm
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(1))
    }

    /// Applies the CM events waiting on the channel.
    fn drive_cm(&mut self, chan: *mut rdma_event_channel) {
        self.last_cm = Some(Instant::now());
        if self.state == State::Listening {
            while let Some(ev) = next_event(chan) {
                // SAFETY: a live event.
                if unsafe { (*ev).event } == RDMA_CM_EVENT_CONNECT_REQUEST {
                    self.backlog.push_back(ev);
                } else {
                    ack(ev);
                }
            }
            return;
        }
        while let Some(ev) = next_event(chan) {
            // SAFETY: a live event until acked below.
            let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
            match (self.state, kind) {
                (State::ResolvingAddr, RDMA_CM_EVENT_ADDR_RESOLVED) => {
                    if cma::rdma_resolve_route(self.id, RESOLVE_MS) == 0 {
                        self.state = State::ResolvingRoute;
                    } else {
                        self.fail(errno());
                    }
                }
                (State::ResolvingRoute, RDMA_CM_EVENT_ROUTE_RESOLVED) => {
                    if let Err(e) = self.send_req() {
                        self.fail(e);
                    }
                }
                (State::Connecting, RDMA_CM_EVENT_ESTABLISHED) => {
                    // SAFETY: the live event.
                    let pd = unsafe { event_pdata(ev) };
                    match (ConnData::decode(&pd), self.conn.as_mut()) {
                        (Some(h), Some(c)) => {
                            c.start(h);
                            self.state = State::Connected;
                        }
                        _ => {
                            cma::rdma_disconnect(self.id);
                            self.fail(libc::ECONNREFUSED);
                        }
                    }
                }
                (State::Accepting, RDMA_CM_EVENT_ESTABLISHED) => self.state = State::Connected,
                (State::ResolvingAddr, RDMA_CM_EVENT_ADDR_ERROR) => self.fail(if status < 0 {
                    -status
                } else {
                    libc::EHOSTUNREACH
                }),
                (State::ResolvingRoute, RDMA_CM_EVENT_ROUTE_ERROR) => self.fail(if status < 0 {
                    -status
                } else {
                    libc::ENETUNREACH
                }),
                (State::Connecting | State::Accepting, RDMA_CM_EVENT_REJECTED) => {
                    self.fail(libc::ECONNREFUSED)
                }
                (
                    State::Connecting | State::Accepting,
                    RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_CONNECT_ERROR,
                ) => self.fail(libc::ETIMEDOUT),
                (_, RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL) => {
                    self.disconnected = true;
                    if let Some(c) = self.conn.as_mut() {
                        // Whatever the peer sent before it went is in
                        // the CQ ahead of the flushes.
                        c.progress();
                        c.ends.peer_closed = true;
                        c.ends.fin_in = true;
                    }
                    if matches!(self.state, State::Accepting | State::Connecting) {
                        self.fail(libc::ECONNRESET);
                    }
                }
                _ => {}
            }
            ack(ev);
        }
    }

    /// Route resolved: build the connection and send our REQ.
    fn send_req(&mut self) -> Res<()> {
        // SAFETY: our id, its route resolved (so its device is known).
        let conn = unsafe { Conn::new(self.id, self.sizes()) }?;
        let cdata = conn.conn_data().encode();
        self.conn = Some(conn);
        let mut p = conn_param(&cdata);
        // SAFETY: our id; `p` points at `cdata`, alive through the call.
        if unsafe { cma::rdma_connect(self.id, &mut p) } != 0 {
            return Err(errno());
        }
        self.state = State::Connecting;
        Ok(())
    }

    /// Polls completions and CM events (the latter only when `cm`).
    pub fn progress(&mut self, chan: *mut rdma_event_channel, cm: bool) {
        if let Some(c) = self.conn.as_mut() {
            c.progress();
        }
        // Outside the connected state every step comes from the CM.
        if cm || self.state != State::Connected {
            self.drive_cm(chan);
        }
        if self.state == State::Connected {
            if let Some(c) = self.conn.as_mut() {
                c.announce_pending();
            }
        }
        if let (Some(close), Some(c)) = (self.end_pending, self.conn.as_mut()) {
            if self.state == State::Connected {
                match c.send_end(close) {
                    Ok(false) => {}
                    Ok(true) => {
                        self.end_pending = None;
                        self.close_sent |= close;
                    }
                    // The connection is broken: nothing more can go.
                    Err(_) => self.end_pending = None,
                }
            }
        }
    }

    /// Whether a read would not block.
    pub fn readable(&self) -> bool {
        match self.state {
            State::Listening => !self.backlog.is_empty(),
            State::Connected | State::Disconnected => match &self.conn {
                Some(c) => c.rx_avail > 0 || c.ends.fin_in || c.ends.reset || self.shut_rd,
                None => true,
            },
            State::Failed => true,
            _ => self.shut_rd,
        }
    }

    /// Whether a write would not block.
    pub fn writable(&self) -> bool {
        match self.state {
            State::Connected => match &self.conn {
                Some(c) => c.ends.peer_closed || self.shut_wr || c.writable(),
                None => true,
            },
            State::Failed | State::Disconnected => true,
            _ => false,
        }
    }

    /// The poll(2) view: POLLIN/POLLOUT/POLLHUP/POLLERR bits.
    pub fn revents(&self, events: i16) -> i16 {
        let mut r = 0;
        if events & libc::POLLIN != 0 && self.readable() {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && self.writable() {
            r |= libc::POLLOUT;
        }
        match self.state {
            // A failed connect, as rdma-core reports it: POLLERR (with
            // the POLLIN/POLLOUT asked for), the reason in SO_ERROR.
            State::Failed => r |= libc::POLLERR,
            State::Connected | State::Disconnected => {
                if let Some(c) = &self.conn {
                    if c.ends.reset {
                        r |= libc::POLLERR;
                    }
                    if c.ends.peer_closed && c.rx_avail == 0 {
                        r |= libc::POLLHUP;
                    }
                }
            }
            _ => {}
        }
        r
    }

    pub fn comp_fd(&self) -> Option<c_int> {
        self.conn.as_ref().map(|c| c.comp_fd())
    }

    pub fn arm(&self) {
        if let Some(c) = &self.conn {
            c.arm();
        }
    }
}

/// rdma-core's: hardware flow control and endless RNR retries, on which
/// its senders rely (they may send control messages past the receives a
/// peer posted).
fn conn_param(cdata: &[u8; CONN_DATA_LEN]) -> rdma_conn_param {
    let mut p = rdma_conn_param::zeroed();
    p.private_data = cdata.as_ptr().cast();
    p.private_data_len = CONN_DATA_LEN as u8;
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.flow_control = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p
}

/// What a blocking call waits for.
#[derive(Clone, Copy)]
enum Want {
    Read,
    Write,
    /// The connect to finish (either way).
    Connect,
}

impl RSocket {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// SO_KEEPALIVE or TCP_KEEPIDLE changed: keepalives every `keepidle`
    /// seconds from now while it is on, as rdma-core's service thread
    /// sends them (the CM thread does here).
    pub fn keepalive_changed(self: &Arc<Self>, g: &mut Inner) -> Res<()> {
        g.keepalive_gen += 1;
        if !g.opts.keepalive {
            return Ok(());
        }
        if g.opts.keepidle <= 0 {
            g.opts.keepidle = system_keepidle();
        }
        self.arm_keepalive(g.opts.keepidle, g.keepalive_gen)
    }

    fn arm_keepalive(self: &Arc<Self>, secs: c_int, gen: u64) -> Res<()> {
        let me: Arc<dyn Tick> = self.clone();
        let target = TimerTarget::Tick(Arc::downgrade(&me), gen);
        engine::get()?.arm(Duration::from_secs(secs.max(1) as u64), target);
        Ok(())
    }

    pub fn chan(&self) -> *mut rdma_event_channel {
        self.chan
    }

    fn ready(g: &Inner, want: Want) -> bool {
        match want {
            Want::Read => g.readable(),
            Want::Write => g.writable(),
            Want::Connect => !matches!(
                g.state,
                State::ResolvingAddr | State::ResolvingRoute | State::Connecting | State::Accepting
            ),
        }
    }

    /// Makes progress until `want` holds, sleeping in poll(2) between
    /// tries; EAGAIN at once for a non-blocking call. `deadline` bounds
    /// the wait (ETIMEDOUT).
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        want: Want,
        nonblock: bool,
        deadline: Option<Instant>,
    ) -> Res<MutexGuard<'a, Inner>> {
        loop {
            g.progress(self.chan, false);
            if Self::ready(&g, want) {
                return Ok(g);
            }
            // A connected rsocket hears from the CM only when the peer
            // goes away: a caller spinning on EAGAIN checks at most once a
            // millisecond (each check is a system call).
            let cm = !nonblock || g.state != State::Connected || g.cm_due();
            if cm {
                g.progress(self.chan, true);
                if Self::ready(&g, want) {
                    return Ok(g);
                }
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            g.arm();
            g.progress(self.chan, true);
            if Self::ready(&g, want) {
                return Ok(g);
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: g.comp_fd().unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(libc::ETIMEDOUT);
                    }
                    left.as_millis().min(i32::MAX as u128) as c_int + 1
                }
            };
            drop(g);
            // SAFETY: two valid pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if rc < 0 && errno() == libc::EINTR {
                return Err(libc::EINTR);
            }
            g = self.inner.lock();
            if fds[1].revents != 0 {
                if let Some(c) = g.conn.as_ref() {
                    c.drain_events();
                }
            }
        }
    }

    // -- setup --------------------------------------------------------------

    pub fn bind(&self, a: SocketAddr) -> Res<()> {
        let mut g = self.lock();
        if g.state != State::Open {
            return Err(libc::EINVAL);
        }
        if g.opts.reuseaddr {
            let one: c_int = 1;
            // SAFETY: our id; the option value lives through the call.
            unsafe {
                cma::rdma_set_option(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_REUSEADDR,
                    &one as *const c_int as *mut _,
                    4,
                )
            };
        }
        if let Some(v6only) = g.opts.v6only {
            let v: c_int = v6only.into();
            // SAFETY: as above.
            unsafe {
                cma::rdma_set_option(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_AFONLY,
                    &v as *const c_int as *mut _,
                    4,
                )
            };
        }
        let (mut ss, _) = c_addr(&a);
        // SAFETY: our id; `ss` holds a valid address.
        if unsafe { cma::rdma_bind_addr(g.id, &mut ss as *mut _ as *mut libc::sockaddr) } != 0 {
            return Err(errno());
        }
        g.state = State::Bound;
        Ok(())
    }

    pub fn listen(&self, backlog: c_int) -> Res<()> {
        let mut g = self.lock();
        match g.state {
            State::Bound => {}
            State::Listening => return Ok(()),
            _ => return Err(libc::EINVAL),
        }
        if cma::rdma_listen(g.id, backlog.max(1)) != 0 {
            return Err(errno());
        }
        g.state = State::Listening;
        Ok(())
    }

    pub fn accept(&self) -> Res<(c_int, Option<SocketAddr>)> {
        let nonblock = {
            let g = self.lock();
            if g.state != State::Listening {
                return Err(libc::EINVAL);
            }
            g.nonblock
        };
        loop {
            let mut g = self.wait(self.lock(), Want::Read, nonblock, None)?;
            let Some(ev) = g.backlog.pop_front() else {
                continue;
            };
            let mut opts = g.opts;
            // Keepalives are the listener's own: rdma-core's accepted
            // rsockets start without them.
            opts.keepalive = false;
            opts.keepidle = 0;
            let family = g.family;
            drop(g);
            // SAFETY: a live connect request until acked.
            let (id, pdata) = unsafe { ((*ev).id, event_pdata(ev)) };
            ack(ev);
            match accept_request(id, &pdata, opts, family) {
                Ok(s) => return Ok(s),
                // A stranger or a peer that gave up: wait for the next.
                Err(_) if !nonblock => continue,
                Err(_) => return Err(libc::EAGAIN),
            }
        }
    }

    pub fn connect(&self, dst: SocketAddr) -> Res<()> {
        let mut g = self.lock();
        match g.state {
            State::Open | State::Bound => {}
            State::Connected => return Err(libc::EISCONN),
            State::ResolvingAddr | State::ResolvingRoute | State::Connecting => {
                return Err(libc::EALREADY)
            }
            _ => return Err(libc::EINVAL),
        }
        let (mut ss, _) = c_addr(&dst);
        // SAFETY: our id; `ss` holds a valid address. A bound id resolves
        // from its bound address.
        if unsafe {
            cma::rdma_resolve_addr(
                g.id,
                null_mut(),
                &mut ss as *mut _ as *mut libc::sockaddr,
                RESOLVE_MS,
            )
        } != 0
        {
            return Err(errno());
        }
        g.state = State::ResolvingAddr;
        let nonblock = g.nonblock;
        let mut g = match self.wait(g, Want::Connect, nonblock, None) {
            Ok(g) => g,
            Err(libc::EAGAIN) => return Err(libc::EINPROGRESS),
            Err(e) => return Err(e),
        };
        match g.state {
            State::Connected => Ok(()),
            // Reported here, so not again through SO_ERROR.
            _ => Err(match std::mem::take(&mut g.so_error) {
                0 => libc::ECONNREFUSED,
                e => e,
            }),
        }
    }

    // -- data ---------------------------------------------------------------

    fn writer_check(g: &Inner) -> Res<()> {
        if g.shut_wr {
            return Err(libc::EPIPE);
        }
        match g.state {
            State::Connected => {}
            State::Accepting | State::Connecting => {}
            State::Disconnected => return Err(libc::EPIPE),
            State::Failed if g.so_error != 0 => return Err(g.so_error),
            _ => return Err(libc::ENOTCONN),
        }
        match &g.conn {
            Some(c) if c.ends.peer_closed => Err(libc::EPIPE),
            Some(_) => Ok(()),
            None => Err(libc::ENOTCONN),
        }
    }

    /// # Safety
    /// The iovecs name readable memory.
    pub unsafe fn send(&self, bufs: &[libc::iovec], dontwait: bool) -> Res<usize> {
        let total: usize = bufs.iter().map(|b| b.iov_len).sum();
        let mut g = self.lock();
        Self::writer_check(&g)?;
        if total == 0 {
            return Ok(0);
        }
        let nonblock = dontwait || g.nonblock;
        let mut done = 0;
        loop {
            g = match self.wait(g, Want::Write, nonblock, None) {
                Ok(g) => g,
                Err(e) if done > 0 && (e == libc::EAGAIN || e == libc::EINTR) => return Ok(done),
                Err(e) => return Err(e),
            };
            if let Err(e) = Self::writer_check(&g) {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
            let c = g.conn.as_mut().ok_or(libc::ENOTCONN)?;
            let rest = trim(bufs, done);
            // SAFETY: caller guarantee.
            done += unsafe { c.send(rest.as_slice()) }?;
            if done == total {
                return Ok(done);
            }
        }
    }

    /// # Safety
    /// The iovecs name writable memory.
    pub unsafe fn recv(
        &self,
        bufs: &[libc::iovec],
        dontwait: bool,
        peek: bool,
        waitall: bool,
    ) -> Res<usize> {
        let total: usize = bufs.iter().map(|b| b.iov_len).sum();
        let mut g = self.lock();
        match g.state {
            State::Connected | State::Disconnected | State::Accepting => {}
            State::Failed if g.so_error != 0 => return Err(g.so_error),
            _ => return Err(libc::ENOTCONN),
        }
        if total == 0 {
            return Ok(0);
        }
        let nonblock = dontwait || g.nonblock;
        let mut done = 0;
        loop {
            g = match self.wait(g, Want::Read, nonblock, None) {
                Ok(g) => g,
                Err(libc::EAGAIN) if done > 0 => return Ok(done),
                Err(e) if done > 0 && e == libc::EINTR => return Ok(done),
                Err(e) => return Err(e),
            };
            if g.shut_rd {
                return Ok(done);
            }
            let Some(c) = g.conn.as_mut() else {
                return Ok(done);
            };
            if c.rx_avail == 0 {
                if c.ends.fin_in {
                    return Ok(done);
                }
                if c.ends.reset {
                    return if done > 0 {
                        Ok(done)
                    } else {
                        Err(libc::ECONNRESET)
                    };
                }
                continue;
            }
            let rest = trim(bufs, done);
            // SAFETY: caller guarantee.
            let n = unsafe { c.recv(rest.as_slice(), peek) };
            done += n;
            if !waitall || peek || done == total {
                return Ok(done);
            }
        }
    }

    pub fn shutdown(&self, how: c_int) -> Res<()> {
        let mut g = self.lock();
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(libc::EINVAL);
        }
        if !matches!(
            g.state,
            State::Connected | State::Accepting | State::Disconnected
        ) {
            return Err(libc::ENOTCONN);
        }
        if how != libc::SHUT_WR {
            g.shut_rd = true;
        }
        if how != libc::SHUT_RD && !g.shut_wr {
            g.shut_wr = true;
            // A side that reads no more ends the connection (rdma-core's
            // DISCONNECT); otherwise the peer may still write (SHUTDOWN).
            g.end_pending = Some(g.shut_rd);
            g.progress(self.chan, false);
        }
        if how == libc::SHUT_RDWR {
            let linger = g.opts.linger_timeout().unwrap_or(CLOSE_FLUSH);
            drop(g);
            self.flush_and_disconnect(linger);
        }
        Ok(())
    }

    /// Waits (bounded) until what we sent has reached the peer, then ends
    /// the connection. Our CLOSE is in the peer's CQ before it can see
    /// the disconnect.
    fn flush_and_disconnect(&self, linger: Duration) {
        let deadline = Instant::now() + linger;
        let mut g = self.lock();
        if g.state == State::Accepting || g.state == State::Connecting {
            // Let the handshake finish so our CLOSE can go out.
            g = match self.wait(g, Want::Connect, false, Some(deadline)) {
                Ok(g) => g,
                Err(_) => self.lock(),
            };
        }
        if g.state != State::Connected {
            return;
        }
        g.shut_wr = true;
        if !g.close_sent {
            g.end_pending = Some(true);
        }
        loop {
            g.progress(self.chan, true);
            let done = g.end_pending.is_none()
                && g.conn.as_ref().is_none_or(|c| c.all_sent() || c.ends.reset);
            if done || g.disconnected || Instant::now() >= deadline {
                break;
            }
            g.arm();
            g.progress(self.chan, true);
            let Some(fd) = g.comp_fd() else { break };
            drop(g);
            let mut fds = [
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, left.as_millis() as c_int + 1) };
            g = self.lock();
            if let Some(c) = g.conn.as_ref() {
                c.drain_events();
            }
        }
        if !g.disconnected {
            cma::rdma_disconnect(g.id);
        }
        g.state = State::Disconnected;
        if let Some(c) = g.conn.as_mut() {
            c.ends.peer_closed = true;
        }
    }

    pub fn close(self: Arc<Self>) -> Res<()> {
        TABLE.write().remove(&self.fd);
        let (state, linger) = {
            let g = self.lock();
            (g.state, g.opts.linger_timeout().unwrap_or(CLOSE_FLUSH))
        };
        if matches!(state, State::Connected | State::Accepting) {
            self.flush_and_disconnect(linger);
        }
        let mut g = self.lock();
        for ev in g.backlog.drain(..) {
            // SAFETY: a live connect request, ours to refuse.
            let id = unsafe { (*ev).id };
            // SAFETY: the request's id.
            unsafe { cma::rdma_reject(id, core::ptr::null(), 0) };
            ack(ev);
            cma::rdma_destroy_id(id);
        }
        g.conn = None;
        cma::rdma_destroy_id(g.id);
        g.id = null_mut();
        drop(g);
        cma::rdma_destroy_event_channel(self.chan);
        Ok(())
    }

    // -- iomap --------------------------------------------------------------

    pub fn iomap(&self, addr: usize, len: usize, offset: u64) -> Res<u64> {
        let mut g = self.lock();
        if !matches!(g.state, State::Connected | State::Accepting) {
            return Err(libc::EINVAL);
        }
        let connected = g.state == State::Connected;
        g.conn
            .as_mut()
            .ok_or(libc::EINVAL)?
            .iomap(addr, len, offset, connected)
    }

    pub fn iounmap(&self, addr: usize, len: usize) -> Res<()> {
        let mut g = self.lock();
        let c = g.conn.as_mut().ok_or(libc::EINVAL)?;
        c.iounmap(addr, len)
    }

    /// # Safety
    /// `data..data+len` is readable.
    pub unsafe fn iowrite(
        &self,
        data: *const u8,
        len: usize,
        offset: u64,
        dontwait: bool,
    ) -> Res<usize> {
        let mut g = self.lock();
        Self::writer_check(&g)?;
        if g.state != State::Connected {
            return Err(libc::ENOTCONN);
        }
        let nonblock = dontwait || g.nonblock;
        g.progress(self.chan, false);
        if !g.conn.as_ref().is_some_and(|c| c.has_remote_map(offset)) {
            return Err(libc::EINVAL);
        }
        let mut done = 0;
        while done < len {
            g = match self.wait(g, Want::Write, nonblock, None) {
                Ok(g) => g,
                Err(libc::EAGAIN) if done > 0 => return Ok(done),
                Err(e) => return Err(e),
            };
            Self::writer_check(&g)?;
            let c = g.conn.as_mut().ok_or(libc::ENOTCONN)?;
            // SAFETY: caller guarantee.
            let n = unsafe { c.iowrite(data.add(done), len - done, offset + done as u64) };
            match n {
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => return Ok(done),
            }
        }
        Ok(done)
    }

    // -- addresses ------------------------------------------------------------

    pub fn local_addr(&self) -> Res<libc::sockaddr_storage> {
        let g = self.lock();
        // SAFETY: our live id; the address union is plain data.
        Ok(unsafe { (*g.id).route.addr.src.src_storage })
    }

    pub fn peer_addr(&self) -> Res<libc::sockaddr_storage> {
        let g = self.lock();
        if !matches!(
            g.state,
            State::Connected | State::Accepting | State::Disconnected
        ) {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: as above.
        Ok(unsafe { (*g.id).route.addr.dst.dst_storage })
    }
}

/// The iovecs past the first `skip` bytes, on the stack for the common
/// short lists.
fn trim(bufs: &[libc::iovec], mut skip: usize) -> IovList {
    let mut out = IovList::new();
    for b in bufs {
        if skip >= b.iov_len {
            skip -= b.iov_len;
            continue;
        }
        // SAFETY: `skip` < the iovec's length: stays inside it.
        let base = unsafe { (b.iov_base as *mut u8).add(skip) };
        out.push(libc::iovec {
            iov_base: base.cast(),
            iov_len: b.iov_len - skip,
        });
        skip = 0;
    }
    out
}

/// A short list of iovecs without allocation (spilling to the heap past 8).
struct IovList {
    arr: [libc::iovec; 8],
    n: usize,
    spill: Vec<libc::iovec>,
}

impl IovList {
    fn new() -> IovList {
        IovList {
            arr: [libc::iovec {
                iov_base: null_mut(),
                iov_len: 0,
            }; 8],
            n: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, v: libc::iovec) {
        if self.spill.is_empty() && self.n < 8 {
            self.arr[self.n] = v;
            self.n += 1;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.arr[..self.n]);
            }
            self.spill.push(v);
        }
    }

    fn as_slice(&self) -> &[libc::iovec] {
        if self.spill.is_empty() {
            &self.arr[..self.n]
        } else {
            &self.spill
        }
    }
}

/// A connect request taken from a listener: a new rsocket on its own
/// channel, accepted with our connect data.
fn accept_request(
    id: *mut rdma_cm_id,
    pdata: &[u8],
    opts: Opts,
    family: c_int,
) -> Res<(c_int, Option<SocketAddr>)> {
    let reject = |e: i32| {
        // SAFETY: the request's live id, refused and destroyed once.
        unsafe { cma::rdma_reject(id, core::ptr::null(), 0) };
        cma::rdma_destroy_id(id);
        Err(e)
    };
    let Some(peer) = ConnData::decode(pdata) else {
        return reject(libc::EPROTO);
    };
    let chan = cma::rdma_create_event_channel();
    if chan.is_null() {
        return reject(errno());
    }
    // SAFETY: a live channel.
    set_nonblocking(unsafe { (*chan).fd });
    if cma::rdma_migrate_id(id, chan) != 0 {
        let e = errno();
        cma::rdma_destroy_event_channel(chan);
        return reject(e);
    }
    let mut i = inner(id, family, opts, State::Accepting);
    let sizes = i.sizes();
    // SAFETY: the request's id knows its device.
    let mut conn = match unsafe { Conn::new(id, sizes) } {
        Ok(c) => c,
        Err(e) => {
            let r = reject(e);
            cma::rdma_destroy_event_channel(chan);
            return r;
        }
    };
    conn.start(peer);
    let cdata = conn.conn_data().encode();
    i.conn = Some(conn);
    let mut p = conn_param(&cdata);
    // SAFETY: the request's id; `p` points at `cdata`.
    if unsafe { cma::rdma_accept(id, &mut p) } != 0 {
        let e = errno();
        i.conn = None;
        cma::rdma_destroy_id(id);
        cma::rdma_destroy_event_channel(chan);
        return Err(e);
    }
    // SAFETY: the id's peer address, plain data.
    let peer_addr = unsafe { addr::from_c(&(*id).route.addr.dst.dst_addr) };
    let s = insert(chan, i);
    Ok((s.fd, peer_addr))
}
