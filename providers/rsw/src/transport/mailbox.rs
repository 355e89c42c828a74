//! Same-host delivery of SENDs (`transport::local`): each RC/UC QP's
//! receive queue lives in a mailbox, a region of a memfd its process shares
//! with same-host peers, beside a ring of completions. A peer's requester
//! takes the oldest posted receive itself (a compare-and-swap on the
//! queue's head, which the QP's own responder uses too), writes the
//! payload into the receive's buffers with `process_vm_writev`, and leaves
//! the completion in the mailbox; the QP's process moves it to its CQ when
//! it polls (or when its progress thread is told to, for a program waiting
//! on a completion channel). No thread of the target runs on the way, and
//! nothing is copied twice.
//!
//! The head word carries a CLOSED bit the owner sets while the QP is not
//! receiving (not RTR/RTS/SQD): peers never take receives then, the owner
//! still does (flushing them). Regions of destroyed QPs are reused only
//! after a quarantine, so a peer that read the old offset a moment before
//! the destroy cannot scribble over a newer QP's rings.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use verbs_abi::ibv_sge;

const NO_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};
use verbs_rt::ForkFresh;

use super::shm::{self, Mapping};
use crate::device::MAX_SGE;
use crate::util::mono_ns;

/// The mailbox file: sparse; only the pages of live rings are memory.
pub const FILE_LEN: usize = 1 << 34;
const CLOSED: u64 = 1 << 63;
const HDR: usize = 192;
/// A receive slot: wr_id (8), SGE count (4), sequence (4), the SGEs.
const RECV_HDR: usize = 16;
const RECV_SEQ: usize = 12;
const SGE: usize = size_of::<ibv_sge>();
/// A completion slot: the completion (40 bytes), then for a small SEND
/// its receive's first SGE (16) and its payload ([`INLINE_MAX`]).
const CQE: usize = CQE_SGE + 16 + INLINE_MAX;
const CQE_SGE: usize = 40;
/// Where a completion slot's sequence word sits (its tenth u32).
const CQE_SEQ: usize = 36;
/// SENDs up to this size travel inside the completion: the sender makes
/// no syscall, the receiver copies the bytes into its receive when it
/// moves the completion to its CQ.
pub const INLINE_MAX: usize = 80;
const PAGE: u64 = 4096;
/// How long a freed region rests before another QP gets it.
const QUARANTINE_NS: u64 = 2_000_000_000;
/// In the file's first page, after the atomic lock word: whether the
/// owning process issues asymmetric fences (`shm::asym`).
const FILE_ASYM: usize = 64;

/// A slot's sequence word: the ring position it was filled for, plus one
/// (so a zeroed slot is never current), truncated to 32 bits (rings are
/// far smaller).
fn seq_word<'a>(p: *mut u8, at: usize) -> &'a AtomicU32 {
    // SAFETY: `at` is a 4-aligned offset inside a slot of a mapping that
    // outlives the use: ours lives for the process's life, a peer's as
    // long as its `PeerBox`, whose methods alone call this.
    unsafe { &*(p.add(at) as *const AtomicU32) }
}

fn seq_of(pos: u64) -> u32 {
    pos.wrapping_add(1) as u32
}

/// Asks for the cache line at `p` ahead of its use (a hint: any address
/// is allowed, nothing is read).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no state a program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The ring indices and flags, one cache line per writer: the peers that
/// deliver write the first, the owner the second, the third is written
/// rarely. Neither side reads the other's index on its way: a posted
/// receive and a delivered completion each carry their sequence number in
/// their slot, and the room each side needs is checked against a cached
/// copy of the other's index, read again only when that says full. So a
/// message moves only the slots' lines between the cores (on the 2-core
/// Intel VM every line that crossed was a stall of ~0.1 us on the side
/// that needed it, and `ib_send_bw` 2 B reached half its target).
#[repr(C)]
struct Hdr {
    rq_head: AtomicU64,
    cq_tail: AtomicU64,
    _peers: [u8; 48],
    rq_tail: AtomicU64,
    cq_head: AtomicU64,
    _owner: [u8; 48],
    /// The owner waits for completions (its CQ is armed): a peer that
    /// delivers one rings the doorbell (`Op::Doorbell`).
    want_kick: AtomicU32,
    /// A peer's SEND has waited a while for a receive (or for room for
    /// its completion): the owner rings it (`Op::Doorbell` on the
    /// connection) when it posts one or drains.
    rnr_waiting: AtomicU32,
    cap: AtomicU32,
    max_sge: AtomicU32,
    _rare: [u8; 48],
}

