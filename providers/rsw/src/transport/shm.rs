//! Shared memory between processes of one host, at the bottom of the
//! same-host path: a mapped memfd (a process's published table, a QP's
//! mailbox, the XRC registry) and the switch that turns the path on or off
//! (`RSW_TRANSPORT`). `local` and `mailbox` both build on it.

use std::sync::LazyLock;

/// A shared mapping of a whole file: writable (ours) or read-only (a
/// peer's).
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics; it lives until the
// Mapping is dropped.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn map(
        fd: std::os::fd::BorrowedFd,
        len: usize,
        writable: bool,
    ) -> std::io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of `len` bytes of the file;
        // nothing else is mapped there.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            base: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer referenced.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Tcp,
    Auto,
    /// Asked for: a same-host connection that cannot use it is reported.
    Required,
}

static MODE: LazyLock<Mode> = LazyLock::new(|| match std::env::var("RSW_TRANSPORT").as_deref() {
    Ok("tcp") => Mode::Tcp,
    Ok("local" | "shm") => Mode::Required,
    _ => Mode::Auto,
});

pub fn mode() -> Mode {
    *MODE
}

/// Off under fault injection: faults act where the connection's
/// responder runs, which the same-host path would bypass.
pub fn enabled() -> bool {
    mode() != Mode::Tcp && !crate::faults::active()
}

/// Logs why a same-host connection of QP `qpn` stays on TCP: a warning
/// when the path was asked for (`RSW_TRANSPORT=local`), else at info level.
pub fn fell_back(qpn: u32, why: &str) {
    if mode() == Mode::Required {
        log::warn!("qp {qpn:#x}: same-host path unavailable, using TCP: {why}");
    } else {
        log::info!("qp {qpn:#x}: same-host path unavailable, using TCP: {why}");
    }
}

// ---- asymmetric fences --------------------------------------------------------------
//
// Two handshakes on the same-host path are store-then-load on both sides
// (Dekker): a peer publishes a completion then reads whether the owner
// waits for a doorbell, the owner sets that flag then looks for
// completions; likewise an owner posting a receive against a peer that
// waits for one. A full fence on both sides costs the fast side (every
// delivery, every post) a drained store buffer with cache misses in it;
// with membarrier(2) the slow side (a CQ being armed, a peer giving up on
// a receive for now) pays for both, and the fast side needs only the
// compiler's ordering. Processes where membarrier is refused (seccomp, an
// old kernel) fence on both sides; each process says which in its mailbox
// file, so its peers know whether the other side will fence for them.

const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

static ASYM: verbs_rt::ForkFresh<bool> = verbs_rt::ForkFresh::new(|| {
    if std::env::var_os("RSW_NO_MEMBARRIER").is_some() {
        return false;
    }
    // SAFETY: membarrier takes no pointers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
            0,
            0,
        )
    };
    r == 0
});

/// Whether this process takes part in asymmetric fences: registered, so a
/// peer's [`heavy_fence`] orders our unfenced accesses, and able to issue
/// one itself.
pub fn asym() -> bool {
    *ASYM.get()
}

/// The slow side's fence: orders this thread's earlier stores before its
/// later loads against every registered process's threads (so those may
/// skip their fences), or a plain full fence where membarrier is refused.
pub fn heavy_fence() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    if asym() {
        // SAFETY: membarrier takes no pointers.
        let r =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) };
        // Registered, so it cannot fail short of a kernel bug; a peer
        // relying on it would miss a doorbell, so say so.
        if r != 0 {
            log::error!(
                "membarrier failed: {}; same-host doorbells may be late",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// The fast side's fence: a compiler barrier when the other side issues
/// [`heavy_fence`] for us (`other_asym`, and we are registered), else a
/// full fence.
pub fn light_fence(other_asym: bool) {
    if other_asym && asym() {
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    } else {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}
