//! Memory regions and the process-wide key table.
//!
//! The table maps a key (lkey == rkey) to the registered range. Every access
//! to registered memory by the data path (local gather/scatter, remote
//! READ/WRITE/atomic) looks the key up and does the memory access while
//! holding the table's read lock, so `dereg_mr` (which takes the write lock)
//! can never free the entry — or let the application free the memory —
//! under an access in flight.
//!
//! Keys come from a bijection of a counter (see `new_key`), so a stale key
//! never names a newer MR.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

use parking_lot::{RwLock, RwLockReadGuard};
use verbs_abi::*;
use verbs_rt::check::{report, Obj};

use crate::handles::{names, Ctx, UNKNOWN_BY_IOCTL, UNKNOWN_BY_WRITE};
use crate::pd::Pd;
use crate::transport::local::{self, KeyEntry};
use crate::util::set_errno;
use verbs_rt::ForkFresh;
use verbs_rt::Handles;

/// The MRs handed out and not deregistered.
pub static MRS: Handles<Ctx> = Handles::new();

/// Keys are hashed with one multiply: SipHash would be wasted work on the
/// data path.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | *b as u64;
        }
    }
    fn write_u32(&mut self, v: u32) {
        // One multiply spreads the key over all 64 bits: the table uses
        // the low ones for the bucket and the top 7 as a tag.
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Clone, Copy, Debug)]
pub struct MrEntry {
    /// Host address of the first byte.
    pub host: usize,
    pub len: u64,
    /// Address the first byte has in the key's address space (SGEs and
    /// remote addresses use it).
    pub iova: u64,
    pub access: u32,
    pub pd: u32,
}

impl MrEntry {
    /// What the same-host path publishes of it.
    fn published(&self) -> KeyEntry {
        KeyEntry {
            pd: self.pd,
            access: self.access,
            iova: self.iova,
            host: self.host as u64,
            len: self.len,
        }
    }

    /// Host pointer for `[addr, addr+len)` in the key's address space, if it
    /// lies inside the region.
    fn translate(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let off = addr.checked_sub(self.iova)?;
        if off > self.len || len > self.len - off {
            return None;
        }
        Some((self.host as u64 + off) as usize as *mut u8)
    }
}

/// Memory-window rkeys have the top bit set (`index << 8 | tag`, the index
/// in the upper half of the 24-bit range); MR keys never do.
pub const WINDOW_KEY: u32 = 0x8000_0000;

/// A memory window: a range of an MR, with its own rights, reachable by
/// its rkey while bound.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub pd: u32,
    pub mw_type: ibv_mw_type,
    /// The rkey's low 8 bits while bound; a stale tag is refused.
    pub tag: u8,
    pub binding: Option<Binding>,
}

#[derive(Clone, Copy, Debug)]
pub struct Binding {
    /// The MR it windows (the MR stays registered while bound).
    pub mr_key: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
    /// Type 2 windows are bound to one QP (type 2B): only it may use them.
    pub qpn: Option<u32>,
    /// Bound with `IBV_ACCESS_ZERO_BASED`: remote addresses are offsets
    /// from the window's start, not addresses in the MR.
    pub zero_based: bool,
}

#[derive(Default)]
pub struct MrTable {
    map: HashMap<u32, MrEntry, BuildHasherDefault<KeyHasher>>,
    /// Windows by index (rkey >> 8).
    windows: HashMap<u32, Window>,
    /// MR key -> windows bound to it (dereg refuses while any are).
    bound: HashMap<u32, u32>,
}

/// Why a key lookup failed; callers map it to a completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError;

impl MrTable {
    /// Checks a local SGE of PD `pd`; `write` when the provider will store
    /// into it (receive buffers, READ and atomic results).
    pub fn local(
        &self,
        lkey: u32,
        addr: u64,
        len: u64,
        pd: u32,
        write: bool,
    ) -> Result<*mut u8, AccessError> {
        if len == 0 {
            return Ok(std::ptr::null_mut());
        }
        let e = self.map.get(&lkey).ok_or(AccessError)?;
        if e.pd != pd || (write && e.access & IBV_ACCESS_LOCAL_WRITE == 0) {
            return Err(AccessError);
        }
        e.translate(addr, len).ok_or(AccessError)
    }