const _: () = assert!(size_of::<Hdr>() == HDR);

/// Completion ring slots per receive slot: receives taken but not yet
/// moved to the CQ free their slot, so more can be posted and taken.
const CQ_PER_RQ: usize = 2;

fn recv_entry(max_sge: usize) -> usize {
    RECV_HDR + SGE * max_sge
}

fn region_len(cap: usize, max_sge: usize) -> usize {
    let n = HDR + cap * recv_entry(max_sge) + CQ_PER_RQ * cap * CQE;
    n.div_ceil(PAGE as usize) * PAGE as usize
}

/// A completion a peer left in a mailbox.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    pub wr_id: u64,
    pub byte_len: u32,
    pub imm: u32,
    pub opcode: u32,
    /// `FLAG_*` below.
    pub flags: u32,
    pub status: u32,
    pub src_qp: u32,
    /// The QP that received it, when not the mailbox's own: an XRC
    /// receive QP of another process delivering into an XRC SRQ's ring.
    pub qp_num: u32,
}

pub const FLAG_IMM: u32 = 1;
pub const FLAG_SOLICITED: u32 = 2;
/// The payload is in the slot (`Inline`), for the receive's first SGE.
pub const FLAG_INLINE: u32 = 4;

/// A small SEND's payload and where it goes (the receive's first SGE, as
/// posted: the owner checks it against its own key table).
#[derive(Clone, Copy)]
pub struct Inline {
    pub sge: ibv_sge,
    pub len: usize,
    pub data: [u8; INLINE_MAX],
}

impl Delivered {
    fn write(&self, p: *mut u8, inline: Option<&Inline>) {
        let w = [
            self.wr_id as u32,
            (self.wr_id >> 32) as u32,
            self.byte_len,
            self.imm,
            self.opcode,
            self.flags,
            self.status,
            self.src_qp,
            self.qp_num,
        ];
        for (i, v) in w.iter().enumerate() {
            // SAFETY: p is a CQE slot of CQE bytes in a live mapping,
            // 4-aligned.
            unsafe { std::ptr::write_volatile((p as *mut u32).add(i), *v) };
        }
        if let Some(i) = inline {
            let n = i.len.min(INLINE_MAX);
            // SAFETY: the slot has 16 bytes for the SGE and INLINE_MAX for
            // the payload after the completion; 8-aligned.
            unsafe {
                std::ptr::write_volatile(p.add(CQE_SGE) as *mut ibv_sge, i.sge);
                std::ptr::copy_nonoverlapping(i.data.as_ptr(), p.add(CQE_SGE + 16), n);
            }
        }
    }

    /// The inline payload of a slot whose completion has [`FLAG_INLINE`].
    fn read_inline(p: *const u8, len: usize) -> Inline {
        let mut i = Inline {
            sge: NO_SGE,
            len: len.min(INLINE_MAX),
            data: [0; INLINE_MAX],
        };
        // SAFETY: as in `write`; a peer-written length is clamped above.
        unsafe {
            i.sge = std::ptr::read_volatile(p.add(CQE_SGE) as *const ibv_sge);
            std::ptr::copy_nonoverlapping(p.add(CQE_SGE + 16), i.data.as_mut_ptr(), i.len);
        }
        i
    }

    fn read(p: *const u8) -> Delivered {
        // SAFETY: as in `write`.
        let r = |i: usize| unsafe { std::ptr::read_volatile((p as *const u32).add(i)) };
        Delivered {
            wr_id: r(0) as u64 | (r(1) as u64) << 32,
            byte_len: r(2),
            imm: r(3),
            opcode: r(4),
            flags: r(5),
            status: r(6),
            src_qp: r(7),
            qp_num: r(8),
        }
    }
}

