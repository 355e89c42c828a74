//! fork() support.
//!
//! An RDMA adapter keeps DMA-ing into the physical pages it pinned; after
//! fork() the parent's copy-on-write fault would move the parent to new
//! pages the adapter never sees. rdma-core therefore marks registered
//! memory MADV_DONTFORK once `ibv_fork_init` asked for it, counting
//! overlapping registrations per page range, unless the kernel copies
//! pinned pages at fork itself (copy-on-fork, Linux 5.13 and later, which
//! RDMA netlink reports): then the status is `IBV_FORK_UNNEEDED`.
//!
//! We do the same for kernel devices' memory. Our software providers need
//! none of it (every access goes through the owning process's page tables,
//! so a COW fault is harmless), so their registrations are never marked,
//! and a host without kernel RDMA reports `IBV_FORK_UNNEEDED`.

use core::ffi::{c_int, c_void};
use std::sync::LazyLock;

use parking_lot::Mutex;
use verbs_abi::{ibv_fork_status, IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED};
use verbs_rt::export;

/// `[start, end)` page ranges and how many registrations cover each.
type Counted = Vec<(usize, usize, u32)>;

/// Registered page ranges: sorted, disjoint `[start, end)` with how many
/// registrations cover each. None until `ibv_fork_init`.
static RANGES: Mutex<Option<Vec<(usize, usize, u32)>>> = Mutex::new(None);
/// A range was registered before `ibv_fork_init`: too late to protect it.
static TOO_LATE: Mutex<bool> = Mutex::new(false);

/// The kernel's copy-on-fork for pinned pages, or None without RDMA
/// netlink (no kernel RDMA: only our software devices exist).
static COPY_ON_FORK: LazyLock<Option<bool>> = LazyLock::new(crate::kernel::copy_on_fork);

/// Honours `RDMAV_FORK_SAFE` / `IBV_FORK_SAFE` like rdma-core.
pub(crate) fn init_from_env() {
    if std::env::var_os("RDMAV_FORK_SAFE").is_some() || std::env::var_os("IBV_FORK_SAFE").is_some()
    {
        ibv_fork_init();
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    export!(raw::int, (), {
        crate::check::fork_init_called();
        let mut r = RANGES.lock();
        if r.is_some() {
            return 0;
        }
        if *TOO_LATE.lock() {
            return libc::EINVAL;
        }
        *r = Some(Vec::new());
        0
    })
}

#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    export!(raw::value, (), {
        match *COPY_ON_FORK {
            None | Some(true) => IBV_FORK_UNNEEDED,
            Some(false) if RANGES.lock().is_some() => IBV_FORK_ENABLED,
            Some(false) => IBV_FORK_DISABLED,
        }
    })
}

/// How one registration changes the counts: the `[start, end)` pieces to
/// madvise (0 -> 1 for DONTFORK, 1 -> 0 for DOFORK) and the new ranges.
pub(crate) fn apply(
    ranges: &[(usize, usize, u32)],
    start: usize,
    end: usize,
    add: bool,
) -> (Vec<(usize, usize)>, Counted) {
    fn push(out: &mut Vec<(usize, usize, u32)>, s: usize, e: usize, c: u32) {
        if s < e && c != 0 {
            out.push((s, e, c));
        }
    }
    let mut out: Vec<(usize, usize, u32)> = Vec::new();
    let mut edges = Vec::new();
    let mut pos = start;
    for &(s, e, c) in ranges {
        if e <= start || s >= end {
            push(&mut out, s, e, c);
            continue;
        }
        // The part before the range keeps its count.
        push(&mut out, s, s.max(start).min(e), c);
        // A gap inside the range: count 0.
        if s > pos && add {
            edges.push((pos, s));
            push(&mut out, pos, s, 1);
        }
        let (is, ie) = (s.max(start), e.min(end));
        let nc = if add { c + 1 } else { c - 1 };
        if (add && c == 0) || (!add && c == 1) {
            edges.push((is, ie));
        }
        push(&mut out, is, ie, nc);
        push(&mut out, ie, e, c);
        pos = ie;
    }
    if pos < end && add {
        edges.push((pos, end));
        push(&mut out, pos, end, 1);
    }
    out.sort_unstable();
    // Neighbours with equal counts become one range.
    let mut merged: Vec<(usize, usize, u32)> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(l) if l.1 == r.0 && l.2 == r.2 => l.1 = r.1,
            _ => merged.push(r),
        }
    }
    edges.sort_unstable();
    (edges, merged)
}

