//! Small OS helpers shared by the modules: errno, clocks, pipes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use verbs_rt::errno::{ptr_or_errno, set_errno};

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
/// the consumer is already far behind and has events to read. Through
/// `syscall(2)`: libc's `write` is a thread-cancellation point, and this
/// runs inside the data path's verbs (see `transport::sock`).
pub fn write_record(fd: RawFd, buf: &[u8]) {
    loop {
        // SAFETY: buf is valid for reads of buf.len() bytes.
        let n =
            unsafe { libc::syscall(libc::SYS_write, fd as libc::c_long, buf.as_ptr(), buf.len()) };
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

/// A device limit check (`HandleTable::room_for_one`'s result): logs the
/// limit that was hit (warning level) and passes the result on.
pub fn limit(what: &str, max: u32, r: Result<(), i32>) -> Result<(), i32> {
    if r.is_err() {
        log::warn!("{what}: device limit of {max} reached (ENOMEM)");
    }
    r
}

/// The iovecs of bytes `off..off + len` of the message the scatter/gather
/// list `sges` describes, each piece's pointer from `check(lkey, addr,
/// len)` (None refuses it; empty pieces are skipped). Returns how many
/// iovecs, and how many of the `len` bytes the list had no room for; None
/// if `check` refused a piece or `out` is too short.
#[inline]
pub fn sge_iovs(
    sges: &[verbs_abi::ibv_sge],
    mut off: u64,
    len: usize,
    out: &mut [libc::iovec],
    mut check: impl FnMut(u32, u64, u64) -> Option<*mut u8>,
) -> Option<(usize, usize)> {
    let mut n = 0;
    let mut room = len;
    for s in sges {
        if room == 0 {
            break;
        }
        let l = s.length as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let take = ((l - off) as usize).min(room);
        let addr = s.addr.checked_add(off)?;
        let p = check(s.lkey, addr, take as u64)?;
        *out.get_mut(n)? = iov(p, take);
        n += 1;
        room -= take;
        off = 0;
    }
    Some((n, room))
}
