//! Who holds a port: the kernel's RDMA CM rules for binding ids, kept
//! between processes.
//!
//! The kernel's CM keeps, per network namespace and port space, the list
//! of ids bound to each port and refuses a bind that overlaps one
//! (cma.c `cma_check_port`): a wildcard address on either side is
//! EADDRNOTAVAIL, the same address EADDRINUSE, unless both ids asked for
//! `RDMA_OPTION_ID_REUSEADDR`; two ids that are both AF-only in different
//! families never meet; and `rdma_listen` checks again as if neither id
//! allowed reuse, then leaves the listener unshareable.
//!
//! Our ids bind real TCP sockets, but TCP's rules are not these (another
//! errno, and `SO_REUSEADDR` stays on for every explicit port so that a
//! restarted listener does not trip over its TIME_WAIT remnants). So each
//! id holding an explicit port, and each listener, also holds a claim: an
//! abstract unix socket whose name says the port space, port, address and
//! flags. Abstract names live in the network namespace, as ports do, and
//! vanish with the last descriptor, so a process that dies leaves none;
//! every process sees every claim in `/proc/self/net/unix`. Checks and
//! claims are serialised by a lock: a mutex in the process, `flock` on a
//! shared file between processes.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustix::net::{self, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::error::Res;

const PREFIX: &str = "rdmacm-rs.port.";

/// What an id holding a port is, as the check compares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub ps: u32,
    pub addr: SocketAddr,
    pub afonly: bool,
    pub reuse: bool,
}

impl Holder {
    fn name(&self, seq: u64) -> String {
        format!(
            "{PREFIX}{}.{}.{}.{}.{}.{}.{}",
            self.ps,
            self.addr.port(),
            u8::from(self.afonly),
            u8::from(self.reuse),
            std::process::id(),
            seq,
            self.addr.ip(),
        )
    }

    fn parse(name: &str) -> Option<Holder> {
        let mut f = name.strip_prefix(PREFIX)?.splitn(7, '.');
        let ps = f.next()?.parse().ok()?;
        let port = f.next()?.parse().ok()?;
        let afonly = f.next()? == "1";
        let reuse = f.next()? == "1";
        let (_pid, _seq) = (f.next()?, f.next()?);
        let ip: IpAddr = f.next()?.parse().ok()?;
        Some(Holder {
            ps,
            addr: SocketAddr::new(ip, port),
            afonly,
            reuse,
        })
    }

    /// cma.c's `cma_check_port` for one other holder of the port.
    fn conflict(&self, cur: &Holder, reuse: bool) -> Option<i32> {
        if cur.ps != self.ps || cur.addr.port() != self.addr.port() {
            return None;
        }
        if reuse && cur.reuse {
            return None;
        }
        if self.afonly && cur.afonly && self.addr.is_ipv4() != cur.addr.is_ipv4() {
            return None;
        }
        if self.addr.ip().is_unspecified() || cur.addr.ip().is_unspecified() {
            return Some(libc::EADDRNOTAVAIL);
        }
        (self.addr.ip() == cur.addr.ip()).then_some(libc::EADDRINUSE)
    }
}

/// A port held; dropping it lets the port go.
#[derive(Debug)]
pub struct Claim {
    holder: Holder,
    name: String,
    _sock: OwnedFd,
}

impl Claim {
    pub fn holder(&self) -> Holder {
        self.holder
    }
}

/// Serialises check-and-claim: within the process (flock is per open
/// file, so threads sharing it would not exclude each other) and between
/// processes.
static LOCK: Mutex<Option<File>> = Mutex::new(None);
static SEQ: AtomicU64 = AtomicU64::new(0);

fn lock_file() -> Option<File> {
    let path = "/tmp/.rdmacm-rs-ports.lock";
    // Open first without O_CREAT: with fs.protected_regular, creating
    // over another user's file in a sticky directory is refused. flock
    // needs no write access.
    File::open(path).ok().or_else(|| {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .ok()?;
        Some(f)
    })
}

