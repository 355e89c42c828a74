//! The progress engine: one background thread per process.
//!
//! It waits in `epoll` on every transport descriptor of every QP (listeners,
//! incoming and outgoing connections), an eventfd for explicit wake-ups and
//! a timerfd for deadlines (RNR). It does the responder's work, so one-sided
//! operations complete while the target process makes no verbs call at all,
//! and the requester's completion work (acks, READ and atomic responses).
//!
//! The thread never blocks on anything but `epoll_wait` and QP/CQ locks; all
//! socket I/O is non-blocking. Events carry a token naming the QP (by
//! serial number, never reused) and which of its descriptors fired, so an
//! event for a QP destroyed meanwhile is simply dropped. A stale or
//! spurious event is harmless: every handler copes with EAGAIN.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use verbs_rt::poller::{self, Event, Poller};
use verbs_rt::ForkFresh;

use crate::util::mono_ns;

/// Which descriptor of a QP an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Listener,
    Incoming,
    Outgoing,
    /// An accepted connection whose hello is not read or not yet usable,
    /// by its id (see `wq::conn::PendingConn`): the low bits index the
    /// QP's pending list, the rest tell apart the connections a slot held
    /// over time, so an event for a connection closed meanwhile (still in
    /// the batch epoll returned) never reaches its slot's next occupant.
    Pending(usize),
    /// A UD QP's datagram socket.
    Datagram,
    /// The socket of one of a UD QP's multicast groups, by its id.
    Group(usize),
}

thread_local! {
    /// Set by [`keep_looking`] on the progress thread.
    static LOOK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set by [`served`]: whether the last request served was a lone
    /// one-sided one.
    static SERVED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Called where the progress thread serves a request: whether it was a
/// lone one-sided request (a WRITE without immediate, a READ or an atomic
/// with nothing else of its requester's unanswered, `wire::FLAG_WAITS`),
/// which no program thread polls for, so that a program waiting for one
/// spins on its memory or sleeps, and only this thread's getting a core
/// ends the wait. The thread's weight follows (see [`Weight`]).
pub fn served(one_sided: bool) {
    SERVED.set(Some(one_sided));
}

/// Called on the progress thread when it served a request that no program
/// thread would have (nobody polls for it): it does not sleep in `epoll`
/// for the next [`LOOK_NS`], since waking it costs more than a round trip.
/// Spent only where the thread had work to do, so a program that polls
/// (and so serves its peer itself) never has it compete for a core.
pub fn keep_looking() {
    LOOK.set(true);
}

/// How long the progress thread keeps looking after serving a request
/// nobody polled for (see [`keep_looking`]), when a core is to spare.
/// `RSW_PROGRESS_SPIN_US` sets it, for every request whatever the load;
/// 0 turns looking off.
const LOOK_NS: u64 = 50_000;

/// How often the progress thread asks again whether a core is to spare
/// (a `pread` of `/proc/loadavg`), at most: while it looks, and while it
/// does not.
const LOOK_CHECK_NS: u64 = 1_000_000;
const LOOK_RECHECK_NS: u64 = 50_000;

/// The progress thread's looking (see [`keep_looking`]). It looks only
/// while the machine has no more runnable threads than cores: then the
/// look costs idle time, and spares the next request the wake-up of an
/// idle core (about 15 us in a VM). On a busy machine a thread that looks
/// is runnable but often not running, and a request that arrives then
/// waits for the scheduler's next tick (4 ms for `ib_read_lat` beside two
/// CPU hogs, where a sleeping thread, woken by the request, took 6.5 us).
struct Look {
    ns: u64,
    forced: bool,
    until: u64,
    /// When to ask [`Look::spare_core`] again, and its last answer.
    next_check: u64,
    spare: bool,
    cores: usize,
    loadavg: Option<std::fs::File>,
}

impl Look {
    fn new() -> Look {
        let (ns, forced) = look_setting();
        Look {
            ns,
            forced,
            until: 0,
            next_check: 0,
            spare: false,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
        }
    }

    /// Whether to look now rather than sleep.
    fn on(&mut self) -> bool {
        self.until != 0 && mono_ns() < self.until
    }

    /// A request was served that nobody else would have: look on for
    /// another [`LOOK_NS`] if a core is to spare.
    fn extend(&mut self) {
        if self.ns == 0 {
            return;
        }
        let now = mono_ns();
        if self.forced {
            self.until = now + self.ns;
            return;
        }
        if now >= self.next_check {
            self.spare = self.spare_core();
            // Asked again soon while there was none: a thread woken for a
            // moment (the peer's progress thread taking our answer) is
            // counted too.
            self.next_check = now
                + if self.spare {
                    LOOK_CHECK_NS
                } else {
                    LOOK_RECHECK_NS
                };
        }
        self.until = if self.spare { now + self.ns } else { 0 };
    }

    /// Whether the threads that can run right now (this one among them,
    /// from `/proc/loadavg`) fit on the cores this thread may use.
    fn spare_core(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.loadavg else { return false };
        let mut b = [0u8; 128];
        let Ok(n) = f.read_at(&mut b, 0) else {
            return false;
        };
        fits(&b[..n], self.cores)
    }
}

/// Whether the runnable threads `/proc/loadavg` counts (its fourth field,
/// "runnable/all") are no more than `cores`; false if it cannot tell.
fn fits(loadavg: &[u8], cores: usize) -> bool {
    std::str::from_utf8(loadavg)
        .ok()
        .and_then(|s| s.split_whitespace().nth(3))
        .and_then(|f| f.split('/').next())
        .and_then(|r| r.parse::<usize>().ok())
        .is_some_and(|r| r <= cores)
}

/// The look's length, and whether the user chose it (then it holds
/// whatever the load).
fn look_setting() -> (u64, bool) {
    let set = std::env::var("RSW_PROGRESS_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match set {
        Some(us) => (us.saturating_mul(1000), true),
        None => (LOOK_NS, false),
    }
}

/// Serials of QPs and SRQs, the targets a token names (and the low 32
/// bits of their handles); the link watch and the stats socket have
/// constants far above.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A serial for a new target.
pub fn new_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, Ordering::Relaxed)
}

