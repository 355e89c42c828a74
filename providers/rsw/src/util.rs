//! Small OS helpers shared by the modules: errno, clocks, pipes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

pub use verbs_abi::errno::{ptr_or_errno, set_errno};

/// This process's soft limit on descriptors (1024 if it cannot be read).
pub fn nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur
    } else {
        1024
    }
}

pub fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clocks used always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic nanoseconds: the "HCA clock" behind completion timestamps.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall-clock nanoseconds since the epoch.
pub fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// A close-on-exec pipe whose write end never blocks (the writers are the
/// progress thread and verbs that must not stall on a slow reader); the read
/// end stays blocking because it is what the application waits on.
pub fn event_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    set_nonblocking(wr.as_raw_fd())?;
    Ok((rd, wr))
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no pointers involved.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes of one event record from a pipe fed only
/// with records of that size (pipe writes of at most PIPE_BUF bytes are
/// atomic, so a record is never split). Honours O_NONBLOCK on `fd`.
///
/// A signal interrupts the wait with EINTR, as rdma-core's blocking event
/// calls do: programs end a timed test by setting a flag from SIGALRM and
/// expect `ibv_get_cq_event` to return (qperf's latency tests would wait
/// for ever for a reply the peer, whose time is up too, never sends).
pub fn read_record(fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n == buf.len() as isize {
        return Ok(());
    }
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // EOF or a short read: only possible if the writer side vanished.
    Err(io::Error::from_raw_os_error(libc::EIO))
}

/// Writes one record to a non-blocking pipe. A full pipe drops the record:
/// the consumer is already far behind and has events to read.
pub fn write_record(fd: RawFd, buf: &[u8]) {
    loop {
        // SAFETY: buf is valid for reads of buf.len() bytes.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 && last_errno() == libc::EINTR {
            continue;
        }
        return;
    }
}

/// An iovec for `len` bytes at `ptr` (the transport's scatter/gather unit).
pub fn iov(ptr: *const u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: ptr as *mut libc::c_void,
        iov_len: len,
    }
}

/// Copies `src` into a fixed C string buffer, always NUL-terminated.
pub fn copy_cstr(dst: &mut [libc::c_char], src: &str) {
    let n = src.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..n].iter()) {
        *d = *s as libc::c_char;
    }
    if n < dst.len() {
        dst[n] = 0;
    }
}

/// A process-global value that a forked child replaces with a fresh one.
///
/// After `fork()` the child has only the forking thread, yet it inherits the
/// parent's memory: a lock held by one of the parent's other threads (the
/// progress thread, typically) would stay locked in the child forever. So
/// the child forgets the inherited value (it is leaked, never freed, so
/// stray references stay valid) and builds a new one on first use, like a
/// process that never used the provider. The parent's verbs objects are not
/// usable in the child, as with rdma-core.
///
/// Each value remembers the fork generation it was built in; the child's
/// `pthread_atfork` handler only bumps the generation, and every
/// `ForkFresh` notices on its next use. No list of tables to keep up to
/// date, so none can be forgotten.
pub struct ForkFresh<T> {
    ptr: AtomicPtr<Generational<T>>,
    init: fn() -> T,
}

struct Generational<T> {
    generation: u64,
    value: T,
}

/// Bumped in every forked child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The current fork generation (0 in the original process).
pub fn fork_generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

impl<T> ForkFresh<T> {
    pub const fn new(init: fn() -> T) -> ForkFresh<T> {
        ForkFresh {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            init,
        }
    }

    pub fn get(&self) -> &T {
        let generation = fork_generation();
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: non-null pointers come from Box::into_raw below and are
        // never freed.
        if !p.is_null() && unsafe { (*p).generation } == generation {
            // SAFETY: as above.
            return unsafe { &(*p).value };
        }
        register_fork_handler();
        let new = Box::into_raw(Box::new(Generational {
            generation,
            value: (self.init)(),
        }));
        // The parent's value (if any) is replaced, never freed: references
        // to it may survive in the child.
        match self
            .ptr
            .compare_exchange(p, new, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: we just published our own allocation.
            Ok(_) => unsafe { &(*new).value },
            Err(_) => {
                // SAFETY: `new` lost the race and was never shared.
                drop(unsafe { Box::from_raw(new) });
                self.get()
            }
        }
    }
}

static FORK_HANDLER: Once = Once::new();

/// Registers [`after_fork_child`] with `pthread_atfork`, once.
pub fn register_fork_handler() {
    FORK_HANDLER.call_once(|| {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
}

/// Runs in a forked child: every `ForkFresh` starts afresh on its next use.
/// (The progress engine, a thread and descriptors rather than a table,
/// registers its own handler.)
extern "C" fn after_fork_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}