fn madvise(pieces: &[(usize, usize)], advice: c_int) -> Result<(), (usize, c_int)> {
    for (i, &(s, e)) in pieces.iter().enumerate() {
        // SAFETY: page-aligned ranges of the caller's registered memory;
        // madvise changes only the fork behaviour of the mapping.
        if unsafe { libc::madvise(s as *mut c_void, e - s, advice) } != 0 {
            return Err((i, verbs_rt::errno::errno()));
        }
    }
    Ok(())
}

/// rdma-core's `ibv_madvise_range`: counted, rolled back on failure.
fn madvise_range(base: *mut c_void, size: usize, add: bool) -> c_int {
    if base.is_null() || size == 0 {
        return 0;
    }
    let mut guard = RANGES.lock();
    let Some(ranges) = guard.as_mut() else {
        *TOO_LATE.lock() = true;
        return 0;
    };
    let ps = page_size();
    let start = base as usize & !(ps - 1);
    let end = (base as usize).saturating_add(size).saturating_add(ps - 1) & !(ps - 1);
    let (pieces, next) = apply(ranges, start, end, add);
    let (advice, undo) = if add {
        (libc::MADV_DONTFORK, libc::MADV_DOFORK)
    } else {
        (libc::MADV_DOFORK, libc::MADV_DONTFORK)
    };
    if let Err((done, e)) = madvise(&pieces, advice) {
        let _ = madvise(&pieces[..done], undo);
        verbs_rt::errno::set_errno(e);
        return -1;
    }
    *ranges = next;
    0
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    export!(raw::int, (base, size), { madvise_range(base, size, true) })
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    export!(raw::int, (base, size), { madvise_range(base, size, false) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_registrations_are_counted() {
        let (e, r) = apply(&[], 0x1000, 0x4000, true);
        assert_eq!(e, vec![(0x1000, 0x4000)]);
        assert_eq!(r, vec![(0x1000, 0x4000, 1)]);
        // A second MR overlapping the end and reaching past it.
        let (e, r) = apply(&r, 0x3000, 0x6000, true);
        assert_eq!(e, vec![(0x4000, 0x6000)]);
        assert_eq!(
            r,
            vec![
                (0x1000, 0x3000, 1),
                (0x3000, 0x4000, 2),
                (0x4000, 0x6000, 1)
            ]
        );
        // Deregistering the first: only the pages nobody else holds fork again.
        let (e, r) = apply(&r, 0x1000, 0x4000, false);
        assert_eq!(e, vec![(0x1000, 0x3000)]);
        assert_eq!(r, vec![(0x3000, 0x6000, 1)]);
        let (e, r) = apply(&r, 0x3000, 0x6000, false);
        assert_eq!(e, vec![(0x3000, 0x6000)]);
        assert!(r.is_empty());
        // A range spanning a gap between two registrations.
        let (_, r) = apply(&[], 0x1000, 0x2000, true);
        let (_, r) = apply(&r, 0x5000, 0x6000, true);
        let (e, r) = apply(&r, 0x0000, 0x7000, true);
        assert_eq!(
            e,
            vec![(0x0000, 0x1000), (0x2000, 0x5000), (0x6000, 0x7000)]
        );
        assert_eq!(
            r,
            vec![
                (0x0000, 0x1000, 1),
                (0x1000, 0x2000, 2),
                (0x2000, 0x5000, 1),
                (0x5000, 0x6000, 2),
                (0x6000, 0x7000, 1)
            ]
        );
    }

    #[test]
    fn dontfork_really_marks_the_pages() {
        // Tracking on, one page marked: a forked child sees it unmapped.
        assert_eq!(ibv_fork_init(), 0);
        let ps = page_size();
        // SAFETY: an anonymous private mapping of one page, ours.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                ps,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(ibv_dontfork_range(p, 100), 0);
        assert_eq!(ibv_dontfork_range(p, ps), 0);
        // SAFETY: the child only reads /proc and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
            let here = maps.lines().any(|l| {
                let r = l.split(' ').next().unwrap_or("");
                let (a, b) = r.split_once('-').unwrap_or(("0", "0"));
                let a = usize::from_str_radix(a, 16).unwrap_or(0);
                let b = usize::from_str_radix(b, 16).unwrap_or(0);
                (a..b).contains(&(p as usize))
            });
            // SAFETY: leaving the forked child at once.
            unsafe { libc::_exit(if here { 1 } else { 0 }) };
        }
        let mut st = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "page inherited"
        );
        // Two registrations: one dofork keeps it marked, the second frees it.
        assert_eq!(ibv_dofork_range(p, ps), 0);
        assert_eq!(RANGES.lock().as_ref().map(Vec::len), Some(1));
        assert_eq!(ibv_dofork_range(p, 100), 0);
        assert_eq!(RANGES.lock().as_ref().map(Vec::len), Some(0));
        // SAFETY: ours.
        unsafe { libc::munmap(p, ps) };
    }
}
