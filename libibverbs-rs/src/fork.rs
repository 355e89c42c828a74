//! fork() support.
//!
//! rdma-core marks registered memory MADV_DONTFORK because an RDMA adapter
//! keeps DMA-ing into the physical pages it pinned, and after fork() the
//! parent's copy-on-write fault would move the parent to new pages the
//! adapter never sees. Our providers are software: every access to
//! registered memory goes through the owning process's page tables, so a
//! COW fault after fork() is harmless and the child keeps a usable copy.
//! That is exactly what rdma-core reports as `IBV_FORK_UNNEEDED` (its state
//! on kernels with copy-on-fork for pinned pages), so these calls succeed
//! without doing anything and `ibv_is_fork_initialized` says so.

use core::ffi::{c_int, c_void};

use verbs_abi::{ibv_fork_status, IBV_FORK_UNNEEDED};

/// Honours `RDMAV_FORK_SAFE` / `IBV_FORK_SAFE` like rdma-core: they ask for
/// `ibv_fork_init`, which has nothing to set up here.
pub(crate) fn init_from_env() {
    if std::env::var_os("RDMAV_FORK_SAFE").is_some() || std::env::var_os("IBV_FORK_SAFE").is_some()
    {
        ibv_fork_init();
    }
}

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    verbs_abi::traced!(int, (), {
        crate::check::fork_init_called();
        0
    })
}

#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    verbs_abi::traced!(value, (), { IBV_FORK_UNNEEDED })
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    verbs_abi::traced!(int, (), { 0 })
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    verbs_abi::traced!(int, (), { 0 })
}
