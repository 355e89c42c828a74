//! The event loop's core, shared by librdmacm's CM thread and rsw's
//! progress thread: one epoll set plus an eventfd that wakes it. Each user
//! keeps its own thread, tokens and dispatch; what they share is the
//! system-call layer, written once, through rustix.
//!
//! Tokens are the caller's; [`Poller::WAKE`] is reserved for the waker.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};

pub use rustix::event::epoll::Event;

/// Readiness bits, as `epoll_event.events` carries them.
pub const IN: u32 = EventFlags::IN.bits();
pub const OUT: u32 = EventFlags::OUT.bits();
pub const ERR: u32 = EventFlags::ERR.bits();
pub const HUP: u32 = EventFlags::HUP.bits();
pub const RDHUP: u32 = EventFlags::RDHUP.bits();

pub struct Poller {
    epfd: OwnedFd,
    wakefd: OwnedFd,
}

/// A descriptor the caller vouches for: epoll_ctl only names it by number
/// (the kernel checks it), and nothing here keeps it.
fn borrowed<'a>(fd: RawFd) -> io::Result<BorrowedFd<'a>> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: used only for the duration of one epoll_ctl call with a
    // descriptor number the caller owns; an invalid number makes the call
    // fail with EBADF, it is never read or closed through.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

impl Poller {
    /// The token the waker's readiness arrives under.
    pub const WAKE: u64 = u64::MAX;

    pub fn new() -> io::Result<Poller> {
        let epfd = epoll::create(CreateFlags::CLOEXEC)?;
        let wakefd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epfd,
            &wakefd,
            EventData::new_u64(Self::WAKE),
            EventFlags::IN,
        )?;
        Ok(Poller { epfd, wakefd })
    }

    /// Starts watching `fd` (level-triggered) under `token`.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        epoll::add(
            &self.epfd,
            borrowed(fd)?,
            EventData::new_u64(token),
            EventFlags::from_bits_retain(events),
        )?;
        Ok(())
    }

    /// Changes what `fd` is watched for and under which token. A newly
    /// wanted condition that is already true wakes the waiter by itself.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        epoll::modify(
            &self.epfd,
            borrowed(fd)?,
            EventData::new_u64(token),
            EventFlags::from_bits_retain(events),
        )?;
        Ok(())
    }

    /// Stops watching `fd`. Closing a descriptor does this only when no
    /// other descriptor (a forked child's copy) refers to the same file.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        epoll::delete(&self.epfd, borrowed(fd)?)?;
        Ok(())
    }

    /// Watches a descriptor of the caller's own (a timerfd) for reading.
    pub fn add_owned(&self, fd: &impl AsFd, token: u64) -> io::Result<()> {
        epoll::add(&self.epfd, fd, EventData::new_u64(token), EventFlags::IN)?;
        Ok(())
    }

    /// Makes a waiter return (with a [`Poller::WAKE`] event) until
    /// [`Poller::clear_wake`].
    pub fn wake(&self) {
        let _ = rustix::io::write(&self.wakefd, &1u64.to_ne_bytes());
    }

    /// Resets the waker. Clear before looking at what the wake-up was for:
    /// a wake after this raises it again.
    pub fn clear_wake(&self) {
        drain(&self.wakefd);
    }

    /// Waits for events into `evs` (cleared first; as many as its
    /// capacity, which must not be 0), at most `timeout` (`None`: forever).
    /// A signal ends the wait early with no events.
    pub fn wait(&self, evs: &mut Vec<Event>, timeout: Option<Duration>) {
        evs.clear();
        let ts = timeout.map(|d| Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        let _ = epoll::wait(&self.epfd, rustix::buffer::spare_capacity(evs), ts.as_ref());
    }

    /// The descriptors, for a forked child to close while it leaks the
    /// poller: the epoll set is the parent's kernel object, which the child
    /// must never change.
    pub fn raw_fds(&self) -> [RawFd; 2] {
        [self.epfd.as_raw_fd(), self.wakefd.as_raw_fd()]
    }
}

/// Resets an eventfd or timerfd (non-blocking) to not readable.
pub fn drain(fd: &impl AsFd) {
    let mut v = [0u8; 8];
    let _ = rustix::io::read(fd, &mut v);
}

/// An event's token and readiness bits.
pub fn parts(ev: &Event) -> (u64, u32) {
    // Copied out: the struct is packed on x86-64, as the kernel's.
    let (data, flags) = (ev.data, ev.flags);
    (data.u64(), flags.bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    const LONG: Option<Duration> = Some(Duration::from_secs(10));

    fn tokens(p: &Poller, timeout: Option<Duration>) -> Vec<(u64, u32)> {
        let mut evs = Vec::with_capacity(8);
        p.wait(&mut evs, timeout);
        evs.iter().map(parts).collect()
    }

    #[test]
    fn wake_is_level_until_cleared() {
        let p = Poller::new().unwrap();
        assert!(tokens(&p, Some(Duration::ZERO)).is_empty());
        p.wake();
        p.wake();
        assert_eq!(tokens(&p, LONG), vec![(Poller::WAKE, IN)]);
        assert_eq!(tokens(&p, LONG), vec![(Poller::WAKE, IN)]);
        p.clear_wake();
        assert!(tokens(&p, Some(Duration::ZERO)).is_empty());
    }

    #[test]
    fn readiness_arrives_under_the_token_and_follows_modify() {
        let p = Poller::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        p.add(a.as_raw_fd(), 7, IN).unwrap();
        assert!(tokens(&p, Some(Duration::ZERO)).is_empty());
        std::io::Write::write_all(&mut &b, b"x").unwrap();
        assert_eq!(tokens(&p, LONG), vec![(7, IN)]);
        p.modify(a.as_raw_fd(), 9, OUT).unwrap();
        assert_eq!(tokens(&p, LONG), vec![(9, OUT)]);
        p.delete(a.as_raw_fd()).unwrap();
        assert!(tokens(&p, Some(Duration::ZERO)).is_empty());
        assert_eq!(
            p.add(-1, 1, IN).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn wait_ends_at_its_timeout() {
        let p = Poller::new().unwrap();
        let t = Instant::now();
        assert!(tokens(&p, Some(Duration::from_millis(30))).is_empty());
        assert!(t.elapsed() >= Duration::from_millis(29));
    }
}
