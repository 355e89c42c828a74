//! The same-host path: a requester whose peer runs on this host moves
//! one-sided payload itself, once, straight between the two processes'
//! registered buffers (`process_vm_writev`/`readv`), with no work and no
//! wake-up at the target, as a NIC would.
//!
//! The target cannot be asked whether an access is allowed (that would need
//! its CPU), so every process publishes what its responder would check in a
//! memfd its peers map read-only: its QPs (PD, access flags, whether the QP
//! accepts requests) by QP number, and its memory keys (range, access, PD)
//! in an open-addressed table. Each slot is a seqlock: the owner writes it
//! under its own table locks; a reader retries while a write is in progress
//! and gives up (falling back to TCP) after a bounded number of tries.
//!
//! The responder offers the table (its pid, the memfd's descriptor number,
//! and a random token stored in the table) on the TCP connection when the
//! requester's address is its own. The requester opens it through
//! `/proc/<pid>/fd/<n>`, which needs the same ptrace permission as
//! `process_vm_writev` itself, so when the kernel refuses cross-process
//! access (Yama, another user or PID namespace, seccomp) the connection
//! simply stays on TCP. Any access the table does not clearly allow (an
//! unknown key, a memory window, a failed copy) also goes over TCP, whose
//! responder gives the exact error status; the direct path only ever takes
//! the accesses that succeed.
//!
//! `RSW_TRANSPORT=tcp` turns the path off; `local` (or `shm`) asks for it
//! and warns when a same-host connection cannot use it; `auto` (the
//! default) uses it when it can.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use verbs_abi::IBV_ACCESS_LOCAL_WRITE;
use verbs_rt::ForkFresh;

use super::shm::{enabled, Mapping};
use crate::util::iov;

/// QP numbers are 16-bit (a listener's TCP port), so QPs are slots by
/// number.
const QP_SLOTS: usize = 1 << 16;
/// Memory keys: open addressing over this many slots.
const KEY_SLOTS: usize = 1 << 20;
/// Longest probe sequence for a key; an MR that finds no slot within it is
/// simply not published (accesses to it go over TCP).
const MAX_PROBE: usize = 32;
/// A key slot that held a key since removed.
const TOMBSTONE: u32 = 0x8000_0000;
/// How many times a reader retries a slot being written.
const READ_TRIES: usize = 64;

const MAGIC: u64 = u64::from_le_bytes(*b"RSWLOCL5");
const HEADER_LEN: usize = 4096;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    token: AtomicU64,
    pid: AtomicU64,
    /// Where the owner mapped the table: a peer reads the magic there
    /// through `process_vm_readv` to prove the copies are allowed.
    base: AtomicU64,
    /// The mailbox file's descriptor in the owner (`u64::MAX`: none).
    mbox_fd: AtomicU64,
}

#[repr(C)]
struct QpSlot {
    seq: AtomicU32,
    pd: AtomicU32,
    access: AtomicU32,
    /// Whether the QP's responder accepts requests: [`RECEIVING`] in RTS
    /// or SQD, [`RECEIVING_RTR`] in RTR, 0 otherwise.
    open: AtomicU32,
    /// The QP's mailbox (`transport::mailbox`): offset in the mailbox
    /// file plus one, 0 for none. Not seqlocked: set before the QP first
    /// opens, cleared when it is destroyed.
    mbox: AtomicU64,
    /// Its `min_rnr_timer`: how long a same-host SEND waits per RNR
    /// retry, as its responder would make it wait.
    rnr_timer: AtomicU32,
    /// The PD of its shared receive queue, if it has one (receive
    /// buffers are checked against it).
    srq_pd: AtomicU32,
    /// Its shared receive queue's mailbox, whose receive ring SENDs take
    /// from (offset plus one, 0 for none: then its own mailbox's ring).
    /// Set before the QP first opens; an SRQ that stops sharing closes its
    /// ring instead.
    srq_box: AtomicU64,
}

#[repr(C)]
struct KeySlot {
    seq: AtomicU32,
    key: AtomicU32,
    pd: AtomicU32,
    access: AtomicU32,
    iova: AtomicU64,
    host: AtomicU64,
    len: AtomicU64,
    _pad: AtomicU64,
}