    /// The MR entry of a key, for the misuse checker.
    pub fn lookup(&self, key: u32) -> Option<MrEntry> {
        self.map.get(&key).copied()
    }

    /// Whether `rkey` names a live MR or a bound window of this process
    /// (`Some(true)`), a window of this process that was invalidated,
    /// unbound or rebound under another tag (`Some(false)`), or nothing
    /// this process knows (`None`): for the misuse checker.
    pub fn key_live(&self, rkey: u32) -> Option<bool> {
        if rkey & WINDOW_KEY != 0 {
            let w = self.windows.get(&(rkey >> 8))?;
            return Some(w.tag == rkey as u8 && w.binding.is_some());
        }
        self.map.contains_key(&rkey).then_some(true)
    }

    /// Checks a remote access of `len` bytes at `addr` needing the
    /// `IBV_ACCESS_REMOTE_*` bits in `need`, by QP `qpn` of PD `pd`; the
    /// rkey is an MR's or a bound window's.
    pub fn remote(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        pd: u32,
        need: u32,
        qpn: u32,
    ) -> Result<*mut u8, AccessError> {
        let r = self.remote_inner(rkey, addr, len, pd, need, qpn);
        if r.is_err() && verbs_rt::check::on() {
            crate::check::remote_key_refused(rkey, qpn, self.key_live(rkey));
        }
        r
    }

    #[inline(always)]
    fn remote_inner(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        pd: u32,
        need: u32,
        qpn: u32,
    ) -> Result<*mut u8, AccessError> {
        if len == 0 {
            return Ok(std::ptr::null_mut());
        }
        if rkey & WINDOW_KEY != 0 {
            let w = self.windows.get(&(rkey >> 8)).ok_or(AccessError)?;
            let b = w.binding.ok_or(AccessError)?;
            if w.tag != rkey as u8
                || w.pd != pd
                || b.access & need != need
                || b.qpn.is_some_and(|q| q != qpn)
            {
                return Err(AccessError);
            }
            let off = if b.zero_based {
                addr
            } else {
                addr.checked_sub(b.addr).ok_or(AccessError)?
            };
            if off > b.len || len > b.len - off {
                return Err(AccessError);
            }
            let e = self.map.get(&b.mr_key).ok_or(AccessError)?;
            // In the MR's address space: the bind checked b.addr + b.len.
            return e.translate(b.addr + off, len).ok_or(AccessError);
        }
        let e = self.map.get(&rkey).ok_or(AccessError)?;
        if e.pd != pd || e.access & need != need {
            return Err(AccessError);
        }
        e.translate(addr, len).ok_or(AccessError)
    }

    /// Host iovecs for bytes `[off, off + len)` of the message a local
    /// scatter/gather list describes, each piece checked as by
    /// [`MrTable::local`]; returns how many entries of `out` were filled.
    /// The pointers stay valid only while this table is locked.
    pub fn sge_iovs(
        &self,
        sges: &[ibv_sge],
        off: u64,
        len: usize,
        pd: u32,
        write: bool,
        out: &mut [libc::iovec],
    ) -> Result<usize, AccessError> {
        crate::util::sge_iovs(sges, off, len, out, |lkey, addr, l| {
            self.local(lkey, addr, l, pd, write).ok()
        })
        .map(|(n, _)| n)
        .ok_or(AccessError)
    }

