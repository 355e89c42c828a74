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
