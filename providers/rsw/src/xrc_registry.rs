//! The registry of an XRC domain shared between processes.
//!
//! The kernel names a domain opened with a file descriptor by the file's
//! inode, for every process of the host. We keep what the processes of a
//! domain must know of each other in a small file of our own in
//! `/dev/shm`, named after the user and the file's device and inode
//! (`rsw-xrcd-<uid>-<dev>-<ino>`; the user's file is never written):
//!
//! - the member processes (pid and start time, so a reused pid is not
//!   taken for a member that died without closing the domain);
//! - per XRC SRQ: its number (allocated here, so numbers are unique across
//!   the domain's processes), its owner, and how another process reaches
//!   it: the owner's published key table (`transport::local`), the
//!   mailbox whose receive ring and completion ring the SRQ uses
//!   (`transport::mailbox`), its PD and an eventfd to ring when the
//!   owner's CQ is armed;
//! - per XRC receive QP: its number, owner and state, for `ibv_open_qp`
//!   in another process.
//!
//! Every access holds `flock(LOCK_EX)` on the file: the registry is only
//! read when a domain is opened or closed, an SRQ or receive QP is created
//! or destroyed, and when a request names an SRQ that is not local. A
//! member that died (its pid gone, a zombie, or a different start time)
//! is pruned, with its SRQs and QPs, by whoever looks next. The last
//! member to leave removes the file; a process that opened the file just
//! before finds it unlinked once it holds the lock and opens it again.

use std::os::fd::{AsFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::transport::shm::Mapping;

const MAGIC: u64 = u64::from_le_bytes(*b"RSWXRCD1");
const MEMBERS: usize = 256;
const SRQS: usize = 1024;
const QPS: usize = 1024;
/// Registry SRQ numbers have bit 23 set; process-local ones (basic SRQs,
/// XRC SRQs of unnamed domains) have it clear (see `srq::srq_number`).
pub const SHARED_SRQN: u32 = 1 << 23;

#[repr(C)]
struct Hdr {
    magic: AtomicU64,
    next_srqn: AtomicU32,
    _pad: AtomicU32,
    /// Counts changes to the SRQ entries, so a process can keep what it
    /// looked up while this stays (read without the lock).
    gen: AtomicU64,
}

#[repr(C)]
struct Member {
    pid: AtomicU32,
    _pad: AtomicU32,
    start: AtomicU64,
}

#[repr(C)]
struct SrqSlot {
    /// 0: free.
    num: AtomicU32,
    owner_pid: AtomicU32,
    owner_start: AtomicU64,
    /// The owner's key table descriptor (`u32::MAX`: none) and token.
    tbl_fd: AtomicU32,
    pd: AtomicU32,
    tbl_token: AtomicU64,
    /// Mailbox offset plus one (0: none).
    mbox: AtomicU64,
    /// Eventfd descriptor plus one (0: none).
    kick_fd: AtomicU32,
    _pad: AtomicU32,
}

#[repr(C)]
struct QpSlot {
    /// 0: free (QP numbers are never 0).
    qpn: AtomicU32,
    owner_pid: AtomicU32,
    owner_start: AtomicU64,
    state: AtomicU32,
    _pad: AtomicU32,
}

const MEMBERS_AT: usize = 64;
const SRQS_AT: usize = MEMBERS_AT + MEMBERS * size_of::<Member>();
const QPS_AT: usize = SRQS_AT + SRQS * size_of::<SrqSlot>();
const LEN: usize = (QPS_AT + QPS * size_of::<QpSlot>()).div_ceil(4096) * 4096;

/// A process: pid and start time (in clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start: u64,
}

/// The start time of a live process, None if it is gone (or a zombie).
fn proc_start(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold anything, even ')': fields follow the last.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    // Field 22 of the line is the 20th after the state.
    f.nth(18)?.parse().ok()
}

fn me() -> Option<Proc> {
    let pid = std::process::id();
    Some(Proc {
        pid,
        start: proc_start(pid)?,
    })
}

fn alive(p: Proc) -> bool {
    p.pid != 0 && proc_start(p.pid) == Some(p.start)
}

/// How another process reaches an XRC SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqEntry {
    pub num: u32,
    pub owner: Proc,
    /// The owner's key table (`transport::local::offer`): descriptor and
    /// token; None when the owner has no same-host path.
    pub table: Option<(u32, u64)>,
    pub pd: u32,
    pub mbox: Option<u64>,
    pub kick_fd: Option<u32>,
}