const TOK_EVENTFD: u64 = Poller::WAKE;
const TOK_TIMER: u64 = u64::MAX - 1;
const MAX_PENDING_SLOTS: usize = 1 << 14;

pub fn token(serial: u64, kind: Kind) -> u64 {
    let (k, slot) = match kind {
        Kind::Listener => (0, 0),
        Kind::Incoming => (1, 0),
        Kind::Outgoing => (2, 0),
        Kind::Pending(s) => (3, s as u64),
        Kind::Datagram => (4, 0),
        Kind::Group(id) => (5, id as u64),
    };
    (serial << 20) | (slot << 3) | k
}

fn untoken(t: u64) -> (u64, Kind) {
    let kind = match t & 7 {
        0 => Kind::Listener,
        1 => Kind::Incoming,
        2 => Kind::Outgoing,
        4 => Kind::Datagram,
        5 => Kind::Group(((t >> 3) & (MAX_PENDING_SLOTS as u64 - 1)) as usize),
        _ => Kind::Pending(((t >> 3) & (MAX_PENDING_SLOTS as u64 - 1)) as usize),
    };
    (t >> 20, kind)
}

#[derive(Default)]
struct Timers {
    set: BTreeSet<(u64, u64)>,
    /// Absolute deadline the timerfd is armed for, 0 when disarmed.
    armed: u64,
}

/// What the engine delivers events to: a QP, registered from above by its
/// serial (the engine never knows what a QP is).
pub trait Target: Send + Sync {
    /// One of the target's descriptors is ready (`events` from epoll).
    fn on_event(&self, kind: Kind, events: u32);
    /// Someone asked for the target to run its state machines.
    fn on_kick(&self);
    /// A deadline the target set has passed.
    fn on_timer(&self, now: u64);
    /// The process is exiting (`exit`, not a signal): last words, best
    /// effort, without waiting for anything.
    fn at_exit(&self) {}
}

pub struct Engine {
    poller: Poller,
    tfd: OwnedFd,
    qps: Mutex<HashMap<u64, Weak<dyn Target>>>,
    kicks: Mutex<Vec<u64>>,
    timers: Mutex<Timers>,
}

static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(std::ptr::null_mut());
static STARTING: ForkFresh<Mutex<()>> = ForkFresh::new(|| Mutex::new(()));

