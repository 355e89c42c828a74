//! Accesses to application memory that survive a fault.
//!
//! Registered memory belongs to the application, which may unmap it while
//! peers still write to it (hardware pins the pages; we cannot). The kernel
//! turns bad addresses in `recvmsg`/`sendmsg` into EFAULT; the accesses the
//! progress engine makes itself go through here and report a [`Fault`]
//! instead of killing the process. The mechanism is in `csrc/guard.c`: a
//! SIGSEGV/SIGBUS handler, installed with the first registration, that
//! jumps back into the guarded access and passes every other fault on to
//! the handler that was there before.

use std::os::raw::c_int;

extern "C" {
    fn rsw_guard_install();
    fn rsw_guard_copy(dst: *mut u8, src: *const u8, n: usize) -> c_int;
    fn rsw_guard_cas64(p: *mut u64, cmp: u64, swap: u64, orig: *mut u64) -> c_int;
    fn rsw_guard_fadd64(p: *mut u64, add: u64, orig: *mut u64) -> c_int;
    fn rsw_guard_touch(p: *const u8, n: usize) -> c_int;
}

/// The memory was not accessible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault;

/// Installs the fault handler (once per process; later calls do nothing).
pub fn install() {
    // SAFETY: idempotent C initialisation with no arguments.
    unsafe { rsw_guard_install() }
}

/// Copies `n` bytes from `src` to `dst`.
///
/// # Safety
/// `src` is valid for reads; `dst` is memory the application registered
/// for us to write (it may have been unmapped since: that is the fault
/// this reports), not overlapping `src`.
pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Fault> {
    // SAFETY: forwarded contract; a fault returns -1 instead of crashing.
    match unsafe { rsw_guard_copy(dst, src, n) } {
        0 => Ok(()),
        _ => Err(Fault),
    }
}

/// Whether `n` bytes at `p` are all mapped and readable (one byte of each
/// page is read).
///
/// # Safety
/// `p` is memory the application registered (it may have been unmapped
/// since: that is what this finds out).
pub unsafe fn readable(p: *const u8, n: usize) -> bool {
    // SAFETY: forwarded contract; a fault returns -1 instead of crashing.
    unsafe { rsw_guard_touch(p, n) == 0 }
}

/// Atomic compare-and-swap on 8 aligned bytes; returns the value seen.
///
/// # Safety
/// `p` is 8-aligned registered memory the peer may access atomically.
pub unsafe fn cas64(p: *mut u64, cmp: u64, swap: u64) -> Result<u64, Fault> {
    let mut orig = 0;
    // SAFETY: forwarded contract; `orig` is ours.
    match unsafe { rsw_guard_cas64(p, cmp, swap, &mut orig) } {
        0 => Ok(orig),
        _ => Err(Fault),
    }
}

/// Stores `v` at `p` atomically (a compare-and-swap loop: the guard's
/// primitives are CAS and fetch-add).
///
/// # Safety
/// As [`cas64`].
pub unsafe fn store64(p: *mut u64, v: u64) -> Result<(), Fault> {
    // SAFETY: forwarded contract.
    let mut cur = unsafe { cas64(p, 0, 0) }?;
    loop {
        // SAFETY: forwarded contract.
        let seen = unsafe { cas64(p, cur, v) }?;
        if seen == cur {
            return Ok(());
        }
        cur = seen;
    }
}

/// Atomic fetch-and-add on 8 aligned bytes; returns the value before.
///
/// # Safety
/// As [`cas64`].
pub unsafe fn fetch_add64(p: *mut u64, add: u64) -> Result<u64, Fault> {
    let mut orig = 0;
    // SAFETY: forwarded contract; `orig` is ours.
    match unsafe { rsw_guard_fadd64(p, add, &mut orig) } {
        0 => Ok(orig),
        _ => Err(Fault),
    }
}
