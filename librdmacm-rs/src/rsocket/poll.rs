//! `rpoll` and `rselect` over rsockets and ordinary descriptors mixed, as
//! librspreload hands them over (it maps an application's socket to the
//! rsocket's number and leaves every other descriptor as it is).
//!
//! An rsocket's readiness is computed from its state after polling its CQ
//! and CM channel. When nothing is ready the call arms every rsocket's CQ,
//! checks once more (a completion may have landed before the arm), and
//! then sleeps in poll(2) on the ordinary descriptors plus, for each
//! rsocket, its CM channel and completion channel descriptors.

use core::ffi::c_int;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dgram::{self, DSocket};
use super::stream::{self, RSocket};
use crate::error::{errno, Res};

/// What an entry of the caller's array is.
enum Entry {
    Plain,
    Stream(Arc<RSocket>),
    Dgram(Arc<DSocket>),
}

impl Entry {
    fn of(fd: c_int) -> Entry {
        if let Some(s) = stream::find(fd) {
            Entry::Stream(s)
        } else if let Some(d) = dgram::find(fd) {
            Entry::Dgram(d)
        } else {
            Entry::Plain
        }
    }

    fn is_plain(&self) -> bool {
        matches!(self, Entry::Plain)
    }
}

/// Per-thread scratch space, so a poll allocates nothing once warm.
struct Scratch {
    socks: Vec<Entry>,
    real: Vec<libc::pollfd>,
    /// For each entry of `real`: the caller's index, and whether it is an
    /// rsocket's helper descriptor rather than the caller's own.
    back: Vec<(usize, bool)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            socks: Vec::new(),
            real: Vec::new(),
            back: Vec::new(),
        })
    };
}

/// Fills in the rsockets' `revents`; how many are ready. `cm` also reads
/// their CM channels.
fn check(fds: &mut [libc::pollfd], socks: &[Entry], cm: bool, arm: bool) -> usize {
    let mut n = 0;
    for (f, s) in fds.iter_mut().zip(socks) {
        match s {
            Entry::Plain => continue,
            Entry::Stream(s) => {
                let mut g = s.lock();
                if arm {
                    g.arm();
                }
                g.progress(s.chan(), cm);
                f.revents = g.revents(f.events);
            }
            Entry::Dgram(d) => {
                if arm {
                    d.arm();
                }
                f.revents = d.revents(f.events);
            }
        }
        if f.revents != 0 {
            n += 1;
        }
    }
    n
}

/// Whether a zero-timeout poll should read the CM channels this time: at
/// most once a millisecond for connected rsockets (see `RSocket::wait`).
fn cm_due(socks: &[Entry]) -> bool {
    socks.iter().any(|s| match s {
        Entry::Stream(s) => {
            let g = s.lock();
            g.state != stream::State::Connected || g.cm_due()
        }
        _ => false,
    })
}

fn ordinary_now(
    fds: &mut [libc::pollfd],
    socks: &[Entry],
    real: &mut Vec<libc::pollfd>,
) -> Res<usize> {
    real.clear();
    for (f, s) in fds.iter().zip(socks) {
        if s.is_plain() {
            real.push(*f);
        }
    }
    if real.is_empty() {
        return Ok(0);
    }
    // SAFETY: `real` holds `len` valid pollfds.
    let rc = unsafe { libc::poll(real.as_mut_ptr(), real.len() as libc::nfds_t, 0) };
    if rc < 0 {
        return Err(errno());
    }
    let mut it = real.iter();
    for (f, s) in fds.iter_mut().zip(socks) {
        if s.is_plain() {
            f.revents = it.next().map(|r| r.revents).unwrap_or(0);
        }
    }
    Ok(rc as usize)
}

pub fn rpoll(fds: &mut [libc::pollfd], timeout: c_int) -> Res<c_int> {
    SCRATCH.with(|cell| {
        let Ok(mut sc) = cell.try_borrow_mut() else {
            // Re-entered from a signal handler: nothing to reuse.
            return poll_with(fds, timeout, &mut new_scratch());
        };
        poll_with(fds, timeout, &mut sc)
    })
}

fn new_scratch() -> Scratch {
    Scratch {
        socks: Vec::new(),
        real: Vec::new(),
        back: Vec::new(),
    }
}

fn poll_with(fds: &mut [libc::pollfd], timeout: c_int, sc: &mut Scratch) -> Res<c_int> {
    let Scratch { socks, real, back } = sc;
    socks.clear();
    socks.extend(fds.iter().map(|f| Entry::of(f.fd)));
    let result = poll_inner(fds, timeout, socks, real, back);
    socks.clear();
    result
}