// ---- the file ---------------------------------------------------------------------

struct File {
    fd: OwnedFd,
    map: Mapping,
    alloc: Mutex<Alloc>,
}

#[derive(Default)]
struct Alloc {
    next: u64,
    /// Freed regions: offset, length, when freed.
    free: Vec<(u64, u64, u64)>,
}

static FILE: ForkFresh<Option<File>> = ForkFresh::new(|| {
    if !shm::enabled() {
        return None;
    }
    let fd = rustix::fs::memfd_create(c"rsw-mailbox", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
    rustix::fs::ftruncate(&fd, FILE_LEN as u64).ok()?;
    let map = Mapping::map(fd.as_fd(), FILE_LEN, true).ok()?;
    // SAFETY: the first page is the file's own (see `atomic_word`).
    let asym = unsafe { &*(map.base.add(FILE_ASYM) as *const AtomicU32) };
    asym.store(shm::asym() as u32, Ordering::Release);
    Some(File {
        fd,
        map,
        // The first page is the file's own: its atomic lock word.
        alloc: Mutex::new(Alloc {
            next: PAGE,
            free: Vec::new(),
        }),
    })
});

/// The lock word every atomic targeting this process takes
/// (`transport::atomics`), if the same-host path is on.
pub fn own_atomic_word() -> Option<&'static super::atomics::Lock> {
    FILE.get().as_ref().map(|f| atomic_word(&f.map))
}

/// The atomic lock word of a mailbox file (ours or a peer's) mapped at
/// `map`.
pub(crate) fn atomic_word(map: &Mapping) -> &super::atomics::Lock {
    // SAFETY: the file's first page is reserved for it (no region starts
    // there, FILE_ASYM is past it); the mapping is page-aligned and at
    // least a page long; the lock is two atomic words.
    unsafe { &*(map.base as *const super::atomics::Lock) }
}

/// The mailbox file's descriptor, for the offer.
pub fn file_fd() -> Option<RawFd> {
    FILE.get().as_ref().map(|f| f.fd.as_raw_fd())
}

impl Alloc {
    fn take(&mut self, len: u64) -> Option<u64> {
        let now = mono_ns();
        if let Some(i) = self
            .free
            .iter()
            .position(|&(_, l, at)| l >= len && now.saturating_sub(at) >= QUARANTINE_NS)
        {
            let (off, l, at) = self.free[i];
            if l == len {
                self.free.swap_remove(i);
            } else {
                self.free[i] = (off + len, l - len, at);
            }
            return Some(off);
        }
        if self.next + len > FILE_LEN as u64 {
            return None;
        }
        let off = self.next;
        self.next += len;
        Some(off)
    }
}

// ---- a QP's own mailbox -----------------------------------------------------------

/// A QP's mailbox, owned by its receive queue.
pub struct Mailbox {
    base: *mut u8,
    off: u64,
    len: u64,
    cap: usize,
    max_sge: usize,
    /// The receive ring's head as last read: at most the real one, read
    /// again only when the ring looks full (the line is the peers').
    head_seen: AtomicU64,
}

// SAFETY: the region is only accessed through atomics and volatile copies
// of plain data; it stays mapped for the process's life.
unsafe impl Send for Mailbox {}
// SAFETY: as above.
unsafe impl Sync for Mailbox {}

impl Mailbox {
    /// A mailbox for a receive queue of `cap` WRs of `max_sge` SGEs, or
    /// None (the same-host path off, or no room): the queue stays private.
    pub fn new(cap: usize, max_sge: usize) -> Option<Mailbox> {
        let f = FILE.get().as_ref()?;
        if cap == 0 || max_sge > MAX_SGE as usize {
            return None;
        }
        let len = region_len(cap, max_sge) as u64;
        let off = f.alloc.lock().take(len)?;
        // SAFETY: [off, off + len) lies inside the file's mapping.
        let base = unsafe { f.map.base.add(off as usize) };
        let m = Mailbox {
            base,
            off,
            len,
            cap,
            max_sge,
            head_seen: AtomicU64::new(0),
        };
        let h = m.hdr();
        // Fresh or punched: zero; the ring starts closed.
        h.rq_head.store(CLOSED, Ordering::Relaxed);
        h.rq_tail.store(0, Ordering::Relaxed);
        h.cq_head.store(0, Ordering::Relaxed);
        h.cq_tail.store(0, Ordering::Relaxed);
        h.want_kick.store(0, Ordering::Relaxed);
        h.rnr_waiting.store(0, Ordering::Relaxed);
        h.max_sge.store(max_sge as u32, Ordering::Relaxed);
        h.cap.store(cap as u32, Ordering::Release);
        Some(m)
    }

