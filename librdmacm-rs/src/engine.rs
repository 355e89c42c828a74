//! The CM thread: one per process, started on first use. It owns an epoll
//! set with every CM socket (listeners, connections awaiting their first
//! message, and the connection of each connected id) and a timer list, and
//! turns socket activity and timeouts into calls on the ids. Application
//! threads register sockets and arm timers directly; the thread waits on
//! nothing but epoll and the short-held id and table locks, and does a
//! bounded amount of reading per wakeup, so no peer can monopolise it.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use verbs_rt::poller::{self, Event, Poller};
use verbs_rt::ForkFresh;

use crate::error::Res;
use crate::sock;
use crate::wire::{
    ConnInfo, Msg, SidrRep, SidrReq, MAX_FRAME, REJ_INVALID_SERVICE_ID, SIDR_UNSUPPORTED,
};

/// How long a freshly accepted connection may take to send its REQ.
const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

pub const EV_IN: u32 = poller::IN | poller::RDHUP;
pub const EV_OUT: u32 = poller::OUT;

/// What the CM thread calls on an id. The ids sit above the thread (they
/// register their sockets and arm their timers with it), so it knows them
/// only through this.
pub trait CmTarget: Send + Sync {
    /// A listening id: the next connection waiting on its socket, if any.
    fn accept_one(self: Arc<Self>) -> Option<OwnedFd>;
    /// A listening id: a complete REQ arrived on a connection it accepted
    /// (`token` names that connection in the set; `rest` is what followed).
    fn on_request(self: Arc<Self>, fd: OwnedFd, token: u64, info: ConnInfo, rest: Vec<u8>);
    /// A listening id: a complete SIDR_REQ arrived (a datagram id asks for
    /// the listener's UD QP).
    fn on_sidr_request(self: Arc<Self>, fd: OwnedFd, token: u64, req: SidrReq);
    /// Activity on the connection an id registered under `token`.
    fn on_io(self: Arc<Self>, token: u64, events: u32);
    /// A timer the id armed ran out; `cookie` is what it armed it with.
    fn on_timer(self: Arc<Self>, cookie: u64);
}

/// A timer for something other than an id (an rsocket's keepalive): the
/// CM thread calls it when `after` has passed.
pub trait Tick: Send + Sync {
    fn on_tick(self: Arc<Self>, cookie: u64);
}

/// A descriptor the CM thread watches for someone else (a CM backend's
/// device file): it only says when it is readable.
pub trait FileTarget: Send + Sync {
    fn on_ready(self: Arc<Self>);
}

/// A connection accepted by a listener whose REQ has not arrived yet.
pub struct Accepted {
    fd: Option<OwnedFd>,
    inbuf: Vec<u8>,
    listener: Weak<dyn CmTarget>,
}

#[derive(Clone)]
pub enum Entry {
    Listener(Weak<dyn CmTarget>),
    Accepted(Arc<Mutex<Accepted>>),
    Conn(Weak<dyn CmTarget>),
    File(Weak<dyn FileTarget>),
}

#[derive(Clone)]
pub enum TimerTarget {
    Id(Weak<dyn CmTarget>, u64),
    Accepted(u64),
    Tick(Weak<dyn Tick>, u64),
}

pub struct Engine {
    poller: Poller,
    entries: Mutex<HashMap<u64, Entry>>,
    timers: Mutex<BTreeMap<(Instant, u64), TimerTarget>>,
    next: AtomicU64,
}

/// The process's engine once its thread runs. A forked child has no CM
/// thread and must not touch its parent's epoll set (the same kernel
/// object), so it starts its own engine on first use.
static ENGINE: ForkFresh<Mutex<Option<&'static Engine>>> = ForkFresh::new(|| Mutex::new(None));

fn create() -> Res<Engine> {
    Ok(Engine {
        poller: Poller::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?,
        entries: Mutex::new(HashMap::new()),
        timers: Mutex::new(BTreeMap::new()),
        next: AtomicU64::new(1),
    })
}

/// The engine, with its thread running. A failed start (no descriptors,
/// no thread) fails this call and the next one tries again.
pub fn get() -> Res<&'static Engine> {
    let mut slot = ENGINE.get().lock();
    if let Some(e) = *slot {
        return Ok(e);
    }
    let e: &'static Engine = Box::leak(Box::new(create()?));
    if std::thread::Builder::new()
        .name("rdmacm-cm".into())
        .spawn(move || e.run())
        .is_err()
    {
        // Nothing else holds it: give its descriptors back.
        // SAFETY: `e` was leaked just above and shared with no one (the
        // thread never started).
        drop(unsafe { Box::from_raw(e as *const Engine as *mut Engine) });
        return Err(libc::EAGAIN);
    }
    *slot = Some(e);
    Ok(e)
}

impl Engine {
    /// Adds `fd` to the set; returns the token that names it.
    pub fn register(&self, fd: RawFd, entry: Entry, events: u32) -> Res<u64> {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries.lock().insert(token, entry);
        if let Err(e) = self.poller.add(fd, token, events) {
            self.entries.lock().remove(&token);
            return Err(e.raw_os_error().unwrap_or(libc::EIO));
        }
        Ok(token)
    }

    pub fn modify(&self, fd: RawFd, token: u64, events: u32) {
        let _ = self.poller.modify(fd, token, events);
    }

    pub fn set_entry(&self, token: u64, entry: Entry) {
        self.entries.lock().insert(token, entry);
    }

    /// Removes `fd` from the set. Call before closing it.
    pub fn deregister(&self, fd: RawFd, token: u64) {
        let _ = self.poller.delete(fd);
        self.entries.lock().remove(&token);
    }