    /// Copies bytes `[off, off + out.len())` of the message a local
    /// scatter/gather list describes into `out`, each piece checked as by
    /// [`MrTable::sge_iovs`]; a fault on the memory is an error too.
    pub fn gather(
        &self,
        sges: &[ibv_sge],
        off: u64,
        pd: u32,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let mut v = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; crate::transport::MAX_IOV];
        let n = self.sge_iovs(sges, off, out.len(), pd, false, &mut v)?;
        let mut at = 0;
        for piece in &v[..n] {
            // SAFETY: registered memory checked under this table's lock
            // (held by `&self`); the pieces cover no more than `out`; a
            // fault is caught.
            unsafe {
                crate::guard::copy(
                    out.as_mut_ptr().add(at),
                    piece.iov_base as *const u8,
                    piece.iov_len,
                )
            }
            .map_err(|_| AccessError)?;
            at += piece.iov_len;
        }
        Ok(())
    }

    /// Copies `bytes` into the message a local scatter/gather list
    /// describes, from its byte `off` on, the memory checked as locally
    /// writable; a fault is an error too.
    pub fn scatter(
        &self,
        sges: &[ibv_sge],
        off: u64,
        pd: u32,
        bytes: &[u8],
    ) -> Result<(), AccessError> {
        let mut v = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; crate::transport::MAX_IOV];
        let n = self.sge_iovs(sges, off, bytes.len(), pd, true, &mut v)?;
        let mut at = 0;
        for piece in &v[..n] {
            // SAFETY: registered, locally writable memory checked under
            // this table's lock (held by `&self`); the pieces cover no more
            // than `bytes`; a fault is caught.
            unsafe {
                crate::guard::copy(
                    piece.iov_base as *mut u8,
                    bytes.as_ptr().add(at),
                    piece.iov_len,
                )
            }
            .map_err(|_| AccessError)?;
            at += piece.iov_len;
        }
        Ok(())
    }
}

static TABLE: ForkFresh<RwLock<MrTable>> = ForkFresh::new(|| RwLock::new(MrTable::default()));
static COUNTER: AtomicU32 = AtomicU32::new(1);
static SEED: LazyLock<u32> = LazyLock::new(|| {
    let t = crate::util::wall_ns();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    ((t ^ (t >> 32) ^ (pid << 16)) as u32) | 1
});

/// Read access to the key table for the data path. Never take it twice on
/// one thread: the lock is fair to writers, so a second read behind a
/// waiting `dereg_mr` deadlocks. Drop the guard before anything that may
/// complete work or change QP state.
pub fn table() -> RwLockReadGuard<'static, MrTable> {
    TABLE.get().read()
}

/// A new MR key: never a window's (top bit clear), not in use, unique for
/// 2^31 registrations (a stale key never names a newer MR). The low 20
/// bits count up: they are the key's slot in the table the same-host path
/// publishes (`transport::local`), so live keys fill few pages of it; the
/// 11 bits above carry the count's high part under a per-process mask.
fn new_key(t: &MrTable) -> u32 {
    loop {
        let c = COUNTER.fetch_add(1, Ordering::Relaxed);
        let k = ((((c >> 20) ^ *SEED) & 0x7ff) << 20) | (c & 0xf_ffff);
        if k != 0 && !t.map.contains_key(&k) {
            return k;
        }
    }
}

#[repr(C)]
pub struct Mr {
    pub ibv: ibv_mr,
    /// Its key (also its handle) and PD, as we know them: the public
    /// struct's are the application's to overwrite, and must not pick
    /// which registration goes.
    key: u32,
    pd: *mut ibv_pd,
}

impl Mr {
    /// Whether its public struct still names it (`handles::names`); `ctx`
    /// is the context it was made in.
    fn names_itself(&self, ctx: *mut ibv_context) -> bool {
        // SAFETY: the public struct is ours, live while self is.
        unsafe {
            names(
                &raw const self.ibv.context,
                &raw const self.ibv.handle,
                ctx,
                self.key,
            )
        }
    }
}

pub const KNOWN_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_HUGETLB;

