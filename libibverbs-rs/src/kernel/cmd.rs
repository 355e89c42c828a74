//! rdma-core's `ibv_cmd_*` helpers: the uverbs commands its providers
//! issue on a kernel device's command file, with the object bookkeeping
//! rdma-core 44 does around each.
//!
//! A provider passes its own request and response buffers: the legacy
//! request is `ib_uverbs_cmd_hdr`, the kernel's payload, then the
//! provider's part; the extended one has `ib_uverbs_ex_cmd_hdr` after the
//! header. We fill the kernel's payload in place and send the whole
//! buffer, so the provider's part reaches its kernel driver untouched and
//! the kernel writes the driver's answer after the core response, where
//! the provider's struct has it. Every command goes through `write()`,
//! which the kernel accepts for all of them; the ioctl interface is used
//! where only it carries the data (port capability flags 2, GID entries,
//! the provider's own ioctl methods through `execute_ioctl`).

//!
//! This module holds what every `cmd_*` module of the object commands
//! (`cmd_device`, `cmd_pd`, `cmd_cq`, `cmd_qp`, `cmd_srq`, `cmd_ah`) shares.

use core::ffi::c_void;

use super::cmd_issue::{EX_HDRS, HDR};

pub(super) type Ptr = *mut c_void;

/// The kernel payload of a provider's legacy request.
///
/// # Safety
/// `cmd` holds a header and a `T` at least.
pub(super) unsafe fn payload<'a, T>(cmd: Ptr) -> &'a mut T {
    // SAFETY: per the contract (providers' structs are 8-byte aligned).
    unsafe { &mut *cmd.cast::<u8>().add(HDR).cast::<T>() }
}

/// The kernel payload of a provider's extended request.
///
/// # Safety
/// `cmd` holds both headers and a `T` at least.
pub(super) unsafe fn ex_payload<'a, T>(cmd: Ptr) -> &'a mut T {
    // SAFETY: per the contract.
    unsafe { &mut *cmd.cast::<u8>().add(EX_HDRS).cast::<T>() }
}

/// Waits until `completed` reaches what the kernel reported, under the
/// object's own lock (events still unacknowledged hold the destroy).
///
/// # Safety
/// The three pointers belong to one live object.
pub(super) unsafe fn wait_events(
    m: *mut libc::pthread_mutex_t,
    c: *mut libc::pthread_cond_t,
    done: impl Fn() -> bool,
) {
    // SAFETY: per the contract.
    unsafe {
        libc::pthread_mutex_lock(m);
        while !done() {
            libc::pthread_cond_wait(c, m);
        }
        libc::pthread_mutex_unlock(m);
    }
}