    pub fn arm(&self, after: Duration, target: TimerTarget) {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        self.timers
            .lock()
            .insert((Instant::now() + after, seq), target);
        self.wake();
    }

    fn wake(&self) {
        self.poller.wake();
    }

    fn run(&self) -> ! {
        let mut evs: Vec<Event> = Vec::with_capacity(64);
        loop {
            let timeout = self.timers.lock().keys().next().map(|(when, _)| {
                let d = when.saturating_duration_since(Instant::now());
                // Whole milliseconds, rounded up, so we never wake just
                // before the deadline.
                Duration::from_millis((d.as_nanos().div_ceil(1_000_000) as u64).min(60_000))
            });
            self.poller.wait(&mut evs, timeout);
            for ev in &evs {
                let (token, events) = poller::parts(ev);
                if token == Poller::WAKE {
                    self.poller.clear_wake();
                    continue;
                }
                let entry = self.entries.lock().get(&token).cloned();
                match entry {
                    Some(Entry::Listener(w)) => {
                        if let Some(id) = w.upgrade() {
                            self.on_listener(id);
                        }
                    }
                    Some(Entry::Accepted(a)) => self.on_accepted(token, &a),
                    Some(Entry::Conn(w)) => {
                        if let Some(id) = w.upgrade() {
                            id.on_io(token, events);
                        }
                    }
                    Some(Entry::File(w)) => {
                        if let Some(f) = w.upgrade() {
                            f.on_ready();
                        }
                    }
                    None => {}
                }
            }
            self.fire_timers();
        }
    }

    fn fire_timers(&self) {
        let now = Instant::now();
        let due: Vec<TimerTarget> = {
            let mut t = self.timers.lock();
            let later = t.split_off(&(now, u64::MAX));
            let due = std::mem::replace(&mut *t, later);
            due.into_values().collect()
        };
        for target in due {
            match target {
                TimerTarget::Id(w, cookie) => {
                    if let Some(id) = w.upgrade() {
                        id.on_timer(cookie);
                    }
                }
                TimerTarget::Tick(w, cookie) => {
                    if let Some(t) = w.upgrade() {
                        t.on_tick(cookie);
                    }
                }
                TimerTarget::Accepted(token) => {
                    let entry = self.entries.lock().get(&token).cloned();
                    if let Some(Entry::Accepted(a)) = entry {
                        self.drop_accepted(token, &mut a.lock());
                    }
                }
            }
        }
    }

    fn on_listener(&self, listener: Arc<dyn CmTarget>) {
        while let Some(fd) = listener.clone().accept_one() {
            sock::set_conn_options(&fd);
            let raw = fd.as_raw_fd();
            let acc = Arc::new(Mutex::new(Accepted {
                fd: Some(fd),
                inbuf: Vec::new(),
                listener: Arc::downgrade(&listener),
            }));
            match self.register(raw, Entry::Accepted(acc.clone()), EV_IN) {
                Ok(token) => self.arm(FIRST_MESSAGE_TIMEOUT, TimerTarget::Accepted(token)),
                Err(_) => drop(acc),
            }
        }
    }

    fn drop_accepted(&self, token: u64, a: &mut Accepted) {
        if let Some(fd) = a.fd.take() {
            self.deregister(fd.as_raw_fd(), token);
        }
    }

    /// The first message of an accepted connection must be a complete,
    /// valid REQ or SIDR_REQ; anything else (a stranger on the port, a peer that gave
    /// up) closes the connection without an answer.
    fn on_accepted(&self, token: u64, acc: &Arc<Mutex<Accepted>>) {
        let mut a = acc.lock();
        let Some(fd) = a.fd.take() else { return };
        let eof = sock::read_into(&fd, &mut a.inbuf, MAX_FRAME);
        match Msg::decode(&a.inbuf) {
            Ok(Some((Msg::Req(info), used))) => {
                let rest = a.inbuf.split_off(used);
                let listener = a.listener.upgrade();
                drop(a);
                match listener {
                    Some(l) => l.on_request(fd, token, info, rest),
                    None => self.refuse(token, fd, REJ_INVALID_SERVICE_ID),
                }
            }
            Ok(Some((Msg::SidrReq(req), _))) => {
                // Nothing follows a SIDR_REQ but the requester's close.
                let listener = a.listener.upgrade();
                drop(a);
                match listener {
                    Some(l) => l.on_sidr_request(fd, token, req),
                    None => self.refuse_sidr(token, fd, SIDR_UNSUPPORTED),
                }
            }
            Ok(None) if !eof => a.fd = Some(fd),
            _ => self.deregister(fd.as_raw_fd(), token),
        }
    }

    /// Refuses a REQ no listener can take (none left, wrong port space,
    /// backlog full), the way an IB CM answers one: a REJ with the given
    /// reason, then the connection is closed.
    pub fn refuse(&self, token: u64, fd: OwnedFd, reason: u16) {
        let msg = Msg::Rej {
            reason,
            pdata: Vec::new(),
        }
        .to_bytes();
        let _ = sock::write(&fd, &msg);
        self.deregister(fd.as_raw_fd(), token);
    }

    /// The same for a SIDR_REQ: a SIDR_REP with the given status.
    pub fn refuse_sidr(&self, token: u64, fd: OwnedFd, status: u8) {
        let msg = Msg::SidrRep(SidrRep {
            status,
            ..SidrRep::default()
        })
        .to_bytes();
        let _ = sock::write(&fd, &msg);
        self.deregister(fd.as_raw_fd(), token);
    }
}