pub fn check_access(access: u32) -> Result<(), c_int> {
    // On-demand paging is what a userspace provider does anyway: it never
    // pins, and reaches memory through the kernel's copies, which fault
    // pages in.
    let access = access & !(IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_ON_DEMAND);
    if access & !KNOWN_ACCESS != 0 {
        return Err(libc::EINVAL);
    }
    // InfiniBand requires local write permission for remote write/atomic.
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && access & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// A range the data path can address: `translate` adds offsets to the host
/// address, which must not wrap. Length 0 is refused, as the kernel
/// refuses it (only on-demand paging, which we lack, registers nothing).
fn check_range(addr: *mut c_void, length: usize) -> Result<(), c_int> {
    if length == 0 || length as u64 > 1 << 47 || (addr as u64).checked_add(length as u64).is_none()
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// What the kernel's pinning checks: every page of the range is mapped
/// readable, and writable when we may store into it (local write, which
/// remote write and atomics imply). EFAULT otherwise.
fn check_mapped(addr: usize, length: usize, write: bool) -> Result<(), c_int> {
    // Without /proc (an unusual sandbox) there is nothing to check against;
    // the guarded accesses still keep a bad range from crashing anything.
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Ok(());
    };
    mapped_in(&maps, addr, addr + length, write)
}

/// [`check_mapped`] over the text of a maps file (sorted by address).
fn mapped_in(maps: &str, start: usize, end: usize, write: bool) -> Result<(), c_int> {
    let mut at = start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= at {
            continue;
        }
        let p = perms.as_bytes();
        if lo > at || p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(libc::EFAULT);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

/// The user address space an implicit ODP MR covers (x86-64, 47 bits).
const USER_SPACE: u64 = 1 << 47;

/// `ibv_advise_mr`: the ranges must be ODP-able memory of registered keys
/// of `pd`. Prefetching is a hint; the kernel faults pages in when a copy
/// touches them, so there is nothing to do ahead.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // mlx5 sends it as an ioctl naming the PD.
    let p = match Pd::checked(pd, None, UNKNOWN_BY_IOCTL) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if !matches!(
        advice,
        IBV_ADVISE_MR_ADVICE_PREFETCH
            | IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
            | IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT
    ) || flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0
        || num_sge == 0
        || sg_list.is_null()
    {
        return libc::EINVAL;
    }
    let pd_id = p.id;
    // SAFETY: sg_list holds num_sge entries.
    let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    let write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
    let t = table();
    for s in sges {
        if t.local(s.lkey, s.addr, s.length as u64, pd_id, write)
            .is_err()
        {
            return libc::EINVAL;
        }
    }
    0
}

/// Whether the provider will store into memory registered with `access`.
fn writes_into(access: u32) -> bool {
    access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
}

pub(crate) unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    if let Err(e) = check_access(access) {
        log::error!(
            "reg_mr {addr:p}+{length:#x}: access flags {access:#x} refused (EINVAL): unknown flags, or remote write/atomic without local write"
        );
        set_errno(e);
        return std::ptr::null_mut();
    }
    let odp = access & IBV_ACCESS_ON_DEMAND != 0;
    // Implicit ODP: one MR for the whole address space.
    let implicit = odp && addr.is_null() && length == usize::MAX;
    // An ODP range need not be mapped yet (that is its point); a plain
    // one is checked as the kernel's pinning would.
    let checked = if implicit {
        Ok(())
    } else if odp {
        check_range(addr, length)
    } else {
        check_range(addr, length)
            .and_then(|()| check_mapped(addr as usize, length, writes_into(access)))
    };
    if let Err(e) = checked {
        if e == libc::EFAULT {
            log::error!(
                "reg_mr {addr:p}+{length:#x}: memory not mapped{} (EFAULT)",
                if writes_into(access) {
                    " writable"
                } else {
                    " readable"
                }
            );
        } else {
            log::error!(
                "reg_mr {addr:p}+{length:#x}: bad range (EINVAL): empty, over 2^47 bytes or wrapping"
            );
        }
        set_errno(e);
        return std::ptr::null_mut();
    }
    let p = match Pd::checked(pd, None, UNKNOWN_BY_WRITE) {
        Ok(p) => p,
        Err(e) => {
            log::error!(
                "reg_mr {addr:p}+{length:#x}: pd {pd:p} is not a PD of ours, or its context or handle was overwritten (errno {e})"
            );
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    if let Err(e) = crate::util::limit(
        "mr",
        crate::device::MAX_MR,
        MRS.room_for_one(crate::device::MAX_MR),
    ) {
        set_errno(e);
        return std::ptr::null_mut();
    }
    crate::guard::install();
    let entry = if implicit {
        MrEntry {
            host: 0,
            len: USER_SPACE,
            iova: 0,
            access: access & KNOWN_ACCESS,
            pd: p.id,
        }
    } else {
        MrEntry {
            host: addr as usize,
            len: length as u64,
            iova: key_base(access, iova),
            access: access & KNOWN_ACCESS,
            pd: p.id,
        }
    };
    insert(p, pd, entry, addr, length)
}

/// The address the first byte of a registration has for its keys: 0 for a
/// zero-based one (`IBV_ACCESS_ZERO_BASED`: local SGEs and remote requests
/// address it by offset, as device memory is), else the `iova` asked for
/// (`ibv_reg_mr` asks for the buffer's own address).
fn key_base(access: u32, iova: u64) -> u64 {
    if access & IBV_ACCESS_ZERO_BASED != 0 {
        0
    } else {
        iova
    }
}

/// Enters a checked registration in the key table and hands out its MR
/// (`addr`/`length` are what the application sees in it).
pub fn insert(
    p: &Pd,
    pd: *mut ibv_pd,
    entry: MrEntry,
    addr: *mut c_void,
    length: usize,
) -> *mut ibv_mr {
    let key = {
        let mut t = TABLE.get().write();
        let key = new_key(&t);
        t.map.insert(key, entry);
        local::publish_key(key, &entry.published());
        key
    };
    p.users.fetch_add(1, Ordering::AcqRel);
    let mr = Box::new(Mr {
        ibv: ibv_mr {
            context: p.ibv.context,
            pd,
            addr,
            length,
            handle: key,
            lkey: key,
            rkey: key,
        },
        key,
        pd,
    });
    let mr = Box::into_raw(mr) as *mut ibv_mr;
    MRS.insert(mr, Ctx(p.ibv.context));
    mr
}

/// Whether some registration lies in host range `[start, start+len)`.
pub fn any_in(start: usize, len: usize) -> bool {
    let end = start + len;
    table()
        .map
        .values()
        .any(|e| e.host >= start && e.host < end)
}

pub(crate) unsafe extern "C" fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    let r = unsafe { rereg(mr, flags, pd, addr, length, access) };
    if r != 0 {
        log::error!("rereg_mr {mr:p}: flags {flags:#x} access {access:#x} refused (errno {r})");
    }
    r
}

/// `ibv_rereg_mr`'s work.
///
/// # Safety
/// As the verb: `mr` is validated, `pd` checked against our PDs.
unsafe fn rereg(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let flags = flags as u32;
    if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 || flags == 0 {
        return libc::EINVAL;
    }
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        if let Err(e) = check_access(access as u32) {
            return e;
        }
    }
    // The kernel looks the MR up first (ENOENT: it takes it for writing),
    // then the new PD (EINVAL), which must be of the MR's context.
    let Some(Ctx(ctx)) = MRS.get(mr) else {
        return libc::EINVAL;
    };
    // SAFETY: mr came from reg_mr and is not deregistered (checked above;
    // racing a dereg_mr of the same MR is the application's bug, as with
    // any verb on an object being destroyed).
    let m = unsafe { &mut *(mr as *mut Mr) };
    if !m.names_itself(ctx) {
        return UNKNOWN_BY_IOCTL;
    }
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        if let Err(e) = Pd::checked(pd, Some(ctx), UNKNOWN_BY_WRITE) {
            return e;
        }
    }
    let mut t = TABLE.get().write();
    let Some(e) = t.map.get_mut(&m.key) else {
        return libc::EINVAL;
    };
    if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
        let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            access as u32
        } else {
            e.access
        };
        if let Err(err) = check_range(addr, length)
            .and_then(|()| check_mapped(addr as usize, length, writes_into(new_access)))
        {
            log::error!(
                "rereg_mr mr {mr:p} to {addr:p}+{length:#x}: {}",
                if err == libc::EFAULT {
                    "memory not mapped (EFAULT)"
                } else {
                    "bad range (EINVAL)"
                }
            );
            return err;
        }
    }
    if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
        e.host = addr as usize;
        e.len = length as u64;
        m.ibv.addr = addr;
        m.ibv.length = length;
    }
    let was_zero_based = e.access & IBV_ACCESS_ZERO_BASED != 0;
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        e.access = access as u32 & KNOWN_ACCESS;
    }
    let zero_based = e.access & IBV_ACCESS_ZERO_BASED != 0;
    if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 || zero_based != was_zero_based {
        // rdma-core's ibv_rereg_mr gives a new range its own address as
        // iova; zero-based access (new or kept) addresses it from 0.
        e.iova = key_base(e.access, m.ibv.addr as u64);
    }
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        // SAFETY: both PDs come from alloc_pd.
        let (old, new) = unsafe { (Pd::from_ibv(m.pd), Pd::from_ibv(pd)) };
        e.pd = new.id;
        new.users.fetch_add(1, Ordering::AcqRel);
        old.users.fetch_sub(1, Ordering::AcqRel);
        m.ibv.pd = pd;
        m.pd = pd;
    }
    local::publish_key(m.key, &e.published());
    0
}