/// The claims every process of this network namespace holds.
fn holders() -> Vec<(String, Holder)> {
    let Ok(f) = File::open("/proc/self/net/unix") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in BufReader::new(f).lines().map_while(Result::ok) {
        // The path is the last column; an abstract name shows as '@name'.
        let Some(name) = line.rsplit(' ').next().and_then(|p| p.strip_prefix('@')) else {
            continue;
        };
        if let Some(h) = Holder::parse(name) {
            out.push((name.to_string(), h));
        }
    }
    out
}

/// Claims `want`'s port if no other holder stands in the way (checked as
/// if `want` did not allow reuse when `listen`, and held unshareable
/// then); `old` is the caller's own claim, not counted against it (the
/// caller drops it once the new one holds, and keeps it on an error).
pub fn claim(want: Holder, listen: bool, old: Option<&Claim>) -> Res<Claim> {
    let mut guard = LOCK.lock();
    if guard.is_none() {
        *guard = lock_file();
    }
    let file = guard.as_ref();
    if let Some(f) = file {
        // SAFETY: flock on a descriptor we own; released below.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    let r = check_and_claim(want, listen, old);
    if let Some(f) = file {
        // SAFETY: as above.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    }
    r
}

fn check_and_claim(want: Holder, listen: bool, old: Option<&Claim>) -> Res<Claim> {
    let own = old.map(|c| c.name.as_str());
    for (name, cur) in holders() {
        if Some(name.as_str()) == own {
            continue;
        }
        if let Some(e) = want.conflict(&cur, want.reuse && !listen) {
            return Err(e);
        }
    }
    let held = Holder {
        reuse: want.reuse && !listen,
        ..want
    };
    let name = held.name(SEQ.fetch_add(1, Ordering::Relaxed));
    let sock = net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.raw_os_error())?;
    let a = SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(|e| e.raw_os_error())?;
    net::bind(&sock, &a).map_err(|e| e.raw_os_error())?;
    Ok(Claim {
        holder: held,
        name,
        _sock: sock,
    })
}

/// Whether an IPv6 id that did not set `RDMA_OPTION_ID_AFONLY` is AF-only:
/// the namespace's `net.ipv6.bindv6only`, as the kernel's CM reads it.
pub fn default_v6only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|s| s.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(a: &str, reuse: bool) -> Holder {
        Holder {
            ps: 0x106,
            addr: a.parse().unwrap(),
            afonly: a.starts_with(|c: char| c.is_ascii_digit()),
            reuse,
        }
    }

    #[test]
    fn names_round_trip() {
        for a in ["0.0.0.0:8080", "127.0.0.1:1", "[::1]:65535", "[::]:7"] {
            let x = h(a, true);
            assert_eq!(Holder::parse(&x.name(42)), Some(x));
        }
        assert_eq!(Holder::parse("rdmacm-rs.port.x"), None);
    }

    #[test]
    fn the_kernels_rules() {
        let any = h("0.0.0.0:8080", false);
        let lo = h("127.0.0.1:8080", false);
        let other = h("127.0.0.2:8080", false);
        assert_eq!(any.conflict(&any, false), Some(libc::EADDRNOTAVAIL));
        assert_eq!(lo.conflict(&any, false), Some(libc::EADDRNOTAVAIL));
        assert_eq!(any.conflict(&lo, false), Some(libc::EADDRNOTAVAIL));
        assert_eq!(lo.conflict(&lo, false), Some(libc::EADDRINUSE));
        assert_eq!(lo.conflict(&other, false), None);
        // Reuse needs both sides.
        let lo_r = h("127.0.0.1:8080", true);
        assert_eq!(lo_r.conflict(&lo, true), Some(libc::EADDRINUSE));
        assert_eq!(lo_r.conflict(&lo_r, true), None);
        // Another port, another port space.
        assert_eq!(lo.conflict(&h("127.0.0.1:8081", false), false), None);
        let udp = Holder { ps: 0x111, ..lo };
        assert_eq!(lo.conflict(&udp, false), None);
        // AF-only ids of different families never meet; an IPv6 id that
        // is not AF-only meets the IPv4 wildcard.
        let six_only = h("[::]:8080", false);
        let six = Holder {
            afonly: false,
            ..six_only
        };
        let six_only = Holder {
            afonly: true,
            ..six_only
        };
        assert_eq!(six_only.conflict(&any, false), None);
        assert_eq!(six.conflict(&any, false), Some(libc::EADDRNOTAVAIL));
    }
}