const QP_AREA: usize = QP_SLOTS * size_of::<QpSlot>();
const KEY_AREA: usize = KEY_SLOTS * size_of::<KeySlot>();
const TABLE_LEN: usize = HEADER_LEN + QP_AREA + KEY_AREA;

impl Mapping {
    fn header(&self) -> &Header {
        // SAFETY: the header is at the start of the mapping, which holds
        // TABLE_LEN bytes and is page-aligned.
        unsafe { &*(self.base as *const Header) }
    }

    fn qp(&self, qpn: u32) -> Option<&QpSlot> {
        let i = qpn as usize;
        if i >= QP_SLOTS {
            return None;
        }
        // SAFETY: slot i of the QP area, inside the mapping, aligned.
        Some(unsafe { &*(self.base.add(HEADER_LEN) as *const QpSlot).add(i) })
    }

    fn key(&self, i: usize) -> &KeySlot {
        // SAFETY: i is masked to the key area by every caller; aligned.
        unsafe {
            &*(self.base.add(HEADER_LEN + QP_AREA) as *const KeySlot).add(i & (KEY_SLOTS - 1))
        }
    }
}

/// Begins a seqlock write.
fn write_begin(seq: &AtomicU32) -> u32 {
    let s = seq.load(Ordering::Relaxed).wrapping_add(1);
    seq.store(s, Ordering::Relaxed);
    fence(Ordering::Release);
    s
}

fn write_end(seq: &AtomicU32, s: u32) {
    seq.store(s.wrapping_add(1), Ordering::Release);
}

/// Reads a slot consistently (`f` loads its fields), or None while a
/// writer keeps it busy.
fn read_slot<T>(seq: &AtomicU32, f: impl Fn() -> T) -> Option<T> {
    for _ in 0..READ_TRIES {
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let v = f();
        fence(Ordering::Acquire);
        if seq.load(Ordering::Relaxed) == s1 {
            return Some(v);
        }
    }
    None
}

// ---- our table ----------------------------------------------------------------------

/// This process's published table.
pub struct Ours {
    fd: std::os::fd::OwnedFd,
    map: Mapping,
    token: u64,
}

static OURS: ForkFresh<Option<Ours>> = ForkFresh::new(create);

fn create() -> Option<Ours> {
    if !enabled() {
        return None;
    }
    let fd = rustix::fs::memfd_create(c"rsw-local", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
    rustix::fs::ftruncate(&fd, TABLE_LEN as u64).ok()?;
    let map = Mapping::map(std::os::fd::AsFd::as_fd(&fd), TABLE_LEN, true).ok()?;
    let mut t = [0u8; 8];
    // SAFETY: the buffer is 8 writable bytes.
    let got = unsafe { libc::getrandom(t.as_mut_ptr() as *mut libc::c_void, 8, 0) };
    let token = if got == 8 {
        u64::from_ne_bytes(t)
    } else {
        crate::util::wall_ns() ^ 0x5eed_5eed_5eed_5eed
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let h = map.header();
    h.token.store(token, Ordering::Relaxed);
    h.pid.store(pid, Ordering::Relaxed);
    h.base.store(map.base as u64, Ordering::Relaxed);
    let mbox_fd = super::mailbox::file_fd().map_or(u64::MAX, |fd| fd as u64);
    h.mbox_fd.store(mbox_fd, Ordering::Relaxed);
    h.magic.store(MAGIC, Ordering::Release);
    Some(Ours { fd, map, token })
}

fn ours() -> Option<&'static Ours> {
    OURS.get().as_ref()
}

/// What the responder offers a same-host requester: pid, descriptor
/// number, token.
pub fn offer() -> Option<(u64, u32, u64)> {
    use std::os::fd::AsRawFd;
    let o = ours()?;
    Some((
        o.map.header().pid.load(Ordering::Relaxed),
        o.fd.as_raw_fd() as u32,
        o.token,
    ))
}

/// Publishes a QP's responder state (`open`: it accepts requests).
pub const RECEIVING: u32 = 1;
/// Receiving in RTR: its first request raises `IBV_EVENT_COMM_EST`, so a
/// same-host requester rings it (it may not be polling).
pub const RECEIVING_RTR: u32 = 2;

/// Where a QP's SENDs land, for [`publish_qp`]: its mailbox (offset), and
/// for a QP on a shared receive queue, the SRQ's PD and mailbox.
#[derive(Clone, Copy, Default)]
pub struct Boxes {
    pub own: Option<u64>,
    pub srq: Option<(u32, u64)>,
}

pub fn publish_qp(qpn: u32, pd: u32, access: u32, open: u32, boxes: Boxes, rnr_timer: u8) {
    let Some(o) = ours() else { return };
    let Some(s) = o.map.qp(qpn) else { return };
    s.rnr_timer.store(rnr_timer as u32, Ordering::Relaxed);
    s.srq_pd
        .store(boxes.srq.map_or(0, |(pd, _)| pd), Ordering::Relaxed);
    s.srq_box
        .store(boxes.srq.map_or(0, |(_, off)| off + 1), Ordering::Release);
    s.mbox
        .store(boxes.own.map_or(0, |off| off + 1), Ordering::Release);
    if s.pd.load(Ordering::Relaxed) == pd
        && s.access.load(Ordering::Relaxed) == access
        && s.open.load(Ordering::Relaxed) == open
    {
        return;
    }
    let q = write_begin(&s.seq);
    s.pd.store(pd, Ordering::Relaxed);
    s.access.store(access, Ordering::Relaxed);
    s.open.store(open, Ordering::Relaxed);
    write_end(&s.seq, q);
}

/// A key's published fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyEntry {
    pub pd: u32,
    pub access: u32,
    pub iova: u64,
    pub host: u64,
    pub len: u64,
}