pub(crate) unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    if verbs_rt::check::on() && MRS.contains(mr) {
        // SAFETY: a live MR of ours (checked above).
        crate::check::mr_destroy(mr, unsafe { (*mr).lkey });
    }
    // Removing it first makes a second or racing dereg fail; an MR that
    // windows are bound to stays (the kernel's EBUSY).
    let taken = MRS.remove_if(mr, |&Ctx(ctx)| {
        // SAFETY: mr is a live MR of ours (in the table, locked).
        let m = unsafe { &*(mr as *const Mr) };
        if !m.names_itself(ctx) {
            return Err(UNKNOWN_BY_IOCTL);
        }
        if TABLE.get().read().bound.get(&m.key).is_some_and(|&n| n > 0) {
            Err(libc::EBUSY)
        } else {
            Ok(())
        }
    });
    if let Err(e) = taken {
        return e;
    }
    // SAFETY: mr came from reg_mr and was live until just now; only this
    // call reclaims it.
    let m = unsafe { Box::from_raw(mr as *mut Mr) };
    // Waits for every data-path access under the read lock to finish.
    {
        let mut t = TABLE.get().write();
        local::withdraw_key(m.key);
        t.map.remove(&m.key);
    }
    if verbs_rt::check::on() {
        crate::check::key_dead(m.key);
        verbs_rt::check::forget(mr as usize);
    }
    // SAFETY: the MR's PD outlives it (dealloc_pd refuses while users > 0).
    unsafe { Pd::from_ibv(m.pd) }
        .users
        .fetch_sub(1, Ordering::AcqRel);
    0
}

