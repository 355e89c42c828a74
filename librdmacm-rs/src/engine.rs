//! The CM thread: one per process, started on first use. It owns an epoll
//! set with every CM socket (listeners, connections awaiting their first
//! message, and the connection of each connected id) and a timer list, and
//! turns socket activity and timeouts into calls on the ids. Application
//! threads register sockets and arm timers directly; the thread waits on
//! nothing but epoll and the short-held id and table locks, and does a
//! bounded amount of reading per wakeup, so no peer can monopolise it.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use std::sync::OnceLock;

use crate::error::{check, Res};
use crate::id::{CmId, TimerKind};
use crate::sock;
use crate::wire::{Msg, MAX_FRAME};

/// How long a freshly accepted connection may take to send its REQ.
const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

pub const EV_IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
pub const EV_OUT: u32 = libc::EPOLLOUT as u32;

/// A connection accepted by a listener whose REQ has not arrived yet.
pub struct Accepted {
    fd: Option<OwnedFd>,
    inbuf: Vec<u8>,
    listener: Weak<CmId>,
}

#[derive(Clone)]
pub enum Entry {
    Listener(Weak<CmId>),
    Accepted(Arc<Mutex<Accepted>>),
    Conn(Weak<CmId>),
}

#[derive(Clone)]
pub enum TimerTarget {
    Id(Weak<CmId>, TimerKind, u64),
    Accepted(u64),
}

pub struct Engine {
    epfd: OwnedFd,
    wakefd: OwnedFd,
    entries: Mutex<HashMap<u64, Entry>>,
    timers: Mutex<BTreeMap<(Instant, u64), TimerTarget>>,
    next: AtomicU64,
}

const WAKE_TOKEN: u64 = 0;

static ENGINE: OnceLock<Engine> = OnceLock::new();
/// Set once the CM thread runs; a failed spawn leaves it unset so the next
/// call tries again rather than every caller waiting on a thread that
/// never came.
static THREAD: OnceLock<()> = OnceLock::new();
/// Serialises the first `get`s, whose creation steps may fail.
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn create() -> Res<Engine> {
    // SAFETY: plain syscalls; the descriptors are owned right away.
    let epfd = unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
    // SAFETY: as above.
    let wakefd = unsafe {
        OwnedFd::from_raw_fd(check(libc::eventfd(
            0,
            libc::EFD_CLOEXEC | libc::EFD_NONBLOCK,
        ))?)
    };
    let e = Engine {
        epfd,
        wakefd,
        entries: Mutex::new(HashMap::new()),
        timers: Mutex::new(BTreeMap::new()),
        next: AtomicU64::new(1),
    };
    e.ctl(
        libc::EPOLL_CTL_ADD,
        e.wakefd.as_raw_fd(),
        WAKE_TOKEN,
        libc::EPOLLIN as u32,
    )?;
    Ok(e)
}

/// The engine, with its thread running.
pub fn get() -> Res<&'static Engine> {
    if let (Some(e), Some(())) = (ENGINE.get(), THREAD.get()) {
        return Ok(e);
    }
    let _g = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if ENGINE.get().is_none() {
        let _ = ENGINE.set(create()?);
    }
    let e = ENGINE.get().ok_or(libc::EIO)?;
    if THREAD.get().is_none() {
        std::thread::Builder::new()
            .name("rdmacm-cm".into())
            .spawn(move || e.run())
            .map_err(|_| libc::EAGAIN)?;
        let _ = THREAD.set(());
    }
    Ok(e)
}

impl Engine {
    fn ctl(&self, op: i32, fd: RawFd, token: u64, events: u32) -> Res<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: valid epoll descriptor and event buffer.
        check(unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    /// Adds `fd` to the set; returns the token that names it.
    pub fn register(&self, fd: RawFd, entry: Entry, events: u32) -> Res<u64> {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries.lock().insert(token, entry);
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, token, events) {
            self.entries.lock().remove(&token);
            return Err(e);
        }
        Ok(token)
    }

    pub fn modify(&self, fd: RawFd, token: u64, events: u32) {
        let _ = self.ctl(libc::EPOLL_CTL_MOD, fd, token, events);
    }

    pub fn set_entry(&self, token: u64, entry: Entry) {
        self.entries.lock().insert(token, entry);
    }

    /// Removes `fd` from the set. Call before closing it.
    pub fn deregister(&self, fd: RawFd, token: u64) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, token, 0);
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
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.wakefd.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }

    fn run(&self) -> ! {
        let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            let timeout = match self.timers.lock().keys().next() {
                None => -1,
                Some((when, _)) => {
                    let d = when.saturating_duration_since(Instant::now());
                    // Round up so we never wake just before the deadline.
                    d.as_millis().min(60_000) as i32 + i32::from(d.subsec_nanos() % 1_000_000 != 0)
                }
            };
            // SAFETY: `evs` has room for 64 events.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    evs.as_mut_ptr(),
                    evs.len() as i32,
                    timeout,
                )
            };
            for ev in evs.iter().take(n.max(0) as usize) {
                let (token, events) = (ev.u64, ev.events);
                if token == WAKE_TOKEN {
                    let mut v: u64 = 0;
                    // SAFETY: reads 8 bytes into a valid u64.
                    unsafe { libc::read(self.wakefd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
                    continue;
                }
                let entry = self.entries.lock().get(&token).cloned();
                match entry {
                    Some(Entry::Listener(w)) => {
                        if let Some(id) = w.upgrade() {
                            self.on_listener(&id);
                        }
                    }
                    Some(Entry::Accepted(a)) => self.on_accepted(token, &a),
                    Some(Entry::Conn(w)) => {
                        if let Some(id) = w.upgrade() {
                            id.on_io(token, events);
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
                TimerTarget::Id(w, kind, gen) => {
                    if let Some(id) = w.upgrade() {
                        id.on_timer(kind, gen);
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

    fn on_listener(&self, listener: &Arc<CmId>) {
        while let Some(fd) = listener.accept_one() {
            sock::set_conn_options(&fd);
            let raw = fd.as_raw_fd();
            let acc = Arc::new(Mutex::new(Accepted {
                fd: Some(fd),
                inbuf: Vec::new(),
                listener: Arc::downgrade(listener),
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
    /// valid REQ; anything else (a stranger on the port, a peer that gave
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
                    Some(l) => CmId::on_request(&l, fd, token, info, rest),
                    None => self.refuse(token, fd, crate::id::REJ_INVALID_SERVICE_ID),
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
}