/// The process's engine, started on first use (and again in a forked
/// child, which has no progress thread).
pub fn engine() -> io::Result<&'static Engine> {
    let p = ENGINE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: engines are leaked, never freed.
        return Ok(unsafe { &*p });
    }
    let _g = STARTING.get().lock();
    let p = ENGINE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as above.
        return Ok(unsafe { &*p });
    }
    static FORK_HOOK: std::sync::Once = std::sync::Once::new();
    FORK_HOOK.call_once(|| {
        // SAFETY: registers a plain extern "C" function, once.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
        // SAFETY: registers a plain extern "C" function, once.
        unsafe { libc::atexit(at_exit) };
    });
    let e: &'static Engine = Box::leak(Box::new(Engine::new()?));
    // What the thread needs open is opened here, inside the program's
    // call: opened later on the thread, a descriptor could take a number
    // the program closed a moment before and still uses (a closed
    // rsocket's number named /proc/self/cgroup in rsocket_errors).
    let look = Look::new();
    std::thread::Builder::new()
        .name("rsw-progress".into())
        .spawn(move || e.run(look))?;
    ENGINE.store(e as *const Engine as *mut Engine, Ordering::Release);
    Ok(e)
}

/// The progress thread's standing with the scheduler.
///
/// A short time slice, always: programs that busy-poll often pin each
/// process to one core (MPI binds ranks by default), and the progress
/// thread inherits the pin: with EEVDF a woken thread of the default
/// slice waits until the spinning thread's slice ends, about 3-4 ms, for
/// every message that needs it. A thread that asks for a shorter slice
/// preempts at once on wakeup. Unprivileged on Linux 6.12 and later;
/// older kernels refuse or ignore it, which changes nothing.
///
/// A higher weight ([`NICE_BOOST`] nice steps above the thread that
/// started it) while the requests it serves are lone one-sided ones (see
/// [`served`]), where the process may (`CAP_SYS_NICE`, or an
/// `RLIMIT_NICE` that allows it). A program waiting for an RDMA WRITE by
/// spinning on its own memory waits for this thread to run, and with two
/// such programs on two cores the short slice alone still left it
/// runnable and not running for hundreds of microseconds a wake-up
/// (schedstat: half of every second): `ib_write_lat` between two
/// namespaces over TCP took about 2 ms a message in many runs where others
/// took 30 us; boosted, 26-33 us in every run. Not while it serves SENDs:
/// their program polls or waits for the completion, a poller serves its
/// peer itself, and a boosted thread woken beside it preempted it (TCP
/// `ib_send_lat` 3.6 -> 4.1 us). Nor for a stream of one-sided requests,
/// where it would take the core from the requester's threads.
struct Weight {
    nice: i32,
    boost_nice: i32,
    boosted: bool,
    /// The boost was refused once: not asked again.
    refused: bool,
    changed_ns: u64,
}

impl Weight {
    /// Sets the calling thread's short slice at the nice it inherited.
    fn new() -> Weight {
        // SAFETY: getpriority has no memory arguments; errno is cleared
        // first because -1 is a valid result.
        let nice = unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, 0)
        };
        let boost_nice = (nice - NICE_BOOST).max(-20);
        let w = Weight {
            nice,
            boost_nice,
            boosted: false,
            refused: boost_nice == nice,
            changed_ns: 0,
        };
        if !Weight::set(nice) {
            log::debug!(
                "progress thread: no short time slice ({}); a busy thread pinned to the same core delays it",
                std::io::Error::last_os_error()
            );
        }
        w
    }

    /// Asks for the short slice at `nice`; whether the kernel agreed.
    fn set(nice: i32) -> bool {
        #[repr(C)]
        struct SchedAttr {
            size: u32,
            policy: u32,
            flags: u64,
            nice: i32,
            priority: u32,
            runtime: u64,
            deadline: u64,
            period: u64,
        }
        let attr = SchedAttr {
            size: size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: SLICE_NS,
            deadline: 0,
            period: 0,
        };
        // SAFETY: attr is a valid sched_attr of the size it states; pid 0
        // is the calling thread.
        unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0 }
    }

    /// Boosts or drops the boost, at most once per [`WEIGHT_HOLD_NS`] (a
    /// mix of requests would otherwise cost a system call each).
    fn want(&mut self, boost: bool) {
        if boost == self.boosted || (boost && self.refused) {
            return;
        }
        let now = mono_ns();
        if now.saturating_sub(self.changed_ns) < WEIGHT_HOLD_NS {
            return;
        }
        let nice = if boost { self.boost_nice } else { self.nice };
        if Weight::set(nice) {
            self.boosted = boost;
            self.changed_ns = now;
        } else if boost {
            self.refused = true;
        }
    }
}