// ---- the misuse checker's key checks (`RDMA_CHECK`) ------------------------

/// Checks one local SGE against the key table: unknown or deregistered
/// lkey, another PD, a range outside the MR. Returns the host address of
/// a good one.
pub(crate) fn check_sge(obj: Obj, pd: u32, s: &ibv_sge, verb: &str) -> Option<usize> {
    if s.length == 0 {
        return None;
    }
    let e = table().lookup(s.lkey);
    let spec = "ibv_post_send(3)/ibv_post_recv(3): every SGE's lkey must be the lkey of an MR registered in the QP's PD, and [addr, addr+length) must lie inside that MR; otherwise the WR completes with IBV_WC_LOC_PROT_ERR (IB spec 10.6.3.1, C10-11)";
    let Some(e) = e else {
        let dead = crate::check::is_dead(s.lkey);
        let (kind, what) = if dead {
            ("lkey_deregistered", "names an MR this process deregistered")
        } else {
            ("lkey_unknown", "is not the lkey of any registered MR")
        };
        report(
            kind,
            obj,
            &format!(
                "{verb}: SGE addr={:#x} length={} lkey={:#x} {what}",
                s.addr, s.length, s.lkey
            ),
            spec,
        );
        return None;
    };
    if e.pd != pd {
        report(
            "lkey_other_pd",
            obj,
            &format!(
                "{verb}: SGE lkey={:#x} belongs to an MR of another PD (pd id {} vs the QP's {pd})",
                s.lkey, e.pd
            ),
            spec,
        );
        return None;
    }
    let end = s.addr.checked_add(s.length as u64);
    if s.addr < e.iova || end.is_none_or(|x| x > e.iova + e.len) {
        report(
            "sge_out_of_mr",
            obj,
            &format!(
                "{verb}: SGE [{:#x}, +{}) leaves its MR [{:#x}, +{}) (lkey={:#x})",
                s.addr, s.length, e.iova, e.len, s.lkey
            ),
            spec,
        );
        return None;
    }
    Some(e.host + (s.addr - e.iova) as usize)
}

/// Checks an rkey a WR names: one this process deregistered or invalidated.
pub(crate) fn check_rkey(obj: Obj, rkey: u32) {
    let live = table().key_live(rkey);
    let dead = live == Some(false) || (live.is_none() && crate::check::is_dead(rkey));
    if dead {
        report(
            "rkey_invalidated",
            obj,
            &format!("a WR names rkey {rkey:#x}, which this process deregistered, invalidated or bound again (or never bound)"),
            "ibv_dereg_mr(3)/ibv_dealloc_mw(3)/IBV_WR_LOCAL_INV: once an MR is deregistered or a window invalidated, its rkey is invalid; a remote access with it completes with IBV_WC_REM_ACCESS_ERR and moves both QPs to error (IB spec 10.6.7)",
        );
    }
}