fn poll_inner(
    fds: &mut [libc::pollfd],
    timeout: c_int,
    socks: &[Entry],
    real: &mut Vec<libc::pollfd>,
    back: &mut Vec<(usize, bool)>,
) -> Res<c_int> {
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    if socks.iter().all(|s| s.is_plain()) {
        // Only ordinary descriptors: poll(2) itself.
        // SAFETY: the caller's array of `len` pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        return if rc < 0 { Err(errno()) } else { Ok(rc) };
    }
    let mut cm = false;
    loop {
        let mut n = check(fds, socks, cm, false);
        if n == 0 && !cm && (timeout != 0 || cm_due(socks)) {
            n = check(fds, socks, true, false);
        }
        let m = ordinary_now(fds, socks, real)?;
        if n + m > 0 {
            return Ok((n + m) as c_int);
        }
        let left = match deadline {
            None => -1,
            Some(d) => {
                let l = d.saturating_duration_since(Instant::now());
                if l.is_zero() {
                    return Ok(0);
                }
                l.as_millis().min(i32::MAX as u128) as c_int + 1
            }
        };
        // Arm, then look once more before sleeping.
        let n = check(fds, socks, true, true);
        if n > 0 {
            ordinary_now(fds, socks, real)?;
            return Ok(fds.iter().filter(|f| f.revents != 0).count() as c_int);
        }
        real.clear();
        back.clear();
        for (i, (f, s)) in fds.iter().zip(socks).enumerate() {
            let helpers = match s {
                Entry::Plain => {
                    real.push(*f);
                    back.push((i, false));
                    continue;
                }
                Entry::Stream(s) => vec![s.fd, s.lock().comp_fd().unwrap_or(-1)],
                // Armed by the check above.
                Entry::Dgram(d) => d.arm(),
            };
            for fd in helpers.into_iter().filter(|fd| *fd >= 0) {
                real.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                back.push((i, true));
            }
        }
        // SAFETY: `real` holds `len` valid pollfds.
        let rc = unsafe { libc::poll(real.as_mut_ptr(), real.len() as libc::nfds_t, left) };
        if rc < 0 {
            return Err(errno());
        }
        let mut ordinary = 0;
        for (r, (i, helper)) in real.iter().zip(back.iter()) {
            if !*helper {
                fds[*i].revents = r.revents;
                if r.revents != 0 {
                    ordinary += 1;
                }
            } else if r.revents != 0 {
                match &socks[*i] {
                    Entry::Stream(s) => {
                        let g = s.lock();
                        if Some(r.fd) == g.comp_fd() {
                            if let Some(c) = g.conn.as_ref() {
                                c.drain_events();
                            }
                        }
                    }
                    Entry::Dgram(d) => d.drain(),
                    Entry::Plain => {}
                }
            }
        }
        // Something woke us: the next pass reads the CM channels too.
        cm = true;
        if ordinary > 0 {
            let n = check(fds, socks, true, false);
            return Ok((n + ordinary) as c_int);
        }
    }
}

/// `rselect` as `rpoll` over the descriptors named in the sets.
///
/// # Safety
/// The sets are null or valid for `nfds` descriptors.
pub unsafe fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: Option<Duration>,
) -> Res<c_int> {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return Err(libc::EINVAL);
    }
    let mut fds = Vec::new();
    // SAFETY: the sets are null or valid (caller guarantee).
    unsafe {
        let isset = |set: *mut libc::fd_set, fd| !set.is_null() && libc::FD_ISSET(fd, set);
        for fd in 0..nfds {
            let mut events = 0;
            if isset(readfds, fd) {
                events |= libc::POLLIN;
            }
            if isset(writefds, fd) {
                events |= libc::POLLOUT;
            }
            // Exceptional conditions are urgent data, as select(2) says.
            if isset(exceptfds, fd) {
                events |= libc::POLLPRI;
            }
            if events != 0 {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as c_int);
        let rc = rpoll(&mut fds, ms)?;
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
        if rc <= 0 {
            return Ok(rc);
        }
        let mut cnt = 0;
        for f in &fds {
            if f.revents & libc::POLLNVAL != 0 {
                return Err(libc::EBADF);
            }
            if !readfds.is_null()
                && f.events & libc::POLLIN != 0
                && f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            {
                libc::FD_SET(f.fd, readfds);
                cnt += 1;
            }
            if !writefds.is_null()
                && f.events & libc::POLLOUT != 0
                && f.revents & (libc::POLLOUT | libc::POLLERR) != 0
            {
                libc::FD_SET(f.fd, writefds);
                cnt += 1;
            }
            if !exceptfds.is_null() && f.events & f.revents & libc::POLLPRI != 0 {
                libc::FD_SET(f.fd, exceptfds);
                cnt += 1;
            }
        }
        Ok(cnt)
    }
}