/// One process's membership of a shared domain.
pub struct Registry {
    fd: OwnedFd,
    path: String,
    map: Mapping,
    me: Proc,
    /// A member (dropping leaves); false while `join` decides.
    joined: bool,
    /// `flock` excludes other open files, not our own threads (they share
    /// the open file): they take this first.
    threads: parking_lot::Mutex<()>,
}

/// Holds the registry's lock.
struct Locked<'a> {
    reg: &'a Registry,
    _threads: parking_lot::MutexGuard<'a, ()>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.reg.fd, rustix::fs::FlockOperation::Unlock);
    }
}

fn io_errno(e: rustix::io::Errno) -> c_int {
    e.raw_os_error()
}

impl Registry {
    /// Joins the domain of the file `(dev, ino)`: with `O_CREAT` it is
    /// made if no live process has it, without it that is `EAGAIN`; with
    /// `O_EXCL` a domain some process has is `EINVAL`.
    pub fn join(key: (u64, u64), oflags: c_int) -> Result<Registry, c_int> {
        let me = me().ok_or(libc::ENOSYS)?;
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let path = format!("/dev/shm/rsw-xrcd-{uid}-{:x}-{:x}", key.0, key.1);
        sweep(uid, &path);
        let r = loop {
            let fd = rustix::fs::open(
                path.as_str(),
                rustix::fs::OFlags::RDWR
                    | rustix::fs::OFlags::CREATE
                    | rustix::fs::OFlags::CLOEXEC
                    | rustix::fs::OFlags::NOFOLLOW,
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .map_err(io_errno)?;
            rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive).map_err(io_errno)?;
            let st = rustix::fs::fstat(&fd).map_err(io_errno)?;
            if st.st_nlink == 0 {
                // The last member removed it while we waited: a new one.
                continue;
            }
            if st.st_uid != uid {
                return Err(libc::EACCES);
            }
            if (st.st_size as usize) < LEN {
                rustix::fs::ftruncate(&fd, LEN as u64).map_err(io_errno)?;
            }
            let map = Mapping::map(fd.as_fd(), LEN, true)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
            break Registry {
                fd,
                path: path.clone(),
                map,
                me,
                joined: false,
                threads: parking_lot::Mutex::new(()),
            };
        };
        // Locked above: adopt the lock.
        let g = Locked {
            reg: &r,
            _threads: r.threads.lock(),
        };
        let h = r.hdr();
        if h.magic.load(Ordering::Relaxed) != MAGIC {
            // Numbers are the domain's: two domains (even in one process)
            // may use the same ones (`srq::by_number` looks them up per
            // domain).
            h.next_srqn.store(1, Ordering::Relaxed);
            h.magic.store(MAGIC, Ordering::Relaxed);
        }
        r.prune();
        let live = r
            .members()
            .iter()
            .filter(|m| m.pid.load(Ordering::Relaxed) != 0)
            .count();
        let err = if live > 0 && oflags & libc::O_EXCL != 0 {
            Some(libc::EINVAL)
        } else if live == 0 && oflags & libc::O_CREAT == 0 {
            Some(libc::EAGAIN)
        } else {
            None
        };
        let slot = r
            .members()
            .iter()
            .find(|m| m.pid.load(Ordering::Relaxed) == 0);
        let err = match (err, slot) {
            (Some(e), _) => Some(e),
            (None, None) => Some(libc::ENOMEM),
            (None, Some(m)) => {
                m.start.store(me.start, Ordering::Relaxed);
                m.pid.store(me.pid, Ordering::Relaxed);
                None
            }
        };
        if let Some(e) = err {
            if live == 0 {
                let _ = std::fs::remove_file(&r.path);
            }
            drop(g);
            return Err(e);
        }
        drop(g);
        let mut r = r;
        r.joined = true;
        Ok(r)
    }

