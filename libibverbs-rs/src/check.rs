//! The misuse checker's fork check (`RDMA_CHECK`, see `verbs_rt::check`):
//! `fork()` while memory is registered and `ibv_fork_init` was never
//! called (nor `RDMAV_FORK_SAFE`/`IBV_FORK_SAFE` set). Our providers do
//! not need it (fork.rs), but hardware on kernels without copy-on-fork for
//! pinned pages does: the parent's registered pages move under the
//! adapter. Only MRs registered through this library are counted, with
//! the checker on; the `pthread_atfork` handler is installed at the first
//! registration.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

use verbs_rt::check::{report, Obj};

static FORK_INIT: AtomicBool = AtomicBool::new(false);
static LIVE_MRS: AtomicUsize = AtomicUsize::new(0);

/// `ibv_fork_init` was called.
pub(crate) fn fork_init_called() {
    FORK_INIT.store(true, Ordering::Relaxed);
}

/// An MR was registered (the checker is on).
pub(crate) fn mr_registered() {
    static ATFORK: Once = Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function as the prepare handler.
        unsafe { libc::pthread_atfork(Some(before_fork), None, None) };
    });
    LIVE_MRS.fetch_add(1, Ordering::Relaxed);
}

/// An MR was deregistered (the checker is on).
pub(crate) fn mr_deregistered() {
    let _ = LIVE_MRS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

extern "C" fn before_fork() {
    let n = LIVE_MRS.load(Ordering::Relaxed);
    if n > 0 && !FORK_INIT.load(Ordering::Relaxed) {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as usize;
        report(
            "fork_unprotected",
            Obj::new("process", pid),
            &format!("fork() with {n} MR(s) registered and ibv_fork_init never called"),
            "ibv_fork_init(3): a program that forks while memory is registered must call ibv_fork_init (or set RDMAV_FORK_SAFE) before registering any; otherwise, on kernels without copy-on-fork for pinned pages, the parent's registered pages are copied away from the adapter at its next write and RDMA to them is silently lost",
        );
    }
}