// ---- memory windows -------------------------------------------------------

/// Why a bind failed: the completion status it gives.
pub struct BindError;

static NEXT_WINDOW: AtomicU32 = AtomicU32::new(0);

/// Enters a new, unbound window of PD `pd`; returns its first rkey.
pub fn new_window(pd: u32, mw_type: ibv_mw_type) -> u32 {
    let mut t = TABLE.get().write();
    loop {
        // Indices 0x800000..=0xffffff: the top bit of the rkey set.
        let index = 0x80_0000 | (NEXT_WINDOW.fetch_add(1, Ordering::Relaxed) & 0x7f_ffff);
        if t.windows.contains_key(&index) {
            continue;
        }
        t.windows.insert(
            index,
            Window {
                pd,
                mw_type,
                tag: 0,
                binding: None,
            },
        );
        return index << 8;
    }
}

fn unbind(t: &mut MrTable, w: &mut Window) {
    if let Some(b) = w.binding.take() {
        if let Some(n) = t.bound.get_mut(&b.mr_key) {
            *n -= 1;
            if *n == 0 {
                t.bound.remove(&b.mr_key);
            }
        }
    }
}

/// Forgets a window (`ibv_dealloc_mw`); false if there is none.
pub fn drop_window(rkey: u32) -> bool {
    if verbs_rt::check::on() {
        crate::check::key_dead(rkey);
    }
    let mut t = TABLE.get().write();
    match t.windows.remove(&(rkey >> 8)) {
        Some(mut w) => {
            unbind(&mut t, &mut w);
            true
        }
        None => false,
    }
}

/// Binds the window `old_rkey` names to `[addr, addr+len)` of the MR with
/// key `mr_key` under the new rkey `new_rkey`: the window's own index in
/// the upper 24 bits, the key the bind asked for in the low 8 (callers
/// build it with [`bind_key`]). A zero length unbinds a type 1 window; a
/// type 2 window cannot be bound empty. Checks what the spec requires: the
/// MR allows binding and is in the window's PD (and the QP's, `qp_pd`),
/// the range lies inside it, remote write needs local write on the MR, a
/// type 2 window is not bound already. `IBV_ACCESS_ZERO_BASED` in `access`
/// makes remote addresses offsets from the window's start.
#[allow(clippy::too_many_arguments)]
pub fn bind_window(
    old_rkey: u32,
    new_rkey: u32,
    mr_key: u32,
    addr: u64,
    len: u64,
    access: u32,
    qp_pd: u32,
    qpn: u32,
) -> Result<(), BindError> {
    let mut t = TABLE.get().write();
    let index = old_rkey >> 8;
    let mut w = *t.windows.get(&index).ok_or(BindError)?;
    if new_rkey >> 8 != index || w.pd != qp_pd {
        return Err(BindError);
    }
    if w.mw_type == IBV_MW_TYPE_2 && (w.binding.is_some() || len == 0) {
        return Err(BindError);
    }
    unbind(&mut t, &mut w);
    if len > 0 {
        let e = t.map.get(&mr_key).ok_or(BindError)?;
        if e.pd != w.pd
            || e.access & IBV_ACCESS_MW_BIND == 0
            || e.translate(addr, len).is_none()
            || (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
                && e.access & IBV_ACCESS_LOCAL_WRITE == 0)
        {
            t.windows.insert(index, w);
            return Err(BindError);
        }
        w.binding = Some(Binding {
            mr_key,
            addr,
            len,
            access: access
                & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC),
            qpn: (w.mw_type == IBV_MW_TYPE_2).then_some(qpn),
            zero_based: access & IBV_ACCESS_ZERO_BASED != 0,
        });
        *t.bound.entry(mr_key).or_insert(0) += 1;
    }
    w.tag = new_rkey as u8;
    t.windows.insert(index, w);
    Ok(())
}

