//! Port state follows the interface's link. A netlink socket in the
//! progress thread hears link changes; when a device's interface loses its
//! link (down, no carrier) the port goes DOWN and every open context of the
//! device gets `IBV_EVENT_PORT_ERR`, and `IBV_EVENT_PORT_ACTIVE` when it
//! comes back, as a NIC's port does (`ibv_asyncwatch` shows them).

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::progress::{engine, token, Kind, Target};
use verbs_rt::ForkFresh;

/// The engine serial of the link watch: above every QP's (they count up
/// from 1), inside the token's serial bits.
const SERIAL: u64 = 1 << 43;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTMGRP_LINK: u32 = 1;
const NLMSG_HDRLEN: usize = 16;

struct LinkWatch {
    fd: OwnedFd,
    /// Told each change: interface index, link usable.
    on_change: fn(u32, bool),
}

/// Started once per process (again in a forked child).
static WATCH: ForkFresh<Mutex<Option<Arc<LinkWatch>>>> = ForkFresh::new(|| Mutex::new(None));

/// Starts watching links, if not yet, reporting changes to `on_change`
/// (given from above, so this module needs none of the objects). Without
/// netlink (an unusual sandbox) ports simply stay as they were found.
pub fn watch(on_change: fn(u32, bool)) {
    let mut w = WATCH.get().lock();
    if w.is_some() {
        return;
    }
    let Ok(fd) = open() else { return };
    let Ok(eng) = engine() else { return };
    let lw = Arc::new(LinkWatch { fd, on_change });
    eng.register_qp(SERIAL, &lw);
    if eng
        .add(
            lw.fd.as_raw_fd(),
            token(SERIAL, Kind::Listener),
            libc::EPOLLIN as u32,
        )
        .is_err()
    {
        eng.unregister_qp(SERIAL);
        return;
    }
    *w = Some(lw);
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_nl is valid; we set family and groups.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = RTMGRP_LINK;
    // SAFETY: sa is a valid sockaddr_nl of the given length.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The (interface index, link usable) pairs in a netlink datagram.
fn parse(buf: &[u8]) -> Vec<(u32, bool)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let h = &buf[off..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let ty = u16::from_ne_bytes([h[4], h[5]]);
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        // struct ifinfomsg: family, pad, type (u16), index (i32), flags.
        if (ty == RTM_NEWLINK || ty == RTM_DELLINK) && len >= NLMSG_HDRLEN + 16 {
            let m = &h[NLMSG_HDRLEN..];
            let index = i32::from_ne_bytes([m[4], m[5], m[6], m[7]]) as u32;
            let flags = u32::from_ne_bytes([m[8], m[9], m[10], m[11]]);
            let up = ty == RTM_NEWLINK && is_up(flags);
            out.push((index, up));
        }
        off += (len + 3) & !3;
    }
    out
}

/// An interface can carry traffic: up, and with its link (carrier).
pub fn is_up(flags: u32) -> bool {
    let need = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
    flags & need == need
}

impl Target for LinkWatch {
    fn on_event(&self, _kind: Kind, _events: u32) {
        let mut buf = [0u8; 16384];
        loop {
            // SAFETY: buf is ours and writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                return;
            }
            for (index, up) in parse(&buf[..n as usize]) {
                (self.on_change)(index, up);
            }
        }
    }

    fn on_kick(&self) {}

    fn on_timer(&self, _now: u64) {}
}

// ---- injected port events (`faults`) -------------------------------------------

/// The engine serial of the injected port events' clock.
const FAULT_SERIAL: u64 = SERIAL + 1;

/// An injected port event: monotonic deadline, device (None: every
/// one), port up.
type PortEvent = (u64, Option<String>, bool);

struct FaultClock {
    /// The events in time order, and how many have happened.
    events: Mutex<(Vec<PortEvent>, usize)>,
    apply: fn(Option<&str>, bool),
}

static CLOCK: ForkFresh<Mutex<Option<Arc<FaultClock>>>> = ForkFresh::new(|| Mutex::new(None));

/// Schedules the `port:` rules' events, timed from now (the first device
/// this process opens), once per process; `apply` is told each event.
pub fn schedule_faults(rules: &[crate::faults::PortRule], apply: fn(Option<&str>, bool)) {
    let mut c = CLOCK.get().lock();
    if c.is_some() || rules.is_empty() {
        return;
    }
    let Ok(eng) = engine() else { return };
    let now = crate::util::mono_ns();
    let mut events: Vec<PortEvent> = rules
        .iter()
        .flat_map(|r| {
            r.events
                .iter()
                .map(|&(t, up)| (now + t, r.device.clone(), up))
        })
        .collect();
    events.sort_by_key(|e| e.0);
    let clock = Arc::new(FaultClock {
        events: Mutex::new((events, 0)),
        apply,
    });
    eng.register_qp(FAULT_SERIAL, &clock);
    for e in clock.events.lock().0.iter() {
        eng.add_timer(e.0, FAULT_SERIAL);
    }
    // What happens at time 0 is so before the opening device is used.
    clock.on_timer(now);
    *c = Some(clock);
}

impl Target for FaultClock {
    fn on_event(&self, _kind: Kind, _events: u32) {}

    fn on_kick(&self) {}

    fn on_timer(&self, now: u64) {
        let due: Vec<(Option<String>, bool)> = {
            let mut g = self.events.lock();
            let (events, done) = &mut *g;
            let mut v = Vec::new();
            while let Some((t, d, up)) = events.get(*done) {
                if *t > now {
                    break;
                }
                v.push((d.clone(), *up));
                *done += 1;
            }
            v
        };
        for (d, up) in due {
            (self.apply)(d.as_deref(), up);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, index: i32, flags: u32) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN + 16];
        m[0..4].copy_from_slice(&((NLMSG_HDRLEN + 16) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&ty.to_ne_bytes());
        m[NLMSG_HDRLEN + 4..NLMSG_HDRLEN + 8].copy_from_slice(&index.to_ne_bytes());
        m[NLMSG_HDRLEN + 8..NLMSG_HDRLEN + 12].copy_from_slice(&flags.to_ne_bytes());
        m
    }

    #[test]
    fn link_messages() {
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        let mut b = msg(RTM_NEWLINK, 7, up);
        b.extend(msg(RTM_NEWLINK, 8, libc::IFF_UP as u32));
        b.extend(msg(RTM_DELLINK, 9, up));
        b.extend(msg(3, 10, up));
        assert_eq!(parse(&b), vec![(7, true), (8, false), (9, false)]);
        assert_eq!(parse(&b[..10]), vec![]);
    }
}