    /// Where peers find it (offset in the file).
    pub fn offset(&self) -> u64 {
        self.off
    }

    fn hdr(&self) -> &Hdr {
        // SAFETY: the header starts the region, 64-aligned (page-aligned).
        unsafe { &*(self.base as *const Hdr) }
    }

    fn index(&self) -> u64 {
        self.hdr().rq_head.load(Ordering::Acquire) & !CLOSED
    }

    fn tail(&self) -> u64 {
        self.hdr().rq_tail.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.tail().wrapping_sub(self.index()).min(self.cap as u64) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the queue has no room; the head is read from the peers'
    /// line only when the cached one says so.
    pub fn is_full(&self) -> bool {
        let t = self.tail();
        if t.wrapping_sub(self.head_seen.load(Ordering::Relaxed)) < self.cap as u64 {
            return false;
        }
        let head = self.index();
        self.head_seen.store(head, Ordering::Relaxed);
        t.wrapping_sub(head) >= self.cap as u64
    }

    /// Posts a receive (the queue has room; one poster at a time: the
    /// QP's lock). Peers see it by its slot's sequence word.
    pub fn push(&self, wr_id: u64, sges: &[ibv_sge]) {
        let t = self.tail();
        let p = recv_slot(self.base, self.cap, self.max_sge, t);
        write_recv(p, wr_id, sges);
        seq_word(p, RECV_SEQ).store(seq_of(t), Ordering::Release);
        self.hdr().rq_tail.store(t + 1, Ordering::Release);
    }

    /// Whether a peer waits for a receive or for room (and forget it):
    /// after posting or draining, which the peer's re-check then sees
    /// (its `set_rnr_waiting` fences for both of us where it can).
    pub fn take_rnr_waiting(&self) -> bool {
        shm::light_fence(true);
        let h = self.hdr();
        h.rnr_waiting.load(Ordering::Relaxed) != 0 && h.rnr_waiting.swap(0, Ordering::SeqCst) != 0
    }

    /// Whether a peer waits (see `take_rnr_waiting`), without forgetting it.
    pub fn rnr_waiting(&self) -> bool {
        shm::light_fence(true);
        self.hdr().rnr_waiting.load(Ordering::Relaxed) != 0
    }

    /// Takes the oldest receive: `f` gets its wr_id and scatter list;
    /// false when none is posted.
    pub fn take(&self, f: impl FnOnce(u64, &[ibv_sge])) -> bool {
        let h = self.hdr();
        loop {
            let head = h.rq_head.load(Ordering::Acquire);
            let i = head & !CLOSED;
            if i == self.tail() {
                return false;
            }
            let mut sges = [NO_SGE; MAX_SGE as usize];
            let p = recv_slot(self.base, self.cap, self.max_sge, i);
            let (wr_id, n) = read_recv(p, self.max_sge, &mut sges);
            if h.rq_head
                .compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                f(wr_id, &sges[..n]);
                return true;
            }
        }
    }