/// The rkey a bind gives the window whose rkey is `mw_rkey` when the
/// application asks for `asked`: only the low 8 bits of what it asks for
/// count (the key it owns), the upper 24 are the window's, as rxe, irdma
/// and mlx5 build it. Applications pass anything there: a counter, a
/// constant, `ibv_inc_rkey(mw->rkey)`.
pub fn bind_key(mw_rkey: u32, asked: u32) -> u32 {
    (mw_rkey & !0xff) | (asked & 0xff)
}

/// Why a window could not be invalidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidateError {
    /// The key names no valid (bound, current) type 2 window of the PD.
    NotValid,
    /// The window is bound to another QP (type 2B): only that QP may
    /// invalidate it.
    OtherQp,
}

/// Invalidates the type 2 window `rkey` names (a local invalidate, or a
/// SEND_WITH_INV arriving) on QP `qpn` of PD `pd`.
pub fn invalidate_window(rkey: u32, pd: u32, qpn: u32) -> Result<(), InvalidateError> {
    if rkey & WINDOW_KEY == 0 {
        return Err(InvalidateError::NotValid);
    }
    let mut t = TABLE.get().write();
    let Some(mut w) = t.windows.get(&(rkey >> 8)).copied() else {
        return Err(InvalidateError::NotValid);
    };
    if w.pd != pd || w.tag != rkey as u8 || w.mw_type != IBV_MW_TYPE_2 {
        return Err(InvalidateError::NotValid);
    }
    match w.binding {
        None => return Err(InvalidateError::NotValid),
        Some(b) if b.qpn.is_some_and(|q| q != qpn) => return Err(InvalidateError::OtherQp),
        Some(_) => {}
    }
    unbind(&mut t, &mut w);
    t.windows.insert(rkey >> 8, w);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_nonzero() {
        let mut seen = std::collections::HashSet::new();
        let t = MrTable::default();
        for _ in 0..10000 {
            let k = new_key(&t);
            assert_ne!(k, 0);
            assert_eq!(k & WINDOW_KEY, 0);
            assert!(seen.insert(k));
        }
    }

    #[test]
    fn translate_bounds() {
        let e = MrEntry {
            host: 0x1000,
            len: 100,
            iova: 0x5000,
            access: 0,
            pd: 1,
        };
        assert_eq!(e.translate(0x5000, 100), Some(0x1000 as *mut u8));
        assert_eq!(e.translate(0x5010, 10), Some(0x1010 as *mut u8));
        assert_eq!(e.translate(0x5000, 101), None);
        assert_eq!(e.translate(0x4fff, 1), None);
        assert_eq!(e.translate(0x5064, 1), None);
        assert_eq!(e.translate(u64::MAX, 2), None);
    }

    #[test]
    fn mapped_ranges() {
        let maps = "1000-3000 rw-p 0 0:0 0\n3000-4000 r--p 0 0:0 0 /lib\n\
                    5000-6000 ---p 0 0:0 0\n6000-7000 rw-p 0 0:0 0 [heap]\n";
        assert_eq!(mapped_in(maps, 0x1000, 0x3000, true), Ok(()));
        assert_eq!(mapped_in(maps, 0x2fff, 0x3001, false), Ok(()));
        assert_eq!(mapped_in(maps, 0x2fff, 0x3001, true), Err(libc::EFAULT));
        assert_eq!(mapped_in(maps, 0x3000, 0x4001, false), Err(libc::EFAULT));
        assert_eq!(mapped_in(maps, 0x5000, 0x5001, false), Err(libc::EFAULT));
        assert_eq!(mapped_in(maps, 0x6000, 0x7000, true), Ok(()));
        assert_eq!(mapped_in(maps, 0x0, 0x10, false), Err(libc::EFAULT));
        assert_eq!(mapped_in(maps, 0x7000, 0x7001, false), Err(libc::EFAULT));
    }

    #[test]
    fn access_rules() {
        assert_eq!(check_access(IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        assert_eq!(check_access(IBV_ACCESS_REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(check_access(IBV_ACCESS_REMOTE_READ), Ok(()));
        assert_eq!(
            check_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            Ok(())
        );
        assert_eq!(check_access(IBV_ACCESS_RELAXED_ORDERING), Ok(()));
        assert_eq!(check_access(1 << 15), Err(libc::EINVAL));
    }
}