fn write_key(s: &KeySlot, key: u32, e: &KeyEntry) {
    let q = write_begin(&s.seq);
    s.key.store(key, Ordering::Relaxed);
    s.pd.store(e.pd, Ordering::Relaxed);
    s.access.store(e.access, Ordering::Relaxed);
    s.iova.store(e.iova, Ordering::Relaxed);
    s.host.store(e.host, Ordering::Relaxed);
    s.len.store(e.len, Ordering::Relaxed);
    write_end(&s.seq, q);
}

/// Publishes (or updates) a memory key. The caller serialises writers
/// (the key table's write lock).
pub fn publish_key(key: u32, e: &KeyEntry) {
    let Some(o) = ours() else { return };
    let mut free = None;
    for i in 0..MAX_PROBE {
        let s = o.map.key(key as usize + i);
        match s.key.load(Ordering::Relaxed) {
            k if k == key => return write_key(s, key, e),
            0 => {
                free.get_or_insert(s);
                break;
            }
            TOMBSTONE => {
                free.get_or_insert(s);
            }
            _ => {}
        }
    }
    if let Some(s) = free {
        write_key(s, key, e);
    }
}

/// Withdraws a memory key (before its registration goes away).
pub fn withdraw_key(key: u32) {
    let Some(o) = ours() else { return };
    for i in 0..MAX_PROBE {
        let s = o.map.key(key as usize + i);
        match s.key.load(Ordering::Relaxed) {
            k if k == key => {
                let q = write_begin(&s.seq);
                s.key.store(TOMBSTONE, Ordering::Relaxed);
                s.len.store(0, Ordering::Relaxed);
                write_end(&s.seq, q);
                return;
            }
            0 => return,
            _ => {}
        }
    }
}

// ---- a peer's table -----------------------------------------------------------------

/// A same-host peer process's table, mapped read-only; shared by every
/// connection to that process.
pub struct Peer {
    pid: libc::pid_t,
    token: u64,
    map: Mapping,
    /// Its mailbox file, mapped read-write (`transport::mailbox`).
    mbox: Option<Mapping>,
}

static PEERS: ForkFresh<Mutex<Vec<Weak<Peer>>>> = ForkFresh::new(|| Mutex::new(Vec::new()));