    /// Forgets every posted receive (reset).
    pub fn clear(&self) {
        let h = self.hdr();
        let mut head = h.rq_head.load(Ordering::Acquire);
        loop {
            let new = (head & CLOSED) | self.tail();
            match h
                .rq_head
                .compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(v) => head = v,
            }
        }
    }

    /// Lets peers take receives (the QP receives) or not.
    pub fn set_open(&self, open: bool) {
        if open {
            self.hdr().rq_head.fetch_and(!CLOSED, Ordering::AcqRel);
        } else {
            self.hdr().rq_head.fetch_or(CLOSED, Ordering::AcqRel);
        }
    }

    /// The oldest completion a peer left, taken off the ring, with its
    /// inline payload if it carries one.
    pub fn pop_completion(&self) -> Option<(Delivered, Option<Inline>)> {
        let h = self.hdr();
        let head = h.cq_head.load(Ordering::Relaxed);
        let p = cqe_slot(self.base, self.cap, self.max_sge, head);
        if seq_word(p, CQE_SEQ).load(Ordering::Acquire) != seq_of(head) {
            return None;
        }
        // The requester is usually ahead: ask for the next two slots now,
        // so their transfers from its core overlap this one's processing
        // instead of each stalling the next pop (`ib_send_bw` 2 B: about
        // 6 % more messages in A/B runs; four ahead, or the requester
        // asking for posted receives ahead, measured no better).
        for k in 1..=2 {
            prefetch(cqe_slot(self.base, self.cap, self.max_sge, head + k));
        }
        let d = Delivered::read(p);
        let inline =
            (d.flags & FLAG_INLINE != 0).then(|| Delivered::read_inline(p, d.byte_len as usize));
        h.cq_head.store(head + 1, Ordering::Release);
        Some((d, inline))
    }

    pub fn has_completions(&self) -> bool {
        let head = self.hdr().cq_head.load(Ordering::Relaxed);
        let p = cqe_slot(self.base, self.cap, self.max_sge, head);
        seq_word(p, CQE_SEQ).load(Ordering::Acquire) == seq_of(head)
    }

    /// Drops undelivered completions (reset).
    pub fn discard_completions(&self) {
        let h = self.hdr();
        h.cq_head
            .store(h.cq_tail.load(Ordering::Acquire), Ordering::Release);
    }

    /// Whether peers should ring the doorbell after delivering. Set (and
    /// fenced for both sides) before the owner checks `has_completions`,
    /// as the peer publishes then checks: one of them sees the other.
    /// Stored only when it changes, so peers keep the line cached.
    pub fn set_want_kick(&self, on: bool) {
        let w = &self.hdr().want_kick;
        if (w.load(Ordering::Relaxed) != 0) == on {
            return;
        }
        w.store(on as u32, Ordering::SeqCst);
        if on {
            shm::heavy_fence();
        }
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        let Some(f) = FILE.get().as_ref() else { return };
        // Give the pages back (they read as zero afterwards).
        let _ = rustix::fs::fallocate(
            &f.fd,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            self.off,
            self.len,
        );
        f.alloc.lock().free.push((self.off, self.len, mono_ns()));
    }
}

fn recv_slot(base: *mut u8, cap: usize, max_sge: usize, seq: u64) -> *mut u8 {
    let i = (seq % cap as u64) as usize;
    // SAFETY: slot i of the receive ring, inside the region.
    unsafe { base.add(HDR + i * recv_entry(max_sge)) }
}

fn cqe_slot(base: *mut u8, cap: usize, max_sge: usize, seq: u64) -> *mut u8 {
    let i = (seq % (CQ_PER_RQ * cap) as u64) as usize;
    // SAFETY: slot i of the completion ring, after the receive ring.
    unsafe { base.add(HDR + cap * recv_entry(max_sge) + i * CQE) }
}

fn write_recv(p: *mut u8, wr_id: u64, sges: &[ibv_sge]) {
    // SAFETY: p is a receive slot with room for max_sge SGEs (the caller
    // passes at most that many); 8-aligned.
    unsafe {
        std::ptr::write_volatile(p as *mut u64, wr_id);
        std::ptr::write_volatile(p.add(8) as *mut u32, sges.len() as u32);
        for (i, s) in sges.iter().enumerate() {
            std::ptr::write_volatile((p.add(RECV_HDR) as *mut ibv_sge).add(i), *s);
        }
    }
}

/// Reads a receive slot (its SGE count clamped: a peer can write the
/// ring); returns the wr_id and how many SGEs `out` got.
fn read_recv(p: *const u8, max_sge: usize, out: &mut [ibv_sge]) -> (u64, usize) {
    // SAFETY: as in `write_recv`.
    unsafe {
        let wr_id = std::ptr::read_volatile(p as *const u64);
        let n = (std::ptr::read_volatile(p.add(8) as *const u32) as usize)
            .min(max_sge)
            .min(out.len());
        for (i, o) in out.iter_mut().enumerate().take(n) {
            *o = std::ptr::read_volatile((p.add(RECV_HDR) as *const ibv_sge).add(i));
        }
        (wr_id, n)
    }
}