/// The progress thread's requested slice: the kernel's minimum.
const SLICE_NS: u64 = 100_000;

/// How many nice steps above its starter the progress thread asks to run
/// while it serves lone one-sided requests.
const NICE_BOOST: i32 = 10;

/// The shortest time between two changes of the progress thread's weight.
const WEIGHT_HOLD_NS: u64 = 1_000_000;

/// Stops watching `fd`, if an engine runs. Closing a descriptor removes
/// its watch only when no other descriptor refers to the same socket; after
/// a `fork()` the child holds copies, and the watch would outlive the QP,
/// reporting a ready socket nobody reads, over and over.
pub fn unwatch(fd: RawFd) {
    let p = ENGINE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: engines are leaked, never freed.
        let _ = unsafe { &*p }.poller.delete(fd);
    }
}

/// How long the last words wait for a lock another thread holds (the
/// progress thread mid-pass, which may have been preempted): a thread
/// that exits while holding one itself loses nothing worse than them.
pub const AT_EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Gives every QP its last words (see [`Target::at_exit`]).
extern "C" fn at_exit() {
    let p = ENGINE.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: engines are leaked, never freed.
    let e = unsafe { &*p };
    let Some(qps) = e.qps.try_lock_for(AT_EXIT_WAIT) else {
        return;
    };
    let live: Vec<_> = qps.values().filter_map(Weak::upgrade).collect();
    drop(qps);
    for t in live {
        t.at_exit();
    }
}

/// In a forked child: forget the parent's engine. Its epoll instance is the
/// parent's own kernel object (the descriptor was inherited), so the child
/// closes its copies and must never register anything there; the next use
/// starts a new engine with a new thread.
extern "C" fn after_fork_child() {
    let old = ENGINE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the old engine is leaked and never used again in this
        // process (nor dropped: its tables' locks may be held by threads
        // the child does not have); closing its descriptors here is their
        // only close.
        unsafe {
            let e = &*old;
            for fd in e.poller.raw_fds().into_iter().chain([e.tfd.as_raw_fd()]) {
                libc::close(fd);
            }
        }
    }
}

impl Engine {
    fn new() -> io::Result<Engine> {
        let poller = Poller::new()?;
        let tfd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        poller.add_owned(&tfd, TOK_TIMER)?;
        Ok(Engine {
            poller,
            tfd,
            qps: Mutex::new(HashMap::new()),
            kicks: Mutex::new(Vec::with_capacity(64)),
            timers: Mutex::new(Timers::default()),
        })
    }