impl Peer {
    /// Opens the table a responder offered, if the kernel lets us reach
    /// that process at all.
    pub fn open(pid: u64, fd: u32, token: u64) -> Result<Arc<Peer>, String> {
        let pid = libc::pid_t::try_from(pid).map_err(|_| "bad pid".to_string())?;
        let mut peers = PEERS.get().lock();
        peers.retain(|w| w.strong_count() > 0);
        if let Some(p) = peers
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| p.pid == pid && p.token == token)
        {
            return Ok(p);
        }
        let path = format!("/proc/{pid}/fd/{fd}");
        let f = rustix::fs::open(
            &path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("{path}: {e}"))?;
        let st = rustix::fs::fstat(&f).map_err(|e| e.to_string())?;
        if (st.st_size as usize) < TABLE_LEN {
            return Err(format!("{path}: not a table"));
        }
        let map = Mapping::map(std::os::fd::AsFd::as_fd(&f), TABLE_LEN, false)
            .map_err(|e| e.to_string())?;
        let h = map.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.token.load(Ordering::Relaxed) != token
            || h.pid.load(Ordering::Relaxed) != pid as u64
        {
            return Err(format!("{path}: token mismatch"));
        }
        let base = h.base.load(Ordering::Relaxed);
        let mbox = match h.mbox_fd.load(Ordering::Relaxed) {
            u64::MAX => None,
            fd => {
                let path = format!("/proc/{pid}/fd/{fd}");
                rustix::fs::open(
                    &path,
                    rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok()
                .filter(|f| {
                    rustix::fs::fstat(f)
                        .is_ok_and(|st| st.st_size as usize >= super::mailbox::FILE_LEN)
                })
                .and_then(|f| {
                    Mapping::map(std::os::fd::AsFd::as_fd(&f), super::mailbox::FILE_LEN, true).ok()
                })
            }
        };
        let p = Arc::new(Peer {
            pid,
            token,
            map,
            mbox,
        });
        // Opening the descriptor needs less than the copies (Yama, for
        // one, only restricts attaching): prove a copy works.
        let mut magic = [0u8; 8];
        let v = [crate::util::iov(magic.as_mut_ptr(), 8)];
        // SAFETY: the iovec covers our stack buffer.
        if !unsafe { p.read(&v, base, 8) } || u64::from_ne_bytes(magic) != MAGIC {
            return Err(format!(
                "process_vm_readv of pid {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        peers.push(Arc::downgrade(&p));
        Ok(p)
    }

    /// The host address in the peer for a remote access by QP `qpn` with
    /// `rkey`, if the peer's responder would allow it.
    pub fn check(&self, qpn: u32, rkey: u32, addr: u64, len: u64, need: u32) -> Option<u64> {
        let (pd, access) = self.open_qp(qpn)?;
        if access & need != need {
            return None;
        }
        self.translate(rkey, addr, len, pd, need)
    }

    /// The PD and access flags of the peer's QP `qpn`, if it receives.
    fn open_qp(&self, qpn: u32) -> Option<(u32, u32)> {
        self.receiving(qpn).map(|(pd, access, _)| (pd, access))
    }

    /// Whether the peer's QP `qpn` accepts requests.
    pub fn receives(&self, qpn: u32) -> bool {
        self.receiving(qpn).is_some()
    }

    /// Whether the peer's QP `qpn` is in RTR (see [`RECEIVING_RTR`]).
    pub fn in_rtr(&self, qpn: u32) -> bool {
        self.receiving(qpn)
            .is_some_and(|(_, _, open)| open == RECEIVING_RTR)
    }

    /// The PD, access flags and state code of the peer's QP `qpn`, if it
    /// receives.
    fn receiving(&self, qpn: u32) -> Option<(u32, u32, u32)> {
        let s = self.map.qp(qpn)?;
        let (pd, access, open) = read_slot(&s.seq, || {
            (
                s.pd.load(Ordering::Relaxed),
                s.access.load(Ordering::Relaxed),
                s.open.load(Ordering::Relaxed),
            )
        })?;
        matches!(open, RECEIVING | RECEIVING_RTR).then_some((pd, access, open))
    }

    /// The PD of the peer's QP `qpn` (if it receives), whether it is in
    /// RTR, and its mailbox.
    pub fn mailbox(&self, qpn: u32) -> Option<(u32, bool, super::mailbox::Target)> {
        let (pd, _, open) = self.receiving(qpn)?;
        let slot = self.map.qp(qpn)?;
        let off = slot.mbox.load(Ordering::Acquire).checked_sub(1)?;
        let file = self.mbox.as_ref()?;
        let own = super::mailbox::PeerBox::at(file, off)?;
        let (pd, srq) = match slot.srq_box.load(Ordering::Acquire).checked_sub(1) {
            None => (pd, None),
            Some(off) => (
                slot.srq_pd.load(Ordering::Relaxed),
                Some(super::mailbox::PeerBox::at(file, off)?),
            ),
        };
        Some((
            pd,
            open == RECEIVING_RTR,
            super::mailbox::Target { own, srq },
        ))
    }

    /// The lock word the peer's atomics take (`transport::atomics`), if
    /// its mailbox file is mapped.
    pub fn atomic_word(&self) -> Option<&super::atomics::Lock> {
        self.mbox.as_ref().map(super::mailbox::atomic_word)
    }

    /// The mailbox at `off` in the peer's file (an XRC SRQ's, found in
    /// its domain's registry).
    pub fn mailbox_at(&self, off: u64) -> Option<super::mailbox::PeerBox> {
        super::mailbox::PeerBox::at(self.mbox.as_ref()?, off)
    }

    /// The peer's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The peer QP's `min_rnr_timer`.
    pub fn rnr_timer(&self, qpn: u32) -> u8 {
        self.map
            .qp(qpn)
            .map_or(0, |s| s.rnr_timer.load(Ordering::Relaxed) as u8)
    }

    /// The host address in the peer of a receive buffer (`lkey` of PD
    /// `pd`, locally writable), as its responder would check it.
    pub fn local_buffer(&self, lkey: u32, addr: u64, len: u64, pd: u32) -> Option<u64> {
        self.translate(lkey, addr, len, pd, IBV_ACCESS_LOCAL_WRITE)
    }

    /// A key of PD `pd` with rights `need` covering `[addr, addr + len)`.
    fn translate(&self, rkey: u32, addr: u64, len: u64, pd: u32, need: u32) -> Option<u64> {
        if rkey & TOMBSTONE != 0 || rkey == 0 {
            return None;
        }
        for i in 0..MAX_PROBE {
            let k = self.map.key(rkey as usize + i);
            let e = read_slot(&k.seq, || {
                (
                    k.key.load(Ordering::Relaxed),
                    KeyEntry {
                        pd: k.pd.load(Ordering::Relaxed),
                        access: k.access.load(Ordering::Relaxed),
                        iova: k.iova.load(Ordering::Relaxed),
                        host: k.host.load(Ordering::Relaxed),
                        len: k.len.load(Ordering::Relaxed),
                    },
                )
            })?;
            match e {
                (0, _) => return None,
                (key, e) if key == rkey => {
                    if e.pd != pd || e.access & need != need {
                        return None;
                    }
                    let off = addr.checked_sub(e.iova)?;
                    if off > e.len || len > e.len - off {
                        return None;
                    }
                    return e.host.checked_add(off);
                }
                _ => {}
            }
        }
        None
    }

    /// Copies between our `local` iovecs and the peer's `remote` ones
    /// (into the peer when `write`); true when all `len` bytes moved.
    ///
    /// # Safety
    /// Every local iovec must describe memory of ours, readable for a
    /// write, writable for a read, for the call.
    unsafe fn vm_copy(
        &self,
        write: bool,
        local: &[libc::iovec],
        remote: &[libc::iovec],
        len: usize,
    ) -> bool {
        let f = if write {
            libc::process_vm_writev
        } else {
            libc::process_vm_readv
        };
        // SAFETY: the caller vouches for the local iovecs; the remote ones
        // are checked by the kernel against the peer's address space.
        let n = unsafe {
            f(
                self.pid,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        n == len as isize
    }

    /// Copies our iovecs to the peer's `remote` iovecs.
    ///
    /// # Safety
    /// As [`Peer::vm_copy`].
    pub unsafe fn write_v(
        &self,
        local: &[libc::iovec],
        remote: &[libc::iovec],
        len: usize,
    ) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.vm_copy(true, local, remote, len) }
    }

    /// Copies the peer's `remote` iovecs into ours.
    ///
    /// # Safety
    /// As [`Peer::vm_copy`].
    pub unsafe fn read_v(&self, local: &[libc::iovec], remote: &[libc::iovec], len: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.vm_copy(false, local, remote, len) }
    }

    /// Copies `len` bytes at `remote` in the peer into our iovecs.
    ///
    /// # Safety
    /// As [`Peer::vm_copy`].
    pub unsafe fn read(&self, local: &[libc::iovec], remote: u64, len: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.vm_copy(false, local, &[iov(remote as *const u8, len)], len) }
    }
}

/// One-sided operations done over the same-host path, process-wide (for
/// tests and statistics).
static DIRECT_OPS: AtomicU64 = AtomicU64::new(0);

pub fn direct_ops() -> u64 {
    DIRECT_OPS.load(Ordering::Relaxed)
}

pub(crate) fn count_direct() {
    DIRECT_OPS.fetch_add(1, Ordering::Relaxed);
}

/// Batches of atomics the same-host path did (each costs its two
/// syscalls), process-wide.
static ATOMIC_BATCHES: AtomicU64 = AtomicU64::new(0);

pub fn atomic_batches() -> u64 {
    ATOMIC_BATCHES.load(Ordering::Relaxed)
}

pub(crate) fn count_atomic_batch() {
    ATOMIC_BATCHES.fetch_add(1, Ordering::Relaxed);
}

/// Doorbells the same-host path rang (a header on the connection after a
/// direct delivery), process-wide: they cost a syscall at each end.
static DOORBELLS: AtomicU64 = AtomicU64::new(0);

pub fn doorbells() -> u64 {
    DOORBELLS.load(Ordering::Relaxed)
}

pub(crate) fn count_doorbell() {
    DOORBELLS.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_abi::*;

    #[test]
    fn publish_check_withdraw() {
        let Some((pid, fd, token)) = offer() else {
            return; // RSW_TRANSPORT=tcp
        };
        let p = Peer::open(pid, fd, token).expect("own table opens");
        publish_qp(
            4242,
            7,
            IBV_ACCESS_REMOTE_WRITE,
            RECEIVING,
            Boxes::default(),
            0,
        );
        let e = KeyEntry {
            pd: 7,
            access: IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
            iova: 0x1000,
            host: 0x7000_0000,
            len: 0x100,
        };
        publish_key(0x1234, &e);
        let w = IBV_ACCESS_REMOTE_WRITE;
        assert_eq!(p.check(4242, 0x1234, 0x1010, 0x10, w), Some(0x7000_0010));
        assert_eq!(p.check(4242, 0x1234, 0x1000, 0x100, w), Some(0x7000_0000));
        assert_eq!(
            p.check(4242, 0x1234, 0x1000, 0x101, w),
            None,
            "past the end"
        );
        assert_eq!(p.check(4242, 0x1234, 0xfff, 1, w), None, "before the start");
        assert_eq!(
            p.check(4242, 0x1234, 0x1000, 1, IBV_ACCESS_REMOTE_READ),
            None
        );
        assert_eq!(p.check(4243, 0x1234, 0x1000, 1, w), None, "closed QP");
        assert_eq!(p.check(4242, 0x1235, 0x1000, 1, w), None, "unknown key");
        publish_qp(
            4242,
            8,
            IBV_ACCESS_REMOTE_WRITE,
            RECEIVING,
            Boxes::default(),
            0,
        );
        assert_eq!(p.check(4242, 0x1234, 0x1000, 1, w), None, "other PD");
        publish_qp(4242, 7, IBV_ACCESS_REMOTE_WRITE, 0, Boxes::default(), 0);
        assert_eq!(
            p.check(4242, 0x1234, 0x1000, 1, w),
            None,
            "QP not accepting"
        );
        publish_qp(
            4242,
            7,
            IBV_ACCESS_REMOTE_WRITE,
            RECEIVING,
            Boxes::default(),
            0,
        );
        // A key colliding in the same slot lands after it; withdrawing the
        // first leaves the second reachable.
        let k2 = 0x1234 + KEY_SLOTS as u32;
        publish_key(
            k2,
            &KeyEntry {
                host: 0x9000_0000,
                ..e
            },
        );
        withdraw_key(0x1234);
        assert_eq!(p.check(4242, 0x1234, 0x1000, 1, w), None, "withdrawn");
        assert_eq!(p.check(4242, k2, 0x1000, 1, w), Some(0x9000_0000));
        // Re-publishing reuses the tombstone.
        publish_key(0x1234, &e);
        assert_eq!(p.check(4242, 0x1234, 0x1000, 1, w), Some(0x7000_0000));
        withdraw_key(0x1234);
        withdraw_key(k2);
        publish_qp(4242, 0, 0, 0, Boxes::default(), 0);
        assert!(Peer::open(pid, fd, token ^ 1).is_err(), "wrong token");
    }
}