// ---- a peer's mailbox -------------------------------------------------------------

/// A peer QP's mailbox, seen through our mapping of its process's file.
pub struct PeerBox {
    base: *mut u8,
    cap: usize,
    max_sge: usize,
    /// The completion ring's head as last read (see `Mailbox::head_seen`).
    head_seen: AtomicU64,
    /// The owner issues asymmetric fences (`shm::heavy_fence`).
    owner_asym: bool,
}

// SAFETY: the region is only accessed through atomics and volatile copies
// of plain data; whoever holds a PeerBox keeps the peer's mapping (its
// `Peer`) alive.
unsafe impl Send for PeerBox {}
// SAFETY: as above.
unsafe impl Sync for PeerBox {}

/// A receive a peer's queue offers: take it with [`PeerBox::commit`].
pub struct Offered {
    head: u64,
    pub wr_id: u64,
    pub nsge: usize,
    pub sges: [ibv_sge; MAX_SGE as usize],
}

impl PeerBox {
    /// The mailbox at `off` in a peer's file mapped at `map`, if its
    /// header describes a region inside the file.
    pub(crate) fn at(map: &Mapping, off: u64) -> Option<PeerBox> {
        if !off.is_multiple_of(PAGE) || off == 0 || off >= FILE_LEN as u64 {
            return None;
        }
        // SAFETY: off is inside the mapping, page-aligned.
        let base = unsafe { map.base.add(off as usize) };
        // SAFETY: the header fits (a page at least).
        let h = unsafe { &*(base as *const Hdr) };
        let cap = h.cap.load(Ordering::Acquire) as usize;
        let max_sge = h.max_sge.load(Ordering::Relaxed) as usize;
        if cap == 0 || max_sge > MAX_SGE as usize || cap > 1 << 24 {
            return None;
        }
        if off as usize + region_len(cap, max_sge) > FILE_LEN {
            return None;
        }
        // SAFETY: the file's first page is its own (see `atomic_word`).
        let asym = unsafe { &*(map.base.add(FILE_ASYM) as *const AtomicU32) };
        Some(PeerBox {
            base,
            cap,
            max_sge,
            head_seen: AtomicU64::new(0),
            owner_asym: asym.load(Ordering::Acquire) != 0,
        })
    }

    fn hdr(&self) -> &Hdr {
        // SAFETY: checked in `at`.
        unsafe { &*(self.base as *const Hdr) }
    }

    /// The oldest posted receive, if the QP receives (`Err(true)`: it
    /// does not), one is posted and its completion will have room
    /// (`Err(false)`: not now).
    pub fn peek(&self) -> Result<Offered, bool> {
        self.ready()?;
        self.peek_recv()
    }