    fn lock(&self) -> Locked<'_> {
        let threads = self.threads.lock();
        let _ = rustix::fs::flock(&self.fd, rustix::fs::FlockOperation::LockExclusive);
        Locked {
            reg: self,
            _threads: threads,
        }
    }

    fn hdr(&self) -> &Hdr {
        // SAFETY: the header starts the page-aligned mapping of LEN bytes.
        unsafe { &*(self.map.base as *const Hdr) }
    }

    fn members(&self) -> &[Member] {
        // SAFETY: MEMBERS slots at MEMBERS_AT, inside the mapping, aligned.
        unsafe {
            std::slice::from_raw_parts(self.map.base.add(MEMBERS_AT) as *const Member, MEMBERS)
        }
    }

    fn srqs(&self) -> &[SrqSlot] {
        // SAFETY: as for `members`.
        unsafe { std::slice::from_raw_parts(self.map.base.add(SRQS_AT) as *const SrqSlot, SRQS) }
    }

    fn qps(&self) -> &[QpSlot] {
        // SAFETY: as for `members`.
        unsafe { std::slice::from_raw_parts(self.map.base.add(QPS_AT) as *const QpSlot, QPS) }
    }

    /// The count of changes to the SRQ entries (see `Hdr::gen`).
    pub fn generation(&self) -> u64 {
        self.hdr().gen.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.hdr().gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Forgets dead members and what they owned (under the lock).
    fn prune(&self) {
        let owner = |pid: &AtomicU32, start: &AtomicU64| Proc {
            pid: pid.load(Ordering::Relaxed),
            start: start.load(Ordering::Relaxed),
        };
        for m in self.members() {
            let p = owner(&m.pid, &m.start);
            if p.pid != 0 && p != self.me && !alive(p) {
                m.pid.store(0, Ordering::Relaxed);
            }
        }
        let member = |p: Proc| {
            self.members()
                .iter()
                .any(|m| owner(&m.pid, &m.start) == p && p.pid != 0)
        };
        for s in self.srqs() {
            if s.num.load(Ordering::Relaxed) != 0 && !member(owner(&s.owner_pid, &s.owner_start)) {
                s.num.store(0, Ordering::Relaxed);
                self.changed();
            }
        }
        for q in self.qps() {
            if q.qpn.load(Ordering::Relaxed) != 0 && !member(owner(&q.owner_pid, &q.owner_start)) {
                q.qpn.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Registers one of our XRC SRQs under a new domain-wide number.
    pub fn add_srq(&self, e: &SrqEntry) -> Option<u32> {
        let _g = self.lock();
        self.prune();
        let slot = self
            .srqs()
            .iter()
            .find(|s| s.num.load(Ordering::Relaxed) == 0)?;
        let h = self.hdr();
        let num = loop {
            let n = h.next_srqn.fetch_add(1, Ordering::Relaxed) & (SHARED_SRQN - 1);
            let n = n | SHARED_SRQN;
            if n != SHARED_SRQN
                && !self
                    .srqs()
                    .iter()
                    .any(|s| s.num.load(Ordering::Relaxed) == n)
            {
                break n;
            }
        };
        slot.owner_pid.store(self.me.pid, Ordering::Relaxed);
        slot.owner_start.store(self.me.start, Ordering::Relaxed);
        let (fd, token) = e.table.unwrap_or((u32::MAX, 0));
        slot.tbl_fd.store(fd, Ordering::Relaxed);
        slot.tbl_token.store(token, Ordering::Relaxed);
        slot.pd.store(e.pd, Ordering::Relaxed);
        slot.mbox
            .store(e.mbox.map_or(0, |o| o + 1), Ordering::Relaxed);
        slot.kick_fd
            .store(e.kick_fd.map_or(0, |f| f + 1), Ordering::Relaxed);
        slot.num.store(num, Ordering::Relaxed);
        self.changed();
        Some(num)
    }

    /// Withdraws one of our SRQs (its ring is no longer reachable).
    pub fn remove_srq(&self, num: u32) {
        let _g = self.lock();
        for s in self.srqs() {
            if s.num.load(Ordering::Relaxed) == num
                && s.owner_pid.load(Ordering::Relaxed) == self.me.pid
            {
                s.num.store(0, Ordering::Relaxed);
                self.changed();
            }
        }
    }

    /// The live SRQ numbered `num` in another member process.
    pub fn find_srq(&self, num: u32) -> Option<SrqEntry> {
        let _g = self.lock();
        self.prune();
        let s = self
            .srqs()
            .iter()
            .find(|s| s.num.load(Ordering::Relaxed) == num)?;
        let owner = Proc {
            pid: s.owner_pid.load(Ordering::Relaxed),
            start: s.owner_start.load(Ordering::Relaxed),
        };
        if owner == self.me {
            return None;
        }
        let fd = s.tbl_fd.load(Ordering::Relaxed);
        Some(SrqEntry {
            num,
            owner,
            table: (fd != u32::MAX).then(|| (fd, s.tbl_token.load(Ordering::Relaxed))),
            pd: s.pd.load(Ordering::Relaxed),
            mbox: s.mbox.load(Ordering::Relaxed).checked_sub(1),
            kick_fd: s.kick_fd.load(Ordering::Relaxed).checked_sub(1),
        })
    }

    /// Registers (or updates the state of) one of our XRC receive QPs.
    pub fn set_qp(&self, qpn: u32, state: u32) {
        let _g = self.lock();
        let qps = self.qps();
        let slot = qps
            .iter()
            .find(|q| {
                q.qpn.load(Ordering::Relaxed) == qpn
                    && q.owner_pid.load(Ordering::Relaxed) == self.me.pid
            })
            .or_else(|| qps.iter().find(|q| q.qpn.load(Ordering::Relaxed) == 0));
        let Some(q) = slot else {
            log::warn!(
                "xrcd registry full: receive QP {qpn:#x} cannot be opened by other processes"
            );
            return;
        };
        q.owner_pid.store(self.me.pid, Ordering::Relaxed);
        q.owner_start.store(self.me.start, Ordering::Relaxed);
        q.state.store(state, Ordering::Relaxed);
        q.qpn.store(qpn, Ordering::Relaxed);
    }

    pub fn remove_qp(&self, qpn: u32) {
        let _g = self.lock();
        for q in self.qps() {
            if q.qpn.load(Ordering::Relaxed) == qpn
                && q.owner_pid.load(Ordering::Relaxed) == self.me.pid
            {
                q.qpn.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The state of another member's receive QP `qpn`, if it exists.
    pub fn find_qp(&self, qpn: u32) -> Option<u32> {
        let _g = self.lock();
        self.prune();
        self.qps()
            .iter()
            .find(|q| {
                q.qpn.load(Ordering::Relaxed) == qpn
                    && q.owner_pid.load(Ordering::Relaxed) != self.me.pid
            })
            .map(|q| q.state.load(Ordering::Relaxed))
    }
}

/// Removes the registries of domains whose processes all exited without
/// closing them (nobody else would: their files may never be opened
/// again). Skips any another process holds locked.
fn sweep(uid: u32, keep: &str) {
    let prefix = format!("rsw-xrcd-{uid}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for ent in dir.flatten() {
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = format!("/dev/shm/{name}");
        if !name.starts_with(&prefix) || path == keep {
            continue;
        }
        let Ok(fd) = rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::empty(),
        ) else {
            continue;
        };
        if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        if rustix::fs::fstat(&fd).is_ok_and(|st| st.st_nlink == 0) {
            continue;
        }
        let mut b = vec![0u8; MEMBERS * size_of::<Member>()];
        if rustix::io::pread(&fd, &mut b, MEMBERS_AT as u64) != Ok(b.len()) {
            continue;
        }
        let live = b.chunks_exact(size_of::<Member>()).any(|m| {
            let pid = u32::from_ne_bytes([m[0], m[1], m[2], m[3]]);
            let mut st = [0u8; 8];
            st.copy_from_slice(&m[8..16]);
            alive(Proc {
                pid,
                start: u64::from_ne_bytes(st),
            })
        });
        if !live {
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for Registry {
    /// Leaves the domain: our SRQs and QPs go with us; the last member
    /// removes the file.
    fn drop(&mut self) {
        // A forked child's copy is not the member.
        if !self.joined || std::process::id() != self.me.pid {
            return;
        }
        let g = self.lock();
        // One slot: a domain closed and opened again at once in this
        // process may have joined a second time meanwhile.
        if let Some(m) = self.members().iter().find(|m| {
            m.pid.load(Ordering::Relaxed) == self.me.pid
                && m.start.load(Ordering::Relaxed) == self.me.start
        }) {
            m.pid.store(0, Ordering::Relaxed);
        }
        self.prune();
        if self
            .members()
            .iter()
            .all(|m| m.pid.load(Ordering::Relaxed) == 0)
        {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_read() {
        let m = me().expect("/proc/self/stat");
        assert!(alive(m));
        assert!(!alive(Proc {
            pid: m.pid,
            start: m.start + 1
        }));
    }
}