    /// Starts watching `fd` (level-triggered). Closing the descriptor stops
    /// the watch.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.poller.add(fd, token, events)
    }

    /// Changes what `fd` is watched for (and under which token). Safe to
    /// call from any thread: a newly wanted, already-true condition wakes
    /// the engine by itself.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) {
        let _ = self.poller.modify(fd, token, events);
    }

    pub fn register_qp<T: Target + 'static>(&self, serial: u64, qp: &Arc<T>) {
        let w: Weak<dyn Target> = Arc::downgrade(qp) as Weak<dyn Target>;
        self.qps.lock().insert(serial, w);
    }

    pub fn unregister_qp(&self, serial: u64) {
        self.qps.lock().remove(&serial);
    }

    fn lookup(&self, serial: u64) -> Option<Arc<dyn Target>> {
        self.qps.lock().get(&serial).and_then(Weak::upgrade)
    }

    /// Asks the engine to run the QP's state machines soon (e.g. a receive
    /// was posted while an incoming SEND waits for one).
    pub fn kick(&self, serial: u64) {
        self.kicks.lock().push(serial);
        self.poller.wake();
    }

    /// Calls the QP's `on_timer` at or after `deadline` (monotonic ns).
    /// A timer `delay` from now for the QP `serial`, unless the one `at`
    /// records is still to come (it comes sooner, which serves as well):
    /// a timer per held message or batch would wake the progress thread at
    /// the message rate.
    pub fn add_timer_once(&self, at: &mut u64, delay: u64, serial: u64) {
        let now = mono_ns();
        if *at <= now {
            *at = now + delay;
            self.add_timer(*at, serial);
        }
    }

    pub fn add_timer(&self, deadline: u64, serial: u64) {
        let mut t = self.timers.lock();
        t.set.insert((deadline, serial));
        if t.armed == 0 || deadline < t.armed {
            t.armed = deadline;
            self.arm(deadline);
        }
    }

    fn arm(&self, deadline: u64) {
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: (deadline / 1_000_000_000) as _,
                tv_nsec: (deadline % 1_000_000_000) as _,
            },
        };
        let _ = timerfd_settime(&self.tfd, TimerfdTimerFlags::ABSTIME, &spec);
    }

    fn run(&self, mut look: Look) {
        let mut weight = Weight::new();
        let mut evs: Vec<Event> = Vec::with_capacity(64);
        let mut kicks: Vec<u64> = Vec::with_capacity(64);
        let mut due: Vec<u64> = Vec::with_capacity(16);
        loop {
            let looking = look.on();
            if looking {
                // A program thread that shares this core runs first.
                std::thread::yield_now();
            }
            self.poller
                .wait(&mut evs, looking.then_some(std::time::Duration::ZERO));
            for ev in &evs {
                let (tok, bits) = poller::parts(ev);
                match tok {
                    TOK_EVENTFD => self.run_kicks(&mut kicks),
                    TOK_TIMER => self.run_timers(&mut due),
                    _ => {
                        let (serial, kind) = untoken(tok);
                        if let Some(qp) = self.lookup(serial) {
                            qp.on_event(kind, bits);
                        }
                    }
                }
            }
            if LOOK.replace(false) {
                look.extend();
            }
            if let Some(one_sided) = SERVED.take() {
                weight.want(one_sided);
            }
        }
    }

    /// Kicks queued since the last call; `kicks` is scratch space that
    /// trades places with the queue, so neither side allocates.
    fn run_kicks(&self, kicks: &mut Vec<u64>) {
        // Reset the eventfd before taking the queue: a kick queued after
        // the swap makes it readable again.
        self.poller.clear_wake();
        std::mem::swap(kicks, &mut *self.kicks.lock());
        kicks.sort_unstable();
        kicks.dedup();
        for s in kicks.drain(..) {
            if let Some(qp) = self.lookup(s) {
                qp.on_kick();
            }
        }
    }

    /// Runs the timers that are due and re-arms for the next one.
    fn run_timers(&self, due: &mut Vec<u64>) {
        poller::drain(&self.tfd);
        let now = mono_ns();
        {
            let mut t = self.timers.lock();
            while let Some(&(d, s)) = t.set.first() {
                if d > now {
                    break;
                }
                t.set.pop_first();
                due.push(s);
            }
            t.armed = t.set.first().map(|&(d, _)| d).unwrap_or(0);
            if t.armed != 0 {
                self.arm(t.armed);
            }
        }
        for s in due.drain(..) {
            if let Some(qp) = self.lookup(s) {
                qp.on_timer(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runnable_threads_against_cores() {
        assert!(fits(b"1.90 1.09 1.22 2/77 6669\n", 2));
        assert!(!fits(b"1.90 1.09 1.22 3/77 6669\n", 2));
        assert!(fits(b"0.00 0.00 0.00 1/5 1\n", 1));
        assert!(!fits(b"1.90 1.09\n", 64));
        assert!(!fits(b"", 64));
        assert!(!fits(b"a b c x/y z", 64));
    }

    #[test]
    fn tokens_round_trip() {
        for kind in [
            Kind::Listener,
            Kind::Incoming,
            Kind::Outgoing,
            Kind::Pending(0),
            Kind::Pending(1234),
            Kind::Pending(MAX_PENDING_SLOTS - 1),
            Kind::Datagram,
            Kind::Group(77),
        ] {
            let t = token(987_654_321, kind);
            assert_eq!(untoken(t), (987_654_321, kind));
            assert_ne!(t, TOK_EVENTFD);
            assert_ne!(t, TOK_TIMER);
        }
    }
}