    /// Whether the QP receives (`Err(true)`: it does not) and its
    /// completion ring has room (`Err(false)`: not now).
    fn ready(&self) -> Result<(), bool> {
        let h = self.hdr();
        if h.rq_head.load(Ordering::Acquire) & CLOSED != 0 {
            return Err(true);
        }
        let room = (CQ_PER_RQ * self.cap) as u64;
        let tail = h.cq_tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head_seen.load(Ordering::Relaxed)) < room {
            return Ok(());
        }
        let head = h.cq_head.load(Ordering::Acquire);
        self.head_seen.store(head, Ordering::Relaxed);
        if tail.wrapping_sub(head) >= room {
            return Err(false);
        }
        Ok(())
    }

    /// The oldest receive of this mailbox's ring (`Err(true)`: the ring
    /// is closed; `Err(false)`: empty).
    fn peek_recv(&self) -> Result<Offered, bool> {
        let h = self.hdr();
        let head = h.rq_head.load(Ordering::Acquire);
        if head & CLOSED != 0 {
            return Err(true);
        }
        let p = recv_slot(self.base, self.cap, self.max_sge, head);
        if seq_word(p, RECV_SEQ).load(Ordering::Acquire) != seq_of(head) {
            return Err(false);
        }
        let mut o = Offered {
            head,
            wr_id: 0,
            nsge: 0,
            sges: [NO_SGE; MAX_SGE as usize],
        };
        (o.wr_id, o.nsge) = read_recv(p, self.max_sge, &mut o.sges);
        Ok(o)
    }

    /// Asks the owner to ring us when it posts a receive or drains; the
    /// caller peeks again afterwards (so one of the two sees the other).
    /// False when the ring may not come: an owner that leaves the fence to
    /// its peers, and we cannot issue it (then keep looking).
    pub fn set_rnr_waiting(&self) -> bool {
        self.hdr().rnr_waiting.store(1, Ordering::SeqCst);
        shm::heavy_fence();
        !self.owner_asym || shm::asym()
    }

    /// Takes the receive `peek` offered; false if something took it first
    /// (or the QP stopped receiving).
    pub fn commit(&self, o: &Offered) -> bool {
        self.hdr()
            .rq_head
            .compare_exchange(o.head, o.head + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Leaves a completion (with a small SEND's payload); true when the
    /// owner asked for the doorbell.
    pub fn deliver(&self, d: &Delivered, inline: Option<&Inline>) -> bool {
        let h = self.hdr();
        let t = h.cq_tail.load(Ordering::Relaxed);
        let p = cqe_slot(self.base, self.cap, self.max_sge, t);
        d.write(p, inline);
        seq_word(p, CQE_SEQ).store(seq_of(t), Ordering::Release);
        h.cq_tail.store(t + 1, Ordering::Release);
        // The owner's arming fences for both of us where it can.
        shm::light_fence(self.owner_asym);
        h.want_kick.load(Ordering::Relaxed) != 0
    }
}

/// Where a SEND to a peer QP lands: the receive ring it takes from (the
/// QP's own, or its shared receive queue's) and the QP's completion ring.
pub struct Target {
    pub own: PeerBox,
    pub srq: Option<PeerBox>,
}

impl Target {
    /// As [`PeerBox::peek`]: the QP's state and completion room come from
    /// its own mailbox, the receive from the SRQ's when it has one (an
    /// SRQ that stopped sharing its ring closed it: `Err(true)`).
    pub fn peek(&self) -> Result<Offered, bool> {
        match &self.srq {
            None => self.own.peek(),
            Some(s) => {
                self.own.ready()?;
                s.peek_recv()
            }
        }
    }

    /// As [`PeerBox::commit`], on the ring `peek` offered from.
    pub fn commit(&self, o: &Offered) -> bool {
        self.srq.as_ref().unwrap_or(&self.own).commit(o)
    }

    pub fn deliver(&self, d: &Delivered, inline: Option<&Inline>) -> bool {
        self.own.deliver(d, inline)
    }

    /// Also on the SRQ's mailbox, so the owner's post to the SRQ needs to
    /// look at its QPs only when someone waits.
    pub fn set_rnr_waiting(&self) -> bool {
        let own = self.own.set_rnr_waiting();
        match &self.srq {
            Some(s) => s.set_rnr_waiting() && own,
            None => own,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
        ibv_sge { addr, length, lkey }
    }

    #[test]
    fn rings_between_owner_and_peer() {
        let Some(m) = Mailbox::new(4, 2) else {
            return; // RSW_TRANSPORT=tcp
        };
        let f = FILE.get().as_ref().unwrap();
        let p = PeerBox::at(&f.map, m.offset()).expect("valid header");
        m.push(11, &[sge(0x1000, 8, 7)]);
        assert_eq!(p.peek().err(), Some(true), "closed: peers take nothing");
        m.set_open(true);
        let Ok(o) = p.peek() else { panic!("offered") };
        assert_eq!((o.wr_id, o.nsge, o.sges[0]), (11, 1, sge(0x1000, 8, 7)));
        assert!(p.commit(&o));
        assert!(!p.commit(&o), "taken once");
        assert!(m.is_empty());
        m.set_want_kick(true);
        let d = Delivered {
            wr_id: 11,
            byte_len: 8,
            ..Delivered::default()
        };
        assert!(p.deliver(&d, None), "owner asked for the doorbell");
        assert!(m.has_completions());
        let (got, inline) = m.pop_completion().unwrap();
        assert_eq!(got, d);
        assert!(inline.is_none());
        assert!(m.pop_completion().is_none());
        // A small SEND carries its bytes and its receive's SGE.
        let mut i = Inline {
            sge: sge(0x4000, 16, 9),
            len: 5,
            data: [0; INLINE_MAX],
        };
        i.data[..5].copy_from_slice(b"hello");
        let d = Delivered {
            wr_id: 12,
            byte_len: 5,
            flags: FLAG_INLINE,
            qp_num: 0xabcd,
            ..Delivered::default()
        };
        p.deliver(&d, Some(&i));
        let (got, inline) = m.pop_completion().unwrap();
        assert_eq!(got, d);
        let inline = inline.expect("inline payload");
        assert_eq!((inline.sge, inline.len), (sge(0x4000, 16, 9), 5));
        assert_eq!(&inline.data[..5], b"hello");
        // The owner and the peer race for one receive: one gets it.
        m.push(12, &[sge(0x2000, 4, 7), sge(0x3000, 4, 7)]);
        let Ok(o) = p.peek() else { panic!("offered") };
        let mut got = None;
        assert!(m.take(|id, s| got = Some((id, s.len()))));
        assert_eq!(got, Some((12, 2)));
        assert!(!p.commit(&o), "the owner took it");
        // Reset keeps the closed state and empties the queue.
        m.push(13, &[]);
        m.set_open(false);
        m.clear();
        assert!(m.is_empty());
        assert_eq!(p.peek().err(), Some(true));
        m.set_open(true);
        assert_eq!(p.peek().err(), Some(false), "open and empty: wait");
        m.set_open(false);
        m.push(14, &[]);
        assert_eq!(p.peek().err(), Some(true));
        assert!(m.take(|id, _| assert_eq!(id, 14)));
    }

    /// Each side checks room against its cached copy of the other's
    /// index: a full ring is seen as full, and room made by the other
    /// side is seen as soon as the cache says full.
    #[test]
    fn cached_indices_see_full_and_freed() {
        let Some(m) = Mailbox::new(2, 1) else {
            return; // RSW_TRANSPORT=tcp
        };
        let f = FILE.get().as_ref().unwrap();
        let p = PeerBox::at(&f.map, m.offset()).expect("valid header");
        m.set_open(true);
        assert_eq!(p.peek().err(), Some(false), "nothing posted");
        m.push(1, &[sge(0x1000, 8, 7)]);
        assert!(!m.is_full());
        m.push(2, &[sge(0x1000, 8, 7)]);
        assert!(m.is_full(), "two of two posted");
        let Ok(o) = p.peek() else { panic!("offered") };
        assert_eq!(o.wr_id, 1);
        assert!(p.commit(&o));
        assert!(!m.is_full(), "the peer took one: room again");
        m.push(3, &[sge(0x1000, 8, 7)]);
        assert!(m.is_full());
        // The completion ring holds CQ_PER_RQ * cap = 4; then the peer
        // waits, though receives are posted.
        for i in 0..4 {
            let d = Delivered {
                wr_id: 100 + i,
                ..Delivered::default()
            };
            p.deliver(&d, None);
        }
        assert_eq!(p.peek().err(), Some(false), "no room for a completion");
        assert_eq!(m.pop_completion().map(|(d, _)| d.wr_id), Some(100));
        let Ok(o) = p.peek() else {
            panic!("room again once the owner took one")
        };
        assert_eq!(o.wr_id, 2);
        for i in 101..104 {
            assert_eq!(m.pop_completion().map(|(d, _)| d.wr_id), Some(i));
        }
        assert!(m.pop_completion().is_none());
        assert!(!m.has_completions());
        // A slot written on an earlier lap is not taken for a new one.
        assert!(p.commit(&o));
        let Ok(o) = p.peek() else { panic!("receive 3") };
        assert_eq!(o.wr_id, 3);
        assert!(p.commit(&o));
        assert_eq!(p.peek().err(), Some(false), "all taken; old slots stay old");
    }
}
